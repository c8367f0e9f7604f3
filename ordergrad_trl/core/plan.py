"""The objective plan: what trains at each step, built once from `OrderGradConfig`'s fields; building it is the check.

`build_plan` turns the `ordergrad_*` fields (objective, K, schedule, per-reward objectives, estimator and its
options, prompt weight) into an immutable `ObjectivePlan`: its stages (`ObjectiveStage`: start step, objective, K, rank
weights, the estimator's options) or its per-reward specs, and the prompt weight applied after the estimator, before
`scale_rewards`. Every error a setting can cause is raised here, naming the config field and its valid
values, so that a bad setting fails when the config is built, never at step 1; the trainer only looks things up.
Pure torch (no TRL), so other trainers can build the same plan.
"""

from __future__ import annotations

import bisect
import logging
import math
from dataclasses import dataclass, field

import torch

from .advantage import _float64_device
from .estimators import ESTIMATORS, SCALES, estimator_name, scale_advantages
from .estimators.registry import STAGE_FILLS
from .objectives import DEFAULT_K, DEFAULT_OBJECTIVE, VALID_OBJECTIVES, rank_weights
from .prompt_weights import PromptWeightSpec, PromptWindow, parse_prompt_weight, success_rates
from .schedule import ObjectiveStage, parse_objective_at_k, parse_objective_schedule, string_list

__all__ = ["DEFAULT_ESTIMATOR", "DEFAULT_K", "DEFAULT_OBJECTIVE", "DEFAULT_SCALE", "SCALES", "GroupedBatch",
           "ObjectivePlan", "ObjectiveStage", "build_plan", "normalize_scale"]  # fmt: skip

logger = logging.getLogger(__name__)

# Every default a setting has, in one place (the objective's and K's live with the presets, `core.objectives`):
# `OrderGradConfig`'s field defaults, verl's unset keys and the comparison tools all come from here.
DEFAULT_ESTIMATOR = "ordergrad"
DEFAULT_SCALE = "none"  # scale_rewards: OrderGrad's advantages unscaled (unbiased); TRL's GRPOConfig has "group"

# Estimator inputs that config fields set: naming them in `ordergrad_estimator_kwargs` is an error.
FIELD_OF = {"objective": "ordergrad_objective", "k": "ordergrad_k", "scale": "scale_rewards"}


def normalize_scale(scale, field: str = "scale_rewards") -> str:
    """`scale_rewards` as one of `SCALES`: TRL's command line and YAML give a bool (or "true"/"false"), which is
    "group" or "none"; `None` is `DEFAULT_SCALE`. `ValueError` naming `field` and the valid values otherwise."""
    if scale is None:
        return DEFAULT_SCALE
    if isinstance(scale, str) and scale.strip().lower() in ("true", "false"):
        scale = scale.strip().lower() == "true"
    if isinstance(scale, bool):
        return "group" if scale else "none"
    if scale not in SCALES:
        valid = ", ".join(map(repr, SCALES[:-1])) + f" or {SCALES[-1]!r}"
        raise ValueError(f"{field} must be {valid} (or a bool), got {scale!r}.")
    return scale


