"""A training run's output_dir: one writer at a time, and no file written through a link.

transformers saves a model, its config, the trainer state and the tokenizer with plain `open(path, "w")`, which
follows a symbolic link and truncates a hard-linked file: a link planted as `config.json` would have training
overwrite the file it points to, outside the run. Those writes are not ours to route, so every save is preceded by
`refuse_links` over the folder it writes into (the trainer's `save_model` and `_save_checkpoint`, and the recipe at
start-up), and the project's own files go through the eval's safe writer (`evaluation.safe_io`).

`lock_output_dir` takes the eval's run lock (`evaluation.lock`: a flock on `.<name>.ordergrad-lock` beside the
folder, released by the kernel when the process ends) for the main process, so a second run into the same folder,
or an `--overwrite_output_dir` that would move a running run aside, is refused with one line naming the holder.

`save_errors` turns what a full disk raises inside a save into an `OSError` naming the folder: safetensors raises its
own `SafetensorError` ("I/O error: No space left on device (os error 28)") and torch.save a `RuntimeError` from its
stream writer, neither an OSError nor naming a file, so a recipe's one-line I/O error (exit 1) would not catch them.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from contextlib import contextmanager
from pathlib import Path

from ..evaluation.errors import UsageError
from ..evaluation.lock import acquire

__all__ = ["OutputDirError", "lock_output_dir", "refuse_links", "save_errors"]


class OutputDirError(ValueError):
    """An output_dir that training must not write into: one line naming the folder or file."""


def lock_output_dir(output_dir: str | os.PathLike) -> None:
    """Hold the run lock on `output_dir` until this process ends; OutputDirError if another process holds it. Call
    it again once an `--overwrite_output_dir` has moved the old folder aside: the lock then covers the new one."""
    out = Path(output_dir).expanduser().absolute()
    try:
        out.mkdir(parents=True, exist_ok=True)  # made now, so the folder itself is locked too (`lock.acquire`)
        acquire(out)
    except OSError as err:
        raise OutputDirError(f"output_dir {out}: cannot create it ({err.strerror or err})") from None
    except UsageError as err:  # the eval's wording names --output_dir, the same field in training
        raise OutputDirError(f"output_dir: {err}") from None


def refuse_links(folder: str | os.PathLike) -> None:
    """OutputDirError naming the first symbolic link or hard-linked file in `folder` (itself included), which a save
    into it would write through; links are not followed while looking."""
    root = Path(folder).expanduser()
    if root.is_symlink():
        raise OutputDirError(f"output_dir {root}: a symbolic link (to {os.path.realpath(root)}); training writes "
                             "into it in place: pass the real directory")
    if not root.is_dir():
        return
    for here, dirs, files in os.walk(root):  # followlinks=False: a linked folder shows up in `dirs`, not entered
        for name in dirs + files:
            path = Path(here) / name
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                what = f"a symbolic link (to {os.path.realpath(path)})"
            elif stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                what = f"a file with {st.st_nlink - 1} other hard link(s)"
            else:
                continue
            raise OutputDirError(f"output_dir {root}: {path} is {what}; a save writes files in place and would change "
                                 "what it points to, outside this run: replace it with a copy (cp -L) or remove it, "
                                 "or use a new output_dir")


_TORCH_WRITER = re.compile(r"PytorchStreamWriter|inline_container|file write failed")  # torch.save's own words
_OS_ERROR = re.compile(r"os error (\d+)")  # safetensors (Rust) quotes the errno so


@contextmanager
def save_errors(folder: str | os.PathLike):
    """Inside a save into `folder`: a write failure raised as safetensors' or torch's own error becomes an `OSError`
    with its errno (from the message; else ENOSPC when the disk is full, else EIO) and `folder` as its filename.
    Any other error passes as it is."""
    try:
        yield
    except OSError:
        raise
    except Exception as err:
        text = " ".join(str(err).split())
        torch_writer = isinstance(err, RuntimeError) and _TORCH_WRITER.search(text)
        if type(err).__name__ != "SafetensorError" and not torch_writer:
            raise
        found = _OS_ERROR.search(text)
        code = int(found.group(1)) if found else errno.ENOSPC if _disk_full(folder) else errno.EIO
        raise OSError(code, f"{os.strerror(code)} while saving ({text[:160]})", str(folder)) from None


def _disk_full(folder) -> bool:
    import shutil

    path = Path(folder)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free < 1 << 20  # under 1 MiB left: torch's writer failed for want of room
    except OSError:
        return False
