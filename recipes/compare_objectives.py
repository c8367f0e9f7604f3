"""
A real-LLM comparison on CPU: GRPO vs OrderGrad Top-2@4 vs OrderGrad LowerTailMean, same budget and seed.

Each arm trains SmolLM2-135M-Instruct on the built-in arithmetic set with `recipes/math_cvar.py` and the CPU
quickstart config (same data order, sampling temperature, learning rate, steps and seed; only the advantage
differs), then `eval/` scores the trained model and the untouched base model on the same held-out problems:
pass@1, pass@8 and pass^4 with 95% bootstrap CIs over problems.

    python recipes/compare_objectives.py                                   # ~40 minutes on 2 CPU cores
    python recipes/compare_objectives.py --max_steps 1 --eval_problems 2   # smoke run

Arms (all with the quickstart's luspo loss, so the policy-gradient estimator is the only difference):
- `grpo`: TRL's GRPO advantage, (r - group mean) / group std (`--ordergrad_estimator grpo --scale_rewards group`);
- `top2of4`: OrderGrad `TopM:2`, K=4 (the mean of the best 2 of 4 answers);
- `cvar`: OrderGrad `LowerTailMean:0.5`, K=2 (the worse of 2 answers), the quickstart's objective.
Writes `<output_dir>/summary.{md,json}`.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "recipes" / "configs" / "cpu_quickstart.yaml"
ARMS = {
    "grpo": ["--ordergrad_estimator", "grpo", "--scale_rewards", "group"],
    "top2of4": ["--ordergrad_objective", "TopM:2", "--ordergrad_k", "4"],
    "cvar": ["--ordergrad_objective", "LowerTailMean:0.5", "--ordergrad_k", "2"],
}
METRICS = ("pass@1", "pass@8", "pass^4")


def run(cmd: list[str], log: Path) -> None:
    print("$", " ".join(cmd), flush=True)
    with log.open("w") as f:
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=True, cwd=REPO)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="outputs/compare_objectives")
    parser.add_argument("--max_steps", type=int, default=12)
    parser.add_argument("--learning_rate", type=float, default=1e-5)
    parser.add_argument("--eval_problems", type=int, default=32)
    parser.add_argument("--num_samples", type=int, default=8)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    out = (REPO / args.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    quickstart = yaml.safe_load(CONFIG.read_text())

    # 1. Train every arm from the same base model, data order and seed
    from ordergrad_trl.models import resolve_default_model

    models = {"base": resolve_default_model()}
    for arm, overrides in ARMS.items():
        model_dir = out / arm / "model"
        if not (model_dir / "model.safetensors").exists():
            (out / arm).mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--num_machines", "1",
                   "--mixed_precision", "no", "--dynamo_backend", "no", "recipes/math_cvar.py", "--config", str(CONFIG),
                   "--output_dir", str(model_dir), "--max_steps", str(args.max_steps), "--seed", str(args.seed),
                   "--learning_rate", str(args.learning_rate),
                   "--eval_before_training", "false", "--max_eval_samples", "2", *overrides]  # fmt: skip
            run(cmd, out / arm / "train.log")
        models[arm] = str(model_dir)

    # 2. Evaluate all of them on the same held-out problems, sampling as in training
    results = {}
    for arm, model in models.items():
        eval_dir = out / arm / "eval"
        cmd = [sys.executable, "-m", "eval.run", "--model", model, "--datasets", "arithmetic",
               "--limit", str(args.eval_problems), "--num_samples", str(args.num_samples), "--ks", "1", "4", "8",
               "--temperature", str(quickstart["temperature"]), "--max_new_tokens",
               str(quickstart["max_completion_length"]), "--system_prompt", quickstart["system_prompt"],
               "--seed", "0", "--output_dir", str(eval_dir)]  # fmt: skip
        (out / arm).mkdir(parents=True, exist_ok=True)
        run(cmd, out / arm / "eval.log")
        report = json.loads((eval_dir / "report.json").read_text())
        results[arm] = report["datasets"]["arithmetic"]["metrics"]

    # 3. One table
    lines = ["| arm | " + " | ".join(METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    for arm, metrics in results.items():
        cells = []
        for name in METRICS:
            m = metrics.get(name)
            cells.append("n/a" if m is None else f"{100 * m['value']:.1f} [{100 * m['ci'][0]:.1f}, {100 * m['ci'][1]:.1f}]")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    (out / "summary.md").write_text(table + "\n")
    (out / "summary.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    print(table)


if __name__ == "__main__":
    main()
