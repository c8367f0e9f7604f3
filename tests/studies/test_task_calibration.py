"""studies/task_calibration.py: base pass@k from closed forms, the pilot's gain against a hand-computed paired
bootstrap's point estimate and scipy's t interval, the seeds-per-arm rule against scipy's noncentral t, and the
refusal of any unit not evaluated on the validation split."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "studies"))

import task_calibration as cal  # noqa: E402
from helpers.committed_numbers import same_numbers  # noqa: E402
from helpers import bounded  # noqa: E402

scipy_stats = pytest.importorskip("scipy.stats", reason="scipy (the dev extra) is the independent oracle")
N, P = 16, 40


def _unit(name: str, correct: list[int], split: str = "validation", steps: int = 8) -> dict:
    arm, seed = (name, None) if name == "base" else (name.rsplit("-s", 1)[0], int(name.rsplit("-s", 1)[1]))
    return {"unit": name, "arm": arm, "seed": seed, "commit": "abc1234" * 3, "num_samples": N,
            "eval_backend": "vllm", "train_flags": None if arm == "base" else ["--ordergrad_objective", "Mean"],
            "config": {"max_steps": steps}, "train_wall_s": 1.0, "eval_wall_s": 2.0,
            "eval_args": ["--datasets", "digits20", "--split", split, "--temperature", "0.7", "--max_new_tokens", "32"],
            "eval": {"problem_ids": [f"p{i}" for i in range(P)], "correct": correct, "scored": [N] * P}}


def _write(folder: Path, units: dict[str, list[int]], **kw) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, correct in units.items():
        (folder / f"{name}.json").write_text(json.dumps(_unit(name, correct, **kw)))


def _pass_at_k(c: int, k: int) -> float:
    return 1 - math.comb(N - c, k) / math.comb(N, k)


def test_base_pass_at_k_histogram_and_pilot_gain(tmp_path):
    gen = torch.Generator().manual_seed(0)
    base = torch.randint(0, 6, (P,), generator=gen).tolist()
    pilot = {f"rloo-s{s}": [min(N, c + int(x)) for c, x in zip(base, torch.randint(0, 5, (P,), generator=gen))]
             for s in range(3)}
    _write(tmp_path, {"base": base, **pilot})
    r = cal.calibrate(tmp_path, bootstrap=500)
    assert r["task"] == "digits20" and r["num_problems"] == P and r["num_samples"] == N
    for k in (1, 2, 8, 16):  # closed form: 1 - C(n-c, k) / C(n, k), averaged over problems
        assert r["base_pass_at_k"][str(k)] == pytest.approx(sum(_pass_at_k(c, k) for c in base) / P, abs=1e-12)
    assert r["base_success_histogram"] == [base.count(c) for c in range(N + 1)]
    low, high = r["base_pass_at_k_ci"]["1"]
    assert low < r["base_pass_at_k"]["1"] < high
    assert r["base_fraction_inside"] == pytest.approx(sum(0 < c < N for c in base) / P)
    gains = [(sum(pilot[f"rloo-s{s}"]) - sum(base)) / (N * P) for s in range(3)]
    got = r["pilot"]["per_seed"]
    assert [g["gain"] for g in got] == pytest.approx(gains, abs=1e-12)
    assert all(g["gain_ci"][0] <= g["gain"] <= g["gain_ci"][1] for g in got)
    low, high = scipy_stats.t.interval(0.95, 2, loc=sum(gains) / 3, scale=scipy_stats.sem(gains))
    assert r["pilot"]["seed_level_gain"]["ci"] == pytest.approx([low, high], abs=1e-9)
    sd1 = torch.tensor([p["pass_at_k"]["1"] for p in got], dtype=torch.float64).std().item()
    assert r["pilot"]["seed_sd"]["1"] == pytest.approx(sd1, abs=1e-12)
    assert r["pilot"]["detected"] == (r["pilot"]["seed_level_gain"]["ci"][0] > 0 and all(g["gain_ci"][0] > 0 for g in got))


@pytest.mark.parametrize("sd", [0.02, 0.035, 0.05])
def test_seeds_per_arm_gives_about_the_planned_power_by_scipys_noncentral_t(sd):
    n = cal.seeds_per_arm(sd)
    alpha = cal.FAMILY_ALPHA / cal.PRIMARIES

    def power(m: int) -> float:  # exact power of the two-sided one-sample t test at effect 4 points
        nc, crit = cal.POWER_EFFECT / (sd / math.sqrt(m)), scipy_stats.t.ppf(1 - alpha / 2, m - 1)
        return scipy_stats.nct.sf(crit, m - 1, nc) + scipy_stats.nct.cdf(-crit, m - 1, nc)

    if n is None:
        assert power(cal.MAX_SEEDS) < cal.POWER
    else:  # the shifted-t rule is a little optimistic (stats.detectable_effect): within 4 points of the target
        assert power(n) > cal.POWER - 0.04 and (n == 3 or power(n - 1) < cal.POWER)


def test_units_evaluated_on_test_are_refused(tmp_path):
    _write(tmp_path, {"base": [1] * P}, split="test")
    with pytest.raises(ValueError, match="evaluated on \\('digits20', 'test'\\), not \\('digits20', 'validation'\\)"):
        cal.calibrate(tmp_path)
    out = bounded.run([sys.executable, str(REPO / "studies" / "task_calibration.py"), "--units_dir", str(tmp_path),
                          "--out", str(tmp_path / "r")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "validation units only" in out.stderr


def test_the_committed_report_is_what_its_units_give():
    units = REPO / "studies" / "assets" / "digits20_pilot"
    if not units.is_dir():
        pytest.skip("the calibration units are not committed yet")
    committed = json.loads((REPO / "studies" / "assets" / "digits20_calibration.json").read_text())
    same_numbers(json.loads(json.dumps(cal.calibrate(units))), committed)  # the last bit is the machine's
    # issue 48's targets, "about 10-25%" at pass@1 and 40-60% at pass@8: each interval over problems meets its range
    ci = committed["base_pass_at_k_ci"]
    assert ci["1"][1] >= 0.10 and ci["1"][0] <= 0.25 and 0.40 <= committed["base_pass_at_k"]["8"] <= 0.60
    assert committed["pilot"]["detected"], "RLOO's pass@1 gain on validation is the learnability the budget needs"
