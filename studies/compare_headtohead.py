"""The pre-registered head-to-head (Max@8 vs MaxRL, seeds 25-39, two primaries, Holm), reported on its own.

Its plan: docs/results.md, "Pre-registration: Max@8 vs MaxRL head-to-head on fresh seeds 25-39".

    python studies/compare_objectives.py --summarize --assets_dir studies/assets/compare_objectives_headtohead

Two primary endpoints, paired by seed s = 25..39, each arm's value the mean over the 200 problems of the
U-statistic of a problem's c correct of 16 samples: (i) d_s = pass@8(`max8`) - pass@8(`maxrl`) and
(ii) e_s = pass@1(`maxrl`) - pass@1(`max8`). Each gets a two-sided one-sample t test over the seeds; Holm over the
two at family-wise alpha 0.05. Per endpoint: confirmed if the Holm p < 0.05 and the mean > 0, reversed if the Holm
p < 0.05 and the mean < 0, else not confirmed. The tests run only once every seed is in (both units, or the seed
declared missing after `MAX_ATTEMPTS` recorded failures in `<assets>_failures.json`); before that the report is
an interim table without a p-value. Also reported: the seeds where either arm's pass@8 is at the ceiling (none
excluded), each endpoint's detectable effect, and, exploratory, seeds 10-39 pooled with the replication's units of
both arms, valid only if the reproduction check passes (`max8-s10` and `maxrl-s10` rerun at this design's commit
into `<assets>_repro/`, every per-problem count equal to the committed unit's). Post hoc, beside the pooled result:
whether the two sets of seeds agree on each endpoint (`between_sets`: Welch's test and a DerSimonian-Laird
random-effects interval), and which arm was at the ceiling at each ceiling seed.
"""

from __future__ import annotations

from pathlib import Path

import torch

from compare_replication import _pts, pass_at_k, protocol_lines, write_report
from compare_seed_level import CEILING, detectable, random_effects, stable, welch_test
from compare_summary import check_units, load_units
from unit_records import design_status, read_failures, read_rerun
from ordergrad_trl.core.stats import seed_t_test
from ordergrad_trl.evaluation.compare_seeds import seed_contrasts

SEEDS = tuple(range(25, 40))
ARMS = ("max8", "maxrl")
ALPHA, POWER = 0.05, 0.8
# (name, arm, minus, k): the endpoint is pass@k(arm) - pass@k(minus), paired by seed
ENDPOINTS = (("i", "max8", "maxrl", 8), ("ii", "maxrl", "max8", 1))
REPRO_UNITS = ("max8-s10", "maxrl-s10")  # from the replication's folder, rerun at this design's commit
LABEL = {"max8": "Max@8", "maxrl": "MaxRL"}


def verdict(mean: float, p_holm: float, alpha: float = ALPHA) -> str:
    if p_holm < alpha:
        return "confirmed" if mean > 0 else "reversed"
    return "not confirmed"


def endpoint_family(units: dict, seeds: list[int], endpoints=ENDPOINTS) -> tuple[dict, dict]:
    """The endpoints `(name, arm, minus, k)` as `ordergrad-eval compare --groups --contrasts` takes them:
    ({arm: {"pass@k": per-seed values}}, {name: (arm, minus, "pass@k")}), seeds paired by position."""
    values: dict[str, dict[str, list[float]]] = {}
    for _, arm, minus, k in endpoints:
        for a in (arm, minus):
            values.setdefault(a, {})[f"pass@{k}"] = [pass_at_k(units[f"{a}-s{s}"], k) for s in seeds]
    return values, {name: (arm, minus, f"pass@{k}") for name, arm, minus, k in endpoints}


def primary_tests(values: dict, contrasts: dict, alpha: float = ALPHA, power: float = POWER) -> dict:
    """Per endpoint (`endpoint_family`): the one-sample t test over seeds and Holm over the endpoints (compare's
    seed-level contrasts, the one implementation), the verdict, the Bonferroni interval that goes with Holm's first
    step, the seeds above 0 and the detectable effect."""
    tests = seed_contrasts(values, contrasts, alpha)
    out = {}
    for name, t in tests.items():
        d = t.pop("per_seed")
        out[name] = {**t, "verdict": verdict(t["mean"], t["p_holm"], alpha), "above": sum(v > 0 for v in d),
                     "detectable": detectable(t["sd"], t["n"], alpha / len(tests), power)}
    return out


