"""Data-parallel generation: one worker process per GPU group, on disjoint shares of the pending samples.

Why processes of our own rather than vLLM's data-parallel mode or `accelerate launch`: the work is a fixed list
of (problem, sample) units with a seed each, every rank appends to its own `generations.rank<r>.jsonl`, and the
parent must survive (and report) a crashed rank; vLLM's offline data parallelism needs the same per-process
launching and environment set-up, and `accelerate launch` would make every user command a launcher command.

The parent plans everything (prompt token ids, an adapter merged once into a plain checkpoint); a worker,
`python -m ordergrad_trl.evaluation.parallel <spec.json>`, loads the tokenizer and weights once and samples.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from . import records
from .lock import adopt, lock_fds
from .sampling import Work, generate_local

__all__ = ["launch_workers", "run_worker"]

# the folder that holds the `ordergrad_trl` package: workers import this very code, installed or not
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def launch_workers(args, out: Path, backend_name: str, source, work: dict[str, Work], groups: list[str | None],
                   disable_tqdm: bool = False) -> dict:
    """Run rank r on `groups[r]` with every dp-th pending unit; wait for all; sum their throughput stats.

    `source` must be a plain checkpoint (`modeling.materialize_merged`). Each rank appends to its own file per
    batch, so a crash loses at most one batch per rank; the parent then raises after the other ranks finish, and a
    rerun generates only what is missing.
    """
    dp = len(groups)
    procs = []
    for rank, group in enumerate(groups):
        spec = {
            "args": dataclasses.asdict(args), "output_dir": str(out), "backend": backend_name, "rank": rank,
            "source": dataclasses.asdict(source), "disable_tqdm": disable_tqdm, "lock_fds": list(lock_fds(out)),
            "work": {k: {"ids": w.ids, "prompts": w.prompts, "units": [list(u) for u in w.units[rank::dp]],
                         "tags": w.tags} for k, w in work.items()},
        }
        spec_path = out / f".dp_worker{rank}.json"
        records.write_json_atomic(spec_path, spec)
        env = dict(os.environ)
        if group is not None:
            env["CUDA_VISIBLE_DEVICES"] = group
        # the cwd stays the user's, for relative --model paths
        env["PYTHONPATH"] = _PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        env["ORDERGRAD_EVAL_PARENT"] = str(os.getpid())  # the worker ends when this process dies
        cmd = [sys.executable, "-m", "ordergrad_trl.evaluation.parallel", str(spec_path)]
        # the worker shares the run's writer locks: it stays locked while any rank writes
        procs.append(subprocess.Popen(cmd, env=env, pass_fds=lock_fds(out)))
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
    """Generate one rank's units as its spec says, then write its stats beside the spec."""
    from .args import GenerateArgs
    from .modeling import ModelSource, load_tokenizer

    spec = json.loads(Path(spec_path).read_text())
    args = GenerateArgs(**spec["args"])
    out, rank = Path(spec["output_dir"]), spec["rank"]
    adopt(out, spec.get("lock_fds", ()))  # this rank's writes resolve inside the directory the parent locked
    source = ModelSource(**spec["source"])
    work = {k: Work(v["ids"], v["prompts"], [tuple(u) for u in v["units"]], tags=v["tags"])
            for k, v in spec["work"].items()}
    stats = generate_local(args, out, spec["backend"], source, load_tokenizer(source), work,
                           f"generations.rank{rank}.jsonl", rank=rank, disable_tqdm=spec["disable_tqdm"])
    records.write_json_atomic(out / f".dp_worker{rank}.stats.json", stats)


def _exit_with(parent: int) -> None:
    """End this worker when the parent dies (a SIGKILLed parent cannot stop it): no rank writes on unlocked."""
    import threading
    import time

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if os.environ.get("ORDERGRAD_EVAL_PARENT", "").isdigit():
        _exit_with(int(os.environ["ORDERGRAD_EVAL_PARENT"]))
    run_worker(sys.argv[1])
