"""Committed numbers against a recomputation: equal structure, floats within a stated relative tolerance.

The last bit of a float sum depends on the machine (numpy's and torch's reductions pick their own order and
vector width), so a committed report is compared as a reader sees it, never bit for bit."""

from __future__ import annotations

import math

REL = 1e-12  # far below any printed digit (reports print 3-4 significant digits)


def same_numbers(got, want, rel: float = REL, where: str = "") -> None:
    """AssertionError naming the first place where `got` and `want` (JSON-like) differ beyond `rel`."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for key in want:
            same_numbers(got[key], want[key], rel, f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: lengths differ"
        for i, (g, w) in enumerate(zip(got, want)):
            same_numbers(g, w, rel, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool) and isinstance(got, (int, float)):
        assert math.isclose(got, want, rel_tol=rel, abs_tol=rel), f"{where}: {got!r} != {want!r}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"
