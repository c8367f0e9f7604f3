"""studies/compare_refill.py, the pre-registered refill study on `digits20`, on synthetic units: nothing read before
every unit is in; once complete, the three primaries against scipy's one-sample t test, Holm by hand and math.comb,
the Wilcoxon and sign-flip p beside them against scipy and enumeration, refill's cost from the training logs, the
failure rule, the resumed units, the reproduction check, the driver's --summarize, and the frozen plan."""

import hashlib
import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "studies"))

import compare_refill as rf  # noqa: E402
from helpers import bounded  # noqa: E402

scipy_stats = pytest.importorskip("scipy.stats", reason="scipy (the dev extra) is the independent oracle")
N, P = 16, 40
# per-arm base count of even / odd problems: max2 spreads thin (ahead of rloo at pass@8, behind at pass@1), rloo
# concentrates on half the problems; refill ahead of max8
SHAPE = {"rloo": (12, 0), "max2": (3, 3), "max8": (1, 1), "max8_refill": (3, 3)}


def _unit(name, correct, commit="xcommit", rounds=None, train_wall_s=100.0, log=((0.1, 0.5), (0.2, 0.4))):
    arm, _, seed = name.partition("-s")
    steps = [{"reward": r, "loss": x, "step_time": 9.0} for r, x in log]
    if arm == "max8_refill":
        for step, value in zip(steps, rounds or (2.0, 3.0)):
            step[rf.ROUNDS] = value
    return {"schema": 1, "unit": name, "arm": arm, "seed": int(seed), "num_samples": N, "commit": commit,
            "config": {"max_steps": 8}, "train_overrides": [], "wall_s": 1.0, "train_wall_s": train_wall_s,
            "train_log": steps, "eval": {"problem_ids": [f"p{i}" for i in range(P)], "correct": correct,
                                         "scored": [N] * P}}  # fmt: skip