def _endpoint_values(units: dict, seeds: list[int]) -> dict[str, list[float]]:
    return {name: [pass_at_k(units[f"{arm}-s{s}"], k) - pass_at_k(units[f"{minus}-s{s}"], k) for s in seeds]
            for name, arm, minus, k in ENDPOINTS}  # fmt: skip


def repro_check(replication: dict, repro_dir: Path, commits: list[str]) -> dict:
    """Each of `REPRO_UNITS` rerun at the design's commit: the same correct count on every problem?"""
    out = {"units": list(REPRO_UNITS), "path": f"{repro_dir.name}/", "per_unit": {}}
    for name in REPRO_UNITS:
        rerun = read_rerun(replication.get(name), repro_dir / f"{name}.json", commits, rerun_at="design")
        if rerun is None:
            out["per_unit"][name] = {"status": "not available"}
            continue
        if rerun.off_commit:
            out["per_unit"][name] = {"status": "not available", "note": f"the rerun ran at {rerun.commit}"}
            continue
        result = rerun.counts
        out["per_unit"][name] = {"status": result["status"], "commit": rerun.commit,
                                 "original_commit": rerun.original.get("commit"),
                                 "problems_differing": result["problems_differing"]}  # fmt: skip
    statuses = {e["status"] for e in out["per_unit"].values()}
    out["status"] = "passed" if statuses == {"passed"} else "failed" if "failed" in statuses else "not available"
    return out


def headtohead(assets: Path, replication_dir: Path | None = None, repro_dir: Path | None = None) -> dict:
    units = load_units(assets) if assets.is_dir() else {}
    failures = read_failures(assets.parent / f"{assets.name}_failures.json")
    if units:
        check_units(units)
    status = design_status(units, ARMS, SEEDS, failures)
    expected, done, commits = status["expected"], status["done"], status["commits"]
    values = _endpoint_values(units, done)
    p8 = {u: pass_at_k(units[u], 8) for u in expected if u in units}
    at_ceiling = sorted({int(u.rsplit("-s", 1)[1]) for u, v in p8.items() if v >= CEILING})
    alone = {arm: [s for s in done if p8[f"{arm}-s{s}"] >= CEILING > p8[f"{ARMS[1 - i]}-s{s}"]]
             for i, arm in enumerate(ARMS)}  # fmt: skip
    rest = [values["i"][i] for i, s in enumerate(done) if s not in alone["maxrl"]]
    complete = status["complete"]
    report = {
        "design": {"arms": list(ARMS), "seeds": list(SEEDS), "alpha": ALPHA, "correction": "Holm over the endpoints",
                   "endpoints": [{"name": n, "arm": a, "minus": m, "metric": f"pass@{k}"} for n, a, m, k in ENDPOINTS],
                   "test": "two-sided one-sample t test of mean = 0 over seeds, per endpoint"},
        "units": status["units"], "commits": commits, "failures": failures, "missing_seeds": status["missing_seeds"],
        "per_seed": [{"seed": s, **{f"{a} pass@{k}": pass_at_k(units[f"{a}-s{s}"], k) for a in ARMS for k in (8, 1)},
                      **{n: values[n][i] for n, *_ in ENDPOINTS}} for i, s in enumerate(done)],
        "ceiling": {"threshold": CEILING, "metric": "pass@8 of either arm", "seeds": at_ceiling,
                    "both": [s for s in at_ceiling if s in done and s not in alone["max8"] + alone["maxrl"]],
                    "alone": alone, "i_where_maxrl_alone": [values["i"][done.index(s)] for s in alone["maxrl"]],
                    "i_mean_elsewhere": sum(rest) / len(rest) if rest else None},
        "complete": complete,
    }  # fmt: skip
    if not complete or len(done) < 2:
        report["interim"] = {"pairs": len(done), "means": {n: sum(v) / len(v) if v else None for n, v in values.items()}}
        return report
    report["tests"] = primary_tests(*endpoint_family(units, done))
    if replication_dir and replication_dir.is_dir():
        old_units = load_units(replication_dir)
        old = [s for s in sorted({u["seed"] for u in old_units.values() if u["seed"] is not None})
               if all(f"{arm}-s{s}" in old_units for arm in ARMS)]  # fmt: skip
        old_values = _endpoint_values(old_units, old)
        check = repro_check(old_units, repro_dir or assets.parent / f"{assets.name}_repro", commits)
        report["pooled"] = {"seeds": old + done, "reproduction_check": check, "commits": sorted(
            {old_units[f"{a}-s{s}"].get("commit", "unknown") for s in old for a in ARMS} | set(commits)),
            **{n: seed_t_test(torch.tensor(old_values[n] + values[n], dtype=torch.float64)) for n in values}}  # fmt: skip
        if len(old) >= 2:
            report["between_sets"] = between_sets((old_units, old, old_values), (units, done, values))
    return report


