"""Evaluation metrics on a `(P, n)` tensor: P problems, n samples each, NaN = missing or unscorable sample.

Every order-statistic metric is the unbiased U-statistic of the training code, `ordergrad_trl.lstat_value`:
for each problem it is the exact average, over all K-subsets of its n samples, of sum_j w_j (subset sorted
ascending)_j, with `w = rank_weights(objective, K)`. So a number reported here and the objective a run was
trained on are the same function of the same rewards. With 0/1 correctness and c correct out of n:

    pass@k   = ReMax  weights = 1 - C(n-c, k) / C(n, k)    (Chen et al. 2021, the Codex estimator)
    pass^k   = ReMin  weights = C(c, k) / C(n, k)            (all k of k correct)
    best@k   = ReMax  on any reward (shaped or not), worst@k = ReMin, CVaR_q@k = LowerTailMean:q, mean = pass@1

NaN samples are dropped per problem (n becomes the number of valid samples); a problem with fewer than K valid
samples gives NaN and is left out of the benchmark mean.

maj@k is not an L-statistic (the vote depends on the answers, not only on the rewards); see `maj_at_k`.
"""

from __future__ import annotations

import math

import torch

from ordergrad_trl import lstat_value, rank_weights

__all__ = [
    "best_of_k",
    "bootstrap_ci",
    "cvar_at_k",
    "lstat_metric",
    "maj_at_k",
    "pass_at_k",
    "pass_hat_k",
    "problem_mean",
    "worst_of_k",
]


