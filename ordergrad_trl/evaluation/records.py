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

Writes stay inside the run: before a file is appended to or replaced (`_own`), one that is a symbolic link, or in
a folder that is one, is refused, and one with other hard links (a run copied with `cp -al` or `rsync
--link-dest`) is first copied to a file of its own, said in one log line, so the other copy never changes.
Replacements go through a uniquely named temporary in the same folder (`write_bytes_atomic`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import re
import secrets
import stat
import zlib
from collections.abc import Iterable
from pathlib import Path

from .errors import MissingPathError, UsageError

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
    path = Path(path)
    if not path.is_file():
        return
    with _in_folder(path) as (folder, name):
        _own(path, folder, name)
        try:
            fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW, dir_fd=folder)
        except FileNotFoundError:
            return
        with os.fdopen(fd, "rb+") as f:
            _repair(f)


def _repair(f) -> None:
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


def _json_bytes(obj, **kwargs) -> bytes:
    """`obj` as UTF-8 JSON; a lone surrogate (which JSON can spell, UTF-8 cannot) is written as its \\u escape."""
    try:
        return json.dumps(obj, ensure_ascii=False, **kwargs).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True, **kwargs).encode("ascii")


def _line(row: dict) -> bytes:
    """A row as one JSONL line, stamped with the check of its fields (`row_check`)."""
    return _json_bytes(dict(row, check=row_check(row))) + b"\n"


def refuse_link(p: Path, error: type[UsageError] = UsageError) -> None:
    """`error` when `p` is a symbolic link: its rows would be another run's, and a write through it would land there."""
    if p.is_symlink():
        raise error(f"{p}: a symbolic link (to {os.path.realpath(p)}); a run's files must be its own, or writing "
                    "through it would change files outside this run: replace it with a copy (cp -rL) or use a new "
                    "--output_dir")


def _no_links(path: Path) -> None:
    """UsageError when `path`, or the folder holding it, is a symbolic link (`refuse_link`)."""
    for p in (path.parent, path):
        refuse_link(p)


@contextlib.contextmanager
def _in_folder(path: Path):
    """(folder descriptor or None, the name to open relative to it): inside a run this process has locked, the
    folder is reached from the locked run directory without following any link (`lock.open_folder`), so a write
    lands in the run it locked or stops; elsewhere (None) the path itself, checked for links."""
    from .lock import open_folder

    folder = open_folder(path)
    if folder is None:
        _no_links(path)
    try:
        yield folder, (path.name if folder is not None else str(path))
    finally:
        if folder is not None:
            os.close(folder)


def _no_space(path: Path, err: OSError) -> None:
    """A full disk (or quota) names the file; what was written before stays, and a rerun resumes."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        raise UsageError(f"{path}: {err.strerror} while writing it; the rows written before are kept: free space "
                         "(or pass another --output_dir) and rerun the same command to resume") from None


def _own(path: Path, folder: int | None = None, name: str | None = None) -> None:
    """Make `path` safe to change in place: no symbolic link on the way (`_no_links`), and a file with other hard
    links gets a copy of its own first, so that no write lands in a file another run shares."""
    name = str(path) if name is None else name
    try:
        st = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        refuse_link(path)
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path}: not a regular file; move it away or use a new --output_dir")
    if st.st_nlink > 1:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder)
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        _replace(path, folder, name, data)  # a new inode: the other links keep the old data
        logger.warning("%s had %d other hard link(s) (a run copied with cp -al or rsync --link-dest?): copied it "
                       "to a file of its own before writing, so the other copy stays as it was", path, st.st_nlink - 1)


def append_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    """Append rows, one `write` each, then fsync: finished work survives a kill of this process or the machine."""
    lines = [_line(r) for r in rows]
    if not lines:
        return
    path = Path(path)
    with _in_folder(path) as (folder, name):
        _own(path, folder, name)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644,
                         dir_fd=folder)
        except OSError as err:
            if err.errno == errno.ELOOP:
                refuse_link(path)
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UsageError(f"{path}: not a regular file; move it away or use a new --output_dir")
            for line in lines:
                view = memoryview(line)
                while view:  # a regular file takes the whole line at once; a short write is finished, not lost
                    view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as err:
            _no_space(path, err)
            raise
        finally:
            os.close(fd)


def _replace(path: Path, folder: int | None, name: str, data: bytes) -> None:
    tmp_dir = None if folder is not None else str(path.parent)
    base = path.name
    for _ in range(100):
        tmp = f".{base}.{secrets.token_hex(4)}.tmp"
        tmp_name = tmp if folder is not None else os.path.join(tmp_dir, tmp)
        try:
            fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder)
            break
        except FileExistsError:
            continue
    else:
        raise UsageError(f"{path}: could not create a temporary file beside it")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), 0o644)
        os.replace(tmp_name, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name, dir_fd=folder)
        if isinstance(err, OSError):
            _no_space(path, err)
        raise


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Replace `path` whole: a reader, or a second writer at once, sees the old file or the new one, never half.
    The temporary has a unique name (two writers never share one) and never follows a link; inside a locked run
    both are made relative to the locked run directory (`_in_folder`)."""
    path = Path(path)
    with _in_folder(path) as (folder, name):
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            refuse_link(path)  # a hard-linked `path` needs nothing: the rename gives it a new inode
        _replace(path, folder, name, data)


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
