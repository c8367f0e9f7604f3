"""The shape of the evaluation code: a library module tree without import cycles or path preludes, one console
script that works from any directory and gives the same report as the checkout's `python -m eval.run`, and no
top-level `eval` package installed.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import sys
import tomllib
from pathlib import Path

import pytest
from helpers import bounded

REPO = Path(__file__).resolve().parents[1]
LIBRARY = REPO / "ordergrad_trl" / "evaluation"
ENTRY = REPO / "eval"


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", ORDERGRAD_REWARD_WORKERS="1")
    env.pop("PYTHONPATH", None)  # what is installed, not this checkout's path
    return env


def console_script() -> str:
    found = shutil.which("ordergrad-eval", path=str(Path(sys.executable).parent)) or shutil.which("ordergrad-eval")
    if found is None:
        pytest.skip("the ordergrad-eval console script is not installed in this environment (pip install -e .)")
    return found


def test_no_path_preludes_and_thin_entry_points():
    for path in [*LIBRARY.glob("*.py"), *ENTRY.glob("*.py")]:
        text = path.read_text()
        assert "sys.path" not in text and "__package__" not in text, path
    for path in ENTRY.glob("*.py"):  # the checkout's entry points only call the library
        tree = ast.parse(path.read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} - {"__future__"}
        assert all(m.startswith("ordergrad_trl.evaluation") for m in imported), (path, imported)
        assert len(path.read_text().splitlines()) <= 12, path


def test_no_import_cycle_in_the_evaluation_code():
    """Module-level and function-level imports between evaluation modules form a DAG (planning does not import
    sampling's callers, sampling does not import planning)."""
    edges = {}
    for path in LIBRARY.glob("*.py"):
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                targets |= {node.module} if node.module else {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ordergrad_trl.evaluation."):
                targets.add(node.module.rsplit(".", 1)[1])
        edges[path.stem] = {t.split(".")[0] for t in targets} - {path.stem}
    state: dict[str, int] = {}

    def visit(node, trail):
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join(trail + [nxt])
            if nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert "plan" not in edges["sampling"] and "generate" not in edges["parallel"]


def test_pyproject_installs_the_library_and_the_console_script_only():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["scripts"] == {"ordergrad-eval": "ordergrad_trl.evaluation.cli:main"}
    assert meta["tool"]["setuptools"]["packages"]["find"]["include"] == ["ordergrad_trl*"]


def test_import_eval_fails_outside_the_checkout(tmp_path):
    probe = "import importlib.util; s = importlib.util.find_spec('eval'); print(s.origin if s else '')"
    found = bounded.run([sys.executable, "-c", probe], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                        check=True, timeout=120).stdout.strip()
    if found and not Path(found).resolve().is_relative_to(REPO):
        pytest.skip(f"another checkout's older install provides `eval` ({found}); reinstall with pip install -e .")
    proc = bounded.run([sys.executable, "-c", "import eval"], cwd=tmp_path, env=_env(), capture_output=True,
                       text=True, timeout=120)
    assert proc.returncode == 1 and "No module named 'eval'" in proc.stderr


def test_console_script_anywhere_equals_python_m_eval_run_in_the_checkout(tmp_path):
    script = console_script()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    args = ["--backend", "reference", "--datasets", "arithmetic", "digits", "--limit", "3", "--num_samples", "4",
            "--ks", "1", "2", "4", "--objectives", "TopM:2@4", "--bootstrap_samples", "50", "--plot", "false"]
    a = bounded.run([script, "run", *args, "--output_dir", "runs/a"], cwd=elsewhere, env=_env(),
                    capture_output=True, text=True, timeout=300)
    assert a.returncode == 0, a.stderr[-3000:]
    b = bounded.run([sys.executable, "-m", "eval.run", *args, "--output_dir", str(tmp_path / "b")], cwd=REPO,
                    env=_env(), capture_output=True, text=True, timeout=300)
    assert b.returncode == 0, b.stderr[-3000:]
    ra = json.loads((elsewhere / "runs" / "a" / "report.json").read_text())
    rb = json.loads((tmp_path / "b" / "report.json").read_text())
    assert ra == rb and set(ra["datasets"]) == {"arithmetic", "digits"}
    assert ra["datasets"]["arithmetic"]["metrics"]["pass@1"]["value"] == 1.0
    assert "## arithmetic" in a.stdout  # report.md is printed


def test_console_script_help_lists_the_stages():
    script = console_script()
    proc = bounded.run([script, "--help"], env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and all(s in proc.stdout for s in ("run", "generate", "score", "report"))
    proc = bounded.run([script, "score", "--help"], env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--reward_timeout_s" in proc.stdout
