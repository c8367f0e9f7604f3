"""The pre-registered refill study on `digits20`: RLOO, Max@2, Max@8 and Max@8 with refill, seeds 60-89.

Its plan is docs/results.md's "Does an order-statistic objective beat the mean under the fixed reward? And does
refill rescue Max@8?".

    python studies/compare_objectives.py --summarize --assets_dir studies/assets/compare_refill

Reads the units in `studies/assets/compare_refill/`; writes `compare_refill.json` and `compare_refill.md` beside it.
Until every unit is in (or its seed declared missing after three failures) the report holds no value at all, not
even per seed. Then, as pre-registered: the three primaries through `ordergrad-eval compare`'s seed-level contrasts
(a two-sided t test over seeds, Holm over the three: `compare_headtohead.primary_tests`), each with the exact
Wilcoxon signed-rank p and the sign-flip p beside it (robustness checks that change no verdict); every gain beside
its cost (refill's extra generation rounds per step and training wall time against Max@8's at the same seed; every
arm's pass@k and pass^k change against RLOO at every k, unadjusted); the planner's prediction scored against the
outcome (exploratory); the units resumed after an interruption; and the reproduction check of `max8_refill-s60`.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

import compare_crossover as cx  # studies/, beside this file
from compare_headtohead import endpoint_family, primary_tests
from compare_replication import _pts, pass_at_k, protocol_lines, write_report
from compare_seed_level import stable
from compare_summary import check_units, load_units
from unit_records import design_status, read_failures, resumed_units
from ordergrad_trl.core.stats import seed_t_test, sign_flip_pvalue, wilcoxon_exact
from ordergrad_trl.evaluation.compare_seeds import count_value

SEEDS = tuple(range(60, 90))
ARMS = ("rloo", "max2", "max8", "max8_refill")
ALPHA, POWER = 0.05, 0.8
# (name, arm, minus, k): the endpoint is pass@k(arm) - pass@k(minus), paired by seed
ENDPOINTS = (("i", "max2", "rloo", 8), ("ii", "rloo", "max2", 1), ("iii", "max8_refill", "max8", 8))
REPRO_UNIT = "max8_refill-s60"
LABEL = {"rloo": "RLOO", "max2": "Max@2", "max8": "Max@8", "max8_refill": "Max@8 with refill"}
KS = (1, 2, 4, 8, 16)
SIGN_FLIP_SAMPLES, SIGN_FLIP_SEED = 100_000, 0  # Monte Carlo past 16 nonzero differences (stats.sign_flip_pvalue)
ROUNDS = "ordergrad/dynamic_sampling/rounds"  # generation rounds of a step, the first included
# The planner's prediction, written before any unit (docs/results.md): the step signal orders
# max8_refill (by share) and rloo >= max2 > max8. Scored on its strict pairs, exploratory.
PREDICTED_PAIRS = (("max8_refill", "max8"), ("rloo", "max8"), ("max2", "max8"))


def robustness(per_seed: list[float]) -> dict:
    """The pre-registered checks beside an endpoint's t test: exact Wilcoxon signed-rank and sign-flip p."""
    p, exact = sign_flip_pvalue(torch.tensor(per_seed, dtype=torch.float64), SIGN_FLIP_SAMPLES, SIGN_FLIP_SEED)
    return {"wilcoxon": wilcoxon_exact(per_seed), "sign_flip": {
        "p": p.item(), "method": "exact" if exact else f"Monte Carlo, {SIGN_FLIP_SAMPLES} sign vectors, seed "
                                                       f"{SIGN_FLIP_SEED}"}}  # fmt: skip


def _value(unit: dict, key: str) -> float:
    return count_value(unit["eval"]["correct"], unit["num_samples"], key)


def _mean_rounds(unit: dict) -> float:
    rounds = [step[ROUNDS] for step in unit.get("train_log") or [] if step.get(ROUNDS) is not None]
    return sum(rounds) / len(rounds) if rounds else math.nan


