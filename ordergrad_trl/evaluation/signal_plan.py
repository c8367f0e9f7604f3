"""`ordergrad-eval plan`: which setting carries a signal at your N and B, from the base model's success rates.

Settings are estimators, objectives with K and prompt weights, judged before any training (the math:
`ordergrad_trl.core.signal`).

    ordergrad-eval plan --from RUN --num_generations 16 --prompts_per_step 4 [--candidates ReMax@2 maxrl ...]
    ordergrad-eval plan --success_rates rates.txt ...        # one rate per line, or a JSON list

A prompt's rate is estimated as p_i = c_i / n_i from the run's scored samples (c_i correct of n_i scorable): the
plug-in estimate, so a problem never solved in n_i samples counts as p = 0 (no signal). Where every problem has
n_i >= N samples, `share_with_gradient_unbiased` is also given: each group's count drawn without replacement from the
problem's n_i samples (hypergeometric), an unbiased estimate of the share (symmetric estimators).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.estimators import ESTIMATORS
from ..core.plan import SCALES, build_plan, normalize_scale
from ..core.schedule import parse_objective_at_k
from ..core.signal import carrying_counts, crossover_p, pool_signal
from .errors import UsageError

__all__ = ["DEFAULT_CANDIDATES", "PlanArgs", "Candidate", "parse_candidate", "plan_settings", "plan_signal", "success_counts"]

# The defaults: RLOO, Max@2/4/8, MaxRL, CurveRL (on GRPO's centered advantage, as the studies ran it)
DEFAULT_CANDIDATES = ("Mean@1", "ReMax@2", "ReMax@4", "ReMax@8", "maxrl", "grpo+curverl")
REFERENCE = "Mean@1"  # RLOO: every snr is also given as a ratio to it
PLAN_JSON, PLAN_MD, PLAN_PNG = "plan.json", "plan.md", "plan.png"


@dataclass
class PlanArgs:
    """`ordergrad-eval plan`: the signal of each candidate setting over the base model's success rates."""

    from_run: str | None = field(
        default=None, metadata={"aliases": ["--from"], "help": "An eval run of the base model (its --output_dir, "
                                "scored): each problem's rate is its correct count over its scorable samples."})
    success_rates: str | None = field(
        default=None, metadata={"help": "Instead of --from: a file of success rates in [0, 1], one per line or a "
                                        "JSON list."})
    dataset: str | None = field(default=None, metadata={"help": "The run's dataset to read (needed when it holds "
                                                                 "several)."})
    num_generations: int = field(default=16, metadata={"help": "N, rollouts per prompt (TRL's num_generations)."})
    prompts_per_step: int = field(default=4, metadata={"help": "B, prompts per optimizer step (generation batch "
                                                                "/ N)."})
    scale_rewards: str = field(default="none", metadata={"help": f"TRL's scale_rewards: {', '.join(SCALES)} "
                                                                  "('batch' is taken at its large-batch std)."})
    candidates: list[str] | None = field(
        default=None, metadata={"help": "Settings to compare: OBJECTIVE@K (ordergrad, e.g. Mean@1, ReMax@2, "
                                        "TopM:2@4), an estimator name (maxrl, pkpo@4), each optionally +PROMPT_WEIGHT "
                                        f"(Mean@1+curverl). Default: {' '.join(DEFAULT_CANDIDATES)}."})
    output_dir: str | None = field(default=None, metadata={"help": "Where to write plan.json, plan.md and plan.png "
                                                                    "(default: print the table only)."})


@dataclass(frozen=True)
class Candidate:
    setting: str  # as written
    estimator: str
    objective: str | None
    k: int | None
    prompt_weight: str | None


