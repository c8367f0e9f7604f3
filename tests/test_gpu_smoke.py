"""benchmarks/gpu_smoke.sh cannot run without a GPU; check its syntax and its PASS/FAIL reporting with stubs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers import bounded

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_smoke.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

# Stand-ins for `python` and `accelerate` that do what the real ones leave behind on success.
_PYTHON = """#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "eval.run" ]; then
    while [ $# -gt 0 ]; do [ "$1" = "--output_dir" ] && out=$2; shift; done
    mkdir -p "$out" && echo '{}' > "$out/report.json"
fi
exit ${STUB_PYTHON_EXIT:-0}
"""
_ACCELERATE = """#!/usr/bin/env bash
while [ $# -gt 0 ]; do [ "$1" = "--output_dir" ] && out=$2; shift; done
mkdir -p "$out" && echo '{}' > "$out/config.json"
echo "{'loss': 0.1, 'grad_norm': 0.3}"
echo "eval reward: n/a before -> 0.5000 after training"
exit ${STUB_ACCELERATE_EXIT:-0}
"""


def test_syntax():
    bounded.run(["bash", "-n", str(SCRIPT)], check=True, timeout=60)


def _run(tmp_path, **env):
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    for name, text in (("python", _PYTHON), ("accelerate", _ACCELERATE)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{stubs}{os.pathsep}{os.environ['PATH']}", **env)
    out = tmp_path / "out"
    return bounded.run(["bash", str(SCRIPT), str(out)], env=env, capture_output=True, text=True, timeout=60)


def test_one_pass_line_per_part(tmp_path):
    result = _run(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split()[:2] for line in result.stdout.splitlines()] == [
        ["PASS", "env"], ["PASS", "train"], ["PASS", "eval"]
    ]  # fmt: skip


def test_a_failing_part_is_reported_and_fails_the_script(tmp_path):
    result = _run(tmp_path, STUB_ACCELERATE_EXIT="1")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("PASS env") and lines[1].startswith("FAIL train (exit 1")
    assert "train.log" in lines[1] and lines[2].startswith("PASS eval")  # eval falls back to the base model
