"""OrderGrad's estimator zoo as the verl advantage estimator `ordergrad`, planned by the same `build_plan` as TRL.

verl (tested: 0.9.1) calls a registered estimator in its trainer process as
`fn(token_level_rewards=(bs, L), response_mask=(bs, L), config=<the algorithm config>, index=<uid per row>)`.
A group is the rows that share a `uid` (one prompt's rollouts); its rows need not be adjacent and groups may differ
in size. Each row's score is `token_level_rewards.sum(-1)` (an outcome reward). The `algorithm.ordergrad_*` keys
are `OrderGradConfig`'s fields of the same names (`ordergrad_scale_rewards` is its `scale_rewards`) and go through
`ordergrad_trl.core.plan.build_plan` with `actor_rollout_ref.rollout.n` as `num_generations`: the same defaults,
rules, checks and error messages as the TRL config. Every group is then computed as the TRL trainer computes a
batch of groups, by `ordergrad_trl.integrations.engine` (shared with the SkyRL adapter): the plan's one call
`plan.grouped_advantages` (the estimator, zeros where it is undefined for the group's size, with a warning once per
process; then `scale_rewards`), broadcast over the response tokens. With a sequence-level loss that sums each
response's tokens (`loss_agg_mode=seq-mean-token-sum-norm`), the
policy gradient is then the estimator's, up to a constant (docs/verl.md).

Keys verl's own config lacks are added with a leading `+`, e.g.

    algorithm.adv_estimator=ordergrad +algorithm.ordergrad_estimator=maxrl_loo +algorithm.ordergrad_k=4

verl 0.9.1 keeps `algorithm` a DictConfig from the command line to the estimator (it never converts it to its
`AlgoConfig` dataclass, which would reject the extra keys). A schedule (`ordergrad_schedule`) is looked up at
verl's global step (`verl.utils.skip.SkipManager.step`, which both of verl's trainers set every step; TRL's step
0 is verl's step 1).

Registration. `import verl` loads the `verl.plugins` entry points (this package's pyproject.toml names this
module), so every verl process, the trainer actor included, has `ordergrad` registered without user code. verl
logs a plugin's import error at debug level only, so this module logs its own failure as an error before raising.
It also checks the settings at start-up: it extends `verl.utils.config.validate_config`, which verl's `main_ppo`
runs on the composed config before starting Ray, so a bad setting fails in seconds, not after the first rollout.
The estimator builds (and so checks) the plan again on its first call, for launchers that skip `validate_config`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

logger = logging.getLogger(__name__)
NAME = "ordergrad"
_FAILED = f"ordergrad_trl could not register algorithm.adv_estimator={NAME} with verl; runs that select it will fail"

try:  # verl's plugin loader hides import errors (debug level): say it here, loudly, whatever fails
    import torch

    from ordergrad_trl.core.plan import ObjectivePlan, ObjectiveStage
    from ordergrad_trl.integrations.engine import (
        KEYS, group_ids, is_tested, outcome_advantages, plan_of, settings_from,
    )
except Exception:
    logger.error(_FAILED, exc_info=True)
    raise

__all__ = ["NAME", "KEYS", "compute_ordergrad_advantage", "check_config", "plan_from_config"]

TESTED_VERL = ("0.9.1", "0.10")  # [lowest tested, first untested) release; pyproject's `verl` group pins it
_VERL_NOTE = ("(verl: these are the algorithm.ordergrad_* keys, e.g. +algorithm.ordergrad_k=4; num_generations is "
              "actor_rollout_ref.rollout.n, scale_rewards is algorithm.ordergrad_scale_rewards)")  # fmt: skip


def plan_from_config(algorithm, num_generations: int) -> ObjectivePlan:
    """The `ObjectivePlan` of verl's `algorithm` config (its `ordergrad_*` keys; None: the defaults) over groups of
    `num_generations` rollouts.

    Raises:
        ValueError: exactly `build_plan`'s message (the one `OrderGradConfig` raises for the same setting), with a
            note mapping TRL's names to verl's keys.
    """
    get = (lambda key: algorithm.get(key, None)) if algorithm is not None else (lambda key: None)
    return plan_of(settings_from(get), num_generations, _VERL_NOTE)


def _rollout_n(config):
    """`actor_rollout_ref.rollout.n` of the full config: `config` is the full one, or its `algorithm` node, whose
    parent verl's trainers keep (OmegaConf's relative select); None when neither reaches it."""
    rollout = config.get("actor_rollout_ref", {}).get("rollout", {}) if isinstance(config, Mapping) else {}
    n = rollout.get("n", None) if isinstance(rollout, Mapping) else None
    if n is None and config is not None:
        try:
            from omegaconf import OmegaConf

            n = OmegaConf.select(config, "..actor_rollout_ref.rollout.n", default=None)
        except Exception:  # a dict or a detached config: no parent to look in
            n = None
    return n


def check_config(config) -> None:
    """Start-up check of a composed verl config (the whole config, with `algorithm` and `actor_rollout_ref`).

    With `algorithm.adv_estimator=ordergrad`: builds the plan with `num_generations = actor_rollout_ref.rollout.n`
    (every error `build_plan` raises for `OrderGradConfig`, with the same text), and refuses unknown
    `algorithm.ordergrad_*` keys. With another estimator, `ordergrad_*` keys would be ignored: that raises too,
    since the run would not train what its command line says."""
    algorithm = config.get("algorithm", None)
    if algorithm is None:
        return
    estimator = algorithm.get("adv_estimator", None)
    estimator = getattr(estimator, "value", estimator)  # verl's AdvantageEstimator enum
    ours = [key for key in algorithm if str(key).startswith("ordergrad_")]
    if estimator != NAME:
        stray = [key for key in ours if algorithm.get(key, None) is not None]
        if stray:
            raise ValueError(
                f"algorithm.{stray[0]} is set but algorithm.adv_estimator={estimator!r}: the OrderGrad keys only "
                f"apply to algorithm.adv_estimator={NAME}"
            )
        return
    unknown = [key for key in ours if key not in KEYS]
    if unknown:
        raise ValueError(f"algorithm.{unknown[0]} is not an OrderGrad key; valid keys: {', '.join(KEYS)}")
    n = _rollout_n(config)
    if isinstance(n, int) and not isinstance(n, bool):
        plan_from_config(algorithm, n)


def _stage(plan: ObjectivePlan) -> ObjectiveStage:
    """The plan's stage at verl's global step (the one stage without a schedule): what the call is handed."""
    if not plan.scheduled:
        return plan.stages[0]
    from verl.utils.skip.skip_manager import SkipManager  # the trainers' global step, 1 at the first step

    return plan.stage_at(max(int(SkipManager.step) - 1, 0))


def compute_ordergrad_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config=None,
    index=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator `ordergrad`: the planned estimator per `uid` group of outcome scores.

    Args:
        token_level_rewards: `(bs, L)`; a row's score is its sum.
        response_mask: `(bs, L)` 1 on response tokens.
        config: verl's `algorithm` config (the `ordergrad_*` keys of `KEYS`).
        index: `(bs,)` uid of each row (numpy object array or sequence).

    Returns:
        `(advantages, returns)`, both `(bs, L)` and equal, in the rewards' dtype (computed in float64).
    """
    if index is None:
        raise ValueError(f"adv_estimator={NAME} needs the rows' uid (verl passes data.non_tensor_batch['uid'])")
    group = group_ids(index, token_level_rewards.device)  # (bs,)
    n = _rollout_n(config)
    if not isinstance(n, int) or isinstance(n, bool):  # a detached config: the largest group stands in for it
        n = int(torch.bincount(group).max())
    plan = plan_from_config(config, n)
    fix = "Raise actor_rollout_ref.rollout.n or lower algorithm.ordergrad_k."
    advantages = outcome_advantages(token_level_rewards, response_mask, group, plan, _stage(plan), engine="verl",
                                    fix=fix)  # fmt: skip
    return advantages, advantages


