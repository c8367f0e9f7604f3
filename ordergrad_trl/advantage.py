"""Unbiased value and leave-one-out advantage of an L-statistic objective, batched over groups.

Setting (Parmas et al. 2026, OrderGrad): each prompt has N i.i.d. rollouts with rewards r_1..r_N, and the
objective is J = E[L(S)] with L(S) = sum_j w_j (S sorted ascending)_j for S a set of K < N draws.
With S a uniform K-subset of the group and r_(1) <= ... <= r_(N) the sorted rewards:

    value       v     = E[L(S)]              = sum_m c_m r_(m),   c_m = sum_j w_j C(m-1,j-1) C(N-m,K-j) / C(N,K)
    include-one q_i   = E[L(S) | i in S]
    leave-one-out v^-i = E[L(S) | S drawn from the other N-1]
    advantage   a_i   = q_i - v^-i            = N/(N-K) (q_i - v)      (so every group sums to zero)

`v` is the U-statistic of J (unbiased), and (K/N) sum_i a_i grad log p(x_i) is an unbiased estimate of grad J;
K=1 (or `Mean` at any K, up to the factor K) is RLOO. For the item at sorted position t, every other item m
contributes with a weight that depends on m and on whether m is below or above t, never on t itself:

    q_t = sum_{m<t} B_m r_(m) + D_t r_(t) + sum_{m>t} E_m r_(m)
    B_m = sum_j w_j C(m-1,j-1) C(N-m-1,K-j-1) / C(N-1,K-1)     (m is the j-th smallest and t is above it)
    D_m = sum_j w_j C(m-1,j-1) C(N-m,K-j)     / C(N-1,K-1)     (t itself is the j-th smallest)
    E_m = sum_j w_j C(m-2,j-2) C(N-m,K-j)     / C(N-1,K-1)     (m is the j-th smallest and t is below it)

so all q come from one sort, one prefix sum and one suffix sum: O(N log N) per group, vectorized over groups.
The tables are O(N K) exact integer combinatorics (each ratio correctly rounded), cached per (N, weights,
device, dtype).

Conventions: weights are ascending (w[0] weighs the smallest draw), see `ordergrad_trl.objectives`.
NaN marks an unscorable reward: it gets advantage 0 and the rest of its group is ranked as a group of its own
size n (all 0 when n <= K). Tied rewards get bit-identical advantages and a constant group gets exactly 0.0.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

from .objectives import rank_weights

__all__ = ["rank_weights", "lstat_value", "lstat_advantage"]

_VALUE, _BELOW, _SELF, _ABOVE = range(4)


@functools.lru_cache(maxsize=512)
def _coefficients(n: int, weights: tuple[float, ...]) -> torch.Tensor:
    """`(4, n)` float64 rows c, B, D, E of the module docstring for a group of n >= K valid rewards."""
    k = len(weights)
    comb = math.comb
    c_nk, c_n1k1 = comb(n, k), comb(n - 1, k - 1)
    rows = torch.zeros(4, n, dtype=torch.float64)
    for m in range(1, n + 1):
        # j ranges where the binomials are non-zero; each ratio of exact integers is rounded once
        for j in range(max(1, k - n + m), min(k, m) + 1):
            ways = comb(m - 1, j - 1) * comb(n - m, k - j)
            rows[_VALUE, m - 1] += weights[j - 1] * (ways / c_nk)
            rows[_SELF, m - 1] += weights[j - 1] * (ways / c_n1k1)
            if j < k and n - m >= 1:
                rows[_BELOW, m - 1] += weights[j - 1] * (comb(m - 1, j - 1) * comb(n - m - 1, k - j - 1) / c_n1k1)
            if j > 1 and m >= 2:
                rows[_ABOVE, m - 1] += weights[j - 1] * (comb(m - 2, j - 2) * comb(n - m, k - j) / c_n1k1)
    return rows


def _advantage_rows(rows: torch.Tensor, k: int) -> torch.Tensor:
    """`(2, n)` from the `(4, n)` c, B, D, E rows: [(B - E) s, (D - B) s] with s = n/(n-K) (0 when n <= K).

    q_t = cumsum(x (B - E))_t + (D - B)_t x_t + sum_m E_m x_m; the last term is the same for every t and
    cancels in q - mean(q), so one cumulative sum gives all centered q, and s turns q - v into a_i.
    """
    n = rows.shape[-1]
    scale = n / (n - k) if n > k else 0.0
    return torch.stack([rows[_BELOW] - rows[_ABOVE], rows[_SELF] - rows[_BELOW]]) * scale


@functools.lru_cache(maxsize=64)
def _table(n: int, weights: tuple[float, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """`(3, n)` for a full group of n: value coefficients c, then the two advantage rows."""
    rows = _coefficients(n, weights)
    return torch.cat([rows[_VALUE][None], _advantage_rows(rows, len(weights))]).to(device=device, dtype=dtype)


@functools.lru_cache(maxsize=16)
def _ragged_table(n: int, weights: tuple[float, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """`(n + 1, 3, n)`: row v is `_table(v)` zero-padded to n (all zero for v < K), for groups with NaNs."""
    table = torch.zeros(n + 1, 3, n, dtype=torch.float64)
    for valid in range(len(weights), n + 1):
        table[valid, :, :valid] = _table(valid, weights, torch.device("cpu"), torch.float64)
    return table.to(device=device, dtype=dtype)


def _prepare(rewards, weights, need_more_than_k: bool):
    """Validate and sort: returns (sorted (G, N), order (G, N), weights tuple, valid counts (G,) or None)."""
    if not isinstance(rewards, torch.Tensor):
        rewards = torch.as_tensor(rewards)
    if rewards.dim() == 0:
        raise ValueError("rewards must have shape (..., N) with each group on the last axis, got a scalar")
    weights = torch.as_tensor(weights, dtype=torch.float64)
    if weights.dim() != 1 or weights.numel() == 0:
        raise ValueError(f"weights must be a non-empty 1-D sequence of K numbers, got shape {tuple(weights.shape)}")
    w = tuple(weights.tolist())
    if not all(math.isfinite(x) for x in w):
        raise ValueError(f"weights must be finite, got {w}")
    k, n = len(w), rewards.shape[-1]
    if n <= k if need_more_than_k else n < k:
        raise ValueError(
            f"rewards of shape {tuple(rewards.shape)} hold groups of N={n} on the last axis, but K={k} weights "
            f"need N {'>' if need_more_than_k else '>='} K (N rollouts per prompt, K draws per objective)"
        )
    # float32 math for half types; cumulative sums in bfloat16 would lose the signal
    compute = rewards.dtype if rewards.dtype in (torch.float32, torch.float64) else torch.float32
    if not rewards.is_floating_point():
        compute = torch.float64
    xs, order = rewards.reshape(-1, n).to(compute).sort(dim=-1)  # (G, N) ascending, NaN last
    valid = None
    # after sorting, -inf sits first and NaN/+inf last: checking two columns is enough on the fast path
    if not bool(torch.isfinite(xs[:, 0]).all() & torch.isfinite(xs[:, -1]).all()):
        if bool(torch.isinf(xs).any()):
            raise ValueError(f"rewards of shape {tuple(rewards.shape)} contain +-inf; use NaN to mark unscorable")
        valid = (~torch.isnan(xs)).sum(-1)  # (G,)
    return xs, order, w, valid


def _out_dtype(rewards) -> torch.dtype:
    dtype = getattr(rewards, "dtype", None)
    return dtype if dtype is not None and dtype.is_floating_point else torch.float64


def lstat_value(rewards: torch.Tensor, weights: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """Unbiased estimate (U-statistic) of J = E[sum_j w_j R_(j:K)] from each group of N >= K rewards.

    Args:
        rewards: `(..., N)`; NaN entries are left out (a group with fewer than K others gives NaN).
        weights: `(K,)` ascending rank weights, e.g. `rank_weights("ReMax", 4)`.

    Returns:
        `(...)` in the rewards' floating dtype. For 0/1 rewards ReMax gives pass@K and ReMin pass^K.
    """
    xs, _, w, valid = _prepare(rewards, weights, need_more_than_k=False)
    n = xs.shape[-1]
    if valid is None:
        value = xs @ _table(n, w, xs.device, xs.dtype)[0]  # (G,)
    else:
        coef = _ragged_table(n, w, xs.device, xs.dtype)[valid, 0]  # (G, N)
        value = (torch.nan_to_num(xs) * coef).sum(-1)
        value = torch.where(valid >= len(w), value, torch.nan)
    return value.reshape(rewards.shape[:-1]).to(_out_dtype(rewards))


def lstat_advantage(rewards: torch.Tensor, weights: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """Leave-one-out advantage a_i = E[L(S) | i in S] - E[L(S) | S from the others] of every rollout.

    Not multiplied by K: the unbiased policy-gradient estimate is (K/N) sum_i a_i grad log p(x_i), so a
    trainer whose loss averages over rollouts uses K * a_i (with K=1 or `Mean` that is RLOO).

    Args:
        rewards: `(..., N)` with N > K; NaN marks an unscorable rollout (advantage 0; the rest of its group is
            ranked as a smaller group, all 0 when K or fewer remain). +-inf raises.
        weights: `(K,)` ascending rank weights, e.g. `rank_weights("TopM:2", 4)`.

    Returns:
        `(..., N)` in the rewards' floating dtype; every group sums to zero and tied rewards get identical values.
    """
    # 1. sort and shift each group to start at 0: advantages are shift invariant, and a constant group becomes
    #    exact zeros, so it gets exactly 0.0 (several TRL losses branch on the sign of the advantage)
    xs, order, w, valid = _prepare(rewards, weights, need_more_than_k=True)
    g, n = xs.shape
    xs = xs - xs[:, :1]  # (G, N)
    if valid is None:
        _, diff, own = _table(n, w, xs.device, xs.dtype)  # (N,) each
    else:
        xs = torch.nan_to_num(xs)
        _, diff, own = _ragged_table(n, w, xs.device, xs.dtype)[valid].unbind(1)  # (G, N) each

    # 2. include-one values up to a per-group constant, already scaled by N/(N-K)
    q = torch.addcmul(torch.cumsum(xs * diff, dim=-1), xs, own)  # (G, N)

    # 3. ties: mathematically equal q can differ in the last bit; give every tied run its first member's value
    run_start = torch.ones_like(xs, dtype=torch.bool)
    run_start[:, 1:] = xs[:, 1:] != xs[:, :-1]
    positions = torch.arange(n, device=xs.device)
    first = (run_start * positions).cummax(dim=-1).values  # (G, N)
    q = q.gather(-1, first)

    # 4. center: mean_i q_i = v in exact arithmetic, so a = N/(N-K) (q - v) is q minus its group mean
    if valid is None:
        adv = q - q.mean(dim=-1, keepdim=True)  # (G, N)
    else:
        in_group = positions < valid[:, None]  # (G, N)
        q = q * in_group
        mean = q.sum(-1, keepdim=True) / valid.clamp(min=1)[:, None]
        adv = torch.where(in_group, q - mean, 0.0)  # rows with <= K valid have zero tables, hence zero here

    # 5. back to the input order
    out = torch.empty_like(adv).scatter_(-1, order, adv)
    return out.reshape(rewards.shape).to(_out_dtype(rewards))
