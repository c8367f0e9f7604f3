"""Every numeric field of a config dataclass checked when it is built: a number that cannot train is refused by name.

TRL and transformers take `learning_rate: inf`, `beta: nan` or `max_steps: 1.5` (from YAML) as they are: training
then turns every weight into NaN, or fails deep inside torch. `check_numeric_fields` reads the dataclass's own
annotations, so a field added by a new TRL release is covered without a list: every `float` field must be a finite
number and every `int` field an integer (`None` where the annotation allows it). `RANGES` adds the bounds of the
fields whose valid range is known; each error names the field, what it must be and the value given.

Bounds across fields (`_check_together`): `learning_rate * weight_decay` must be below 1 (AdamW's decoupled decay
multiplies every weight by `1 - learning_rate * weight_decay` each step: at 1 or more it zeroes or flips the
weights, and the run still exits 0). Numpy scalars count as the numbers they hold (`np.int64(8)` is an integer).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import typing

__all__ = ["MAX_DECAY_PER_STEP", "MIN_TEMPERATURE", "RANGES", "check_numeric_fields", "plain_numpy_values"]

MIN_TEMPERATURE = 1e-3  # the eval's floor (`ordergrad-eval --temperature`): TRL samples at temperature > 0 only
MAX_DECAY_PER_STEP = 1.0  # AdamW's decoupled decay multiplies each weight by (1 - learning_rate * weight_decay)

# field -> (low, high, low inclusive, high inclusive); None: unbounded on that side
RANGES: dict[str, tuple[float | None, float | None, bool, bool]] = {
    "learning_rate": (0, None, True, False),
    "beta": (0, None, True, False),
    "temperature": (MIN_TEMPERATURE, None, True, False),  # below it, logits / temperature overflow (as the eval)
    "top_p": (0, 1, False, True),
    "min_p": (0, 1, True, True),
    "top_k": (0, None, True, False),
    "repetition_penalty": (0, None, False, False),
    "epsilon": (0, None, False, False),
    "epsilon_high": (0, None, False, False),
    "max_completion_length": (1, None, True, False),
    "per_device_train_batch_size": (1, None, True, False),
    "per_device_eval_batch_size": (1, None, True, False),
    "gradient_accumulation_steps": (1, None, True, False),
    "num_iterations": (1, None, True, False),
    "steps_per_generation": (1, None, True, False),
    "generation_batch_size": (1, None, True, False),
    "max_steps": (-1, None, True, False),
    "num_train_epochs": (0, None, False, False),
    "max_grad_norm": (0, None, True, False),
    "weight_decay": (0, None, True, False),
    "warmup_steps": (0, None, True, False),
    "adam_beta1": (0, 1, True, False),
    "adam_beta2": (0, 1, True, False),
    "adam_epsilon": (0, None, False, False),
    "logging_steps": (0, None, False, False),
    "save_steps": (0, None, False, False),
    "seed": (0, 2**32 - 1, True, True),  # numpy's seed range (transformers' set_seed seeds numpy too)
    "data_seed": (0, 2**32 - 1, True, True),
    "ordergrad_dynamic_sampling_max_rounds": (1, None, True, False),
}


def _kinds(annotation) -> tuple[set[type], bool]:
    """`int | None` -> ({int}, True): the numeric types an annotation admits, and whether it admits None."""
    args = typing.get_args(annotation) or (annotation,)
    return {a for a in args if a in (int, float)}, type(None) in args


def _hints(cls) -> dict:
    """The resolved annotations of `cls`; field by field where one of them cannot be resolved (a TRL release may
    annotate with a name it imports only for type checkers): such a field is skipped, the others are checked."""
    try:
        return typing.get_type_hints(cls)
    except Exception:
        import sys

        out = {}
        for f in dataclasses.fields(cls):
            owner = next((c for c in cls.__mro__ if f.name in getattr(c, "__annotations__", {})), cls)
            try:
                out[f.name] = eval(f.type, vars(sys.modules[owner.__module__])) if isinstance(f.type, str) else f.type
            except Exception:
                continue
        return out


def _bounds(low, high, low_in: bool, high_in: bool) -> str:
    left = "" if low is None else f"{'>=' if low_in else '>'} {low}"
    right = "" if high is None else f"{'<=' if high_in else '<'} {high}"
    return " and ".join(part for part in (left, right) if part)


def check_numeric_fields(config) -> None:
    """Raise `ValueError` naming the first numeric field of dataclass `config` that is not a finite number (float
    fields), an integer (int fields) or within its `RANGES` entry."""
    hints = _hints(type(config))
    for f in dataclasses.fields(config):
        if f.name.startswith("ordergrad_"):  # the plan checks these, with their own messages
            continue
        hint = hints.get(f.name)
        kinds, optional = _kinds(hint)
        value = getattr(config, f.name, None)
        if not kinds or (value is None and optional) or (isinstance(value, str) and str in typing.get_args(hint)):
            continue
        what = "an integer" if kinds == {int} else "a finite number"
        value = _plain_number(config, f.name, value)
        valid = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if kinds == {int}:
            valid = valid and isinstance(value, int)  # max_steps: 1.5 (YAML) or 8.0 would reach range() as floats
        if not valid:
            raise ValueError(f"{f.name} must be {what}{' (or None)' if optional else ''}, got {value!r}.")
        if f.name in RANGES:
            low, high, low_in, high_in = RANGES[f.name]
            if (low is not None and (value < low or value == low and not low_in)) or (
                high is not None and (value > high or value == high and not high_in)
            ):
                raise ValueError(f"{f.name} must be {what} {_bounds(*RANGES[f.name])}, got {value!r}.")
    _check_together(config)


def _plain_number(config, name: str, value):
    """A numpy (or other `numbers`) scalar as the plain int / float it holds, stored back on `config`."""
    numpy_bool = type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")
    if type(value) in (bool, int, float) or numpy_bool:
        return value
    if isinstance(value, numbers.Integral):
        value = int(value)
    elif isinstance(value, numbers.Real):
        value = float(value)
    else:
        return value
    try:
        object.__setattr__(config, name, value)
    except Exception:  # a frozen or slotted config: checked as the plain number, left as given
        pass
    return value


def _plain(value):
    """`value` with every numpy scalar in it (at any depth of lists, tuples and dicts) as the Python number it holds."""
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()  # np.int64 -> int, np.float32 -> float, np.bool_ -> bool
    if type(value) in (list, tuple):
        items = [_plain(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else type(value)(items)
    if type(value) is dict:
        items = {k: _plain(v) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    return value  # the same object when nothing in it is numpy: the field is left untouched


def plain_numpy_values(config) -> None:
    """Every field of dataclass `config` with its numpy scalars made plain numbers, before any check reads them: a
    script that computes a setting with numpy (`ordergrad_k=np.int64(4)`, `ordergrad_log_ks=list(np.arange(1, 9))`)
    gets what a plain number gets, for the ordergrad_* fields, whose checks ask for `int`, as for TRL's."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name, None)
        plain = _plain(value)
        if plain is not value:
            try:
                object.__setattr__(config, f.name, plain)
            except Exception:  # a frozen or slotted config: left as given, its checks then name the field
                pass


def _check_together(config) -> None:
    lr, wd = getattr(config, "learning_rate", None), getattr(config, "weight_decay", None)
    if isinstance(lr, (int, float)) and isinstance(wd, (int, float)) and lr * wd >= MAX_DECAY_PER_STEP:
        raise ValueError(
            f"learning_rate * weight_decay must be below {MAX_DECAY_PER_STEP:g}, got {lr!r} * {wd!r} = {lr * wd:g}: "
            "AdamW multiplies every weight by (1 - learning_rate * weight_decay) each step, so the weights would be "
            "zeroed or flipped; lower weight_decay (typical: 0 to 0.1) or learning_rate."
        )
