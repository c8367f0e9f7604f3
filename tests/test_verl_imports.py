"""The verl adapter imports only `ordergrad_trl.core`, torch and verl (and `packaging`, `omegaconf`: verl's), and the
reward only the math-verify pool, so both install with `--no-deps` into a verl environment (docs/verl.md#install);
runs without verl."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ordergrad_trl" / "integrations"


def top_level_imports(path: Path) -> set[str]:
    """Modules `path` imports anywhere, by full dotted name (absolute imports only)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def third_party(names: set[str]) -> set[str]:
    return {n for n in names if n.split(".")[0] not in sys.stdlib_module_names and n != "__future__"}


@pytest.mark.parametrize(
    "module,allowed",
    [
        # packaging, omegaconf: verl itself requires them
        ("verl.py", lambda n: n in ("torch", "verl", "packaging.version", "omegaconf")
         or n == "ordergrad_trl.integrations.engine" or n.startswith(("verl.", "ordergrad_trl.core."))),
        ("engine.py", lambda n: n in ("torch", "packaging.version") or n.startswith("ordergrad_trl.core.")),
        # ray: SkyRL's trainer requires it
        ("skyrl.py", lambda n: n in ("torch", "ray", "skyrl", "ordergrad_trl.integrations.engine",
                                     "ordergrad_trl.integrations.skyrl")  # itself, under `python -m`
         or n.startswith(("skyrl.", "ordergrad_trl.core."))),
        ("verl_reward.py", lambda n: n == "ordergrad_trl.tasks.math_verify_pool"),
        ("__init__.py", lambda n: False),
    ],
)
def test_adapter_imports(module, allowed):
    extra = {n for n in third_party(top_level_imports(PACKAGE / module)) if not allowed(n)}
    assert not extra, f"ordergrad_trl/integrations/{module} imports {sorted(extra)}"
