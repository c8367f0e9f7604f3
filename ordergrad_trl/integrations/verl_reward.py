"""Math correctness reward for verl: `reward.custom_reward_function.path=pkg://ordergrad_trl.integrations.verl_reward`.

The same scoring as the TRL reward `math_reward` (ordergrad_trl.tasks.rewards): math-verify in a bounded pool of
worker processes, gold first, the completion's last `\\boxed{}` preferred, a hard wall-clock bound per item
(`$ORDERGRAD_REWARD_TIMEOUT_S`, default 10 s). verl's reward loop calls `compute_score` once per response, from
threads of each of its `reward.num_workers` processes, so each of those processes keeps one math-verify worker by
default (`$ORDERGRAD_REWARD_WORKERS` overrides it); verl's reward workers are the parallelism.

Imports no TRL and no verl: it runs wherever verl's reward loop runs.
"""

from __future__ import annotations

import os

from ordergrad_trl.tasks.math_verify_pool import score_completions

__all__ = ["compute_score"]


def compute_score(data_source, solution_str: str, ground_truth, extra_info=None, **kwargs) -> float:
    """1.0 if `solution_str`'s final answer equals `ground_truth` per math-verify, else 0.0.

    `ground_truth` is a plain answer (`\\frac{1}{2}`, `18`; numbers are fine) or already `$..$`/`\\boxed{}`
    wrapped, as verl's MATH and GSM8K preprocessing and `recipes/verl/prepare_math.py` write it; `data_source`
    and `extra_info` are not used. A time-out scores 0.0, and so does a gold that does not parse (math_reward gives
    None there): verl needs a number, and since every rollout of a prompt shares its gold, the group is constant
    and gets advantage 0 either way. Both are counted and logged as a warning by the pool
    (`math_verify_pool.score_completions`)."""
    workers = int(os.environ.get("ORDERGRAD_REWARD_WORKERS", "1"))
    gold = "" if ground_truth is None else str(ground_truth)
    (score,) = score_completions([solution_str or ""], [gold], num_workers=workers)
    return 0.0 if score is None else float(score)
