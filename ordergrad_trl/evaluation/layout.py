"""On-disk layout of an evaluation run: its folders and file names, and the schema of each file of rows.

    <output_dir>/
        provenance.json               what defines the numbers: model, datasets, prompt, sampling (checked on resume)
        <dataset>/problems.jsonl      one row per problem: id, answer (gold), prompt (messages), metadata, check
        <dataset>/generations*.jsonl  one row per sample: id, sample, completion, num_tokens, finish_reason, tag,
                                      check (one file per data-parallel rank: generations.rank<r>.jsonl)
        <dataset>/scores.jsonl        one row per sample: id, sample, correct, status, format, pred, crc, check
        report.json / report.md / passk.png

`SCHEMAS` gives the types and ranges of each file's fields (`id`, `sample`, `completion`, `correct`, ...), which
every reader (`records.read_numbered`) checks a row against. Rows are keyed by (id, sample), problems by id
(`row_key`). How rows are read, written and checksummed safely is `records`; how bytes land on disk, `safe_io`.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from .errors import MissingPathError, UsageError

__all__ = [
    "GEN_GLOB",
    "LEGACY_CONFIG",
    "MERGED_DIR",
    "PLOT",
    "PROVENANCE",
    "REPORT_JSON",
    "REPORT_MD",
    "RUN_FILES",
    "SCHEMAS",
    "dataset_dirs",
    "generation_files",
    "kind_of",
    "require_run",
    "row_key",
    "run_dir",
]

GEN_GLOB = "generations*.jsonl"  # candidates only: `generation_files` keeps the run's own names
GEN_NAME = re.compile(r"^generations(\.rank\d+)?\.jsonl$")  # generations.jsonl, generations.rank<r>.jsonl


def generation_files(folder: str | os.PathLike) -> list[Path]:
    """The generation files of a dataset folder, in name order: `generations.jsonl` and the data-parallel ranks'
    `generations.rank<r>.jsonl`, and nothing else (a `generations.bak.jsonl` copy beside them is not read)."""
    return sorted(p for p in Path(folder).glob(GEN_GLOB) if GEN_NAME.match(p.name))


# What a run directory holds besides its datasets' folders (a dataset may not take one of these names)
PROVENANCE = "provenance.json"
LEGACY_CONFIG = "generation_config.json"  # written before provenance.json: sampling settings only
REPORT_JSON, REPORT_MD, PLOT = "report.json", "report.md", "passk.png"
MERGED_DIR = "merged_model"  # an adapter merged into its base, for vLLM and data-parallel workers
RUN_FILES = (PROVENANCE, LEGACY_CONFIG, REPORT_JSON, REPORT_MD, PLOT, MERGED_DIR)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# The schema of each file: {field: (check, what a valid value is)}; a field is required unless `None` passes.
_ID = (lambda v: isinstance(v, str) and v != "", "a non-empty string")
_SAMPLE = (lambda v: _is_int(v) and v >= 0, "an integer >= 0")
_U32 = (lambda v: _is_int(v) and 0 <= v < 1 << 32, "an integer checksum in [0, 2^32)")
STATUSES = ("ok", "timeout", "unscorable")
REWARD_FIELDS = ("correct", "format")  # the numeric fields of a score row that `--reward_weights` can weigh
SCHEMAS: dict[str, dict] = {
    "problems": {"id": _ID, "answer": (lambda v: isinstance(v, str), "a string (the gold answer)"),
                 "question": (lambda v: v is None or isinstance(v, str), "a string or null"), "check": _U32},
    "generations": {"id": _ID, "sample": _SAMPLE, "completion": (lambda v: isinstance(v, str), "a string"),
                    "num_tokens": (lambda v: v is None or (_is_int(v) and v >= 0), "an integer >= 0 or null"),
                    "finish_reason": (lambda v: v is None or isinstance(v, str), "a string or null"),
                    "tag": _U32, "check": _U32},
    "scores": {"id": _ID, "sample": _SAMPLE,
               "correct": (lambda v: v is None or (_is_num(v) and v in (0, 1)), "1, 0 or null"),
               "status": (lambda v: v in STATUSES, " or ".join(map(repr, STATUSES))),
               "format": (lambda v: v is None or _is_num(v), "a finite number or null"),
               "pred": (lambda v: v is None or isinstance(v, str), "a string or null"),
               "crc": _U32, "check": _U32},
}


def kind_of(path: Path) -> str | None:
    """Which schema a run file follows, from its name (None: not a run's row file)."""
    if path.name == "problems.jsonl":
        return "problems"
    if path.name == "scores.jsonl":
        return "scores"
    return "generations" if GEN_NAME.match(path.name) else None


def row_key(kind: str, row: dict):
    """What a row is keyed by: the problem id, or (id, sample index)."""
    return row["id"] if kind == "problems" else (row["id"], row["sample"])


def dataset_dirs(output_dir: str | os.PathLike) -> list[Path]:
    """Every folder of a run that holds a dataset's files (problems, generations or scores), in name order: the one
    list that every stage verifies (`verify.check_run`) and reads. Hidden folders count (a backup `.old/` copy is
    checked like any other, not listed unchecked); `merged_model/` is the run's, not a dataset."""
    out = Path(output_dir)
    if not out.is_dir():
        return []
    return sorted(d for d in out.iterdir() if d.name != MERGED_DIR and d.is_dir() and (
        (d / "problems.jsonl").exists() or (d / "scores.jsonl").exists() or generation_files(d)))


def run_dir(output_dir: str | os.PathLike) -> Path:
    """`--output_dir` as an absolute path, so worker processes and later stages agree on it whatever their cwd;
    a UsageError when it exists but is not a directory."""
    if not str(output_dir).strip():  # Path("") is the current directory
        raise UsageError("--output_dir must not be empty; name the run's directory")
    out = Path(output_dir).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output_dir {output_dir}: {out} is a file, not a directory; pass a directory")
    return out


def require_run(output_dir: str | os.PathLike, stage: str) -> tuple[Path, list[Path]]:
    """(absolute run directory, its dataset directories); MissingPathError when there are none."""
    out = run_dir(output_dir)
    dirs = dataset_dirs(out)
    if not dirs:
        what = "no <dataset>/problems.jsonl in" if out.is_dir() else "directory not found:"
        raise MissingPathError(f"--output_dir {output_dir}: {what} {out}; run the generate stage first (or pass "
                               f"the --output_dir it wrote) before {stage}")
    return out, dirs
