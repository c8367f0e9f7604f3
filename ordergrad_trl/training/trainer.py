"""`OrderGradTrainer`: TRL's `GRPOTrainer` with OrderGrad's unbiased leave-one-out advantages.

TRL computes GRPO advantages inline in the private `_generate_and_score_completions` (no hook). Instead of copying
it, we let it run and then replace its result: `_calculate_rewards` is wrapped only to keep the rewards it returns
(already gathered from all processes), and after the parent returns we recompute the advantages on those rewards
and overwrite this process's slice of `output["advantages"]` and the completions-table log. These two private
methods are the main seams; every TRL internal used is named and checked at import in `trl_private.py`, and
`tests/test_trl_contract.py` checks their behaviour for the pinned TRL range.
"""

from __future__ import annotations

import copy
import logging
import os
import textwrap
import warnings

import torch
import trl
from packaging.version import Version
from trl import GRPOTrainer
from trl.extras.profiling import profiling_context

from ..core.advantage import _float64_device
from ..core.plan import GroupedBatch, ObjectivePlan
from ..tasks.reward_settings import reward_env_settings
from .config import EXACT_LOSS_TYPES, OrderGradConfig
from .dynamic_sampling import dynamic_sampling_of
from .checkpoint_checks import check_checkpoint, resolve_resume
from .config_checks import check_dataset_size
from .engine_guard import check_engine
from .finite_guard import (
    StopOnNonFiniteWeights, check_finite_loss, check_finite_weights, check_reward_magnitudes, warn_if_overflowing,
)  # fmt: skip
from .objective_metrics import log_objective
from .output_dir import refuse_links, save_errors
from .passk import group_passk
from .prompt_weights import attach_window, join_window, log_prompt_weights, window_of
from .reward_checks import check_prompt_weight_range
from .resolved_config import SaveResolvedConfig, resolved_config
from .trl_private import TESTED_TRL_VERSIONS, check_instance, shutdown_colocated_vllm

logger = logging.getLogger(__name__)

if Version(trl.__version__) not in TESTED_TRL_VERSIONS:
    warnings.warn(
        f"ordergrad_trl was tested with trl{TESTED_TRL_VERSIONS}, found trl {trl.__version__}. OrderGradTrainer "
        "relies on GRPOTrainer._calculate_rewards and _generate_and_score_completions; run "
        "tests/test_trl_contract.py before trusting it.",
        stacklevel=2,
    )


