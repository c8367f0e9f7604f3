"""Safe writes of a run's files: inside the locked run, never through a link, atomic replaces, a full disk named.

Inside a run this process has locked (`lock.open_folder`), every file is created relative to the run directory's
descriptor, folder by folder without following a link, so a write lands in the run the stage locked, or the stage
stops when `--output_dir` no longer is that directory. Elsewhere the path is used as given, a link on it refused.
Before a file is appended to or replaced (`_own`), one that is a symbolic link is refused, and one with other hard
links (a run copied with `cp -al` or `rsync --link-dest`) is first copied to a file of its own, said in one log
line, so the other copy never changes. Replacements go through a uniquely named temporary in the same folder
(`write_bytes_atomic`). A full disk (or quota) is a UsageError naming the file; what was written before stays.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from .errors import UsageError

logger = logging.getLogger("ordergrad_trl.evaluation.records")  # the run files' logger, as before the split

__all__ = ["append_lines", "refuse_link", "repair_tail", "write_bytes_atomic"]


def refuse_link(p: Path, error: type[UsageError] = UsageError) -> None:
    """`error` when `p` is a symbolic link: its rows would be another run's, and a write through it would land there."""
    if p.is_symlink():
        raise error(f"{p}: a symbolic link (to {os.path.realpath(p)}); a run's files must be its own, or writing "
                    "through it would change files outside this run: replace it with a copy (cp -rL) or use a new "
                    "--output_dir")


def _link(path: Path) -> None:
    """The refusal of `refuse_link`, also when the link seen through a descriptor is gone from `path` by now."""
    refuse_link(path)
    raise UsageError(f"{path}: a symbolic link; a run's files must be its own: replace it with a copy (cp -rL) or "
                     "use a new --output_dir")


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
        _link(path)
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path}: not a regular file; move it away or use a new --output_dir")
    if st.st_nlink > 1:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder)
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        _replace(path, folder, name, data)  # a new inode: the other links keep the old data
        logger.warning("%s had %d other hard link(s) (a run copied with cp -al or rsync --link-dest?): copied it "
                       "to a file of its own before writing, so the other copy stays as it was", path, st.st_nlink - 1)


def append_lines(path: str | os.PathLike, lines: list[bytes]) -> None:
    """Append lines, one `write` each, then fsync: finished work survives a kill of this process or the machine."""
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
                _link(path)
            _no_space(path, err)
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
        except OSError as err:
            _no_space(path, err)
            raise
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
            _link(path)  # a hard-linked `path` needs nothing: the rename gives it a new inode
        _replace(path, folder, name, data)


def repair_tail(path: str | os.PathLike, complete: Callable[[bytes], bool]) -> None:
    """Make the file end with a newline before an append: end a last line that is `complete`, cut a partial one."""
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
            _repair(f, complete)


def _repair(f, complete) -> None:
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
    if tail.strip() and complete(tail):
        f.seek(0, os.SEEK_END)
        f.write(b"\n")
    else:
        f.truncate(start)
    f.flush()
    os.fsync(f.fileno())