@dataclass(frozen=True)
class ObjectivePlan:
    """What trains: one estimator with `stages` (a schedule has several), or `per_reward` objectives (one per
    reward function, with the `ordergrad` estimator); then `prompt_weight` (None: none) multiplies each group's
    advantages, and `scale` (`scale_rewards`) divides them by a std."""

    estimator: str
    scale: str
    num_generations: int
    stages: tuple[ObjectiveStage, ...]
    per_reward: tuple[ObjectiveStage, ...] | None = None  # one stage per reward function, `start_step` 0
    scheduled: bool = False
    prompt_weight: PromptWeightSpec | None = None
    # (estimator, stage, group size) -> whether the estimator is defined there (eval groups can be smaller)
    _defined: dict = field(default_factory=dict, compare=False, repr=False)

    def stage_index(self, step: int) -> int:
        """Index of the stage active at optimizer step `step`."""
        return bisect.bisect_right([s.start_step for s in self.stages], step) - 1

    def stage_at(self, step: int) -> ObjectiveStage:
        """The stage active at optimizer step `step` (what an engine hands `grouped_advantages`)."""
        return self.stages[self.stage_index(step)]

    def is_defined(self, stage: ObjectiveStage, n: int, estimator: str | None = None) -> bool:
        """Whether the estimator of `stage` is defined on groups of `n` rollouts (e.g. not `ordergrad` with n <= K)."""
        key = (estimator or self.estimator, id(stage), n)  # the plan holds its stages: ids stay
        if key not in self._defined:
            self._defined[key] = _defined(ESTIMATORS[key[0]], stage, n)
        return self._defined[key]

    def advantages(self, rewards: torch.Tensor, stage: ObjectiveStage, estimator: str | None = None) -> torch.Tensor:
        """`(G, N)` rewards -> `(G, N)` advantages of `stage` (unscaled); zeros where the estimator is undefined for
        this N (evaluation with N <= K). `estimator` defaults to the plan's (per-reward specs use `ordergrad`)."""
        if not self.is_defined(stage, rewards.shape[-1], estimator):
            return torch.zeros_like(rewards)
        return ESTIMATORS[estimator or self.estimator](rewards, stage).to(rewards.dtype)

    def prompt_weights(self, rewards: torch.Tensor, window: PromptWindow | None = None, bins: int | None = None):
        """`(G, N)` rewards -> `((G,) float64 prompt weights, (G,) p_hat)`, or None without a prompt weight.

        `window`: the stateful weight's reference (CurveRL's past batches; None or empty: this batch's own rates); the
        caller pushes the batch into it afterwards. `bins`: the histogram's bins, default N + 1."""
        if self.prompt_weight is None:
            return None
        p_hat = success_rates(rewards, self.prompt_weight)  # (G,)
        reference = window.reference() if window is not None else None
        bins = rewards.shape[-1] + 1 if bins is None else bins
        return self.prompt_weight.weights(p_hat.cpu(), max(bins, 2), reference).to(p_hat.device), p_hat

    def scale_advantages(self, advantages: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
        """`scale_rewards`, the one place it is applied, after the estimator (TRL's order): `(G, N)` advantages
        divided by each group's (`"group"`) or the whole batch's (`"batch"`) reward std + 1e-4; `"none"`: as given."""
        return scale_advantages(advantages, rewards, self.scale)

    def scaled_advantages(self, rewards: torch.Tensor, stage: ObjectiveStage | None = None,
                          window: PromptWindow | None = None) -> torch.Tensor:  # fmt: skip
        """`(..., N)` rewards, one group per row -> the `(..., N)` advantages that train: `grouped_advantages` of the
        rows as equal groups in order, measured against `window`, which this does not update."""
        n = rewards.shape[-1]
        group = torch.arange(rewards.numel() // n, device=rewards.device).repeat_interleave(n)
        batch = self.grouped_advantages(rewards.reshape(-1), group, stage, window, push=False)
        return batch.advantages.view_as(rewards)

    def grouped_advantages(self, scores: torch.Tensor, group: torch.Tensor, stage: ObjectiveStage | None = None,
                           window: PromptWindow | None = None, *, push: bool = True, compute_advantages=None,
                           compute_prompt_weights=None) -> GroupedBatch:  # fmt: skip
        """The one composition of what trains (estimator, prompt weight, `scale_rewards`, NaN mask) for rows grouped
        by id, in any order and of any sizes: one batched `(G_n, n)` call per group size (TRL's view), `"batch"`
        scaling over every row at once. The trainer (equal groups in order, with its hooks), the engines (verl's and
        SkyRL's ragged batches) and `scaled_advantages` all come here.

        Args:
            scores: `(bs,)` one reward per row; NaN marks an unscorable row (its advantage is 0).
            group: `(bs,)` int64 group id of each row, 0..G-1.
            stage: default the first.
            window: a stateful prompt weight's window, every group weighed against it as it is now (a histogram of
                largest group size + 1 bins, as CurveRL's); with `push` the batch's p_hat then joins it (the
                engines; the trainer pushes once per trained batch, after all of dynamic sampling's rounds).
            compute_advantages: `(G_n, n)` rewards -> advantages, in place of the stage's estimator (the trainer's
                hook; called for every size, those where the estimator is undefined too).
            compute_prompt_weights: `(G, N)` rewards -> `(G,)` weights, in place of the plan's w(p_hat) (the
                trainer's hook; groups of one size only).
        """
        stage = self.stages[0] if stage is None else stage
        sizes = torch.bincount(group)  # (G,)
        order = torch.argsort(group, stable=True)  # (bs,) rows of group 0, then group 1, ...
        starts = torch.cumsum(sizes, 0) - sizes  # (G,) where each group begins in `order`
        blocks = {n: order[starts[sizes == n, None] + torch.arange(n, device=scores.device)]
                  for n in sizes[sizes > 0].unique().tolist()}  # group size n -> its groups' rows (G_n, n)
        estimate = compute_advantages or (lambda rewards: self.advantages(rewards, stage))
        estimated = {n: _shaped(estimate(scores[rows]), rows.shape, "compute_advantages")
                     for n, rows in blocks.items()}  # fmt: skip
        p_hat, weights = self._weights(scores, sizes, blocks, window, compute_prompt_weights)
        adv = torch.zeros_like(scores)
        for n, rows in blocks.items():
            block = estimated[n] if weights is None else _weigh(estimated[n], weights[sizes == n])
            adv[rows] = self.scale_advantages(block, scores[rows]) if self.scale == "group" else block
        if self.scale == "batch":  # one std over every reward of the batch
            adv = self.scale_advantages(adv, scores)
        adv = torch.nan_to_num(adv, nan=0.0).masked_fill(torch.isnan(scores), 0.0)
        signal = torch.zeros_like(sizes).index_add_(0, group, (adv != 0).to(sizes.dtype))  # (G,) nonzero rows
        if push and window is not None and p_hat is not None:
            window.push(p_hat[sizes > 0])
        undefined = tuple(n for n in blocks if not self.is_defined(stage, n))
        return GroupedBatch(adv, scores, group, p_hat, weights, undefined, signal == 0)

    def _weights(self, scores, sizes, blocks, window, hook):
        """`((G,) p_hat, (G,) weights)` (Nones without a prompt weight), p_hat once per batch over every group: a
        stateful weight's reference (an empty window: this batch's rates) is the whole batch. A hook reads the rewards
        its own way (e.g. thresholded): p_hat is then computed only for the window, which holds the raw rates."""
        if self.prompt_weight is None:
            return None, None
        p_hat = None
        if hook is None or window is not None:
            p_hat = torch.full(sizes.shape, torch.nan, dtype=torch.float64, device=scores.device)  # (G,)
            for n, rows in blocks.items():
                p_hat[sizes == n] = success_rates(scores[rows], self.prompt_weight)
        if hook is None:
            reference = window.reference() if window is not None else None
            weights = self.prompt_weight.weights(p_hat.cpu(), max(int(sizes.max()) + 1, 2), reference)
            return p_hat, weights.to(scores.device)
        if len(blocks) != 1:
            raise ValueError("compute_prompt_weights takes a (G, N) batch: every group must have the same size, got "
                             f"sizes {sorted(blocks)}")
        (rows,) = blocks.values()
        return p_hat, _shaped(hook(scores[rows]), rows.shape[:1], "compute_prompt_weights")


@dataclass(frozen=True)
class GroupedBatch:
    """`grouped_advantages`' record of a batch, what callers log and select on (nothing recomputed); it unpacks as
    `(advantages, undefined_sizes)`, the pair the method returned before."""

    advantages: torch.Tensor  # (bs,) what trains: 0 for a NaN score and where the estimator is undefined
    rewards: torch.Tensor  # (bs,) the scores given
    group: torch.Tensor  # (bs,) the group id of each row, as given
    p_hat: torch.Tensor | None  # (G,) float64 each group's mean scorable reward (NaN: none); None without a weight
    prompt_weights: torch.Tensor | None  # (G,) each group's weight; None without a prompt weight
    undefined_sizes: tuple[int, ...]  # group sizes where the estimator is undefined (their rows get 0)
    empty: torch.Tensor  # (G,) bool: every advantage of the group is 0, no learning signal (dynamic sampling's rule)

    def __iter__(self):
        return iter((self.advantages, self.undefined_sizes))


def _shaped(value: torch.Tensor, shape, hook: str) -> torch.Tensor:
    if tuple(value.shape) != tuple(shape):  # refused by name: a silent broadcast would train on a wrong shape
        raise ValueError(f"{hook} returned shape {tuple(value.shape)}, expected {tuple(shape)}")
    return value


def _weigh(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """`(G, N)` advantages times each group's `(G,)` weight in float64 (on the CPU for MPS), in their dtype."""
    device = _float64_device(advantages)
    weighted = advantages.to(device).double() * weights.to(device).double()[:, None]
    return weighted.to(advantages.dtype).to(advantages.device)


def _defined(spec, stage: ObjectiveStage, n: int) -> bool:
    """Whether `spec` gives advantages on groups of `n`: its registry row's `min_group` first (fewer rollouts give
    all 0, by its contract, tests/test_estimators_contract.py), then a call on a zero group for the widths it refuses
    outright (maxk_tang's N not a multiple of k, which no minimum states)."""
    if spec.min_group is not None and n < spec.group_minimum(**_filled(spec, stage)):
        return False
    try:
        spec(torch.zeros(1, n, dtype=torch.float64), stage)
    except ValueError:
        return False
    return True


def _filled(spec, stage: ObjectiveStage) -> dict:
    """The keyword parameters `spec` runs with at `stage`: those the stage fills (its weights, K) and its options."""
    return {**{name: getattr(stage, STAGE_FILLS[name]) for name in spec.reads}, **stage.options}


def check_objective(objective, k, num_generations: int, objective_field: str, k_field: str,
                    at: str = "") -> torch.Tensor:  # fmt: skip
    """The `(K,)` rank weights of `objective` at `k`, checked (the one derivation of a stage's weights); `at` names
    a list entry (schedule, per-reward objectives) holding both, else two fields hold them."""
    at = f"{at}: " if at else ""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{at}{k_field} must be a positive integer, got {k!r}.")
    if k >= num_generations:
        raise ValueError(
            f"{at}{k_field} ({k}) must be smaller than num_generations ({num_generations}): the leave-one-out "
            f"advantage of a rollout needs K other rollouts of the same prompt. Lower {k_field} or raise "
            "num_generations."
        )
    if not isinstance(objective, str):
        raise ValueError(
            f"{at}{objective_field} must be a string (a preset or comma-separated weights), got {objective!r}. "
            f"Valid forms: {VALID_OBJECTIVES}."
        )
    try:
        weights = rank_weights(objective, k)
    except ValueError as err:
        raise ValueError(f"{at}{objective_field}={objective!r} is not valid for {k_field}={k}: {err}") from err
    if not weights.any():
        raise ValueError(
            f"{at}{objective_field}={objective!r} has all-zero weights at {k_field}={k}: every advantage would be 0. "
            f"Give at least one nonzero weight, or a preset. Valid forms: {VALID_OBJECTIVES}."
        )
    why = weight_scale_problem(weights, num_generations)
    if why:
        raise ValueError(
            f"{at}{objective_field}={objective!r} at {k_field}={k}, num_generations={num_generations}: {why}. Only "
            "the weights' ratios set the direction: rescale them (e.g. so the largest is 1), or use a preset."
        )
    return weights


_F32 = torch.finfo(torch.float32)


def weight_scale_problem(weights: torch.Tensor, n: int) -> str | None:
    """Why `(K,)` rank weights cannot train in float32 with groups of `n` (> K) rollouts, or None if they can.

    Every advantage is a sum of gap terms, and the 0/1 groups (c = 0..n successes) put a unit gap at each position
    once, so their advantages show the weights' effective scale: weights finite on their own can still give
    advantages that overflow (`1e308,1e308`: inf, then NaN, then 0 after TRL's `nan_to_num`), whose squares (the
    gradient norm) overflow, or that round to 0 or to float32 subnormals (`1e-320,0`): either way nothing trains."""
    from .advantage import lstat_advantage  # the plan's only use of the kernel

    k = weights.numel()
    groups = (torch.arange(n)[None, :] < torch.arange(n + 1)[:, None]).to(torch.float64)  # (n+1, n), row c: c ones
    largest = (k * lstat_advantage(groups, weights)).abs().max().item()  # K * a_i: what the trainer uses
    if not math.isfinite(largest):
        return "its advantages overflow float64 (inf or NaN), so training would see 0 or NaN"
    if largest > math.sqrt(_F32.max):
        return (f"its advantages reach {largest:.3g}, whose squares (the gradient norm) overflow float32 "
                f"(max {_F32.max:.3g})")
    if largest < _F32.tiny:
        return (f"its largest advantage is {largest:.3g}, below float32's smallest normal number ({_F32.tiny:.3g}): "
                "in float32 every advantage is 0 or a subnormal, so training would not move")
    return None


def _stage(name: str, start: int, objective: str, k: int, weights: torch.Tensor, options: dict, n: int,
           setting: str) -> ObjectiveStage:  # fmt: skip
    """The stage, checked: num_generations against the registry row's `min_group` (below it every advantage would be
    0), then its estimator run once on a zero group of size n (bad option values raise there, in its own words)."""
    stage = ObjectiveStage(start, objective, k, weights, dict(options))
    spec = ESTIMATORS[name]
    if spec.min_group is not None and n < spec.group_minimum(**_filled(spec, stage)):
        raise ValueError(f"ordergrad_estimator={name!r} with {setting}, num_generations={n}: it needs groups of at "
                         f"least {spec.group_minimum(**_filled(spec, stage))} rollouts (fewer give every advantage "
                         "0); raise num_generations.")
    try:
        ESTIMATORS[name](torch.zeros(1, n, dtype=torch.float64), stage)
    except (ValueError, TypeError) as err:
        raise ValueError(f"ordergrad_estimator={name!r} with {setting}, num_generations={n}: {err}") from err
    return stage


def _estimator(name, kwargs) -> tuple[str, dict]:
    name = DEFAULT_ESTIMATOR if name is None else estimator_name(name)
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ValueError(
            f"ordergrad_estimator_kwargs must be a dict or a JSON object string like '{{\"beta\": 2.0}}', got "
            f"{kwargs!r}."
        )
    kwargs = kwargs or {}
    reserved = sorted(set(kwargs) & set(FIELD_OF))
    if reserved:
        raise ValueError(
            f"ordergrad_estimator_kwargs must not set {reserved}: set {', '.join(FIELD_OF[p] for p in reserved)} "
            "instead."
        )
    accepted = [option for option in ESTIMATORS[name].options if option not in FIELD_OF]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise ValueError(
            f"ordergrad_estimator_kwargs: estimator {name!r} takes no parameter(s) {unknown}; it accepts: "
            f"{', '.join(accepted) or 'none'}."
        )
    return name, kwargs


def build_plan(
    *, num_generations: int, objective=None, k=None, schedule=None, reward_objectives=None, estimator=None,
    estimator_kwargs=None, scale=None, prompt_weight=None, prompt_weight_window=None,
) -> ObjectivePlan:
    """The plan of `OrderGradConfig`'s fields (`ordergrad_objective`, `ordergrad_k`, ...) over groups of
    `num_generations` rollouts; a setting left out (or `None`) takes its default, the same one the config's field
    has. Raises `ValueError` naming the field and its valid values for every bad setting."""
    weight = parse_prompt_weight(prompt_weight, prompt_weight_window)
    name, options = _estimator(estimator, estimator_kwargs)
    scale = normalize_scale(scale)
    spec = ESTIMATORS[name]
    if k is None:
        k = min(DEFAULT_K, num_generations - 1)
    if objective is None:
        objective = DEFAULT_OBJECTIVE if isinstance(k, int) and k >= 2 else "Mean"
    weights = check_objective(objective, k, num_generations, "ordergrad_objective", "ordergrad_k")
    kw = f"ordergrad_estimator_kwargs={estimator_kwargs!r}, " if options else ""
    reads = ", ".join(f"{FIELD_OF[r]}={v!r}" for r, v in (("objective", objective), ("k", k)) if r in spec.reads)

    stages, per_reward = [], None
    if schedule is not None:
        if reward_objectives is not None:
            raise ValueError("ordergrad_reward_objectives and ordergrad_schedule cannot be combined; set one of them.")
        if not spec.reads:
            raise ValueError(
                f"ordergrad_schedule has no effect with ordergrad_estimator={name!r}, which takes neither an objective "
                f"nor k; use one that does: {', '.join(n for n, s in ESTIMATORS.items() if s.reads)}."
            )
        for index, (start, obj, kf) in enumerate(parse_objective_schedule(schedule)):
            at = f"ordergrad_schedule[{index}]={schedule[index]!r}"
            w = check_objective(obj, kf, num_generations, "objective", "K", at=at)
            stages.append(_stage(name, start, obj, kf, w, options, num_generations, kw + at))
    else:
        setting = (kw + reads).rstrip(", ") or "defaults"
        stages.append(_stage(name, 0, objective, k, weights, options, num_generations, setting))
    if reward_objectives is not None:
        if name != "ordergrad":
            raise ValueError(
                "ordergrad_reward_objectives needs ordergrad_estimator='ordergrad' (the per-function advantages are "
                f"OrderGrad's L-statistic advantages), got ordergrad_estimator={name!r}."
            )
        per_reward = []
        for index, entry in enumerate(string_list(reward_objectives, "ordergrad_reward_objectives")):
            obj, kf = parse_objective_at_k(entry, k, "ordergrad_reward_objectives")
            at = f"ordergrad_reward_objectives[{index}]={entry!r}"
            w = check_objective(obj, kf, num_generations, "objective", "K", at=at)
            per_reward.append(_stage("ordergrad", 0, obj, kf, w, {}, num_generations, at))
        per_reward = tuple(per_reward)
    return ObjectivePlan(name, scale, num_generations, tuple(stages), per_reward, schedule is not None, weight)


def warn_about_eval_groups(plan: ObjectivePlan, n_eval: int | None) -> None:
    """A warning when `num_generations_eval` leaves some objective's advantage undefined in evaluation."""
    if n_eval is None or n_eval == plan.num_generations:
        return
    stages = plan.per_reward if plan.per_reward is not None else plan.stages
    name = "ordergrad" if plan.per_reward is not None else plan.estimator
    undefined = [s for s in stages if not _defined(ESTIMATORS[name], s, n_eval)]
    if undefined or n_eval < max(s.k for s in stages):
        logger.warning(
            "num_generations_eval (%d): %s in evaluation, where those advantages are set to 0 (the eval policy "
            "loss is only logged); ordergrad/objective is logged only for K <= num_generations_eval.",
            n_eval,
            f"the advantage is undefined for K={undefined[0].k}" if undefined else "some K exceed it",
        )
