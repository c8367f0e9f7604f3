"""Crash-safe JSONL rows of an evaluation run: read as bytes and checked, appended and replaced through `safe_io`.

Each row is one `write` to a file opened for appending, and every batch is fsynced, so a kill loses at most the
rows in flight and can cut only the last line, at any byte (inside a UTF-8 character too). Files are read as
bytes and decoded line by line: a cut last line is ignored by readers and removed by `repair_tail` before the
next append; a complete last row that only lacks its newline (a hand-edited file) is kept. A bad line anywhere
else is a corrupt file, reported with its path and line number. Every reader checks each row against the
schema of its file (`layout.SCHEMAS`), so a row of the wrong shape is refused with its file:line rather than
crashing a stage or moving a number. In every reader the first row of a key (`layout.row_key`) wins.

Checks that cannot be left out: every row the writers here write carries `check`, a checksum of all its other
fields (`row_check`), and every reader refuses a row without one or whose fields no longer match it, so a field
edited by hand (a `correct` flipped, a `completion`, `num_tokens` or a problem's `level` changed) stops the stage
at that file:line instead of moving a number; a check deleted along with the edit is refused too.

Where the files are and what they hold is `layout`; how their bytes land (inside the locked run, never through a
link, atomic replaces, a full disk named) is `safe_io`.
"""

from __future__ import annotations

import json
import os
import stat
import zlib
from collections.abc import Iterable
from pathlib import Path

from . import safe_io
from .errors import UsageError
from .layout import SCHEMAS, generation_files, kind_of, row_key

__all__ = [
    "append_jsonl",
    "canonical",
    "completion_crc",
    "read_jsonl",
    "read_numbered",
    "read_samples",
    "repair_tail",
    "row_check",
    "write_json_atomic",
    "write_jsonl_atomic",
]


def _row(line: bytes) -> dict | None:
    """The row a complete line holds, else None (cut short, not UTF-8, not a JSON object)."""
    try:
        row = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return row if isinstance(row, dict) else None


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
    safe_io.write_bytes_atomic(path, b"".join(_line(r) for r in rows))


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    safe_io.write_bytes_atomic(path, _json_bytes(obj, indent=2) + b"\n")


def read_samples(dataset_dir: str | os.PathLike) -> dict[tuple[str, int], dict]:
    """All generated samples of one dataset directory, merged over rank files: {(id, sample): row}."""
    out: dict[tuple[str, int], dict] = {}
    for file in generation_files(dataset_dir):
        for row in read_jsonl(file, "generations"):
            out.setdefault((row["id"], row["sample"]), row)
    return out


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
