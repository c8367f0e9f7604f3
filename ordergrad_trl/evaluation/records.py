"""On-disk layout of an evaluation run and crash-safe JSONL records, read and repaired as bytes.

    <output_dir>/
        provenance.json               what defines the numbers: model, datasets, prompt, sampling (checked on resume)
        <dataset>/problems.jsonl      one row per problem: id, answer (gold), prompt (messages), metadata, check
        <dataset>/generations*.jsonl  one row per sample: id, sample, completion, num_tokens, finish_reason, tag,
                                      check (one file per data-parallel rank: generations.rank<r>.jsonl)
        <dataset>/scores.jsonl        one row per sample: id, sample, correct, status, format, pred, crc, check
        report.json / report.md / passk.png

Each row is one `write` to a file opened for appending, and every batch is fsynced, so a kill loses at most the
rows in flight and can cut only the last line, at any byte (inside a UTF-8 character too). Files are read as
bytes and decoded line by line: a cut last line is ignored by readers and removed by `repair_tail` before the
next append; a complete last row that only lacks its newline (a hand-edited file) is kept. A bad line anywhere
else is a corrupt file, reported with its path and line number. Every reader checks each row against the
schema of its file (`SCHEMAS`: types and ranges of `id`, `sample`, `completion`, `correct`, ...), so a row of the
wrong shape is refused with its file:line rather than crashing a stage or moving a number. Rows are keyed by
(id, sample), problems by id; in every reader the first row of a key wins.

Checks that cannot be left out: every row the writers here write carries `check`, a checksum of all its other
fields (`row_check`), and every reader refuses a row without one or whose fields no longer match it, so a field
edited by hand (a `correct` flipped, a `completion`, `num_tokens` or a problem's `level` changed) stops the stage
at that file:line instead of moving a number; a check deleted along with the edit is refused too.

Writes stay inside the run (`safe_io`): files are created relative to the run directory the stage locked, never
through a link; a file with other hard links is copied to one of its own first; replacements go through a
uniquely named temporary in the same folder (`write_bytes_atomic`); a full disk names the file.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import stat
import zlib
from collections.abc import Iterable
from pathlib import Path

from . import safe_io
from .errors import MissingPathError, UsageError
from .safe_io import refuse_link, write_bytes_atomic

logger = logging.getLogger(__name__)

__all__ = [
    "GEN_GLOB",
    "generation_files",
    "LEGACY_CONFIG",
    "MERGED_DIR",
    "PLOT",
    "PROVENANCE",
    "REPORT_JSON",
    "REPORT_MD",
    "RUN_FILES",
    "SCHEMAS",
    "append_jsonl",
    "canonical",
    "completion_crc",
    "dataset_dirs",
    "kind_of",
    "read_jsonl",
    "read_numbered",
    "read_samples",
    "refuse_link",
    "repair_tail",
    "require_run",
    "row_check",
    "run_dir",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_jsonl_atomic",
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


def _row(line: bytes) -> dict | None:
    """The row a complete line holds, else None (cut short, not UTF-8, not a JSON object)."""
    try:
        row = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return row if isinstance(row, dict) else None


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# The schema of each file: {field: (check, what a valid value is)}; a field is required unless `None` passes.
_ID = (lambda v: isinstance(v, str) and v != "", "a non-empty string")
_SAMPLE = (lambda v: _is_int(v) and v >= 0, "an integer >= 0")
_U32 = (lambda v: _is_int(v) and 0 <= v < 1 << 32, "an integer checksum in [0, 2^32)")
STATUSES = ("ok", "timeout", "unscorable")
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


_FIX = "the file is corrupt or was edited (restore the line, delete it to redo that row, or use a new --output_dir)"


def _check_row(path: Path, line: int, kind: str, row: dict) -> None:
    for name, (ok, what) in SCHEMAS[kind].items():
        value = row.get(name)
        if not ok(value):
            got = "missing" if name not in row else f"got {json.dumps(value, ensure_ascii=False)[:60]}"
            raise UsageError(f"{path}:{line}: {name!r} must be {what}, {got}; {_FIX}")
    if row["check"] != row_check(row):
        raise UsageError(f"{path}:{line}: the row was edited after it was written (its fields do not match its "
                         f"check {row['check']}); {_FIX}")


def read_numbered(path: str | os.PathLike, kind: str | None = None) -> list[tuple[int, dict]]:
    """(line number, row) of each row of a JSONL file ([] if absent), checked against the schema of its kind
    (`kind_of` its name when not given): a row of the wrong shape is a UsageError naming file:line. Of rows with
    one key the first wins. A cut last line is skipped; a bad line elsewhere is a UsageError naming file:line."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return []
    except OSError as err:
        raise UsageError(f"{path}: cannot read it ({err.strerror or err})") from None
    if not stat.S_ISREG(mode):  # a FIFO would block the read; a folder is no run file either
        what = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise UsageError(f"{path}: {what}, where the run keeps a file of rows; move it away (the stage that writes "
                         "it makes it again)")
    kind = kind or kind_of(path)
    lines = path.read_bytes().split(b"\n")  # the last item is what follows the final newline (b"" if none)
    parsed = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        row = _row(line)
        if row is None:
            if i == len(lines) - 1:  # no newline after it: a write cut short by a kill
                break
            raise UsageError(f"{path}:{i + 1}: not a UTF-8 JSON object; the file is corrupt (delete the line or the "
                             "file to regenerate it)")
        parsed.append((i + 1, row))
    if kind is None:
        return parsed
    rows, seen = [], set()
    for line, row in parsed:  # after every line parsed: a corrupt file is named as such before a wrong row
        _check_row(path, line, kind, row)
        key = row_key(kind, row)
        if key not in seen:
            seen.add(key)
            rows.append((line, row))
    return rows


