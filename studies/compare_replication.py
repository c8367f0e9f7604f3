"""The pre-registered confirmatory replication (Max@8 vs RLOO on pass@8, seeds 10-24), reported on its own.

Its plan: docs/results.md, "Pre-registration: a confirmatory replication on fresh seeds 10-24".

    python studies/compare_objectives.py --summarize --assets_dir studies/assets/compare_objectives_replication

One primary endpoint, d_s = pass@8(`max8`, s) - pass@8(`rloo`, s) for s = 10..24 (each the mean over the 200
problems of 1 - C(16-c,8)/C(16,8)); a two-sided one-sample t test of mean(d) = 0 over the seeds, alpha 0.05, no
correction, with its 95% t interval. Confirmed: p < 0.05 and mean > 0; a reversal: p < 0.05 and mean < 0; else not
confirmed. The test runs only once every seed is in (both units, or the seed declared missing after
`MAX_ATTEMPTS` recorded failures); before that the report is an interim, descriptive table without a p-value.

Failures are not in the unit files (a unit's JSON is written only when it finishes): whoever reruns a failed unit
records each failed attempt in `<assets>_failures.json` beside the units folder, a list of
{"unit": "max8-s12", "error": "..."}; the report lists them. Also reported: the seeds where RLOO's pass@8 is at
the ceiling (>= 98%; none excluded), the effect the test detects with 80% power computed from the observed seed SD
with its range over that SD's 95% chi-square interval, the reproduction check (the committed ten-seed unit
`rloo-s9` rerun at the replication's commit, `<ten_seed>_repro/rloo-s9.json`, must give the same per-problem
counts), and, exploratory, the same test on seeds 0-24 pooled with the ten-seed units.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from compare_seed_level import CEILING, detectable, stable
from compare_summary import check_units, load_units
from unit_records import MAX_ATTEMPTS, design_status, read_failures, read_rerun
from ordergrad_trl.core.stats import seed_t_test
from ordergrad_trl.evaluation.compare_seeds import count_value

ARM, BASELINE, K = "max8", "rloo", 8
SEEDS = tuple(range(10, 25))
ALPHA, POWER = 0.05, 0.8
REPRO_UNIT = "rloo-s9"
EXPLORATORY = ("maxrl",)  # arms run at the same seeds, reported apart from the test (studies/compare_objectives.py)


def pass_at_k(unit: dict, k: int = K) -> float:
    """A unit's pass@k: the mean over its problems of the unbiased estimate from c correct of n samples."""
    return count_value(unit["eval"]["correct"], unit["num_samples"], f"pass@{k}")


def verdict(test: dict, alpha: float = ALPHA) -> str:
    if test["p"] < alpha:
        return "confirmed" if test["mean"] > 0 else "reversal"
    return "not confirmed"


def _pairs(units: dict, seeds) -> tuple[list[int], list[float], list[float]]:
    """The seeds with both units, and each arm's pass@8 there."""
    done = [s for s in seeds if f"{ARM}-s{s}" in units and f"{BASELINE}-s{s}" in units]
    return done, [pass_at_k(units[f"{BASELINE}-s{s}"]) for s in done], [pass_at_k(units[f"{ARM}-s{s}"]) for s in done]


def replace_whole(path: Path, text: str) -> None:
    """Writes `path` through a temporary file beside it: a reader, or a second run at once, never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_report(base: Path, report: dict, text: str) -> None:
    """`<base>.json` and `<base>.md`, each replaced whole, and the table printed."""
    for suffix, content in ((".json", json.dumps(report, indent=1)), (".md", text)):
        replace_whole(base.with_name(base.name + suffix), content + "\n")
    print(text)


def repro_check(ten_seed: dict, repro_path: Path, commits: list[str]) -> dict:
    """The committed `rloo-s9` rerun at the replication's commit: the same correct count on every problem?"""
    out = {"unit": REPRO_UNIT, "path": f"{repro_path.parent.name}/{repro_path.name}"}  # no machine's absolute path
    rerun = read_rerun(ten_seed.get(REPRO_UNIT), repro_path, commits, rerun_at="design")
    if rerun is None:
        return {**out, "status": "not available"}
    if rerun.off_commit:
        return {**out, "status": "not available", "note": f"the rerun ran at {rerun.commit}, not {commits}"}
    result = rerun.counts
    return {**out, "status": result["status"], "commit": rerun.commit,
            "problems_differing": result["problems_differing"]}  # fmt: skip


