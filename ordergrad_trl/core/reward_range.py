"""The values a reward function returns, declared with it, so a range a prompt weight cannot take is known at start-up.

A prompt weight reads a group's p_hat, the mean of its rewards, which must lie in [0, 1] (or be 0 or 1 for a binary
weight). TRL's reward is the weighted sum of the reward functions, so whether it can leave that range follows from
each function's range and `reward_weights`, before anything is generated. A function declares its range by carrying
a `RewardRange` as the attribute `RANGE_ATTRIBUTE` (`tasks.rewards.register_reward` sets it; a function of your own:
`my_reward.ordergrad_reward_range = RewardRange(0, 1)`); `functools.partial` + `update_wrapper` and the trainer's
checked wrappers keep it (they copy `__dict__`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RANGE_ATTRIBUTE", "RewardRange", "weighted_sum_range"]

RANGE_ATTRIBUTE = "ordergrad_reward_range"


@dataclass(frozen=True)
class RewardRange:
    """The values a reward function returns (None aside): `low`..`high`, or with `binary` only `low` or `high`."""

    low: float
    high: float
    binary: bool = False

    def __str__(self) -> str:
        return f"{self.low:g} or {self.high:g}" if self.binary else f"in [{self.low:g}, {self.high:g}]"


def weighted_sum_range(terms: list[tuple[float, RewardRange]], binary: bool) -> tuple[float, float] | None:
    """The range of sum_f w_f r_f over `terms` ((w_f, range of r_f), a None reward counted as 0, as TRL sums them);
    with `binary`, None unless every reachable sum is 0 or 1 (else `(low, high)` of the sums, possibly outside)."""
    if binary:
        sums = {0.0}  # each function adds 0 (a None too) or w x one of its two values
        for w, r in terms:
            if not r.binary:
                return (float("-inf"), float("inf"))
            sums = {s + w * v for s in sums for v in {0.0, r.low, r.high}}
        return None if sums <= {0.0, 1.0} else (min(sums), max(sums))
    low = sum(min(0.0, w * r.low, w * r.high) for w, r in terms)
    high = sum(max(0.0, w * r.low, w * r.high) for w, r in terms)
    return (low, high)
