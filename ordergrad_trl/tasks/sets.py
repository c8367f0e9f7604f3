"""The registry of math sets: each set's sources, readers and metadata (`MATH_SETS`), looked up by name or alias.

`MATH_SETS` is a `Registry`'s view by canonical name; the look-up by alias or Hub id (`find_math_set`) is here."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..core.registry_base import Registry
from .arithmetic import ARITHMETIC_SPEC, DIGITS_SPEC
from .arithmetic_splits import CHAINS_SPEC, DIGITS20_SPEC
from .prompts import last_boxed
from .spec import (
    Generated,
    HubSource,
    LocalFile,
    MathSetSpec,
    answer_or_boxed,
    field,
    first_field,
    gsm8k_gold,
    gsm8k_row_gold,
    gsm8k_solution,
    integer_answer,
    olympiad_gold,
    olympiad_question,
    scalar_answer,
    text_field,
)

__all__ = [
    "GENERIC_SPEC",
    "MATH_SETS",
    "REFERENCE_SOLUTION_SETS",
    "Generated",
    "HubSource",
    "LocalFile",
    "MathSetSpec",
    "find_math_set",
    "get_math_set",
    "gsm8k_gold",
    "set_table",
    "spec_for_file",
]

_SPECS = (
    MathSetSpec(
        name="math",
        description="MATH (Hendrycks et al.) 7.5k train / 5k test, the RL training set open-r1 uses",
        hub=HubSource("DigitalLearningGmbH/MATH-lighteval"),
        default_split="train",
        question=first_field("problem"),
        gold=answer_or_boxed,
        metadata=("level", "type"),
        solution=field("solution"),
        aliases=("hendrycks_math", "math-lighteval", "competition_math"),
        example={"problem": "Compute $2+3$.", "solution": "$2+3=\\boxed{5}$.", "level": "Level 1", "type": "Algebra"},
    ),
    MathSetSpec(
        name="math500",
        description="MATH-500, the PRM800K test subset of MATH",
        hub=HubSource("HuggingFaceH4/MATH-500"),
        local=LocalFile("math500_test.jsonl"),
        question=first_field("problem"),
        gold=answer_or_boxed,
        id_field="unique_id",
        metadata=("subject", "level"),
        solution=field("solution"),
        aliases=("math-500", "math_500"),
        example={"problem": "Compute $2+3$.", "solution": "$2+3=\\boxed{5}$.", "answer": "5", "subject": "Algebra",
                 "level": 1, "unique_id": "test/algebra/1.json"},
    ),
    MathSetSpec(
        name="gsm8k",
        description="GSM8K grade-school math, 'main' config (7473 train / 1319 test)",
        hub=HubSource("openai/gsm8k", "main"),
        local=LocalFile("gsm8k_test.jsonl"),
        question=first_field("question"),
        gold=gsm8k_row_gold,
        solution=gsm8k_solution,
        aliases=("grade-school-math",),
        example={"question": "Ann has 2 apples and gets 3 more. How many does she have?",
                 "answer": "2+3=<<2+3=5>>5\n#### 5"},
    ),
    MathSetSpec(
        name="aime24",
        description="AIME 2024 I and II (30 problems)",
        hub=HubSource("HuggingFaceH4/aime_2024", splits={"test": "train"}),
        local=LocalFile("aime24_test.jsonl"),
        question=first_field("problem", "question"),
        gold=lambda row: integer_answer(row.get("answer")),
        id_field="id",
        aliases=("aime2024", "aime_2024"),
        example={"id": 60, "problem": "Compute $2+3$.", "answer": "5"},
    ),
    MathSetSpec(
        name="aime25",
        description="AIME 2025 I and II (30 problems)",
        hub=HubSource("math-ai/aime25"),
        local=LocalFile("aime25_test.jsonl"),
        question=first_field("problem", "question"),
        gold=lambda row: integer_answer(row.get("answer")),
        id_field="id",
        aliases=("aime2025", "aime_2025"),
        example={"id": "0", "problem": "Compute $2+3$.", "answer": "5"},
    ),
    MathSetSpec(
        name="amc23",
        description="AMC 12 2023 (40 problems)",
        hub=HubSource("math-ai/amc23"),
        local=LocalFile("amc23_test.jsonl"),
        question=first_field("problem", "question"),
        gold=lambda row: scalar_answer(row.get("answer")),
        id_field="id",
        aliases=("amc2023", "amc_2023"),
        example={"id": 0, "question": "Compute $2+3$.", "answer": 5.0},
    ),
    MathSetSpec(
        name="minerva",
        description="Minerva OCW undergraduate STEM problems (272)",
        hub=HubSource("math-ai/minervamath"),
        local=LocalFile("minerva_math_test.jsonl"),
        # The local copy (Qwen2.5-Math) has problem/solution/type/idx; the Hub copy has question/answer.
        question=first_field("problem", "question"),
        gold=lambda row: last_boxed(text_field(row, "solution")) or scalar_answer(row.get("answer")),
        id_field="idx",
        metadata=("type",),
        solution=field("solution"),
        aliases=("minerva_math", "minervamath"),
        example={"problem": "Compute $2+3$.", "solution": "$2+3=\\boxed{5}$.", "type": "Physics", "idx": 0},
    ),
    MathSetSpec(
        name="olympiadbench",
        description="OlympiadBench, text-only English open-ended competition maths (675)",
        hub=HubSource("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", {"test": "train"}),
        local=LocalFile("olympiadbench_test.jsonl"),
        question=olympiad_question,
        gold=olympiad_gold,
        id_field="id",
        metadata=("subfield", "answer_type", "unit", "is_multiple_answer"),
        aliases=("olympiad_bench", "olympiad"),
        example={"id": 1606, "subfield": "Algebra", "context": None, "question": "Compute $2+3$.",
                 "final_answer": ["$5$"], "answer_type": "Numerical", "unit": None, "is_multiple_answer": False},
    ),
    ARITHMETIC_SPEC,
    DIGITS_SPEC,
    DIGITS20_SPEC,
    CHAINS_SPEC,
)

_ROWS: Registry[MathSetSpec] = Registry(
    "math set", holder=lambda s: f"the set {s.description or s.hub_id or s.name!r}", same=lambda old, new: old == new
)
MATH_SETS: Mapping[str, MathSetSpec] = _ROWS.view
"""Known sets by canonical name, in registration order."""


def _norm(name: str) -> str:
    return re.sub(r"[\s_-]", "", name.lower())


def _keys(spec: MathSetSpec) -> tuple[str, ...]:
    """What a set is found by: its name, its aliases and its Hub id."""
    return (spec.name, *spec.aliases, *((spec.hub_id,) if spec.hub_id else ()))


def find_math_set(name: str) -> MathSetSpec | None:
    """Registry entry for `name` (canonical name, alias such as "MATH-500", or Hub id; case-insensitive), or None."""
    key = _norm(str(name))
    return next((spec for spec in MATH_SETS.values() if key in map(_norm, _keys(spec))), None)


def _register(spec: MathSetSpec) -> MathSetSpec:
    """Add `spec` under its name; a name, alias or Hub id (case, spaces, `_` and `-` ignored) another set is found
    by raises."""
    _ROWS.check(spec.name, spec)
    for key in _keys(spec):
        taken = find_math_set(key)
        if taken is not None and taken.name != spec.name:
            raise ValueError(f"math set name {key!r} of {spec.name!r} is taken by {taken.name!r}")
    return _ROWS.add(spec.name, spec)


for _spec in _SPECS:
    _register(_spec)

REFERENCE_SOLUTION_SETS: tuple[str, ...] = tuple(n for n, spec in MATH_SETS.items() if spec.has_reference_solution)
"""Sets whose rows carry a full solution ending in `\\boxed{answer}` (`keep_solution=True`): scoring those
solutions as completions must give 100%, a check of an evaluator's answer extraction. Minerva's solution exists
only in the local (Qwen2.5-Math) copy, not in the Hub's math-ai/minervamath."""