def exploratory_arm(units: dict, arm: str) -> dict:
    """An arm outside the pre-registered design (e.g. `maxrl`, issue 29) against both design arms on pass@8, paired
    by seed: per-seed values always, the mean and 95% t interval only once the arm has every seed (no test is
    pre-registered for it, so no verdict)."""
    seeds = [s for s in SEEDS if f"{arm}-s{s}" in units]
    out = {"seeds": seeds, "commits": sorted({units[f"{arm}-s{s}"].get("commit", "unknown") for s in seeds}),
           "pass@8": {s: pass_at_k(units[f"{arm}-s{s}"]) for s in seeds}, "minus": {}}  # fmt: skip
    for ref in (BASELINE, ARM):
        paired = [s for s in seeds if f"{ref}-s{s}" in units]
        d = [out["pass@8"][s] - pass_at_k(units[f"{ref}-s{s}"]) for s in paired]
        entry = {"seeds": paired, "d": d, "mean": sum(d) / len(d) if d else None}
        if len(paired) == len(SEEDS):  # descriptive: no test was pre-registered for it, so nothing is adjusted
            test = seed_t_test(torch.tensor(d, dtype=torch.float64))
            test["p_unadjusted"] = test.pop("p")
            entry.update(test, inference="exploratory: unadjusted 95% t interval and p, no verdict")
        out["minus"][ref] = entry
    return out


def replication(assets: Path, ten_seed_dir: Path | None = None, repro_path: Path | None = None) -> dict:
    units = load_units(assets) if assets.is_dir() else {}
    failures = read_failures(assets.parent / f"{assets.name}_failures.json")
    status = design_status(units, (BASELINE, ARM), SEEDS, failures)
    ten_seed = load_units(ten_seed_dir) if ten_seed_dir and ten_seed_dir.is_dir() else {}
    if units:
        check_units({**{u: v for u, v in ten_seed.items() if u != "base"}, **units})  # the same protocol as ten seeds
    done, base, arm = _pairs(units, SEEDS)
    d = [y - x for x, y in zip(base, arm)]
    commits = status["commits"]
    rloo_present = [s for s in SEEDS if f"{BASELINE}-s{s}" in units]
    at_ceiling = [s for s in rloo_present if pass_at_k(units[f"{BASELINE}-s{s}"]) >= CEILING]
    complete = status["complete"]  # (the seeds with both units are `_pairs`' done)
    report = {
        "design": {"arm": ARM, "baseline": BASELINE, "endpoint": f"pass@{K}", "seeds": list(SEEDS), "alpha": ALPHA,
                   "test": "two-sided one-sample t test of mean(d) = 0 over seeds, no correction"},
        "units": status["units"], "commits": commits, "failures": failures, "missing_seeds": status["missing_seeds"],
        "per_seed": [{"seed": s, BASELINE: x, ARM: y, "d": y - x} for s, x, y in zip(done, base, arm)],
        "ceiling": {"threshold": CEILING, "seeds": at_ceiling, "of": len(rloo_present)},
        "complete": complete,
    }  # fmt: skip
    extra = sorted({units[u]["arm"] for u in report["units"]["outside_the_design"]} & set(EXPLORATORY))
    if extra:
        report["exploratory_arms"] = {a: exploratory_arm(units, a) for a in extra}
    if not complete or len(d) < 2:
        report["interim"] = {"pairs": len(d), "mean": sum(d) / len(d) if d else None}
        return report
    test = seed_t_test(torch.tensor(d, dtype=torch.float64))
    report["test"] = {**test, "verdict": verdict(test)}
    report["detectable"] = detectable(test["sd"], test["n"], ALPHA, POWER)
    if ten_seed:
        repro = repro_path or ten_seed_dir.parent / f"{ten_seed_dir.name}_repro" / f"{REPRO_UNIT}.json"
        old, old_base, old_arm = _pairs(ten_seed, sorted({u["seed"] for u in ten_seed.values() if u["seed"] is not None}))
        pooled_d = [y - x for x, y in zip(old_base, old_arm)] + d
        pooled_base = old_base + base
        report["pooled"] = {"seeds": old + done, **seed_t_test(torch.tensor(pooled_d, dtype=torch.float64)),
                            "ceiling_seeds": [s for s, x in zip(old + done, pooled_base) if x >= CEILING],
                            "reproduction_check": repro_check(ten_seed, repro, commits)}  # fmt: skip
    return report


