"""Time one training step of OrderGradTrainer vs stock GRPOTrainer on the same tiny model, data and seed.

    OMP_NUM_THREADS=1 python benchmarks/trainer_step.py [--rounds 10 --steps 12 --num-generations 8 ...]

Both trainers get identical TRL settings (loss_type="luspo" with sequence-level importance sampling, the exact
REINFORCE loss, and scale_rewards="none", OrderGrad's default) and learning_rate=0, so they sample identical
completions and the only difference is OrderGrad's advantage path. Each round trains both (alternating which goes
first) for `--steps` steps; a callback times every optimizer step after `--warmup` ones (CPU time on CPU, wall time
on GPU). Reported: median step time of each and their ratio three ways (ratio of the medians; median of the
per-round ratios, robust to load drifting between rounds; ratio of the fastest steps, since noise only adds time;
target: within 2%), and the work OrderGrad adds per step (`_ordergrad_batch`, slicing and log replacement,
timed directly), which is the low-noise view of the overhead.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from ordergrad_trl import OrderGradConfig, OrderGradTrainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.tiny_model import build_tiny_model  # noqa: E402


# On CPU, time the process's CPU time: other jobs sharing the machine inflate wall time far beyond a 2% effect.
CLOCK = time.perf_counter if torch.cuda.is_available() else time.process_time


class StepTimer(TrainerCallback):
    def __init__(self):
        self.times, self._start = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self._start = CLOCK()

    def on_step_end(self, args, state, control, **kwargs):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.times.append(CLOCK() - self._start)


class TimedOrderGradTrainer(OrderGradTrainer):
    """Times the work OrderGrad adds after TRL's `_generate_and_score_completions` returns."""

    added_seconds: list

    def _generate_and_score_completions(self, inputs):
        original = OrderGradTrainer._ordergrad_batch
        start = [0.0]

        def timed(self_, *args):
            start[0] = CLOCK()
            return original(self_, *args)

        self._ordergrad_batch = timed.__get__(self)
        output = super()._generate_and_score_completions(inputs)
        self.added_seconds.append(CLOCK() - start[0])
        del self._ordergrad_batch
        return output


def reward(completion_ids, **kwargs):
    return [float(sum(ids) % 5) / 4 for ids in completion_ids]


def run(kind: str, model_dir: Path, out_dir: str, opts) -> tuple[list[float], list[float]]:
    device_args = dict(use_cpu=not torch.cuda.is_available(), bf16=False)
    common = dict(
        output_dir=out_dir,
        per_device_train_batch_size=opts.prompts_per_step * opts.num_generations,
        num_generations=opts.num_generations,
        max_completion_length=opts.max_completion_length,
        max_steps=opts.steps,
        # lr 0: the weights never move, so both trainers sample the same completions at every step (same seed) and
        # do identical generation and backward work; only the advantage computation differs.
        learning_rate=0.0,
        loss_type="luspo",
        importance_sampling_level="sequence",
        scale_rewards="none",
        report_to="none",
        gradient_checkpointing=False,
        save_strategy="no",
        logging_steps=opts.steps,  # log once: printing every step would add noise to both
        disable_tqdm=True,
        seed=opts.seed,
        **device_args,
    )
    dataset = Dataset.from_dict({"prompt": [f"Question {i}: what is {i} plus {i + 1}?" for i in range(256)]})
    if kind == "ordergrad":
        cls, args = TimedOrderGradTrainer, OrderGradConfig(**common, ordergrad_k=opts.k)
    else:
        cls, args = GRPOTrainer, GRPOConfig(**common)
    timer = StepTimer()
    torch.manual_seed(opts.seed)
    trainer = cls(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        callbacks=[timer],
    )
    trainer.added_seconds = []
    trainer.train()
    return timer.times[opts.warmup :], trainer.added_seconds[opts.warmup :], trainer.state.num_input_tokens_seen


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=32)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the raw timings here")
    opts = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "model")
        times = {"grpo": [], "ordergrad": []}
        added, ratios = [], []
        for r in range(opts.rounds):
            order = ["grpo", "ordergrad"] if r % 2 == 0 else ["ordergrad", "grpo"]
            medians, tokens = {}, {}
            for kind in order:
                step_times, extra, tokens[kind] = run(kind, model_dir, str(Path(tmp) / f"{kind}-{r}"), opts)
                times[kind] += step_times
                added += extra
                medians[kind] = statistics.median(step_times)
            # same seed, frozen weights: the two runs must have processed exactly the same tokens
            assert tokens["grpo"] == tokens["ordergrad"], tokens
            ratios.append(medians["ordergrad"] / medians["grpo"])

    grpo, ours = statistics.median(times["grpo"]), statistics.median(times["ordergrad"])
    paired, extra = statistics.median(ratios), statistics.median(added)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(
        f"device={device} clock={CLOCK.__name__} torch_threads={torch.get_num_threads()} rounds={opts.rounds} "
        f"steps/round={opts.steps} "
        f"(warmup {opts.warmup}) batch={opts.prompts_per_step}x{opts.num_generations} "
        f"max_completion_length={opts.max_completion_length} K={opts.k}"
    )
    fastest = min(times["ordergrad"]) / min(times["grpo"])  # noise only adds time, so minima are least noisy
    print(
        "| GRPOTrainer step (ms) | OrderGradTrainer step (ms) | ratio of medians | median of per-round ratios "
        "| ratio of fastest steps | OrderGrad added work (ms, % of step) |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| {grpo * 1e3:.1f} | {ours * 1e3:.1f} | {ours / grpo:.3f} | {paired:.3f} | {fastest:.3f} "
        f"| {extra * 1e3:.2f} ({extra / grpo * 100:.2f}%) |"
    )
    print(f"per-round ratios: {', '.join(f'{x:.3f}' for x in ratios)}")
    if opts.json:
        opts.json.write_text(json.dumps({"times": times, "added": added, "ratios": ratios, "device": device}))


if __name__ == "__main__":
    main()
