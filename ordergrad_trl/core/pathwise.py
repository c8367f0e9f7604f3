"""Pathwise (reparameterization) gradients of the batch L-statistic value, for differentiable rewards.

When rewards are differentiable functions of the parameters (r_i = r(x_i(theta)), e.g. a differentiable reward
model on reparameterized samples), the U-statistic value v = lstat_value(r, w) = sum_m c_m r_(m) (see
`ordergrad_trl.core.advantage`) can be differentiated directly: dv/dr_i = c_(rank of r_i), the value's rank weight mapped
back to the item. With a.s. distinct rewards (continuous reward distributions) `grad_theta v` is an unbiased
estimate of the pathwise gradient of J = E[sum_j w_j R_(j:K)], and can be combined with the score-function
advantages of `lstat_advantage`.

Ties. v is continuous and piecewise linear in r; at tied rewards it has no gradient. We give every member of a tied
run the average of the c_m over the run's positions: the gradient is then symmetric in tied items, and it is the
centroid of the gradients of the linear pieces that meet there (one per ordering of the tied items), so a Clarke
subgradient. This is a choice (any convex combination would do); it only matters where ties have positive
probability.

NaN rewards are left out as in `lstat_value` and get gradient 0; a group with fewer than K valid rewards has value
NaN and gradient 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .advantage import _check, _out_dtype, _padded, _ragged, _sort

__all__ = ["lstat_value_grad", "lstat_value_differentiable"]


def _sorted_tie_weights(rewards, weights):
    """Sort once: sorted `(G, N)`, order `(G, N)`, tie-averaged value weights in sorted order `(G, N)`, valid counts
    `(G,)` (None without NaN) and K."""
    r, w = _check(rewards, weights, need_more_than_k=False)
    xs, order, valid = _sort(r)
    n = xs.shape[-1]
    if valid is None:
        coef = _padded(n, n, w, xs.device, xs.dtype)[0, :n].expand_as(xs)  # (G, N)
    else:
        coef = _ragged(valid, n, w, xs.dtype)[:, 0, :n]  # (G, N), 0 past the last valid reward
    # runs of equal sorted values: a new run starts wherever the value changes (NaN != NaN keeps NaNs apart)
    starts = torch.ones_like(xs, dtype=torch.bool)
    starts[:, 1:] = xs[:, 1:] != xs[:, :-1]
    run = torch.cumsum(starts, dim=-1) - 1  # (G, N) run index per sorted position
    run_sum = torch.zeros_like(coef).scatter_add_(-1, run, coef)
    run_len = torch.zeros_like(coef).scatter_add_(-1, run, torch.ones_like(coef))
    coef = (run_sum / run_len.clamp(min=1)).gather(-1, run)  # (G, N)
    if valid is not None:
        coef = torch.where(valid[:, None] >= len(w), coef, 0.0)
    return xs, order, coef, valid, len(w)


def lstat_value_grad(rewards: torch.Tensor, weights: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """Gradient of `lstat_value(rewards, weights)` with respect to each reward.

    Args:
        rewards: `(..., N)` with N >= K; NaN entries are left out (gradient 0).
        weights: `(K,)` ascending rank weights, e.g. `rank_weights("TopM:2", 4)`.

    Returns:
        `(..., N)` in the rewards' floating dtype (float64 for integer rewards): the value weight c_m of each
        reward's rank, averaged over a run of tied rewards (a subgradient; see the module docstring). Each valid
        group's gradient sums to sum_j w_j, since shifting every reward by d shifts the value by d sum_j w_j.
    """
    xs, order, coef, _, _ = _sorted_tie_weights(rewards, weights)
    out = torch.empty_like(coef).scatter_(-1, order, coef)
    return out.reshape(torch.as_tensor(rewards).shape).to(_out_dtype(rewards))


def lstat_value_differentiable(rewards: torch.Tensor, weights: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """`lstat_value(rewards, weights)` that autograd differentiates, with the tie rule of `lstat_value_grad`.

    The value is computed as sum_m c_m r_(m) through `torch.sort` (which autograd differentiates, routing each
    sorted position's gradient back to its item) with c averaged over tied runs, so `backward()` gives
    `lstat_value_grad` exactly, ties included. Tied rewards are equal, so the averaging leaves the value unchanged.

    Args:
        rewards: floating `(..., N)`, usually requiring grad; NaN entries are left out.
        weights: `(K,)` ascending rank weights.

    Returns:
        `(...)` in the rewards' dtype; NaN for groups with fewer than K valid rewards (gradient 0 there).
    """
    if not isinstance(rewards, torch.Tensor) or not rewards.is_floating_point():
        raise ValueError("lstat_value_differentiable: rewards must be a floating-point tensor (autograd needs one)")
    _, _, coef, valid, k = _sorted_tie_weights(rewards.detach(), weights)
    n = rewards.shape[-1]
    xs = rewards.reshape(-1, n).sort(dim=-1).values  # (G, N), differentiable; NaN last, as in the detached sort
    xs = torch.where(torch.isnan(xs), 0.0, xs).to(coef.dtype)  # NaN * 0 would still be NaN, and its gradient too
    value = (xs * coef).sum(-1)  # (G,), summed in float32 at least
    if valid is not None:
        value = torch.where(valid >= k, value, torch.nan)
    return value.reshape(rewards.shape[:-1]).to(rewards.dtype)
