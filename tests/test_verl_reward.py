"""`compute_score` for verl, loaded by verl's own reward-function loader, against the TRL reward `math_reward`
(verl environment; docs/verl.md#tests)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers.optional import installed  # noqa: E402  (tests/, on sys.path by conftest)

if not installed("verl"):
    pytest.skip("verl is not installed: these tests run in the verl environment (docs/verl.md)",
                allow_module_level=True)

from omegaconf import OmegaConf  # noqa: E402

from ordergrad_trl.tasks.rewards import math_reward  # noqa: E402

MATH500 = Path(os.environ.get("ORDERGRAD_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
MATH500 = MATH500 / "math500_test.jsonl"


def verl_loaded_compute_score():
    """Our reward as verl's trainer gets it: `reward.custom_reward_function` through `get_custom_reward_fn`."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    path = "pkg://ordergrad_trl.integrations.verl_reward"
    config = OmegaConf.create({"reward": {"custom_reward_function": {"path": path, "name": "compute_score"}}})
    fn = get_custom_reward_fn(config)
    assert fn is not None
    return fn


def verl_scores(fn, solutions, golds, source="HuggingFaceH4/MATH-500"):
    # verl's reward loop passes these four as keywords (naive reward manager)
    return [fn(data_source=source, solution_str=s, ground_truth=g, extra_info={"index": i})
            for i, (s, g) in enumerate(zip(solutions, golds))]  # fmt: skip


@pytest.mark.skipif(not MATH500.is_file(), reason=f"MATH-500 reference solutions not found at {MATH500}")
def test_compute_score_equals_math_reward_on_math500_reference_solutions():
    rows = [json.loads(line) for line in MATH500.read_text().splitlines() if line.strip()]
    assert len(rows) == 500
    solutions, golds = [r["solution"] for r in rows], [r["answer"] for r in rows]
    fn = verl_loaded_compute_score()
    ours = verl_scores(fn, solutions, golds)
    theirs = [0.0 if s is None else s for s in math_reward(solutions, golds)]  # verl needs a number: None -> 0.0
    assert ours == theirs
    assert all(s in (0.0, 1.0) for s in ours)
    assert sum(ours) >= 490, f"only {sum(ours)} of 500 reference solutions verify"  # a sanity floor, not the oracle
    # and wrong answers: each problem scored against the next problem's solution
    shifted = solutions[1:] + solutions[:1]
    ours_wrong = verl_scores(fn, shifted, golds)
    assert ours_wrong == [0.0 if s is None else s for s in math_reward(shifted, golds)]
    assert sum(ours_wrong) < 50


def test_compute_score_edge_cases():
    fn = verl_loaded_compute_score()
    assert verl_scores(fn, ["so \\boxed{18}", "\\boxed{18}", "", "\\boxed{1/2}"], [18, "17", "3", None]) == [
        1.0, 0.0, 0.0, 0.0,
    ]  # fmt: skip
