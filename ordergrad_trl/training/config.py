"""`OrderGradConfig`: TRL's `GRPOConfig` plus the objective and K, with defaults that keep the gradient unbiased."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig

from ..core.estimators import estimator_help, estimator_name
from ..core.objectives import VALID_OBJECTIVES
from ..core.prompt_weights import DEFAULT_PROMPT_WEIGHT, DEFAULT_WINDOW, prompt_weight_help
from ..core.plan import (
    DEFAULT_ESTIMATOR, DEFAULT_K, DEFAULT_OBJECTIVE, DEFAULT_SCALE, ObjectivePlan, build_plan, normalize_scale,
    warn_about_eval_groups,
)  # fmt: skip
from ..core.schedule import ObjectiveStage
from .config_checks import (
    check_dynamic_sampling, check_fields_trl_reads, check_log_ks, check_vllm_version, explain_post_init_error,
    warn_sparse_window, warn_unused_settings,
)  # fmt: skip
from .dynamic_sampling import dynamic_sampling_help
from .engine_guard import check_world_size
from .launch_env import check_launch_environment
from .numeric_fields import check_numeric_fields, plain_numpy_values
from .passk import default_log_ks

logger = logging.getLogger(__name__)

# On-policy, these loss types give a gradient along -(1/N) sum_i A_i grad log pi(o_i); the value is its scale.
EXACT_LOSS_TYPES = {"luspo": "exactly 1", "dr_grpo": "1/max_completion_length (a constant)"}

__all__ = ["OrderGradConfig", "DEFAULT_K", "DEFAULT_OBJECTIVE"]


@dataclass
class OrderGradConfig(GRPOConfig):
    r"""
    Configuration class for the [`~ordergrad_trl.OrderGradTrainer`].

    Everything in [`~trl.GRPOConfig`] applies unchanged; this class adds the OrderGrad fields below and changes a
    few defaults (see the note at the end).

    The objective is J = E[sum_j w_j R_(j:K)]: a weighted sum of the sorted rewards of K i.i.d. rollouts of the same
    prompt (ascending: `w[0]` weighs the smallest). Each of the `num_generations` (N > K) rollouts gets the unbiased
    leave-one-out advantage `K * lstat_advantage(group_rewards, w)`, so `"Mean"` reproduces RLOO.

    Parameters:
        > Parameters that control the OrderGrad objective

        ordergrad_objective (`str`, *optional*):
            Order-statistic objective over K rollouts: a preset of `ordergrad_trl.core.objectives.PRESETS`
            (case-insensitive) such as `"Mean"`, `"ReMax"` (pass@K for 0/1 rewards), `"TopM:m"` or `"CVaR:q"`, or
            K comma-separated weights, ascending (`"0,0,0.5,0.5"` is the mean of the best 2 of 4). Parsed by
            [`~ordergrad_trl.rank_weights`]. If `None` (default), `DEFAULT_OBJECTIVE` (`ordergrad_trl.core.objectives`:
            the mean of the best 2 of K), or `"Mean"` when K is 1.
        ordergrad_k (`int`, *optional*):
            K, the number of rollouts the objective is defined over. Must be smaller than `num_generations`
            (the leave-one-out baseline of a rollout needs K other rollouts of its prompt). If `None` (default),
            `min(DEFAULT_K, num_generations - 1)` (`DEFAULT_K` of `ordergrad_trl.core.objectives`), so that any
            `num_generations` works without setting K (2 and 1 at `num_generations` 3 and 2). Evaluation with
            `num_generations_eval <= K` is allowed: the advantages there are undefined and set to 0 (the eval loss
            is only logged) and `ordergrad/objective` is logged only when `num_generations_eval >= K`.

        > Parameters that choose the advantage estimator, a schedule, or one objective per reward function

        ordergrad_estimator (`str`, *optional*, defaults to `"ordergrad"`):
            Group advantage estimator, a name registered in [`~ordergrad_trl.core.estimators.ESTIMATORS`] (the
            field's help lists them; formulas, papers, bias and centering in docs/estimators.md). Estimators that
            take `k` get `ordergrad_k` (or the schedule's K), those that take an objective get
            `ordergrad_objective`, and `"grpo"` centers the rewards (the trainer applies `scale_rewards` after every
            estimator; set `scale_rewards="group"` for TRL's default GRPO). `ordergrad/objective` is always the estimate of
            J for `ordergrad_objective` over `ordergrad_k` (or the schedule's current ones), whichever estimator
            trains, so that runs with different estimators can be compared on one objective.
        ordergrad_estimator_kwargs (`dict` or `str`, *optional*):
            The estimator's other parameters, e.g. `{"beta": 2.0}` for `"rs_grpo"` (a JSON string on the command
            line). `objective`, `k` and `scale` come from the fields above and are rejected here.
        ordergrad_schedule (`list[str]`, *optional*):
            Piecewise-constant objective schedule, entries `"STEP OBJECTIVE@K"`, e.g. `["0 ReMax@8",
            "100 ReMax@4", "200 Mean@1"]`: from optimizer step STEP (`trainer.state.global_step` when the rollouts
            are scored) on, train OBJECTIVE over K. The first entry starts at step 0, steps increase strictly, and
            every K must be smaller than `num_generations`. When set, it overrides `ordergrad_objective` and
            `ordergrad_k`. With an estimator that takes `k`
            but no objective (`pkpo`, `passk_chen`, `maxk_tang`) only K changes the training signal (the objective
            changes the `ordergrad/objective` estimate); estimators with neither are rejected. Logged each step:
            `ordergrad/k` and `ordergrad/schedule_stage` (index of the active entry).
        ordergrad_reward_objectives (`list[str]`, *optional*):
            One objective per reward function, `"OBJECTIVE"` or `"OBJECTIVE@K"` (K defaults to `ordergrad_k`),
            e.g. `["TopM:2@4", "Mean"]` for the best 2 of 4 on correctness and the mean of a length penalty. The
            objective becomes J = sum_f reward_weight_f * J_f with J_f the L-statistic of reward function f alone
            over K_f draws, and rollout i gets `sum_f reward_weight_f * K_f * lstat_advantage(rewards_f, w_f)[i]`,
            unbiased for grad J by linearity. A `None` from function f leaves that rollout out of f's ranking (its
            term for f is 0; unlike the default, where a `None` counts as reward 0 in the weighted sum); a rollout
            with every function `None` gets 0. Needs `ordergrad_estimator="ordergrad"`, no `ordergrad_schedule`,
            and as many entries as reward functions (checked when the trainer is built); `ordergrad_objective` is
            then unused. Logs `ordergrad/objective/<reward function name>` (J_f, unweighted) and
            `ordergrad/objective` (sum_f reward_weight_f * J_f).

        > Parameters that weight prompts (which prompts carry the gradient; rank weights say which rollouts do)

        ordergrad_prompt_weight (`str`, *optional*, defaults to `"none"`):
            Multiplies each group's advantages (after the estimator, before `scale_rewards`) by w(p_hat), p_hat the
            group's mean scorable reward: a weight of `PROMPT_WEIGHTS` (core/prompt_weights.py; the field's help
            lists them), e.g. `"inverse"` (MaxRL's 1/p_hat: `"grpo"` unscaled with it is `"maxrl"`). Composes with
            every estimator, objective, schedule and per-reward objectives. Formulas, bias: docs/estimators.md.
        ordergrad_prompt_weight_window (`int`, *optional*, defaults to `10`):
            `"curverl"`'s window in batches (0: the current batch alone); saved with checkpoints, restored on resume.

        > Parameters that spend the batch on groups that carry a gradient (docs/training.md, "Dynamic sampling")

        ordergrad_dynamic_sampling (`str`, *optional*, defaults to `"off"`):
            A mode of `DYNAMIC_SAMPLING` (training/dynamic_sampling.py; the field's help lists each, what it reads
            and whether it refills; docs/training.md), e.g. `"refill"`: drop the groups whose advantages are all 0
            after the estimator, prompt weight and scaling, and generate further prompts in their place. A mode that
            leaves groups out needs a `loss_type` among `"dr_grpo"`, `"luspo"`, `"dapo"`, `"cispo"`, `"vespo"`; one
            that refills also not vLLM server mode.
        ordergrad_dynamic_sampling_max_rounds (`int`, *optional*, defaults to `3`):
            A mode that refills: the most extra generation rounds per batch; then it trains on the groups it has.

        > Parameters that control logging

        ordergrad_log_ks (`list[int]`, *optional*):
            The k of the logged `ordergrad/pass@k` and `ordergrad/pass^k`: unbiased, from each group's rewards (the
            weighted sum of the reward functions), averaged over the groups of the logging window; named
            `ordergrad/best@k` / `ordergrad/worst@k` (the expected best / worst of k rewards) when the batch's rewards
            are not all 0/1. If `None` (default), the powers of two up to the group size: `num_generations` in
            training, `num_generations_eval` in evaluation. A k larger than a mode's group size is skipped there; a
            k larger than both is refused. `[]` logs none.

    > [!NOTE]
    > These parameters have default values different from [`~trl.GRPOConfig`], chosen so that on-policy the
    > gradient of the loss is the unbiased estimate -(1/N) sum_i A_i grad log pi(o_i) of -grad J, up to a constant:
    > - `loss_type`: `"dr_grpo"` instead of `"dapo"`. `dr_grpo` sums each rollout's token log-probabilities and
    >   divides by the constant N * `max_completion_length`: the unbiased gradient times 1/`max_completion_length`.
    >   The constant keeps the gradient norm independent of the length limit and in the range of TRL's default
    >   `dapo` (learning rates carry over), so that `max_grad_norm=1.0` clips only outliers. `"luspo"` gives the
    >   same gradient without the constant (scale exactly 1): its norm grows with completion length and
    >   `max_grad_norm=1.0` then clips most steps, so raise `max_grad_norm` (or set it to 0) with it (measured
    >   in docs/training.md, "Loss scaling and gradient clipping"). `"dapo"`, `"bnpo"`, `"cispo"`, `"vespo"`
    >   divide by the batch's token count, so the step size varies from batch to batch with completion length
    >   (which correlates with reward: biased across batches; `"cispo"` also scales by `epsilon_high`); `"grpo"`
    >   and `"sapo"` divide each rollout by its own length, which changes the direction (biased).
    > - `importance_sampling_level`: `None`, resolved by the trainer to `"sequence"` for `luspo` (the LUSPO paper's
    >   setup) and to TRL's `"token"` for every other loss type. On-policy both levels give the same gradient.
    >
    > Fields keep the values you set (`None` for a default): what trains is `ordergrad_plan`, built from them when
    > the config is (and again in a copy made with `dataclasses.replace` or loaded from YAML or JSON).
    > - `scale_rewards`: `"none"` instead of `"group"`. The OrderGrad advantage is already centered and in reward
    >   units. `"group"` divides each group's advantages by the standard deviation of its rewards (as GRPO does):
    >   ranks and signs are kept, but each prompt is reweighted by a function of its own samples, which biases the
    >   gradient (Dr. GRPO's difficulty bias). `"batch"` divides by one batch-wide standard deviation: the relative
    >   weighting of groups is kept and only the batch's step size changes (an adaptive step size).
    >
    > Other TRL settings that keep the gradient unbiased when left at their defaults: `beta=0.0` (a KL penalty
    > adds a regularizer to J), `num_iterations=1` and `steps_per_generation == gradient_accumulation_steps`
    > (reused rollouts are off-policy; PPO clipping then biases), `mask_truncated_completions=False`,
    > `top_entropy_quantile=1.0`, `entropy_coef=0.0`. `max_grad_norm` (default `1.0`) rescales any step whose
    > gradient norm exceeds it, which biases those steps (with `dr_grpo` only outliers do); `max_grad_norm=0`
    > disables it. With vLLM,
    > `vllm_importance_sampling_correction` reweights for the sampler/trainer mismatch; truncating or masking
    > extreme ratios (`vllm_importance_sampling_mode`) trades a small bias for variance, as in GRPO.
    >
    > `multi_objective_aggregation` must be `"sum_then_normalize"` (the default): the objective ranks the weighted
    > sum of the reward functions. `"normalize_then_sum"` z-scores every reward function within its group, so each
    > rollout's reward depends on its group mates and no longer has an unbiased order-statistic estimate.
    """

    # JSON strings from the command line are parsed into dicts by TrainingArguments.__post_init__ (fenced: trl_private)
    _VALID_DICT_FIELDS = GRPOConfig._VALID_DICT_FIELDS + ["ordergrad_estimator_kwargs"]

    ordergrad_objective: str | None = field(
        default=None,
        metadata={
            "help": f"Order-statistic objective over K rollouts: {VALID_OBJECTIVES}. Presets are case-insensitive. "
            f"If unset, {DEFAULT_OBJECTIVE!r}, or 'Mean' when K is 1."
        },
    )
    ordergrad_k: int | None = field(
        default=None,
        metadata={
            "help": "K, the number of rollouts the objective is defined over; must be smaller than "
            f"`num_generations`. If unset, min({DEFAULT_K}, num_generations - 1). With `num_generations_eval <= K` the eval "
            "advantages are set to 0."
        },
    )

    ordergrad_estimator: str = field(
        default=DEFAULT_ESTIMATOR,
        metadata={
            "help": f"Group advantage estimator (case-insensitive): {estimator_help()}. Those that take k get "
            "ordergrad_k, those that take an objective ordergrad_objective; scale_rewards applies after any of them."
        },
    )
    ordergrad_estimator_kwargs: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "Other estimator parameters, e.g. '{\"beta\": 2.0}' for rs_grpo (a JSON string on the command "
            "line). objective, k and scale come from ordergrad_objective, ordergrad_k and scale_rewards."
        },
    )
    ordergrad_schedule: list[str] | None = field(
        default=None,
        metadata={
            "help": "Piecewise-constant objective schedule, entries 'STEP OBJECTIVE@K' (first STEP 0, strictly "
            "increasing), e.g. '0 ReMax@8' '100 ReMax@4' '200 Mean@1'. Overrides ordergrad_objective and "
            "ordergrad_k; logged as ordergrad/k and ordergrad/schedule_stage."
        },
    )
    ordergrad_reward_objectives: list[str] | None = field(
        default=None,
        metadata={
            "help": "One objective per reward function, 'OBJECTIVE' or 'OBJECTIVE@K' (K defaults to ordergrad_k), "
            "e.g. 'TopM:2@4' 'Mean'. J = sum_f reward_weight_f * J_f; ordergrad estimator only."
        },
    )

    ordergrad_prompt_weight: str = field(
        default=DEFAULT_PROMPT_WEIGHT,
        metadata={
            "help": f"Prompt weight w(p_hat) multiplying each group's advantages, p_hat the group's success rate: "
            f"{prompt_weight_help()}. Applied after the estimator, before scale_rewards."
        },
    )
    ordergrad_prompt_weight_window: int = field(
        default=DEFAULT_WINDOW,
        metadata={
            "help": "curverl: the past batches whose pass rates form its reference (CurveRL's pool_num); 0: none."
        },
    )

    ordergrad_dynamic_sampling: str = field(
        default="off",
        metadata={"help": f"{dynamic_sampling_help()}."},
    )
    ordergrad_dynamic_sampling_max_rounds: int = field(
        default=3, metadata={"help": "a mode that refills: the most extra generation rounds per batch (>= 1)."}
    )

    ordergrad_log_ks: list[int] | None = field(
        default=None,
        metadata={
            "help": "k of the logged ordergrad/pass@k and ordergrad/pass^k (best@k / worst@k when rewards are not 0/1), "
            "e.g. 1 4 8. If unset, the powers of two up to the group size (num_generations in training, "
            "num_generations_eval in evaluation). Each k at most num_generations or num_generations_eval."
        },
    )

    # Parameters whose default values are overridden from GRPOConfig
    loss_type: str = field(
        default="dr_grpo",
        metadata={
            "help": "Loss formulation (see GRPOConfig). Defaults to 'dr_grpo': on-policy its gradient is the "
            "unbiased -(1/N) sum_i A_i grad log pi(o_i) times the constant 1/max_completion_length, with a norm "
            "that does not grow with the length limit. 'luspo' is the same without the constant (raise "
            "max_grad_norm with it); 'dapo', 'bnpo', 'cispo', 'vespo' scale by a per-batch token count; 'grpo' and "
            "'sapo' change its direction."
        },
    )
    importance_sampling_level: str | None = field(
        default=None,
        metadata={
            "help": "'token' or 'sequence' (see GRPOConfig). If `None`, 'sequence' for loss_type='luspo' and 'token' "
            "otherwise; on-policy both give the same gradient."
        },
    )
    scale_rewards: str = field(
        default=DEFAULT_SCALE,
        metadata={
            "help": "Scaling of the OrderGrad advantages: 'none' (default, unbiased), 'group' (divide by each "
            "group's reward std as GRPO does: biased), or 'batch' (divide by the batch reward std: a per-batch step "
            "size)."
        },
    )

    def __post_init__(self):
        plain_numpy_values(self)  # np.int64(4) is 4 for every field, ordergrad_* included, before any check
        check_fields_trl_reads(self)
        check_numeric_fields(self)  # inf, NaN, 1.5 where an integer belongs, out of range: refused by name
        check_launch_environment(self)  # a stale WORLD_SIZE, fsdp unlaunched, deepspeed missing: before start-up
        # A copy (dataclasses.replace, a saved config reloaded) carries both of TRL's derived batch fields, which
        # TRL refuses together: re-derive the generation batch, and refuse only a pair that disagrees.
        copied = self.generation_batch_size if self.steps_per_generation is not None else None
        if copied is not None:
            self.generation_batch_size = None
        try:
            super().__post_init__()
        except ValueError as err:  # e.g. TRL's batch divisibility, computed with a world size accelerate got wrong
            explain_post_init_error(self, err)
            raise
        check_world_size(self.world_size)
        if copied is not None and copied != self.generation_batch_size:
            raise ValueError(
                f"generation_batch_size ({copied}) and steps_per_generation ({self.steps_per_generation}) disagree: "
                f"steps_per_generation x per_device_train_batch_size x processes is {self.generation_batch_size}. "
                "Set one of them and leave the other None (a dataclasses.replace copy carries TRL's derived values "
                "of both: pass generation_batch_size=None, steps_per_generation=None to derive them again)."
            )
        check_vllm_version(self)
        self.scale_rewards = normalize_scale(self.scale_rewards)  # the CLI's and YAML's bools included
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                f"multi_objective_aggregation={self.multi_objective_aggregation!r} is not supported by OrderGrad: "
                "use 'sum_then_normalize' (the default). The objective ranks the weighted sum of the reward "
                "functions; 'normalize_then_sum' z-scores each function within its group, which makes a rollout's "
                "reward depend on its group mates."
            )
        self.ordergrad_estimator = estimator_name(self.ordergrad_estimator)
        # what trains, built (and so checked) once; not a field: a copy or a loaded config builds its own
        self.ordergrad_plan: ObjectivePlan = build_plan(
            objective=self.ordergrad_objective, k=self.ordergrad_k, schedule=self.ordergrad_schedule,
            reward_objectives=self.ordergrad_reward_objectives, estimator=self.ordergrad_estimator,
            estimator_kwargs=self.ordergrad_estimator_kwargs, scale=self.scale_rewards,
            num_generations=self.num_generations, prompt_weight=self.ordergrad_prompt_weight,
            prompt_weight_window=self.ordergrad_prompt_weight_window,
        )  # fmt: skip
        for by in ("ordergrad_schedule", "ordergrad_reward_objectives"):
            ignored = ["ordergrad_objective"] + (["ordergrad_k"] if by == "ordergrad_schedule" else [])
            for name in ignored if getattr(self, by) is not None else []:
                if getattr(self, name) is not None:
                    logger.warning("%s=%r is ignored: %s sets it.", name, getattr(self, name), by)
        warn_about_eval_groups(self.ordergrad_plan, self.num_generations_eval)
        check_log_ks(self)
        check_dynamic_sampling(self)
        warn_unused_settings(self)  # a setting given that nothing reads is said, not silently dropped
        warn_sparse_window(self)  # CurveRL's bins emptier than its window can fill: groups with weight 0

    def ordergrad_ks(self, group_size: int) -> list[int]:
        """The k of the pass@k metrics logged for groups of `group_size` rollouts (ascending, each <= group_size)."""
        if self.ordergrad_log_ks is None:
            return default_log_ks(group_size)
        return sorted(k for k in set(self.ordergrad_log_ks) if k <= group_size)

    # ------------------------------------------------------------------------------------------ looked up in the plan

    def ordergrad_stages(self) -> list[ObjectiveStage]:
        """The objective schedule as the plan's stages (one stage from step 0 when `ordergrad_schedule` is unset)."""
        return list(self.ordergrad_plan.stages)

    def ordergrad_reward_specs(self) -> list[tuple[str, int]] | None:
        """`ordergrad_reward_objectives` as `(objective, K)` pairs, or `None` when unset."""
        per_reward = self.ordergrad_plan.per_reward
        return None if per_reward is None else [(s.objective, s.k) for s in per_reward]

    def resolved_importance_sampling_level(self) -> str:
        """`importance_sampling_level`, or its default for `loss_type` when unset (the trainer hands TRL this)."""
        if self.importance_sampling_level is not None:
            return self.importance_sampling_level
        return "sequence" if self.loss_type == "luspo" else "token"
