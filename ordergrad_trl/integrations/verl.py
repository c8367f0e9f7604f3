"""OrderGrad's unbiased L-statistic advantages as a verl advantage estimator: `algorithm.adv_estimator=ordergrad`.

verl (tested: 0.9.1) calls a registered estimator in its trainer process as
`fn(token_level_rewards=(bs, L), response_mask=(bs, L), config=<the algorithm config>, index=<uid per row>)`.
A group is the rows that share a `uid` (one prompt's rollouts); its rows need not be adjacent and groups may differ
in size. Each row's score is `token_level_rewards.sum(-1)` (an outcome reward), and its advantage is
`K * lstat_advantage(group scores, rank_weights(objective, K))`, broadcast over the response tokens: with a
sequence-level loss that sums each response's tokens (`loss_agg_mode=seq-mean-token-sum-norm`), the policy
gradient is then the unbiased estimate of grad J up to a constant (docs/verl.md). A group of N <= K rollouts has
no leave-one-out advantage: it gets 0, and a warning says so once per process.

Objective and K come from two keys that verl's own config lacks, so Hydra takes them with a leading `+`:

    algorithm.adv_estimator=ordergrad +algorithm.ordergrad_objective=TopM:2 +algorithm.ordergrad_k=4

verl 0.9.1 keeps `algorithm` a DictConfig from the command line to the estimator (it never converts it to its
`AlgoConfig` dataclass, which would reject the extra keys). Defaults: `TopM:2` over K=4, as in `OrderGradConfig`.

Registration. `import verl` loads the `verl.plugins` entry points (this package's pyproject.toml names this
module), so every verl process, the trainer actor included, has `ordergrad` registered without user code. verl
logs a plugin's import error at debug level only, so this module logs its own failure as an error before raising.
It also checks the settings at start-up: it extends `verl.utils.config.validate_config`, which verl's
`main_ppo` runs on the composed config before starting Ray, so a bad objective or K (or K >= rollout.n) fails in
seconds, not after the first rollout. The estimator checks them again on every call (cached), for launchers that
skip `validate_config`.
"""

from __future__ import annotations

import functools
import logging

logger = logging.getLogger(__name__)
NAME = "ordergrad"
_FAILED = f"ordergrad_trl could not register algorithm.adv_estimator={NAME} with verl; runs that select it will fail"

try:  # verl's plugin loader hides import errors (debug level): say it here, loudly, whatever fails
    import torch
    from packaging.version import Version

    from ordergrad_trl.core import lstat_advantage, rank_weights
except Exception:
    logger.error(_FAILED, exc_info=True)
    raise

__all__ = ["NAME", "compute_ordergrad_advantage", "grouped_lstat_advantage", "check_config", "weights_from_config"]

OBJECTIVE_KEY, K_KEY = "ordergrad_objective", "ordergrad_k"
DEFAULT_OBJECTIVE, DEFAULT_K = "TopM:2", 4  # OrderGradConfig's defaults
TESTED_VERL = ("0.9.1", "0.10")  # [lowest tested, first untested) release; pyproject's `verl` group pins it
_SETTINGS = f"algorithm.adv_estimator={NAME} +algorithm.{OBJECTIVE_KEY}=TopM:2 +algorithm.{K_KEY}=4"
_warned_small_groups = False


def weights_from_config(config) -> torch.Tensor:
    """`(K,)` float64 ascending rank weights of `algorithm.ordergrad_objective` over `algorithm.ordergrad_k`.

    `config` is verl's `algorithm` config (DictConfig, dict or `AlgoConfig`) or None (the defaults). The objective
    is a preset string or a list of K numbers. Raises ValueError naming the keys and the valid forms."""
    raw_objective = config.get(OBJECTIVE_KEY, None) if config is not None else None
    raw_k = config.get(K_KEY, None) if config is not None else None
    k = DEFAULT_K if raw_k is None else raw_k
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"algorithm.{K_KEY} must be an integer >= 1, got {k!r}; e.g. {_SETTINGS}")
    objective = DEFAULT_OBJECTIVE if raw_objective is None else raw_objective
    if not isinstance(objective, str):  # a list of weights, e.g. +algorithm.ordergrad_objective=[0,0,0.5,0.5]
        try:
            objective = tuple(float(w) for w in objective)
        except (TypeError, ValueError):
            raise ValueError(
                f"algorithm.{OBJECTIVE_KEY} must be a preset string or a list of {k} numbers, got {objective!r}"
            ) from None
    return _cached_weights(objective, k).clone()


@functools.lru_cache(maxsize=64)
def _cached_weights(objective, k: int) -> torch.Tensor:
    try:
        weights = rank_weights(objective if isinstance(objective, str) else list(objective), k)
    except ValueError as err:
        raise ValueError(f"algorithm.{OBJECTIVE_KEY}={objective!r} with algorithm.{K_KEY}={k}: {err}") from None
    if not weights.any():
        raise ValueError(
            f"algorithm.{OBJECTIVE_KEY}={objective!r} has all-zero weights at algorithm.{K_KEY}={k}: every advantage "
            "would be 0; give at least one nonzero weight, or a preset"
        )
    return weights


