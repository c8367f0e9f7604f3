"""TRL reward functions for math RL: correctness (math-verify, scored by `math_verify_pool`), format, length penalty.

`REWARDS` is the one registry of them by name (what a recipe's `reward_funcs: [math, length]` means), filled by
`@register_reward` where each function is defined; `get_reward_funcs` binds them to a training config.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..core.reward_range import RANGE_ATTRIBUTE, RewardRange  # declared with each function: checked at start-up
from .math_verify_pool import score_completions
from .numerals import number_text

__all__ = ["RANGE_ATTRIBUTE", "REWARDS", "RewardRange", "get_reward_funcs", "gold_text", "math_reward",
           "register_reward", "format_reward", "length_penalty", "score_completions"]


@dataclass(frozen=True)
class RewardEntry:
    """A registered reward: `func` as TRL calls it once `bind(args)` (keyword arguments from the training config,
    e.g. the length budget) is bound; `help` is one line for lists and help texts."""

    name: str
    func: Callable
    help: str
    bind: Callable[[object], dict] | None = None
    range: RewardRange | None = None


REWARDS: dict[str, RewardEntry] = {}


def register_reward(name: str, help: str, bind: Callable[[object], dict] | None = None,
                    range: RewardRange | None = None) -> Callable:  # noqa: A002 (the field's name)
    """Decorator: register a TRL reward function as `name` (a name already taken is refused); `range`: the values it
    returns, if known (set on the function as `RANGE_ATTRIBUTE`)."""

    def register(func: Callable) -> Callable:
        if name in REWARDS:
            raise ValueError(f"reward {name!r} is already registered (to {REWARDS[name].func.__qualname__})")
        REWARDS[name] = RewardEntry(name, func, help, bind, range)
        if range is not None:
            setattr(func, RANGE_ATTRIBUTE, range)
        return func

    return register


def get_reward_funcs(names: list[str], args) -> list[Callable]:
    """The registered reward functions `names`, bound to the training config `args` (`OrderGradConfig`). A bound
    one is a `functools.partial` that carries its function's name (`update_wrapper`), so TRL logs
    `rewards/length_penalty/mean`, not `partial`. Unknown names raise `ValueError` listing the registered ones."""
    unknown = [name for name in names if name not in REWARDS]
    if unknown:
        raise ValueError(f"reward_funcs {unknown} unknown: choose from {list(REWARDS)}")
    funcs = []
    for entry in (REWARDS[name] for name in names):
        bound = entry.func if entry.bind is None else functools.partial(entry.func, **entry.bind(args))
        funcs.append(bound if bound is entry.func else functools.update_wrapper(bound, entry.func))
    return funcs


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion
    msgs = [m for m in completion if m.get("role") == "assistant"] or list(completion)  # conversational
    content = msgs[-1]["content"] if msgs else ""
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def gold_text(answer, where: str = "the gold answer") -> str:
    """The gold `answer` as math-verify's text: a string as is, a finite int/float (AIME, AMC columns) as its
    positional digits (`numerals.number_text`), None as "" (no gold: the completion is unscorable). Anything
    else -- a list, a dict, a bool, NaN -- raises `ValueError` naming `where` (the row): `str()` would turn
    `['25']` into a gold no answer equals."""
    if answer is None or isinstance(answer, str):
        return answer or ""
    if isinstance(answer, numbers.Real) and not isinstance(answer, bool) and math.isfinite(answer):
        return number_text(answer)  # positional: `str(1e-07)` is read by math-verify as e - 7
    raise ValueError(
        f"math_reward: {where} is a {type(answer).__name__} ({answer!r:.60}); a gold answer must be a string or "
        "a finite number: fix the dataset's `answer` column"
    )


def _row(index: int, ids, prompts) -> str:
    """`the gold answer of row 3 of this batch (id 'train-17')`: the id column if the data has one, else the prompt."""
    if ids is not None:
        return f"the gold answer of row {index} of this batch (id {ids[index]!r})"
    tail = f" (prompt {_text(prompts[index])[-80:]!r})" if prompts is not None else ""
    return f"the gold answer of row {index} of this batch{tail}"


@register_reward("math", "1 if the final answer equals the gold per math-verify, else 0", range=RewardRange(0, 1, True))
def math_reward(completions, answer=None, log_metric=None, **kwargs) -> list[float | None]:
    """TRL reward: 1.0 if the completion's final answer (last `\\boxed{}`, else last expression) equals the
    `answer` column per math-verify, 0.0 if not or unscorable in time, None (TRL: NaN) if the gold does not parse.

    Logs, through the `log_metric` TRL passes, the fraction of this batch's completions whose scoring timed out
    (`math_reward/timeout_frac`) and whose gold parses to nothing (`math_reward/unscorable_frac`). TRL averages
    a `log_metric` value over the processes that logged it (one value per process and batch; each process holds
    the same number of completions, so the mean of the fractions is the fraction of the whole batch), then over
    the `logging_steps` window."""
    if answer is None:  # TRL passes the dataset's columns by name: without an `answer` column there is no gold
        columns = sorted(k for k in kwargs if k not in ("prompts", "completion_ids", "trainer_state", "log_extra"))
        raise ValueError(f"math_reward: the dataset has no 'answer' column (the rows carry: {', '.join(columns)}); "
                         "the math reward compares each completion with its row's gold answer: add the column "
                         "(ordergrad_trl.tasks.data.load_math_dataset makes it), or use another reward function")
    golds = []
    for index, gold in enumerate(answer):
        try:
            golds.append(gold_text(gold))
        except ValueError:  # again, naming the row (only now: the name costs a string per row)
            gold_text(gold, _row(index, kwargs.get("id"), kwargs.get("prompts")))
    scores, status = score_completions([_text(c) for c in completions], golds, return_status=True)
    if log_metric is not None and status:
        log_metric("math_reward/timeout_frac", status.count("timeout") / len(status))
        log_metric("math_reward/unscorable_frac", status.count("unscorable") / len(status))
    return scores


_BOXED = re.compile(r"\\boxed\s*\{")


def _one_closed_box(text: str) -> bool:
    starts = [m.end() for m in _BOXED.finditer(text)]
    if len(starts) != 1:
        return False
    depth = 1
    for ch in text[starts[0]:]:  # LaTeX's \{ \} come in pairs, so counting every brace is fine
        depth += (ch == "{") - (ch == "}")
        if depth == 0:
            return True
    return False


@register_reward("format", "1 if the completion has exactly one closed \\boxed{}, else 0",
                 range=RewardRange(0, 1, True))
def format_reward(completions, **kwargs) -> list[float]:
    """TRL reward: 1.0 if the completion has exactly one `\\boxed{` and that box's braces close, else 0.0."""
    return [1.0 if _one_closed_box(_text(c)) else 0.0 for c in completions]


@register_reward("length", "-(completion tokens / max_completion_length), in [-1, 0]",
                 bind=lambda args: {"max_len": args.max_completion_length}, range=RewardRange(-1, 0))
def length_penalty(completion_ids, max_len: int | None = None, **kwargs) -> list[float]:
    """TRL reward: -(completion tokens / max_len), in [-1, 0]; weight it against correctness with GRPOConfig's
    `reward_weights`. TRL passes `completion_ids` (one token list per completion) but not the length budget, so
    bind it: `functools.partial(length_penalty, max_len=args.max_completion_length)` (TRL names a partial after
    its function, so it logs as "length_penalty")."""
    if not (isinstance(max_len, int) and max_len >= 1):
        raise ValueError(
            f"length_penalty needs max_len (an int >= 1, got {max_len!r}); pass "
            "functools.partial(length_penalty, max_len=<GRPOConfig.max_completion_length>) as the reward function"
        )
    return [-min(len(ids), max_len) / max_len for ids in completion_ids]
