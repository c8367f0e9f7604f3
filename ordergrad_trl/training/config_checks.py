"""Checks of `OrderGradConfig` fields that TRL reads or fails on without naming them, apart from the config class.

Each takes the config (`self`, as the methods they were) and raises `ValueError` naming the field and its valid values.
"""

from __future__ import annotations

import json
import math

import numpy
import trl
from packaging.version import InvalidVersion, Version

import ordergrad_trl.training.trl_private as trl_private  # TRL and vLLM probing, fenced there
from .engine_guard import check_world_size

__all__ = ["check_dynamic_sampling", "check_fields_trl_reads", "check_log_ks", "check_vllm_version",
           "explain_post_init_error"]


def explain_post_init_error(self, err: ValueError) -> None:
    """A `ValueError` from TRL's / transformers' `__post_init__`, made one line naming the fix where ours is clearer:
    bf16 (TRL's default) on a machine without a GPU; else a world size accelerate got wrong (`check_world_size`)."""
    if "use_cpu" in str(err) and not self.use_cpu:
        raise ValueError(
            f"{str(err).strip()} On a machine without a GPU set use_cpu=True and bf16=False (TRL turns bf16 on by "
            "default): OrderGradConfig(..., use_cpu=True, bf16=False), or --use_cpu true --bf16 false."
        ) from None
    if hasattr(self, "distributed_state"):  # set once transformers' own checks passed this far
        check_world_size(self.world_size)


def check_fields_trl_reads(self) -> None:
    """Fields TRL's `__post_init__` would fail on without naming them (a division by zero, a bare JSON error)."""
    for name, low in (("num_generations", 2), ("num_generations_eval", 1)):
        value = getattr(self, name)
        if (value is not None or name == "num_generations") and (
            isinstance(value, bool) or not isinstance(value, int) or value < low
        ):
            raise ValueError(f"{name} must be an integer >= {low} (rollouts per prompt), got {value!r}.")
    kwargs = self.ordergrad_estimator_kwargs
    if isinstance(kwargs, str):  # TrainingArguments parses it (and its values: "3" -> 3) once it is valid JSON
        try:
            json.loads(kwargs)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"ordergrad_estimator_kwargs must be a dict or a JSON object string like '{{\"beta\": 2.0}}' "
                f"(keys quoted; in YAML also a mapping {{beta: 2.0}}), got {kwargs!r}: not valid JSON ({err.msg})."
            ) from None
    checked = (("loss_type", trl_private.trl_loss_types()), ("importance_sampling_level", ("token", "sequence")))
    for name, valid in checked:
        value = getattr(self, name)
        if valid and value is not None and value not in valid:  # TRL checks them only at the first step
            raise ValueError(f"{name} must be one of {', '.join(map(repr, valid))}, got {value!r}.")
    weights = self.reward_weights
    if weights is not None and not isinstance(weights, (list, tuple)):
        raise ValueError(f"reward_weights must be a list of numbers, one per reward function, got {weights!r}.")
    if weights:
        if not all(isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) for w in weights):
            raise ValueError(f"reward_weights must be finite numbers, one per reward function, got {weights!r}.")
        if not any(weights):
            raise ValueError(f"reward_weights are all zero ({weights!r}): every advantage would be 0.")
        with numpy.errstate(over="ignore"):  # TRL keeps them as a float32 tensor
            stored = [float(numpy.float32(w)) for w in weights]
        if not all(map(math.isfinite, stored)) or not any(stored):
            raise ValueError(
                f"reward_weights {weights!r} are {'all zero' if all(map(math.isfinite, stored)) else 'inf'} "
                f"in float32, the dtype TRL keeps them in (largest {numpy.finfo(numpy.float32).max:.3g}, smallest "
                f"{numpy.finfo(numpy.float32).smallest_subnormal:.3g}): rescale them."
            )

