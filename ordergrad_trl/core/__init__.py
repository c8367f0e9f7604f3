"""Layer 1: OrderGrad's math in pure torch, importable without TRL.

Objective strings -> rank weights (`objectives`), the unbiased L-statistic value and leave-one-out advantage
(`advantage`), the estimator zoo (`estimators`), pathwise gradients (`pathwise`), objective schedules and the one
`OBJECTIVE@K` parser (`schedule.parse_objective_at_k`), and the checked plan of what trains (`plan`)."""

from .advantage import lstat_advantage, lstat_value
from .objectives import rank_weights

__all__ = ["rank_weights", "lstat_value", "lstat_advantage"]
