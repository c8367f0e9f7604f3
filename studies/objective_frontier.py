"""The pass@k frontier: where each trained objective lands at every k, and what it costs at the others.

    python studies/objective_frontier.py        # -> studies/assets/objective_frontier.{md,json,png}
                                                #    and the table of docs/choosing-an-objective.md;
                                                #    studies/assets/objective_frontier_digits20.* (and its
                                                #    table in the guide, between its markers) once complete

Reads the committed units of the comparisons (the folders in `SOURCES`, under `studies/assets/`) and reports, for
every arm, pass@k and pass^k at k = 1..16 with seed-level 95% t intervals, and paired differences between arms.
A unit's value at k is the mean over its held-out problems of the U-statistics 1 - C(n-c,k)/C(n,k) (pass@k) and
C(c,k)/C(n,k) (pass^k) of a problem's c correct of n samples (`compare_summary.curves`).

Panels. Each task is its own frontier (`PANELS`): `digits` from the first comparisons, `digits20` from the
pre-registered crossover and refill studies. A pre-registered study's units join its panel only once every unit of
that study is in (nothing of it is read before, docs/results.md; `panel_sources`). A panel's differences subtract its
reference arm, the first of `REFERENCE_ORDER` it has: RLOO on `digits`; on `digits20`, Max@2 while the crossover is
its only study, RLOO once the refill study (which has an RLOO arm) joins.

Pooling. A *set* is one arm's units run at one commit (each unit records the commit it ran at): a curve pools the
seeds of one set and nothing else. Units without a recorded commit (seeds 0-2) are listed and left out. Two sets of
different arms are compared on the seeds both have, paired by seed (a t interval over the per-seed differences);
when their commits differ, the report names the reproduction check linking them (a committed unit rerun at the
other commit, every per-problem count equal: the `*_repro/` folders), or says that none does. Every interval here
is exploratory and unadjusted: the pre-registered tests are in their own reports (docs/results.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from compare_replication import replace_whole, write_report  # studies/, beside this file
from compare_seed_level import METRICS, seed_span, stable
from compare_summary import check_counts, curves, load_units
from unit_records import design_status, read_failures, read_unit, rerun_result
from frontier_plot import plot
from ordergrad_trl.core.stats import seed_t_test

ASSETS = Path(__file__).resolve().parent / "assets"
SOURCES = ("compare_objectives", "compare_objectives_replication", "compare_objectives_headtohead")
CROSSOVER, REFILL = "compare_crossover", "compare_refill"  # digits20's units: pre-registered studies
PREREGISTERED = {CROSSOVER: "compare_crossover", REFILL: "compare_refill"}  # folder -> its report (ARMS, SEEDS)
PANELS = {"digits": SOURCES, "digits20": (CROSSOVER, REFILL)}  # task -> the unit folders of its frontier
REPROS = {"compare_objectives_repro": "compare_objectives",  # rerun folder -> the folder of the units it reran
          "compare_objectives_replication_repro": "compare_objectives_replication",
          "compare_objectives_headtohead_repro": "compare_objectives_replication"}  # fmt: skip
# Which arm of a pair is subtracted: the earlier here (RLOO, the expected reward, first: "X minus RLOO").
REFERENCE_ORDER = ("rloo", "grpo", "max2", "max8", "maxrl", "top2of4", "min4")
SHOWN = (1, 2, 4, 8, 16)  # the k of the tables; the JSON and the figure have every k


def set_name(arm: str, commit: str) -> str:
    return f"{arm}@{commit[:7]}"


def _per_seed(units: list[dict]) -> dict[str, torch.Tensor]:
    """Units of one set, by seed -> {metric: `(S, n)` per-seed values (mean over problems) at k = 1..n}."""
    per_unit = [curves(torch.tensor(u["eval"]["correct"]), u["num_samples"]) for u in units]
    return {m: torch.stack([c[m].double().mean(0) for c in per_unit]) for m in METRICS}


def _t_columns(values: torch.Tensor) -> dict:
    """`(S, n)` per-seed values -> per k: the mean over seeds and its 95% t interval (with S >= 2)."""
    tests = [seed_t_test(values[:, j]) for j in range(values.shape[1])] if len(values) >= 2 else []
    return {"mean": values.mean(0).tolist(), "ci": [t["ci"] for t in tests] or None}


def reproduction_checks(assets: Path, units: dict[str, dict], sources=SOURCES) -> list[dict]:
    """Every committed rerun (`<folder>_repro/<unit>.json`) of a unit in `sources` against the unit it reran: the
    same count on each problem?"""
    checks = []
    for folder, source in REPROS.items():
        if source not in sources:  # another panel's rerun
            continue
        for path in sorted((assets / folder).glob("*.json")):
            rerun = read_unit(path)
            original = units.get((source, rerun["unit"]))
            entry = {"unit": rerun["unit"], "path": f"{folder}/{path.name}", "rerun_commit": rerun.get("commit")}
            if original is None:
                checks.append({**entry, "status": "not available", "why": f"no {rerun['unit']} in {source}/"})
                continue
            result = rerun_result(original, rerun)
            checks.append({**entry, "original_commit": original.get("commit"),
                           "problems_differing": result["problems_differing"], "status": result["status"]})  # fmt: skip
    return checks


def _link(commit_a: str, commit_b: str, checks: list[dict]) -> str | None:
    """The passed reproduction checks that rerun a unit of one commit at the other (None: not linked)."""
    pair = {commit_a, commit_b}
    passed = [c for c in checks if c["status"] == "passed"]
    return ", ".join(c["unit"] for c in passed if {c.get("original_commit"), c["rerun_commit"]} == pair) or None


def _reference_rank(arm: str) -> tuple:
    return (REFERENCE_ORDER.index(arm), "") if arm in REFERENCE_ORDER else (len(REFERENCE_ORDER), arm)


def _seed_of(unit: dict) -> int:
    return -1 if unit["seed"] is None else unit["seed"]


def _group(units: dict) -> tuple[dict, list, dict | None]:
    """Units -> ({set name: (source, units by seed)}, the units left out, the base model's per-seed values)."""
    grouped, left_out, base = {}, [], None
    for (src, name), u in sorted(units.items(), key=lambda kv: (_reference_rank(kv[1]["arm"]), _seed_of(kv[1]))):
        if u["arm"] == "base":
            base = _per_seed([u])
        elif not u.get("commit") or u["commit"].endswith("+dirty"):
            why = "no recorded commit" if not u.get("commit") else "dirty tree"
            left_out.append({"unit": name, "source": src, "why": why})
        else:
            grouped.setdefault(set_name(u["arm"], u["commit"]), (src, []))[1].append(u)
    return grouped, left_out, base


def _difference(a: str, b: str, sets: dict, values: dict, checks: list[dict]) -> dict | None:
    """Set `a` minus set `b` on their common seeds, paired by seed (None with fewer than 2)."""
    common = sorted(set(sets[a]["seeds"]) & set(sets[b]["seeds"]))
    if len(common) < 2:
        return None
    same = sets[a]["commit"] == sets[b]["commit"]
    entry = {"set": a, "minus": b, "seeds": common, "commits": "same" if same else "differ",
             "linked_by": None if same else _link(sets[a]["commit"], sets[b]["commit"], checks)}  # fmt: skip
    rows = {key: [sets[key]["seeds"].index(s) for s in common] for key in (a, b)}
    for m in METRICS:
        d = values[a][m][rows[a]] - values[b][m][rows[b]]  # (S, n)
        tests = [seed_t_test(d[:, j]) for j in range(d.shape[1])]
        entry[m] = {"mean": [t["mean"] for t in tests], "ci": [t["ci"] for t in tests], "p": [t["p"] for t in tests],
                    "above": [int((d[:, j] > 0).sum()) for j in range(d.shape[1])]}  # fmt: skip
    return entry


def frontier(assets: Path = ASSETS, sources=SOURCES, task: str = "digits") -> dict:
    units = {(src, name): u for src in sources for name, u in load_units(assets / src).items()}
    if not units:
        raise ValueError(f"no units in {[str(assets / s) for s in sources]}")
    ns = {u["num_samples"] for u in units.values()}
    ids = {tuple(u["eval"]["problem_ids"]) for u in units.values()}
    if len(ns) != 1 or len(ids) != 1:
        raise ValueError(f"units differ in samples ({sorted(ns)}) or problems ({len(ids)} problem lists)")
    for u in units.values():
        check_counts(u)
    (n,) = ns
    grouped, left_out, base = _group(units)
    checks = reproduction_checks(assets, units, sources)
    values = {key: _per_seed(us) for key, (_, us) in grouped.items()}  # {metric: (S, n)}, seeds ascending
    sets = {key: {"arm": us[0]["arm"], "commit": us[0]["commit"], "source": src, "seeds": [u["seed"] for u in us],
                  **{m: _t_columns(values[key][m]) for m in METRICS}} for key, (src, us) in grouped.items()}  # fmt: skip
    pairs = [(a, b) for a in sets for b in sets  # each pair once: the later arm minus the earlier (the reference)
             if _reference_rank(sets[a]["arm"]) > _reference_rank(sets[b]["arm"])]
    differences = [e for a, b in pairs if (e := _difference(a, b, sets, values, checks)) is not None]
    differences.sort(key=lambda e: (_reference_rank(sets[e["minus"]]["arm"]), e["seeds"][0],
                                    _reference_rank(sets[e["set"]]["arm"])))  # fmt: skip
    return {"command": "python studies/objective_frontier.py", "task": task, "sources": list(sources), "num_samples": n,
            "num_problems": len(next(iter(ids))), "ks": list(range(1, n + 1)), "units": len(units) - len(left_out),
            "sets": sets, "reference": (ref := reference_arm(sets)), "main_sets": main_sets(sets, differences, ref),
            "differences": differences,
            "reproduction_checks": checks, "left_out": left_out,
            "base": {m: base[m][0].tolist() for m in METRICS} if base else None}  # fmt: skip


def reference_arm(sets: dict) -> str:
    """The arm a panel's differences subtract: the first of `REFERENCE_ORDER` it has (RLOO where there is one)."""
    return min((s["arm"] for s in sets.values()), key=_reference_rank)


def main_sets(sets: dict, differences: list[dict], ref: str) -> dict[str, str]:
    """Each arm's set for the figure: its most seeds among sets compared with the reference arm `ref` (else its
    most seeds)."""
    with_ref = {e["set"] for e in differences if sets[e["minus"]]["arm"] == ref}

    def rank(key: str) -> tuple:
        return sets[key]["arm"] == ref or key in with_ref, len(sets[key]["seeds"]), -sets[key]["seeds"][0]

    out = {}
    for key, s in sets.items():
        if s["arm"] not in out or rank(key) > rank(out[s["arm"]]):
            out[s["arm"]] = key
    return dict(sorted(out.items(), key=lambda kv: _reference_rank(kv[0])))


def _num(x: float, sign: str) -> str:
    """Points with one decimal; a nonzero value that would print as 0.0 keeps two (-0.04, not -0.0)."""
    x = stable(100 * x)
    return f"{x:{sign}.2f}" if 0 < abs(x) < 0.05 else f"{x:{sign}.1f}"


def _cell(mean: float, ci, sign: str = "") -> str:
    return _num(mean, sign) + (f" [{_num(ci[0], sign)}, {_num(ci[1], sign)}]" if ci else "")


MEAN_ARMS = ("rloo", "grpo")  # the expected reward: every other arm is compared with these in the main rows


def head_to_head(r: dict) -> list[dict]:
    """The differences between two sets run at one commit that are no arm's main set and not a mean arm: a
    head-to-head without RLOO (seeds 25-39's Max@8 vs MaxRL), which the guide and the figure show on its own."""
    main = set(r["main_sets"].values())
    arm = {key: s["arm"] for key, s in r["sets"].items()}
    return [e for e in r["differences"] if e["commits"] == "same" and not {e["set"], e["minus"]} & main
            and not {arm[e["set"]], arm[e["minus"]]} & set(MEAN_ARMS)]  # fmt: skip


def table(r: dict) -> str:
    head = " | ".join(f"k={k}" for k in SHOWN)
    lines = [f"# The pass@k frontier ({r['units']} units, {r['num_problems']} held-out problems x {r['num_samples']} samples)",
             "", f"Built by `{r['command']}` from the committed units in {', '.join(f'`studies/assets/{s}/`' for s in r['sources'])}. "
             "A set is one arm's units at one commit; sets are compared on their common seeds, paired by seed. Every "
             "interval is a seed-level 95% t interval, exploratory and unadjusted (the pre-registered tests are in "
             f"their own reports). One model (SmolLM2-135M-Instruct), one task (`{r['task']}`), 8 training steps.", "",
             "| set | arm | commit | seeds | units from |", "|---|---|---|---|---|"]  # fmt: skip
    for key, s in r["sets"].items():
        lines.append(f"| {key} | `{s['arm']}` | {s['commit'][:7]} | {seed_span(s['seeds'])} ({len(s['seeds'])}) | {s['source']}/ |")
    if r["left_out"]:
        lines += ["", f"Left out ({len(r['left_out'])} units, no recorded commit or a dirty tree): "
                  + ", ".join(f"{e['source']}/{e['unit']}" for e in r["left_out"]) + "."]  # fmt: skip
    if r["reproduction_checks"]:
        lines += ["", "Reproduction checks (a committed unit rerun at another commit):", ""]
    else:
        lines += ["", "Reproduction checks: none in this panel's folders (a pre-registered study's own is in its report)."]
    for c in r["reproduction_checks"]:
        what = (f"{(c['original_commit'] or 'unrecorded')[:10]} -> {(c['rerun_commit'] or 'unrecorded')[:10]}, "
                f"{c['problems_differing']} problems differ" if "problems_differing" in c else c["why"])  # fmt: skip
        lines.append(f"- `{c['unit']}` ({c['path']}): {c['status']} ({what}).")
    for m in METRICS:
        lines += ["", f"## {m} (%, mean over seeds [95% t CI])", "", f"| set | seeds | {head} |",
                  "|---|---|" + "---|" * len(SHOWN)]  # fmt: skip
        if r["base"]:
            lines.append("| base model | - | " + " | ".join(_num(r["base"][m][k - 1], "") for k in SHOWN) + " |")
        for key, s in r["sets"].items():
            cells = [_cell(s[m]["mean"][k - 1], s[m]["ci"] and s[m]["ci"][k - 1]) for k in SHOWN]
            lines.append(f"| {key} | {len(s['seeds'])} | " + " | ".join(cells) + " |")
    for m in METRICS:
        lines += ["", f"## {m}: differences (points, paired by seed [95% t CI]; `>0`: seeds where the first set is higher)",
                  "", f"| set minus set | seeds | commits | {head} |", "|---|---|---|" + "---|" * len(SHOWN)]  # fmt: skip
        for e in r["differences"]:
            commits = e["commits"] if e["commits"] == "same" else f"differ ({'linked by ' + e['linked_by'] if e['linked_by'] else 'not linked'})"
            cells = [_cell(e[m]["mean"][k - 1], e[m]["ci"][k - 1], sign="+") + f" {e[m]['above'][k - 1]}/{len(e['seeds'])}"
                     for k in SHOWN]  # fmt: skip
            lines.append(f"| {e['set']} - {e['minus']} | {seed_span(e['seeds'])} | {commits} | " + " | ".join(cells) + " |")
    side = ", ".join(f"{e['set']} - {e['minus']}" for e in head_to_head(r)[:1])
    lines += ["", f"Figure: `{output_name(r['task'])}.png` (each arm's set in `main_sets` of the JSON: its most seeds "
              f"among the sets compared with {_arm_label(r['reference'], '`')}" + (f"; right: the head-to-head {side}, on its own seeds" if side else "")
              + ")."]  # fmt: skip
    return "\n".join(lines)


GUIDE = Path(__file__).resolve().parents[1] / "docs" / "choosing-an-objective.md"


def guide_table(r: dict) -> str:
    """The guide's table: each arm's main set minus the panel's reference arm (RLOO; Max@2 on `digits20`) at the same
    seeds, then the pairs of the other arms: their main sets (e.g. MaxRL minus Max@8 at seeds 10-24), and two sets
    that are no arm's main set, run at one commit (the head-to-head's, which has no RLOO arm)."""
    from compare_objectives import ARMS  # each arm's recipe flags: how a user trains it

    main, arm = r["main_sets"], {key: s["arm"] for key, s in r["sets"].items()}
    vs_ref = [e for e in r["differences"] if main[arm[e["set"]]] == e["set"] and arm[e["minus"]] == r["reference"]]
    side = head_to_head(r)
    others = [e for e in r["differences"] if e not in vs_ref and (e in side or (
              main[arm[e["set"]]] == e["set"] and main[arm[e["minus"]]] == e["minus"]
              and not {arm[e["set"]], arm[e["minus"]]} & set(MEAN_ARMS)))]  # fmt: skip
    ks = [f"pass@{k}" for k in SHOWN] + ["pass^4"]
    lines = ["| arm (recipe flags) | minus | seeds | " + " | ".join(ks) + " |", "|---|---|---|" + "---|" * len(ks)]
    for e in vs_ref + others:
        a, b = arm[e["set"]], arm[e["minus"]]
        cells = [_cell(e[m]["mean"][k - 1], e[m]["ci"][k - 1], sign="+") for m, k in
                 [("pass@k", k) for k in SHOWN] + [("pass^k", 4)]]  # fmt: skip
        flags = " ".join(ARMS.get(a, []))
        lines.append(f"| `{a}` (`{flags}`) | `{b}` | {seed_span(e['seeds'])} ({len(e['seeds'])}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def guide_markers(task: str) -> tuple[str, str]:
    """A panel's table markers in the guide: `<!-- frontier:start -->` for `digits`, `<!-- frontier-<task>:start -->`
    for the others (and `:end`)."""
    name = "frontier" if task == "digits" else f"frontier-{task}"
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


GUIDE_MARKERS = guide_markers("digits")


def update_guide(r: dict, guide: Path = GUIDE) -> bool:
    """Rewrites the table between the guide's markers for the report's panel (docs/choosing-an-objective.md); False
    where the guide has no such markers."""
    markers = guide_markers(r["task"])
    text = guide.read_text() if guide.exists() else ""
    if not all(m in text for m in markers):
        return False
    start, end = (text.index(m) for m in markers)
    replace_whole(guide, text[: start + len(markers[0])] + "\n" + guide_table(r) + "\n" + text[end:])
    return True


def _arm_label(arm: str, quote: str = "") -> str:
    return "RLOO" if arm == "rloo" else f"{quote}{arm}{quote}"


def output_name(task: str, stem: str = "objective_frontier") -> str:
    return stem if task == "digits" else f"{stem}_{task}"


def panel_sources(assets: Path, task: str) -> tuple[tuple[str, ...], list[str]]:
    """The unit folders a panel reads now, and a line for each pre-registered study left out: its units join only
    once all are in (every seed done, or missing by the failure rule; the study's own bookkeeping)."""
    import importlib

    ready, left_out = [], []
    for source in PANELS[task]:
        if source in PREREGISTERED:
            study = importlib.import_module(PREREGISTERED[source])  # studies/, beside this file
            units = load_units(assets / source) if (assets / source).is_dir() else {}
            status = design_status(units, study.ARMS, study.SEEDS, read_failures(assets / f"{source}_failures.json"))
            if not status["complete"]:
                counts = status["units"]
                left_out.append(f"the {task} panel leaves out {source}/ until that pre-registered study is complete "
                                f"({counts['present']} of {counts['expected']} units in; docs/results.md)")
                continue
        ready.append(source)
    return tuple(ready), left_out


def write(assets: Path = ASSETS, out: Path | None = None) -> dict[str, dict]:
    """Writes each panel's `<out>.{json,md,png}` (`digits`; default `studies/assets/objective_frontier.*`) and
    `<out>_<task>.*` (the others, once complete); returns the reports by task."""
    out = out or assets / "objective_frontier"
    out.parent.mkdir(parents=True, exist_ok=True)
    reports = {}
    for task in PANELS:
        sources, left_out = panel_sources(assets, task)
        for line in left_out:
            print(line)
        if not sources:
            continue
        r = reports[task] = frontier(assets, sources, task)
        path = out.with_name(output_name(task, out.name))
        write_report(path, r, table(r))
        plot(r, path.with_suffix(".png"), head_to_head(r)[:1], _arm_label(r["reference"]))
        if assets.resolve() == ASSETS:  # the committed units: the guide quotes them
            update_guide(r)
    return reports


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets_dir", default=str(ASSETS), help="the folder holding the unit folders")
    parser.add_argument("--out", default=None, help="output path without suffix (default: <assets_dir>/objective_frontier)")
    args = parser.parse_args()
    try:
        write(Path(args.assets_dir), Path(args.out) if args.out else None)
    except ValueError as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")


if __name__ == "__main__":
    main()