def check_config(config) -> None:
    """Start-up check of a composed verl config (the whole config, with `algorithm` and `actor_rollout_ref`).

    With `algorithm.adv_estimator=ordergrad`: the objective and K must parse, and K must be smaller than
    `actor_rollout_ref.rollout.n` (else every group gets advantage 0). With another estimator, `ordergrad_*` keys
    would be ignored: that raises too, since the run would not train what its command line says."""
    algorithm = config.get("algorithm", None)
    if algorithm is None:
        return
    estimator = algorithm.get("adv_estimator", None)
    estimator = getattr(estimator, "value", estimator)  # verl's AdvantageEstimator enum
    if estimator != NAME:
        stray = [key for key in (OBJECTIVE_KEY, K_KEY) if algorithm.get(key, None) is not None]
        if stray:
            raise ValueError(
                f"algorithm.{stray[0]} is set but algorithm.adv_estimator={estimator!r}: the OrderGrad keys only "
                f"apply to algorithm.adv_estimator={NAME}"
            )
        return
    k = len(weights_from_config(algorithm))
    rollout = config.get("actor_rollout_ref", {}).get("rollout", {})
    n = rollout.get("n", None) if rollout is not None else None
    if isinstance(n, int) and n <= k:
        raise ValueError(
            f"actor_rollout_ref.rollout.n={n} rollouts per prompt, but algorithm.{K_KEY}={k}: the leave-one-out "
            f"advantage needs n > K (every group would get advantage 0); raise rollout.n or lower algorithm.{K_KEY}"
        )


def _group_ids(index, device: torch.device) -> torch.Tensor:
    """`(bs,)` int64 group ids 0..G-1 in order of first appearance of each uid."""
    uids = index.tolist() if hasattr(index, "tolist") else list(index)
    ids: dict = {}
    return torch.tensor([ids.setdefault(uid, len(ids)) for uid in uids], dtype=torch.long, device=device)


def grouped_lstat_advantage(scores: torch.Tensor, group: torch.Tensor, weights: torch.Tensor):
    """Leave-one-out advantages (not multiplied by K) of rows grouped by id, in any order and of any sizes.

    Args:
        scores: `(bs,)` one reward per row; NaN marks an unscorable row (see `lstat_advantage`).
        group: `(bs,)` int64 group id of each row, 0..G-1.
        weights: `(K,)` ascending rank weights.

    Returns:
        `(advantages (bs,), sizes (G,))`; a group of N <= K rows gets advantage 0.
    """
    k = len(weights)
    sizes = torch.bincount(group)  # (G,)
    order = torch.argsort(group, stable=True)  # (bs,) rows of group 0, then group 1, ...
    starts = torch.cumsum(sizes, 0) - sizes  # (G,) where each group begins in `order`
    adv = torch.zeros_like(scores)
    for n in sizes.unique().tolist():  # one batched call per distinct group size
        if n <= k:
            continue
        groups = torch.nonzero(sizes == n).flatten()  # (G_n,)
        rows = order[starts[groups, None] + torch.arange(n, device=scores.device)]  # (G_n, n)
        adv[rows] = lstat_advantage(scores[rows], weights)  # (G_n, n)
    return adv, sizes


def compute_ordergrad_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config=None,
    index=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator `ordergrad`: `K * lstat_advantage` per `uid` group of outcome scores.

    Args:
        token_level_rewards: `(bs, L)`; a row's score is its sum.
        response_mask: `(bs, L)` 1 on response tokens.
        config: verl's `algorithm` config (`ordergrad_objective`, `ordergrad_k`).
        index: `(bs,)` uid of each row (numpy object array or sequence).

    Returns:
        `(advantages, returns)`, both `(bs, L)` and equal, in the rewards' dtype (computed in float64).
    """
    global _warned_small_groups
    if index is None:
        raise ValueError(f"adv_estimator={NAME} needs the rows' uid (verl passes data.non_tensor_batch['uid'])")
    weights = weights_from_config(config)
    k = len(weights)
    scores = token_level_rewards.to(torch.float64).sum(-1)  # (bs,)
    adv, sizes = grouped_lstat_advantage(scores, _group_ids(index, scores.device), weights)  # (bs,), (G,)
    small = int((sizes <= k).sum())
    if small and not _warned_small_groups:
        _warned_small_groups = True
        logger.warning(
            "ordergrad: %d of %d groups have N <= K=%d rollouts (sizes %s) and get advantage 0: the leave-one-out "
            "advantage needs more than K rollouts per prompt. Raise actor_rollout_ref.rollout.n or lower "
            "algorithm.%s. (Warned once per process.)",
            small, len(sizes), k, sorted(set(sizes[sizes <= k].tolist())), K_KEY,
        )
    advantages = (k * adv).to(token_level_rewards.dtype)[:, None] * response_mask  # (bs, L)
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
    """`TESTED_VERL[0] <= version < TESTED_VERL[1]`, where a pre-release of the upper bound (0.10.0rc1) is outside
    and a version that does not parse is untested."""
    try:
        found = Version(version)
    except ValueError:
        return False
    return Version(TESTED_VERL[0]) <= found < Version(f"{TESTED_VERL[1]}.dev0")


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
