"""What a math set is: where it comes from (`HubSource`, `LocalFile`, `Generated`) and the readers of its rows.

Readers take one raw row and return `str | None` (None: the row has no such field); they refuse a container or a
boolean where a scalar answer belongs, since `str(['25'])` would become the gold "['25']", which no completion
matches. The registry of sets is `sets.py`.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from .numerals import number_text
from .prompts import last_boxed

__all__ = [
    "Generated",
    "HubSource",
    "LocalFile",
    "MathSetSpec",
    "answer_or_boxed",
    "field",
    "first_field",
    "gsm8k_gold",
    "gsm8k_row_gold",
    "gsm8k_solution",
    "integer_answer",
    "olympiad_gold",
    "olympiad_question",
    "scalar_answer",
    "text_field",
]


def gsm8k_gold(answer_text: str) -> str:
    """GSM8K gold: the text after the last `####`, thousands separators removed ("#### 1,450,000" -> "1450000")."""
    if not isinstance(answer_text, str):
        raise ValueError(f"gsm8k answer_text is a {type(answer_text).__name__} ({str(answer_text)[:60]}), "
                         "not a string")
    if "####" not in answer_text:
        raise ValueError(f"gsm8k answer_text has no '####' final-answer marker: {answer_text!r:.80}")
    return answer_text.rsplit("####", 1)[1].strip().replace(",", "")


def scalar_answer(value: Any) -> str | None:
    """A gold stored as one string or number -> its text; None if absent; ValueError for anything else."""
    # Hub/JSON loaders give AMC23 answers as floats (27.0) and AIME25 as ints: render them as the integer a
    # grader expects, keep other strings untouched.
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Real)):
        raise ValueError(f"the gold answer is a {type(value).__name__} ({str(value)[:60]}), not a string or number")
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if not isinstance(value, str):
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"the gold answer is {value}, not a finite number")
        return number_text(value)  # positional: `repr` writes 1e-07, which math-verify reads as e - 7
    return value.strip() or None


def text_field(row: Mapping[str, Any], name: str) -> str | None:
    """A text column (a solution, a GSM8K answer): None if absent or empty, ValueError if not a string."""
    value = row.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name!r} is a {type(value).__name__} ({str(value)[:60]}), not a string")
    return value


def integer_answer(value: Any) -> str | None:
    """`scalar_answer`, with integers canonical ("025" -> "25")."""
    # AIME answers are integers 0..999; some sources store "025": canonicalize so string matching also works.
    text = scalar_answer(value)
    if text is None:
        return None
    try:
        return str(int(text))  # exact at any size ("025" -> "25"); float() below would round beyond 2**53
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return text
    if value.is_integer() and abs(value) < 2**53:  # "25.0" -> "25"; a larger one keeps its own text
        return str(int(value))
    return text


def gsm8k_row_gold(row: Mapping[str, Any]) -> str | None:
    """GSM8K's gold from its `answer` column (None without a `####` line)."""
    text = text_field(row, "answer")
    if not text or "####" not in text:
        return None
    return gsm8k_gold(text) or None


def gsm8k_solution(row: Mapping[str, Any]) -> str | None:
    """GSM8K's worked solution, ending in `\\boxed{gold}`."""
    # The reference CoT with the calculator annotations removed and `#### N` turned into `\boxed{N}`, so it can
    # be scored exactly like a model completion.
    gold = gsm8k_row_gold(row)
    if gold is None:
        return None
    body = re.sub(r"<<[^>]*>>", "", row["answer"].rsplit("####", 1)[0]).rstrip()
    return f"{body}\nThe final answer is $\\boxed{{{gold}}}$."


def answer_or_boxed(row: Mapping[str, Any]) -> str | None:
    """The `answer` column, else the last `\\boxed{}` of `solution` (MATH, and files read generically)."""
    answer = scalar_answer(row.get("answer"))
    if answer is not None:
        return answer
    return last_boxed(text_field(row, "solution"))


def olympiad_gold(row: Mapping[str, Any]) -> str | None:
    """OlympiadBench's `final_answer` parts joined by ", ", without `$`."""
    # final_answer is a list of the parts of one answer (the set's own format), each a string
    final = row.get("final_answer")
    if isinstance(final, str):
        final = [final]
    if not final:
        return None
    if not isinstance(final, (list, tuple)) or any(p is not None and not isinstance(p, str) for p in final):
        raise ValueError(f"'final_answer' is {str(final)[:60]}, not a string or a list of strings")
    # Multi-part answers are stored as "$69$,$84$": dropping every `$` leaves "69,84".
    parts = [p.replace("$", "").strip() for p in final if p is not None]
    return ", ".join(p for p in parts if p) or None