def readme_sentence(r: dict) -> str:
    """The README's sentence for each outcome, worded as the pre-registration fixed it."""
    t = r["test"]
    x, ci = f"{stable(100 * abs(t['mean'])):.1f} points [95% CI {_pts(t['ci'][0])}, {_pts(t['ci'][1])}] (p = {t['p']:.2g})", t["ci"]
    n = f"{t['n']} fresh seeds"
    if t["verdict"] == "confirmed":
        return f"In a pre-registered replication on {n}, Max@8 raised pass@8 over RLOO by {x}."
    if t["verdict"] == "reversal":
        return f"A pre-registered replication on {n} reversed Max@8's pass@8 gain over RLOO: it was lower by {x}."
    return (f"A pre-registered replication on {n} did not confirm Max@8's pass@8 gain over RLOO: {_pts(t['mean'])} "
            f"points [95% CI {_pts(ci[0])}, {_pts(ci[1])}] (p = {t['p']:.2g}); the ten-seed result stays not established.")


def _pts(x: float) -> str:
    """x in signed points; a nonzero value that would print as 0.0 keeps two decimals (-0.025: "-0.02", not "-0.0")."""
    x = stable(100 * x)
    return f"{x:+.2f}" if 0 < abs(x) < 0.05 else f"{x:+.1f}"


def protocol_lines(r: dict) -> list[str]:
    """A pre-registered report's first bullets: the commits its units ran at, the failed attempts, missing seeds."""
    commits = (" More than one commit, or a dirty tree: not the pre-registered protocol." if len(r["commits"]) > 1
               or any(c.endswith("+dirty") for c in r["commits"]) else "")  # fmt: skip
    fails = ", ".join(f"{f['unit']} ({f.get('error', 'no message')})" for f in r["failures"]) or "none recorded"
    missing = f" Seeds reported missing after {MAX_ATTEMPTS} failures: {r['missing_seeds']}." if r["missing_seeds"] else ""
    lines = [f"- Units ran at: {', '.join(r['commits']) or '-'}.{commits}",
             f"- Failed attempts (each is rerun at the same seed): {fails}.{missing}"]
    if "resumed" in r:  # reports written before it was recorded do not list it
        lines.append(f"- Units resumed after an interruption (trained in an earlier attempt, then evaluated): "
                     f"{', '.join(r['resumed']) or 'none'}.")
    return lines


