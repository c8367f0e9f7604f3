"""`OrderGradConfig`: TRL's `GRPOConfig` plus the objective and K, with defaults that keep the gradient unbiased."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from trl import GRPOConfig

from .objectives import VALID_OBJECTIVES, rank_weights

logger = logging.getLogger(__name__)

# On-policy, these loss types give a gradient along -(1/N) sum_i A_i grad log pi(o_i); the value is its scale.
EXACT_LOSS_TYPES = {"luspo": "exactly 1", "dr_grpo": "1/max_completion_length (a constant)"}


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

        ordergrad_objective (`str`, *optional*, defaults to `"TopM:2"`):
            Order-statistic objective over K rollouts: a preset (case-insensitive) such as `"Mean"`, `"ReMax"`
            (pass@K for 0/1 rewards), `"ReMin"`, `"Median"`, `"Rank:r"`, `"TopM:m"`, `"BotM:m"`, `"TrimM:m"`,
            `"WinsorizedM:m"`, `"UpperTailMean:q"`, `"LowerTailMean:q"` / `"CVaR:q"`, `"Quantile:q"`,
            `"HarrellDavis:q"`, `"GMD"`, `"LMoment:r"`, or K comma-separated weights, ascending (`"0,0,0.5,0.5"`
            is `"TopM:2"` at K=4). Parsed by [`~ordergrad_trl.rank_weights`].
        ordergrad_k (`int`, *optional*, defaults to `4`):
            K, the number of rollouts the objective is defined over. Must be smaller than `num_generations`
            (the leave-one-out baseline of a rollout needs K other rollouts of its prompt). Evaluation with
            `num_generations_eval <= K` is allowed: the advantages there are undefined and set to 0 (the eval loss
            is only logged) and `ordergrad/objective` is logged only when `num_generations_eval >= K`.

    > [!NOTE]
    > These parameters have default values different from [`~trl.GRPOConfig`], chosen so that on-policy the
    > gradient of the loss is exactly the unbiased estimate -(1/N) sum_i A_i grad log pi(o_i) of -grad J:
    > - `loss_type`: `"luspo"` instead of `"dapo"`. `luspo` sums each rollout's token log-probabilities (scale
    >   exactly 1). Overrides trade as follows: `"dr_grpo"` keeps the direction, scaled by the constant
    >   1/`max_completion_length` (compensate with the learning rate); `"dapo"`, `"bnpo"`, `"cispo"`, `"vespo"`
    >   divide by the batch's token count, so the step size varies from batch to batch with completion length
    >   (which correlates with reward: biased across batches; `"cispo"` also scales by `epsilon_high`);
    >   `"grpo"` and `"sapo"` divide each rollout by its own length, which changes the direction (biased).
    > - `importance_sampling_level`: `None`, resolved to `"sequence"` for `luspo` (the LUSPO paper's setup) and
    >   to TRL's `"token"` for every other loss type. On-policy both levels give the same gradient.
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
    > gradient norm exceeds it, which biases those steps; set `max_grad_norm=0` to disable it. With vLLM,
    > `vllm_importance_sampling_correction` reweights for the sampler/trainer mismatch; truncating or masking
    > extreme ratios (`vllm_importance_sampling_mode`) trades a small bias for variance, as in GRPO.
    >
    > `multi_objective_aggregation` must be `"sum_then_normalize"` (the default): the objective ranks the weighted
    > sum of the reward functions. `"normalize_then_sum"` z-scores every reward function within its group, so each
    > rollout's reward depends on its group mates and no longer has an unbiased order-statistic estimate.
    """

    ordergrad_objective: str = field(
        default="TopM:2",
        metadata={
            "help": "Order-statistic objective over K rollouts: a preset (Mean, ReMax/Max, ReMin/Min, Median, "
            "Rank:r, TopM:m, BotM:m, TrimM:m, WinsorizedM:m, UpperTailMean:q, LowerTailMean:q/CVaR:q, Quantile:q, "
            "HarrellDavis:q, GMD, LMoment:r) or K comma-separated ascending weights. Defaults to 'TopM:2' (mean of "
            "the best 2 of K)."
        },
    )
    ordergrad_k: int = field(
        default=4,
        metadata={
            "help": "K, the number of rollouts the objective is defined over; must be smaller than "
            "`num_generations`. With `num_generations_eval <= K` the eval advantages are set to 0."
        },
    )

    # Parameters whose default values are overridden from GRPOConfig
    loss_type: str = field(
        default="luspo",
        metadata={
            "help": "Loss formulation (see GRPOConfig). Defaults to 'luspo': on-policy its gradient is exactly the "
            "unbiased -(1/N) sum_i A_i grad log pi(o_i). 'dr_grpo' scales it by 1/max_completion_length; 'dapo', "
            "'bnpo', 'cispo', 'vespo' by a per-batch token count; 'grpo' and 'sapo' change its direction."
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
        default="none",
        metadata={
            "help": "Scaling of the OrderGrad advantages: 'none' (default, unbiased), 'group' (divide by each "
            "group's reward std as GRPO does: biased), or 'batch' (divide by the batch reward std: a per-batch step "
            "size)."
        },
    )

    def __post_init__(self):
        if self.importance_sampling_level is None:
            self.importance_sampling_level = "sequence" if self.loss_type == "luspo" else "token"
        super().__post_init__()

        if isinstance(self.ordergrad_k, bool) or not isinstance(self.ordergrad_k, int) or self.ordergrad_k < 1:
            raise ValueError(f"ordergrad_k must be a positive integer, got {self.ordergrad_k!r}.")
        if self.ordergrad_k >= self.num_generations:
            raise ValueError(
                f"ordergrad_k ({self.ordergrad_k}) must be smaller than num_generations ({self.num_generations}): "
                "the leave-one-out advantage of a rollout needs K other rollouts of the same prompt. Lower "
                "ordergrad_k or raise num_generations."
            )
        try:
            rank_weights(self.ordergrad_objective, self.ordergrad_k)
        except ValueError as err:
            raise ValueError(
                f"ordergrad_objective={self.ordergrad_objective!r} is not valid for ordergrad_k={self.ordergrad_k}: "
                f"{err}"
            ) from err
        except TypeError as err:
            raise ValueError(
                f"ordergrad_objective must be a string (a preset or comma-separated weights), got "
                f"{self.ordergrad_objective!r}. Valid forms: {VALID_OBJECTIVES}."
            ) from err

        if self.scale_rewards not in ("none", "group", "batch"):
            raise ValueError(
                f"scale_rewards must be 'none', 'group' or 'batch' (or a bool), got {self.scale_rewards!r}."
            )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                f"multi_objective_aggregation={self.multi_objective_aggregation!r} is not supported by OrderGrad: "
                "use 'sum_then_normalize' (the default). The objective ranks the weighted sum of the reward "
                "functions; 'normalize_then_sum' z-scores each function within its group, which makes a rollout's "
                "reward depend on its group mates."
            )
        if self.num_generations_eval is not None and self.num_generations_eval <= self.ordergrad_k:
            logger.warning(
                "num_generations_eval (%d) <= ordergrad_k (%d): the OrderGrad advantage is undefined in evaluation; "
                "eval advantages are set to 0 (the eval policy loss is 0) and ordergrad/objective is logged only when "
                "num_generations_eval >= ordergrad_k.",
                self.num_generations_eval,
                self.ordergrad_k,
            )
