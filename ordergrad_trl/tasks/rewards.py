"""TRL reward functions for math RL: correctness (math-verify, scored by `math_verify_pool`), format, length penalty."""

from __future__ import annotations

import re

from .math_verify_pool import score_completions

__all__ = ["math_reward", "format_reward", "length_penalty", "score_completions"]


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion
    msgs = [m for m in completion if m.get("role") == "assistant"] or list(completion)  # conversational
    content = msgs[-1]["content"] if msgs else ""
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def math_reward(completions, answer, log_metric=None, **kwargs) -> list[float | None]:
    """TRL reward: 1.0 if the completion's final answer (last `\\boxed{}`, else last expression) equals the
    `answer` column per math-verify, 0.0 if not or unscorable in time, None (TRL: NaN) if the gold does not parse.

    Logs, through the `log_metric` TRL passes, the fraction of this batch's completions whose scoring timed out
    (`math_reward/timeout_frac`) and whose gold parses to nothing (`math_reward/unscorable_frac`). TRL averages
    a `log_metric` value over the processes that logged it (one value per process and batch; each process holds
    the same number of completions, so the mean of the fractions is the fraction of the whole batch), then over
    the `logging_steps` window."""
    golds = ["" if a is None else str(a) for a in answer]  # int/float columns (AIME, AMC) are fine; None: no gold
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


def format_reward(completions, **kwargs) -> list[float]:
    """TRL reward: 1.0 if the completion has exactly one `\\boxed{` and that box's braces close, else 0.0."""
    return [1.0 if _one_closed_box(_text(c)) else 0.0 for c in completions]


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