def check_log_ks(self) -> None:
    """A k that no group can give fails here, rather than never being logged."""
    ks, largest = self.ordergrad_log_ks, max(self.num_generations, self.num_generations_eval or 0)
    if ks is None:
        return
    if isinstance(ks, (str, int)) or not all(isinstance(k, int) and not isinstance(k, bool) for k in ks):
        raise ValueError(f"ordergrad_log_ks must be a list of integers k >= 1, e.g. [1, 4, 8], got {ks!r}.")
    bad = [k for k in ks if not 1 <= k <= largest]
    if bad:
        raise ValueError(
            f"ordergrad_log_ks: k={bad[0]} is outside 1..{largest} (the largest group: num_generations="
            f"{self.num_generations}, num_generations_eval={self.num_generations_eval}); pass@k needs k "
            "rollouts of the same prompt."
        )


def check_dynamic_sampling(self) -> None:
    """`ordergrad_dynamic_sampling` with the loss types whose normalizer it can make that of the kept groups alone."""
    from .dynamic_sampling import DYNAMIC_SAMPLING, SUPPORTED_LOSS_TYPES  # local: it imports the trainer's dependencies

    mode = self.ordergrad_dynamic_sampling
    if not isinstance(mode, str) or mode not in DYNAMIC_SAMPLING:
        raise ValueError(f"ordergrad_dynamic_sampling must be one of {', '.join(map(repr, DYNAMIC_SAMPLING))}, got "
                         f"{mode!r}.")
    row = DYNAMIC_SAMPLING[mode]
    rounds = self.ordergrad_dynamic_sampling_max_rounds
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"ordergrad_dynamic_sampling_max_rounds must be an integer >= 1, got {rounds!r}.")
    if row.leaves_out is not None and self.loss_type not in SUPPORTED_LOSS_TYPES:
        raise ValueError(
            f"ordergrad_dynamic_sampling={mode!r} needs loss_type in {', '.join(map(repr, SUPPORTED_LOSS_TYPES))}, "
            f"got {self.loss_type!r}: it normalizes each micro-batch by itself, so the dropped groups cannot be "
            "taken out of it exactly."
        )
    if row.refills and self.use_vllm and self.vllm_mode != "colocate":
        raise ValueError(f"ordergrad_dynamic_sampling={mode!r} supports vllm_mode='colocate' (and use_vllm=False), "
                         f"got vllm_mode={self.vllm_mode!r}: use a mode that does not refill ('filter') with a vLLM "
                         "server.")


def warn_unused_settings(self) -> None:
    """A warning naming each setting given that nothing reads: a window without a weight that keeps one,
    refill rounds without refill. Given, not default: a default is nobody's choice."""
    import dataclasses
    import logging

    defaults = {f.name: f.default for f in dataclasses.fields(self)}
    spec = self.ordergrad_plan.prompt_weight
    unused = []
    if self.ordergrad_prompt_weight_window != defaults["ordergrad_prompt_weight_window"] \
            and (spec is None or not spec.row.stateful):
        unused.append(("ordergrad_prompt_weight_window", "only a prompt weight with a window of past batches "
                       f"(curverl) reads it; ordergrad_prompt_weight is {self.ordergrad_prompt_weight!r}"))
    from .dynamic_sampling import DYNAMIC_SAMPLING

    if self.ordergrad_dynamic_sampling_max_rounds != defaults["ordergrad_dynamic_sampling_max_rounds"] \
            and not DYNAMIC_SAMPLING[self.ordergrad_dynamic_sampling].refills:
        refilling = " or ".join(repr(m.name) for m in DYNAMIC_SAMPLING.values() if m.refills)
        unused.append(("ordergrad_dynamic_sampling_max_rounds", f"only ordergrad_dynamic_sampling={refilling} reads "
                       f"it; it is {self.ordergrad_dynamic_sampling!r}"))
    for name, why in unused:
        logging.getLogger("ordergrad_trl.training.config").warning(
            "%s=%r is unused: %s.", name, getattr(self, name), why)


