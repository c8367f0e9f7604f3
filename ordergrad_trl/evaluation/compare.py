"""`ordergrad-eval compare BASE OTHER [OTHER ...]` and `compare(...)`: checkpoints set side by side, paired.

    ordergrad-eval compare runs/base runs/ck500 --output_dir runs/ck500_vs_base --ks 1 4 16
    ordergrad-eval compare --groups base=runs/b0,runs/b1,runs/b2 ck500=runs/c0,runs/c1,runs/c2 --output_dir cmp

Every run is verified as the report stage verifies it (`verify.check_run`). Runs whose protocols differ (the
`protocol_header.MISMATCH_FIELDS`: problem set, n, temperature, top_p, top_k, max_new_tokens, template, chat
template, grader and version, reward settings) are refused in one line naming each difference, unless each is
named in `--allow_mismatch`; compare.md then says so.

Runs (one seed each): per dataset and metric (the report's per-problem estimates: pass@k, pass^k, maj@k, the
reward metrics, `--objectives`), OTHER - BASE over the problems both scored: the mean per-problem difference, a
percentile bootstrap interval resampling problems (one resample shared by all metrics: `stats.bootstrap_ci`), and a
two-sided paired sign-flip p-value (`stats.sign_flip_pvalue`: exact up to 16 nonzero differences), unadjusted.

Groups (several seeds each, `--groups`): a run's value is its mean over the problems every run scored; per seed
the difference group(s) - baseline(s); a t interval and p-value over seeds, Holm over every (group, dataset,
metric) compared, or over the `--contrasts` GROUP-MINUS:METRIC given (a pre-registered family of endpoints):
`compare_seeds.seed_contrasts`, the studies' one implementation. The seed is the unit, since training noise is
shared by every problem of a seed.

Writes `compare.json` (each comparison mirrors report.json: `datasets[<name>].metrics[<metric>]` holds
`difference`, `ci`, `p_value`, `num_problems`), `compare.md` and `compare.png` (the difference against k).
"""

from __future__ import annotations

import dataclasses
import os

import torch

from ordergrad_trl.core.stats import bootstrap_ci, sign_flip_pvalue

from . import layout, records, safe_io
from .args import PathArgs, ReportArgs, check_types
from .compare_args import CompareArgs, parse_groups, validate_compare
from .compare_render import plot_differences, render_compare
from .compare_seeds import parse_contrasts, seed_contrasts
from .errors import UsageError
from .metrics import METRICS, problem_mean
from .protocol_header import MISMATCH_FIELDS, protocol_header
from .report import default_ks, load_matrices, per_problem_metrics, per_problem_objectives
from .report_plan import ReportPlan, as_plan
from .verify import check_run

__all__ = ["COMPARE_JSON", "COMPARE_MD", "COMPARE_PLOT", "compare", "run_compare"]

COMPARE_JSON, COMPARE_MD, COMPARE_PLOT = "compare.json", "compare.md", "compare.png"


# ------------------------------------------------------------------------------------------------ loading
def load_run(path: str, plan: ReportPlan) -> dict:
    """A scored run, verified: its provenance, protocol header and each dataset's `(P, n)` inputs."""
    out, dirs = layout.require_run(path, "compare")
    provenance = check_run(out, "compare")
    data = {}
    for d in dirs:
        data[d.name] = load_matrices(d, plan.reward)
        if data[d.name]["n"] == 0:
            raise UsageError(f"run {path}: dataset {d.name} has no scored samples; run ordergrad-eval score "
                             f"--output_dir {path} first")
    return {"label": str(path), "out": out, "provenance": provenance, "header": protocol_header(provenance),
            "data": data, "n": {k: v["n"] for k, v in data.items()}}


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def mismatches(base: dict, other: dict) -> dict[str, list[str]]:
    """{field: ["dataset: base value vs other value", ...]} for each `MISMATCH_FIELDS` field the runs differ on; a
    dataset one run lacks is a difference of problem set."""
    found: dict[str, list[str]] = {}
    for ds in sorted(set(base["data"]) | set(other["data"])):
        if ds not in base["data"] or ds not in other["data"]:
            holder = base if ds in base["data"] else other
            found.setdefault("problems", []).append(f"{ds} only in {holder['label']}")
            continue
        for name, (_, value) in MISMATCH_FIELDS.items():
            a, b = value(base, ds), value(other, ds)
            if a != b:
                found.setdefault(name, []).append(f"{ds}: {_short(a)} vs {_short(b)}")
    return found


