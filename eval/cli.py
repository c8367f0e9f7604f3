"""What the four entry points share: one-line usage errors, progress bars, absolute run paths.

A `UsageError` is bad input the user can fix (a flag's value, a missing run directory): the `python -m eval.*`
commands print it as one line naming the flag and exit with status 2, like argparse. Anything else is a bug and
keeps its traceback. `UsageError` is a `ValueError`, so library callers can catch either.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["MissingPathError", "UsageError", "cli", "progress", "require_run", "run_dir"]


class UsageError(ValueError):
    """Bad input; the message names the flag (`--ks`, `--datasets`, ...) and what is valid."""


class MissingPathError(UsageError, FileNotFoundError):
    """A path given by a flag does not exist (`--model`, `--data_dir`), or `--output_dir` holds no run."""


def cli(main: Callable[[list[str] | None], object], prog: str, argv: list[str] | None = None):
    """Run `main(argv)` with logging set up; a UsageError becomes `prog: error: <message>` and exit status 2."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        return main(argv)
    except UsageError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def run_dir(output_dir: str) -> Path:
    """`--output_dir` as an absolute path, so worker processes and later stages agree on it whatever their cwd."""
    return Path(output_dir).expanduser().resolve()


def require_run(output_dir: str, stage: str) -> tuple[Path, list[Path]]:
    """(absolute run directory, its dataset directories); MissingPathError when there are none."""
    from eval.records import dataset_dirs

    out = run_dir(output_dir)
    dirs = dataset_dirs(out)
    if not dirs:
        what = "no <dataset>/problems.jsonl in" if out.is_dir() else "directory not found:"
        raise MissingPathError(f"--output_dir {output_dir}: {what} {out}; run eval.generate first (or pass the "
                              f"--output_dir it wrote) before eval.{stage}")
    return out, dirs


def progress(total: int, desc: str, unit: str, disable: bool = False, **kw):
    """A tqdm bar; `disable=False` still hides it when stderr is not a terminal (logs and tests stay clean)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=True if disable else None, dynamic_ncols=True,
                smoothing=0.1, **kw)
