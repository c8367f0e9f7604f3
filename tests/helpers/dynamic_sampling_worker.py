"""torchrun worker for tests/test_dynamic_sampling.py::test_two_processes_keep_the_oracles_groups.

Usage: torchrun --standalone --nproc_per_node 2 tests/helpers/dynamic_sampling_worker.py MODEL_DIR OUT_DIR filter|refill

Trains OrderGradTrainer (Max@2 over groups of 4, 6 rollouts per process: the second group of every generation
batch is split between the processes) for 3 steps with `ordergrad_dynamic_sampling`. Even prompts get one reward for
every rollout (empty groups), odd ones a fresh value per rollout. Each rank writes OUT_DIR/rank{r}.json with, per
generation batch, the gathered rewards of every round and the loss weight of each of its trained rows.
"""

from __future__ import annotations

import gc
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: tests/ (helpers, test_*) importable

from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from ordergrad_trl import OrderGradConfig, OrderGradTrainer  # noqa: E402
from helpers.tiny_model import CPU_TRAINING_ARGS  # noqa: E402


class Recorder(OrderGradTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls, self._rounds = [], []

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._rounds.append(rewards[:, 0].tolist())  # gathered, one reward function
        return rewards

    def _generate_and_score_completions(self, inputs):
        self._rounds = []
        output = super()._generate_and_score_completions(inputs)
        mask = output.get("tool_mask")
        weights = [1.0] * len(output["advantages"]) if mask is None else mask[:, 0].tolist()
        self.calls.append({"rewards": self._rounds, "weights": weights})
        return output


def main(model_dir: str, out_dir: str, mode: str) -> None:
    counter = itertools.count()

    def reward(prompts, **kwargs):
        return [float(next(counter)) if int(p.split()[1].rstrip(":")) % 2 else 1.0 for p in prompts]

    args = OrderGradConfig(
        output_dir=str(Path(out_dir) / "run"), per_device_train_batch_size=6, num_generations=4, ordergrad_k=2,
        ordergrad_objective="ReMax", max_completion_length=4, max_steps=3, learning_rate=0.05,
        ordergrad_dynamic_sampling=mode, **CPU_TRAINING_ARGS,
    )  # fmt: skip
    dataset = Dataset.from_dict({"prompt": [f"Question {i}: what is {i} plus 1?" for i in range(12)]})
    trainer = Recorder(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=reward, args=args,
                       train_dataset=dataset, processing_class=AutoTokenizer.from_pretrained(model_dir))  # fmt: skip
    assert trainer.accelerator.num_processes == 2, "run me with torchrun --nproc_per_node 2"
    trainer.train()
    history = [{k: v for k, v in h.items() if k.startswith("ordergrad/")} for h in trainer.state.log_history]
    result = {"rank": trainer.accelerator.process_index, "calls": trainer.calls, "log_history": history}
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / f"rank{result['rank']}.json").write_text(json.dumps(result))
    trainer.end()  # destroys the process group while the interpreter is alive
    del trainer
    gc.collect()


if __name__ == "__main__":
    main(*sys.argv[1:4])
