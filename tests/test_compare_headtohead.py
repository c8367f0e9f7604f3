"""recipes/compare_headtohead.py, the pre-registered Max@8 vs MaxRL head-to-head, on synthetic units: interim without
a p-value; once complete, both primaries against scipy's one-sample t test, Holm by hand and math.comb; the verdict
rule and the README sentence for each verdict; the failure rule; the reproduction check gating the pooled seeds;
the driver's --summarize; and the pre-registration's text frozen at the commit its units run from."""

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "recipes"))

import compare_headtohead as h2h  # noqa: E402

scipy_stats = pytest.importorskip("scipy.stats", reason="scipy (the dev extra) is the independent oracle")
N, P = 16, 10


def _unit(name, correct, commit="h2hcommit"):
    arm, _, seed = name.partition("-s")
    return {"schema": 1, "unit": name, "arm": arm, "seed": int(seed), "num_samples": N, "commit": commit,
            "config": {"max_steps": 8}, "train_overrides": [], "train_log": [], "wall_s": 1.0,
            "eval": {"problem_ids": [f"p{i}" for i in range(P)], "correct": correct, "scored": [N] * P}}  # fmt: skip


def _pass(correct, k):
    return sum(1 - math.comb(N - c, k) / math.comb(N, k) for c in correct) / len(correct)


def _write(folder: Path, seeds, gen, skip=(), commit="h2hcommit") -> dict:
    """max8 (more spread: more pass@8, less pass@1) and maxrl units at `seeds`."""
    folder.mkdir(parents=True, exist_ok=True)
    counts = {}
    for s in seeds:
        for arm in h2h.ARMS:
            name = f"{arm}-s{s}"
            if name in skip:
                continue
            c = torch.randint(0, 5, (P,), generator=gen) * (4 if arm == "max8" else 1) + (0 if arm == "max8" else 4)
            counts[name] = c.clamp(0, N).tolist()
            (folder / f"{name}.json").write_text(json.dumps(_unit(name, counts[name], commit)))
    return counts


def test_interim_reports_no_p_value(tmp_path):
    assets = tmp_path / "compare_objectives_headtohead"
    counts = _write(assets, [25, 26, 27], torch.Generator().manual_seed(0), skip=("maxrl-s27",))
    r = h2h.summarize_headtohead(assets)
    assert not r["complete"] and "tests" not in r and r["units"]["present"] == 5
    d = [_pass(counts[f"max8-s{s}"], 8) - _pass(counts[f"maxrl-s{s}"], 8) for s in (25, 26)]
    assert r["interim"]["means"]["i"] == pytest.approx(sum(d) / 2, abs=1e-12)
    md = (tmp_path / "compare_objectives_headtohead.md").read_text()
    assert "Interim, descriptive only: 2 complete pairs" in md and "p =" not in md and "CI" not in md


def test_complete_head_to_head_matches_scipy_holm_and_pools_behind_the_reproduction_check(tmp_path):
    gen = torch.Generator().manual_seed(1)
    assets = tmp_path / "compare_objectives_headtohead"
    counts = _write(assets, h2h.SEEDS, gen)
    replication = tmp_path / "compare_objectives_replication"
    old = _write(replication, range(10, 14), gen, commit="oldcommit")
    repro = tmp_path / "compare_objectives_headtohead_repro"
    repro.mkdir()
    for name in h2h.REPRO_UNITS:
        (repro / f"{name}.json").write_text(json.dumps(_unit(name, old[name])))
    r = h2h.summarize_headtohead(assets, replication)
    assert r["complete"] and r["commits"] == ["h2hcommit"]
    d = [_pass(counts[f"max8-s{s}"], 8) - _pass(counts[f"maxrl-s{s}"], 8) for s in h2h.SEEDS]
    e = [_pass(counts[f"maxrl-s{s}"], 1) - _pass(counts[f"max8-s{s}"], 1) for s in h2h.SEEDS]
    raw = {"i": scipy_stats.ttest_1samp(d, 0.0).pvalue, "ii": scipy_stats.ttest_1samp(e, 0.0).pvalue}
    lo_name, hi_name = sorted(raw, key=raw.get)
    holm = {lo_name: min(1.0, 2 * raw[lo_name])}
    holm[hi_name] = max(holm[lo_name], min(1.0, raw[hi_name]))
    for name, values in (("i", d), ("ii", e)):
        t = r["tests"][name]
        sem = scipy_stats.sem(values)
        assert t["mean"] == pytest.approx(sum(values) / 15, abs=1e-12) and t["n"] == 15
        assert t["p"] == pytest.approx(raw[name], rel=1e-6) and t["p_holm"] == pytest.approx(holm[name], rel=1e-6)
        assert t["ci"] == pytest.approx(list(scipy_stats.t.interval(0.95, 14, loc=t["mean"], scale=sem)), abs=1e-9)
        assert t["ci_adjusted"] == pytest.approx(list(scipy_stats.t.interval(0.975, 14, loc=t["mean"], scale=sem)),
                                                 abs=1e-9)  # fmt: skip
        assert t["verdict"] == h2h.verdict(t["mean"], holm[name]) and t["above"] == sum(v > 0 for v in values)
    pooled = r["pooled"]
    assert pooled["seeds"] == [10, 11, 12, 13, *h2h.SEEDS] and pooled["reproduction_check"]["status"] == "passed"
    d_old = [_pass(old[f"max8-s{s}"], 8) - _pass(old[f"maxrl-s{s}"], 8) for s in range(10, 14)]
    assert pooled["i"]["p"] == pytest.approx(scipy_stats.ttest_1samp(d_old + d, 0.0).pvalue, rel=1e-6)
    md = (tmp_path / "compare_objectives_headtohead.md").read_text()
    assert h2h.readme_sentence(r) in md and "Valid only if the reproduction check passes: passed" in md
    moved = list(old["maxrl-s10"])
    moved[3] += 1
    (repro / "maxrl-s10.json").write_text(json.dumps(_unit("maxrl-s10", moved)))
    assert h2h.headtohead(assets, replication)["pooled"]["reproduction_check"]["status"] == "failed"


