"""Stage 3: metrics with bootstrap confidence intervals, as JSON, a markdown table and a pass@k / pass^k plot.

    ordergrad-eval report --output_dir runs/smollm2 --ks 1 2 4 8 --objectives TopM:2@4 CVaR:0.5@8

Per benchmark, with n samples per problem and `c` correct (math-verify), every metric is the mean over problems
of a per-problem unbiased estimate. The metrics are the rows of `metrics.METRICS` (key, label, computation, per k
or not, where each shows), under `metrics` in report.json: `pass@k`, `pass^k`, `maj@k` on correctness, and on the
reward (`--reward_weights`, default `correct=1`; e.g. `correct=1,format=0.2` is a shaped reward) `mean_reward`,
`best@k`, `worst@k`, `cvar<q>@k`. Each `--objectives` entry `Preset@K` (any `rank_weights` preset, e.g. the
objective a model was trained on) is on the reward, under `objectives`, keyed as written.

95% CIs: percentile bootstrap over problems (seeded, one resample shared by all metrics). MATH-500 also gets a
per-subject and per-level breakdown (any problem metadata field via `--breakdown`).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import fields
from pathlib import Path

import torch

from . import layout, metrics, records, safe_io
from .args import PathArgs, ReportArgs
from .errors import UsageError
from .metric_inputs import MetricInputs, compute_metric
from .protocol_header import protocol_header
from .provenance import read_provenance
from .render import plot, render_markdown
from .report_plan import ObjectiveSpec, ReportPlan, RewardWeights, as_plan
from .verify import check_run

logger = logging.getLogger(__name__)

__all__ = ["default_ks", "report"]

CORRECT_LABEL = "\x00correct"  # every sample math-verify scored correct votes for the gold


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to n: the k axis of pass@k / maj@k curves."""
    return [1 << i for i in range(n.bit_length())]


# ------------------------------------------------------------------------------------------------ loading
def load_matrices(dataset_dir: Path, reward: RewardWeights) -> dict:
    """Problems, the `(P, n)` metric inputs (correct / reward, NaN = missing or unscorable; answer labels) and the
    counts the report states."""
    problems = records.read_jsonl(dataset_dir / "problems.jsonl")
    scores = {(r["id"], int(r["sample"])): r for r in records.read_jsonl(dataset_dir / "scores.jsonl")}
    samples = records.read_samples(dataset_dir)
    # problems not generated yet (e.g. a run interrupted or a smaller --limit) are not part of the benchmark
    sampled = {pid for pid, _ in samples}
    skipped = sum(p["id"] not in sampled for p in problems)
    problems = [p for p in problems if p["id"] in sampled]
    index = {p["id"]: i for i, p in enumerate(problems)}
    scores = {k: v for k, v in scores.items() if k[0] in index and k in samples}
    n = 1 + max((s for _, s in scores), default=-1)
    num_p = len(problems)
    correct = torch.full((num_p, max(n, 1)), math.nan, dtype=torch.float64)
    rewards = correct.clone()
    labels = torch.full((num_p, max(n, 1)), -1, dtype=torch.long)
    per_problem_labels: list[dict[str, int]] = [{} for _ in range(num_p)]
    for (pid, s), row in scores.items():
        i = index[pid]
        if row["correct"] is None:
            continue
        correct[i, s] = row["correct"]
        parts = [w * (row.get(f) if row.get(f) is not None else math.nan) for f, w in reward.terms]
        rewards[i, s] = sum(parts)
        key = CORRECT_LABEL if row["correct"] == 1.0 else row.get("pred")
        if key is not None:
            labels[i, s] = per_problem_labels[i].setdefault(key, len(per_problem_labels[i]))
    # the completion length over every generated sample of the problems reported, scored or not, whatever its gold
    generated = [gen for (pid, _), gen in samples.items() if pid in index]
    tokens = [gen["num_tokens"] for gen in generated if gen.get("num_tokens") is not None]
    return {
        "problems": problems, "n": n, "inputs": MetricInputs(correct, rewards, labels),
        "num_generated": len(generated), "tokens": tokens,
        "truncated": sum(gen.get("finish_reason") == "length" for gen in generated), "not_generated": skipped,
        "unscored": sum(k not in scores for k in samples if k[0] in index),
        "unscorable": len({pid for (pid, _), row in scores.items() if row["correct"] is None}),
        "timeouts": sum(row.get("status") == "timeout" for row in scores.values()),
        "missing": len(problems) * n - sum(k[0] in index and k[1] < n for k in samples),
    }


# ------------------------------------------------------------------------------------------------ metrics
def per_problem_metrics(inputs: MetricInputs, plan: ReportPlan, ks: list[int]) -> dict[str, torch.Tensor]:
    """{metric key: (P,) per-problem estimate}, every `metrics.METRICS` entry at each k (or once), table order,
    each on the input its `on` names."""
    config = plan.config
    out = {}
    for metric in metrics.METRICS.values():
        for k in ks if metric.per_k else (None,):
            out[metric.key_at(k, config)] = compute_metric(metric, inputs, k, config)
    return out


def per_problem_objectives(inputs: MetricInputs, objectives: tuple[ObjectiveSpec, ...]) -> dict[str, torch.Tensor]:
    """{"Preset@K" as requested: (P,) per-problem estimate of the objective on the reward}."""
    return {o.key: metrics.lstat_metric(inputs.reward, o.objective, o.k) for o in objectives}


