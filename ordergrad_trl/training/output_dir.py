"""A training run's output_dir: one writer at a time, and no file written through a link.

transformers saves a model, its config, the trainer state and the tokenizer with plain `open(path, "w")`, which
follows a symbolic link and truncates a hard-linked file: a link planted as `config.json` would have training
overwrite the file it points to, outside the run. Those writes are not ours to route, so every save is preceded by
`refuse_links` over the folder it writes into (the trainer's `save_model` and `_save_checkpoint`, and the recipe at
start-up), and the project's own files go through the eval's safe writer (`evaluation.safe_io`).

`lock_output_dir` takes the eval's run lock (`evaluation.lock`: a flock on `.<name>.ordergrad-lock` beside the
folder, released by the kernel when the process ends) for the main process, so a second run into the same folder,
or an `--overwrite_output_dir` that would move a running run aside, is refused with one line naming the holder.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..evaluation.errors import UsageError
from ..evaluation.lock import acquire

__all__ = ["OutputDirError", "lock_output_dir", "refuse_links"]


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
