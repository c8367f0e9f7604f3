"""Seed-level contrasts: the one implementation behind `ordergrad-eval compare --groups` and the studies' reports.

A group is one setting trained from several seeds; its value on a metric at a seed is that run's mean over its
problems of the report's own per-problem estimate (pass@k and pass^k: the unbiased U-statistics of c correct of n;
an objective `Preset@K`: `metrics.lstat_metric`). A contrast GROUP - MINUS on METRIC is paired by seed,
d_s = value(GROUP, s) - value(MINUS, s); each gets a two-sided one-sample t test over seeds and its t interval, and
the family of contrasts is Holm-adjusted (`stats.seed_tests`). The seed is the unit: training noise is shared by
every problem of a seed.

`compare --groups` makes its family of every group against the baseline on every metric asked, or of the
`--contrasts` given (a pre-registered set of endpoints). The studies make it of their endpoints, on values computed
here from their unit records' per-problem correct counts (`count_value`), so that a study's report and
`compare --groups --contrasts` over the same runs print the same digits (tests/test_eval_compare_seeds.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ordergrad_trl.core.stats import seed_tests

from .errors import UsageError
from .metrics import lstat_metric, pass_at_k, pass_hat_k, problem_mean

__all__ = ["COUNT_METRICS", "count_matrix", "count_value", "parse_contrasts", "seed_contrasts"]

# Metrics a per-problem correct count determines (maj@k needs each sample's answer; a reward metric the rewards):
# key prefix -> the report's per-problem estimate on a (P, n) 0/1 matrix.
COUNT_METRICS = {"pass@": pass_at_k, "pass^": pass_hat_k}


def count_matrix(correct: Sequence[int] | torch.Tensor, n: int) -> torch.Tensor:
    """`(P,)` correct counts of n samples -> `(P, n)` float64 0/1 matrix, row i with correct[i] ones, last (the
    estimates are symmetric in the samples, so which ones is immaterial)."""
    raw = torch.as_tensor(correct).flatten()
    if raw.dtype == torch.bool or (raw.is_floating_point() and not bool((raw == raw.round()).all())):
        raise ValueError(f"correct counts must be whole numbers, got {raw.tolist()[:8]}")
    c = raw.to(torch.int64)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or bool(((c < 0) | (c > n)).any()):
        raise ValueError(f"correct counts must lie in [0, n] with n >= 1, got n={n!r} and counts in "
                         f"[{int(c.min()) if len(c) else 0}, {int(c.max()) if len(c) else 0}]")
    return (torch.arange(n)[None, :] >= n - c[:, None]).double()  # (P, n)


def count_value(correct: Sequence[int] | torch.Tensor, n: int, key: str) -> float:
    """A run's value of `key` from its per-problem correct counts of n samples: the mean over problems of the
    report's per-problem estimate. `key`: `pass@k`, `pass^k` or an objective `Preset@K` (e.g. `TopM:2@4`) on
    correctness."""
    matrix = count_matrix(correct, n)
    for prefix, estimate in COUNT_METRICS.items():
        if key.startswith(prefix) and key[len(prefix):].isdigit():
            return problem_mean(estimate(matrix, int(key[len(prefix):])))[0]
    objective, sep, k = key.rpartition("@")
    if not sep or not k.isdigit():
        raise ValueError(f"count_value: {key!r} is not pass@k, pass^k or an objective Preset@K")
    return problem_mean(lstat_metric(matrix, objective, int(k)))[0]


def parse_contrasts(texts: Sequence[str], groups: Sequence[str]) -> dict[str, tuple[str, str, str]]:
    """`["max8-max2:pass@8"]` -> {"max8-max2:pass@8": ("max8", "max2", "pass@8")}: GROUP-MINUS:METRIC, the names
    among `groups` (matched whole, so names may hold '-' or ':'). `UsageError` naming `--contrasts` otherwise."""
    out = {}
    for text in texts:
        found = [(a, b, text[len(a) + len(b) + 2:]) for a in groups for b in groups
                 if a != b and text.startswith(f"{a}-{b}:") and len(text) > len(a) + len(b) + 2]  # fmt: skip
        if len(found) != 1:
            why = "matches two ways" if found else "does not name two of them"
            raise UsageError(f"--contrasts must be GROUP-MINUS:METRIC with groups among {', '.join(groups)}; "
                             f"{text!r} {why}")
        if text in out:
            raise UsageError(f"--contrasts names {text!r} twice")
        out[text] = found[0]
    return out


def seed_contrasts(values: Mapping[str, Mapping[str, Sequence[float]]], contrasts: Mapping[str, tuple[str, str, str]],
                   alpha: float = 0.05, level: float = 0.95) -> dict[str, dict]:
    """The family of seed-level contrasts, Holm over it.

    Args:
        values: {group: {metric: per-seed values}}, seed i of every group paired.
        contrasts: {label: (group, minus, metric)}: d_s = values[group][metric][s] - values[minus][metric][s].
        alpha: family-wise error rate of Holm; level: coverage of the t intervals.

    Returns:
        {label: `stats.seed_tests`' entry (mean, sd, n, df, ci, t, p, p_holm, ci_adjusted, ci_adjusted_level) and
        `per_seed`, the differences}.
    """
    diffs = {}
    for label, (group, minus, metric) in contrasts.items():
        a, b = values[group][metric], values[minus][metric]
        if len(a) != len(b):
            raise ValueError(f"contrast {label}: {group} has {len(a)} seeds and {minus} {len(b)}; seeds pair one "
                             "to one")
        diffs[label] = [x - y for x, y in zip(a, b)]
    tests = seed_tests(diffs, alpha, level)
    return {label: {**tests[label], "per_seed": diffs[label]} for label in contrasts}
