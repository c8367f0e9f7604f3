"""The errors a user can fix: bad flags, bad input files, a run directory that does not fit the command.

A `UsageError` names the flag (`--ks`, `--datasets`, `--config`), the file and line where there is one, and what is
valid: the command line prints it as one line and exits with status 2, like argparse. Anything else is a bug and
keeps its traceback. `UsageError` is a `ValueError`, so library callers can catch either.
"""

from __future__ import annotations

__all__ = ["MissingPathError", "UsageError"]


class UsageError(ValueError):
    """Bad input; the message names the flag or file and what is valid."""


class MissingPathError(UsageError, FileNotFoundError):
    """A path given by a flag does not exist (`--model`, `--data_dir`), or `--output_dir` holds no run."""