def table(r: dict) -> str:
    des, units = r["design"], r["units"]
    lines = [f"**Pre-registered replication** ({des['arm']} - {des['baseline']} on {des['endpoint']}, seeds "
             f"{des['seeds'][0]}-{des['seeds'][-1]}; {des['test']}, alpha {des['alpha']}): "
             f"{units['present']} of {units['expected']} units in.", ""]  # fmt: skip
    lines += protocol_lines(r)
    if units["outside_the_design"]:
        lines.append(f"- Units outside the pre-registered test (exploratory): {', '.join(units['outside_the_design'])}.")
    c = r["ceiling"]
    lines.append(f"- Ceiling: {des['baseline'].upper()}'s {des['endpoint']} >= {c['threshold']:.0%} at {len(c['seeds'])} "
                 f"of {c['of']} seeds ({', '.join(map(str, c['seeds'])) or 'none'}); none is excluded.")  # fmt: skip
    lines += ["", f"| seed | {des['baseline']} {des['endpoint']} (%) | {des['arm']} {des['endpoint']} (%) | d (points) |",
              "|---|---|---|---|"]  # fmt: skip
    for row in r["per_seed"]:
        lines.append(f"| {row['seed']} | {stable(100 * row[des['baseline']]):.1f} | {stable(100 * row[des['arm']]):.1f} | {_pts(row['d'])} |")
    lines.append("")
    for arm, e in r.get("exploratory_arms", {}).items():
        parts = []
        for ref, m in e["minus"].items():
            if m["mean"] is None:
                continue
            ci = f", unadjusted 95% t CI [{_pts(m['ci'][0])}, {_pts(m['ci'][1])}]" if "ci" in m else ""
            parts.append(f"minus {ref} {_pts(m['mean'])} points over {len(m['seeds'])} seeds{ci}")
        lines.append(f"- Exploratory arm `{arm}` (not pre-registered, no test; ran at {', '.join(e['commits'])}): "
                     f"{len(e['seeds'])} of {len(SEEDS)} seeds; {des['endpoint']} " + ("; ".join(parts) or "no pairs yet")
                     + (" (interval once every seed is in)." if len(e["seeds"]) < len(SEEDS) else "."))  # fmt: skip
    if r.get("exploratory_arms"):
        lines.append("")  # ends the list: the paragraph below is not part of its last item
    if "test" not in r:
        mean = r["interim"]["mean"]
        lines.append(f"Interim, descriptive only: {r['interim']['pairs']} complete pairs"
                     + (f", mean d {_pts(mean)} points" if mean is not None else "")
                     + f". The pre-registered test runs only when all {units['expected']} units are in (or a seed is "
                     "declared missing under the failure rule); no p-value or interval is reported before that.")  # fmt: skip
        return "\n".join(lines)
    t, det = r["test"], r["detectable"]
    lines.append(f"**Pre-registered test** over {t['n']} seeds: mean d {_pts(t['mean'])} points, 95% t CI "
                 f"[{_pts(t['ci'][0])}, {_pts(t['ci'][1])}], t = {t['t']:.2f}, two-sided p = {t['p']:.3g}: "
                 f"**{t['verdict']}** (confirmed: p < {des['alpha']} and mean > 0; reversal: p < {des['alpha']} and "
                 "mean < 0).")  # fmt: skip
    lines.append(f"Detectable effect (80% power at alpha {des['alpha']}, computed from the observed seed SD "
                 f"{stable(100 * det['sd']):.1f} points, whose 95% chi-square interval is [{stable(100 * det['sd_ci'][0]):.1f}, "
                 f"{stable(100 * det['sd_ci'][1]):.1f}]): {stable(100 * det['effect']):.1f} points, {stable(100 * det['effect_range'][0]):.1f} "
                 f"to {stable(100 * det['effect_range'][1]):.1f} over that interval.")  # fmt: skip
    lines += ["", f"README sentence, as pre-registered: \"{readme_sentence(r)}\""]
    if "pooled" in r:
        p, check = r["pooled"], r["pooled"]["reproduction_check"]
        lines += ["", f"Exploratory (not the pre-registered test): seeds {p['seeds'][0]}-{p['seeds'][-1]} pooled with "
                  f"the ten-seed run ({p['n']} seeds): mean d {_pts(p['mean'])} [{_pts(p['ci'][0])}, "
                  f"{_pts(p['ci'][1])}], p = {p['p']:.3g}; ceiling seeds {', '.join(map(str, p['ceiling_seeds'])) or 'none'}. "
                  f"Valid only if the reproduction check passes: {check['status']} ({check['unit']}"
                  + (f", {check['problems_differing']} problems differ" if check.get("problems_differing") is not None
                     else "") + ")."]  # fmt: skip
    return "\n".join(lines)


def summarize_replication(assets: Path, ten_seed_dir: Path | None = None, repro_path: Path | None = None) -> dict:
    """Writes `<assets>.json` and `<assets>.md` beside the units folder and prints the table."""
    report = replication(assets, ten_seed_dir, repro_path)
    write_report(assets.parent / assets.name, report, table(report))
    return report
