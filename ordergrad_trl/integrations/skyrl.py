"""OrderGrad's estimator zoo as the SkyRL advantage estimator `ordergrad`, planned by the same `build_plan` as TRL.

Tested: SkyRL 0.4.0 (PyPI `skyrl`, Python >= 3.12).

Run it through SkyRL's own entrypoint, which hands a run to this module's `main` (SkyRL's route for algorithms that
add config fields; docs/skyrl.md):

    python -m skyrl.train.entrypoints.main_base trainer.override_entrypoint=ordergrad_trl.integrations.skyrl \\
        trainer.algorithm.advantage_estimator=ordergrad trainer.algorithm.ordergrad_objective=TopM:2 \\
        trainer.algorithm.ordergrad_k=4 generator.n_samples_per_prompt=8 ...

or, the same run, `python -m ordergrad_trl.integrations.skyrl <the same overrides>`.

Settings. `trainer.algorithm.ordergrad_*` are `OrderGradConfig`'s fields of the same names (`ordergrad_scale_rewards`
is its `scale_rewards`), added to SkyRL's strict `AlgorithmConfig` by a subclass (`OrderGradAlgorithmConfig`), and
`generator.n_samples_per_prompt` is `num_generations`. `main` parses the overrides into `OrderGradSkyRLConfig`, whose
construction runs `check_config`: it builds the plan (`ordergrad_trl.core.plan.build_plan`: the TRL config's
defaults, rules and error messages), so a bad setting stops the run before Ray starts; then SkyRL's `validate_cfg`,
`initialize_ray` and `skyrl_entrypoint` run as in SkyRL's `main`.

Registration. SkyRL has no plugin entry point: importing this module registers `ordergrad` in SkyRL's
`AdvantageEstimatorRegistry`, and `initialize_ray` copies the registry into SkyRL's named Ray actor, from which the
trainer's process takes it (cloudpickle; it imports this module by name, so every node needs this package).

The estimator. SkyRL's trainer calls it as `fn(token_level_rewards=(bs, L), response_mask=(bs, L), index=<uid per
row>, config=<trainer.algorithm>, ...)`; each group of rows sharing a uid is computed as the TRL trainer computes a
batch of groups, by `ordergrad_trl.integrations.engine` (shared with the verl adapter). SkyRL pads a batch to a
multiple of its data-parallel size with rows of their own uid (`pad<i>`), loss-masked; those singletons get 0.
"""

# No `from __future__ import annotations`: SkyRL builds nested configs from the fields' real types
import logging
import sys
from dataclasses import dataclass, field
from typing import Any, Optional, Union

logger = logging.getLogger(__name__)
NAME = "ordergrad"
_FAILED = f"ordergrad_trl could not register trainer.algorithm.advantage_estimator={NAME} with SkyRL"

try:  # say why, loudly: a missing registration would otherwise surface as SkyRL's "invalid advantage_estimator"
    import torch
    from skyrl.backends.skyrl_train.utils.ppo_utils import register_advantage_estimator
    from skyrl.train.config import AlgorithmConfig, SkyRLTrainConfig, TrainerConfig

    from ordergrad_trl.core.plan import ObjectivePlan
    from ordergrad_trl.integrations.engine import KEYS, group_ids, is_tested, outcome_advantages, plan_of, settings_from
except Exception:
    logger.error(_FAILED, exc_info=True)
    raise

__all__ = ["NAME", "KEYS", "OrderGradAlgorithmConfig", "OrderGradSkyRLConfig", "check_config", "plan_from_config",
           "compute_ordergrad_advantage", "main"]  # fmt: skip

TESTED_SKYRL = ("0.4.0", "0.5")  # [lowest tested, first untested) release; pyproject's `skyrl` extra pins it
_NOTE = ("(SkyRL: these are the trainer.algorithm.ordergrad_* fields, e.g. trainer.algorithm.ordergrad_k=4; "
         "num_generations is generator.n_samples_per_prompt, scale_rewards is "
         "trainer.algorithm.ordergrad_scale_rewards)")  # fmt: skip


