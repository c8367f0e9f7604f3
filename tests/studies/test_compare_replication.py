"""studies/compare_replication.py: the pre-registered replication on synthetic units, against scipy's one-sample t test
and pass@8 from math.comb: interim without a p-value, the test once every seed is in, the verdict rule, failures,
missing seeds, ceiling seeds, the reproduction check and the exploratory pooled analysis; and the CLI."""

import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "studies"))

import compare_replication  # noqa: E402
from helpers import bounded  # noqa: E402

scipy_stats = pytest.importorskip("scipy.stats", reason="scipy (the dev extra) is the independent oracle")
N, P = 16, 12


def _unit(unit, correct, commit="abc123"):
    arm, _, seed = unit.partition("-s")
    return {"schema": 1, "unit": unit, "arm": arm, "seed": int(seed), "num_samples": N, "commit": commit,
            "config": {"max_steps": 8}, "train_overrides": [], "train_log": [{"step": 1, "reward": 0.5}],
            "wall_s": 1.0, "eval": {"problem_ids": [f"p{i}" for i in range(P)], "correct": correct,
                                    "scored": [N] * P}}  # fmt: skip


def _pass8(correct):
    return sum(1 - math.comb(N - c, 8) / math.comb(N, 8) for c in correct) / len(correct)


def _write(folder: Path, seeds, gen, shift=0, skip=()) -> dict:
    """rloo and max8 units at `seeds`; max8 draws more correct answers on hard problems (by `shift`)."""
    folder.mkdir(parents=True, exist_ok=True)
    counts = {}
    for s in seeds:
        for arm in ("rloo", "max8"):
            unit = f"{arm}-s{s}"
            if unit in skip:
                continue
            c = torch.randint(0, 9, (P,), generator=gen) + (shift if arm == "max8" else 0)
            counts[unit] = c.clamp(0, N).tolist()
            (folder / f"{unit}.json").write_text(json.dumps(_unit(unit, counts[unit])))
    return counts


def test_interim_reports_no_p_value(tmp_path):
    gen = torch.Generator().manual_seed(0)
    assets = tmp_path / "compare_objectives_replication"
    counts = _write(assets, [10, 11, 12, 13], gen, skip=("max8-s13",))
    report = compare_replication.summarize_replication(assets)
    assert not report["complete"] and "test" not in report and "pooled" not in report
    assert report["units"]["present"] == 7 and len(report["units"]["missing"]) == 23
    d = [_pass8(counts[f"max8-s{s}"]) - _pass8(counts[f"rloo-s{s}"]) for s in (10, 11, 12)]
    assert [r["d"] for r in report["per_seed"]] == pytest.approx(d, abs=1e-12)
    assert report["interim"] == {"pairs": 3, "mean": pytest.approx(sum(d) / 3, abs=1e-12)}
    md = (tmp_path / "compare_objectives_replication.md").read_text()
    assert "7 of 30 units in" in md and "Interim, descriptive only" in md and "p =" not in md and "CI" not in md
    assert json.loads((tmp_path / "compare_objectives_replication.json").read_text())["complete"] is False