@pytest.mark.parametrize("mean, p_holm, expected", [(0.03, 0.01, "confirmed"), (-0.03, 0.01, "reversed"),
                                                     (0.03, 0.05, "not confirmed"), (-0.03, 0.2, "not confirmed")])
def test_verdict_rule(mean, p_holm, expected):
    assert h2h.verdict(mean, p_holm) == expected


def test_readme_sentence_follows_each_verdict():
    def test(mean, verdict):
        return {"mean": mean, "ci": [mean - 0.01, mean + 0.01], "p_holm": 0.004, "verdict": verdict, "n": 15}

    r = {"tests": {"i": test(0.031, "confirmed"), "ii": test(0.098, "confirmed")}}
    assert h2h.readme_sentence(r) == ("In a pre-registered head-to-head on 15 fresh seeds, Max@8's pass@8 was 3.1 "
                                      "points above MaxRL's [95% CI +2.1, +4.1] (Holm p = 0.004); MaxRL's pass@1 was "
                                      "9.8 points above Max@8's [95% CI +8.8, +10.8] (Holm p = 0.004).")  # fmt: skip
    r["tests"]["i"] = test(0.004, "not confirmed")
    r["tests"]["ii"] = test(-0.05, "reversed")
    sentence = h2h.readme_sentence(r)
    assert "Max@8's pass@8 over MaxRL's was not confirmed: +0.4 points" in sentence
    assert "MaxRL's pass@1 was 5.0 points below Max@8's, the reverse of the tested direction" in sentence


def test_a_seed_that_failed_three_times_is_missing_and_the_tests_run_on_complete_pairs(tmp_path):
    assets = tmp_path / "compare_objectives_headtohead"
    _write(assets, h2h.SEEDS, torch.Generator().manual_seed(2), skip=("maxrl-s31",))
    failures = [{"unit": "maxrl-s31", "error": "killed"}] * 2
    (tmp_path / "compare_objectives_headtohead_failures.json").write_text(json.dumps(failures))
    assert not h2h.headtohead(assets)["complete"]  # two failures: it is rerun, not dropped
    (tmp_path / "compare_objectives_headtohead_failures.json").write_text(json.dumps(failures * 2))
    r = h2h.headtohead(assets)
    assert r["complete"] and r["missing_seeds"] == [31] and r["tests"]["i"]["n"] == 14


def test_driver_summarizes_the_head_to_head_folder(tmp_path):
    assets = tmp_path / "compare_objectives_headtohead"
    _write(assets, [25], torch.Generator().manual_seed(4))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, str(REPO / "recipes" / "compare_objectives.py"), "--summarize", "--assets_dir", str(assets)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "**Pre-registered head-to-head**" in result.stdout and "2 of 30 units in" in result.stdout


def test_the_preregistration_is_unchanged_and_every_unit_ran_at_its_commit():
    """The plan is frozen once a unit ran: its text hashes as at e4186fc, the commit every unit must record."""
    results = (REPO / "docs" / "results.md").read_text()
    start = results.index("### Pre-registration: Max@8 vs MaxRL head-to-head")
    end = min(i for i in (results.find("<!-- headtohead:start -->", start), results.index("\n## ", start)) if i > 0)
    digest = hashlib.sha256(results[start:end].rstrip("\n").encode()).hexdigest()
    assert digest == "c0c33436e8305d5ff58636be6b673c0b7868ff01e5bff24290d5e311cd6cc1ed"
    assets = REPO / "recipes" / "assets" / "compare_objectives_headtohead"
    commits = {json.loads(p.read_text())["commit"] for p in assets.glob("*.json")}
    assert commits <= {"e4186fce522944d9b9696189346dc7c3b0f8a386"}, commits


