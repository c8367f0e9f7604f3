"""The planner against real training: predicted against logged share of groups with a gradient (digits20 crossover).

The share the planner predicts for each arm of the `digits20` crossover, from the base model's validation eval,
beside the share each arm logged (exploratory; issue 59).

    python studies/signal_check.py          # writes studies/assets/signal_crossover.{json,md}

Prediction: `core.signal` at N = 16, B = 4 over the 200 validation problems' rates c_i / 16 (the calibration's
histogram, studies/assets/digits20_calibration.json), each arm's plan built from its recipe flags as the trainer
builds it. Two estimates per arm: the plug-in share (the Bernoulli-logit model at p_i = c_i / 16) and the
count-based one (with the eval's n = N = 16 samples, each problem's observed count is an unbiased draw of a group's
count, so the share is the fraction of problems whose count carries a gradient). At step 1 CurveRL's window is empty:
each batch is its own reference, which every mixed group's own bin fills, so the prediction uses no pool reference.

Logged: `1 - ordergrad/frac_zero_adv_groups` at step 1 of each unit, 4 groups x 20 seeds = 80 groups per arm (the
train split; the policy at step 1 is the base model), with a 95% Wilson interval over those groups; and the mean over
steps 2-8 for what happens once training moves the rates (and CurveRL's window fills).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from compare_summary import load_units, plan_of_flags  # studies/, beside this file

from ordergrad_trl.core.signal import carrying_counts, group_signal

ROOT = Path(__file__).resolve().parent
ASSETS = ROOT / "assets"
UNITS = ASSETS / "compare_crossover"
CALIBRATION = ASSETS / "digits20_calibration.json"
OUT_JSON, OUT_MD = ASSETS / "signal_crossover.json", ASSETS / "signal_crossover.md"
N, PROMPTS_PER_STEP = 16, 4
ARMS = ("max2", "max8", "maxrl", "curverl")
LABEL = {"max2": "Max@2", "max8": "Max@8", "maxrl": "MaxRL", "curverl": "CurveRL"}


def wilson(successes: int, total: int, z: float = 1.959963984540054) -> list[float]:
    centre = (successes + z * z / 2) / (total + z * z)
    half = z * math.sqrt(successes * (total - successes) / total + z * z / 4) / (total + z * z)
    return [centre - half, centre + half]


def predict(flags: list[str], counts: list[int]) -> dict:
    """Plug-in and count-based shares of groups with a gradient, from the histogram `counts` (problems per c)."""
    plan = plan_of_flags(flags, N)
    rates = torch.tensor([c / N for c, many in enumerate(counts) for _ in range(many)], dtype=torch.float64)
    plug_in = group_signal(plan, rates).nonzero.mean().item()
    kept = carrying_counts(plan)  # the crossover's arms are symmetric estimators: never None here
    from_counts = sum(counts[c] for c in kept) / sum(counts)
    return {"plug_in": plug_in, "from_counts": from_counts, "counts_with_gradient": kept}


def logged(units: list[dict]) -> dict:
    first = [1 - u["train_log"][0]["ordergrad/frac_zero_adv_groups"] for u in units]
    later = [1 - e["ordergrad/frac_zero_adv_groups"] for u in units for e in u["train_log"][1:]]
    groups = len(units) * PROMPTS_PER_STEP
    with_gradient = round(sum(first) * PROMPTS_PER_STEP)
    return {"step1": with_gradient / groups, "step1_groups": groups, "step1_ci": wilson(with_gradient, groups),
            "steps2_8": sum(later) / len(later)}


def build() -> dict:
    calibration = json.loads(CALIBRATION.read_text())
    counts = calibration["base_success_histogram"]
    units = load_units(UNITS)
    arms = {}
    for arm in ARMS:
        mine = [units[name] for name in sorted(units) if units[name]["arm"] == arm]
        arms[arm] = {"flags": mine[0]["train_flags"], "units": len(mine), **predict(mine[0]["train_flags"], counts),
                     **logged(mine)}  # fmt: skip
    return {"schema": 1, "task": "digits20", "num_generations": N, "prompts_per_step": PROMPTS_PER_STEP,
            "prediction_from": f"{CALIBRATION.relative_to(ROOT.parent)} (validation, {sum(counts)} problems x "
                               f"{calibration['num_samples']} samples)", "arms": arms}  # fmt: skip


def render(report: dict) -> str:
    lines = ["| arm | counts with a gradient (of 16) | predicted: plug-in | predicted: from counts | logged, step 1 "
             "[95% CI] | logged, steps 2-8 |", "|---|---|---|---|---|---|"]  # fmt: skip
    for arm, r in report["arms"].items():
        kept = r["counts_with_gradient"]
        span = f"{kept[0]}-{kept[-1]}" if kept == list(range(kept[0], kept[-1] + 1)) else ", ".join(map(str, kept))
        lo, hi = r["step1_ci"]
        lines.append(f"| {LABEL[arm]} | {span} | {r['plug_in']:.3f} | {r['from_counts']:.3f} | {r['step1']:.3f} "
                     f"[{lo:.3f}, {hi:.3f}] ({r['step1_groups']} groups) | {r['steps2_8']:.3f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    report = build()
    OUT_JSON.write_text(json.dumps(report, indent=2) + "\n")
    OUT_MD.write_text(f"# Predicted against logged share of groups with a gradient: the digits20 crossover\n\n"
                      f"Written by studies/signal_check.py; prediction from {report['prediction_from']}.\n\n"
                      + render(report) + "\n")  # fmt: skip
    print(render(report))


if __name__ == "__main__":
    main()
