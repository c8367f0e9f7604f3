"""Unbiased value and leave-one-out advantage of an L-statistic objective, batched over groups.

Setting (Parmas et al. 2026, OrderGrad): a prompt has N i.i.d. rollouts with rewards r_1..r_N, and the objective
is J = E[L(S)], L(S) = sum_j w_j (S sorted ascending)_j, over K < N draws. With S a uniform K-subset of the group
and r_(1) <= ... <= r_(N) the sorted rewards:

    value          v     = E[L(S)] = sum_m c_m r_(m),   c_m = sum_j w_j C(m-1, j-1) C(N-m, K-j) / C(N, K)
    include-one    q_i   = E[L(S) | i in S]
    leave-one-out  v^-i  = E[L(S) | S drawn from the other N-1]
    advantage      a_i   = q_i - v^-i = N/(N-K) (q_i - v)           (every group sums to zero: mean_i q_i = v)

v is the U-statistic of J (unbiased) and (K/N) sum_i a_i grad log p(x_i) is an unbiased estimate of grad J;
K=1 (or `Mean` at any K, up to the factor K) is RLOO.

How q is computed. Take neighbours t and t+1 in sorted order. Pair each K-subset holding t but not t+1 with
the same subset holding t+1 instead: nothing lies strictly between them, so the swapped-in item keeps its rank
j and L changes by w_j (r_(t+1) - r_(t)); subsets holding both are common to q_t and q_(t+1). Counting the
other K-1 members among the N-2 remaining items (t-1 below, N-t-1 above):

    q_(t+1) - q_t = h_t (r_(t+1) - r_(t)),    h_t = sum_j w_j C(t-1, j-1) C(N-t-1, K-j) / C(N-1, K-1)

So all q, up to a per-group constant, are one cumulative sum of weighted gaps after one sort, and so is their
mean: gap t lifts the N-t items above it, so mean_i q_i = sum_t gap_t h_t (N-t)/N. Because q and the mean move
only by gaps, tied rewards get bit-identical advantages and a constant group gets exactly 0.0 by construction
(several TRL losses branch on the advantage's sign). O(N log N) per group, a handful of batched ops for all groups.
0/1 rewards (the common RLVR case) need no sort: with c ones the only gap is 1 at t = N-c, so
a_one = h_(N-c) - hu_(N-c) and a_zero = -hu_(N-c) (hu_t = h_t (N-t)/N), the very floating-point operations the
general path does on such a group, hence bit-identical to it.

Tables. C(m-1, j-1) C(N-m, K-j) / C(N, K) is the probability that the j-th smallest of a uniform K-subset is the
m-th smallest of the group: for each j a distribution over m, so a row summing to 1, and h uses the same
distribution for a group of N-1 (h_t = N/K times it after the N/(N-K) scaling). Each row is built in float64 as
cumulative products of the neighbour ratios P(m+1, j) / P(m, j) (small integers, each ratio rounded once), taken
outward from the row's mode so no partial product overflows or underflows, then divided by its sum: relative error
about 2N machine epsilons whatever C(N, K) is (C(1024, 512) ~ 4e306). The tables are built on the CPU in float64,
lazily per count of valid rewards that actually occurs, cached by (N, count, weights), and moved to the rewards'
device and compute dtype (float32 on devices without float64, such as Apple MPS).

Conventions: weights are ascending (w[0] weighs the smallest draw), see `ordergrad_trl.core.objectives`.
NaN marks an unscorable reward: it gets advantage 0 and the rest of its group is ranked as a group of its own
size n (all 0 when n <= K).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

from .objectives import rank_weights

__all__ = ["rank_weights", "lstat_value", "lstat_advantage"]

_CPU = torch.device("cpu")


def _has_float64(tensor: torch.Tensor) -> bool:
    """Whether `tensor`'s device computes in float64 (Apple's MPS does not)."""
    return tensor.device.type != "mps"


def _float64_device(tensor: torch.Tensor) -> torch.device:
    """Where float64 math on `tensor` can run: its own device, or the CPU."""
    return tensor.device if _has_float64(tensor) else _CPU


def _order_statistic_pmf(n: int, k: int, js: torch.Tensor) -> torch.Tensor:
    """`(len(js), n-k+1)` float64: entry [a, i] = C(m-1, j-1) C(n-m, k-j) / C(n, k) for j = js[a], m = j + i.

    Row a is the distribution of the position m of the j-th smallest of a uniform k-subset of n ranked items.
    """
    j = js.to(torch.float64)[:, None]  # (J, 1)
    i = torch.arange(n - k, dtype=torch.float64)[None, :]  # (1, L), L = n-k
    up, down = (j + i) * (n - k - i), (i + 1) * (n - j - i)  # P(i+1)/P(i) = up/down, exact integers in float64
    # log-concave rows: the ratio falls below 1 once, at the mode; products taken away from it stay in (0, 1]
    mode = (up >= down).sum(1, keepdim=True)  # (J, 1)
    fwd = torch.where(i >= mode, up / down, 1.0).cumprod(1)  # (J, L): P(i+1)/P(mode) at i >= mode, else 1
    bwd = torch.where(i < mode, down / up, 1.0).flip(1).cumprod(1).flip(1)  # P(i)/P(mode) at i < mode, else 1
    ones = torch.ones_like(j)
    rows = torch.cat([ones, fwd], 1) * torch.cat([bwd, ones], 1)  # (J, L+1), 1 at the mode
    return rows / rows.sum(1, keepdim=True)


def _weighted_positions(n: int, k: int, weights: torch.Tensor) -> torch.Tensor:
    """`(n,)` float64: sum_j w_j P(m, j) for m = 1..n, over the nonzero weights only."""
    js = torch.nonzero(weights).flatten() + 1  # (J,) 1-indexed ranks with w_j != 0
    out = torch.zeros(n, dtype=torch.float64)
    if len(js):
        terms = weights[js - 1, None] * _order_statistic_pmf(n, k, js)  # (J, L+1)
        positions = (js - 1)[:, None] + torch.arange(n - k + 1)  # (J, L+1): m - 1 = (j - 1) + i
        out.scatter_add_(0, positions.flatten(), terms.flatten())
    return out


@functools.lru_cache(maxsize=1024)
def _coefficients(n: int, weights: tuple[float, ...]) -> torch.Tensor:
    """`(3, n+1)` float64 on the CPU for a group of n >= K valid rewards, indexed by sorted position (0-based):
    value weights c (last entry 0), the scaled gap weights N/(N-K) h_t at t (0 at t = 0 and t = n), and
    hu_t = h_t (n-t)/n, the weight of gap t in the group's mean."""
    k, w = len(weights), torch.tensor(weights, dtype=torch.float64)
    rows = torch.zeros(3, n + 1, dtype=torch.float64)
    rows[0, :n] = _weighted_positions(n, k, w)
    if n > k:  # no leave-one-out advantage without K+1 rewards
        # N/(N-K) h_t = N/(N-K) (N-K)/K P_(N-1)(t, j) weighted: N/K times the value weights of a group of N-1
        rows[1, 1:n] = _weighted_positions(n - 1, k, w) * n / k
        t = torch.arange(1, n, dtype=torch.float64)
        rows[2, 1:n] = rows[1, 1:n] * (n - t) / n
    return rows


