"""The training signal of a setting before training: exact, under the Bernoulli-logit model of a prompt.

A prompt has one logit theta and success rate p = sigmoid(theta); a group of N i.i.d. 0/1 rewards r_j gets the
advantages A_j the trainer computes (estimator, prompt weight, `scale_rewards`: `ObjectivePlan.scaled_advantages`,
the estimator's own code, not a second derivation), and its gradient on theta is

    g = (1/N) sum_j A_j (r_j - p)                                      # (r_j - p) = d log P(r_j) / d theta

Its law is exact: the rewards enter only through the group's counts, so every distinct group is enumerated once,
with its probability. For an estimator symmetric in the group (all but the chunked ones) that is c ~ Binomial(N, p),
N + 1 groups. A chunked estimator (`nan="chunk"`: `maxk_tang`) sees N/k chunks of k, each symmetric and the chunks
exchangeable, so the groups are the multisets of chunk counts (C(N/k + k, k) of them), with multinomial
probabilities. Nothing here samples.

Over a pool of P prompts with rates p_i, B drawn per step uniformly without replacement, the step's gradient over the
pool's logits is G_i = 1[i in step] g_i / B, so E G_i = E g_i / P and Var G_i = E g_i^2 / (P B) - (E g_i / P)^2:

    share_with_gradient = mean_i P(g_i != 0)      snr = ||E G|| / sqrt(sum_i Var G_i)

A stateful prompt weight (CurveRL) is measured against the pool's own rates in (0, 1) (its window when full).
`scale_rewards="batch"` divides by the batch's reward std, which depends on the other prompts drawn: it is taken at its
large-batch value sqrt(pbar (1 - pbar)), pbar the pool's mean rate (approximate; `"none"` and `"group"` are exact).
Pure torch, float64.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from .estimators import ESTIMATORS
from .plan import ObjectivePlan, ObjectiveStage
from .prompt_weights import PromptWindow, inner

__all__ = ["GroupSignal", "PoolSignal", "carrying_counts", "crossover_p", "gradient_table", "group_signal", "pool_signal"]

NONZERO_TOL = 1e-12  # |g| at or below this is "no gradient" (the estimators give exact zeros; this absorbs rounding)


@dataclass(frozen=True)
class GroupSignal:
    """The law of one group's gradient g at each success rate: all `(P,)` float64."""

    p: torch.Tensor
    nonzero: torch.Tensor  # P(g != 0)
    mean: torch.Tensor  # E[g]
    second: torch.Tensor  # E[g^2]

    @property
    def var(self) -> torch.Tensor:
        return (self.second - self.mean**2).clamp(min=0.0)


@dataclass(frozen=True)
class PoolSignal:
    """A setting's signal over a pool of prompts, B per step (`group`: each prompt's own law)."""

    share_with_gradient: float
    snr: float
    prompts_per_step: int
    group: GroupSignal


def _chunk(plan: ObjectivePlan, stage: ObjectiveStage) -> int:
    """The block size b within which the estimator is symmetric: k for a chunked one, else the whole group N."""
    spec = ESTIMATORS[plan.estimator]
    if spec.nan == "chunk" and "k" in spec.reads and stage.k:
        return stage.k
    return plan.num_generations


@lru_cache(maxsize=64)
def _compositions(m: int, b: int) -> torch.Tensor:
    """`(R, b + 1)` int64: every way to give m exchangeable chunks counts 0..b, as the number of chunks at each count."""
    rows = []

    def fill(prefix, left, slots):
        if slots == 1:
            rows.append(prefix + [left])
            return
        for take in range(left, -1, -1):
            fill(prefix + [take], left - take, slots - 1)

    fill([], m, b + 1)
    return torch.tensor(rows, dtype=torch.int64)