def warn_sparse_window(self) -> None:
    """A warning when CurveRL's window can hold too few rates for its bins. Its histogram has N + 1 bins, and a group
    with c = 1..N-1 successes whose bin holds no rate of the window gets weight 0 (no gradient). Before step s the
    window holds at most min(W, s - 1) batches of B prompts' rates (B = generation_batch_size / N); the rule: warn
    when min(W, max_steps - 1) x B < 2 (N - 1), fewer than two rates per bin a mixed group can fall in. Measured on
    the `digits20` crossover (W = 10, 8 steps, B = 4, N = 16: 28 < 30): 70% of CurveRL's groups had no gradient over
    steps 2-8, against 39% for MaxRL (docs/results.md)."""
    import logging

    spec = self.ordergrad_plan.prompt_weight
    if spec is None or not spec.row.stateful:
        return
    n, window = self.num_generations, self.ordergrad_prompt_weight_window
    per_batch = max(1, self.generation_batch_size // n)
    batches = window if self.max_steps is None or self.max_steps <= 0 else min(window, self.max_steps - 1)
    if batches * per_batch < 2 * (n - 1):
        logging.getLogger("ordergrad_trl.training.config").warning(
            "ordergrad_prompt_weight=%r: its window holds at most %d rates (ordergrad_prompt_weight_window %d "
            "batches, %d before the last of max_steps %s, x %d prompts per batch), fewer than 2 x (N - 1) = %d for "
            "the %d bins a group with 1..%d successes can fall in: groups in an empty bin get weight 0 (on the "
            "digits20 crossover, 70%% of CurveRL's groups). Raise the window, the prompts per step or max_steps.",
            self.ordergrad_prompt_weight, batches * per_batch, window, batches, self.max_steps, per_batch,
            2 * (n - 1), n - 1, n - 1)


class DatasetTooSmall(ValueError):
    """A training set that cannot fill one generation batch: the trainer would train 0 steps and save the base model."""


def check_dataset_size(args, train_dataset) -> None:
    """DatasetTooSmall naming the sizes when `train_dataset` holds fewer prompts than one generation batch draws:
    TRL's sampler drops an incomplete batch, so such a run takes no step (dynamic sampling or not) and exits 0."""
    if train_dataset is None or not hasattr(train_dataset, "__len__"):  # an iterable dataset: no size to check
        return
    need = args.generation_batch_size // args.num_generations
    if len(train_dataset) < need:
        raise DatasetTooSmall(
            f"train_dataset has {len(train_dataset)} prompt(s), fewer than one generation batch draws ({need} = "
            f"generation_batch_size {args.generation_batch_size} / num_generations {args.num_generations}; "
            f"generation_batch_size = per_device_train_batch_size {args.per_device_train_batch_size} x "
            f"{args.world_size} process(es) x steps_per_generation {args.steps_per_generation}): no step would "
            "train. Use more data, or a smaller per_device_train_batch_size or steps_per_generation")


def check_vllm_version(self) -> None:
    """With `use_vllm`, an installed vLLM outside TRL's supported range fails here, not deep in generation."""
    if not self.use_vllm:
        return
    found, supported = trl_private.installed_vllm_version(), trl_private.trl_vllm_range()
    if found is None:  # TRL's trainer says how to install it; the recipe refuses it first (math_cvar_inputs)
        return
    try:
        version = Version(Version(found).base_version)  # base_version: "0.24.0+cu129" is 0.24.0
    except InvalidVersion:
        raise ValueError(f"use_vllm=True: the installed vLLM's version {found!r} is not a version number; "
                         f"reinstall vllm{supported} or set use_vllm=False.") from None
    if version not in supported:
        distribution = (trl_private.installed_vllm() or ("vllm",))[0]
        raise ValueError(
            f"use_vllm=True: found vllm {found}, but trl {trl.__version__} supports vllm{supported} (found as the "
            f"distribution {distribution}). Install a supported one: pip install \"{distribution}{supported}\" (or "
            "pip install \"ordergrad-trl[vllm]\"), or set use_vllm=False."
        )
