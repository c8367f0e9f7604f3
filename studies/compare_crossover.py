"""The pre-registered crossover on `digits20` (Max@2 vs Max@8 at their own k) and CurveRL vs MaxRL, reported on its own.

Its plan: docs/results.md, "Pre-registration: the crossover on digits20, and CurveRL against MaxRL".

    python studies/compare_objectives.py --summarize --assets_dir studies/assets/compare_crossover

Three primary endpoints, paired by seed, each arm's value the mean over the 200 test problems of the U-statistic of
a problem's c correct of 16 samples: (i) pass@8(`max8`) - pass@8(`max2`), (ii) pass@2(`max2`) - pass@2(`max8`)
(together the crossover), (iii) pass@16(`curverl`) - pass@16(`maxrl`). Each gets a two-sided one-sample t test over
the seeds; Holm over the three at family-wise alpha 0.05; per endpoint confirmed / reversed / not confirmed as in the
head-to-head (`compare_headtohead.verdict`); the crossover is shown only if (i) and (ii) are both confirmed. The
tests run only once every seed is in (its four units, or the seed declared missing after `MAX_ATTEMPTS` recorded
failures in `<assets>_failures.json`); before that the report is an interim table without a p-value. The
reproduction unit (`max8` at the first seed, rerun at a later commit into `<assets>_repro/`) passes when its
training log (per-step reward and loss) equals the committed unit's and its eval's pass@1 differs from the
committed one by an amount whose 95% paired bootstrap interval over problems holds 0 (vLLM's CPU eval is seeded
but not reproducible run to run, docs/benchmarks.md, so equal counts are not expected).
"""

from __future__ import annotations

from pathlib import Path

import torch

from compare_headtohead import clause, endpoint_family, primary_tests
from compare_replication import _pts, pass_at_k, protocol_lines, write_report
from compare_seed_level import stable
from compare_summary import check_units, load_units
from unit_records import MAX_ATTEMPTS, design_status, read_failures, read_rerun, resumed_units  # noqa: F401
from ordergrad_trl.core.stats import bootstrap_ci

FIRST_SEED, NUM_SEEDS = 40, 20
SEEDS = tuple(range(FIRST_SEED, FIRST_SEED + NUM_SEEDS))
ARMS = ("max2", "max8", "maxrl", "curverl")
ALPHA, POWER = 0.05, 0.8
# (name, arm, minus, k): the endpoint is pass@k(arm) - pass@k(minus), paired by seed
ENDPOINTS = (("i", "max8", "max2", 8), ("ii", "max2", "max8", 2), ("iii", "curverl", "maxrl", 16))
REPRO_UNIT = f"max8-s{FIRST_SEED}"
LABEL = {"max2": "Max@2", "max8": "Max@8", "maxrl": "MaxRL", "curverl": "CurveRL"}


def _values(units: dict, seeds: list[int]) -> dict[str, list[float]]:
    return {name: [pass_at_k(units[f"{arm}-s{s}"], k) - pass_at_k(units[f"{minus}-s{s}"], k) for s in seeds]
            for name, arm, minus, k in ENDPOINTS}  # fmt: skip


def repro_check(units: dict, repro_dir: Path, commits: list[str], unit: str = REPRO_UNIT) -> dict:
    """`unit` rerun at a later commit: the same training trace (`unit_records.TRAIN_KEYS`), and an eval pass@1
    within sampling noise (a 95% paired bootstrap interval over the problems that holds 0)."""
    rerun = read_rerun(units.get(unit), repro_dir / f"{unit}.json", commits, rerun_at="later")
    if rerun is None:
        return {"unit": unit, "status": "not available"}
    if rerun.off_commit:
        return {"unit": unit, "status": "not available", "note": "the rerun ran at the design's own commit"}
    orig, same_training = rerun.original, rerun.same_training
    if rerun.counts["problems_differing"] is None:
        return {"unit": unit, "status": "failed", "note": "the rerun scored other problems"}
    n = orig["num_samples"]
    diff = (torch.tensor(rerun.rerun["eval"]["correct"]) - torch.tensor(orig["eval"]["correct"])).double() / n  # (P,)
    low, high = (x.item() for x in bootstrap_ci(diff, num_samples=10_000))
    ok = same_training and low <= 0 <= high
    return {"unit": unit, "status": "passed" if ok else "failed", "commit": rerun.commit,
            "same_training": same_training, "pass_at_1_difference": diff.mean().item(), "ci": [low, high]}


def crossover(assets: Path, repro_dir: Path | None = None) -> dict:
    units = load_units(assets) if assets.is_dir() else {}
    failures = read_failures(assets.parent / f"{assets.name}_failures.json")
    if units:
        check_units(units)
    status = design_status(units, ARMS, SEEDS, failures)
    done, commits, complete = status["done"], status["commits"], status["complete"]
    report = {
        "design": {"arms": list(ARMS), "seeds": list(SEEDS), "alpha": ALPHA, "correction": "Holm over the endpoints",
                   "endpoints": [{"name": n, "arm": a, "minus": m, "metric": f"pass@{k}"} for n, a, m, k in ENDPOINTS],
                   "test": "two-sided one-sample t test of mean = 0 over seeds, per endpoint"},
        "units": status["units"], "commits": commits, "failures": failures,
        "missing_seeds": status["missing_seeds"], "complete": complete, "resumed": resumed_units(units, status["expected"]),
    }  # fmt: skip
    if not complete or len(done) < 2:
        report["interim"] = {"seeds": len(done)}  # no value at all, not even per seed, until every unit is in
        return report
    values = _values(units, done)
    report["per_seed"] = [{"seed": s, **{f"{a} pass@{k}": pass_at_k(units[f"{a}-s{s}"], k) for a in ARMS
                                         for k in (1, 2, 8, 16)}, **{n: values[n][i] for n, *_ in ENDPOINTS}}
                          for i, s in enumerate(done)]  # fmt: skip
    report["tests"] = primary_tests(*endpoint_family(units, done, ENDPOINTS), ALPHA, POWER)
    report["crossover_shown"] = all(report["tests"][n]["verdict"] == "confirmed" for n in ("i", "ii"))
    report["reproduction_check"] = repro_check(units, repro_dir or assets.parent / f"{assets.name}_repro", commits)
    return report