@functools.lru_cache(maxsize=4096)
def _padded(n: int, count: int, weights: tuple[float, ...], device: torch.device, dtype: torch.dtype):
    """`(3, n+1)` `_coefficients` of `count` valid rewards, zero-padded to a group of n, on device and dtype.
    All zero when count < K (no value, no advantage)."""
    rows = torch.zeros(3, n + 1, dtype=torch.float64)
    if count >= len(weights):
        rows[:, : count + 1] = _coefficients(count, weights)
    return rows.to(dtype).to(device)  # cast on the CPU: MPS cannot hold float64 even for a copy


@functools.lru_cache(maxsize=256)
def _binary(n: int, weights: tuple[float, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """`(2, n+1)`: advantage of a one and of a zero in a group of n 0/1 rewards with c ones, indexed by c.

    Computed from the device rows in the compute dtype exactly as the sorting path combines them (q - mean with
    q = h_t or 0 and mean = hu_t at t = n - c), so both paths give bit-identical results."""
    h, hu = _padded(n, n, weights, device, dtype)[1:].flip(-1)  # (n+1,) each, indexed by c = n - t
    return torch.stack([h - hu, 0.0 - hu])


def _ragged(valid: torch.Tensor, n: int, weights: tuple[float, ...], dtype: torch.dtype) -> torch.Tensor:
    """`(G, 3, n+1)` coefficient rows of each group's valid count (built only for the counts that occur)."""
    counts, inverse = torch.unique(valid, return_inverse=True)
    table = torch.stack([_padded(n, c, weights, valid.device, dtype) for c in counts.tolist()])
    return table[inverse]


def _check(rewards, weights, need_more_than_k: bool) -> tuple[torch.Tensor, tuple[float, ...]]:
    """Validate; `(G, N)` rewards in the compute dtype and the weights as a tuple."""
    if not isinstance(rewards, torch.Tensor):
        rewards = torch.as_tensor(rewards)
    if rewards.dim() == 0:
        raise ValueError("rewards must have shape (..., N) with each group on the last axis, got a scalar")
    if not isinstance(weights, torch.Tensor):
        weights = torch.as_tensor(weights, dtype=torch.float64)
    if weights.dim() != 1 or weights.numel() == 0:
        raise ValueError(f"weights must be a non-empty 1-D sequence of K numbers, got shape {tuple(weights.shape)}")
    w = tuple(float(x) for x in weights.tolist())
    if not all(math.isfinite(x) for x in w):
        raise ValueError(f"weights must be finite, got {w}")
    k, n = len(w), rewards.shape[-1]
    if n <= k if need_more_than_k else n < k:
        raise ValueError(
            f"rewards of shape {tuple(rewards.shape)} hold groups of N={n} on the last axis, but K={k} weights "
            f"need N {'>' if need_more_than_k else '>='} K (N rollouts per prompt, K draws per objective)"
        )
    return rewards.reshape(-1, n).to(_compute_dtype(rewards)), w


def _compute_dtype(rewards: torch.Tensor) -> torch.dtype:
    # half types compute in float32: cumulative sums in bfloat16 would drown the signal
    if rewards.dtype in (torch.float32, torch.float64):
        return rewards.dtype
    return torch.float64 if not rewards.is_floating_point() and _has_float64(rewards) else torch.float32


def _out_dtype(rewards) -> torch.dtype:
    dtype = getattr(rewards, "dtype", None)
    if dtype is not None and dtype.is_floating_point:
        return dtype
    return torch.float64 if not isinstance(rewards, torch.Tensor) or _has_float64(rewards) else torch.float32


def _sort(r: torch.Tensor):
    """Sorted `(G, N)` (NaN last), order `(G, N)`, valid counts `(G,)` or None when every reward is finite."""
    xs, order = r.sort(dim=-1)
    return xs, order, _valid_counts(xs)


def _valid_counts(xs: torch.Tensor) -> torch.Tensor | None:
    """`(G,)` non-NaN counts of sorted rows, None when all are finite; raises on +-inf."""
    # after sorting, -inf sits first and NaN/+inf last, so two columns decide the common all-finite case
    if bool(torch.isfinite(xs[:, 0]).all() & torch.isfinite(xs[:, -1]).all()):
        return None
    if bool(torch.isinf(xs).any()):
        raise ValueError(f"rewards of shape {tuple(xs.shape)} contain +-inf; use NaN to mark unscorable")
    return (~torch.isnan(xs)).sum(-1)


def lstat_value(rewards: torch.Tensor, weights: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """Unbiased estimate (U-statistic) of J = E[sum_j w_j R_(j:K)] from each group of N >= K rewards.

    Args:
        rewards: `(..., N)`; NaN entries are left out (a group with fewer than K others gives NaN).
        weights: `(K,)` ascending rank weights, e.g. `rank_weights("ReMax", 4)`.

    Returns:
        `(...)` in the rewards' floating dtype. For 0/1 rewards ReMax gives pass@K and ReMin pass^K.
    """
    r, w = _check(rewards, weights, need_more_than_k=False)
    xs, _, valid = _sort(r)
    n = xs.shape[-1]
    if valid is None:
        value = xs @ _padded(n, n, w, xs.device, xs.dtype)[0, :n]  # (G,)
    else:
        coef = _ragged(valid, n, w, xs.dtype)[:, 0, :n]  # (G, N)
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
    r, w = _check(rewards, weights, need_more_than_k=True)
    n = r.shape[-1]
    ones = r == 1  # (G, N)
    if torch.equal(r, ones.to(r.dtype)):  # 0/1 rewards, no NaN: counts are enough (see the module docstring)
        one, zero = _binary(n, w, r.device, r.dtype)[:, ones.sum(-1)]  # (G,) each
        return torch.where(ones, one[:, None], zero[:, None]).reshape(rewards.shape).to(_out_dtype(rewards))

    # 1. sort; the gaps between sorted neighbours are all the advantage depends on
    xs, order = r.sort(dim=-1)  # (G, N) ascending, NaN last
    gaps = xs - xs.roll(1, -1)  # (G, N): gap t at t (0-based; t = 0 wraps around, but h_0 = hu_0 = 0)
    rows = _padded(n, n, w, xs.device, xs.dtype)[1:, :n]  # (2, N): h and hu at t = 0..N-1, both 0 at t = 0
    h, hu = rows[0], rows[1]

    # 2. include-one values up to a per-group constant, already scaled by N/(N-K): q_1 = 0, q_(t+1) = q_t + h_t gap_t
    q = torch.cumsum(gaps * h, dim=-1)  # (G, N)

    # 3. center: mean_i q_i = v in exact arithmetic, so a = N/(N-K) (q - v) is q minus its group mean
    mean = (gaps * hu).sum(-1, keepdim=True)  # (G, 1); a row-wise sum, unlike a matmul, rounds the same at any G
    valid = None
    if not math.isfinite(mean.sum().item()):  # a NaN or inf reward makes some gap, hence the mean, non-finite
        valid = _valid_counts(xs)  # raises on +-inf; None if only the gaps overflowed
    if valid is None:
        adv = q - mean  # (G, N)
    else:
        gaps = torch.nan_to_num(xs.diff(dim=-1, prepend=xs[:, :1]))  # padded h is 0 there; NaN * 0 is still NaN
        rows = _ragged(valid, n, w, xs.dtype)[:, 1:, :n]  # (G, 2, N)
        q = torch.cumsum(gaps * rows[:, 0], dim=-1)
        mean = (gaps * rows[:, 1]).sum(-1, keepdim=True)
        in_group = torch.arange(n, device=xs.device) < valid[:, None]  # (G, N)
        adv = torch.where(in_group & (valid[:, None] > len(w)), q - mean, 0.0)

    # 4. back to the input order
    out = torch.empty_like(adv).scatter_(-1, order, adv)
    return out.reshape(rewards.shape).to(_out_dtype(rewards))