def costs(units: dict, seeds: list[int]) -> dict:
    """Refill's cost per seed against Max@8's: extra generation rounds per step (rounds - 1, mean over steps) and
    training wall time (ratio to Max@8's; a resumed unit, which did not train in its recorded attempt, is left out)."""
    extra = [_mean_rounds(units[f"max8_refill-s{s}"]) - 1 for s in seeds]
    timed = [s for s in seeds if units[f"max8_refill-s{s}"].get("train_wall_s") and units[f"max8-s{s}"].get(
        "train_wall_s")]  # fmt: skip
    ratio = [units[f"max8_refill-s{s}"]["train_wall_s"] / units[f"max8-s{s}"]["train_wall_s"] for s in timed]
    seconds = {arm: sum(units[f"{arm}-s{s}"]["train_wall_s"] for s in timed) / len(timed) if timed else None
               for arm in ("max8", "max8_refill")}  # fmt: skip
    out = {"extra_rounds_per_step": {"per_seed": extra, "mean": sum(extra) / len(extra)},
           "train_wall_ratio": {"seeds": timed, "per_seed": ratio, "mean": sum(ratio) / len(ratio) if ratio else None,
                                "mean_seconds": seconds}}
    if len(ratio) >= 2:
        out["train_wall_ratio"]["ci"] = seed_t_test(torch.tensor(ratio, dtype=torch.float64))["ci"]
    return out


def changes(units: dict, seeds: list[int]) -> dict:
    """Every arm's pass@k and pass^k minus RLOO's at every k (per-seed paired t, unadjusted, exploratory)."""
    out = {}
    for arm in ARMS[1:]:
        out[arm] = {}
        for metric in ("pass@", "pass^"):
            for k in KS:
                d = [_value(units[f"{arm}-s{s}"], f"{metric}{k}") - _value(units[f"rloo-s{s}"], f"{metric}{k}")
                     for s in seeds]  # fmt: skip
                t = seed_t_test(torch.tensor(d, dtype=torch.float64))
                out[arm][f"{metric}{k}"] = {"mean": t["mean"], "ci": t["ci"], "p": t["p"]}
    return out


def planner_score(units: dict, seeds: list[int]) -> dict:
    """The planner's predicted pairs against each arm's mean pass@8 and pass@1 (exploratory: it decides nothing)."""
    means = {f"pass@{k}": {a: sum(pass_at_k(units[f"{a}-s{s}"], k) for s in seeds) / len(seeds) for a in ARMS}
             for k in (8, 1)}  # fmt: skip
    return {"pairs": [list(p) for p in PREDICTED_PAIRS], "means": means,
            "ranks": {m: sorted(ARMS, key=lambda a: -v[a]) for m, v in means.items()},  # best first
            "held": {m: [v[a] > v[b] for a, b in PREDICTED_PAIRS] for m, v in means.items()}}


def refill(assets: Path, repro_dir: Path | None = None) -> dict:
    units = load_units(assets) if assets.is_dir() else {}
    failures = read_failures(assets.parent / f"{assets.name}_failures.json")
    if units:
        check_units(units)
    status = design_status(units, ARMS, SEEDS, failures)
    done, commits, complete = status["done"], status["commits"], status["complete"]
    report = {
        "design": {"arms": list(ARMS), "seeds": list(SEEDS), "alpha": ALPHA, "correction": "Holm over the endpoints",
                   "endpoints": [{"name": n, "arm": a, "minus": m, "metric": f"pass@{k}"} for n, a, m, k in ENDPOINTS],
                   "test": "two-sided one-sample t test of mean = 0 over seeds, per endpoint",
                   "robustness": "exact Wilcoxon signed-rank p and sign-flip p beside each (change no verdict)"},
        "units": status["units"], "commits": commits, "failures": failures,
        "missing_seeds": status["missing_seeds"], "complete": complete, "resumed": resumed_units(units, status["expected"]),
    }  # fmt: skip
    if not complete or len(done) < 2:
        report["interim"] = {"seeds": len(done)}  # no value at all, not even per seed, until every unit is in
        return report
    values, contrasts = endpoint_family(units, done, ENDPOINTS)
    report["per_seed"] = [{"seed": s, **{f"{a} pass@{k}": pass_at_k(units[f"{a}-s{s}"], k) for a in ARMS
                                         for k in (1, 8)}} for s in done]  # fmt: skip
    report["tests"] = primary_tests(values, contrasts, ALPHA, POWER)
    for name, (arm, minus, metric) in contrasts.items():
        d = [x - y for x, y in zip(values[arm][metric], values[minus][metric])]
        report["tests"][name]["robustness"] = robustness(d)
    report["costs"] = costs(units, done)
    report["changes"] = changes(units, done)
    report["planner"] = planner_score(units, done)
    report["reproduction_check"] = cx.repro_check(units, repro_dir or assets.parent / f"{assets.name}_repro",
                                                  commits, unit=REPRO_UNIT)
    return report