def parse_candidate(text: str) -> Candidate:
    """`OBJECTIVE@K`, `ESTIMATOR`, `ESTIMATOR@K`, each optionally `+PROMPT_WEIGHT`; UsageError naming --candidates."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"--candidates: empty entry {text!r}; e.g. ReMax@2, maxrl, Mean@1+curverl")
    setting, plus, weight = text.strip().partition("+")
    if plus and not weight.strip():
        raise UsageError(f"--candidates {text!r}: nothing after '+'; name a prompt weight, e.g. Mean@1+curverl")
    head, at, k_text = setting.strip().rpartition("@")
    name = (head if at else setting).strip().lower()
    if name in ESTIMATORS and name != "ordergrad":
        k = None
        if at:
            if "k" not in ESTIMATORS[name].reads or not k_text.strip().isdigit():
                raise UsageError(f"--candidates {text!r}: estimator {name!r} takes no @K" if "k" not in
                                 ESTIMATORS[name].reads else f"--candidates {text!r}: K must be a positive integer")
            k = int(k_text)
        return Candidate(text.strip(), name, None, k, weight.strip() or None)
    try:
        objective, k = parse_objective_at_k(setting, None, "--candidates")
    except ValueError as err:
        raise UsageError(str(err)) from None
    if k is None:
        raise UsageError(f"--candidates {text!r}: expected OBJECTIVE@K (e.g. ReMax@2) or an estimator name "
                         f"({', '.join(ESTIMATORS)})")
    return Candidate(text.strip(), "ordergrad", objective, k, weight.strip() or None)


def _build(candidate: Candidate, n: int, scale: str):
    try:
        return build_plan(num_generations=n, estimator=candidate.estimator, objective=candidate.objective,
                          k=candidate.k, scale=scale, prompt_weight=candidate.prompt_weight)  # fmt: skip
    except ValueError as err:
        raise UsageError(f"--candidates {candidate.setting!r} at --num_generations {n}: {err}") from None


# ------------------------------------------------------------------------------------------------ inputs


def success_counts(run: str | Path, dataset: str | None = None) -> tuple[torch.Tensor, torch.Tensor, str]:
    """`(c (P,), n (P,), dataset)`: each problem's correct count and scorable samples in eval run `run` (checked as
    the report stage checks it); problems without a scorable sample are left out."""
    from . import layout
    from .report import load_matrices
    from .report_plan import RewardWeights
    from .verify import check_run

    out = Path(run)
    if not out.is_dir():
        raise UsageError(f"--from {run}: no such run directory")
    check_run(out, "report")
    folders = {f.name: f for f in layout.dataset_dirs(out)}
    if not folders:
        raise UsageError(f"--from {run}: the run holds no dataset (run `ordergrad-eval run` first)")
    if dataset is None and len(folders) > 1:
        raise UsageError(f"--from {run} holds several datasets ({', '.join(sorted(folders))}): choose one with "
                         "--dataset")
    name = dataset if dataset is not None else next(iter(folders))
    if name not in folders:
        raise UsageError(f"--dataset {name!r} is not in {run}; it holds {', '.join(sorted(folders))}")
    if not (folders[name] / "scores.jsonl").is_file():
        raise UsageError(f"--from {run}: dataset {name!r} has no scores (run `ordergrad-eval score` first)")
    correct = load_matrices(folders[name], RewardWeights("correct=1", (("correct", 1.0),)))["inputs"].correct
    scored = (~torch.isnan(correct)).sum(-1)  # (P,)
    if not bool((scored > 0).any()):
        raise UsageError(f"--from {run}: dataset {name!r} has no scored sample, so no success counts")
    keep = scored > 0
    return torch.nansum(correct, -1)[keep].round(), scored[keep].to(torch.float64), name


def read_rates(path: str) -> torch.Tensor:
    """Rates from a file: one per line (blank lines and `#` comments skipped) or one JSON list."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"--success_rates {path}: no such file")
    text = file.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            values = json.loads(text)
        except json.JSONDecodeError as err:
            raise UsageError(f"--success_rates {path}: not a JSON list ({err.msg} at line {err.lineno})") from None
        entries = [(f"item {i}", v) for i, v in enumerate(values)]
    else:
        entries = [(f"line {i}", line.split("#")[0].strip()) for i, line in enumerate(text.splitlines(), 1)]
        entries = [(where, v) for where, v in entries if v]
    rates = []
    for where, value in entries:
        try:
            rate = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            rate = math.nan
        if not 0 <= rate <= 1:
            raise UsageError(f"--success_rates {path}: {where}: {value!r} is not a rate in [0, 1]")
        rates.append(rate)
    if not rates:
        raise UsageError(f"--success_rates {path}: holds no rates")
    return torch.tensor(rates, dtype=torch.float64)


# ------------------------------------------------------------------------------------------------ the plan