def _extend_validate_config(verl_config) -> None:
    """Run `check_config` first whenever verl validates a composed config (idempotent)."""
    original = verl_config.validate_config
    if getattr(original, "_ordergrad_checks", False):
        return

    @functools.wraps(original)
    def validate_config(config, *args, **kwargs):
        check_config(config)
        return original(config, *args, **kwargs)

    validate_config._ordergrad_checks = True
    verl_config.validate_config = validate_config


def is_tested_verl(version: str) -> bool:
    """Whether `version` is in `TESTED_VERL` (`engine.is_tested`)."""
    return is_tested(version, TESTED_VERL)


def _register() -> None:
    import verl
    import verl.utils.config as verl_config
    from verl.trainer.ppo import core_algos

    found = str(getattr(verl, "__version__", "unknown"))
    if not is_tested_verl(found):
        logger.warning(
            "ordergrad_trl.integrations.verl was tested with verl >= %s, < %s; found verl %s", *TESTED_VERL, found
        )
    core_algos.register_adv_est(NAME)(compute_ordergrad_advantage)
    _extend_validate_config(verl_config)


try:
    _register()
except Exception:
    # verl's plugin loader logs import errors at debug level only; without this the first sign would be
    # "Unknown advantage estimator" after the first rollout
    logger.error(_FAILED, exc_info=True)
    raise