def test_complete_replication_matches_scipy_and_pools_with_the_ten_seed_run(tmp_path):
    gen = torch.Generator().manual_seed(1)
    assets, ten = tmp_path / "compare_objectives_replication", tmp_path / "compare_objectives"
    counts = _write(assets, range(10, 25), gen, shift=2)
    counts["rloo-s12"] = [N] * P  # RLOO solves everything at seed 12: pass@8 = 1, a ceiling seed
    (assets / "rloo-s12.json").write_text(json.dumps(_unit("rloo-s12", counts["rloo-s12"])))
    old = _write(ten, range(10), gen, shift=1)
    failures = [{"unit": "max8-s11", "error": "killed"}]
    (tmp_path / "compare_objectives_replication_failures.json").write_text(json.dumps(failures))
    # the reproduction check: rloo-s9 rerun at the replication's commit, identical per-problem counts
    (tmp_path / "compare_objectives_repro").mkdir()
    (tmp_path / "compare_objectives_repro" / "rloo-s9.json").write_text(json.dumps(_unit("rloo-s9", old["rloo-s9"])))
    report = compare_replication.summarize_replication(assets, ten)
    d = [_pass8(counts[f"max8-s{s}"]) - _pass8(counts[f"rloo-s{s}"]) for s in range(10, 25)]
    ref = scipy_stats.ttest_1samp(d, 0)
    ci = ref.confidence_interval(0.95)
    t = report["test"]
    assert t["n"] == 15 and t["mean"] == pytest.approx(sum(d) / 15, abs=1e-12)
    assert t["p"] == pytest.approx(ref.pvalue, rel=1e-9) and t["ci"] == pytest.approx([ci.low, ci.high], rel=1e-9)
    assert t["verdict"] == compare_replication.verdict({"p": ref.pvalue, "mean": sum(d) / 15})
    assert report["ceiling"] == {"threshold": 0.98, "seeds": [12], "of": 15}
    assert report["failures"] == failures and report["missing_seeds"] == []
    low, high = report["detectable"]["sd_ci"]
    sd = float(torch.tensor(d, dtype=torch.float64).std())
    assert low == pytest.approx(sd * math.sqrt(14 / scipy_stats.chi2.ppf(0.975, 14)), rel=1e-9)
    assert high == pytest.approx(sd * math.sqrt(14 / scipy_stats.chi2.ppf(0.025, 14)), rel=1e-9)
    pooled_d = [_pass8(old[f"max8-s{s}"]) - _pass8(old[f"rloo-s{s}"]) for s in range(10)] + d
    pooled = report["pooled"]
    assert pooled["seeds"] == list(range(25)) and pooled["p"] == pytest.approx(scipy_stats.ttest_1samp(pooled_d, 0).pvalue)
    assert pooled["reproduction_check"]["status"] == "passed"
    md = (tmp_path / "compare_objectives_replication.md").read_text()
    assert "30 of 30 units in" in md and f"**{t['verdict']}**" in md and "max8-s11 (killed)" in md
    assert "Exploratory (not the pre-registered test)" in md and "reproduction check passes: passed" in md
    expected = {"confirmed": "In a pre-registered replication on 15 fresh seeds, Max@8 raised pass@8 over RLOO by ",
                "not confirmed": "A pre-registered replication on 15 fresh seeds did not confirm Max@8's pass@8 gain",
                "reversal": "A pre-registered replication on 15 fresh seeds reversed"}[t["verdict"]]  # fmt: skip
    assert expected in md and f"(p = {ref.pvalue:.2g})" in md
    # a rerun that differs on one problem fails the check, and the report says so
    rerun = list(old["rloo-s9"])
    rerun[0] = (rerun[0] + 1) % (N + 1)
    (tmp_path / "compare_objectives_repro" / "rloo-s9.json").write_text(json.dumps(_unit("rloo-s9", rerun)))
    check = compare_replication.replication(assets, ten)["pooled"]["reproduction_check"]
    assert check["status"] == "failed" and check["problems_differing"] == 1


def test_a_seed_that_failed_three_times_is_missing_and_the_test_runs_on_complete_pairs(tmp_path):
    gen = torch.Generator().manual_seed(2)
    assets = tmp_path / "compare_objectives_replication"
    counts = _write(assets, range(10, 25), gen, skip=("max8-s24",))
    fails = [{"unit": "max8-s24", "error": f"attempt {i}"} for i in range(2)]
    (tmp_path / "compare_objectives_replication_failures.json").write_text(json.dumps(fails))
    assert "test" not in compare_replication.replication(assets)  # two failures: still waiting for a rerun
    fails.append({"unit": "max8-s24", "error": "attempt 2"})
    (tmp_path / "compare_objectives_replication_failures.json").write_text(json.dumps(fails))
    report = compare_replication.replication(assets)
    d = [_pass8(counts[f"max8-s{s}"]) - _pass8(counts[f"rloo-s{s}"]) for s in range(10, 24)]
    assert report["missing_seeds"] == [24] and report["test"]["n"] == 14
    assert report["test"]["p"] == pytest.approx(scipy_stats.ttest_1samp(d, 0).pvalue, rel=1e-9)
    assert "Seeds reported missing after 3 failures: [24]" in compare_replication.table(report)


@pytest.mark.parametrize(("p", "mean", "expected"), [(0.01, 0.05, "confirmed"), (0.01, -0.05, "reversal"),
                                                     (0.05, 0.05, "not confirmed"), (0.2, -0.01, "not confirmed")])