def _clause(name: str, t: dict) -> str:
    _, arm, minus, k = next(e for e in ENDPOINTS if e[0] == name)
    return clause(LABEL[arm], LABEL[minus], k, t)


def readme_sentence(r: dict) -> str:
    """The README's sentence, one clause per endpoint, worded by its verdict as the pre-registration fixed it."""
    n = next(iter(r["tests"].values()))["n"]
    c = [_clause(name, r["tests"][name]) for name, *_ in ENDPOINTS]
    shown = "shown" if r["crossover_shown"] else "not shown"
    return (f"In a pre-registered study on the harder `digits20` task ({n} fresh seeds), the crossover was {shown}: "
            f"{c[0]}; {c[1]}. Against MaxRL, {c[2]}.")


def endpoint_lines(r: dict) -> list[str]:
    """One bullet per primary endpoint, every number of its test; docs/results.md quotes them verbatim."""
    lines = []
    for e in r["design"]["endpoints"]:
        t, det = r["tests"][e["name"]], r["tests"][e["name"]]["detectable"]
        lines.append(
            f"- **({e['name']}) {e['arm']} - {e['minus']} on {e['metric']}** over {t['n']} seeds: mean "
            f"{_pts(t['mean'])} points, 95% t CI [{_pts(t['ci'][0])}, {_pts(t['ci'][1])}], "
            f"{t['ci_adjusted_level']:.1%} t CI [{_pts(t['ci_adjusted'][0])}, {_pts(t['ci_adjusted'][1])}], "
            f"t = {t['t']:.2f}, p = {t['p']:.3g}, Holm p = {t['p_holm']:.3g}: **{t['verdict']}**; positive at "
            f"{t['above']} of {t['n']} seeds; detectable effect (80% power at alpha {ALPHA / len(ENDPOINTS):.4f}, "
            f"from the observed seed SD {stable(100 * det['sd']):.1f} points): {stable(100 * det['effect']):.1f} "
            f"points ({stable(100 * det['effect_range'][0]):.1f} to {stable(100 * det['effect_range'][1]):.1f}).")
    return lines


def repro_line(r: dict) -> str:
    check = r["reproduction_check"]
    return (f"Reproduction check ({check['unit']} at a later commit): {check['status']}"
            + (f" (same training trace: {check['same_training']}; pass@1 difference "
               f"{_pts(check['pass_at_1_difference'])} points [{_pts(check['ci'][0])}, {_pts(check['ci'][1])}])"
               if "ci" in check else "") + ".")  # fmt: skip


def table(r: dict) -> str:
    des, units = r["design"], r["units"]
    eps = "; ".join(f"({e['name']}) {e['arm']} - {e['minus']} on {e['metric']}" for e in des["endpoints"])
    lines = [f"**Pre-registered crossover** ({eps}; seeds {des['seeds'][0]}-{des['seeds'][-1]}; {des['test']}, "
             f"{des['correction']}, alpha {des['alpha']}): {units['present']} of {units['expected']} units in.", ""]
    lines += protocol_lines(r)
    if units["outside_the_design"]:
        lines.append(f"- Units outside the design: {', '.join(units['outside_the_design'])}.")
    if "tests" not in r:
        lines += ["", f"Interim: {r['interim']['seeds']} seeds complete. The pre-registered tests, and every per-seed "
                  f"value, are reported only when all {units['expected']} units are in (or a seed is declared missing "
                  "under the failure rule)."]
        return "\n".join(lines)
    head = [f"{a} pass@{k}" for k in (2, 8, 16) for a in ARMS if (a in ("max2", "max8")) == (k != 16)]
    lines += ["", "| seed | " + " | ".join(f"{h} (%)" for h in head) + " | (i) | (ii) | (iii) |",
              "|---" * (len(head) + 4) + "|"]
    for row in r["per_seed"]:
        cells = [f"{stable(100 * row[h]):.1f}" for h in head] + [_pts(row[n]) for n, *_ in ENDPOINTS]
        lines.append(f"| {row['seed']} | " + " | ".join(cells) + " |")
    lines += ["", *endpoint_lines(r), "", repro_line(r), "",
              f"README sentence, as pre-registered: \"{readme_sentence(r)}\""]
    return "\n".join(lines)


def summarize_crossover(assets: Path, repro_dir: Path | None = None) -> dict:
    """Writes `<assets>.json` and `<assets>.md` beside the units folder and prints the table."""
    report = crossover(assets, repro_dir)
    write_report(assets.parent / assets.name, report, table(report))
    return report
