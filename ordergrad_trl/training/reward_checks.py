"""Reward functions whose return values are checked, so a bad value names the function that returned it.

TRL turns each reward function's list into a float tensor with `torch.tensor(...)`, so a string, a nested list or a
dict fails there as `too many dimensions 'str'` or `must be real number, not dict`, naming no function. The
trainer wraps every plain (non-`nn.Module`) reward function once, at construction, with `checked_reward_funcs`;
the wrapper keeps the function's name (`functools.update_wrapper`), its sync or async form, and its return value.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

from torch import nn

from ..core.reward_range import RANGE_ATTRIBUTE, weighted_sum_range

__all__ = ["RewardRangeError", "check_prompt_weight_range", "check_reward_values", "checked_reward_funcs"]


def _is_async(func) -> bool:
    # the forms TRL runs with asyncio: coroutine functions, partials of them, objects with an async __call__
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(func, "__call__", None))


def _bad_value(value) -> bool:
    if value is None:  # TRL's mark for a rollout the function cannot score
        return False
    if isinstance(value, (str, bytes, bytearray)) or getattr(value, "ndim", 0) != 0:  # float("1"), float([1])
        return True
    try:
        float(value)  # numbers, numpy scalars, 0-d tensors
    except (TypeError, ValueError, RuntimeError):
        return True
    return False


def check_reward_values(name: str, values, expected: int) -> None:
    """Raise `TypeError` naming reward function `name` unless `values` holds one number (or None) per completion.

    Args:
        name: the reward function's name as TRL logs it.
        values: what the function returned for one batch.
        expected: the number of completions in the batch (the count itself TRL checks, after this).
    """
    rule = "a reward function must return a list with one number (or None, for a rollout it cannot score) per completion"
    if values is None or isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise TypeError(f"reward function {name!r} returned {type(values).__name__} {values!r:.80}: {rule}")
    if not hasattr(values, "__len__"):  # a generator or iterator: read once here, it would reach TRL empty
        raise TypeError(f"reward function {name!r} returned a {type(values).__name__}, which can be read only once: "
                        f"{rule} (return list(...) of it)")
    for index, value in enumerate(values):
        if _bad_value(value):
            raise TypeError(
                f"reward function {name!r} returned {type(value).__name__} {value!r:.60} for completion {index} of "
                f"{expected}: {rule}"
            )


def _checked(func: Callable, name: str) -> Callable:
    if _is_async(func):

        async def checked(*args, **kwargs):
            values = await func(*args, **kwargs)
            check_reward_values(name, values, len(kwargs.get("completions", ())))
            return values
    else:

        def checked(*args, **kwargs):
            values = func(*args, **kwargs)
            check_reward_values(name, values, len(kwargs.get("completions", ())))
            return values

    functools.update_wrapper(checked, func)  # skips what a partial or callable object lacks
    checked.__name__ = name  # TRL's name for it, also for those
    return checked


def checked_reward_funcs(funcs: list, names: list[str]) -> list:
    """`funcs` with every plain callable wrapped by a value check naming it (`names`: TRL's names, same order).
    Reward models (`nn.Module`) are TRL's to run and stay as they are."""
    return [f if isinstance(f, nn.Module) else _checked(f, name) for f, name in zip(funcs, names, strict=True)]


class RewardRangeError(ValueError):
    """Reward functions whose weighted sum can leave the range the prompt weight takes (found at construction)."""


def check_prompt_weight_range(args, funcs: list, names: list[str]) -> None:
    """RewardRangeError naming `ordergrad_prompt_weight` and the reward functions when the range of their weighted sum
    (TRL's reward: sum_f reward_weights[f] * r_f, a None counted as 0) can leave what the prompt weight takes: [0, 1]
    (p_hat is a group's mean reward), or only 0 and 1 for a binary weight. Only where every function with a non-zero
    weight declares its range (`core.reward_range`); else the rewards are checked per batch, as before. Without this
    a `length` reward (in [-1, 0]) failed at step 1, after the model loaded."""
    spec = args.ordergrad_plan.prompt_weight
    weights = list(args.reward_weights) if args.reward_weights is not None else [1.0] * len(funcs)
    if spec is None or spec.row.rewards == "any" or len(weights) != len(funcs):  # a count TRL refuses itself
        return
    used = [(n, float(w), getattr(f, RANGE_ATTRIBUTE, None)) for f, n, w in zip(funcs, names, weights) if w != 0]
    if not used or any(r is None for _, _, r in used):
        return
    binary = spec.row.rewards == "0/1"
    reach = weighted_sum_range([(w, r) for _, w, r in used], binary)
    if reach is None or (not binary and 0 <= reach[0] and reach[1] <= 1):
        return
    need = "0 or 1 (MaxRL's success rate)" if binary else "in [0, 1] (p_hat is a group's mean reward)"
    each = ", ".join(f"{n} {r} x {w:g}" for n, w, r in used)
    shown = "can take other values" if binary else f"can reach [{reach[0]:g}, {reach[1]:g}]"
    raise RewardRangeError(
        f"ordergrad_prompt_weight={str(spec)!r} takes rewards {need}, but the weighted sum of the reward functions "
        f"({each}, by reward_weights) {shown}: set reward_weights so it stays in range, drop the reward function, "
        "or use ordergrad_prompt_weight='none'.")