def test_the_committed_report_is_what_its_units_give():
    from test_published_results import _same

    assets = REPO / "recipes" / "assets" / "compare_objectives_headtohead"
    committed = json.loads((assets.parent / f"{assets.name}.json").read_text())
    fresh = json.loads(json.dumps(h2h.headtohead(assets, assets.parent / "compare_objectives_replication")))
    assert _same(fresh, committed), \
        "stale: rerun `compare_objectives.py --summarize --assets_dir recipes/assets/compare_objectives_headtohead`"
    assert (assets.parent / f"{assets.name}.md").read_text() == h2h.table(committed) + "\n"


def test_docs_quote_the_head_to_head_at_its_stage():
    """docs/results.md's status block says how many units are in, at which commit, as the committed report has it,
    and gives no p-value or interval before every seed is in (then the pre-registered sentence, verbatim)."""
    import re

    report = json.loads((REPO / "recipes" / "assets" / "compare_objectives_headtohead.json").read_text())
    results = (REPO / "docs" / "results.md").read_text()
    block = " ".join(results[results.index("<!-- headtohead:start -->"): results.index("<!-- headtohead:end -->")].split())
    assert f"{report['units']['present']} of {report['units']['expected']} units in" in block
    assert all(f"at {c[:7]}" in block for c in report["commits"])
    if report["complete"]:
        assert h2h.readme_sentence(report) in block
        assert h2h.readme_sentence(report) in " ".join((REPO / "README.md").read_text().split())
        assert f"{len(report['failures']) or 'no'} failed attempt" in block
        for name, arm, minus, k in h2h.ENDPOINTS:
            t = report["tests"][name]
            lo, hi = (h2h._pts(x) for x in t["ci_adjusted"])
            det = t["detectable"]
            assert f"**({name}) {h2h.LABEL[arm]} - {h2h.LABEL[minus]} on pass@{k}: {t['verdict']}.**" in block, name
            assert f"t = {t['t']:.2f} ({t['df']} df), p = {t['p']:.2g}, Holm p = {t['p_holm']:.2g}" in block or \
                f"t = {t['t']:.2f} ({t['df']} df), p = {t['p']:.3g}, Holm p = {t['p_holm']:.3g}" in block, name
            assert f"{t['ci_adjusted_level']:.1%} t CI [{lo}, {hi}]" in block, name
            assert f"{h2h.LABEL[arm]} was ahead at {t['above']} of {t['n']} seeds" in block, name
            if t["verdict"] == "not confirmed":
                assert f"({100 * det['sd']:.1f} points)" in block and f"effect of {100 * det['effect']:.1f} points " \
                    f"({100 * det['effect_range'][0]:.1f} to {100 * det['effect_range'][1]:.1f})" in block, name
        pooled = report.get("pooled")
        if pooled:  # exploratory, and said to stand only on the reproduction check
            assert f"reproduction check {pooled['reproduction_check']['status']}" in block
            if pooled["reproduction_check"]["status"] == "passed":
                for name, *_ in h2h.ENDPOINTS:
                    t = pooled[name]
                    assert f"({name}) {h2h._pts(t['mean'])} [{h2h._pts(t['ci'][0])}, {h2h._pts(t['ci'][1])}], " \
                        f"p = {t['p']:.2g}" in block, name
        seeds = report["ceiling"]["seeds"]
        assert f"at {len(seeds)} of {len(report['design']['seeds'])} seeds ({', '.join(map(str, seeds))})" in block
    else:
        assert "under way" in block and not re.search(r"\bp\s*[=<]|CI \[", block)


def test_docs_state_the_reproduction_check_as_the_reruns_have_it():
    """docs/results.md: both reruns at the design's commit gave the committed units' counts and training rewards."""
    report = json.loads((REPO / "recipes" / "assets" / "compare_objectives_headtohead.json").read_text())
    check = report.get("pooled", {}).get("reproduction_check")
    if not check or check["status"] == "not available":
        pytest.skip("the reproduction units have not run")
    assets = REPO / "recipes" / "assets"
    results = " ".join((REPO / "docs" / "results.md").read_text().split())
    pairs = [(json.loads((assets / "compare_objectives_replication" / f"{u}.json").read_text()),
              json.loads((assets / check["path"] / f"{u}.json").read_text())) for u in h2h.REPRO_UNITS]  # fmt: skip
    assert f"**Reproduction check: {check['status']}.**" in results
    counts = " and ".join(str(sum(rerun["eval"]["correct"])) for _, rerun in pairs)
    assert f"({counts} of {sum(pairs[0][1]['eval']['scored'])})" in results
    for orig, rerun in pairs:
        assert rerun["eval"]["correct"] == orig["eval"]["correct"]
        assert [s["reward"] for s in rerun["train_log"]] == [s["reward"] for s in orig["train_log"]]
        assert max(abs(a["grad_norm"] - b["grad_norm"]) for a, b in zip(orig["train_log"], rerun["train_log"])) < 8e-6