def summarize(values: dict[str, torch.Tensor], rows: torch.Tensor | None, plan: ReportPlan,
              objectives: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    """({metric: {value, ci, num_problems}}, the same for each objective) over the problems in `rows` (all if
    None), from one bootstrap resample shared by all."""
    columns = [*values.values(), *objectives.values()]
    stacked = torch.stack(columns)  # (M + O, P)
    if rows is not None:
        stacked = stacked[:, rows]
    low, high = metrics.bootstrap_ci(stacked, plan.bootstrap_samples, plan.ci_level, plan.bootstrap_seed)
    out = []
    for j in range(len(columns)):
        value, count = metrics.problem_mean(stacked[j])
        out.append({"value": value, "ci": [float(low[j]), float(high[j])], "num_problems": count})
    return dict(zip(values, out)), dict(zip(objectives, out[len(values):]))


def report_dataset(dataset_dir: Path, plan: ReportPlan) -> dict | None:
    data = load_matrices(dataset_dir, plan.reward)
    n = data["n"]
    if n == 0:
        logger.warning("%s: no scored samples; run the score stage first", dataset_dir.name)
        return None
    ks = sorted({k for k in (plan.ks or default_ks(n))})
    if ks[-1] > n:
        raise UsageError(f"--ks {' '.join(map(str, plan.ks))}: k = {ks[-1]} > n = {n} samples per problem in "
                         f"{dataset_dir.name}; use k <= n or generate more samples (--num_samples)")
    too_big = [o.key for o in plan.objectives if o.k > n]
    if too_big:
        raise UsageError(f"--objectives {' '.join(too_big)}: K > n = {n} samples per problem in {dataset_dir.name}")
    values = per_problem_metrics(data["inputs"], plan, ks)
    wanted = per_problem_objectives(data["inputs"], plan.objectives)
    overall, objective_values = summarize(values, None, plan, wanted)
    result = {
        "num_problems": len(data["problems"]),
        "num_samples": n,
        "ks": ks,
        "unscorable_problems": data["unscorable"],
        "missing_samples": data["missing"],
        "problems_not_generated": data["not_generated"],
        "samples_not_scored": data["unscored"],
        "samples_timed_out": data["timeouts"],
        "mean_completion_tokens": sum(data["tokens"]) / len(data["tokens"]) if data["tokens"] else None,
        "truncated_fraction": data["truncated"] / data["num_generated"] if data["num_generated"] else None,
        "metrics": overall,
        "objectives": objective_values,
        "breakdown": {},
    }
    for fld in plan.breakdown:
        groups: dict[str, list[int]] = {}
        for i, p in enumerate(data["problems"]):
            if p.get(fld) is not None:
                groups.setdefault(str(p[fld]), []).append(i)
        if groups:
            result["breakdown"][fld] = {}
            for g, rows in sorted(groups.items(), key=lambda kv: _natural(kv[0])):
                mets, objs = summarize(values, torch.tensor(rows), plan, wanted)
                result["breakdown"][fld][g] = {"num_problems": len(rows), "metrics": mets, "objectives": objs}
    return result


def _natural(text: str):
    """Sort key: numbers by value (level 2 before level 10), then other labels alphabetically."""
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)


def _legacy_config(path: Path):
    """The generation settings of a run written before provenance.json; UsageError naming the file if corrupt."""
    try:
        return json.loads(path.read_bytes())
    except ValueError as err:  # JSONDecodeError, or bytes that are not UTF-8
        raise UsageError(f"{path}: not valid JSON ({' '.join(str(err).split())[:120]}); restore it, or rerun the "
                         "eval into a new --output_dir") from None


def report(settings: ReportArgs | ReportPlan, paths: PathArgs) -> dict:
    """Report the run at `paths.output_dir` (report.json, report.md, passk.png); `settings` are the flags, or the
    plan `report_plan.plan_report` parsed from them."""
    plan = as_plan(settings)
    out, dirs = layout.require_run(paths.output_dir, "report")
    check_run(out, "report")  # every file checked against provenance.json before anything is read
    provenance = read_provenance(out)
    legacy = out / layout.LEGACY_CONFIG  # runs written before provenance.json
    result = {
        "generation": _generation(provenance) if provenance else (_legacy_config(legacy) if legacy.is_file()
                                                                   else None),
        "provenance": provenance,
        "protocol": protocol_header(provenance) if provenance else None,  # the whole protocol, in one place
        "config": plan.config,
        "datasets": {},
    }
    for d in dirs:
        ds = report_dataset(d, plan)
        if ds is not None:
            result["datasets"][d.name] = ds
    if not result["datasets"]:
        raise UsageError(f"--output_dir {paths.output_dir}: no scored samples in {out}; run the score stage first")
    default = next(f for f in fields(ReportArgs) if f.name == "breakdown").default_factory()
    for fld in plan.breakdown:  # a field asked for that no problem of the run has would give silently nothing
        if fld not in default and not any(fld in ds["breakdown"] for ds in result["datasets"].values()):
            present = sorted({k for d in dirs for p in records.read_jsonl(d / "problems.jsonl") for k in p
                             if k not in ("check", "prompt", "question", "answer", "id")})
            raise UsageError(f"--breakdown {fld}: no problem of this run has a {fld!r} field (fields it has: "
                             f"{', '.join(present) or 'none'})")
    if plan.plot and result["datasets"] and plot(result, out / layout.PLOT):
        result["plot"] = str(out / layout.PLOT)
    records.write_json_atomic(out / layout.REPORT_JSON, result)
    safe_io.write_bytes_atomic(out / layout.REPORT_MD, render_markdown(result, plan.reward.binary).encode("utf-8"))
    return result


def _generation(provenance: dict) -> dict:
    """The report's summary of how the samples were drawn (model, sampling, prompt), from the provenance."""
    model = provenance["model"]
    return {"model": model["model"], "base": model["base"], "adapter": model["adapter"], **provenance["sampling"],
            **{k: v for k, v in provenance["prompt"].items() if k != "chat_template_sha256"}}
