"""Gradient-norm distribution of the math recipe, unclipped, to choose `loss_type` and `max_grad_norm` defaults.

    python benchmarks/grad_norms.py --preset quickstart     # the CPU quickstart as configured, ~6 min on 2 cores
    python benchmarks/grad_norms.py --preset long           # SmolLM2-135M, up to 384 tokens at T=1, 1 step, ~5 min
    python benchmarks/grad_norms.py --preset quickstart -- --max_completion_length 128   # recipe overrides after --

Runs `accelerate launch --cpu --num_processes 1 recipes/math_cvar.py` with the preset's overrides and
`--max_grad_norm 1e9` (transformers logs the norm only when clipping is on; 1e9 never clips) and
`--loss_type luspo` (after the overrides: the norms of the other loss types follow from it), parses the per-step
log lines and prints, per step, the total gradient norm, the mean completion length and the `max_completion_length`
L, and the norm divided by L, which is exactly the norm `loss_type="dr_grpo"` would give on the same batch
(on-policy, dr_grpo's gradient is luspo's over L: `tests/test_trl_contract.py::test_loss_gradient_is_plain_reinforce`).
A summary gives the median / max and the fraction of steps a `max_grad_norm` of 1.0 would clip, and `--json`
writes all of it.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "math_cvar.py"

# Overrides on top of recipes/configs/cpu_quickstart.yaml. "long": the word-problem arithmetic set with no system
# prompt at T=1.0, where the 135M model rambles to the length limit (docs/evaluation.md), so completions are ~10x
# the quickstart's; one group of 8 per step to keep it affordable on a CPU. The model solves none of these, so
# the length penalty is added to the reward: it differs between rollouts and gives non-zero advantages.
PRESETS = {
    "quickstart": [],
    "long": [
        "--dataset_name", "arithmetic", "--max_completion_length", "384", "--temperature", "1.0",
        "--system_prompt", "", "--reward_funcs", "math", "length", "--max_steps", "1",
        "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1", "--max_eval_samples", "1",
    ],
}  # fmt: skip


def parse_logs(text: str) -> list[dict]:
    """The training-step log dicts (those with a `grad_norm`) printed by transformers, in order."""
    rows = []
    for line in text.splitlines():
        start = line.find("{")
        if start < 0 or "'grad_norm'" not in line:
            continue
        try:
            rows.append(ast.literal_eval(line[start : line.rindex("}") + 1]))
        except (ValueError, SyntaxError):
            continue
    return rows


def summarize(rows: list[dict], max_len: int, thresholds=(1.0, 0.5)) -> dict:
    norms = [float(r["grad_norm"]) for r in rows]
    lengths = [float(r.get("completions/mean_length", float("nan"))) for r in rows]
    scaled = [n / max_len for n in norms]
    out = {"max_completion_length": max_len, "steps": len(norms), "grad_norm": norms, "mean_length": lengths}
    for name, values in (("luspo", norms), ("dr_grpo", scaled)):
        out[name] = {
            "median": statistics.median(values),
            "max": max(values),
            **{f"clipped_at_{t}": sum(v > t for v in values) / len(values) for t in thresholds},
        }
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="quickstart")
    parser.add_argument("--config", default=str(REPO / "recipes" / "configs" / "cpu_quickstart.yaml"))
    parser.add_argument("--json", help="write the per-step numbers and the summary to this file")
    parser.add_argument("--log", help="write the recipe's output to this file as it runs (default: a temp file)")
    parser.add_argument("overrides", nargs="*", help="extra recipe arguments (after --)")
    args = parser.parse_args(argv)
    args.config = str(Path(args.config).expanduser().resolve())  # the recipe runs with cwd=REPO

    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "1", "--num_machines",
            "1", "--mixed_precision", "no", "--dynamo_backend", "no", str(RECIPE), "--config", args.config,
            "--eval_before_training", "false", "--max_eval_samples", "4", *PRESETS[args.preset],
            "--output_dir", str(Path(tmp) / "out"), *args.overrides, "--max_grad_norm", "1e9",
            "--loss_type", "luspo",  # measured as luspo (scale 1) whatever the config says; the others follow from it
        ]  # fmt: skip
        print("$", " ".join(cmd), flush=True)
        log = Path(args.log) if args.log else Path(tmp) / "run.log"
        with open(log, "w") as stream:  # streamed, so a long run can be followed with `tail -f`
            returncode = subprocess.run(cmd, stdout=stream, stderr=subprocess.STDOUT, cwd=REPO).returncode
        text = log.read_text()
    if returncode != 0:
        print(text[-4000:], file=sys.stderr)
        return returncode
    rows = parse_logs(text)
    if not rows:
        print("no training-step logs with grad_norm found", file=sys.stderr)
        return 1

    max_len = _max_completion_length(args)
    summary = summarize(rows, max_len)
    print(f"\npreset {args.preset}, max_completion_length L = {max_len}")
    print("| step | grad norm (luspo, unclipped) | mean completion length | norm / L (= dr_grpo) |")
    print("|---|---|---|---|")
    for step, (norm, length) in enumerate(zip(summary["grad_norm"], summary["mean_length"]), start=1):
        print(f"| {step} | {norm:.3g} | {length:.1f} | {norm / max_len:.3g} |")
    for name in ("luspo", "dr_grpo"):
        s = summary[name]
        print(
            f"{name}: median {s['median']:.3g}, max {s['max']:.3g}, steps clipped at max_grad_norm=1.0: "
            f"{s['clipped_at_1.0']:.0%}, at 0.5: {s['clipped_at_0.5']:.0%}"
        )
    if args.json:
        record = {"preset": args.preset, "overrides": args.overrides, **summary}
        Path(args.json).write_text(json.dumps(record, indent=2))
    return 0


def _max_completion_length(args) -> int:
    argv = [*PRESETS[args.preset], *args.overrides]
    if "--max_completion_length" in argv:
        return int(argv[argv.index("--max_completion_length") + 1])
    import yaml

    return int(yaml.safe_load(Path(args.config).read_text()).get("max_completion_length", 256))


if __name__ == "__main__":
    sys.exit(main())
