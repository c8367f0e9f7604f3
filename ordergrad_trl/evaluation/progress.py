"""Progress bars of the generate and score stages: shown on a terminal only, never in logs or tests."""

from __future__ import annotations

import contextlib
import sys

__all__ = ["progress", "quiet_datasets"]


def progress(total: int, desc: str, unit: str, disable: bool = False, **kw):
    """A tqdm bar; `disable=False` still hides it when stderr is not a terminal (logs and tests stay clean)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=True if disable else None, dynamic_ncols=True,
                smoothing=0.1, **kw)


@contextlib.contextmanager
def quiet_datasets(disable: bool = False):
    """The datasets library's own bars (reading a data file) by the same rule as ours, restored afterwards."""
    import datasets

    off = (disable or not sys.stderr.isatty()) and not datasets.are_progress_bars_disabled()
    if off:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if off:
            datasets.enable_progress_bars()