def _unbiased_share(plan, c: torch.Tensor, m: torch.Tensor) -> float | None:
    """mean_i P(the group has a gradient), the group's count drawn without replacement from problem i's m_i samples
    with c_i correct: unbiased for the share at the true rates when m_i >= N. None for a chunked estimator."""
    n = plan.num_generations
    kept = carrying_counts(plan)
    if kept is None or bool((m < n).any()):
        return None
    carries = torch.zeros(n + 1, dtype=torch.float64)  # (N+1,) by count
    carries[kept] = 1.0
    x = torch.arange(n + 1, dtype=torch.float64)[None, :]  # (1, N+1)
    ci, fi = c[:, None], (m - c)[:, None]
    log_h = (torch.lgamma(ci + 1) - torch.lgamma(x + 1) - torch.lgamma(ci - x + 1)
             + torch.lgamma(fi + 1) - torch.lgamma(n - x + 1) - torch.lgamma(fi - (n - x) + 1)
             - torch.lgamma(m[:, None] + 1) + math.lgamma(n + 1) + torch.lgamma(m[:, None] - n + 1))  # fmt: skip
    possible = (x <= ci) & (n - x <= fi)
    h = torch.where(possible, torch.exp(torch.where(possible, log_h, 0.0)), 0.0)  # (P, N+1)
    return (h * carries).sum(-1).mean().item()


