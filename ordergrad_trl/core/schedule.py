"""Parsers of objective schedules and `OBJECTIVE@K` entries.

These are the string forms of `ordergrad_schedule` and `ordergrad_reward_objectives` (`OrderGradConfig`); the
objectives themselves are checked there."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ObjectiveStage", "parse_objective_at_k", "parse_objective_schedule"]


@dataclass(frozen=True)
class ObjectiveStage:
    """One piece of the objective schedule: from optimizer step `start_step` on, `objective` over `k` rollouts."""

    start_step: int
    objective: str
    k: int


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
            f"command line, one argument each: --{field_name} '0 ReMax@4' '100 Mean@1')."
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


def parse_objective_schedule(entries) -> list[ObjectiveStage]:
    """`["0 ReMax@8", "100 Mean@1"]` -> stages; steps must start at 0 and increase strictly (objectives unchecked)."""
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
        stages.append(ObjectiveStage(step, objective, k))
    if stages[0].start_step != 0:
        raise ValueError(f"ordergrad_schedule must start at step 0, got {entries[0]!r} first.")
    for prev, cur in zip(stages, stages[1:]):
        if cur.start_step <= prev.start_step:
            raise ValueError(
                f"ordergrad_schedule steps must increase strictly, got step {cur.start_step} after {prev.start_step}."
            )
    return stages
