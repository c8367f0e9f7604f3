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
    from .dynamic_sampling import MODES, SUPPORTED_LOSS_TYPES  # local: it imports the trainer's dependencies

    mode = self.ordergrad_dynamic_sampling
    if mode not in MODES:
        raise ValueError(f"ordergrad_dynamic_sampling must be one of {', '.join(map(repr, MODES))}, got {mode!r}.")
    rounds = self.ordergrad_dynamic_sampling_max_rounds
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"ordergrad_dynamic_sampling_max_rounds must be an integer >= 1, got {rounds!r}.")
    if mode != "off" and self.loss_type not in SUPPORTED_LOSS_TYPES:
        raise ValueError(
            f"ordergrad_dynamic_sampling={mode!r} needs loss_type in {', '.join(map(repr, SUPPORTED_LOSS_TYPES))}, "
            f"got {self.loss_type!r}: it normalizes each micro-batch by itself, so the dropped groups cannot be "
            "taken out of it exactly."
        )
    if mode == "refill" and self.use_vllm and self.vllm_mode != "colocate":
        raise ValueError(f"ordergrad_dynamic_sampling='refill' supports vllm_mode='colocate' (and use_vllm=False), "
                         f"got vllm_mode={self.vllm_mode!r}: use 'filter' with a vLLM server.")


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
