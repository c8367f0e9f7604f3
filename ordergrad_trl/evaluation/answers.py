"""Final-answer strings for majority voting.

Correctness always comes from math-verify (`ordergrad_trl.tasks.rewards.score_completions`, the training reward). The
vote only needs to know which samples gave *the same* answer: a sample's answer is the content of its last
`\\boxed{}` (what the reward's extraction prefers), else the last number in the text, normalized below. In
`report.load_matrices` all samples math-verify scored correct form one class (they all equal the gold), so the
correct class is grouped by math-verify equivalence and only wrong answers by normalized string.
"""

from __future__ import annotations

import re

from ordergrad_trl.tasks.data import last_boxed

__all__ = ["extract_answer", "normalize_answer"]

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_DROP = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\displaystyle", "$", "^\\circ", "^{\\circ}", "\\%", "%")


def normalize_answer(text: str) -> str:
    """Canonical string of a final answer: layout and spacing dropped, equal numbers spelled one way."""
    s = text.strip()
    s = _TEXT.sub(r"\1", s)
    for token in _DROP:
        s = s.replace(token, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\s+", "", s).rstrip(".")
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    if re.fullmatch(r"-?\d+\.\d*|-?\.\d+", s):  # 27.0 -> 27, 1.50 -> 1.5
        s = s.rstrip("0").rstrip(".") if "." in s else s
        s = "0" if s in ("", "-", "-0") else s
    return s


def extract_answer(completion: str) -> str | None:
    """Normalized final answer of a completion: last `\\boxed{}`, else last number; None if neither."""
    boxed = last_boxed(completion)
    if boxed is not None and boxed.strip():
        return normalize_answer(boxed)
    numbers = _NUMBER.findall(completion or "")
    return normalize_answer(numbers[-1]) if numbers else None
