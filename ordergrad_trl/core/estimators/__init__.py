"""Group advantage estimators behind one signature and one registry, for comparing OrderGrad with related work.

Every estimator maps groups of rewards (one group per prompt, its rollouts on the last axis) to advantages:

    fn(rewards: Tensor (G, N), **params) -> Tensor (G, N)        # leading dims (..., N) work the same way

and is registered where it is defined, `@register_estimator("name", ...)` (`registry`): `ESTIMATORS` maps each
name to its `Estimator` (function, parameters, the facts of the docs table), from which the config help, the
table of docs/estimators.md (`estimator_table()`), the plan's checks, the verl adapter and the tests are derived.
Adding an estimator is one decorated definition (a module imported below) plus its test (docs/development.md).

Conventions shared by all of them:

- **Advantages as they reach the loss.** TRL's losses average over rollouts, so per group the policy-gradient
  estimate is `(1/N) sum_i A_i grad log p(x_i)`. "Unbiased for J" means that the expectation of exactly this, over
  N i.i.d. rollouts, is `grad J` at every finite N. That is why `ordergrad` carries the factor K, `pkpo` the factor
  N of the paper's summed-loss transform and `maxk_tang` the factor k. Biased estimators keep their paper's scale.
- **NaN marks an unscorable rollout:** its advantage is 0 and it is left out of its group's statistics, so the rest
  of the group is treated as a group of its own size n (per-estimator minimum n; smaller groups get all 0).
  `+-inf` raises `ValueError`; so do non-binary rewards for the estimators marked 0/1, naming the estimator.
- Computed in float64 (on the CPU for devices without float64, such as Apple MPS), returned on the rewards' device
  in their floating dtype (float64 for integer rewards, float32 on devices without float64).

Use `get_estimator(name)` for the function, `bind_estimator(name, **params)` to fix its parameters and check them
once. Trainers call each one alike, `ESTIMATORS[name](rewards, stage)` with the plan's `ObjectiveStage` (its rank
weights, K and the estimator's options; as verl's estimators share one signature); the std of `scale_rewards` is `scale_advantages`, applied once after any
of them (TRL's GRPO is `grpo` then `scale_advantages(..., "group")`).
"""

# registration order is the order of every derived list: the modules are imported in this order
from .mean import SCALES, grpo, ordergrad, rloo, rs_grpo, scale_advantages  # isort: skip
from .best_of_k import maxk_tang, passk_chen, pkpo  # isort: skip
from .likelihood import maxrl, maxrl_loo  # isort: skip
from .registry import (
    ESTIMATORS,
    NAN_RULES,
    Estimator,
    bind_estimator,
    estimator_help,
    estimator_name,
    estimator_params,
    estimator_table,
    get_estimator,
    register_estimator,
)

__all__ = [
    "ESTIMATORS",
    "NAN_RULES",
    "SCALES",
    "Estimator",
    "bind_estimator",
    "estimator_help",
    "estimator_name",
    "estimator_params",
    "estimator_table",
    "get_estimator",
    "register_estimator",
    "scale_advantages",
    "ordergrad",
    "grpo",
    "rloo",
    "rs_grpo",
    "maxk_tang",
    "passk_chen",
    "pkpo",
    "maxrl",
    "maxrl_loo",
]
