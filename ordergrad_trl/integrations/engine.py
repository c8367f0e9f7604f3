"""What the RL-engine adapters (verl, SkyRL) share: settings to one plan, uid groups to the plan's advantages.

An engine's `ordergrad_*` settings become one `ObjectivePlan` through `ordergrad_trl.core.plan.build_plan` (TRL's
defaults, rules and messages), and a batch of outcome rewards grouped by uid becomes the plan's advantages,
broadcast over each response's tokens.

An engine calls its estimator as `fn(token_level_rewards=(bs, L), response_mask=(bs, L), index=<uid per row>, ...)`
(verl and SkyRL share the signature). A group is the rows that share a uid (one prompt's rollouts); its rows need
not be adjacent and groups may differ in size. Each row's score is `token_level_rewards.sum(-1)`; NaN marks an
unscorable row (advantage 0). Imports only torch and `ordergrad_trl.core`, like the adapters themselves.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Mapping, Sequence

import torch
from packaging.version import Version

from ordergrad_trl.core.plan import ObjectivePlan, ObjectiveStage, build_plan
from ordergrad_trl.core.prompt_weights import PromptWindow

__all__ = ["KEYS", "settings_from", "plan_of", "group_ids", "outcome_advantages", "is_tested", "prompt_window"]

logger = logging.getLogger(__name__)

# <engine's algorithm config>.<key> -> build_plan's argument; the keys are OrderGradConfig's field names
KEYS = {
    "ordergrad_estimator": "estimator",
    "ordergrad_objective": "objective",
    "ordergrad_k": "k",
    "ordergrad_schedule": "schedule",
    "ordergrad_estimator_kwargs": "estimator_kwargs",
    "ordergrad_scale_rewards": "scale",
    "ordergrad_prompt_weight": "prompt_weight",
    "ordergrad_prompt_weight_window": "prompt_weight_window",
}
_warned: set[str] = set()  # engines whose "undefined for these group sizes" warning this process has given
# engine -> the stateful prompt weight's window: the estimator runs in the engine's driver process, once per training
# batch, so a module-level window sees every batch in order. It is not in the engine's checkpoints: a resumed run
# starts with an empty window (its first batch is its own reference), docs/verl.md and docs/skyrl.md.
_windows: dict[str, PromptWindow] = {}


def prompt_window(engine: str, plan: ObjectivePlan) -> PromptWindow | None:
    """This process's window for `engine` (None unless the plan's prompt weight is stateful); a new, empty one when
    the window's size changed."""
    weight = plan.prompt_weight
    if weight is None or not weight.stateful:
        return None
    window = _windows.get(engine)
    if window is None or window.size != weight.window:
        window = _windows[engine] = PromptWindow(weight.window)
    return window


def _plain(value):
    """OmegaConf's ListConfig / DictConfig (or any mapping / sequence) as a list / dict; anything else unchanged,
    for `build_plan` to judge."""
    if isinstance(value, Mapping):
        return dict(value.items())
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)
    return value


def settings_from(get: Callable[[str], object]) -> dict:
    """`build_plan`'s keyword arguments (but `num_generations`) from `get(key)` of each key of `KEYS` (None: the
    plan's default). Weights given as a list ([0,0,0.5,0.5] on an OmegaConf command line) become TRL's string
    "0,0,0.5,0.5"; estimator options given as a JSON object string become a dict, as TRL's command line parses them."""
    settings = {arg: _plain(get(key)) for key, arg in KEYS.items()}
    objective = settings["objective"]
    if isinstance(objective, list) and objective and all(
        isinstance(w, (int, float)) and not isinstance(w, bool) for w in objective
    ):
        settings["objective"] = ",".join(map(str, objective))
    if isinstance(settings["estimator_kwargs"], str):
        try:
            settings["estimator_kwargs"] = json.loads(settings["estimator_kwargs"])
        except json.JSONDecodeError:
            pass  # build_plan says what it must be
    return {**settings, "reward_objectives": None}  # an engine scores each rollout once


@functools.lru_cache(maxsize=32)
def _cached_plan(frozen: str, num_generations: int) -> ObjectivePlan:
    return build_plan(**json.loads(frozen), num_generations=num_generations)


def plan_of(settings: dict, num_generations: int, note: str | None = None) -> ObjectivePlan:
    """The plan of `settings_from`'s dict over groups of `num_generations` rollouts, built once per distinct
    setting (every training step looks it up).

    Raises:
        ValueError: exactly `build_plan`'s message (the one `OrderGradConfig` raises for the same setting), with
            `note` (the engine's names for TRL's fields) attached on Python 3.11+.
    """
    try:
        frozen = json.dumps(settings, sort_keys=True)
    except TypeError:  # not JSON-like: build_plan names the field and what it must be
        return build_plan(**settings, num_generations=num_generations)
    try:
        return _cached_plan(frozen, num_generations)
    except ValueError as err:
        if note and hasattr(err, "add_note"):  # shown with the traceback, not part of str(err)
            err.add_note(note)
        raise


def group_ids(index, device: torch.device) -> torch.Tensor:
    """`(bs,)` int64 group ids 0..G-1, in order of first appearance of each uid of `index` (numpy array or list)."""
    uids = index.tolist() if hasattr(index, "tolist") else list(index)
    ids: dict = {}
    return torch.tensor([ids.setdefault(uid, len(ids)) for uid in uids], dtype=torch.long, device=device)


def outcome_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group: torch.Tensor,
    plan: ObjectivePlan,
    stage: ObjectiveStage,
    *,
    engine: str,
    fix: str,
    quiet_sizes: frozenset[int] = frozenset(),
) -> torch.Tensor:
    """`(bs, L)` advantages of `plan` at `stage`: each row's score is its rewards' sum (in float64), each group is
    computed as the TRL trainer computes a batch of groups (`plan.grouped_advantages`: the estimator, zeros where it
    is undefined for the group's size, the prompt weight against `engine`'s window, which the batch then joins, and
    `scale_rewards`), and the row's advantage is put on every response token, in the rewards' dtype.

    A group size where the estimator is undefined gets one warning per process and engine, saying `fix`; sizes in
    `quiet_sizes` are the engine's own filler rows (SkyRL's padding) and are not warned about."""
    scores = token_level_rewards.to(torch.float64).sum(-1)  # (bs,)
    batch = plan.grouped_advantages(scores, group, stage, prompt_window(engine, plan))  # the window takes the batch
    undefined = sorted(set(batch.undefined_sizes) - quiet_sizes)
    if undefined and engine not in _warned:
        _warned.add(engine)
        logger.warning(
            "ordergrad: estimator %r is undefined for groups of %s rollouts (objective %s over K=%d) and gives them "
            "advantage 0; e.g. ordergrad needs more than K rollouts per prompt. %s (Warned once per process.)",
            plan.estimator, undefined, stage.objective, stage.k, fix,
        )  # fmt: skip
    return batch.advantages.to(token_level_rewards.dtype)[:, None] * response_mask  # (bs, L)


def is_tested(version: str, tested: tuple[str, str]) -> bool:
    """`tested[0] <= version < tested[1]` (an engine's [lowest tested, first untested) release), where a pre-release
    of the upper bound (0.10.0rc1) is outside and a version that does not parse is untested."""
    try:
        found = Version(version)
    except ValueError:
        return False
    return Version(tested[0]) <= found < Version(f"{tested[1]}.dev0")