class OrderGradTrainer(GRPOTrainer):
    r"""
    [`~trl.GRPOTrainer`] whose advantages are OrderGrad's unbiased leave-one-out advantages for an order-statistic
    objective (Max@K, Top-M@K, CVaR, ...). Drop-in: takes the same arguments as `GRPOTrainer`, with an
    [`~ordergrad_trl.OrderGradConfig`] as `args`; generation (transformers, vLLM colocate/server), DeepSpeed, FSDP,
    PEFT, multi-GPU, evaluation and logging are TRL's.

    For each prompt, the weighted sum of the reward functions over its N = `num_generations` rollouts forms a group,
    and rollout i gets the advantage `K * lstat_advantage(group_rewards, rank_weights(objective, K))[i]` (see
    [`~OrderGradTrainer.compute_advantages`]); with the default `loss_type="dr_grpo"` the resulting gradient is an
    unbiased estimate of the gradient of J. A rollout for which every reward function returned `None` is
    unscorable: it is left out of its group's ranking and gets advantage 0.

    `ordergrad_estimator` swaps in another group estimator of `ordergrad_trl.core.estimators` (GRPO, RLOO, PKPO, ...),
    `ordergrad_schedule` changes the objective and K with `state.global_step` (the active stage is a function of
    the step alone, so it survives checkpoint resumes), and `ordergrad_reward_objectives` gives each reward
    function its own objective (see [`~OrderGradTrainer.compute_advantages_per_reward`]).

    Logged, besides TRL's metrics (docs/training.md#logged-metrics defines each): `ordergrad/objective` (the unbiased
    estimate of J), `/k`, `/schedule_stage`, `/prompt_weight/*`, `/frac_zero_adv_groups` (groups with no learning
    signal), `/dynamic_sampling/*`, `/adv_abs_mean`, `/pass@k` and `/pass^k` (`/best@k`, `/worst@k` if not 0/1).

    The completions table (`log_completions=True`) shows these advantages, not GRPO's.

    Example: `OrderGradTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=my_reward, args=OrderGradConfig(
    output_dir="out", ordergrad_objective="ReMax", ordergrad_k=4, num_generations=8), train_dataset=dataset).train()`.
    """

    # Read by TRL's `create_model_card` (BaseTrainer), which writes README.md with every checkpoint and on push.
    _tag_names = ["trl", "grpo", "ordergrad"]
    _paper = {
        "title": "OrderGrad",
        "id": "2606.06096",
        "citation": textwrap.dedent("""\
            @article{parmas2026ordergrad,
                title        = {{OrderGrad}},
                author       = {Parmas and others},
                year         = 2026,
                eprint       = {arXiv:2606.06096},
            }"""),
    }

    @property
    def _name(self) -> str:
        """The method as the model card names it: OrderGrad, the objective, K and the estimator being trained."""
        args = getattr(self, "args", None)
        if not isinstance(args, OrderGradConfig):
            return "OrderGrad"
        plan = args.ordergrad_plan
        if plan.per_reward is not None:
            numbered = [f"reward function {f}" for f in range(len(plan.per_reward))]
            names = getattr(self, "reward_func_names", None) or numbered
            what = "objectives " + ", ".join(f"{s.objective} over K={s.k} on {n}"
                                             for s, n in zip(plan.per_reward, names))  # fmt: skip
        elif plan.scheduled:
            what = "objective schedule " + ", ".join(f"{s.objective} over K={s.k} from step {s.start_step}"
                                                      for s in plan.stages)  # fmt: skip
        else:
            what = f"objective {plan.stages[0].objective} over K={plan.stages[0].k}"
        n = args.num_generations
        weight = f", prompt weight {plan.prompt_weight}" if plan.prompt_weight is not None else ""
        return f"OrderGrad ({what} of N={n} rollouts per prompt, estimator {args.ordergrad_estimator}{weight})"

    def __init__(self, model, reward_funcs=None, args: OrderGradConfig | None = None, *pargs, **kwargs):
        if args is None:
            model_name = model if isinstance(model, str) else model.config._name_or_path
            args = OrderGradConfig(f"{str(model_name).split('/')[-1]}-OrderGrad")
        elif not isinstance(args, OrderGradConfig):
            raise TypeError(
                f"OrderGradTrainer needs `args` to be an OrderGradConfig, got {type(args).__name__}. OrderGradConfig "
                "accepts every GRPOConfig field, plus the ordergrad_* fields."
            )
        if args.importance_sampling_level is None:  # resolved per trainer, so that copies of the config re-resolve
            args = copy.copy(args)
            args.importance_sampling_level = args.resolved_importance_sampling_level()
        # before the model loads: a set smaller than one generation batch would train 0 steps and exit 0
        check_dataset_size(args, kwargs.get("train_dataset", pargs[0] if pargs else None))
        reward_env_settings()  # ORDERGRAD_REWARD_* set since import are checked now, not at the first reward call
        funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]  # a range the weight cannot take:
        check_prompt_weight_range(args, funcs, [getattr(f, "__name__", repr(f)) for f in funcs])  # before the model
        super().__init__(model, reward_funcs, args, *pargs, **kwargs)
        check_engine(self)  # FSDP / DeepSpeed asked for but not built (accelerate's CPU fallback): refused, not DDP
        check_instance(self)  # the private instance attributes the trainer reads (trl_private.SEAMS)
        self.ordergrad_plan: ObjectivePlan = args.ordergrad_plan  # what trains; built and checked with the config
        per_reward = self.ordergrad_plan.per_reward
        # after super().__init__: environments may have added reward functions
        if per_reward is not None and len(per_reward) != len(self.reward_funcs):
            raise ValueError(
                f"ordergrad_reward_objectives has {len(per_reward)} entries {args.ordergrad_reward_objectives} but "
                f"there are {len(self.reward_funcs)} reward functions {self.reward_func_names}: give one objective "
                "per reward function, in the same order."
            )
        # The run's record (every setting and the plan that trains) in output_dir, beside every checkpoint and the
        # final model, for library users too: a saver passed in (the recipe's, with its script and model
        # settings) is used as it is; else one holding this config.
        savers = [c for c in self.callback_handler.callbacks if isinstance(c, SaveResolvedConfig)]
        if not savers:
            savers = [SaveResolvedConfig(resolved_config({"training": args}, self.ordergrad_plan))]
            self.add_callback(savers[0])
        self.ordergrad_saver = savers[0]
        self.add_callback(StopOnNonFiniteWeights(self))
        attach_window(self)  # a stateful prompt weight's window, saved in trainer_state.json with every checkpoint
        from .reward_checks import checked_reward_funcs  # local: this seam stays self-contained

        # a string or a list from a reward function then fails naming it, not deep in TRL's torch.tensor(...)
        self.reward_funcs = checked_reward_funcs(self.reward_funcs, self.reward_func_names)
        # Set by `_calculate_rewards` for the enclosing `_generate_and_score_completions` call only.
        self._ordergrad_gathered_rewards = None
        self.ordergrad_dynamic_sampling = dynamic_sampling_of(self)  # None for a mode that trains every group
        if args.loss_type not in EXACT_LOSS_TYPES:
            logger.warning(
                "loss_type=%r: the gradient is no longer an unbiased estimate of grad J up to a constant "
                "(see OrderGradConfig); 'dr_grpo' (default) or 'luspo' keep it unbiased.",
                args.loss_type,
            )

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """`Trainer.train`, after the checkpoint to resume is checked file by file (`checkpoint_checks`): a damaged
        one fails naming its file, and a missing optimizer.pt is warned about."""
        checkpoint = resolve_resume(resume_from_checkpoint, self.args.output_dir)
        if checkpoint is not None and os.path.isdir(checkpoint):  # transformers names a missing folder itself
            check_checkpoint(checkpoint)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.ordergrad_dynamic_sampling is not None:  # whether this optimizer step has trained on any group
            self.ordergrad_dynamic_sampling.note_micro_step()
        check_finite_loss(self, loss)  # every process agrees, before the optimizer steps on it
        return loss

    def end(self) -> None:
        """Call once at the end of a script: shut a colocated vLLM engine down, then finish the trackers and destroy
        the process group (transformers' `Trainer.end()`, spelled here for releases without it). Left to interpreter
        exit, vLLM's engine tears its process groups down after the trainer's group is gone, and every rank prints
        `ValueError: Invalid process group specified` after a good run."""
        shutdown_colocated_vllm(self)  # now, while the process groups vLLM's teardown destroys still exist
        self.accelerator.end_training()

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        """`Trainer.save_model` (refused when a weight is not finite: a diverged model is never saved as if fine),
        then the run's record (`ordergrad_resolved_config.json`: every setting and the objective plan) beside the
        saved model (main process): a final model says what trained it."""
        if not _internal_call:  # a checkpoint's weights were checked at that step's end (StopOnNonFiniteWeights)
            check_finite_weights(self, f"not saving to {output_dir or self.args.output_dir}")
        if self.is_world_process_zero():  # transformers' writes follow links: none may be there
            refuse_links(output_dir or self.args.output_dir)
        with save_errors(output_dir or self.args.output_dir):  # a full disk: an OSError naming the folder
            super().save_model(output_dir, _internal_call)
        if self.is_world_process_zero():
            self.ordergrad_saver.write(output_dir or self.args.output_dir)

    def _save_checkpoint(self, model, trial):
        if self.is_world_process_zero():  # a checkpoint folder (or a link in its place) must hold no link
            refuse_links(self.args.output_dir)
        with save_errors(f"{self.args.output_dir}/checkpoint-{self.state.global_step}"):
            return super()._save_checkpoint(model, trial)

    # ------------------------------------------------------------------------------------------ active objective

    @property
    def ordergrad_stage(self) -> int:
        """Index into `ordergrad_plan.stages` of the stage active at `state.global_step` (0 without a schedule)."""
        return self.ordergrad_plan.stage_index(self.state.global_step)

    @property
    def ordergrad_objective(self) -> str:
        """The active objective (of the schedule's current stage, else the configured one)."""
        return self.ordergrad_plan.stages[self.ordergrad_stage].objective

    @property
    def ordergrad_k(self) -> int:
        """The active K."""
        return self.ordergrad_plan.stages[self.ordergrad_stage].k

    @property
    def ordergrad_weights(self) -> torch.Tensor:
        """`(K,)` float64 rank weights of the active objective."""
        return self.ordergrad_plan.stages[self.ordergrad_stage].weights

    ordergrad_prompt_window = property(window_of, doc="The stateful prompt weight's `PromptWindow` (None without).")

    # ------------------------------------------------------------------------------------------ advantages

    def compute_advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        r"""
        Advantages of one batch of groups. Override this to change the estimator; the trainer does the rest
        (gathering, grouping, reward weighting, `scale_rewards`, slicing per process, logging).

        Args:
            rewards (`torch.Tensor`):
                `(num_groups, N)` float32 rewards (the weighted sum over reward functions), one row per prompt, on
                the accelerator device. NaN marks an unscorable rollout. N is `num_generations` in training and
                `num_generations_eval` in evaluation, where it can be `<= K` (even 1).

        Returns:
            `torch.Tensor`: `(num_groups, N)` advantages, same dtype and device. NaN entries are replaced by 0 and
            unscorable rollouts are forced to 0 by the caller.

        The default applies `args.ordergrad_estimator` with the active stage's objective and K; for `"ordergrad"`
        (default) that is `K * lstat_advantage(rewards, w)` (computed in float64). Where the estimator is undefined
        for the group size (evaluation with N <= K for `"ordergrad"`), all zeros. Not called with
        `ordergrad_reward_objectives` (see `compute_advantages_per_reward`).

        Example: train Max@K on a thresholded reward (solved or not), keeping unscorable rollouts as NaN:

        ```python
        class SolvedAtKTrainer(OrderGradTrainer):
            def compute_advantages(self, rewards):  # (num_groups, N)
                solved = torch.where(rewards.isnan(), rewards, (rewards >= 1.0).to(rewards.dtype))
                return super().compute_advantages(solved)
        ```
        """
        return self.ordergrad_plan.advantages(rewards, self.ordergrad_plan.stages[self.ordergrad_stage])

    def compute_prompt_weights(self, rewards: torch.Tensor) -> torch.Tensor:
        r"""
        `(num_groups, N)` rewards, as `compute_advantages` gets them -> `(num_groups,)` float64 prompt weights, which
        multiply each group's advantages before `scale_rewards` (not called with `ordergrad_prompt_weight="none"`).
        Override it to weight prompts another way. The default is the configured w(p_hat), p_hat each group's mean
        scorable reward, against `ordergrad_prompt_window` for a stateful weight (which the batch joins afterwards,
        in training only).
        """
        return self.ordergrad_plan.prompt_weights(rewards, self.ordergrad_prompt_window)[0]

    def compute_advantages_per_reward(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        r"""
        Advantages with one objective per reward function (`ordergrad_reward_objectives`).

        Args:
            rewards_per_func (`torch.Tensor`):
                `(num_groups, N, num_funcs)` float32 rewards, unweighted; NaN where a function returned `None`.

        Returns:
            `torch.Tensor`: `(num_groups, N)` advantages
            `sum_f reward_weight_f * K_f * lstat_advantage(rewards_per_func[..., f], w_f)`, unbiased for the gradient
            of J = sum_f reward_weight_f * J_f. A NaN from function f leaves that rollout out of f's ranking and
            makes its term for f zero; a function whose K_f is at least N (evaluation) contributes 0.
        """
        device = _float64_device(rewards_per_func)  # the CPU where there is no float64 (MPS)
        weights = self.reward_weights.to(device).to(torch.float64)  # (num_funcs,)
        total = torch.zeros(rewards_per_func.shape[:2], dtype=torch.float64, device=device)
        for f, spec in enumerate(self.ordergrad_plan.per_reward):
            rewards_f = rewards_per_func[..., f].to(device).double()  # (num_groups, N)
            total += weights[f] * self.ordergrad_plan.advantages(rewards_f, spec, estimator="ordergrad")
        return total.to(rewards_per_func.dtype).to(rewards_per_func.device)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._ordergrad_gathered_rewards = rewards_per_func  # (N_global, num_funcs), same on every process
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        if self.ordergrad_dynamic_sampling is not None and self.model.training:  # one _ordergrad_score per round
            output, batches = self.ordergrad_dynamic_sampling.generate(inputs, self._ordergrad_score,
                                                                       self._metrics["train"])  # fmt: skip
        else:
            output, batch = self._ordergrad_score(inputs)
            batches = [batch]
        if self.model.training:  # a trained batch joins a stateful weight's window once, after all its rounds
            join_window(self.ordergrad_prompt_window, batches)
        return output

    def _ordergrad_score(self, inputs) -> tuple[dict, GroupedBatch]:
        """TRL's generation and scoring of `inputs` with OrderGrad's advantages: its output, and the plan's record of
        the gathered batch (`(N_global,)` advantages, p_hat, weights, empty groups)."""
        self._ordergrad_gathered_rewards = None
        try:
            output = super()._generate_and_score_completions(inputs)
            rewards_per_func = self._ordergrad_gathered_rewards
        finally:
            self._ordergrad_gathered_rewards = None
        if rewards_per_func is None:
            raise RuntimeError(
                "GRPOTrainer._generate_and_score_completions did not call _calculate_rewards: the TRL internals "
                f"OrderGradTrainer relies on changed (trl {trl.__version__}, tested {TESTED_TRL_VERSIONS})."
            )

        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        with profiling_context(self, "ordergrad_advantages"):  # TRL's profiling/ timing, as for its own stages
            batch = self._ordergrad_batch(rewards_per_func, group_size, mode)
        advantages = batch.advantages  # (N_global,)

        # The same local slice TRL takes: process p holds rows [p * n_local, (p + 1) * n_local) of the gathered batch.
        n_local = len(inputs)
        local = output["advantages"]
        n_global = n_local * self.accelerator.num_processes
        if local.dim() != 1 or local.shape[0] != n_local or advantages.shape[0] != n_global:
            raise RuntimeError(
                f"Unexpected TRL shapes: local advantages {tuple(local.shape)} for {n_local} local rollouts, "
                f"{advantages.shape[0]} gathered rewards on {self.accelerator.num_processes} processes "
                f"(trl {trl.__version__}, tested {TESTED_TRL_VERSIONS})."
            )
        start = self.accelerator.process_index * n_local
        output["advantages"] = advantages[start : start + n_local].to(device=local.device, dtype=local.dtype)

        # The parent appended its gathered advantages to the completions-table log; put ours in their place.
        logged = self._logs["advantages"]
        for _ in range(min(advantages.shape[0], len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())
        return output, batch

    def _ordergrad_batch(self, rewards_per_func: torch.Tensor, group_size: int, mode: str) -> GroupedBatch:
        """Gathered `(N_global, num_funcs)` rewards -> the plan's record of the batch, logging the metrics from it."""
        # Weighted sum as TRL's "sum_then_normalize": a None from some functions counts as 0, from all as unscorable.
        weights = self.reward_weights.to(rewards_per_func.device)
        weighted = rewards_per_func * weights.unsqueeze(0)  # (N_global, num_funcs)
        check_reward_magnitudes(rewards_per_func, weighted, self.reward_func_names, self.reward_weights,
                                self.state.global_step + 1)
        unscorable = torch.isnan(rewards_per_func).all(dim=1)  # (N_global,)
        rewards = weighted.nansum(dim=1).masked_fill(unscorable, torch.nan)  # (N_global,), NaN: unscorable
        grouped = rewards.view(-1, group_size)  # (num_groups, N)
        per_func = rewards_per_func.view(-1, group_size, rewards_per_func.shape[1])  # (num_groups, N, num_funcs)
        plan, window, metrics = self.ordergrad_plan, self.ordergrad_prompt_window, self._metrics[mode]
        estimate = self.compute_advantages
        if plan.per_reward is not None:  # the batch is one block of equal groups in order: the hook reads per_func
            estimate = lambda _: self.compute_advantages_per_reward(per_func)  # noqa: E731
        # an override gets the rewards; the plan's own w(p_hat) reuses the p_hat it computes once
        overridden = type(self).compute_prompt_weights is not OrderGradTrainer.compute_prompt_weights
        batch = plan.grouped_advantages(
            rewards, torch.arange(grouped.shape[0], device=rewards.device).repeat_interleave(group_size),
            plan.stages[self.ordergrad_stage], window, push=False, compute_advantages=estimate,
            compute_prompt_weights=self.compute_prompt_weights if overridden else None,
        )  # the window is fed once per trained batch, by _generate_and_score_completions
        advantages = batch.advantages.view_as(grouped)
        warn_if_overflowing(advantages, weighted, self.reward_func_names)
        if batch.prompt_weights is not None:
            log_prompt_weights(batch.prompt_weights, window, metrics)
        log_objective(self, grouped, per_func, metrics)  # ordergrad/objective, /k, /schedule_stage
        metrics["ordergrad/frac_zero_adv_groups"].append(batch.empty.float().mean().item())
        metrics["ordergrad/adv_abs_mean"].append(advantages.abs().mean().item())
        # One entry per group, so that TRL's mean of each list over the logging window (or a whole evaluate(), whose
        # batches can differ in size) is the mean over its groups; the gathered rewards make it the same everywhere.
        for name, values in group_passk(grouped, self.args.ordergrad_ks(group_size)).items():
            if values.numel():  # an empty list would make TRL log None for the window
                metrics[name].extend(values.tolist())
        return batch
