"""Throughput of the eval pipeline: generation (tokens/s, samples/s, problems/s) and scoring (samples/s).

    OMP_NUM_THREADS=2 python benchmarks/eval_throughput.py                       # SmolLM2-135M, arithmetic, CPU
    python benchmarks/eval_throughput.py --model /path/or/hub-id --dataset gsm8k --local_data \\
        --limit 16 --num_samples 8 --max_new_tokens 256 --batch_size 32 --backend vllm
    python benchmarks/eval_throughput.py --model tiny                             # seconds; the random test model

Generation runs the generate stage (`ordergrad_trl.evaluation`) into a fresh temporary directory (so nothing is
resumed); scoring runs the score stage on those completions and, separately, on `--score_items` completions recycled
from them (to time the math-verify pool on a batch large enough to amortize its start-up). Prints a markdown table
and JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from ordergrad_trl.evaluation import layout, records
from ordergrad_trl.evaluation.args import GenerateArgs, PathArgs, ScoreArgs
from ordergrad_trl.evaluation.generate import generate
from ordergrad_trl.evaluation.provenance import write_provenance
from ordergrad_trl.evaluation.score import score

REPO = Path(__file__).resolve().parents[1]


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="Hub id / path / adapter dir; 'tiny' = the random test model; "
                                                 "default SmolLM2-135M-Instruct")
    p.add_argument("--dataset", default="arithmetic")
    p.add_argument("--local_data", action="store_true")
    p.add_argument("--limit", type=int, default=8)
    p.add_argument("--num_samples", type=int, default=4)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--backend", default="auto")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--score_items", type=int, default=2000)
    p.add_argument("--reward_workers", type=int, default=None)
    return p.parse_args()


def main() -> dict:
    a = parse()
    with tempfile.TemporaryDirectory() as tmp:
        model = a.model
        if model == "tiny":
            sys.path.insert(0, str(REPO / "tests"))
            from helpers.tiny_model import build_tiny_model

            model = str(build_tiny_model(Path(tmp) / "tiny"))
        out = Path(tmp) / "run"
        gen_args = GenerateArgs(model=model, datasets=[a.dataset], local_data=a.local_data, limit=a.limit,
                                num_samples=a.num_samples, max_new_tokens=a.max_new_tokens,
                                batch_size=a.batch_size, backend=a.backend, temperature=a.temperature)
        g = next(iter(generate(gen_args, PathArgs(str(out))).values()))
        s = next(iter(score(ScoreArgs(reward_workers=a.reward_workers), PathArgs(str(out))).values()))

        # a larger scoring batch from the same completions (fresh ids, so nothing is cached as already scored)
        d = next(iter(layout.dataset_dirs(out)))
        problems = records.read_jsonl(d / "problems.jsonl")
        gens = list(records.read_samples(d).values())
        big = Path(tmp) / "big" / d.name
        big.mkdir(parents=True)
        records.write_jsonl_atomic(big / "problems.jsonl", problems)
        records.append_jsonl(big / "generations.jsonl", [
            {**gens[i % len(gens)], "sample": i // len(gens) * a.num_samples + gens[i % len(gens)]["sample"]}
            for i in range(a.score_items)
        ])
        provenance = json.loads((out / layout.PROVENANCE).read_text())  # the same run, more samples per problem
        provenance["datasets"][d.name]["num_samples"] = (a.score_items // len(gens) + 1) * a.num_samples
        write_provenance(big.parent, provenance)  # stamped with the check of its new contents
        t0 = time.perf_counter()
        sb = next(iter(score(ScoreArgs(reward_workers=a.reward_workers), PathArgs(str(big.parent))).values()))
        sb["wall_s"] = time.perf_counter() - t0

    problems_n = g["samples"] / a.num_samples
    result = {
        "model": model or "default (SmolLM2-135M-Instruct)", "dataset": a.dataset, "backend": a.backend,
        "gen_samples": g["samples"], "gen_tokens": g["tokens"], "gen_seconds": g["seconds"],
        "gen_tokens_per_s": g["tokens"] / g["seconds"], "gen_samples_per_s": g["samples"] / g["seconds"],
        "gen_problems_per_s": problems_n / g["seconds"],
        "score_samples_per_s": s["samples_per_s"], "score_big_items": sb["scored"],
        "score_big_samples_per_s": sb["samples_per_s"],
    }
    print("| stage | items | seconds | throughput |\n|---|---|---|---|")
    print(f"| generate | {g['samples']} samples ({problems_n:g} problems x {a.num_samples}), {g['tokens']} tokens "
          f"| {g['seconds']:.1f} | {result['gen_tokens_per_s']:.1f} tok/s, {result['gen_samples_per_s']:.2f} "
          f"samples/s, {result['gen_problems_per_s']:.3f} problems/s |")
    print(f"| score (these samples) | {s['scored']} | {s['seconds']:.2f} | {s['samples_per_s']:.0f} samples/s |")
    print(f"| score (recycled batch) | {sb['scored']} | {sb['seconds']:.2f} | {sb['samples_per_s']:.0f} samples/s |")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
