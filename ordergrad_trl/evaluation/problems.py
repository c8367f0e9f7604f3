"""The problems of a run: each `--datasets` entry checked, named safely, loaded, and hashed for provenance.

A benchmark's directory inside `--output_dir` is its registry name, or a data file's stem. A stem that is empty,
hidden (`.`, `..`, `.x`), holds a path separator or names a file or folder of the run itself (`provenance.json`,
`report.md`, the merged model's folder, ...) is refused (rename the file), as are two entries that would share a
directory, so nothing is written outside `--output_dir` and no two sets mix.

A `.jsonl` / `.json` file is read as bytes and checked before the datasets loader sees it: a line that is not
UTF-8 or not a JSON object, an empty file, or an `answer` that is a list, mapping, boolean or non-finite number
is a UsageError naming the file and line (the loader would crash, or score the gold's repr). A data file has no
splits: `--split` labels its rows (in their ids) and must be `test`, `validation` or `train`.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
import zlib
from pathlib import Path

from .args import GenerateArgs
from .errors import MissingPathError, UsageError
from .layout import RUN_FILES
from .records import canonical

__all__ = ["DATA_SUFFIXES", "check_data_file", "dataset_key", "load_problems", "problems_index", "problems_sha256"]

DATA_SUFFIXES = (".jsonl", ".json", ".parquet")  # in any case: `.JSONL` too
FILE_SPLITS = ("test", "validation", "train")


def _file_of(name: str) -> Path | None:
    path = Path(name).expanduser()
    if path.suffix.lower() in DATA_SUFFIXES:
        if not path.is_file():
            raise MissingPathError(f"--datasets {name}: file not found (relative to {Path.cwd()})")
        return path
    return path if path.is_file() else None


def dataset_key(name: str) -> str:
    """Directory name of a benchmark inside the run: its registry name, or the file stem (NFC) for a path."""
    from ordergrad_trl.tasks.data import get_math_set

    path = _file_of(name)
    if path is None:
        try:
            return get_math_set(name).name
        except ValueError as err:
            raise UsageError(f"--datasets {name}: {err}") from None
    key = unicodedata.normalize("NFC", path.stem)  # one folder per name however its accents are composed (macOS: NFD)
    if not key or key.startswith(".") or "/" in key or "\\" in key or "\0" in key or key.lower() in RUN_FILES:
        raise UsageError(f"--datasets {name}: the file name gives the folder name {key!r}, which is not a safe "
                         f"name inside --output_dir (empty, hidden, a path separator, or one of the run's own "
                         f"{', '.join(RUN_FILES)}); rename the file")
    return key


def check_keys(names: list[str]) -> dict[str, str]:
    """{folder: --datasets entry}; two entries that would share a folder are refused."""
    keys: dict[str, str] = {}
    for name in names:
        key = dataset_key(name)
        if key in keys:
            raise UsageError(f"--datasets {keys[key]} and {name} would both be stored as {key!r} in --output_dir; "
                             "evaluate them into separate --output_dir, or rename one file")
        keys[key] = name
    return keys


def check_data_file(name: str, path: Path) -> None:
    """UsageError naming `--datasets <name>`, the line and the fault, unless every row is a JSON object whose
    `answer` (if any) is a string or a number. Read by the same reader as the loader (`tasks.json_rows`)."""
    from ordergrad_trl.tasks.json_rows import DataFileError, read_rows

    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".json"):
        return  # parquet: typed columns, read by the loader (its errors are wrapped in load_problems)
    where = f"--datasets {name}"  # the path as given, so `<where>:<line>` reads as file and line
    try:
        rows = read_rows(path, where)
    except DataFileError as err:
        raise UsageError(str(err)) from None
    if not rows:
        raise UsageError(f"{where}: no problems (the file is empty)")
    for at, row in rows:
        if not isinstance(row, dict):
            raise UsageError(f"{where}{at}: a row must be a JSON object, got {type(row).__name__}")
        gold = row.get("answer")
        if isinstance(gold, (list, dict, bool)) or (isinstance(gold, float) and not math.isfinite(gold)):
            raise UsageError(f"{where}{at}: 'answer' is a {type(gold).__name__} ({json.dumps(gold)[:60]}); a gold "
                             "answer must be a string or a finite number")


def problems_sha256(problems: list[dict]) -> str:
    """Hash of the problems' ids, question texts and golds, in order: what a run's numbers are numbers of."""
    canon = [[p["id"], p.get("question"), p["answer"]] for p in problems]
    return hashlib.sha256(canonical(canon)).hexdigest()


def _crc(value) -> int:
    return zlib.crc32(canonical(value))


def problems_index(problems: list[dict]) -> list[list]:
    """`[id, crc of the question, crc of the gold]` per problem, in order: lets a check name the row and the field
    an edit changed, where `problems_sha256` only says that something did."""
    return [[p["id"], _crc(p.get("question")), _crc(p["answer"])] for p in problems]


def load_problems(name: str, args: GenerateArgs, keep_solution: bool = False) -> tuple[list[dict], list[dict]]:
    """(the first `--limit` problems, all problems of the set), as plain dicts: prompt messages, gold answer,
    question, id, metadata.

    `keep_solution`: add `solution`, the set's worked reference solution or, for sets without one (AIME, AMC,
    OlympiadBench, custom files), the gold answer in `\\boxed{}`: what `--backend reference` writes.
    """
    from ordergrad_trl.tasks.data import REFERENCE_SOLUTION_SETS, load_math_dataset

    key = dataset_key(name)
    path = _file_of(name)
    if path is not None:
        if args.split not in FILE_SPLITS:
            raise UsageError(f"--split {args.split}: a data file has no splits; --split labels its rows and must be "
                             f"one of {', '.join(FILE_SPLITS)} (--datasets {name})")
        check_data_file(name, path)
    worked = keep_solution and key in REFERENCE_SOLUTION_SETS
    where = f"--datasets {name} (--split {args.split})"
    try:
        ds = load_math_dataset(
            name,
            args.split,
            local=args.local_data or None,
            data_dir=args.data_dir,
            system_prompt=args.system_prompt,
            user_template=args.user_template,  # None: the set's default
            keep_solution=worked,
        )
    except FileNotFoundError as err:  # a local benchmark file: say which flags point there
        raise MissingPathError(f"--datasets {name} with --local_data / --data_dir: {err}") from None
    except (ValueError, ConnectionError) as err:  # a bad split, a row without question or gold, the Hub is down
        raise UsageError(f"{where}: {' '.join(str(err).split())}") from None
    except Exception as err:
        if path is None:
            raise
        raise UsageError(f"{where}: could not read {path} ({type(err).__name__}: {' '.join(str(err).split())})") \
            from None
    rows = ds.to_list()
    if not rows:
        raise UsageError(f"{where}: no problems")
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise UsageError(f"{where}: duplicate problem id {dup!r}; results are keyed by id")
    if keep_solution and not worked:
        for r in rows:
            r["solution"] = f"The final answer is $\\boxed{{{r['answer']}}}$."
    return rows[: args.limit] if args.limit is not None else rows, rows