def check_protocols(runs: list[dict], allowed: list[str]) -> dict[str, list[str]]:
    """UsageError naming every field a run differs from the first (base) on and `--allow_mismatch` does not
    allow; returns the allowed differences, for the report."""
    allowed_found: dict[str, list[str]] = {}
    for other in runs[1:]:
        found = mismatches(runs[0], other)
        refused = [name for name in found if name not in allowed]
        if refused:
            what = "; ".join(f"{name} ({found[name][0]})" for name in refused)
            raise UsageError(f"runs {runs[0]['label']} and {other['label']} were evaluated under different protocols: "
                             f"{what}; their numbers are not comparable: rerun one with the other's settings, or pass "
                             f"--allow_mismatch {' '.join(refused)} to compare them anyway")
        for name, lines in found.items():
            allowed_found.setdefault(name, []).extend(f"{other['label']}: {line}" for line in lines)
    return allowed_found


# ------------------------------------------------------------------------------------------- per problem values
def _problem_key(p: dict) -> tuple:
    return p["id"], p.get("question"), p["answer"]


def common_problems(runs: list[dict], ds: str) -> list[list[int]]:
    """Per run, the row indices of the problems every run holds (same id, question and gold), in the base's order."""
    keys = [[_problem_key(p) for p in run["data"][ds]["problems"]] for run in runs]
    shared = set(keys[0]).intersection(*map(set, keys[1:]))
    order = [k for k in keys[0] if k in shared]
    if not order:
        raise UsageError(f"dataset {ds}: the runs {', '.join(r['label'] for r in runs)} share no problem (same id, "
                         "question and gold); nothing to pair")
    return [[{k: i for i, k in enumerate(run_keys)}[k] for k in order] for run_keys in keys]


def selected_keys(plan: ReportPlan, ks: list[int], wanted: list[str] | None) -> tuple[list[str], list[str]]:
    """(metric keys, objective keys) to compare: `--metrics`, checked, else every metric report.md shows."""
    config, binary = plan.config, plan.reward.binary
    shown = [m.key_at(k, config) for m in METRICS.values() if m.visible(binary) for k in (ks if m.per_k else (None,))]
    every = [m.key_at(k, config) for m in METRICS.values() for k in (ks if m.per_k else (None,))]
    objectives = [o.key for o in plan.objectives]
    if wanted is None:
        return shown, objectives
    unknown = [w for w in wanted if w not in every and w not in objectives]
    if unknown:
        raise UsageError(f"--metrics {unknown[0]}: not a metric of this comparison; valid: "
                         f"{', '.join(every + objectives)} (--ks and --objectives set the k values)")
    return [k for k in every if k in wanted], [k for k in objectives if k in wanted]


def _ks(plan: ReportPlan, runs: list[dict], ds: str) -> list[int]:
    n = min(run["n"][ds] for run in runs)
    ks = sorted(set(plan.ks or default_ks(n)))
    if ks[-1] > n:
        raise UsageError(f"--ks {' '.join(map(str, plan.ks))}: k = {ks[-1]} > n = {n} samples per problem of {ds} "
                         "in one of the runs; use k <= n")
    too_big = [o.key for o in plan.objectives if o.k > n]
    if too_big:
        raise UsageError(f"--objectives {' '.join(too_big)}: K > n = {n} samples per problem of {ds} in one of the "
                         "runs")
    return ks


def per_problem(run: dict, ds: str, plan: ReportPlan, ks: list[int], rows: list[int]) -> dict[str, torch.Tensor]:
    """{metric or objective key: (P,) per-problem estimate} of `run` on dataset `ds`, at the rows given."""
    inputs = run["data"][ds]["inputs"]
    values = {**per_problem_metrics(inputs, plan, ks), **per_problem_objectives(inputs, plan.objectives)}
    return {k: v[rows] for k, v in values.items()}


