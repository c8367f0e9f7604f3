"""Load a math set by name, Hub id or file, as a conversational dataset (the sets are registered in sets.py).

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
from pathlib import Path

import datasets

from . import arithmetic
from .prompts import DEFAULT_USER_TEMPLATE, format_rows, last_boxed
from .sets import _GENERIC, _LOOKUP, _SPECS, MATH_SETS, REFERENCE_SOLUTION_SETS, MathSetSpec, _norm, get_math_set

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

_TRUE = {"1", "true", "yes", "on"}

# Sets generated in arithmetic.py: name -> builder function there
_BUILTIN = {"arithmetic": arithmetic.arithmetic_dataset, "digits": arithmetic.digits_dataset}


def shared_data_dir() -> Path:
    """Directory of the public benchmark files: $ORDERGRAD_SHARED_DATA, else `shared/data` beside the checkout."""
    env = os.environ.get("ORDERGRAD_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".." / "shared" / "data"



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
            f"read the local copy {spec.local_file} from the shared data dir ({shared_data_dir()}, override with "
            "$ORDERGRAD_SHARED_DATA) with local=True (ordergrad-eval: --local_data; anywhere: "
            "ORDERGRAD_LOCAL_DATA=1), or "
            if spec.local_file
            else ""
        )
        raise ConnectionError(
            f"could not load dataset {spec.name!r} ({spec.hub_id}, config={spec.hub_config}, split={hub_split}) "
            f"from the Hugging Face Hub: the Hub is unreachable or the dataset is unavailable "
            f"({type(err).__name__}: {err}). To work offline use {local_hint}"
            f"load_math_dataset('/path/to/file.jsonl', spec={spec.name!r}) with a local .jsonl/.json/.parquet copy."
        ) from err


def _check_solutions(spec: MathSetSpec, keep_solution: bool) -> None:
    if keep_solution and spec.solution is None:
        raise ValueError(
            f"keep_solution=True but {spec.name!r} has no reference solutions; sets with them: "
            f"{', '.join(REFERENCE_SOLUTION_SETS)}"
        )


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
        _check_solutions(spec, keep_solution)
        return format_rows(_load_file(path), spec, split or spec.default_split, **fmt)

    registered = _LOOKUP.get(_norm(text))
    if registered is None:
        if "/" in text:  # an unregistered Hub dataset id
            if split is None:
                raise ValueError(f"split is required for the unregistered Hub dataset {text!r}")
            base = spec or _GENERIC
            hub_spec = dataclasses.replace(base, hub_id=text, hub_config=None, hub_splits={})
            _check_solutions(hub_spec, keep_solution)
            return format_rows(_load_hub(hub_spec, split), hub_spec, split, **fmt)
        get_math_set(text)  # raises the ValueError listing valid names
    spec = registered
    split = split or spec.default_split
    _check_solutions(spec, keep_solution)

    if spec.name in _BUILTIN:
        if split not in ("train", "test"):
            raise ValueError(f"split for {spec.name!r} must be 'train' or 'test', got {split!r}")
        template = {} if builtin_template is None else {"user_template": builtin_template}
        return _BUILTIN[spec.name](system_prompt=system_prompt, **template)[split]

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
                f"local file for {spec.name!r} not found: {file} (set $ORDERGRAD_SHARED_DATA, or data_dir=; "
                "ordergrad-eval: --data_dir)"
            )
        return format_rows(_load_file(file), spec, split, **fmt)
    return format_rows(_load_hub(spec, split), spec, split, **fmt)
