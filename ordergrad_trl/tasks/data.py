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

from .json_rows import read_rows, rows_to_dataset
from .prompts import DEFAULT_USER_TEMPLATE, format_rows, last_boxed
from .sets import (
    GENERIC_SPEC,
    MATH_SETS,
    REFERENCE_SOLUTION_SETS,
    HubSource,
    MathSetSpec,
    find_math_set,
    get_math_set,
    spec_for_file,
)

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
_LOCAL_HINT = "local=True (ordergrad-eval: --local_data; anywhere: ORDERGRAD_LOCAL_DATA=1)"


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
    if builder == "json":  # the project's own reader: exact numbers (no gold through float64), rows named by line
        return rows_to_dataset(read_rows(path), str(path))
    return datasets.load_dataset(builder, data_files=str(path), split="train")


def _load_hub(spec: MathSetSpec, split: str) -> datasets.Dataset:
    hub = spec.hub
    hub_split = hub.splits.get(split, split)
    try:
        return datasets.load_dataset(hub.id, hub.config, split=hub_split)
    except OSError as err:  # ConnectionError, LocalEntryNotFoundError, DatasetNotFoundError, HfHubHTTPError
        local_hint = (
            f"read the local copy {spec.local_file} from the shared data dir ({shared_data_dir()}, override with "
            f"$ORDERGRAD_SHARED_DATA) with {_LOCAL_HINT}, or "
            if spec.local
            else ""
        )
        raise ConnectionError(
            f"could not load dataset {spec.name!r} ({hub.id}, config={hub.config}, split={hub_split}) "
            f"from the Hugging Face Hub: the Hub is unreachable or the dataset is unavailable "
            f"({type(err).__name__}: {err}). To work offline use {local_hint}"
            f"load_math_dataset('/path/to/file.jsonl', spec={spec.name!r}) with a local .jsonl/.json/.parquet copy."
        ) from err


def _load_local(spec: MathSetSpec, split: str, data_dir) -> datasets.Dataset:
    if split != spec.local.split:
        raise ValueError(f"the local {spec.local.name} of {spec.name!r} holds the {spec.local.split!r} split only, "
                         f"got split={split!r}")
    file = (Path(data_dir) if data_dir is not None else shared_data_dir()) / spec.local.name
    if not file.is_file():
        raise FileNotFoundError(
            f"local file for {spec.name!r} not found: {file} (set $ORDERGRAD_SHARED_DATA, or data_dir=; "
            "ordergrad-eval: --data_dir)"
        )
    return _load_file(file)


def _load_source(spec: MathSetSpec, split: str, local: bool | None, data_dir) -> datasets.Dataset:
    """The raw rows of `spec`'s split from the source it names: its local file when asked (or when it has no Hub
    id), else the Hub."""
    path_hint = (f"pass a data file instead (load_math_dataset('/path/to/file.jsonl', spec={spec.name!r}); "
                 "ordergrad-eval: --datasets /path/to/file.jsonl)")
    if spec.hub is None and spec.local is None:
        raise ValueError(f"math set {spec.name!r} has no Hub id and no local file to load it from; {path_hint}")
    if local is None:
        local = os.environ.get("ORDERGRAD_LOCAL_DATA", "").strip().lower() in _TRUE or spec.hub is None
    if local and spec.local is None:
        raise ValueError(f"math set {spec.name!r} has no local file; load it from the Hub ({spec.hub.id}) without "
                         "local=True / --local_data / ORDERGRAD_LOCAL_DATA=1, or {path_hint}")
    if not local and spec.hub is None:
        raise ValueError(f"math set {spec.name!r} has no Hub id; read its local file {spec.local.name} with "
                         f"{_LOCAL_HINT}, or {path_hint}")
    return _load_local(spec, split, data_dir) if local else _load_hub(spec, split)


def _check_solutions(spec: MathSetSpec, keep_solution: bool) -> None:
    if keep_solution and spec.solution is None:
        raise ValueError(
            f"keep_solution=True but {spec.name!r} has no reference solutions; sets with them: "
            f"{', '.join(REFERENCE_SOLUTION_SETS)}"
        )


def load_math_dataset(
    name_or_path: str | os.PathLike | MathSetSpec,
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
            Hub dataset id, a path to a `.jsonl`/`.json`/`.parquet` file, or a `MathSetSpec` of your own (read
            from the sources it names).
        split: split to load; defaults to the set's `default_split` ("test" for benchmarks, "train" for MATH and
            arithmetic). Required for a Hub id that is not in the registry.
        spec: how to read a local file or an unregistered Hub id (registry name or `MathSetSpec`). A file named
            like a registered set's local file (e.g. `math500_test.jsonl`) uses that set's spec; otherwise the
            generic reader takes `problem`/`question` as the question and `answer` (else the last `\\boxed{}` of
            `solution`) as the gold.
        local: read the set from its local file in `data_dir` instead of the Hub. Defaults to
            $ORDERGRAD_LOCAL_DATA (1/true), else to the Hub (the local file for a set without a Hub id). Local
            benchmark files hold the test split only.
        data_dir: directory of the local files; defaults to `shared_data_dir()`.
        system_prompt: optional system message; None (default) sends only the user message.
        user_template: user message with a `{question}` placeholder; None (default) is `DEFAULT_USER_TEMPLATE`,
            except for `digits`, `digits20` and `chains`, whose default is the bare question.
        keep_metadata: keep the set's metadata columns (e.g. MATH-500 `subject`, `level`).
        keep_solution: add a `solution` column with the reference solution (sets in `REFERENCE_SOLUTION_SETS`).
        drop_unanswerable: skip rows without an extractable question or gold instead of raising ValueError (a
            gold of the wrong kind, e.g. a list where one answer belongs, is refused either way, naming the row).
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
    if isinstance(name_or_path, MathSetSpec):  # a set defined by the caller, read from its own sources
        spec = name_or_path
    else:
        text = os.fspath(name_or_path)
        path = Path(text).expanduser()
        if path.is_file() or path.suffix in (".jsonl", ".json", ".parquet") or text.startswith((".", "/", "~")):
            if not path.is_file():
                raise FileNotFoundError(f"data file not found: {text!r}")
            spec = spec or spec_for_file(path.name)
            _check_solutions(spec, keep_solution)
            return format_rows(_load_file(path), spec, split or spec.default_split, **fmt)
        registered = find_math_set(text)
        if registered is None and "/" in text:  # an unregistered Hub dataset id, read like `spec`
            if split is None:
                raise ValueError(f"split is required for the unregistered Hub dataset {text!r}")
            spec = dataclasses.replace(spec or GENERIC_SPEC, hub=HubSource(text), local=None, generator=None)
            local = False  # a Hub id names its source, whatever --local_data says of the registered sets
        else:
            spec = registered or get_math_set(text)  # an unknown name: the ValueError listing the valid ones
    split = split or spec.default_split
    _check_solutions(spec, keep_solution)
    if spec.generator is not None:
        if split not in spec.generator.splits:
            raise ValueError(f"split for {spec.name!r} must be {' or '.join(map(repr, spec.generator.splits))}, "
                             f"got {split!r}")
        template = {} if builtin_template is None else {"user_template": builtin_template}
        return spec.generator.build(system_prompt=system_prompt, **template)[split]
    return format_rows(_load_source(spec, split, local, data_dir), spec, split, **fmt)
