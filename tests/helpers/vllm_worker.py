"""Worker for tests/test_vllm_cpu.py: 2 training steps through TRL's vLLM colocate generation, on CPU.

Usage: python tests/helpers/vllm_worker.py {ordergrad,grpo,refill} MODEL_DIR OUT_FILE

A script, not an in-process test: vLLM's engine sets up torch.distributed (external_launcher) and global state
that must not leak into the test process, and its helper processes start with `spawn`, which re-imports
`__main__` (hence the guard below). Writes OUT_FILE (torch.save) with every row that reached the loss, the
rewards each reward function returned per completion, and one record per vLLM weight sync: a parameter of the
engine's model before and after the sync and the policy's at that moment. The test checks everything against
oracles; nothing is asserted here.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: tests/ (helpers, test_*) importable

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from test_trainer import (  # noqa: E402
    G, K, OBJECTIVE, REWARD_WEIGHTS, RecordingTrainer, make_reward_funcs, prompts_dataset,
)
from helpers.tiny_model import CPU_TRAINING_ARGS  # noqa: E402
from helpers.vllm_cpu_shim import keep_vllm_cpu_weights  # noqa: E402

# A matrix vLLM keeps under the transformers name (q/k/v and gate/up are fused there, down_proj is not)
WATCHED = "model.layers.1.mlp.down_proj.weight"
VLLM_ARGS = dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=128, vllm_enable_sleep_mode=False)


def engine_model(trainer):
    """The model inside the colocated vLLM engine: where TRL's `sync_weights` loads the policy's weights."""
    return trainer.vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner.model


def policy_param(trainer) -> tuple[torch.Tensor, bool]:
    """The policy's WATCHED matrix, whole, and whether it was gathered: under ZeRO-3 each rank holds a shard,
    gathered here (a collective, so every rank calls it at the same point, as every rank syncs its own engine)."""
    param = trainer.accelerator.unwrap_model(trainer.model).get_parameter(WATCHED)
    if hasattr(param, "ds_tensor"):
        import deepspeed

        with deepspeed.zero.GatheredParameters([param]):
            return param.detach().float().clone(), True
    return param.detach().float().clone(), False


def trace_vllm(trainer) -> dict:
    """Wrap the vLLM generation object: count generate calls, snapshot WATCHED around each weight sync."""
    gen, trace = trainer.vllm_generation, {"syncs": [], "generate_calls": 0}
    sync, generate = gen.sync_weights, gen.generate

    def engine_param():
        return dict(engine_model(trainer).named_parameters())[WATCHED].detach().float().clone()

    def traced_sync():
        before = engine_param()
        sync()
        policy, gathered = policy_param(trainer)
        dtype = str(dict(engine_model(trainer).named_parameters())[WATCHED].dtype)
        trace["syncs"].append({"step": trainer.state.global_step, "before": before, "after": engine_param(),
                               "policy": policy, "gathered": gathered, "engine_dtype": dtype})

    def counted_generate(*args, **kwargs):
        trace["generate_calls"] += 1
        return generate(*args, **kwargs)

    gen.sync_weights, gen.generate = traced_sync, counted_generate
    return trace


def grpo_trainer_cls():
    from trl import GRPOTrainer

    class RecordingGRPO(GRPOTrainer):  # RecordingTrainer's recording, on stock GRPO
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.loss_rows = []

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            mode = "train" if self.model.training else "eval"
            p_mask, c_mask = inputs["prompt_mask"].bool(), inputs["completion_mask"].bool()
            for i, adv in enumerate(inputs["advantages"].tolist()):  # as RecordingTrainer records them
                self.loss_rows.append({"mode": mode, "step": self.state.global_step, "advantage": adv,
                                       "prompt": tuple(inputs["prompt_ids"][i][p_mask[i]].tolist()),
                                       "completion": tuple(inputs["completion_ids"][i][c_mask[i]].tolist())})
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    return RecordingGRPO


def main(kind: str, model_dir: str, out_file: str) -> None:
    from trl import GRPOConfig

    from ordergrad_trl import OrderGradConfig

    keep_vllm_cpu_weights()  # else vLLM's CPU backend repacks the weights where TRL's sync cannot reach them
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    reward_log = defaultdict(lambda: [None, None])
    config = dict(CPU_TRAINING_ARGS, output_dir=f"{out_file}.out", per_device_train_batch_size=2 * G,
                  num_generations=G, reward_weights=REWARD_WEIGHTS, max_completion_length=8, max_steps=2,
                  learning_rate=0.1, **VLLM_ARGS)  # fmt: skip
    if kind == "ordergrad":
        cls, args = RecordingTrainer, OrderGradConfig(**config, ordergrad_k=K, ordergrad_objective=OBJECTIVE)
    elif kind == "refill":  # ReMax at K: a group with fewer than K failures is empty, so refill draws extra rounds
        cls, args = RecordingTrainer, OrderGradConfig(**config, ordergrad_k=K, ordergrad_objective="ReMax",
                                                      ordergrad_dynamic_sampling="refill", loss_type="dapo",
                                                      ordergrad_dynamic_sampling_max_rounds=2)  # fmt: skip
    else:
        cls, args = grpo_trainer_cls(), GRPOConfig(**config)
    started = time.monotonic()
    trainer = cls(model=model, reward_funcs=make_reward_funcs(reward_log), args=args,
                  train_dataset=prompts_dataset(), processing_class=tokenizer)  # fmt: skip
    setup_s = time.monotonic() - started
    trace = trace_vllm(trainer)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[n])]
    torch.save({"loss_rows": trainer.loss_rows, "reward_log": dict(reward_log), "trace": trace,
                "log_history": trainer.state.log_history, "global_step": trainer.state.global_step,
                "changed": changed, "params": [n for n, _ in trainer.model.named_parameters()],
                "setup_s": setup_s, "train_s": time.monotonic() - started - setup_s}, out_file)  # fmt: skip
    trainer.accelerator.end_training()


if __name__ == "__main__":
    main(*sys.argv[1:4])
