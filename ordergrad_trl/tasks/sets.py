"""The registry of math sets: where each benchmark lives and how to read its question, gold and solution."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .prompts import last_boxed

__all__ = ["MATH_SETS", "REFERENCE_SOLUTION_SETS", "MathSetSpec", "get_math_set", "gsm8k_gold"]


def gsm8k_gold(answer_text: str) -> str:
    """GSM8K gold: the text after the last `####`, thousands separators removed ("#### 1,450,000" -> "1450000")."""
    if "####" not in answer_text:
        raise ValueError(f"gsm8k answer_text has no '####' final-answer marker: {answer_text!r:.80}")
    return answer_text.rsplit("####", 1)[1].strip().replace(",", "")


def _scalar_to_str(value: Any) -> str | None:
    # Hub/JSON loaders give AMC23 answers as floats (27.0) and AIME25 as ints: render them as the integer a
    # grader expects, keep other strings untouched.
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    text = str(value).strip()
    return text or None


def _integer_answer(value: Any) -> str | None:
    # AIME answers are integers 0..999; some sources store "025": canonicalize so string matching also works.
    text = _scalar_to_str(value)
    if text is None:
        return None
    try:
        return str(int(float(text)))
    except ValueError:
        return text


def _gsm8k_gold(row: Mapping[str, Any]) -> str | None:
    text = row.get("answer")
    if not text or "####" not in text:
        return None
    return gsm8k_gold(text) or None


def _gsm8k_solution(row: Mapping[str, Any]) -> str | None:
    # The reference CoT with the calculator annotations removed and `#### N` turned into `\boxed{N}`, so it can
    # be scored exactly like a model completion.
    gold = _gsm8k_gold(row)
    if gold is None:
        return None
    body = re.sub(r"<<[^>]*>>", "", row["answer"].rsplit("####", 1)[0]).rstrip()
    return f"{body}\nThe final answer is $\\boxed{{{gold}}}$."


def _answer_or_boxed(row: Mapping[str, Any]) -> str | None:
    answer = _scalar_to_str(row.get("answer"))
    if answer is not None:
        return answer
    return last_boxed(row.get("solution"))


def _olympiad_gold(row: Mapping[str, Any]) -> str | None:
    final = row.get("final_answer")
    if isinstance(final, str):
        final = [final]
    if not final:
        return None
    # Multi-part answers are stored as "$69$,$84$": dropping every `$` leaves "69,84".
    parts = [p.replace("$", "").strip() for p in final if p is not None]
    return ", ".join(p for p in parts if p) or None


def _olympiad_question(row: Mapping[str, Any]) -> str | None:
    context = (row.get("context") or "").strip()
    question = (row.get("question") or "").strip()
    return f"{context}\n{question}" if context else question


def _first_field(*names: str) -> Callable[[Mapping[str, Any]], str | None]:
    # Hub and local copies of a benchmark name the problem column differently (Minerva: question vs problem).
    def question(row: Mapping[str, Any]) -> str | None:
        for name in names:
            value = row.get(name)
            if isinstance(value, str) and value.strip():
                return value.strip()
        return None

    question.__qualname__ = f"first_field{names}"
    return question


def _field(name: str) -> Callable[[Mapping[str, Any]], str | None]:
    def get(row: Mapping[str, Any]) -> str | None:
        value = row.get(name)
        return value if isinstance(value, str) and value.strip() else None

    get.__qualname__ = f"field({name!r})"
    return get


# --------------------------------------------------------------------------------------------------------------
# Registry


@dataclass(frozen=True)
class MathSetSpec:
    """Everything the loader needs to know about one benchmark: where it lives and how to read a row.

    `question`, `gold` and `solution` take one raw row (a mapping) and return a string or None; they must
    accept both the Hub and the local variant of the set's fields.
    """

    name: str
    question: Callable[[Mapping[str, Any]], str | None]
    gold: Callable[[Mapping[str, Any]], str | None]
    hub_id: str | None = None
    hub_config: str | None = None
    hub_splits: Mapping[str, str] = field(default_factory=dict)  # our split name -> the Hub's split name
    default_split: str = "test"
    local_file: str | None = None
    id_field: str | None = None
    metadata: tuple[str, ...] = ()
    solution: Callable[[Mapping[str, Any]], str | None] | None = None
    aliases: tuple[str, ...] = ()
    description: str = ""

    @property
    def has_reference_solution(self) -> bool:
        """Whether rows carry a full worked solution ending in `\\boxed{gold}` (see `keep_solution`)."""
        return self.solution is not None


_SPECS = (
    MathSetSpec(
        name="math",
        description="MATH (Hendrycks et al.) 7.5k train / 5k test, the RL training set open-r1 uses",
        hub_id="DigitalLearningGmbH/MATH-lighteval",
        default_split="train",
        question=_first_field("problem"),
        gold=_answer_or_boxed,
        metadata=("level", "type"),
        solution=_field("solution"),
        aliases=("hendrycks_math", "math-lighteval", "competition_math"),
    ),
    MathSetSpec(
        name="math500",
        description="MATH-500, the PRM800K test subset of MATH",
        hub_id="HuggingFaceH4/MATH-500",
        local_file="math500_test.jsonl",
        question=_first_field("problem"),
        gold=_answer_or_boxed,
        id_field="unique_id",
        metadata=("subject", "level"),
        solution=_field("solution"),
        aliases=("math-500", "math_500"),
    ),
    MathSetSpec(
        name="gsm8k",
        description="GSM8K grade-school math, 'main' config (7473 train / 1319 test)",
        hub_id="openai/gsm8k",
        hub_config="main",
        local_file="gsm8k_test.jsonl",
        question=_first_field("question"),
        gold=_gsm8k_gold,
        solution=_gsm8k_solution,
        aliases=("grade-school-math",),
    ),
    MathSetSpec(
        name="aime24",
        description="AIME 2024 I and II (30 problems)",
        hub_id="HuggingFaceH4/aime_2024",
        hub_splits={"test": "train"},
        local_file="aime24_test.jsonl",
        question=_first_field("problem", "question"),
        gold=lambda row: _integer_answer(row.get("answer")),
        id_field="id",
        aliases=("aime2024", "aime_2024"),
    ),
    MathSetSpec(
        name="aime25",
        description="AIME 2025 I and II (30 problems)",
        hub_id="math-ai/aime25",
        local_file="aime25_test.jsonl",
        question=_first_field("problem", "question"),
        gold=lambda row: _integer_answer(row.get("answer")),
        id_field="id",
        aliases=("aime2025", "aime_2025"),
    ),
    MathSetSpec(
        name="amc23",
        description="AMC 12 2023 (40 problems)",
        hub_id="math-ai/amc23",
        local_file="amc23_test.jsonl",
        question=_first_field("problem", "question"),
        gold=lambda row: _scalar_to_str(row.get("answer")),
        id_field="id",
        aliases=("amc2023", "amc_2023"),
    ),
    MathSetSpec(
        name="minerva",
        description="Minerva OCW undergraduate STEM problems (272)",
        hub_id="math-ai/minervamath",
        local_file="minerva_math_test.jsonl",
        # The local copy (Qwen2.5-Math) has problem/solution/type/idx; the Hub copy has question/answer.
        question=_first_field("problem", "question"),
        gold=lambda row: last_boxed(row.get("solution")) or _scalar_to_str(row.get("answer")),
        id_field="idx",
        metadata=("type",),
        solution=_field("solution"),
        aliases=("minerva_math", "minervamath"),
    ),
    MathSetSpec(
        name="olympiadbench",
        description="OlympiadBench, text-only English open-ended competition maths (675)",
        hub_id="Hothan/OlympiadBench",
        hub_config="OE_TO_maths_en_COMP",
        hub_splits={"test": "train"},
        local_file="olympiadbench_test.jsonl",
        question=_olympiad_question,
        gold=_olympiad_gold,
        id_field="id",
        metadata=("subfield", "answer_type", "unit", "is_multiple_answer"),
        aliases=("olympiad_bench", "olympiad"),
    ),
    MathSetSpec(
        name="arithmetic",
        description="built-in procedurally generated one-step arithmetic word problems (offline)",
        default_split="train",
        question=_first_field("question"),
        gold=_field("answer"),
        id_field="id",
        metadata=("a", "b", "op"),
    ),
    MathSetSpec(
        name="digits",
        description="built-in bare one-step sums 'What is a op b?' on operands 1..12, user message = question "
        "(offline; calibrated for a 135M model)",
        default_split="train",
        question=_first_field("question"),
        gold=_field("answer"),
        id_field="id",
        metadata=("a", "b", "op"),
    ),
)

MATH_SETS: Mapping[str, MathSetSpec] = MappingProxyType({spec.name: spec for spec in _SPECS})
"""Known sets by canonical name."""

REFERENCE_SOLUTION_SETS: tuple[str, ...] = tuple(spec.name for spec in _SPECS if spec.has_reference_solution)
"""Sets whose rows carry a full solution ending in `\\boxed{answer}` (`keep_solution=True`): scoring those
solutions as completions must give 100%, a check of an evaluator's answer extraction. Minerva's solution exists
only in the local (Qwen2.5-Math) copy, not in the Hub's math-ai/minervamath."""

_GENERIC = MathSetSpec(
    name="custom",
    question=_first_field("problem", "question"),
    gold=_answer_or_boxed,
    id_field="id",
    solution=_field("solution"),
)


def _norm(name: str) -> str:
    return re.sub(r"[\s_-]", "", name.lower())


_LOOKUP: dict[str, MathSetSpec] = {}
for _spec in _SPECS:
    for _key in (_spec.name, *_spec.aliases, *((_spec.hub_id,) if _spec.hub_id else ())):
        _LOOKUP[_norm(_key)] = _spec


def get_math_set(name: str) -> MathSetSpec:
    """Registry entry for `name` (canonical name, alias such as "MATH-500", or Hub id; case-insensitive)."""
    spec = _LOOKUP.get(_norm(str(name)))
    if spec is None:
        raise ValueError(
            f"unknown math set {name!r}; valid names: {', '.join(MATH_SETS)} (or a .jsonl/.json/.parquet path)"
        )
    return spec

