"""studies/compare_crossover.py, the pre-registered crossover on `digits20`, on synthetic units: nothing read before
every unit is in; once complete, the three primaries against scipy's one-sample t test, Holm by hand and
math.comb; the crossover shown only when (i) and (ii) are both confirmed; the failure rule; the reproduction check
(training trace to the bit, eval within a paired bootstrap); and the driver's --summarize."""

import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "studies"))

import compare_crossover as cx  # noqa: E402
from helpers import bounded  # noqa: E402

scipy_stats = pytest.importorskip("scipy.stats", reason="scipy (the dev extra) is the independent oracle")
N, P = 16, 12
# per-arm (base count of even problems, of odd problems): max2 concentrates on half the problems (more pass@2),
# max8 spreads thin over all (more pass@8); maxrl leaves more problems at 0 than curverl (pass@16 < 1 needs zeros)
SHAPE = {"max2": (12, 0), "max8": (3, 3), "maxrl": (1, 1), "curverl": (2, 2)}


def _unit(name, correct, commit="xcommit", log=((0.1, 0.5), (0.2, 0.4))):
    arm, _, seed = name.partition("-s")
    return {"schema": 1, "unit": name, "arm": arm, "seed": int(seed), "num_samples": N, "commit": commit,
            "config": {"max_steps": 8}, "train_overrides": [], "wall_s": 1.0,
            "train_log": [{"reward": r, "loss": x, "step_time": 9.0} for r, x in log],
            "eval": {"problem_ids": [f"p{i}" for i in range(P)], "correct": correct, "scored": [N] * P}}


def _pass(correct, k):
    return sum(1 - math.comb(N - c, k) / math.comb(N, k) for c in correct) / len(correct)