def between_sets(*sets: tuple[dict, list[int], dict]) -> dict:
    """Post hoc: do the sets of seeds (each `(units, seeds, endpoint values)`) agree on each endpoint? Per set, the
    mean and seed SD of the endpoint and each arm's mean on its metric; Welch's test of the first two sets' means;
    and a DerSimonian-Laird random-effects interval over the sets (each set's mean with its own seed-level variance),
    the interval to read beside the pooled t, which treats the sets as one."""
    out = {}
    for name, _, _, k in ENDPOINTS:
        rows = []
        for units, seeds, values in sets:
            t = seed_t_test(torch.tensor(values[name], dtype=torch.float64))
            rows.append({"seeds": seeds, "mean": t["mean"], "sd": t["sd"], "n": t["n"], "ci": t["ci"],
                         f"pass@{k}": {a: sum(pass_at_k(units[f"{a}-s{s}"], k) for s in seeds) / len(seeds)
                                       for a in ARMS}})  # fmt: skip
        out[name] = {"sets": rows, "welch": welch_test(sets[0][2][name], sets[1][2][name]),
                     "random_effects": random_effects([r["mean"] for r in rows], [r["sd"] ** 2 / r["n"] for r in rows])}  # fmt: skip
    return out


def _clause(name: str, t: dict) -> str:
    _, arm, minus, k = next(e for e in ENDPOINTS if e[0] == name)
    return clause(LABEL[arm], LABEL[minus], k, t)


def clause(a: str, b: str, k: int, t: dict) -> str:
    """One endpoint's README clause, `a`'s pass@k minus `b`'s, worded by its verdict."""
    x = f"{stable(100 * abs(t['mean'])):.1f} points"
    ci = f"[95% CI {_pts(t['ci'][0])}, {_pts(t['ci'][1])}] (Holm p = {t['p_holm']:.2g})"
    if t["verdict"] == "confirmed":
        return f"{a}'s pass@{k} was {x} above {b}'s {ci}"
    if t["verdict"] == "reversed":
        return f"{a}'s pass@{k} was {x} below {b}'s, the reverse of the tested direction {ci}"
    return f"{a}'s pass@{k} over {b}'s was not confirmed: {_pts(t['mean'])} points {ci}"


def readme_sentence(r: dict) -> str:
    """The README's sentence, one clause per endpoint, worded by its verdict as the pre-registration fixed it."""
    n = next(iter(r["tests"].values()))["n"]
    clauses = [_clause(name, r["tests"][name]) for name, *_ in ENDPOINTS]
    return f"In a pre-registered head-to-head on {n} fresh seeds, {clauses[0]}; {clauses[1]}."