@dataclass
class OrderGradAlgorithmConfig(AlgorithmConfig):
    """SkyRL's `trainer.algorithm` with OrderGrad's settings (docs/config.md); None takes the TRL config's default."""

    ordergrad_estimator: Optional[str] = None
    """An estimator of ordergrad-trl's registry (docs/estimators.md); only with `advantage_estimator=ordergrad`."""
    ordergrad_objective: Union[str, list, None] = None
    """A preset (`TopM:2`, `ReMax`, `CVaR:0.25`, `MaxRL:4`, ...) or the K ascending rank weights."""
    ordergrad_k: Optional[int] = None
    """K, the draws the objective is defined over; below `generator.n_samples_per_prompt`."""
    ordergrad_estimator_kwargs: Union[dict, str, None] = None
    """The estimator's own options, a dict or a JSON object string (e.g. `{"beta": 2.0}` for rs_grpo)."""
    ordergrad_scale_rewards: Union[str, bool, None] = None
    """TRL's scale_rewards: `none` (unbiased), `group`, `batch` or a bool; applied after the estimator."""
    ordergrad_prompt_weight: Optional[str] = None
    """A weight per prompt after the estimator, any form of `ordergrad_prompt_weight` (`PROMPT_WEIGHTS`)."""
    ordergrad_prompt_weight_window: Optional[int] = None
    """`curverl`: the past batches its reference histogram holds (default 10); restarts empty on resume."""
    ordergrad_schedule: Optional[Any] = None
    """Not available in SkyRL (its estimator is not told the step): setting it is an error."""


@dataclass
class OrderGradTrainerConfig(TrainerConfig):
    algorithm: OrderGradAlgorithmConfig = field(default_factory=OrderGradAlgorithmConfig)


@dataclass
class OrderGradSkyRLConfig(SkyRLTrainConfig):
    """SkyRL's `SkyRLTrainConfig` whose `trainer.algorithm` takes the `ordergrad_*` fields, checked when the config
    is built (`check_config`), so SkyRL's own parser (`from_cli_overrides`) refuses a bad setting."""

    trainer: OrderGradTrainerConfig = field(default_factory=OrderGradTrainerConfig)

    def __post_init__(self):
        super().__post_init__()
        check_config(self)


def plan_from_config(algorithm, num_generations: int) -> ObjectivePlan:
    """The `ObjectivePlan` of SkyRL's `trainer.algorithm` (its `ordergrad_*` fields; absent or None: the defaults)
    over groups of `num_generations` rollouts.

    Raises:
        ValueError: `build_plan`'s message (the one `OrderGradConfig` raises for the same setting), with a note
            mapping TRL's names to SkyRL's; or, for `ordergrad_schedule`, why SkyRL cannot take one.
    """
    if getattr(algorithm, "ordergrad_schedule", None) is not None:
        raise ValueError(
            "trainer.algorithm.ordergrad_schedule is not available in SkyRL: its trainer does not tell an advantage "
            "estimator the training step. Set ordergrad_objective and ordergrad_k (one objective for the run), or "
            "use the TRL trainer or verl for a schedule."
        )
    return plan_of(settings_from(lambda key: getattr(algorithm, key, None)), num_generations, _NOTE)