# ------------------------------------------------------------------------------------------------ comparisons
def paired(base: dict, other: dict, ds: str, plan: ReportPlan, cargs: CompareArgs) -> dict:
    """OTHER - BASE on dataset `ds`, paired per problem: {"ks", "num_problems", "metrics", "objectives"}."""
    ks = _ks(plan, [base, other], ds)
    rows = common_problems([base, other], ds)
    mine, theirs = (per_problem(r, ds, plan, ks, idx) for r, idx in zip((other, base), (rows[1], rows[0])))
    metric_keys, objective_keys = selected_keys(plan, ks, cargs.metrics)
    keys = metric_keys + objective_keys
    diffs = torch.stack([mine[k] - theirs[k] for k in keys])  # (M, P); NaN where either run has no estimate
    low, high = bootstrap_ci(diffs, plan.bootstrap_samples, plan.ci_level, plan.bootstrap_seed)
    p, exact = sign_flip_pvalue(diffs, cargs.sign_flip_samples, plan.bootstrap_seed)
    out = {}
    for j, key in enumerate(keys):
        value, count = problem_mean(diffs[j])
        ok = ~torch.isnan(diffs[j])  # both values over the same problems as the difference
        out[key] = {"difference": value, "ci": [float(low[j]), float(high[j])], "p_value": float(p[j]),
                    "p_method": "exact sign-flip" if exact[j] else f"sign-flip, {cargs.sign_flip_samples} draws",
                    "num_problems": count, "base": problem_mean(theirs[key][ok])[0],
                    "other": problem_mean(mine[key][ok])[0]}
    return {"ks": ks, "num_problems": len(rows[0]), "metrics": {k: out[k] for k in metric_keys},
            "objectives": {k: out[k] for k in objective_keys}}


def _seed_entry(t: dict, num_problems: int) -> dict:
    return {"difference": t["mean"], "ci": t["ci"], "p_value": t["p"], "p_holm": t["p_holm"],
            "ci_adjusted": t["ci_adjusted"], "ci_adjusted_level": t["ci_adjusted_level"], "num_seeds": t["n"],
            "sd": t["sd"], "per_seed": t["per_seed"], "num_problems": num_problems}


def seed_level(groups: list[tuple[str, list[dict]]], plan: ReportPlan, cargs: CompareArgs) -> dict:
    """The seed-level family (`compare_seeds.seed_contrasts`, the studies' one implementation): each other group
    against the first on every dataset and metric, or the `--contrasts` on every dataset; Holm over all."""
    names, size = [name for name, _ in groups], len(groups[0][1])
    every = [run for _, runs in groups for run in runs]
    datasets = [ds for ds in groups[0][1][0]["data"] if all(ds in run["data"] for run in every)]
    values: dict[str, dict] = {name: {} for name in names}  # group -> {(dataset, metric): per-seed values}
    shape = {}
    for ds in datasets:
        ks = _ks(plan, every, ds)
        rows = common_problems(every, ds)
        means = [{k: problem_mean(v)[0] for k, v in per_problem(run, ds, plan, ks, idx).items()}
                 for run, idx in zip(every, rows)]
        metric_keys, objective_keys = selected_keys(plan, ks, cargs.metrics)
        shape[ds] = (ks, len(rows[0]), metric_keys, objective_keys)
        for i, name in enumerate(names):
            for key in metric_keys + objective_keys:
                values[name][(ds, key)] = [m[key] for m in means[i * size : (i + 1) * size]]
    if cargs.contrasts:
        asked = parse_contrasts(cargs.contrasts, names)
        known = [k for ds in datasets for k in (shape[ds][2] + shape[ds][3])]
        for label, (_, _, key) in asked.items():
            if any(key not in shape[ds][2] + shape[ds][3] for ds in datasets):
                raise UsageError(f"--contrasts {label}: {key} is not a metric of this comparison; valid: "
                                 f"{', '.join(dict.fromkeys(known))}")
        family = {(label, ds): (g, m, (ds, key)) for label, (g, m, key) in asked.items() for ds in datasets}
    else:
        family = {(name, ds, key): (name, names[0], (ds, key)) for name in names[1:] for ds, (_, _, mk, ok)
                  in shape.items() for key in mk + ok}  # fmt: skip
    for _, (g, m, (ds, key)) in family.items():
        if any(x != x for x in values[g][(ds, key)] + values[m][(ds, key)]):  # NaN: a run with no estimate
            raise UsageError(f"--groups: {key} on {ds} has no value for some run of {g} or {m} (every problem left "
                             "out); leave it out with --metrics")
    tests = seed_contrasts(values, family, cargs.alpha, plan.ci_level)
    out = {"baseline": names[0], "alpha": cargs.alpha, "family_size": len(tests)}
    if cargs.contrasts:
        out["contrasts"] = {label: {"group": g, "minus": m, "metric": key, "datasets": {
            ds: {**_seed_entry(tests[(label, ds)], shape[ds][1]), "ks": shape[ds][0]} for ds in datasets}}
            for label, (g, m, key) in asked.items()}  # fmt: skip
        return out
    out["groups"] = {}
    for name in names[1:]:
        out["groups"][name] = {"datasets": {}}
        for ds, (ks, num_p, metric_keys, objective_keys) in shape.items():
            out["groups"][name]["datasets"][ds] = {
                "ks": ks, "num_problems": num_p,
                "metrics": {k: _seed_entry(tests[(name, ds, k)], num_p) for k in metric_keys},
                "objectives": {k: _seed_entry(tests[(name, ds, k)], num_p) for k in objective_keys}}
    return out


