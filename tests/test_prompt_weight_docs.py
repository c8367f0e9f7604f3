"""No page restates the prompt weights by hand: the docs, the README and the package's docstrings and help name
them through the registry (the generated table of docs/estimators.md#prompt-weights, the config help), so a weight
added to `PROMPT_WEIGHTS` leaves no list stale."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ordergrad_trl.core.prompt_weights import PROMPT_WEIGHTS, prompt_weight_table

REPO = Path(__file__).resolve().parents[1]

# A passage (a paragraph, a list item, a table row or a docstring's argument; code blocks and the generated table
# left out) that names three or more registered weights in backticks (`inverse`, `"curverl"`, `gaussian:MU,SIGMA`)
# restates the registry by hand, and goes stale when a weight is added: it links to the table instead
# (docs/estimators.md#prompt-weights). Two names are a comparison (MaxRL's `inverse` against `curverl`), not a list.
HAND_LIST = 3
_NEW_PASSAGE = re.compile(r"\s*(?:[-*+]|\d+\.)\s|\s*\||\s*\w+ \(`")  # a list item, a table row, a docstring argument


def passages(text: str, skip: set[str] = frozenset()):
    """`text`'s passages, each `(first line number, text)`, without fenced code and without the lines in `skip`."""
    passage, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line in skip:
            continue
        if not line.strip() or _NEW_PASSAGE.match(line):
            if passage:
                yield passage[0][0], " ".join(words for _, words in passage)
            passage = []
        if line.strip():
            passage.append((number, line))
    if passage:
        yield passage[0][0], " ".join(words for _, words in passage)


def hand_lists(text: str, names, skip: set[str] = frozenset()) -> list[tuple[int, list[str]]]:
    """The passages of `text` that name `HAND_LIST` or more of `names` in backticks: (line, the names)."""
    out = []
    for line, passage in passages(text, skip):
        found = sorted({m for m in re.findall(r'`"?([a-z][a-z0-9_]*)(?::[^`"]*)?"?`', passage) if m in names})
        if len(found) >= HAND_LIST:
            out.append((line, found))
    return out


def test_no_page_lists_the_weights_by_hand():
    """The docs, the README and the package's docstrings and help name the weights through the registry (the
    generated table, the config help): none restates the list."""
    skip = set(prompt_weight_table().splitlines())
    pages = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md", *sorted((REPO / "ordergrad_trl").rglob("*.py"))]
    found = {str(page.relative_to(REPO)): hits for page in pages
             if (hits := hand_lists(page.read_text(), set(PROMPT_WEIGHTS), skip))}  # fmt: skip
    assert not found, f"lists of prompt weights written by hand (link docs/estimators.md#prompt-weights): {found}"


@pytest.mark.parametrize("text", [  # the lists the pages held before they linked to the table
    "| `ordergrad_prompt_weight` | `\"none\"` | a weight per prompt after the estimator: `none`, `inverse` (MaxRL's "
    "1/p_hat), `curverl`, `gaussian:MU,SIGMA` ([prompt weights](#prompt-weights)) |",
    "- `ordergrad_prompt_weight`: a weight per prompt after the estimator, before the scale ([prompt\n"
    "  weights](estimators.md#prompt-weights)): `none` (default), `inverse` (MaxRL's 1/p), `curverl` (CurveRL's\n"
    "  reverse hazard rate of the last `ordergrad_prompt_weight_window` batches' pass rates, default 10) or\n"
    "  `gaussian:MU,SIGMA`.",
    "`ordergrad_prompt_weight` reads each group's success rate p_hat, the mean of its rewards (the weighted sum of\n"
    "the reward functions): `inverse` (MaxRL's 1/p_hat) needs 0/1 rewards, `curverl` and `gaussian` rewards in\n"
    "[0, 1].",
    '        ordergrad_prompt_weight (`str`, *optional*, defaults to `"none"`):\n'
    '            One of `"none"`, `"inverse"`, `"curverl"`.',
])  # fmt: skip
def test_a_hand_list_of_the_weights_is_caught(text):
    assert hand_lists(text, set(PROMPT_WEIGHTS)), text
    assert not hand_lists("```yaml\n" + text + "\n```", set(PROMPT_WEIGHTS))  # a code block is not prose
