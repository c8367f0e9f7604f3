"""Max@8 on `digits` with `ordergrad_dynamic_sampling` off, filter and refill: empty groups, groups trained, time.

Per step: the fraction of empty groups, the generation rounds, the groups trained and the step time.

    OMP_NUM_THREADS=1 python benchmarks/dynamic_sampling.py [--steps 4 --max-rounds 2 --model PATH]

Each mode runs `recipes/math_cvar.py --config studies/configs/compare_objectives.yaml --ordergrad_objective ReMax
--ordergrad_k 8` (SmolLM2-135M-Instruct, the offline copy, unless `--model`; 4 prompts x 16 rollouts per step, seed 0)
for `--steps` steps in a subprocess, then the table is read from each run's trainer_state.json. `step_time` is TRL's:
generation (every round), scoring and the 4 accumulated forward/backward passes of the step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("off", "filter", "refill")
COLUMNS = (("ordergrad/frac_zero_adv_groups", "empty fraction"), ("ordergrad/dynamic_sampling/rounds", "rounds"),
           ("ordergrad/dynamic_sampling/groups_trained", "groups trained"), ("step_time", "step time (s)"))  # fmt: skip


def run(mode: str, args, out: Path) -> list[dict]:
    cmd = [sys.executable, str(REPO / "recipes/math_cvar.py"), "--config",
           str(REPO / "studies/configs/compare_objectives.yaml"), "--ordergrad_objective", "ReMax", "--ordergrad_k", "8",
           "--max_steps", str(args.steps), "--ordergrad_dynamic_sampling", mode, "--ordergrad_dynamic_sampling_max_rounds",
           str(args.max_rounds), "--output_dir", str(out / mode)]  # fmt: skip
    if args.model:
        cmd += ["--model_name_or_path", args.model]
    if args.max_completion_length:
        cmd += ["--max_completion_length", str(args.max_completion_length)]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))  # this checkout's package
    subprocess.run(cmd, check=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=path))
    state = json.loads((out / mode / "trainer_state.json").read_text())
    return [h for h in state["log_history"] if "step_time" in h]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-rounds", type=int, default=2, help="refill's ordergrad_dynamic_sampling_max_rounds")
    parser.add_argument("--model", default=None, help="a model directory (default: the offline SmolLM2-135M)")
    parser.add_argument("--max-completion-length", type=int, default=None)
    parser.add_argument("--output_dir", default=None, help="where the runs write (default: a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.output_dir or tmp)
        logs = {mode: run(mode, args, out) for mode in MODES}
    print("| mode | step | " + " | ".join(label for _, label in COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    for mode, steps in logs.items():
        for h in steps:
            cells = [h.get(key) for key, _ in COLUMNS]
            cells = ["-" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v) for v in cells]
            print(f"| {mode} | {h['step']} | " + " | ".join(cells) + " |")
    for mode, steps in logs.items():
        total = sum(h["step_time"] for h in steps)
        trained = sum(h.get("ordergrad/dynamic_sampling/groups_trained", 4 * (1 - h["ordergrad/frac_zero_adv_groups"]))
                      for h in steps)  # fmt: skip
        print(f"{mode}: {total:.1f} s over {len(steps)} steps, {trained:.0f} non-empty groups trained")


if __name__ == "__main__":
    main()
