"""Calibration report of a built-in task on its validation split only: base pass@k and an RLOO learnability pilot.

The units are those of the comparison driver, evaluated on validation (`--eval_split validation`): the base model
and RLOO (`Mean` at K=1) at pilot seeds 0-2, with the comparison's own budget (8 steps x 4 prompts x 16 rollouts,
`studies/configs/compare_digits20.yaml`). The report refuses any unit evaluated on another split or task: a budget
or a task is tuned on validation problems, never on test ones.

    python studies/compare_objectives.py --config studies/configs/compare_digits20.yaml --eval_split validation \\
        --assets_dir studies/assets/digits20_pilot --arms rloo --seeds 0 1 2     # the units (about 35 min, 2 cores)
    python studies/task_calibration.py                                            # the report, from those units

It writes `studies/assets/<task>_calibration.{json,md}`: the base model's pass@k on validation (`base_pass_at_k`,
keyed by k, with the numbers of problems and samples), how its per-problem success spreads over (0, 1), the
pilot's pass@1 gain over the base model (per seed, with a paired bootstrap over problems; and over seeds, a t
interval), and each pass@k's seed SD, from which the crossover study's seeds per arm are computed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # compare_summary, beside this file
from compare_summary import check_counts, curves, load_units  # noqa: E402

from ordergrad_trl.core.stats import bootstrap_ci, detectable_effect, seed_t_test  # noqa: E402

HERE = Path(__file__).resolve().parent
TASK, SPLIT, PILOT_ARM = "digits20", "validation", "rloo"
KS = (1, 2, 4, 8, 16)
POWER_EFFECT, POWER, FAMILY_ALPHA, PRIMARIES, MAX_SEEDS = 0.04, 0.8, 0.05, 3, 20


def _flag(unit: dict, name: str) -> str | None:
    args = unit.get("eval_args") or []
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def _check(unit: dict, task: str) -> None:
    where = (_flag(unit, "--datasets"), _flag(unit, "--split"))
    if where != (task, SPLIT):
        raise ValueError(f"unit {unit.get('unit')!r} was evaluated on {where}, not ({task!r}, {SPLIT!r}): the "
                         "calibration reads validation units only")


def seeds_per_arm(sd_diff: float) -> int | None:
    """Seeds for a paired two-sided t test at Holm's strictest level (alpha / 3) to detect `POWER_EFFECT` with
    `POWER` (shifted-t approximation, `stats.detectable_effect`), from the SD of per-seed paired differences; None
    if more than `MAX_SEEDS` are needed."""
    for n in range(3, MAX_SEEDS + 1):
        if detectable_effect(sd_diff, n, FAMILY_ALPHA / PRIMARIES, POWER) <= POWER_EFFECT:
            return n
    return None


def calibrate(units_dir: Path, task: str = TASK, bootstrap: int = 10_000) -> dict:
    units = load_units(units_dir)
    if "base" not in units:
        raise ValueError(f"no base unit in {units_dir}: run the driver's command in this file's docstring first")
    for unit in units.values():
        _check(unit, task)
        check_counts(unit)
    base = units["base"]
    n = base["num_samples"]
    ids = base["eval"]["problem_ids"]
    counts = torch.tensor(base["eval"]["correct"])  # (P,)
    base_curves = curves(counts, n)["pass@k"]  # (P, n)
    pilot = sorted((u for u in units.values() if u.get("arm") == PILOT_ARM), key=lambda u: u["seed"])
    report = {
        "task": task, "split": SPLIT,
        "num_problems": len(ids), "num_samples": n, "temperature": float(_flag(base, "--temperature")),
        "max_new_tokens": int(_flag(base, "--max_new_tokens")), "eval_backend": base["eval_backend"],
        "base_pass_at_k": {str(k): base_curves[:, k - 1].mean().item() for k in range(1, n + 1)},
        "base_pass_at_k_ci": {str(k): [x.item() for x in bootstrap_ci(base_curves[:, k - 1], num_samples=bootstrap)]
                              for k in KS},  # 95%, resampling problems: the eval's own sampling noise
        "base_success_histogram": torch.bincount(counts, minlength=n + 1).tolist(),  # problems with c of n correct
        "base_fraction_inside": ((counts > 0) & (counts < n)).double().mean().item(),
        "commit": base["commit"], "pilot": None,
    }
    if not pilot:
        return report
    gains, per_seed, sd_by_k = [], [], {}
    for unit in pilot:
        if unit["eval"]["problem_ids"] != ids:
            raise ValueError(f"unit {unit['unit']!r} scored other problems than the base unit")
        c = curves(torch.tensor(unit["eval"]["correct"]), n)["pass@k"]  # (P, n)
        diff = c[:, 0] - base_curves[:, 0]  # (P,) paired by problem
        low, high = (x.item() for x in bootstrap_ci(diff, num_samples=bootstrap, seed=unit["seed"]))
        per_seed.append({"seed": unit["seed"], "pass_at_1": c[:, 0].mean().item(), "gain": diff.mean().item(),
                         "gain_ci": [low, high], "pass_at_k": {str(k): c[:, k - 1].mean().item() for k in KS},
                         "train_wall_s": unit.get("train_wall_s"), "eval_wall_s": unit.get("eval_wall_s")})
        gains.append(diff.mean().item())
    for k in KS:
        values = torch.tensor([s["pass_at_k"][str(k)] for s in per_seed], dtype=torch.float64)
        sd_by_k[str(k)] = values.std(unbiased=True).item() if len(values) > 1 else None
    seeds_level = seed_t_test(gains) if len(gains) > 1 else None
    planned = {}
    for k, sd in sd_by_k.items():
        if sd is not None:  # paired differences of two arms, independent within a seed: SD * sqrt(2)
            planned[k] = {"sd_diff": sd * math.sqrt(2), "seeds_per_arm": seeds_per_arm(sd * math.sqrt(2))}
    report["pilot"] = {
        "arm": PILOT_ARM, "train_flags": pilot[0]["train_flags"], "config": pilot[0]["config"],
        "per_seed": per_seed, "seed_level_gain": seeds_level,
        "detected": all(s["gain_ci"][0] > 0 for s in per_seed) and bool(seeds_level and seeds_level["ci"][0] > 0),
        "seed_sd": sd_by_k, "planned_seeds": planned,
        "power": {"effect": POWER_EFFECT, "power": POWER, "alpha": FAMILY_ALPHA / PRIMARIES, "max_seeds": MAX_SEEDS},
    }
    return report


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def markdown(r: dict) -> str:
    n = r["num_samples"]
    lines = [f"# Calibration of `{r['task']}` on its {r['split']} split", "",
             f"Base model, {r['num_problems']} validation problems x {n} samples at T = {r['temperature']}, "
             f"{r['max_new_tokens']} new tokens, {r['eval_backend']} backend (commit {r['commit'][:7]}). Rebuilt by "
             f"`python studies/task_calibration.py --task {r['task']}` from the units in "
             f"`studies/assets/{r['task']}_pilot/`.", "",
             "| k | " + " | ".join(str(k) for k in KS) + " |", "|---" * (len(KS) + 1) + "|",
             "| base pass@k (%) | " + " | ".join(_pct(r["base_pass_at_k"][str(k)]) for k in KS) + " |",
             "| 95% CI over problems | " + " | ".join("[" + ", ".join(_pct(x) for x in r["base_pass_at_k_ci"][str(k)])
                                                    + "]" for k in KS) + " |", "",
             f"Per-problem success: {_pct(r['base_fraction_inside'])}% of problems are solved by some but not all "
             f"{n} samples; problems by correct count 0..{n}: {r['base_success_histogram']}."]
    p = r["pilot"]
    if p:
        lines += ["", f"## Learnability pilot: `{p['arm']}` ({' '.join(p['train_flags'])}), "
                  f"{p['config']['max_steps']} steps, evaluated on validation", "",
                  "| seed | pass@1 (%) | gain over base (points) [95% paired bootstrap over problems] | "
                  "train s | eval s |", "|---|---|---|---|---|"]
        for s in p["per_seed"]:
            lo, hi = s["gain_ci"]
            lines.append(f"| {s['seed']} | {_pct(s['pass_at_1'])} | {100 * s['gain']:+.1f} [{100 * lo:+.1f}, "
                         f"{100 * hi:+.1f}] | {s['train_wall_s']} | {s['eval_wall_s']} |")
        t = p["seed_level_gain"]
        if t:
            lines += ["", f"Over seeds: {100 * t['mean']:+.1f} points [95% t interval {100 * t['ci'][0]:+.1f}, "
                      f"{100 * t['ci'][1]:+.1f}] ({t['n']} seeds). Detected: {'yes' if p['detected'] else 'no'} "
                      "(every seed's interval and the seed-level interval above 0)."]
        pw = p["power"]
        lines += ["", f"Seeds per arm for a paired t test at alpha {pw['alpha']:.4f} (0.05 / 3, Holm's first step) "
                  f"to detect {100 * pw['effect']:.0f} points with {100 * pw['power']:.0f}% power, from the pilot's "
                  "seed SD times sqrt(2) (two arms, independent within a seed; at most "
                  f"{pw['max_seeds']}, 'more' if that is not enough):", "",
                  "| k | seed SD (points) | SD of a paired difference | seeds per arm |", "|---|---|---|---|"]
        for k, plan in p["planned_seeds"].items():
            lines.append(f"| {k} | {100 * p['seed_sd'][k]:.1f} | {100 * plan['sd_diff']:.1f} | "
                         f"{plan['seeds_per_arm'] or 'more than ' + str(pw['max_seeds'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default=TASK, help="the built-in set the units were evaluated on")
    parser.add_argument("--units_dir", default=None, help="the validation units (default: assets/<task>_pilot)")
    parser.add_argument("--out", default=None,
                        help="report path without extension, .json and .md (default: assets/<task>_calibration)")
    args = parser.parse_args()
    units = Path(args.units_dir or HERE / "assets" / f"{args.task}_pilot")
    try:
        report = calibrate(units, args.task)
    except ValueError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    out = Path(args.out or HERE / "assets" / f"{args.task}_calibration")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