def _p(p: float) -> str:
    return f"{p:.2g}"


def readme_sentence(r: dict) -> str:
    """The README's sentence as pre-registered, each clause worded by its verdict."""
    t, n = r["tests"], r["tests"]["i"]["n"]
    rounds = r["costs"]["extra_rounds_per_step"]["mean"]

    def ci(x):
        return f"[95% CI {_pts(x['ci'][0])}, {_pts(x['ci'][1])}] (Holm p = {_p(x['p_holm'])})"

    i = t["i"]
    if i["verdict"] == "not confirmed":
        first = f"Max@2's pass@8 over RLOO's was not confirmed: {_pts(i['mean'])} points {ci(i)}"
    else:
        first = (f"Max@2's pass@8 was {stable(100 * abs(i['mean'])):.1f} points "
                 f"{'above' if i['mean'] > 0 else 'below'} RLOO's {ci(i)}")
    ii = t["ii"]
    cost = (f"at a pass@1 cost of {_pts(ii['mean'])} points {ci(ii)}" if ii["verdict"] == "confirmed" else
            f"with a pass@1 cost not confirmed: {_pts(ii['mean'])} points {ci(ii)}" if ii["verdict"] == "not confirmed"
            else f"and pass@1 reversed, {_pts(-ii['mean'])} points in Max@2's favour {ci(ii)}")  # fmt: skip
    iii = t["iii"]
    moved = (f"refill moved Max@8's pass@8 by {_pts(iii['mean'])} points {ci(iii)}" if iii["verdict"] != "not confirmed"
             else f"refill's effect on Max@8's pass@8 was not confirmed: {_pts(iii['mean'])} points {ci(iii)}")
    return (f"In a pre-registered study on `digits20` ({n} fresh seeds), {first}, {cost}; {moved}, at "
            f"{stable(rounds):.2f} extra generation rounds per step.")


def endpoint_lines(r: dict) -> list[str]:
    lines = []
    for e in r["design"]["endpoints"]:
        t = r["tests"][e["name"]]
        det, rob = t["detectable"], t["robustness"]
        lines.append(
            f"- **({e['name']}) {e['arm']} - {e['minus']} on {e['metric']}** over {t['n']} seeds: mean "
            f"{_pts(t['mean'])} points, 95% t CI [{_pts(t['ci'][0])}, {_pts(t['ci'][1])}], "
            f"{t['ci_adjusted_level']:.1%} t CI [{_pts(t['ci_adjusted'][0])}, {_pts(t['ci_adjusted'][1])}], "
            f"t = {t['t']:.2f}, p = {t['p']:.3g}, Holm p = {t['p_holm']:.3g}: **{t['verdict']}**; positive at "
            f"{t['above']} of {t['n']} seeds; Wilcoxon signed-rank exact p = {rob['wilcoxon']['p']:.3g} "
            f"({rob['wilcoxon']['n']} nonzero{', ties' if rob['wilcoxon']['ties'] else ''}), sign-flip p = "
            f"{rob['sign_flip']['p']:.3g} ({rob['sign_flip']['method']}); detectable effect (80% power at alpha "
            f"{ALPHA / len(ENDPOINTS):.4f}, from the observed seed SD {stable(100 * det['sd']):.1f} points): "
            f"{stable(100 * det['effect']):.1f} points.")
    return lines