def plan_signal(args: PlanArgs) -> dict:
    """The plan as a dict (plan.json): inputs, then one entry per candidate, in the order given."""
    n, b = args.num_generations, args.prompts_per_step
    for flag, value in (("num_generations", n), ("prompts_per_step", b)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (flag == "num_generations" and
                                                                                   value < 2):
            raise UsageError(f"--{flag} must be an integer >= {2 if flag == 'num_generations' else 1}, got {value!r}")
    if n > 4096:
        raise UsageError(f"--num_generations must be at most 4096, got {n}")
    try:
        scale = normalize_scale(args.scale_rewards, "--scale_rewards")
    except ValueError as err:
        raise UsageError(str(err)) from None
    if (args.from_run is None) == (args.success_rates is None):
        raise UsageError("give exactly one of --from RUN (an eval run of the base model) and --success_rates FILE")
    if args.success_rates is not None:
        if args.dataset is not None:
            raise UsageError("--dataset reads a run: it needs --from, not --success_rates")
        p, c, m, source = read_rates(args.success_rates), None, None, {"success_rates": str(args.success_rates)}
    else:
        c, m, name = success_counts(args.from_run, args.dataset)
        p = c / m
        source = {"run": str(args.from_run), "dataset": name, "estimate": "p_i = c_i / n_i (plug-in)",
                  "samples_per_problem": sorted({int(v) for v in m.tolist()})}
    if b > p.numel():
        raise UsageError(f"--prompts_per_step ({b}) exceeds the {p.numel()} prompts of the pool")
    settings = list(args.candidates) if args.candidates else [s for s in DEFAULT_CANDIDATES
                                                               if parse_candidate(s).k is None or parse_candidate(s).k < n]
    candidates = [parse_candidate(s) for s in settings]
    plans = [_build(cand, n, scale) for cand in candidates]
    std = math.sqrt(p.mean().item() * (1 - p.mean().item()))  # scale_rewards="batch": pool_signal's std
    reference = pool_signal(_build(parse_candidate(REFERENCE), n, scale), p, b).snr
    rows = []
    for index, (cand, plan) in enumerate(zip(candidates, plans)):
        signal = pool_signal(plan, p, b)
        smaller = [j for j, o in enumerate(candidates[:index] + candidates[index + 1:])
                   if (o.estimator, o.objective, o.prompt_weight) == (cand.estimator, cand.objective, cand.prompt_weight)
                   and o.k is not None and cand.k is not None and o.k < cand.k]  # fmt: skip
        others = [j if j < index else j + 1 for j in smaller]
        below = max(others, key=lambda j: candidates[j].k) if others else None
        row = {"setting": cand.setting, "estimator": cand.estimator, "objective": cand.objective, "k": plans[index]
               .stages[0].k if cand.k is not None else None, "prompt_weight": cand.prompt_weight,
               "share_with_gradient": signal.share_with_gradient, "snr": signal.snr,
               "snr_vs_rloo": signal.snr / reference if reference > 0 else None}  # fmt: skip
        if c is not None:
            row["share_with_gradient_unbiased"] = _unbiased_share(plan, c, m)
        if below is not None:
            row["next_smaller"] = candidates[below].setting
            row["outweighs_next_smaller_below_p"] = crossover_p(plan, plans[below], reference=p, batch_std=std)
        rows.append(row)
    counts = torch.histc(p, bins=10, min=0, max=1)
    return {"schema": 1, "num_generations": n, "prompts_per_step": b, "scale_rewards": scale,
            "scale_note": "batch std taken at its large-batch value" if scale == "batch" else "exact",
            "num_prompts": p.numel(), "mean_success_rate": p.mean().item(), "source": source,
            "success_rate_histogram": {"edges": torch.linspace(0, 1, 11).tolist(), "counts": counts.tolist()},
            "snr_rloo": reference, "candidates": rows, "_p": p}  # fmt: skip


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_table(plan: dict) -> str:
    head = (f"signal at N = {plan['num_generations']}, B = {plan['prompts_per_step']} prompts per step, scale_rewards="
            f"{plan['scale_rewards']}, over {plan['num_prompts']} prompts (mean success rate "
            f"{plan['mean_success_rate']:.3f})")
    unbiased = any("share_with_gradient_unbiased" in r for r in plan["candidates"])
    lines = [head, "", "| setting | share with a gradient |" + (" share (unbiased, from counts) |" if unbiased else "")
             + " snr | snr / RLOO | outweighs the next smaller K below p |",
             "|---|---|" + ("---|" if unbiased else "") + "---|---|---|"]  # fmt: skip
    for r in plan["candidates"]:
        below = r.get("outweighs_next_smaller_below_p")
        vs = f"{below:.3f} (vs {r['next_smaller']})" if below is not None else (
            f"never (vs {r['next_smaller']})" if "next_smaller" in r else "-")
        lines.append(f"| {r['setting']} | {r['share_with_gradient']:.3f} |"
                     + (f" {_fmt(r.get('share_with_gradient_unbiased'), '.3f')} |" if unbiased else "")
                     + f" {r['snr']:.3g} | {_fmt(r['snr_vs_rloo'], '.2f')} | {vs} |")  # fmt: skip
    return "\n".join(lines)


def _plot(plan: dict, plans: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..core.signal import group_signal

    grid = torch.linspace(0, 1, 201, dtype=torch.float64)
    fig, (top, mid, low) = plt.subplots(3, 1, figsize=(7, 8), sharex=True, height_ratios=[3, 2, 1.2])
    for setting, built in plans.items():
        pbar = plan["mean_success_rate"]
        signal = group_signal(built, grid, reference=plan["_p"], batch_std=math.sqrt(pbar * (1 - pbar)))
        top.plot(grid, signal.mean, label=setting)
        mid.plot(grid, signal.nonzero, label=setting)
    top.set_ylabel("E[g] on the prompt's logit")
    mid.set_ylabel("P(g != 0)")
    top.legend(fontsize=8)
    low.hist(plan["_p"].numpy(), bins=20, range=(0, 1), color="0.5")
    low.set_ylabel("prompts")
    low.set_xlabel("success rate p")
    top.set_title(f"signal per prompt at N = {plan['num_generations']}, over the pool's success rates")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plan_settings(**kwargs) -> dict:
    """`ordergrad-eval plan` from Python: the keywords are `PlanArgs`' fields (`from_run` or `success_rates`,
    `num_generations`, `prompts_per_step`, `scale_rewards`, `candidates`, `output_dir`); returns plan.json's content
    (and with `output_dir`, writes it). `UsageError` naming the field for bad input.

        from ordergrad_trl.evaluation import plan_settings
        plan_settings(from_run="runs/eval_base", num_generations=16, prompts_per_step=32)["candidates"][0]["snr"]
    """
    import dataclasses

    from .args import check_types

    names = {f.name for f in dataclasses.fields(PlanArgs)}
    unknown = sorted(set(kwargs) - names)
    if unknown:
        raise UsageError(f"plan_settings(): unknown keyword(s) {', '.join(unknown)}; valid: {', '.join(sorted(names))}")
    args = PlanArgs(**kwargs)
    check_types(args)
    if args.output_dir is not None:
        return run_plan(args)
    return {k: v for k, v in plan_signal(args).items() if not k.startswith("_")}


def run_plan(args: PlanArgs) -> dict:
    """Compute, print and (with --output_dir) write the plan; returns plan.json's content."""
    plan = plan_signal(args)
    table = render_table(plan)
    print(table)
    public = {k: v for k, v in plan.items() if not k.startswith("_")}
    if args.output_dir is not None:
        from .safe_io import write_bytes_atomic

        out = Path(args.output_dir)
        if out.exists() and not out.is_dir():
            raise UsageError(f"--output_dir {out}: exists and is not a directory")
        out.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(out / PLAN_JSON, (json.dumps(public, indent=2) + "\n").encode())
        write_bytes_atomic(out / PLAN_MD, (table + "\n").encode())
        try:
            plans = {r["setting"]: _build(parse_candidate(r["setting"]), args.num_generations, plan["scale_rewards"])
                     for r in plan["candidates"]}  # fmt: skip
            _plot(plan, plans, out / PLAN_PNG)
        except ImportError:
            pass
        print(f"\nwrote {out / PLAN_JSON}, {out / PLAN_MD} and {out / PLAN_PNG}")
    return public
