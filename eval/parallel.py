"""Data-parallel generation: one worker process per GPU group, on disjoint shares of the pending samples.

Why processes of our own rather than vLLM's data-parallel mode or `accelerate launch`: the work is a fixed list
of (problem, sample) units with a seed each, every rank appends to its own `generations.rank<r>.jsonl`, and the
parent must survive (and report) a crashed rank; vLLM's offline data parallelism needs the same per-process
launching and environment set-up, and `accelerate launch` would make every user command a launcher command.

GPU mapping: the workers share the parent's visible GPUs, `CUDA_VISIBLE_DEVICES` included. With
`CUDA_VISIBLE_DEVICES=4,5,6,7`, dp=2, tp=2, rank 0 sees GPUs 4,5 and rank 1 sees 6,7. dp x tp larger than the
visible GPUs is a usage error raised before anything loads. Without a GPU the workers run on the CPU (hf).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from eval import records
from eval.cli import UsageError

__all__ = ["gpu_count", "launch_workers", "run_worker", "visible_devices", "worker_devices"]

REPO_ROOT = str(Path(__file__).resolve().parents[1])


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # a broken CUDA setup must not stop CPU evaluation
        return 0


def visible_devices() -> list[str]:
    """This process's GPUs as the ids CUDA knows them by: `CUDA_VISIBLE_DEVICES` entries, else 0..count-1."""
    count = gpu_count()
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return [str(i) for i in range(count)]
    return [d.strip() for d in env.split(",") if d.strip()][:count]  # CUDA ignores entries after a bad one


def worker_devices(dp: int, tp: int, devices: list[str]) -> list[str | None]:
    """`CUDA_VISIBLE_DEVICES` of each rank: consecutive groups of tp visible GPUs (None on a CPU-only machine)."""
    if not devices:
        return [None] * dp
    if dp * tp > len(devices):
        raise UsageError(
            f"--data_parallel_size {dp} x --tensor_parallel_size {tp} = {dp * tp} GPUs, but {len(devices)} are "
            f"visible ({','.join(devices)}); lower one of them or make more GPUs visible (CUDA_VISIBLE_DEVICES)"
        )
    return [",".join(devices[r * tp : (r + 1) * tp]) for r in range(dp)]


def launch_workers(args, out: Path, backend_name: str, work: dict, groups: list[str | None],
                   disable_tqdm: bool = False) -> dict:
    """Run rank r on `groups[r]` with every dp-th pending unit; wait for all; sum their throughput stats.

    Each rank appends to its own file per batch, so a crash loses at most one batch per rank; the parent then
    raises after the other ranks finish, and a rerun generates only what is missing.
    """
    dp = len(groups)
    procs = []
    for rank, group in enumerate(groups):
        spec = {
            "args": dataclasses.asdict(args), "output_dir": str(out), "backend": backend_name, "rank": rank,
            "disable_tqdm": disable_tqdm,
            "work": {
                k: {"problems": [{"id": p["id"], "prompt": p["prompt"]} for p in problems],
                    "units": [list(u) for u in units[rank::dp]]}
                for k, (problems, units) in work.items()
            },
        }
        spec_path = out / f".dp_worker{rank}.json"
        records.write_json_atomic(spec_path, spec)
        env = dict(os.environ)
        if group is not None:
            env["CUDA_VISIBLE_DEVICES"] = group
        # `eval` importable without `pip install -e .` too; the cwd stays the user's, for relative --model paths
        env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [sys.executable, "-m", "eval.generate", "--dp_worker", str(spec_path)]
        procs.append(subprocess.Popen(cmd, env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        raise RuntimeError(f"data-parallel generation workers exited with codes {codes} (ranks 0..{dp - 1}); "
                           "finished samples are saved, rerun the same command to generate the rest")
    stats: dict[str, dict] = {}
    for rank in range(dp):
        stats_file = out / f".dp_worker{rank}.stats.json"
        part = json.loads(stats_file.read_text())
        stats_file.unlink()
        (out / f".dp_worker{rank}.json").unlink()
        for key, s in part.items():
            agg = stats.setdefault(key, {"samples": 0, "tokens": 0, "seconds": 0.0})
            agg["samples"] += s["samples"]
            agg["tokens"] += s["tokens"]
            agg["seconds"] = max(agg["seconds"], s["seconds"])  # ranks run concurrently
    return stats


def run_worker(spec_path: str) -> None:
    """Body of `python -m eval.generate --dp_worker <spec>`: generate this rank's units, write its stats."""
    from eval.generate import GenerateArgs, generate_local
    from eval.modeling import resolve_model

    spec = json.loads(Path(spec_path).read_text())
    args = GenerateArgs(**spec["args"])
    out, rank = Path(spec["output_dir"]), spec["rank"]
    work = {k: (v["problems"], [tuple(u) for u in v["units"]]) for k, v in spec["work"].items()}
    stats = generate_local(args, out, spec["backend"], resolve_model(args.model), work,
                           f"generations.rank{rank}.jsonl", rank=rank, disable_tqdm=spec["disable_tqdm"])
    records.write_json_atomic(out / f".dp_worker{rank}.stats.json", stats)
