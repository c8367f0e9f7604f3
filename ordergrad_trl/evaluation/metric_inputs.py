"""The per-sample inputs of the eval metrics, `(P, n)` tensors checked once, and the `on` rule of each metric.

A metric declares what it scores (`Metric.on`: one of `INPUTS`); `compute_metric` hands it a view of the inputs
holding that tensor and the answer classes `labels` only, so a metric declared `on="correct"` that reads the reward
(or the reverse) fails with a line naming both, rather than reporting the wrong quantity under the right label.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch

__all__ = ["INPUTS", "MetricInputs", "compute_metric"]

INPUTS = ("correct", "reward")  # what a metric scores: 0/1 correctness or the --reward_weights reward
AUXILIARY = ("labels",)  # what any metric may read besides: each sample's answer class


@dataclass(frozen=True)
class MetricInputs:
    """`(P, n)` tensors over P problems and n samples each: `correct` (float64 0/1, NaN = missing or unscorable),
    `reward` (float64, NaN = missing) and `labels` (int64 answer class per problem, -1 = no answer)."""

    correct: torch.Tensor
    reward: torch.Tensor
    labels: torch.Tensor

    def __post_init__(self):
        shape = tuple(self.correct.shape)
        for name in (*INPUTS, *AUXILIARY):
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor) or value.dim() != 2 or tuple(value.shape) != shape:
                got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(f"MetricInputs.{name} must be a (problems, samples) tensor of the shape of "
                                 f"correct, {shape}, got {got}")
        for name in INPUTS:
            dtype = getattr(self, name).dtype
            if dtype != torch.float64:
                raise ValueError(f"MetricInputs.{name} must be float64 (NaN = missing), got {dtype}")
        if self.labels.dtype != torch.int64:
            raise ValueError(f"MetricInputs.labels must be int64 answer classes (-1 = none), got {self.labels.dtype}")
        c = self.correct
        if not bool((torch.isnan(c) | (c == 0) | (c == 1)).all()):
            raise ValueError("MetricInputs.correct must hold 0, 1 or NaN (missing); got other values")
        if bool(torch.isinf(self.reward).any()):
            raise ValueError("MetricInputs.reward must be finite or NaN (missing); got an infinite reward")

    @property
    def num_problems(self) -> int:
        return self.correct.shape[0]

    def for_metric(self, name: str, on: str) -> Mapping[str, torch.Tensor]:
        """What metric `name`, declared on `on`, may read: that tensor and the `labels`."""
        if on not in INPUTS:
            raise ValueError(f"metric {name!r}: on must be one of {', '.join(INPUTS)}, got {on!r}")
        return _OnlyOn(self, name, on)


class _OnlyOn(Mapping):
    def __init__(self, inputs: MetricInputs, name: str, on: str):
        self._inputs, self._name, self._on = inputs, name, on

    def __getitem__(self, key: str) -> torch.Tensor:
        if key == self._on or key in AUXILIARY:
            return getattr(self._inputs, key)
        if key in INPUTS:
            raise ValueError(f"metric {self._name!r} is declared on={self._on!r} but reads {key!r}; a metric reads "
                             f"only the input its `on` names (and {', '.join(AUXILIARY)}): declare on={key!r}")
        raise KeyError(f"metric {self._name!r}: no input {key!r}; inputs: {', '.join((*INPUTS, *AUXILIARY))}")

    def __iter__(self) -> Iterator[str]:
        return iter((self._on, *AUXILIARY))

    def __len__(self) -> int:
        return 1 + len(AUXILIARY)


def compute_metric(metric, inputs: MetricInputs, k: int | None, config: Mapping) -> torch.Tensor:
    """`metric.compute` on the inputs its `on` names; its `(P,)` per-problem values, checked."""
    if not isinstance(inputs, MetricInputs):
        raise TypeError(f"metric {metric.name!r}: inputs must be MetricInputs, got {type(inputs).__name__}")
    out = metric.compute(inputs.for_metric(metric.name, metric.on), k, config)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (inputs.num_problems,):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"metric {metric.name!r} must return one value per problem, shape "
                         f"({inputs.num_problems},), got {got}")
    return out
