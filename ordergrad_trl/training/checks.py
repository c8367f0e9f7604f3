"""Config-time checks of `OrderGradConfig`'s objectives, estimators and evaluation groups.

Errors name the fields and their valid values, and are raised when the config is built, never at step 1."""

from __future__ import annotations

import logging

from ..core.estimators import ESTIMATORS, bind_estimator, estimator_params
from ..core.objectives import VALID_OBJECTIVES, rank_weights

logger = logging.getLogger(__name__)

# Estimator parameters that other config fields set; naming them in `ordergrad_estimator_kwargs` is an error.
PARAMS_FROM_FIELDS = {"objective": "ordergrad_objective", "k": "ordergrad_k", "scale": "scale_rewards"}


def check_objective(
    objective, k, num_generations: int, objective_field: str, k_field: str, entry: str | None = None
) -> None:
    """`entry` names a list entry (schedule, per-reward objectives) holding both; else two fields hold them."""
    at = f"{entry}: " if entry else ""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{at}{k_field} must be a positive integer, got {k!r}.")
    if k >= num_generations:
        raise ValueError(
            f"{at}{k_field} ({k}) must be smaller than num_generations ({num_generations}): the "
            f"leave-one-out advantage of a rollout needs K other rollouts of the same prompt. Lower {k_field} or "
            "raise num_generations."
        )
    try:
        rank_weights(objective, k)
    except ValueError as err:
        raise ValueError(f"{at}{objective_field}={objective!r} is not valid for {k_field}={k}: {err}") from err
    except TypeError as err:
        raise ValueError(
            f"{at}{objective_field} must be a string (a preset or comma-separated weights), got {objective!r}. "
            f"Valid forms: {VALID_OBJECTIVES}."
        ) from err

def check_estimator(config) -> None:
    """`ordergrad_estimator` (already lower-cased) binds with its kwargs for every stage of the schedule."""
    kwargs = config.ordergrad_estimator_kwargs
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ValueError(
            f"ordergrad_estimator_kwargs must be a dict or a JSON object string like '{{\"beta\": 2.0}}', "
            f"got {kwargs!r}."
        )
    reserved = sorted(set(kwargs or {}) & set(PARAMS_FROM_FIELDS))
    if reserved:
        raise ValueError(
            f"ordergrad_estimator_kwargs must not set {reserved}: set "
            f"{', '.join(PARAMS_FROM_FIELDS[p] for p in reserved)} instead."
        )
    accepted = estimator_params(config.ordergrad_estimator)
    if config.ordergrad_schedule is not None and not {"objective", "k"} & set(accepted):
        raise ValueError(
            f"ordergrad_schedule has no effect with ordergrad_estimator={config.ordergrad_estimator!r}, which takes "
            "neither an objective nor k; use one that does: "
            f"{', '.join(n for n in ESTIMATORS if {'objective', 'k'} & set(estimator_params(n)))}."
        )
    for index, stage in enumerate(config.ordergrad_stages()):
        if config.ordergrad_schedule is not None:
            where = f"ordergrad_schedule[{index}]={config.ordergrad_schedule[index]!r}"
        else:
            params = config.ordergrad_estimator_params(stage)
            where = ", ".join(f"{f}={params[p]!r}" for p, f in PARAMS_FROM_FIELDS.items() if p in params)
        try:
            bind_estimator(
                config.ordergrad_estimator, num_generations=config.num_generations,
                **config.ordergrad_estimator_params(stage),
            )  # fmt: skip
        except (ValueError, TypeError) as err:
            setting = ", ".join(filter(None, [kwargs and f"ordergrad_estimator_kwargs={kwargs!r}", where]))
            raise ValueError(
                f"ordergrad_estimator={config.ordergrad_estimator!r} with {setting}, num_generations="
                f"{config.num_generations}: {err}"
            ) from err

def check_reward_objectives(config) -> None:
    if config.ordergrad_estimator != "ordergrad":
        raise ValueError(
            "ordergrad_reward_objectives needs ordergrad_estimator='ordergrad' (the per-function advantages are "
            f"OrderGrad's L-statistic advantages), got ordergrad_estimator={config.ordergrad_estimator!r}."
        )
    if config.ordergrad_schedule is not None:
        raise ValueError("ordergrad_reward_objectives and ordergrad_schedule cannot be combined; set one of them.")
    for index, (objective, k) in enumerate(config.ordergrad_reward_specs()):
        where = f"ordergrad_reward_objectives[{index}]={config.ordergrad_reward_objectives[index]!r}"
        check_objective(objective, k, config.num_generations, "objective", "K", entry=where)

def warn_about_eval_groups(config) -> None:
    """A warning when `num_generations_eval` leaves some objective's advantage undefined in evaluation."""
    n_eval = config.num_generations_eval
    if n_eval is None or n_eval == config.num_generations:
        return
    specs = config.ordergrad_reward_specs()
    if specs is not None:
        bindings = [("ordergrad", {"objective": o, "k": k}) for o, k in specs]
    else:
        bindings = [(config.ordergrad_estimator, config.ordergrad_estimator_params(s)) for s in config.ordergrad_stages()]
    undefined = []
    for name, params in bindings:
        try:
            bind_estimator(name, num_generations=n_eval, **params)
        except ValueError as err:
            undefined.append(str(err))
    max_k = max(k for _, k in specs) if specs else max(s.k for s in config.ordergrad_stages())
    if undefined or n_eval < max_k:
        logger.warning(
            "num_generations_eval (%d): %s in evaluation, where those advantages are set to 0 (the eval policy "
            "loss is only logged); ordergrad/objective is logged only for K <= num_generations_eval.",
            n_eval,
            f"the advantage is undefined for some K ({undefined[0]})" if undefined else "some K exceed it",
        )
