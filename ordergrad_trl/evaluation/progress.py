"""Progress bars of the generate and score stages: shown on a terminal only, never in logs or tests."""

from __future__ import annotations

__all__ = ["progress"]


def progress(total: int, desc: str, unit: str, disable: bool = False, **kw):
    """A tqdm bar; `disable=False` still hides it when stderr is not a terminal (logs and tests stay clean)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=True if disable else None, dynamic_ncols=True,
                smoothing=0.1, **kw)
