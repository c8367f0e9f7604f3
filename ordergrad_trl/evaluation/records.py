"""On-disk layout of an evaluation run and crash-safe JSONL records, read and repaired as bytes.

    <output_dir>/
        provenance.json               what defines the numbers: model, datasets, prompt, sampling (checked on resume)
        <dataset>/problems.jsonl      one row per problem: id, answer (gold), prompt (messages), metadata
        <dataset>/generations*.jsonl  one row per sample: id, sample, completion, num_tokens, finish_reason, tag
                                      (one file per data-parallel rank: generations.rank<r>.jsonl)
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
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Iterable
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
    "append_jsonl",
    "completion_crc",
    "dataset_dirs",
    "kind_of",
    "read_jsonl",
    "read_numbered",
    "read_samples",
    "repair_tail",
    "require_run",
    "row_check",
    "run_dir",
    "write_json_atomic",
    "write_jsonl_atomic",
]

GEN_GLOB = "generations*.jsonl"
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
STATUSES = ("ok", "timeout", "unscorable")
SCHEMAS: dict[str, dict] = {
    "problems": {"id": _ID, "answer": (lambda v: isinstance(v, str), "a string (the gold answer)"),
                 "question": (lambda v: v is None or isinstance(v, str), "a string or null")},
    "generations": {"id": _ID, "sample": _SAMPLE, "completion": (lambda v: isinstance(v, str), "a string"),
                    "num_tokens": (lambda v: v is None or (_is_int(v) and v >= 0), "an integer >= 0 or null"),
                    "finish_reason": (lambda v: v is None or isinstance(v, str), "a string or null"),
                    "tag": (lambda v: v is None or (_is_int(v) and 0 <= v < 1 << 32), "an integer in [0, 2^32)")},
    "scores": {"id": _ID, "sample": _SAMPLE,
               "correct": (lambda v: v is None or (_is_num(v) and v in (0, 1)), "1, 0 or null"),
               "status": (lambda v: v in STATUSES, " or ".join(map(repr, STATUSES))),
               "format": (lambda v: v is None or _is_num(v), "a finite number or null"),
               "pred": (lambda v: v is None or isinstance(v, str), "a string or null"),
               "crc": (lambda v: _is_int(v) and 0 <= v < 1 << 32, "an integer checksum in [0, 2^32)"),
               "check": (lambda v: v is None or (_is_int(v) and 0 <= v < 1 << 32), "an integer in [0, 2^32)")},
}


def kind_of(path: Path) -> str | None:
    """Which schema a run file follows, from its name (None: not a run's row file)."""
    if path.name == "problems.jsonl":
        return "problems"
    if path.name == "scores.jsonl":
        return "scores"
    return "generations" if path.match(GEN_GLOB) else None


def row_key(kind: str, row: dict):
    """What a row is keyed by: the problem id, or (id, sample index)."""
    return row["id"] if kind == "problems" else (row["id"], row["sample"])


def _check_row(path: Path, line: int, kind: str, row: dict) -> None:
    for name, (ok, what) in SCHEMAS[kind].items():
        value = row.get(name)
        if not ok(value):
            got = "missing" if name not in row else f"got {json.dumps(value, ensure_ascii=False)[:60]}"
            raise UsageError(f"{path}:{line}: {name!r} must be {what}, {got}; the file is corrupt or was edited "
                             "(restore the line, delete it to redo that row, or use a new --output_dir)")


def read_numbered(path: str | os.PathLike, kind: str | None = None) -> list[tuple[int, dict]]:
    """(line number, row) of each row of a JSONL file ([] if absent), checked against the schema of its kind
    (`kind_of` its name when not given): a row of the wrong shape is a UsageError naming file:line. Of rows with
    one key the first wins. A cut last line is skipped; a bad line elsewhere is a UsageError naming file:line."""
    path = Path(path)
    if not path.is_file():
        return []
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
    path = Path(path)
    if not path.is_file():
        return
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        # only the last line is read: a scan back to the previous newline, whatever the file's size
        start = size
        while start > 0:
            step = min(start, 1 << 16)
            f.seek(start - step)
            block = f.read(step)
            cut = block.rfind(b"\n")
            if cut >= 0:
                start = start - step + cut + 1
                break
            start -= step
        f.seek(start)
        tail = f.read()
        if tail.strip() and _row(tail) is not None:
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
        else:
            f.truncate(start)
        f.flush()
        os.fsync(f.fileno())


def _line(row: dict) -> bytes:
    return (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")


def append_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    """Append rows, one `write` each, then fsync: finished work survives a kill of this process or the machine."""
    lines = [_line(r) for r in rows]
    if not lines:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for line in lines:
            view = memoryview(line)
            while view:  # a regular file takes the whole line at once; a short write is finished, not lost
                view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_jsonl_atomic(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"".join(_line(r) for r in rows))
    os.replace(tmp, path)


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_samples(dataset_dir: str | os.PathLike) -> dict[tuple[str, int], dict]:
    """All generated samples of one dataset directory, merged over rank files: {(id, sample): row}."""
    out: dict[tuple[str, int], dict] = {}
    for file in sorted(Path(dataset_dir).glob(GEN_GLOB)):
        for row in read_jsonl(file, "generations"):
            out.setdefault((row["id"], row["sample"]), row)
    return out


def dataset_dirs(output_dir: str | os.PathLike) -> list[Path]:
    """Dataset subdirectories of a run (those with a problems.jsonl), in name order."""
    return sorted(p.parent for p in Path(output_dir).glob("*/problems.jsonl"))


def completion_crc(text: str) -> int:
    """Checksum tying a score row to the completion it scored (a regenerated sample gets rescored)."""
    return zlib.crc32(text.encode("utf-8"))


def row_check(row: dict) -> int:
    """Checksum of a score row's fields (all but `check`): an edit by hand (`correct` flipped) is told."""
    fields = {k: v for k, v in row.items() if k != "check"}
    return zlib.crc32(json.dumps(fields, sort_keys=True, ensure_ascii=False).encode("utf-8"))


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
