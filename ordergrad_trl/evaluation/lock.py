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
import errno
import fcntl
import json
import os
import stat
import tempfile
import time
from pathlib import Path

from .errors import UsageError

__all__ = ["acquire", "adopt", "check_writable", "lock_fds", "lock_path", "open_folder", "writer_lock"]

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
        # never through a link (it would truncate the file it points to), never blocking on a FIFO
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP or path.is_symlink():
            raise UsageError(f"--output_dir {out}: its lock file {path} is a symbolic link (to "
                             f"{os.path.realpath(path)}); the lock must be the run's own file, or writing it would "
                             "change the file it points to: remove the link") from None
        raise UsageError(f"--output_dir {out}: cannot write there ({err.strerror or err}: {path}); pass a "
                         "writable directory") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink - 1} other " \
            "hard link(s), which writing the lock would change"
        raise UsageError(f"--output_dir {out}: its lock file {path} is {what}; remove it (a lock file holds "
                         "nothing but its holder's pid)")
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
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return  # not made yet: `generate` calls `acquire` again once it has made it
    except OSError as err:
        if out.is_symlink():
            raise UsageError(f"--output_dir {out}: a symbolic link (to {os.path.realpath(out)}) put in place of "
                             "the run directory; a run's files must be its own: pass the real directory") from None
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


def adopt(out: Path, fds) -> None:
    """In a worker process: take the locked descriptors the parent passed (`lock_fds`) as this process's session
    on `out`, so its writes resolve inside the run directory the parent locked (`open_folder`)."""
    out = Path(out)
    fds = [int(fd) for fd in fds]
    if not fds:
        return
    dirs = {}
    for fd in fds[1:]:
        st = os.fstat(fd)
        dirs[(st.st_dev, st.st_ino)] = fd
    _SESSIONS[str(lock_path(out))] = {"fd": fds[0], "dirs": dirs, "depth": 1, "stage": "generate", "out": out}


def open_folder(path: Path) -> int | None:
    """A descriptor of the folder that holds `path`, reached from the run directory this process has locked, one
    component at a time, never through a symbolic link: a file created relative to it (`dir_fd=`) lands inside the
    locked run whatever is renamed or linked meanwhile. None when `path` is in no run this process locks (the path
    is then used as it is). UsageError, before any write, when `--output_dir` no longer is the directory locked
    (moved, removed, or replaced by a link while the stage ran) or a folder inside the run is a link."""
    path = Path(path)
    for session in list(_SESSIONS.values()):
        out = session["out"]
        if session["fd"] is None or not path.is_absolute():
            continue
        try:
            rel = path.relative_to(out)
        except ValueError:
            continue
        if not rel.parts:
            continue
        if not session["dirs"]:
            _lock_dir(out, session["dirs"])  # made since the lock was taken
        try:
            st = os.lstat(out)
            key = (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None
        except OSError:
            key = None
        if key not in session["dirs"]:
            now = "a symbolic link" if out.is_symlink() else "another directory" if out.is_dir() else "gone"
            raise UsageError(f"--output_dir {out} is no longer the directory this {session['stage']} locked (it is "
                             f"now {now}: moved, removed or replaced while the stage ran); stopped before writing "
                             f"{path.name}, so nothing lands in another run: put the run back, or start again")
        fd = os.dup(session["dirs"][key])
        for part in rel.parts[:-1]:
            try:
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as err:
                os.close(fd)
                link = os.path.islink(out / part)
                raise UsageError(f"{path}: the folder {part!r} inside the run "
                                 + ("is a symbolic link; a run's files must be its own, or a write would land in "
                                    "another run: replace it with a copy (cp -rL) or use a new --output_dir"
                                    if link or err.errno == errno.ELOOP
                                    else f"cannot be opened ({err.strerror})")) from None
            os.close(fd)
            fd = sub
        return fd
    return None