def table(r: dict) -> str:
    des, units = r["design"], r["units"]
    eps = "; ".join(f"({e['name']}) {e['arm']} - {e['minus']} on {e['metric']}" for e in des["endpoints"])
    lines = [f"**Pre-registered refill study** ({eps}; seeds {des['seeds'][0]}-{des['seeds'][-1]}; {des['test']}, "
             f"{des['correction']}, alpha {des['alpha']}; {des['robustness']}): {units['present']} of "
             f"{units['expected']} units in.", ""]  # fmt: skip
    lines += protocol_lines(r)
    if units["outside_the_design"]:
        lines.append(f"- Units outside the design: {', '.join(units['outside_the_design'])}.")
    if "tests" not in r:
        lines += ["", f"Interim: {r['interim']['seeds']} seeds complete. The pre-registered tests, and every per-seed "
                  f"value, are reported only when all {units['expected']} units are in (or a seed is declared missing "
                  "under the failure rule)."]
        return "\n".join(lines)
    head = [f"{a} pass@{k}" for k in (8, 1) for a in ARMS]
    lines += ["", "| seed | " + " | ".join(f"{h} (%)" for h in head) + " |", "|---" * (len(head) + 1) + "|"]
    for row in r["per_seed"]:
        lines.append(f"| {row['seed']} | " + " | ".join(f"{stable(100 * row[h]):.1f}" for h in head) + " |")
    c = r["costs"]
    wall = c["train_wall_ratio"]
    sec = wall["mean_seconds"]
    wall_text = (f"{wall['mean']:.2f}x Max@8's" + (f" [95% t CI {wall['ci'][0]:.2f}, {wall['ci'][1]:.2f}]"
                 if "ci" in wall else "") + f" over {len(wall['seeds'])} seeds (mean {sec['max8_refill']:.0f} s "
                 f"against {sec['max8']:.0f} s)" if wall["mean"] is not None
                 else "not measured (every unit resumed)")  # fmt: skip
    lines += ["", *endpoint_lines(r), "",
              f"**Cost of refill** (reported, not tested): {stable(c['extra_rounds_per_step']['mean']):.2f} extra "
              f"generation rounds per step (mean over seeds and steps); training wall time {wall_text}.", "",
              "**Every arm against RLOO** (per-seed paired mean, points, 95% t CI, unadjusted; exploratory):", "",
              "| arm | " + " | ".join(f"{m}{k}" for m in ("pass@", "pass^") for k in KS) + " |",
              "|---" * (1 + 2 * len(KS)) + "|"]
    for arm, row in r["changes"].items():
        lines.append(f"| {arm} | " + " | ".join(f"{_pts(e['mean'])} [{_pts(e['ci'][0])}, {_pts(e['ci'][1])}]"
                                                 for e in row.values()) + " |")  # fmt: skip
    pl = r["planner"]
    pairs = ", ".join(f"{a} > {b}" for a, b in pl["pairs"])
    held = "; ".join(f"on {m}: {sum(h)} of {len(h)}" for m, h in pl["held"].items())
    ranks = "; ".join(f"{m}: {' > '.join(order)}" for m, order in pl["ranks"].items())
    lines += ["", f"**The planner's prediction, scored** (exploratory; it decides nothing): of its strict pairs "
              f"({pairs}), the arms' mean values held {held}. Observed order ({ranks}).", "", cx.repro_line(r), "",
              f"README sentence, as pre-registered: \"{readme_sentence(r)}\""]
    return "\n".join(lines)


def summarize_refill(assets: Path, repro_dir: Path | None = None) -> dict:
    """Writes `<assets>.json` and `<assets>.md` beside the units folder and prints the table."""
    report = refill(assets, repro_dir)
    write_report(assets.parent / assets.name, report, table(report))
    return report