def olympiad_question(row: Mapping[str, Any]) -> str | None:
    """OlympiadBench's `context` (if any), then its `question`."""
    context = (text_field(row, "context") or "").strip()
    question = (text_field(row, "question") or "").strip()
    return f"{context}\n{question}" if context else question


def first_field(*names: str) -> Callable[[Mapping[str, Any]], str | None]:
    """Reader of the first of `names` that holds a non-blank string (the question column)."""
    # Hub and local copies of a benchmark name the problem column differently (Minerva: question vs problem).
    def question(row: Mapping[str, Any]) -> str | None:
        for name in names:
            value = row.get(name)
            if isinstance(value, str) and value.strip():
                return value.strip()
        return None

    question.__qualname__ = f"first_field{names}"
    return question


def field(name: str) -> Callable[[Mapping[str, Any]], str | None]:
    """Reader of the text column `name` (`text_field`; a blank one is None)."""
    def get(row: Mapping[str, Any]) -> str | None:
        value = text_field(row, name)
        return value if value and value.strip() else None

    get.__qualname__ = f"field({name!r})"
    return get


@dataclass(frozen=True)
class HubSource:
    """A dataset on the Hugging Face Hub: `datasets.load_dataset(id, config, split=splits.get(split, split))`."""

    id: str
    config: str | None = None
    splits: Mapping[str, str] = dataclass_field(default_factory=dict)  # our split name -> the Hub's split name


@dataclass(frozen=True)
class LocalFile:
    """A `.jsonl`/`.json`/`.parquet` file in the shared data directory (`data_dir=`, else `shared_data_dir()`)
    holding one split."""

    name: str
    split: str = "test"


@dataclass(frozen=True)
class Generated:
    """A set built offline by `build(system_prompt=..., [user_template=...]) -> DatasetDict` of `splits`."""

    build: Callable[..., Any]
    splits: tuple[str, ...] = ("train", "test")


@dataclass(frozen=True)
class MathSetSpec:
    """Everything the loader needs to know about one set: where it comes from and how to read a row.

    Sources: a `hub` dataset and/or a `local` file copy, or a built-in `generator` (alone); `load_math_dataset`
    dispatches on them. `question`, `gold` and `solution` take one raw row (a mapping) and return a string or
    None; they must accept both the Hub and the local variant of the set's fields, and raise ValueError on a value
    of the wrong kind (a list where one answer belongs).
    """

    name: str
    question: Callable[[Mapping[str, Any]], str | None]
    gold: Callable[[Mapping[str, Any]], str | None]
    hub: HubSource | None = None
    local: LocalFile | None = None
    generator: Generated | None = None
    default_split: str = "test"
    id_field: str | None = None
    metadata: tuple[str, ...] = ()
    solution: Callable[[Mapping[str, Any]], str | None] | None = None
    aliases: tuple[str, ...] = ()
    description: str = ""
    # One raw row as the set's source has it (field names and value kinds; gold 5), for the docs and the tests'
    # fixtures: a new set brings its own, so no test has to know its row shape by name. None for a generated set.
    example: Mapping[str, Any] | None = None

    def __post_init__(self):
        if self.generator is not None and (self.hub or self.local):
            raise ValueError(f"math set {self.name!r}: a generated set has no Hub id or local file")

    @property
    def has_reference_solution(self) -> bool:
        """Whether rows carry a full worked solution ending in `\\boxed{gold}` (see `keep_solution`)."""
        return self.solution is not None

    @property
    def sources(self) -> tuple[HubSource | LocalFile | Generated, ...]:
        """Where the set's rows come from, in the order `load_math_dataset` prefers them by default."""
        return tuple(s for s in (self.generator, self.hub, self.local) if s is not None)

    # the source fields by their earlier names (recipes and data_source tags read them)
    @property
    def hub_id(self) -> str | None:
        return self.hub.id if self.hub else None

    @property
    def hub_config(self) -> str | None:
        return self.hub.config if self.hub else None

    @property
    def local_file(self) -> str | None:
        return self.local.name if self.local else None
