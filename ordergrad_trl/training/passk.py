"""pass@k / pass^k of every group while training (best@k / worst@k for rewards that are not 0/1), for the trainer's logs.

Each group's value is the U-statistic of `lstat_value` with the `ReMax` / `ReMin` rank weights over k: the mean,
over every k-subset of the group's scorable rewards, of the subset's best / worst reward. For 0/1 rewards with c
ones among n that is pass@k = 1 - C(n-c, k) / C(n, k) and pass^k = C(c, k) / C(n, k), unbiased for the chance that
at least one / all of k fresh rollouts succeed; for any other rewards it is the unbiased estimate of the expected
best / worst of k rewards, logged as `best@k` / `worst@k` so that the two are never mixed up under one name.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ..core.advantage import _float64_device, lstat_value
from ..core.objectives import rank_weights

PREFIX = "ordergrad/"
# (logged name for 0/1 rewards, for other rewards, the rank-weight preset that computes it)
FAMILIES = (("pass@", "best@", "ReMax"), ("pass^", "worst@", "ReMin"))


def default_log_ks(group_size: int) -> list[int]:
    """The powers of two up to `group_size`: 1, 2, 4, ... (`[1, 2, 4]` for 6, `[1]` for 1)."""
    return [2**i for i in range(group_size.bit_length())]


def is_binary(rewards: torch.Tensor) -> bool:
    """Whether every scorable (non-NaN) reward is 0 or 1 (also when none is: nothing is then logged)."""
    scorable = rewards[~torch.isnan(rewards)]
    return bool(((scorable == 0) | (scorable == 1)).all())


def metric_names(k: int, binary: bool) -> list[str]:
    """The two metric names for k: `ordergrad/pass@k`, `ordergrad/pass^k` (0/1 rewards) or best@k, worst@k."""
    return [f"{PREFIX}{(binary_name if binary else other)}{k}" for binary_name, other, _ in FAMILIES]


def group_passk(rewards: torch.Tensor, ks: Iterable[int]) -> dict[str, torch.Tensor]:
    """Per-group pass@k / pass^k (or best@k / worst@k) of one batch.

    Args:
        rewards: `(num_groups, N)` rewards, NaN where a rollout is unscorable (left out of its group, which then
            counts as a group of its scorable rollouts).
        ks: the k to compute; a k larger than N is skipped.

    Returns:
        `{name: (num_valid,) float64}` for each k <= N and each of the two metrics: the values of the groups with
        at least k scorable rollouts (a group with fewer has no unbiased estimate and is left out).
    """
    exact = rewards.to(_float64_device(rewards)).double()  # the CPU where there is no float64 (MPS)
    n = exact.shape[-1]
    binary = is_binary(exact)
    out = {}
    for k in ks:
        if k > n:
            continue
        for name, (_, _, preset) in zip(metric_names(k, binary), FAMILIES):
            values = lstat_value(exact, rank_weights(preset, k))  # (num_groups,), NaN with < k scorable
            out[name] = values[~torch.isnan(values)]
    return out
