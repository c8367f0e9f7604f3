"""One writer per run directory: `generate`, `score` and `run` hold an OS lock on the run for their whole duration.

Two writers in one run mix two runs' samples: an `--overwrite` while another `generate` still writes moves the run
aside under that process, which goes on appending into the new run. So a writer takes `fcntl.flock` (exclusive,
non-blocking) on `<parent>/.<name>.ordergrad-lock`, a file beside the run rather than inside it: the run directory
itself is renamed by `--overwrite`, and a lock inside it would move away with it, letting a third process lock the
fresh run while the second writes there. A second writer, or an `--overwrite`, while the lock is held is refused
with one line naming the holder (pid, stage, start time). The kernel releases a flock when its holder dies
(SIGKILL included), so a lock left by a killed process never blocks; the file itself stays (deleting it would race
with a process that has just opened it). Data-parallel generation workers inherit the locked descriptor
(`lock_fd`), so the run stays locked while any of them lives. Re-entrant within a process: `run` holds it across
its stages. The lock is taken once the stage's inputs are checked (`acquire`), so bad input leaves no lock file;
whether `--output_dir` can be written at all is checked first (`check_writable`, which leaves nothing behind).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from pathlib import Path

from .errors import UsageError

__all__ = ["acquire", "check_writable", "lock_fd", "lock_path", "writer_lock"]

_SESSIONS: dict[str, dict] = {}  # lock file -> {"fd": locked descriptor or None, "depth": nesting}, this process


def lock_path(out: Path) -> Path:
    """The lock file of run directory `out` (absolute)."""
    return out.parent / f".{out.name or 'root'}.ordergrad-lock"


def lock_fd(out: Path) -> int | None:
    """The descriptor of the lock this process holds on `out` (for child processes to inherit), else None."""
    session = _SESSIONS.get(str(lock_path(out)))
    return session["fd"] if session else None


def check_writable(out: Path) -> None:
    """UsageError unless files can be created in `out` (or, before it exists, in its nearest existing ancestor):
    an `--output_dir` under /proc or on a read-only mount fails here, before any work, and nothing is left."""
    where = out
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as err:
        raise UsageError(f"--output_dir {out}: cannot write there ({err.strerror or err}: {where}); pass a "
                         "writable directory") from None


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_bytes() or b"{}")
        return f"pid {info['pid']}, {info['stage']}, since {info['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its details unknown"


def _lock(out: Path, path: Path, stage: str) -> int:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise UsageError(f"--output_dir {out}: cannot write there ({err.strerror or err}: {path}); pass a "
                         "writable directory") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(f"--output_dir {out} is being written by another process ({_holder(path)}; lock "
                         f"{path}); two writers, or --overwrite while one runs, would mix two runs' samples: wait "
                         "for it to end or stop it") from None
    except OSError as err:  # a file system without flock (some network mounts)
        os.close(fd)
        raise UsageError(f"--output_dir {out}: cannot lock {path} ({err.strerror}); use a local directory") from None
    info = {"pid": os.getpid(), "stage": stage, "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)
    return fd


@contextlib.contextmanager
def writer_lock(out: Path, stage: str):
    """A writer session on run `out`: `acquire` (called once the inputs are checked, so bad input leaves no lock
    file) locks it until the outermost session ends. Nested sessions (`run` -> generate, score) share one lock."""
    out = Path(out)
    key = str(lock_path(out))
    check_writable(out)
    session = _SESSIONS.setdefault(key, {"fd": None, "depth": 0, "stage": stage, "out": out})
    session["depth"] += 1
    try:
        yield
    finally:
        session["depth"] -= 1
        if session["depth"] == 0:
            del _SESSIONS[key]
            if session["fd"] is not None:
                os.close(session["fd"])  # not LOCK_UN, which would unlock it for a worker sharing the descriptor


def acquire(out: Path) -> None:
    """Lock run `out` for this process's writer session (UsageError if another process holds it); a no-op when
    the session holds it already. Outside any session the lock is held until the process ends."""
    out = Path(out)
    key = str(lock_path(out))
    session = _SESSIONS.setdefault(key, {"fd": None, "depth": 1, "stage": "write", "out": out})
    if session["fd"] is None:
        session["fd"] = _lock(out, lock_path(out), session["stage"])
