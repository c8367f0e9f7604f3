"""Where a comparison unit's training time goes, and what bf16 autocast buys on this CPU.

    OMP_NUM_THREADS=1 python benchmarks/unit_train_cost.py [--rounds 2 --steps 2 --config studies/configs/compare_digits20.yaml]

Runs the unit's training recipe (`recipes/math_cvar.py --config ...`, the shipped SmolLM2-135M-Instruct) for
`--steps` optimizer steps, `--rounds` times in float32 and in bf16 autocast (`--bf16 true`), alternating which goes
first, and times three phases of every step in CPU seconds of the training process (robust to other jobs sharing
the machine): generation and scoring (TRL's `_generate_and_score_completions`), the loss forward (`compute_loss`)
and the backward (`Accelerator.backward`), plus TRL's fused log-probability head inside both (its
`ChunkedLogProbFunction`). The first step of each run is left out as warm-up. Prints a markdown table and, with
`--json`, writes the per-run numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Runs inside the recipe's process: wraps the phases with CPU-time accumulators, then runs the recipe as __main__.
PATCH = r"""
import atexit, functools, json, runpy, sys, time
import accelerate, trl
from trl.kernels import chunked_logprob

out_path, recipe = sys.argv[1], sys.argv[2]
steps, current = [], {}

def timed(owner, name, key):
    original = getattr(owner, name)
    @functools.wraps(original)  # keeps the signature that ordergrad_trl's TRL contract check reads
    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            current[key] = current.get(key, 0.0) + time.process_time() - start
    setattr(owner, name, wrapper)

timed(trl.GRPOTrainer, "_generate_and_score_completions", "generate")
timed(trl.GRPOTrainer, "compute_loss", "forward")
timed(accelerate.Accelerator, "backward", "backward")
head = chunked_logprob.ChunkedLogProbFunction
for name in ("forward", "backward"):
    timed(head, name, "fused_head")

import transformers
class StepClock(transformers.TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        current.clear(); current["_start"] = time.process_time()
    def on_step_end(self, args, state, control, **kwargs):
        step = {k: v for k, v in current.items() if not k.startswith("_")}
        step["step"] = time.process_time() - current["_start"]
        steps.append(step)
_init = transformers.Trainer.__init__
def init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.add_callback(StepClock())
transformers.Trainer.__init__ = init
atexit.register(lambda: open(out_path, "w").write(json.dumps(steps)))
sys.argv = [recipe, *sys.argv[3:]]
runpy.run_path(recipe, run_name="__main__")
"""

PHASES = ("generate", "forward", "backward", "fused_head", "step")


def run_once(precision: str, args: argparse.Namespace, work: Path) -> list[dict]:
    out = work / f"{precision}-{len(list(work.glob('*.json')))}.json"
    cmd = [sys.executable, "-c", PATCH, str(out), str(REPO / "recipes" / "math_cvar.py"), "--config", args.config,
           "--max_steps", str(args.steps), "--bf16", "true" if precision == "bf16" else "false",
           "--output_dir", str(work / f"model-{out.stem}"), "--eval_before_training", "false",
           "--max_eval_samples", "0", "--seed", "0",
           *(["--model_name_or_path", args.model] if args.model else [])]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    log = work / f"{out.stem}.log"
    with open(log, "w") as handle:
        done = subprocess.run(cmd, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT)
    if done.returncode:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        sys.exit(f"the {precision} run failed (exit {done.returncode}); its log ends:\n{tail}")
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(REPO / "studies" / "configs" / "compare_digits20.yaml"))
    parser.add_argument("--model", default=None, help="model path (default: the config's, SmolLM2-135M-Instruct)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per run; the first is warm-up")
    parser.add_argument("--json", default=None, help="write the per-run step timings here")
    args = parser.parse_args()
    if args.steps < 2 or args.rounds < 1:
        parser.error(f"--steps must be >= 2 (the first step of each run is warm-up) and --rounds >= 1, got "
                     f"--steps {args.steps} --rounds {args.rounds}")
    runs: dict[str, list[list[dict]]] = {"fp32": [], "bf16": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for precision in (("fp32", "bf16") if r % 2 == 0 else ("bf16", "fp32")):
                runs[precision].append(run_once(precision, args, Path(tmp)))
    # median over the timed steps (all runs of a precision) of each phase's CPU seconds
    med = {p: {ph: statistics.median(s.get(ph, 0.0) for run in rs for s in run[1:]) for ph in PHASES}
           for p, rs in runs.items()}  # fmt: skip
    print(f"CPU seconds per optimizer step (median of {args.rounds} x {args.steps - 1} timed steps; "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')})\n")
    print("| phase | float32 (s) | bf16 autocast (s) | bf16 / float32 | share of a float32 step |")
    print("|---|---|---|---|---|")
    for ph in PHASES:
        a, b = med["fp32"][ph], med["bf16"][ph]
        print(f"| {ph} | {a:.1f} | {b:.1f} | {b / a:.2f} | {a / med['fp32']['step']:.0%} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs, "median": med}, indent=1))


if __name__ == "__main__":
    main()
