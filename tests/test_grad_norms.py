"""benchmarks/grad_norms.py: the log parsing and summary, and the documented commands run with sizes shrunk."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "grad_norms.py"
from helpers.docs_commands import documented_commands  # noqa: E402
from helpers import bounded  # noqa: E402


def documented() -> list:
    """The docs' grad-norm commands (tests/helpers/docs_commands.py)."""
    return [c for c in documented_commands() if not c.inline and "benchmarks/grad_norms.py" in c.argv]


@pytest.fixture(scope="module")
def grad_norms():
    spec = importlib.util.spec_from_file_location("grad_norms", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parse_and_summarize(grad_norms):
    text = "\n".join([
        "{'loss': '0.01', 'grad_norm': '24.0', 'completions/mean_length': '40.5', 'epoch': '0.1'}",
        "noise {not a dict with the key}",
        "{'eval_loss': 0.2, 'eval_reward': 0.1}",  # eval logs have no grad_norm
        "100%|##| {'loss': 0.0, 'grad_norm': 8.0, 'completions/mean_length': 20.0}",
        "{'loss': 0.0, 'grad_norm': 0.5, 'completions/mean_length': 9.0}",
    ])  # fmt: skip
    rows = grad_norms.parse_logs(text)
    assert [float(r["grad_norm"]) for r in rows] == [24.0, 8.0, 0.5]
    summary = grad_norms.summarize(rows, max_len=16)
    assert summary["mean_length"] == [40.5, 20.0, 9.0]
    assert summary["luspo"] == {"median": 8.0, "max": 24.0, "clipped_at_1.0": 2 / 3, "clipped_at_0.5": 2 / 3}
    assert summary["dr_grpo"] == {"median": 0.5, "max": 1.5, "clipped_at_1.0": 1 / 3, "clipped_at_0.5": 1 / 3}


def test_documented_presets_exist(grad_norms):
    presets = [c.argv[c.argv.index("--preset") + 1] for c in documented()]
    assert presets == ["quickstart", "long"] and set(presets) <= set(grad_norms.PRESETS)


def test_documented_command_runs_with_sizes_shrunk(tiny_model_dir, tmp_path):
    out = tmp_path / "gn.json"
    (command,) = [c for c in documented() if "quickstart" in c.argv]
    assert command.argv[:2] == ("python", "benchmarks/grad_norms.py")
    cmd = [sys.executable, str(SCRIPT), *command.argv[2:], "--json", str(out), "--",
           "--model_name_or_path", str(tiny_model_dir), "--max_steps", "2", "--max_completion_length", "12",
           "--max_eval_samples", "1", "--num_generations_eval", "3"]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    result = bounded.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["steps"] == 2 and record["max_completion_length"] == 12
    norms = record["grad_norm"]  # a random model solves nothing: the norms may be 0, the parsing is what counts
    assert len(norms) == 2 and all(n >= 0 for n in norms)
    assert record["dr_grpo"]["max"] == pytest.approx(max(norms) / 12)
    assert "| 1 |" in result.stdout and "| 2 |" in result.stdout and "luspo: median" in result.stdout