def read_jsonl(path: str | os.PathLike, kind: str | None = None) -> list[dict]:
    """Rows of a JSONL file, as `read_numbered` (schema-checked, first of a key wins) without line numbers."""
    return [row for _, row in read_numbered(path, kind)]


def repair_tail(path: str | os.PathLike) -> None:
    """Make the file end with a newline before an append: end a complete last row, cut a partial one."""
    safe_io.repair_tail(path, lambda tail: _row(tail) is not None)


def _json_bytes(obj, **kwargs) -> bytes:
    """`obj` as UTF-8 JSON; a lone surrogate (which JSON can spell, UTF-8 cannot) is written as its \\u escape."""
    try:
        return json.dumps(obj, ensure_ascii=False, **kwargs).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True, **kwargs).encode("ascii")


def _line(row: dict) -> bytes:
    """A row as one JSONL line, stamped with the check of its fields (`row_check`)."""
    return _json_bytes(dict(row, check=row_check(row))) + b"\n"


def append_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    """Append rows, one `write` each, then fsync: finished work survives a kill of this process or the machine."""
    safe_io.append_lines(path, [_line(r) for r in rows])


def write_jsonl_atomic(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    write_bytes_atomic(path, b"".join(_line(r) for r in rows))


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    write_bytes_atomic(path, _json_bytes(obj, indent=2) + b"\n")


def read_samples(dataset_dir: str | os.PathLike) -> dict[tuple[str, int], dict]:
    """All generated samples of one dataset directory, merged over rank files: {(id, sample): row}."""
    out: dict[tuple[str, int], dict] = {}
    for file in generation_files(dataset_dir):
        for row in read_jsonl(file, "generations"):
            out.setdefault((row["id"], row["sample"]), row)
    return out


def dataset_dirs(output_dir: str | os.PathLike) -> list[Path]:
    """Every folder of a run that holds a dataset's files (problems, generations or scores), in name order: the one
    list that every stage verifies (`verify.check_run`) and reads. Hidden folders count (a backup `.old/` copy is
    checked like any other, not listed unchecked); `merged_model/` is the run's, not a dataset."""
    out = Path(output_dir)
    if not out.is_dir():
        return []
    return sorted(d for d in out.iterdir() if d.name != MERGED_DIR and d.is_dir() and (
        (d / "problems.jsonl").exists() or (d / "scores.jsonl").exists() or generation_files(d)))


def completion_crc(text: str) -> int:
    """Checksum tying a score row to the completion it scored (a regenerated sample gets rescored)."""
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


def canonical(obj) -> bytes:
    """The one spelling of a JSON value that every checksum of a run hashes (keys sorted; a lone surrogate, which
    JSON can carry, kept as is)."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")


def row_check(row: dict) -> int:
    """Checksum of all of a row's fields but `check` itself: an edit by hand (`correct` flipped, a `completion`
    changed) is told by every reader."""
    return zlib.crc32(canonical({k: v for k, v in row.items() if k != "check"}))


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