def _write(folder: Path, seeds, gen, skip=()) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    counts = {}
    for s in seeds:
        for arm, (even, odd) in SHAPE.items():
            name = f"{arm}-s{s}"
            if name in skip:
                continue
            base = torch.tensor([even, odd] * (P // 2))
            c = (base + torch.randint(-1, 2, (P,), generator=gen)).clamp(0, N).tolist()
            counts[name] = c
            (folder / f"{name}.json").write_text(json.dumps(_unit(name, c)))
    return counts


def test_interim_reports_no_value_at_all(tmp_path):
    assets = tmp_path / "compare_crossover"
    _write(assets, cx.SEEDS[:3], torch.Generator().manual_seed(0), skip=(f"maxrl-s{cx.SEEDS[2]}",))
    r = cx.summarize_crossover(assets)
    assert not r["complete"] and "tests" not in r and r["units"]["present"] == 11 and r["interim"] == {"seeds": 2}
    assert "per_seed" not in r, "an interim report must hold no value, per seed or pooled"
    written = (tmp_path / "compare_crossover.json").read_text()
    assert "pass@" not in written.replace('"metric": "pass@', "") and '"i":' not in written
    md = (tmp_path / "compare_crossover.md").read_text()
    assert "Interim: 2 seeds complete" in md and "p =" not in md and "CI" not in md and "| seed |" not in md


def test_complete_primaries_match_scipy_and_holm_by_hand(tmp_path):
    assets = tmp_path / "compare_crossover"
    counts = _write(assets, cx.SEEDS, torch.Generator().manual_seed(1))
    r = cx.crossover(assets)
    assert r["complete"] and r["units"]["present"] == 4 * len(cx.SEEDS)
    raw = {}
    for name, arm, minus, k in cx.ENDPOINTS:
        d = [_pass(counts[f"{arm}-s{s}"], k) - _pass(counts[f"{minus}-s{s}"], k) for s in cx.SEEDS]
        ref = scipy_stats.ttest_1samp(d, 0.0)
        t = r["tests"][name]
        assert t["mean"] == pytest.approx(sum(d) / len(d), abs=1e-12) and t["p"] == pytest.approx(ref.pvalue, rel=1e-6)
        raw[name] = ref.pvalue
    order = sorted(raw, key=raw.get)  # Holm by hand: m, m-1, m-2 times the ordered p-values, made monotone
    adjusted, running = {}, 0.0
    for i, name in enumerate(order):
        running = max(running, min(1.0, (3 - i) * raw[name]))
        adjusted[name] = running
    for name in raw:
        t = r["tests"][name]
        assert t["p_holm"] == pytest.approx(adjusted[name], rel=1e-6)
        want = "not confirmed" if t["p_holm"] >= 0.05 else ("confirmed" if t["mean"] > 0 else "reversed")
        assert t["verdict"] == want
    assert r["tests"]["i"]["verdict"] == "confirmed" and r["tests"]["ii"]["verdict"] == "confirmed"
    assert r["crossover_shown"] and "the crossover was shown" in cx.readme_sentence(r)


def test_crossover_not_shown_when_one_side_fails(tmp_path):
    assets = tmp_path / "compare_crossover"
    gen = torch.Generator().manual_seed(2)
    counts = _write(assets, cx.SEEDS, gen)
    for s in cx.SEEDS:  # max2 becomes a copy of max8: (ii) has no effect, only noise-free zeros
        (assets / f"max2-s{s}.json").write_text(json.dumps(_unit(f"max2-s{s}", counts[f"max8-s{s}"])))
    r = cx.crossover(assets)
    assert r["tests"]["ii"]["verdict"] == "not confirmed" and not r["crossover_shown"]
    assert "the crossover was not shown" in cx.readme_sentence(r)


def test_failure_rule_declares_a_seed_missing_after_three_attempts(tmp_path):
    assets = tmp_path / "compare_crossover"
    gone = cx.SEEDS[-1]
    _write(assets, cx.SEEDS, torch.Generator().manual_seed(3), skip=(f"curverl-s{gone}",))
    assert not cx.crossover(assets)["complete"]
    fails = [{"unit": f"curverl-s{gone}", "error": "killed"}] * cx.MAX_ATTEMPTS
    (tmp_path / "compare_crossover_failures.json").write_text(json.dumps(fails))
    r = cx.crossover(assets)
    assert r["complete"] and r["missing_seeds"] == [gone] and r["tests"]["iii"]["n"] == len(cx.SEEDS) - 1


def test_reproduction_check_needs_the_same_training_and_an_eval_within_noise(tmp_path):
    assets = tmp_path / "compare_crossover"
    counts = _write(assets, cx.SEEDS, torch.Generator().manual_seed(4))
    repro = tmp_path / "compare_crossover_repro"
    repro.mkdir()
    orig = counts[cx.REPRO_UNIT]
    cases = [  # (rerun counts, its training log, commit) -> status
        ([min(N, c + (i % 3 == 0)) - (i % 3 == 1 and c > 0) for i, c in enumerate(orig)], None, "later", "passed"),
        ([min(N, c + 4) for c in orig], None, "later", "failed"),  # every problem up: outside the interval
        (orig, ((0.1, 0.5), (0.2, 0.40001)), "later", "failed"),  # the training trace moved
        (orig, None, "xcommit", "not available"),  # rerun at the design's own commit
    ]
    for correct, log, commit, status in cases:
        unit = _unit(cx.REPRO_UNIT, correct, commit=commit, **({"log": log} if log else {}))
        (repro / f"{cx.REPRO_UNIT}.json").write_text(json.dumps(unit))
        assert cx.crossover(assets)["reproduction_check"]["status"] == status, (correct, log, commit)


def test_driver_summarizes_the_crossover_folder(tmp_path):
    assets = tmp_path / "compare_crossover"
    _write(assets, cx.SEEDS[:1], torch.Generator().manual_seed(5))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, str(REPO / "studies" / "compare_objectives.py"), "--summarize", "--assets_dir", str(assets)]
    result = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "**Pre-registered crossover**" in result.stdout and f"4 of {4 * len(cx.SEEDS)} units in" in result.stdout


def test_the_preregistration_is_unchanged_and_every_unit_ran_at_its_commit():
    """The plan is frozen once a unit ran: its text hashes as at 90c2c9e, the commit every unit must record."""
    import hashlib

    results = (REPO / "docs" / "results.md").read_text()
    start = results.index("### Pre-registration: the crossover on `digits20`")
    end = min(i for i in (results.find("<!-- crossover:start -->", start), results.index("\n## ", start)) if i > 0)
    from test_published_results import as_preregistered  # its dated revisions undone

    digest = hashlib.sha256(as_preregistered(results[start:end]).rstrip("\n").encode()).hexdigest()
    assert digest == "ca42e850c595e839a5839643d4691a699bc1059dfcdbd706dfdb6dccf54194ad"
    assets = REPO / "studies" / "assets" / "compare_crossover"
    commits = {json.loads(p.read_text())["commit"] for p in assets.glob("*.json")}
    assert commits <= {"90c2c9e8890364886a9847c6d658ed7b625cadd7"}, commits
    assert (cx.FIRST_SEED, cx.NUM_SEEDS, cx.ARMS) == (40, 20, ("max2", "max8", "maxrl", "curverl"))  # as the plan says