def _check(rewards: torch.Tensor, k: int, name: str = "rewards") -> torch.Tensor:
    rewards = torch.as_tensor(rewards, dtype=torch.float64)
    if rewards.dim() != 2:
        raise ValueError(f"{name} must have shape (problems, samples), got {tuple(rewards.shape)}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= rewards.shape[1]:
        raise ValueError(f"k must be an integer in [1, samples={rewards.shape[1]}], got {k!r}")
    return rewards


def lstat_metric(rewards: torch.Tensor, objective, k: int) -> torch.Tensor:
    """Per-problem unbiased estimate `(P,)` of E[sum_j w_j R_(j:k)] for `w = rank_weights(objective, k)`."""
    rewards = _check(rewards, k)
    return lstat_value(rewards, rank_weights(objective, k))


def pass_at_k(correct: torch.Tensor, k: int) -> torch.Tensor:
    """`(P,)` probability that at least one of k samples is correct (0/1 `correct`, NaN = missing)."""
    return lstat_metric(correct, "ReMax", k)


def pass_hat_k(correct: torch.Tensor, k: int) -> torch.Tensor:
    """`(P,)` pass^k: probability that all k samples are correct."""
    return lstat_metric(correct, "ReMin", k)


def best_of_k(rewards: torch.Tensor, k: int) -> torch.Tensor:
    """`(P,)` E[max of k rewards]; equals `pass_at_k` for 0/1 rewards."""
    return lstat_metric(rewards, "ReMax", k)


def worst_of_k(rewards: torch.Tensor, k: int) -> torch.Tensor:
    """`(P,)` E[min of k rewards]; equals `pass_hat_k` for 0/1 rewards."""
    return lstat_metric(rewards, "ReMin", k)


def cvar_at_k(rewards: torch.Tensor, k: int, q: float) -> torch.Tensor:
    """`(P,)` E[mean of the ceil(q k) smallest of k rewards] (`LowerTailMean:q`, as the training objective)."""
    return lstat_metric(rewards, f"LowerTailMean:{q}", k)


def problem_mean(values: torch.Tensor) -> tuple[float, int]:
    """(mean over problems ignoring NaN, number of problems counted); (nan, 0) when none counts."""
    values = torch.as_tensor(values, dtype=torch.float64)
    ok = ~torch.isnan(values)
    count = int(ok.sum())
    return (float(values[ok].mean()) if count else math.nan), count


# --------------------------------------------------------------------------------------------------- maj@k
def maj_at_k(
    labels: torch.Tensor,
    correct: torch.Tensor,
    k: int,
    *,
    exact_limit: int = 20_000,
    num_draws: int = 4_096,
    seed: int = 0,
) -> torch.Tensor:
    """`(P,)` expected correctness of a majority vote over k samples drawn without replacement from the n.

    Definition: draw a uniform k-subset of a problem's valid samples; every sample with an answer votes for its
    answer class (`labels`, an integer id per distinct answer of that problem; -1 = no answer extracted, which
    does not vote); the vote is the most frequent class, ties broken uniformly at random; the score is the
    correctness of that class (the mean `correct` of its members, which agree when classes are answer
    equivalence classes), 0 when nobody votes. `maj_at_k` is the expectation of that score: exact
    (enumerating all C(n, k) subsets, ties counted fractionally) when C(n, k) <= `exact_limit`, else a Monte
    Carlo average over `num_draws` random subsets drawn from a generator seeded with `seed` (reproducible).
    With k = n this is the usual majority vote over all samples; maj@1 = pass@1 when every correct sample
    has an answer.

    Args:
        labels: `(P, n)` integer answer-class ids, -1 for no answer.
        correct: `(P, n)` 0/1 correctness; NaN marks a missing sample (left out, like `lstat_value`).
        k: votes per draw, 1 <= k <= n. Problems with fewer than k valid samples give NaN.
    """
    correct = _check(correct, k, "correct")
    labels = torch.as_tensor(labels)
    if labels.shape != correct.shape or labels.is_floating_point():
        raise ValueError(f"labels must be an integer tensor of shape {tuple(correct.shape)}, got "
                         f"{labels.dtype} {tuple(labels.shape)}")
    if not (exact_limit >= 1 and num_draws >= 1):
        raise ValueError(f"exact_limit and num_draws must be >= 1, got {exact_limit} and {num_draws}")
    num_p = correct.shape[0]
    valid = ~torch.isnan(correct)  # (P, n)
    out = torch.full((num_p,), math.nan, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    counts = valid.sum(-1)  # (P,)
    for v in sorted(set(counts.tolist())):
        if v < k:
            continue
        rows = (counts == v).nonzero().flatten()
        # valid samples first (stable), so each row's first v columns are its pool
        order = torch.argsort((~valid[rows]).to(torch.int8), dim=-1, stable=True)[:, :v]  # (R, v)
        lab = torch.gather(labels[rows].long(), 1, order)
        cor = torch.gather(correct[rows], 1, order)
        out[rows] = _maj_pool(lab, cor, k, exact_limit, num_draws, gen)
    return out


def _class_correctness(lab: torch.Tensor, cor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Relabel each row's classes 0..C-1 (no answer -> C = v) and give each class its mean correctness."""
    rows, v = lab.shape
    # dense per-row ids: position of the first sample with the same label (an id < v for every class)
    same = (lab[:, :, None] == lab[:, None, :]) & (lab[:, :, None] >= 0)  # (R, v, v)
    first = torch.where(same.any(-1), same.int().argmax(-1), v)  # (R, v); abstainers -> v
    total = torch.zeros(rows, v + 1, dtype=torch.float64).scatter_add_(1, first, cor)
    size = torch.zeros(rows, v + 1, dtype=torch.float64).scatter_add_(1, first, torch.ones_like(cor))
    class_ok = torch.where(size > 0, total / size.clamp(min=1), 0.0)
    class_ok[:, v] = 0.0  # abstaining is never a correct vote
    return first, class_ok


def _maj_pool(lab, cor, k, exact_limit, num_draws, gen) -> torch.Tensor:
    rows, v = lab.shape
    ids, class_ok = _class_correctness(lab, cor)  # (R, v), (R, v + 1)
    if math.comb(v, k) <= exact_limit:
        subsets = torch.combinations(torch.arange(v), k) if k > 1 else torch.arange(v)[:, None]  # (S, k)
        draws = subsets.expand(rows, -1, -1)
    else:
        draws = torch.rand(rows, num_draws, v, generator=gen).argsort(-1)[..., :k]  # (R, S, k)
    num_s = draws.shape[1]
    result = torch.empty(rows, dtype=torch.float64)
    chunk = max(1, (1 << 22) // max(1, num_s * (v + 1)))  # bound the (rows, S, v + 1) vote tensor
    for start in range(0, rows, chunk):
        sl = slice(start, start + chunk)
        picked = torch.gather(ids[sl, None, :].expand(-1, num_s, -1), 2, draws[sl])  # (r, S, k)
        votes = torch.zeros(picked.shape[0], num_s, v + 1, dtype=torch.float64)
        votes.scatter_add_(2, picked, torch.ones_like(picked, dtype=torch.float64))
        votes[..., v] = 0.0  # abstentions
        top = votes.max(-1, keepdim=True).values
        tied = (votes == top) & (top > 0)  # (r, S, v + 1)
        credit = (tied * class_ok[sl, None, :]).sum(-1) / tied.sum(-1).clamp(min=1)  # (r, S)
        result[sl] = credit.mean(-1)
    return result


# ----------------------------------------------------------------------------------------------- bootstrap
def bootstrap_ci(
    values: torch.Tensor, num_samples: int = 1_000, level: float = 0.95, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Percentile bootstrap CI of the mean over problems, resampling problems with replacement.

    Args:
        values: `(M, P)` per-problem values of M metrics (or `(P,)`); NaN problems are left out of each mean,
            as in the point estimate. All metrics share the same resampled problem sets (seeded).
        num_samples: bootstrap replicates B.
        level: coverage of the interval.

    Returns:
        (low, high), each `(M,)` (or scalars for 1-D input); NaN where a metric has no valid problem.
    """
    values = torch.as_tensor(values, dtype=torch.float64)
    squeeze = values.dim() == 1
    values = values[None] if squeeze else values
    if values.dim() != 2:
        raise ValueError(f"values must have shape (P,) or (M, P), got {tuple(values.shape)}")
    if not (isinstance(num_samples, int) and num_samples >= 1) or not 0 < level < 1:
        raise ValueError(f"need num_samples >= 1 and 0 < level < 1, got {num_samples} and {level}")
    num_m, num_p = values.shape
    if num_p == 0:
        nan = torch.full((num_m,), math.nan, dtype=torch.float64)
        return (nan[0], nan[0]) if squeeze else (nan, nan)
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(num_p, (num_samples, num_p), generator=gen)  # (B, P)
    means = values[:, idx].nanmean(-1)  # (M, B); NaN when a replicate drew only NaN problems
    alpha = (1 - level) / 2
    q = torch.tensor([alpha, 1 - alpha], dtype=torch.float64)
    low, high = torch.nanquantile(means, q, dim=-1)  # (M,), (M,)
    return (low[0], high[0]) if squeeze else (low, high)