def test_verdict_rule(p, mean, expected):
    assert compare_replication.verdict({"p": p, "mean": mean}) == expected
    test = {"p": p, "mean": mean, "ci": [mean - 0.01, mean + 0.01], "n": 15, "verdict": expected}
    sentence = compare_replication.readme_sentence({"test": test})
    assert ("did not confirm" in sentence) == (expected == "not confirmed")
    assert ("reversed" in sentence) == (expected == "reversal") and f"{100 * abs(mean):.1f} points" in sentence


def test_cli_summarizes_the_replication_folder_and_refuses_a_stale_unit(tmp_path):
    """`--summarize --assets_dir .../compare_objectives_replication` reports the replication; a unit from another
    protocol is one line on stderr and exit status 2."""
    gen = torch.Generator().manual_seed(3)
    assets, ten = tmp_path / "compare_objectives_replication", tmp_path / "ten"
    _write(assets, [10], gen)
    _write(ten, [0], gen)
    cmd = [sys.executable, str(REPO / "studies" / "compare_objectives.py"), "--summarize", "--assets_dir", str(assets),
           "--ten_seed_dir", str(ten)]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "2 of 30 units in" in (tmp_path / "compare_objectives_replication.md").read_text()
    (assets / "rloo-s11.json").write_text(json.dumps({**_unit("rloo-s11", [1] * P), "config": {"max_steps": 20}}))
    result = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 2 and "rloo-s11" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_an_exploratory_arm_is_reported_apart_from_the_test(tmp_path):
    """`maxrl` at the replication's seeds: listed outside the design, paired by seed against both design arms on
    pass@8; a mean only while seeds are missing, then scipy's interval; never in the pre-registered test."""
    gen = torch.Generator().manual_seed(5)
    assets = tmp_path / "compare_objectives_replication"
    counts = _write(assets, range(10, 25), gen, shift=1)
    for s in (10, 11):
        counts[f"maxrl-s{s}"] = torch.randint(0, 12, (P,), generator=gen).tolist()
        (assets / f"maxrl-s{s}.json").write_text(json.dumps(_unit(f"maxrl-s{s}", counts[f"maxrl-s{s}"], "later")))
    report = compare_replication.summarize_replication(assets)
    assert report["commits"] == ["abc123"] and report["test"]["n"] == 15  # the test is the design's alone
    early = report["exploratory_arms"]["maxrl"]
    d = [_pass8(counts[f"maxrl-s{s}"]) - _pass8(counts[f"rloo-s{s}"]) for s in (10, 11)]
    assert early["commits"] == ["later"] and early["minus"]["rloo"]["mean"] == pytest.approx(sum(d) / 2, abs=1e-12)
    assert "ci" not in early["minus"]["rloo"]
    md = (tmp_path / "compare_objectives_replication.md").read_text()
    assert "Exploratory arm `maxrl` (not pre-registered, no test; ran at later): 2 of 15 seeds" in md
    for s in range(12, 25):
        counts[f"maxrl-s{s}"] = torch.randint(0, 12, (P,), generator=gen).tolist()
        (assets / f"maxrl-s{s}.json").write_text(json.dumps(_unit(f"maxrl-s{s}", counts[f"maxrl-s{s}"], "later")))
    full = compare_replication.summarize_replication(assets)["exploratory_arms"]["maxrl"]
    for ref in ("rloo", "max8"):
        d = [_pass8(counts[f"maxrl-s{s}"]) - _pass8(counts[f"{ref}-s{s}"]) for s in range(10, 25)]
        ci = scipy_stats.ttest_1samp(d, 0).confidence_interval(0.95)
        assert full["minus"][ref]["ci"] == pytest.approx([ci.low, ci.high], rel=1e-9), ref
        assert full["minus"][ref]["p_unadjusted"] == pytest.approx(scipy_stats.ttest_1samp(d, 0).pvalue, rel=1e-9)
        assert "p" not in full["minus"][ref] and full["minus"][ref]["inference"].startswith("exploratory: unadjusted")
    assert "minus max8" in (md := (tmp_path / "compare_objectives_replication.md").read_text())
    assert md.count("unadjusted 95% t CI") == 2