def gradient_table(plan: ObjectivePlan, stage: ObjectiveStage | None = None, reference: torch.Tensor | None = None,
                   batch_std: float | None = None):  # fmt: skip
    """Every distinct group of `plan`, its advantages and the pieces of g.

    Returns `(rewards (R, N), s1 (R,), s0 (R,), counts (R, b + 1), b)`: s1 / s0 the sum of the advantages of the
    successes / failures (so g = (s1 (1 - p) - s0 p) / N), and `counts[r, c]` the number of chunks of size b holding
    c successes in group r (b = N and one chunk for a symmetric estimator)."""
    stage = plan.stages[0] if stage is None else stage
    n = plan.num_generations
    b = _chunk(plan, stage)
    counts = _compositions(n // b, b)  # (R, b+1)
    chunk = (torch.arange(b)[None, :] < torch.arange(b + 1)[:, None]).to(torch.float64)  # (b+1, b): c ones first
    rewards = torch.stack([torch.cat([chunk[c] for c in range(b + 1) for _ in range(int(row[c]))]) for row in counts])
    window = None
    if plan.prompt_weight is not None and plan.prompt_weight.stateful and reference is not None:
        window = PromptWindow(size=1, batches=[inner(reference.to(torch.float64)).tolist()])
    if plan.scale == "batch":
        unscaled = dataclasses.replace(plan, scale="none").scaled_advantages(rewards, stage, window)
        if batch_std is None:
            raise ValueError("scale_rewards='batch' divides by the batch's reward std: pass batch_std")
        adv = unscaled / (batch_std + 1e-4)
    else:
        adv = plan.scaled_advantages(rewards, stage, window)
    adv = torch.nan_to_num(adv.to(torch.float64), nan=0.0)
    return rewards, (adv * rewards).sum(-1), (adv * (1 - rewards)).sum(-1), counts, b


def carrying_counts(plan: ObjectivePlan, stage: ObjectiveStage | None = None) -> list[int] | None:
    """The success counts c (of N) whose 0/1 group gets a nonzero advantage; None for a chunked estimator (there it
    depends on how the successes fall into chunks, not on c alone)."""
    _, s1, s0, counts, b = gradient_table(plan, stage)
    if b != plan.num_generations:
        return None
    return [int(c) for c, a, f in zip(counts.argmax(-1).tolist(), s1.tolist(), s0.tolist()) if a != 0 or f != 0]


def _log_binomial(b: int, p: torch.Tensor) -> torch.Tensor:
    """`(b + 1, P)` log P(c successes of b) at each rate (p = 0 and 1 exact: xlogy(0, 0) = 0)."""
    c = torch.arange(b + 1, dtype=torch.float64)[:, None]
    log_comb = math.lgamma(b + 1) - torch.lgamma(c + 1) - torch.lgamma(b - c + 1)  # float64 throughout
    return log_comb + torch.special.xlogy(c, p[None, :]) + torch.special.xlogy(b - c, 1 - p[None, :])


def group_signal(plan: ObjectivePlan, p, *, stage: ObjectiveStage | None = None, reference=None,
                 batch_std: float | None = None, table: tuple | None = None) -> GroupSignal:  # fmt: skip
    """The exact law of one group's gradient g on its prompt's logit, at each success rate in `p`.

    Args:
        plan: the setting (`build_plan(num_generations=N, ...)`): estimator, objective and K, prompt weight, scale.
        p: `(P,)` success rates in [0, 1].
        stage: the objective stage (default: the plan's first).
        reference: `(M,)` rates a stateful prompt weight is measured against (CurveRL's window); None: each group's
            own rate alone (a window that is empty).
        batch_std: the batch reward std `scale_rewards="batch"` divides by (ignored otherwise).
        table: `gradient_table(plan, stage, reference, batch_std)` if already computed (the four above unused).

    Returns:
        `GroupSignal` with `(P,)` P(g != 0), E[g] and E[g^2].
    """
    p = torch.as_tensor(p, dtype=torch.float64).reshape(-1)  # (P,)
    if bool(((p < 0) | (p > 1) | torch.isnan(p)).any()):
        raise ValueError(f"success rates must lie in [0, 1], got {p[(p < 0) | (p > 1) | torch.isnan(p)][0].item()!r}")
    n = plan.num_generations
    _, s1, s0, counts, b = table if table is not None else gradient_table(plan, stage, reference, batch_std)
    m = n // b
    log_multinomial = math.lgamma(m + 1) - torch.lgamma(counts.to(torch.float64) + 1).sum(-1)  # (R,)
    log_b = _log_binomial(b, p)  # (b+1, P), -inf where impossible (p = 0 or 1): never multiplied by a count of 0
    if m == 1:  # one chunk: row r is the group with counts[r].argmax() successes, Binomial(N, p)
        prob = torch.exp(log_b[counts.argmax(-1)])  # (R, P)
    else:
        terms = torch.where(counts[:, :, None] > 0, counts[:, :, None] * log_b[None], 0.0)  # (R, b+1, P)
        prob = torch.exp(log_multinomial[:, None] + terms.sum(1))  # (R, P)
    g = (s1[:, None] * (1 - p[None, :]) - s0[:, None] * p[None, :]) / n  # (R, P)
    nonzero = (g.abs() > NONZERO_TOL).to(torch.float64)
    return GroupSignal(p, (prob * nonzero).sum(0), (prob * g).sum(0), (prob * g**2).sum(0))


def pool_signal(plan: ObjectivePlan, p, prompts_per_step: int, *, stage: ObjectiveStage | None = None) -> PoolSignal:
    """`share_with_gradient` and `snr` of `plan` over a pool of prompts with success rates `p` (`(P,)`), B =
    `prompts_per_step` of them drawn per step uniformly without replacement (the module docstring has the
    formulas). A stateful prompt weight takes the pool's rates as its reference."""
    p = torch.as_tensor(p, dtype=torch.float64).reshape(-1)
    num = p.numel()
    if num == 0:
        raise ValueError("the pool holds no prompts")
    if isinstance(prompts_per_step, bool) or not isinstance(prompts_per_step, int) or not 1 <= prompts_per_step:
        raise ValueError(f"prompts_per_step must be an integer >= 1, got {prompts_per_step!r}")
    if prompts_per_step > num:
        raise ValueError(f"prompts_per_step ({prompts_per_step}) exceeds the pool's {num} prompts")
    pbar = p.mean().item()
    signal = group_signal(plan, p, stage=stage, reference=p, batch_std=math.sqrt(pbar * (1 - pbar)))
    mean_sq = (signal.mean**2).sum().item()
    noise = num / prompts_per_step * signal.second.sum().item() - mean_sq  # P^2 sum_i Var G_i
    snr = math.sqrt(mean_sq) / math.sqrt(noise) if noise > 0 else (math.inf if mean_sq > 0 else 0.0)
    return PoolSignal(signal.nonzero.mean().item(), snr, prompts_per_step, signal)


def crossover_p(larger: ObjectivePlan, smaller: ObjectivePlan, *, reference=None, batch_std: float | None = None,
                grid: int = 2001) -> float | None:  # fmt: skip
    """The largest p below which `larger`'s E[g] on a prompt exceeds `smaller`'s (e.g. Max@8 against Max@2), found
    on a grid of `grid` rates and refined by bisection to 1e-9; None if it never does (or does at every p < 1)."""
    tables = [gradient_table(plan, reference=reference, batch_std=batch_std) for plan in (larger, smaller)]

    def diff(p):
        return group_signal(larger, p, table=tables[0]).mean - group_signal(smaller, p, table=tables[1]).mean

    ps = torch.linspace(0, 1, grid, dtype=torch.float64)[1:-1]
    above = diff(ps) > NONZERO_TOL  # (grid-2,)
    if not bool(above.any()) or bool(above.all()):
        return None
    last = int(torch.nonzero(above)[-1])
    if last + 1 >= ps.numel():
        return None
    lo, hi = ps[last].item(), ps[last + 1].item()
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if diff(torch.tensor([mid], dtype=torch.float64)).item() > NONZERO_TOL else (lo, mid)
    return (lo + hi) / 2
