"""One writer per run directory: `generate`, `score` and `run` hold an OS lock on the run for their whole duration.

Two writers in one run mix two runs' samples: an `--overwrite` while another `generate` still writes moves the run
aside under that process, which goes on appending into the new run. So a writer takes `fcntl.flock` (exclusive,
non-blocking) on `<parent>/.<name>.ordergrad-lock`, a file beside the run rather than inside it: the run directory
itself is renamed by `--overwrite`, and a lock inside it would move away with it, letting a third process lock the
fresh run while the second writes there. A second writer, or an `--overwrite`, while the lock is held is refused
with one line naming the holder (pid, stage, start time). The kernel releases a flock when its holder dies
(SIGKILL included), so a lock left by a killed process never blocks; the file itself stays (deleting it would race
with a process that has just opened it). The writer also locks the run directory itself (a flock on the folder),
so deleting the lock file lets no second writer in; `generate` takes that lock again on the run directory it
writes into once `--overwrite` has moved the old one aside. Data-parallel generation workers inherit the locked
descriptors (`lock_fds`), so the run stays locked while any of them lives. Re-entrant within a process: `run` holds it across
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

__all__ = ["acquire", "check_writable", "lock_fds", "lock_path", "writer_lock"]

# lock file -> {"fd": its locked descriptor or None, "dirs": {(dev, inode) of a locked run directory: descriptor},
# "depth": nesting}, this process
_SESSIONS: dict[str, dict] = {}


def lock_path(out: Path) -> Path:
    """The lock file of run directory `out` (absolute)."""
    return out.parent / f".{out.name or 'root'}.ordergrad-lock"


def lock_fds(out: Path) -> tuple[int, ...]:
    """The descriptors of the locks this process holds on `out` (for child processes to inherit)."""
    session = _SESSIONS.get(str(lock_path(out)))
    if not session or session["fd"] is None:
        return ()
    return (session["fd"], *session["dirs"].values())


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
    _flock(fd, out, path)
    info = {"pid": os.getpid(), "stage": stage, "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)
    return fd


def _flock(fd: int, out: Path, path: Path) -> None:
    """Lock `fd` (the lock file `path`, or run directory `out` itself) exclusively, or close it and refuse."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        what = f"lock {path}" if path != out else f"its directory is locked; lock file {lock_path(out)}"
        raise UsageError(f"--output_dir {out} is being written by another process ({_holder(lock_path(out))}; "
                         f"{what}); two writers, or --overwrite while one runs, would mix two runs' samples: wait "
                         "for it to end or stop it") from None
    except OSError as err:  # a file system without flock (some network mounts)
        os.close(fd)
        raise UsageError(f"--output_dir {out}: cannot lock {path} ({err.strerror}); use a local directory") from None


def _lock_dir(out: Path, dirs: dict) -> None:
    """Lock the run directory now at `out` (once per directory: after `--overwrite` it is a new one)."""
    try:
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return  # not made yet: `generate` calls `acquire` again once it has made it
    except OSError as err:
        raise UsageError(f"--output_dir {out}: cannot open it ({err.strerror}); pass a directory you can "
                         "write") from None
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) in dirs:
        os.close(fd)
        return
    _flock(fd, out, out)
    dirs[(st.st_dev, st.st_ino)] = fd


@contextlib.contextmanager
def writer_lock(out: Path, stage: str):
    """A writer session on run `out`: `acquire` (called once the inputs are checked, so bad input leaves no lock
    file) locks it until the outermost session ends. Nested sessions (`run` -> generate, score) share one lock."""
    out = Path(out)
    key = str(lock_path(out))
    check_writable(out)
    session = _SESSIONS.setdefault(key, {"fd": None, "dirs": {}, "depth": 0, "stage": stage, "out": out})
    session["depth"] += 1
    try:
        yield
    finally:
        session["depth"] -= 1
        if session["depth"] == 0:
            del _SESSIONS[key]
            for fd in (*session["dirs"].values(), *([session["fd"]] if session["fd"] is not None else [])):
                os.close(fd)  # not LOCK_UN, which would unlock it for a worker sharing the descriptor


def acquire(out: Path) -> None:
    """Lock run `out` for this process's writer session (UsageError if another process holds it): its lock file,
    and the directory now at `out` if there is one. Call it again once the directory is made or replaced; what
    the session holds already is kept. Outside any session the locks are held until the process ends."""
    out = Path(out)
    key = str(lock_path(out))
    session = _SESSIONS.setdefault(key, {"fd": None, "dirs": {}, "depth": 1, "stage": "write", "out": out})
    if session["fd"] is None:
        session["fd"] = _lock(out, lock_path(out), session["stage"])
    _lock_dir(out, session["dirs"])