# ------------------------------------------------------------------------------------------------ entry points
def run_compare(cargs: CompareArgs, settings: ReportArgs | ReportPlan, paths: PathArgs) -> dict:
    """Compare the runs of `cargs` and write compare.json / compare.md / compare.png to `paths.output_dir`."""
    plan = as_plan(settings)
    check_types(cargs)
    validate_compare(cargs)
    groups = parse_groups(cargs.groups) if cargs.groups else None
    labels = [r for _, runs in groups for r in runs] if groups else list(cargs.runs)
    out = layout.run_dir(paths.output_dir)
    for label in labels:
        if layout.run_dir(label) == out:
            raise UsageError(f"--output_dir {paths.output_dir} is the run {label}; compare writes to a directory of "
                             "its own")
    loaded = {label: load_run(label, plan) for label in dict.fromkeys(labels)}
    runs = [loaded[label] for label in labels]
    allowed = check_protocols(runs, cargs.allow_mismatch)
    result = {
        "base": groups[0][0] if groups else labels[0],
        "protocol": {label: run["header"] for label, run in loaded.items()},
        "allowed_mismatches": allowed,
        "config": {**plan.config, **{k: v for k, v in dataclasses.asdict(cargs).items() if k not in ("runs",)}},
    }
    if groups:
        result["runs"] = {name: paths_ for name, paths_ in groups}
        result["seed_level"] = seed_level([(name, [loaded[p] for p in ps]) for name, ps in groups], plan, cargs)
    else:
        base = runs[0]
        result["runs"] = labels
        result["comparisons"] = []
        for other in runs[1:]:
            shared = [ds for ds in base["data"] if ds in other["data"]]
            if not shared:
                raise UsageError(f"runs {base['label']} and {other['label']} share no dataset; nothing to compare")
            result["comparisons"].append({"base": base["label"], "other": other["label"],
                                          "datasets": {ds: paired(base, other, ds, plan, cargs) for ds in shared}})
    out.mkdir(parents=True, exist_ok=True)
    if plan.plot and plot_differences(result, plan, out / COMPARE_PLOT):
        result["plot"] = str(out / COMPARE_PLOT)
    records.write_json_atomic(out / COMPARE_JSON, result)
    safe_io.write_bytes_atomic(out / COMPARE_MD, render_compare(result, plan).encode("utf-8"))
    return result


def compare(base: str | os.PathLike | None = None, *others: str | os.PathLike, output_dir: str | os.PathLike,
            groups: dict[str, list[str | os.PathLike]] | None = None, **options) -> dict:
    """`ordergrad-eval compare` from Python; returns what compare.json holds.

    Either `compare(base, other, ..., output_dir=...)` (runs paired per problem) or `compare(groups={"base": [runs],
    "ck500": [runs]}, output_dir=...)` (seed level; the first group is the baseline). `options` are the command's
    flags as keywords (`ks=[1, 4]`, `allow_mismatch=["temperature"]`, `metrics=["pass@1"]`, ...); bad values raise
    `UsageError` naming the flag.
    """
    from .run import _split_options

    runs = [os.fspath(r) for r in ((base,) if base is not None else ()) + others]
    group_flags = [f"{name}={','.join(os.fspath(r) for r in rs)}" for name, rs in (groups or {}).items()]
    cargs, plan, paths = _split_options({**options, "runs": runs, "groups": group_flags,
                                         "output_dir": os.fspath(output_dir)}, (CompareArgs, ReportArgs, PathArgs))
    return run_compare(cargs, plan, paths)
