"""The `\\boxed{}` answer format: the user message that asks for it, the reader of it, and rows -> chat prompts."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only annotations: reading the set registry does not load the datasets library
    import datasets

__all__ = ["DEFAULT_USER_TEMPLATE", "format_rows", "last_boxed"]

DEFAULT_USER_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{}."
"""User message template; `{question}` is replaced by the problem text (plain substitution, not `str.format`,
so the literal braces of `\\boxed{}` need no escaping)."""


def last_boxed(text: str | None) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`) in `text`, with balanced braces; None if absent.

    `\\boxed 5` (argument without braces, as in a few MATH solutions) yields the token up to the next space or `$`.
    An unclosed brace yields None rather than a truncated answer.
    """
    if not text:
        return None
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = start + (6 if text.startswith("\\boxed", start) else 5)
    if i < len(text) and text[i] == " ":
        match = re.match(r" +([^\s$]+)", text[i:])
        return match.group(1) if match else None
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def _messages(question: str, system_prompt: str | None, user_template: str) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": user_template.replace("{question}", question)})
    return messages


def _row_id(row: dict[str, Any], spec: Any) -> str:
    value = row.get(spec.id_field) if spec.id_field else None
    return f" (id {value!r})" if isinstance(value, (str, int)) else ""


def format_rows(
    raw: datasets.Dataset,
    spec: Any,
    split: str,
    *,
    system_prompt: str | None,
    user_template: str,
    keep_metadata: bool,
    keep_solution: bool,
    drop_unanswerable: bool,
) -> datasets.Dataset:
    """Raw rows of `spec`'s set (a `sets.MathSetSpec`) -> columns `prompt`, `answer`, `question`, `id` (+ `solution`,
    metadata).

    The caller checks that `spec` has solutions when `keep_solution` (`load_math_dataset` does)."""
    if "{question}" not in user_template:
        raise ValueError(f"user_template must contain '{{question}}', got {user_template!r}")
    kept = [c for c in spec.metadata if c in raw.column_names] if keep_metadata else []
    has_id = spec.id_field is not None and spec.id_field in raw.column_names

    def convert(row: dict[str, Any], idx: int) -> dict[str, Any]:
        try:
            question, gold = spec.question(row), spec.gold(row)
            if not isinstance(gold, (str, type(None))):  # a reader of the caller's own spec
                raise ValueError(f"the gold reader returned a {type(gold).__name__} ({str(gold)[:60]}), not a string")
        except ValueError as err:  # a container where one answer belongs: never a gold like "['25']"
            raise ValueError(f"{spec.name} row {idx}{_row_id(row, spec)}: {err}") from None
        if drop_unanswerable and not (question and gold):
            # Marked with "" (None could give the column a null type) and filtered afterwards, so row-index
            # ids stay those of the source file.
            question, gold = "", ""
        elif not question or not gold:
            missing = "question" if not question else "gold answer"
            raise ValueError(
                f"{spec.name} row {idx}: no {missing} could be extracted (columns: {sorted(row)}); "
                "pass drop_unanswerable=True to skip such rows"
            )
        # Written under temporary names: a source column of the same name (AIME25's int `answer`) would
        # otherwise make `map` cast the new value back to the old type.
        out = {
            "__prompt": _messages(question, system_prompt, user_template),
            "__answer": gold,
            "__question": question,
            "__id": f"{spec.name}-{row[spec.id_field]}" if has_id else f"{spec.name}-{split}-{idx}",
        }
        if keep_solution:
            solution = spec.solution(row)
            if not solution and gold:
                raise ValueError(f"{spec.name} row {idx}: keep_solution=True but the row has no reference solution")
            out["__solution"] = solution or ""
        return out

    new = ["prompt", "answer", "question", "id"] + (["solution"] if keep_solution else [])
    remove = [c for c in raw.column_names if c not in kept]
    # Never served from the datasets cache: its fingerprint hashes `convert` but not the helpers it calls, so a
    # fixed gold extractor could silently return stale answers. Formatting is cheap (~20k rows/s).
    no_cache = dict(keep_in_memory=True, load_from_cache_file=False)
    formatted = raw.map(
        convert, with_indices=True, remove_columns=remove, desc=f"Formatting {spec.name}", **no_cache
    )
    if drop_unanswerable:
        formatted = formatted.filter(
            lambda row: row["__answer"] != "", desc=f"Dropping unanswerable {spec.name}", **no_cache
        )
    return formatted.rename_columns({f"__{c}": c for c in new}).select_columns(new + kept)

