"""A `sitecustomize.py` that applies a test shim at interpreter start-up, for scripts the tests run unmodified.

Processes with the written folder on PYTHONPATH import it before anything else (the launchers pass their
environment to their workers); running a script through runpy instead breaks vLLM's compile cache, which checks
the source of `__main__`.
"""

from __future__ import annotations

from pathlib import Path


def write_startup_hook(directory: Path, module: str, function: str) -> Path:
    """Write `directory/sitecustomize.py` calling `tests/helpers/<module>.py`'s `function()`; returns `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"  # tests/, above helpers/
        f"from helpers import {module}\n{module}.{function}()\n"
    )
    return directory