def check_config(cfg) -> ObjectivePlan | None:
    """Start-up check of a SkyRL config (`SkyRLTrainConfig`, ours or SkyRL's own): with
    `trainer.algorithm.advantage_estimator=ordergrad`, the plan over `generator.n_samples_per_prompt` rollouts (every
    error `build_plan` raises for `OrderGradConfig`, with the same text). With another estimator, an `ordergrad_*`
    field that is set raises: the run would not train what its command line says."""
    algorithm = cfg.trainer.algorithm
    estimator = getattr(algorithm.advantage_estimator, "value", algorithm.advantage_estimator)
    if estimator != NAME:
        stray = [key for key in KEYS if getattr(algorithm, key, None) is not None]
        if stray:
            raise ValueError(
                f"trainer.algorithm.{stray[0]} is set but trainer.algorithm.advantage_estimator={estimator!r}: the "
                f"OrderGrad fields only apply to trainer.algorithm.advantage_estimator={NAME}"
            )
        return None
    return plan_from_config(algorithm, cfg.generator.n_samples_per_prompt)


def compute_ordergrad_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index=None,
    config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SkyRL advantage estimator `ordergrad`: the planned estimator per uid group of outcome scores.

    Args:
        token_level_rewards: `(bs, L)`; a row's score is its sum (NaN: unscorable, advantage 0).
        response_mask: `(bs, L)` 1 on response tokens.
        index: `(bs,)` uid of each row (SkyRL's list or numpy array).
        config: SkyRL's `trainer.algorithm` (the `ordergrad_*` fields of `OrderGradAlgorithmConfig`).
        **kwargs: SkyRL's other arguments (values, gamma, lambd, grpo_norm_by_std), unused.

    Returns:
        `(advantages, returns)`, both `(bs, L)` and equal, in the rewards' dtype (computed in float64).

    The plan's `num_generations` is the largest group of the batch: SkyRL does not pass
    `generator.n_samples_per_prompt` to an estimator (`main` checked the plan with it before Ray started).
    """
    if index is None:
        raise ValueError(f"advantage_estimator={NAME} needs the rows' uids (SkyRL passes metadata['uids'])")
    group = group_ids(index, token_level_rewards.device)  # (bs,)
    plan = plan_from_config(config, int(torch.bincount(group).max()))
    fix = "Raise generator.n_samples_per_prompt or lower trainer.algorithm.ordergrad_k."
    advantages = outcome_advantages(
        token_level_rewards, response_mask, group, plan, plan.stages[0], engine="skyrl", fix=fix,
        quiet_sizes=frozenset({1}),  # SkyRL's padding rows
    )  # fmt: skip
    return advantages, advantages


def main(argv: list[str] | None = None) -> None:
    """SkyRL's `main_base.main` with OrderGrad's config: parse, check (before Ray), validate, start Ray, train."""
    import ray
    from skyrl.train.entrypoints.main_base import skyrl_entrypoint
    from skyrl.train.utils import validate_cfg
    from skyrl.train.utils.utils import initialize_ray

    argv = sys.argv[1:] if argv is None else list(argv)
    # SkyRL's main_base dispatched here on trainer.override_entrypoint, which is not a config field
    argv = [arg for arg in argv if not arg.startswith("trainer.override_entrypoint=")]
    cfg = OrderGradSkyRLConfig.from_cli_overrides(argv)  # checks the OrderGrad settings (__post_init__)
    validate_cfg(cfg)
    initialize_ray(cfg)
    ray.get(skyrl_entrypoint.remote(cfg))


def _register() -> None:
    found = _version("skyrl")
    if not is_tested(found, TESTED_SKYRL):
        logger.warning("ordergrad_trl.integrations.skyrl was tested with skyrl >= %s, < %s; found skyrl %s",
                       *TESTED_SKYRL, found)  # fmt: skip
    try:
        register_advantage_estimator(NAME)(compute_ordergrad_advantage)
    except ValueError as err:  # already registered: this module imported again (e.g. by a Ray worker's unpickling)
        if "already registered" not in str(err):
            raise


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


if __name__ == "__main__":  # `python -m`: run the module by its import name, the one Ray's workers unpickle
    from ordergrad_trl.integrations.skyrl import main as _main

    _main()
else:
    try:
        _register()
    except Exception:
        logger.error(_FAILED, exc_info=True)
        raise
