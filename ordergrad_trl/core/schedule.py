"""The objective stage (the one type every estimator is called with) and the parsers of schedules and `OBJECTIVE@K`.

The parsers read the string forms of `ordergrad_schedule` and `ordergrad_reward_objectives` (`OrderGradConfig`);
the objectives themselves are checked by the plan (`core.plan.build_plan`), which builds the stages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .objectives import DEFAULT_K, DEFAULT_OBJECTIVE, rank_weights

__all__ = ["ObjectiveStage", "parse_objective_at_k", "parse_objective_schedule"]


@dataclass(frozen=True)
class ObjectiveStage:
    """From optimizer step `start_step` on, `objective` over `k` rollouts, with its ascending rank `weights` and the
    estimator's own `options` (e.g. `{"beta": 2.0}`).

    The one stage type: a piece of the schedule, a per-reward spec (`start_step` 0), and what every estimator is
    called with (`ESTIMATORS[name](rewards, stage)`: an estimator taking `objective` gets the weights, one taking
    `k` gets `k`). The weights are derived from the objective once, here, unless given (the plan gives the ones it
    checked)."""

    start_step: int = 0
    objective: str = DEFAULT_OBJECTIVE
    k: int = DEFAULT_K
    weights: torch.Tensor = field(default=None, compare=False, repr=False)  # (K,) float64, ascending
    options: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.weights is None:
            object.__setattr__(self, "weights", rank_weights(self.objective, self.k))


def parse_objective_at_k(
    spec: str, default_k: int | None = None, field_name: str = "objective", entry: str | None = None
) -> tuple[str, int]:
    """`"OBJECTIVE@K"` (or `"OBJECTIVE"` if `default_k` is given) -> `(objective, K)`, the one parser of this form.

    `ValueError` names `field_name` (the config field or command-line flag the text came from) and the expected
    form; the objective itself is not checked here (`rank_weights` does that)."""
    if not isinstance(spec, str):
        raise ValueError(f"{field_name}: expected a string 'OBJECTIVE@K' (e.g. 'TopM:2@4'), got {spec!r}.")
    entry = spec if entry is None else entry
    objective, at, k_text = spec.strip().rpartition("@")
    if not at:
        objective, k_text = spec.strip(), None
    objective = objective.strip()
    if "@" in objective:
        raise ValueError(
            f"{field_name}: entry {entry!r} holds more than one 'OBJECTIVE@K'; give each its own list entry (on the "
            f"command line, one argument each: --{field_name.lstrip('-')} '0 ReMax@4' '100 Mean@1')."
        )
    if not objective:
        raise ValueError(f"{field_name}: entry {entry!r} has no objective; expected 'OBJECTIVE@K', e.g. 'TopM:2@4'.")
    if k_text is None:
        if default_k is None:
            raise ValueError(f"{field_name}: entry {entry!r} needs '@K', e.g. 'ReMax@8'.")
        return objective, default_k
    try:
        k = int(k_text)
    except ValueError:
        raise ValueError(
            f"{field_name}: entry {entry!r}: K must be a positive integer after '@', got {k_text!r}."
        ) from None
    if k < 1:
        raise ValueError(f"{field_name}: entry {entry!r}: K must be a positive integer, got {k}.")
    return objective, k


def string_list(value, field_name: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{field_name} must be a non-empty list of strings, got {value!r}.")
    if not all(isinstance(v, str) for v in value):
        raise ValueError(f"{field_name} must be a list of strings (quote numbers in YAML), got {value!r}.")
    return list(value)


def parse_objective_schedule(entries) -> list[tuple[int, str, int]]:
    """`["0 ReMax@8", "100 Mean@1"]` -> `(start_step, objective, K)` per entry; steps must start at 0 and increase
    strictly (objectives unchecked: the plan checks them, then builds the stages)."""
    stages = []
    for entry in string_list(entries, "ordergrad_schedule"):
        step_text, spec = (entry.split(None, 1) + ["", ""])[:2]
        try:
            step = int(step_text)
        except ValueError:
            step = -1
        if step < 0 or not spec.strip():
            raise ValueError(
                f"ordergrad_schedule: entry {entry!r} must be 'STEP OBJECTIVE@K' with STEP a non-negative integer, "
                "e.g. '100 ReMax@4'."
            )
        objective, k = parse_objective_at_k(spec, None, "ordergrad_schedule", entry)
        stages.append((step, objective, k))
    if stages[0][0] != 0:
        raise ValueError(f"ordergrad_schedule must start at step 0, got {entries[0]!r} first.")
    for prev, cur in zip(stages, stages[1:]):
        if cur[0] <= prev[0]:
            raise ValueError(f"ordergrad_schedule steps must increase strictly, got step {cur[0]} after {prev[0]}.")
    return stages
