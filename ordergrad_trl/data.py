"""Math datasets in one conversational format: a registry of known sets (the arithmetic set is in arithmetic.py).

Every loader returns a `datasets.Dataset` with the columns

- `prompt`: conversational prompt, a list of `{"role", "content"}` messages (optional system message, then a
  user message asking to reason step by step and put the final answer in `\\boxed{}`),
- `answer`: the gold answer as a plain string (LaTeX or number, without `$` or `\\boxed{}`),
- `question`: the problem text as it appears in the user message,
- `id`: a stable problem id (the source's own id where it has one, else split and row index),

plus the set's metadata columns (e.g. MATH-500 `subject`, `level`) and, on request, a `solution` column holding a
full reference solution that ends in `\\boxed{answer}`.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import datasets

from .rewards import gsm8k_gold

__all__ = [
    "DEFAULT_USER_TEMPLATE",
    "MATH_SETS",
    "REFERENCE_SOLUTION_SETS",
    "MathSetSpec",
    "get_math_set",
    "last_boxed",
    "load_math_dataset",
    "shared_data_dir",
]

DEFAULT_USER_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{}."
"""User message template; `{question}` is replaced by the problem text (plain substitution, not `str.format`,
so the literal braces of `\\boxed{}` need no escaping)."""

_TRUE = {"1", "true", "yes", "on"}


# --------------------------------------------------------------------------------------------------------------
# Gold extraction helpers


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

# Sets generated in ordergrad_trl/arithmetic.py: name -> builder function there
_BUILTIN = {"arithmetic": "arithmetic_dataset", "digits": "digits_dataset"}

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


def shared_data_dir() -> Path:
    """Directory of the public benchmark files: $ORDERGRAD_SHARED_DATA, else `shared/data` beside the checkout."""
    env = os.environ.get("ORDERGRAD_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


# --------------------------------------------------------------------------------------------------------------
# Loading


def _messages(question: str, system_prompt: str | None, user_template: str) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": user_template.replace("{question}", question)})
    return messages


def _format(
    raw: datasets.Dataset,
    spec: MathSetSpec,
    split: str,
    *,
    system_prompt: str | None,
    user_template: str,
    keep_metadata: bool,
    keep_solution: bool,
    drop_unanswerable: bool,
) -> datasets.Dataset:
    if "{question}" not in user_template:
        raise ValueError(f"user_template must contain '{{question}}', got {user_template!r}")
    if keep_solution and spec.solution is None:
        raise ValueError(
            f"keep_solution=True but {spec.name!r} has no reference solutions; sets with them: "
            f"{', '.join(REFERENCE_SOLUTION_SETS)}"
        )
    kept = [c for c in spec.metadata if c in raw.column_names] if keep_metadata else []
    has_id = spec.id_field is not None and spec.id_field in raw.column_names

    def convert(row: dict[str, Any], idx: int) -> dict[str, Any]:
        question, gold = spec.question(row), spec.gold(row)
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


def _load_file(path: Path) -> datasets.Dataset:
    builder = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}.get(path.suffix.lower())
    if builder is None:
        raise ValueError(f"unsupported data file {str(path)!r}: expected a .jsonl, .json or .parquet file")
    return datasets.load_dataset(builder, data_files=str(path), split="train")


def _load_hub(spec: MathSetSpec, split: str) -> datasets.Dataset:
    hub_split = spec.hub_splits.get(split, split)
    try:
        return datasets.load_dataset(spec.hub_id, spec.hub_config, split=hub_split)
    except OSError as err:  # ConnectionError, LocalEntryNotFoundError, DatasetNotFoundError, HfHubHTTPError
        local_hint = (
            f"load_math_dataset({spec.name!r}, local=True) to read {spec.local_file} from the shared data dir "
            f"({shared_data_dir()}, override with $ORDERGRAD_SHARED_DATA), or "
            if spec.local_file
            else ""
        )
        raise ConnectionError(
            f"could not load dataset {spec.name!r} ({spec.hub_id}, config={spec.hub_config}, split={hub_split}) "
            f"from the Hugging Face Hub: the Hub is unreachable or the dataset is unavailable "
            f"({type(err).__name__}: {err}). To work offline use {local_hint}"
            f"load_math_dataset('/path/to/file.jsonl', spec={spec.name!r}) with a local .jsonl/.json/.parquet copy."
        ) from err


def load_math_dataset(
    name_or_path: str | os.PathLike,
    split: str | None = None,
    *,
    spec: str | MathSetSpec | None = None,
    local: bool | None = None,
    data_dir: str | os.PathLike | None = None,
    system_prompt: str | None = None,
    user_template: str | None = None,
    keep_metadata: bool = True,
    keep_solution: bool = False,
    drop_unanswerable: bool = False,
) -> datasets.Dataset:
    """Load a math set as a conversational dataset with columns `prompt`, `answer`, `question`, `id` (+ metadata).

    Args:
        name_or_path: a registry name or alias (see `MATH_SETS`; "arithmetic" is built in and offline), a
            Hub dataset id, or a path to a `.jsonl`/`.json`/`.parquet` file.
        split: split to load; defaults to the set's `default_split` ("test" for benchmarks, "train" for MATH and
            arithmetic). Required for a Hub id that is not in the registry.
        spec: how to read a local file or an unregistered Hub id (registry name or `MathSetSpec`). A file named
            like a registered set's local file (e.g. `math500_test.jsonl`) uses that set's spec; otherwise the
            generic reader takes `problem`/`question` as the question and `answer` (else the last `\\boxed{}` of
            `solution`) as the gold.
        local: read a registered set from its file in `data_dir` instead of the Hub. Defaults to
            $ORDERGRAD_LOCAL_DATA (1/true) or False. Local benchmark files hold the test split only.
        data_dir: directory of the local files; defaults to `shared_data_dir()`.
        system_prompt: optional system message; None (default) sends only the user message.
        user_template: user message with a `{question}` placeholder; None (default) is `DEFAULT_USER_TEMPLATE`,
            except for `digits`, whose default is the bare question.
        keep_metadata: keep the set's metadata columns (e.g. MATH-500 `subject`, `level`).
        keep_solution: add a `solution` column with the reference solution (sets in `REFERENCE_SOLUTION_SETS`).
        drop_unanswerable: skip rows without an extractable question or gold instead of raising ValueError.
    """
    builtin_template = user_template
    user_template = DEFAULT_USER_TEMPLATE if user_template is None else user_template
    fmt = dict(
        system_prompt=system_prompt,
        user_template=user_template,
        keep_metadata=keep_metadata,
        keep_solution=keep_solution,
        drop_unanswerable=drop_unanswerable,
    )
    if isinstance(spec, str):
        spec = get_math_set(spec)
    text = os.fspath(name_or_path)
    path = Path(text).expanduser()
    looks_like_file = path.suffix in (".jsonl", ".json", ".parquet") or text.startswith((".", "/", "~"))

    if path.is_file() or looks_like_file:
        if not path.is_file():
            raise FileNotFoundError(f"data file not found: {text!r}")
        if spec is None:
            spec = next((s for s in _SPECS if s.local_file == path.name), _GENERIC)
        return _format(_load_file(path), spec, split or spec.default_split, **fmt)

    registered = _LOOKUP.get(_norm(text))
    if registered is None:
        if "/" in text:  # an unregistered Hub dataset id
            if split is None:
                raise ValueError(f"split is required for the unregistered Hub dataset {text!r}")
            base = spec or _GENERIC
            hub_spec = dataclasses.replace(base, hub_id=text, hub_config=None, hub_splits={})
            return _format(_load_hub(hub_spec, split), hub_spec, split, **fmt)
        get_math_set(text)  # raises the ValueError listing valid names
    spec = registered
    split = split or spec.default_split

    if spec.name in _BUILTIN:
        if split not in ("train", "test"):
            raise ValueError(f"split for {spec.name!r} must be 'train' or 'test', got {split!r}")
        from . import arithmetic  # it formats its rows with this module's helpers

        template = {} if builtin_template is None else {"user_template": builtin_template}
        return getattr(arithmetic, _BUILTIN[spec.name])(system_prompt=system_prompt, **template)[split]

    if local is None:
        local = os.environ.get("ORDERGRAD_LOCAL_DATA", "").strip().lower() in _TRUE
    if local:
        if spec.local_file is None:
            raise ValueError(f"{spec.name!r} has no local file; load it from the Hub ({spec.hub_id}) or pass a path")
        if split != "test":
            raise ValueError(f"the local {spec.local_file} holds the 'test' split only, got split={split!r}")
        file = Path(data_dir) if data_dir is not None else shared_data_dir()
        file = file / spec.local_file
        if not file.is_file():
            raise FileNotFoundError(
                f"local file for {spec.name!r} not found: {file} (set $ORDERGRAD_SHARED_DATA or data_dir=)"
            )
        return _format(_load_file(file), spec, split, **fmt)
    return _format(_load_hub(spec, split), spec, split, **fmt)