def _write(folder: Path, seeds, gen, skip=(), **unit_kw) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    counts = {}
    for s in seeds:
        for arm, (even, odd) in SHAPE.items():
            name = f"{arm}-s{s}"
            if name in skip:
                continue
            base = torch.tensor([even, odd] * (P // 2))
            c = (base + torch.randint(-2, 3, (P,), generator=gen)).clamp(0, N).tolist()
            counts[name] = c
            wall = 150.0 + s if arm == "max8_refill" else 100.0
            (folder / f"{name}.json").write_text(json.dumps(_unit(name, c, train_wall_s=wall, **unit_kw)))
    return counts


def _pass(correct, k):
    return sum(1 - math.comb(N - c, k) / math.comb(N, k) for c in correct) / len(correct)


def test_interim_reports_no_value_at_all(tmp_path):
    assets = tmp_path / "compare_refill"
    _write(assets, rf.SEEDS[:3], torch.Generator().manual_seed(0), skip=(f"max8-s{rf.SEEDS[2]}",))
    r = rf.summarize_refill(assets)
    assert not r["complete"] and "tests" not in r and r["units"]["present"] == 11 and r["interim"] == {"seeds": 2}
    for key in ("per_seed", "costs", "changes", "planner", "reproduction_check"):
        assert key not in r, f"an interim report must hold no {key}"
    md = (tmp_path / "compare_refill.md").read_text()
    assert "Interim: 2 seeds complete" in md and "p =" not in md and "CI" not in md and "| seed |" not in md


def test_complete_primaries_match_scipy_holm_by_hand_and_the_robustness_checks(tmp_path):
    assets = tmp_path / "compare_refill"
    counts = _write(assets, rf.SEEDS, torch.Generator().manual_seed(1))
    r = rf.refill(assets)
    assert r["complete"] and r["units"]["present"] == 4 * len(rf.SEEDS)
    raw, diffs = {}, {}
    for name, arm, minus, k in rf.ENDPOINTS:
        d = [_pass(counts[f"{arm}-s{s}"], k) - _pass(counts[f"{minus}-s{s}"], k) for s in rf.SEEDS]
        ref = scipy_stats.ttest_1samp(d, 0.0)
        t = r["tests"][name]
        assert t["mean"] == pytest.approx(sum(d) / len(d), abs=1e-12) and t["p"] == pytest.approx(ref.pvalue, rel=1e-6)
        assert t["above"] == sum(x > 0 for x in d)
        raw[name], diffs[name] = ref.pvalue, d
    order = sorted(raw, key=raw.get)
    adjusted, running, compared = {}, 0.0, 0
    for i, name in enumerate(order):
        running = max(running, min(1.0, (3 - i) * raw[name]))
        adjusted[name] = running
    for name, d in diffs.items():
        t = r["tests"][name]
        assert t["p_holm"] == pytest.approx(adjusted[name], rel=1e-6)
        want = "not confirmed" if t["p_holm"] >= 0.05 else ("confirmed" if t["mean"] > 0 else "reversed")
        assert t["verdict"] == want
        rob = t["robustness"]
        # 30 nonzero differences: the sign-flip p is Monte Carlo, seeded; against the normal approximation of the
        # permutation distribution of sum(d) (its variance sum d^2), loosely
        z = abs(sum(d)) / math.sqrt(sum(x * x for x in d))
        assert rob["sign_flip"]["p"] == pytest.approx(2 * scipy_stats.norm.sf(z), abs=0.02)
        assert "Monte Carlo, 100000 sign vectors, seed 0" == rob["sign_flip"]["method"]
        if not rob["wilcoxon"]["ties"]:  # scipy's exact distribution takes no ties (tests/test_stats.py: with ties)
            assert rob["wilcoxon"]["p"] == pytest.approx(scipy_stats.wilcoxon(d, method="exact").pvalue, rel=1e-9)
            compared += 1
    assert compared >= 1
    assert [t["verdict"] for t in r["tests"].values()] == ["confirmed", "confirmed", "confirmed"]
    sentence = rf.readme_sentence(r)
    assert sentence.startswith(f"In a pre-registered study on `digits20` ({len(rf.SEEDS)} fresh seeds), Max@2's "
                               "pass@8 was ") and "above RLOO's" in sentence and "at a pass@1 cost of" in sentence
    assert "refill moved Max@8's pass@8 by +" in sentence and "extra generation rounds per step" in sentence


def test_costs_come_from_the_training_logs_and_leave_resumed_units_out(tmp_path):
    assets = tmp_path / "compare_refill"
    counts = _write(assets, rf.SEEDS, torch.Generator().manual_seed(2), rounds=(1.0, 4.0))
    resumed = f"max8_refill-s{rf.SEEDS[0]}"  # trained in an earlier attempt: its recorded attempt only evaluated
    (assets / f"{resumed}.json").write_text(json.dumps(_unit(resumed, counts[resumed], rounds=(1.0, 4.0),
                                                             train_wall_s=0)))
    r = rf.refill(assets)
    c = r["costs"]
    assert c["extra_rounds_per_step"]["mean"] == pytest.approx(1.5)  # rounds 1 and 4: 0 and 3 extra
    ratios = [(150.0 + s) / 100.0 for s in rf.SEEDS[1:]]
    assert c["train_wall_ratio"]["seeds"] == list(rf.SEEDS[1:])
    assert c["train_wall_ratio"]["mean"] == pytest.approx(sum(ratios) / len(ratios))
    assert r["resumed"] == [resumed]
    md = rf.table(r)
    assert f"Units resumed after an interruption (trained in an earlier attempt, then evaluated): {resumed}." in md
    assert "1.50 extra generation rounds per step" in md
    mean_s = sum(150.0 + s for s in rf.SEEDS[1:]) / len(ratios)
    assert c["train_wall_ratio"]["mean_seconds"] == pytest.approx({"max8": 100.0, "max8_refill": mean_s})
    assert f"(mean {mean_s:.0f} s against 100 s)" in md
    means = r["planner"]["means"]["pass@8"]
    assert r["planner"]["ranks"]["pass@8"] == sorted(rf.ARMS, key=lambda a: -means[a])
    assert means["max8"] == pytest.approx(sum(_pass(counts[f"max8-s{s}"], 8) for s in rf.SEEDS) / len(rf.SEEDS))
    # every arm against rloo at every k, against math.comb
    d = [_pass(counts[f"max8-s{s}"], 4) - _pass(counts[f"rloo-s{s}"], 4) for s in rf.SEEDS]
    assert r["changes"]["max8"]["pass@4"]["mean"] == pytest.approx(sum(d) / len(d), abs=1e-12)
    assert set(r["changes"]) == {"max2", "max8", "max8_refill"} and len(r["changes"]["max2"]) == 2 * len(rf.KS)


def test_failure_rule_and_the_reproduction_check(tmp_path):
    assets = tmp_path / "compare_refill"
    gone = rf.SEEDS[-1]
    counts = _write(assets, rf.SEEDS, torch.Generator().manual_seed(3), skip=(f"rloo-s{gone}",))
    assert not rf.refill(assets)["complete"]
    (tmp_path / "compare_refill_failures.json").write_text(json.dumps([{"unit": f"rloo-s{gone}", "error": "x"}] * 3))
    r = rf.refill(assets)
    assert r["complete"] and r["missing_seeds"] == [gone] and r["tests"]["i"]["n"] == len(rf.SEEDS) - 1
    assert r["reproduction_check"] == {"unit": rf.REPRO_UNIT, "status": "not available"}
    repro = tmp_path / "compare_refill_repro"
    repro.mkdir()
    for correct, commit, status in ((counts[rf.REPRO_UNIT], "later", "passed"),
                                    ([min(N, c + 5) for c in counts[rf.REPRO_UNIT]], "later", "failed"),
                                    (counts[rf.REPRO_UNIT], "xcommit", "not available")):  # fmt: skip
        (repro / f"{rf.REPRO_UNIT}.json").write_text(json.dumps(_unit(rf.REPRO_UNIT, correct, commit=commit)))
        assert rf.refill(assets)["reproduction_check"]["status"] == status


def test_driver_summarizes_the_refill_folder(tmp_path):
    assets = tmp_path / "compare_refill"
    _write(assets, rf.SEEDS[:1], torch.Generator().manual_seed(5))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, str(REPO / "studies" / "compare_objectives.py"), "--summarize", "--assets_dir", str(assets)]
    result = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "**Pre-registered refill study**" in result.stdout and f"4 of {4 * len(rf.SEEDS)} units in" in result.stdout


def test_the_preregistration_is_unchanged_and_every_unit_ran_at_its_commit():
    """The plan is frozen once a unit ran: its text hashes as at 531680f, the commit every unit records."""
    from test_published_results import as_preregistered  # its dated revisions undone

    results = (REPO / "docs" / "results.md").read_text()
    start = results.index("### Pre-registration: RLOO, Max@2, Max@8 and Max@8 with refill")
    end = results.index("it decides nothing.", start) + len("it decides nothing.")  # its last words; logs follow
    digest = hashlib.sha256(as_preregistered(results[start:end]).encode()).hexdigest()
    assert digest == "36b2a4c800637410910b83c42f42b45541b562d981b8a7e6ebb0fa2b57909553"
    units = (REPO / "studies" / "assets" / "compare_refill").glob("*.json")
    commits = {json.loads(p.read_text())["commit"] for p in units}
    assert commits <= {"531680f1f86278b7eb5444a69482c8f7b9e82f32"}, commits
    assert (rf.SEEDS, rf.ARMS) == (tuple(range(60, 90)), ("rloo", "max2", "max8", "max8_refill"))
    assert rf.ENDPOINTS == (("i", "max2", "rloo", 8), ("ii", "rloo", "max2", 1), ("iii", "max8_refill", "max8", 8))
