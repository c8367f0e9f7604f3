"""Adapters that serve OrderGrad's math (`ordergrad_trl.core`) to RL frameworks other than TRL.

- `verl`: the `ordergrad` advantage estimator for verl, registered by the `verl.plugins` entry point.
- `verl_reward`: `compute_score` for verl's `reward.custom_reward_function` (math-verify, bounded worker pool).

Nothing is imported here: each adapter needs its own framework installed (see docs/verl.md)."""