GENERIC_SPEC = MathSetSpec(
    name="custom",
    question=first_field("problem", "question"),
    gold=answer_or_boxed,
    id_field="id",
    solution=field("solution"),
)
"""How a data file or Hub id outside the registry is read: `problem`/`question` as the question, `answer` (else
the last `\\boxed{}` of `solution`) as the gold."""


def set_table() -> str:
    """The table of docs/evaluation.md's "Benchmarks": one row per registered set (a test checks they agree)."""
    rows = ["| name | what | source | also accepted as |", "|---|---|---|---|"]
    for spec in MATH_SETS.values():
        sources = (spec.hub and f"Hub `{spec.hub.id}`", spec.local and f"local `{spec.local.name}`")
        where = "built in, offline" if spec.generator else " + ".join(x for x in sources if x)
        aliases = ", ".join(f"`{a}`" for a in spec.aliases) or "-"
        rows.append(f"| `{spec.name}` | {spec.description} | {where} | {aliases} |")
    return "\n".join(rows)


def get_math_set(name: str) -> MathSetSpec:
    """`find_math_set`, raising a ValueError that lists the valid names for an unknown one."""
    spec = find_math_set(name)
    if spec is None:
        raise ValueError(
            f"unknown math set {name!r}; valid names: {', '.join(MATH_SETS)} (or a .jsonl/.json/.parquet path)"
        )
    return spec


def spec_for_file(file_name: str) -> MathSetSpec:
    """How to read a data file: the set whose local file has this name (`math500_test.jsonl`), else
    `GENERIC_SPEC`."""
    return next((s for s in MATH_SETS.values() if s.local_file == file_name), GENERIC_SPEC)