def table(r: dict) -> str:
    des, units = r["design"], r["units"]
    eps = "; ".join(f"({e['name']}) {e['arm']} - {e['minus']} on {e['metric']}" for e in des["endpoints"])
    lines = [f"**Pre-registered head-to-head** ({eps}; seeds {des['seeds'][0]}-{des['seeds'][-1]}; {des['test']}, "
             f"{des['correction']}, alpha {des['alpha']}): {units['present']} of {units['expected']} units in.", ""]  # fmt: skip
    lines += protocol_lines(r)
    if units["outside_the_design"]:
        lines.append(f"- Units outside the design: {', '.join(units['outside_the_design'])}.")
    c = r["ceiling"]
    where = f"at seeds {', '.join(map(str, c['seeds']))}" if c["seeds"] else "at no seed"
    lines.append(f"- Ceiling: {c['metric']} >= {c['threshold']:.0%} {where}; none is excluded.")
    if c["seeds"] and "both" in c:
        only = "; ".join(f"{a} alone at {', '.join(map(str, c['alone'][a])) or 'none'}" for a in ARMS)
        per = ", ".join(_pts(x) for x in c["i_where_maxrl_alone"])
        lines.append(f"  Both arms at {', '.join(map(str, c['both'])) or 'none'}; {only}. (i) where maxrl alone: "
                     f"{per or '-'} points; (i) mean at the other seeds: "
                     + (f"{_pts(c['i_mean_elsewhere'])} points." if c["i_mean_elsewhere"] is not None else "-."))  # fmt: skip
    lines += ["", "| seed | max8 pass@8 (%) | maxrl pass@8 (%) | (i) (points) | max8 pass@1 (%) | maxrl pass@1 (%) | "
              "(ii) (points) |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in r["per_seed"]:
        lines.append(f"| {row['seed']} | {stable(100 * row['max8 pass@8']):.1f} | {stable(100 * row['maxrl pass@8']):.1f} | "
                     f"{_pts(row['i'])} | {stable(100 * row['max8 pass@1']):.1f} | {stable(100 * row['maxrl pass@1']):.1f} | "
                     f"{_pts(row['ii'])} |")  # fmt: skip
    lines.append("")
    if "tests" not in r:
        means = ", ".join(f"({n}) {_pts(m)} points" for n, m in r["interim"]["means"].items() if m is not None)
        lines.append(f"Interim, descriptive only: {r['interim']['pairs']} complete pairs" + (f", mean {means}" if means
                     else "") + f". The pre-registered tests run only when all {units['expected']} units are in (or a "
                     "seed is declared missing under the failure rule); no p-value or interval is reported before "
                     "that.")  # fmt: skip
        return "\n".join(lines)
    for e in des["endpoints"]:
        t = r["tests"][e["name"]]
        det = t["detectable"]
        lines.append(f"- **({e['name']}) {e['arm']} - {e['minus']} on {e['metric']}** over {t['n']} seeds: mean "
                     f"{_pts(t['mean'])} points, 95% t CI [{_pts(t['ci'][0])}, {_pts(t['ci'][1])}], "
                     f"{t['ci_adjusted_level']:.1%} t CI [{_pts(t['ci_adjusted'][0])}, {_pts(t['ci_adjusted'][1])}], "
                     f"t = {t['t']:.2f}, p = {t['p']:.3g}, Holm p = {t['p_holm']:.3g}: **{t['verdict']}**; positive at "
                     f"{t['above']} of {t['n']} seeds; detectable effect (80% power at alpha {ALPHA / 2}, from the "
                     f"observed seed SD {stable(100 * det['sd']):.1f} points): {stable(100 * det['effect']):.1f} points "
                     f"({stable(100 * det['effect_range'][0]):.1f} to {stable(100 * det['effect_range'][1]):.1f}).")  # fmt: skip
    lines += ["", f"README sentence, as pre-registered: \"{readme_sentence(r)}\""]
    if "pooled" in r:
        p, check = r["pooled"], r["pooled"]["reproduction_check"]
        parts = "; ".join(f"({n}) {_pts(p[n]['mean'])} [{_pts(p[n]['ci'][0])}, {_pts(p[n]['ci'][1])}], p = "
                          f"{p[n]['p']:.3g}" for n, *_ in ENDPOINTS)  # fmt: skip
        per_unit = ", ".join(f"{u} {e['status']}" for u, e in check["per_unit"].items())
        lines += ["", f"Exploratory (not the pre-registered tests): seeds {p['seeds'][0]}-{p['seeds'][-1]} pooled with "
                  f"the replication's units ({len(p['seeds'])} seeds; commits {', '.join(c[:7] for c in p['commits'])}): "
                  f"{parts}. Valid only if the reproduction check passes: {check['status']} ({per_unit})."]  # fmt: skip
    for name, b in r.get("between_sets", {}).items():
        e = next(e for e in des["endpoints"] if e["name"] == name)
        w, re_ = b["welch"], b["random_effects"]
        per = "; ".join(f"seeds {x['seeds'][0]}-{x['seeds'][-1]} {_pts(x['mean'])} [{_pts(x['ci'][0])}, "
                        f"{_pts(x['ci'][1])}] ({', '.join(f'{a} {stable(100 * v):.1f}%' for a, v in x[e['metric']].items())})"
                        for x in b["sets"])  # fmt: skip
        lines += ["", f"Post hoc, between the sets of seeds, ({name}) {e['arm']} - {e['minus']} on {e['metric']}: {per}; "
                  f"Welch t = {w['t']:.2f} ({w['df']:.1f} df), p = {w['p']:.2g}; DerSimonian-Laird random-effects "
                  f"{re_['level']:.0%} interval {_pts(re_['mean'])} [{_pts(re_['ci'][0])}, {_pts(re_['ci'][1])}] "
                  f"(between-set SD {stable(100 * re_['tau']):.1f} points)."]  # fmt: skip
    return "\n".join(lines)


def summarize_headtohead(assets: Path, replication_dir: Path | None = None, repro_dir: Path | None = None) -> dict:
    """Writes `<assets>.json` and `<assets>.md` beside the units folder and prints the table."""
    report = headtohead(assets, replication_dir, repro_dir)
    write_report(assets.parent / assets.name, report, table(report))
    return report
