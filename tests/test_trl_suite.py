"""TRL's own GRPO tests against OrderGrad: a fast subset of the documented command, run from outside the repo.

The tests come from a TRL source checkout: `../shared/trl` beside the repository (run.py's default `--trl-dir`);
without one this test is skipped. The full run (`python benchmarks/trl_suite/run.py`, about an hour on 2 CPU
cores) is documented in docs/; here the same command gets `-k` with 4 tests, kept few for CI time: a minimal trainer (reward model, default
groups), training with several weighted reward functions in groups of 3, a helper called through the class, and
one by-design rejection, so that both the substitution and the comparison logic run in CI.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
from helpers.docs_commands import documented_commands  # noqa: E402
from helpers import bounded  # noqa: E402

SUBSET = (
    "test_compute_entropy_mask_0 or test_init_minimal or test_train_multiple_reward_funcs_with_weights "
    "or test_train_normalize_then_sum_aggregation"
)


def documented() -> list:
    """The docs' TRL-suite commands (tests/helpers/docs_commands.py): bash lines that run
    benchmarks/trl_suite/run.py."""
    return [c for c in documented_commands() if not c.inline and "benchmarks/trl_suite/run.py" in c.argv]


def documented_command() -> list[str]:
    commands = documented()
    assert commands, "the docs show no benchmarks/trl_suite/run.py command"
    return list(commands[0].argv)


TRL_DIR = REPO.parent / "shared" / "trl"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths")
@pytest.mark.skipif(
    not (TRL_DIR / "tests" / "test_grpo_trainer.py").is_file(),
    reason=f"no TRL checkout at {TRL_DIR} (run.py's default --trl-dir): git clone --branch v1.16.0 "
    f"https://github.com/huggingface/trl {TRL_DIR}",
)
@pytest.mark.slow  # 70 s on a 2-core CPU
def test_trl_suite_subset_against_stock_grpo(tmp_path):
    argv = documented_command()
    assert argv[:2] == ["python", "benchmarks/trl_suite/run.py"], argv
    # run from another directory (the script finds its files relative to itself), only the selection added
    argv = [sys.executable, str(REPO / argv[1]), *argv[2:], "-k", SUBSET, "--output", str(tmp_path / "out")]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = bounded.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]

    classes = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert not classes["regression"]
    passed = set(classes["passed"])
    assert "TestGRPOTrainer::test_init_minimal" in passed
    assert "TestGRPOTrainer::test_train_multiple_reward_funcs_with_weights" in passed
    by_design = [name for name, *_ in classes["by_design"]]
    assert by_design == ["TestGRPOTrainer::test_train_normalize_then_sum_aggregation"]
    assert "TestGetHighEntropyMask::test_compute_entropy_mask_0" in passed
    assert len(passed) == 3 and "| by_design | 1 |" in result.stdout
