"""Completions/s of the correctness scorer: a plain in-process math-verify loop vs `score_completions`' worker pool.

    OMP_NUM_THREADS=1 python benchmarks/reward_speed.py                   # workers 1 and 2
    python benchmarks/reward_speed.py --workers 1 2 4

Input: the MATH-500 reference solutions (each has a `\\boxed{}` answer) against their golds, from
$ORDERGRAD_SHARED_DATA or `shared/data` beside the checkout; exits 0 with a message when absent. Each pooled row
starts from a fresh pool (cold gold cache); pool start-up (process spawn + sympy import) is shown apart. On a
shared or busy machine wall-clock rates drop with the load; items per CPU-second (serial: this process; pool: its
workers) does not.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from ordergrad_trl.tasks import math_verify_pool as pool


def serial(preds, golds):
    """What a reward function calling math-verify directly does: one item at a time, main thread, 1 core."""
    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    out = []
    for pred, gold in zip(preds, golds):
        g = parse(f"${gold}$", parsing_timeout=1)
        p = parse(pred, extraction_config=config, parsing_timeout=1)
        out.append(1.0 if g and p and verify(g, p, timeout_seconds=1) else 0.0)
    return out


def worker_cpu_s(procs) -> float:
    """User+system CPU seconds of the pool's worker processes so far (Linux /proc), parent excluded."""
    ticks = 0
    for proc in procs:
        stat = Path(f"/proc/{proc.pid}/stat")
        if stat.exists():  # a worker killed on a hostile item takes its count with it
            fields = stat.read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--items", type=int, default=None, help="score only the first N solutions (default: all 500)")
    args = ap.parse_args()

    default = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
    path = Path(os.environ.get("ORDERGRAD_SHARED_DATA", default)) / "math500_test.jsonl"
    if not path.exists():
        print(f"skipped: {path} not found (set ORDERGRAD_SHARED_DATA)")
        return 0
    rows = [json.loads(line) for line in path.read_text().splitlines()][: args.items]
    workloads = {"MATH-500": ([r["solution"] for r in rows], [r["answer"] for r in rows])}
    print(f"cpus available: {len(os.sched_getaffinity(0))}, load average (1 min): {os.getloadavg()[0]:.2f}")
    print(f"{'workload':<10} {'scorer':<18} {'items':>6} {'correct':>8} {'wall s':>7} {'items/s':>8} "
          f"{'items/CPU-s':>11} {'startup s':>9}")
    for name, (preds, golds) in workloads.items():
        start, cpu = time.perf_counter(), time.process_time()
        ref = serial(preds, golds)
        secs, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"{name:<10} {'serial in-process':<18} {len(preds):>6} {sum(ref):>8.0f} {secs:>7.2f} "
              f"{len(preds) / secs:>8.0f} {len(preds) / cpu:>11.0f} {'-':>9}")
        for w in args.workers:
            pool.shutdown()
            start = time.perf_counter()
            while pool._POOL is None or not all(x.ready for x in pool._POOL.workers):  # all started
                pool.score_completions(["\\boxed{0}"] * 4 * w, ["0"] * 4 * w, num_workers=w)
            startup = time.perf_counter() - start
            procs = [x.proc for x in pool._POOL.workers]
            start, cpu = time.perf_counter(), worker_cpu_s(procs)
            out = pool.score_completions(preds, golds, num_workers=w)
            secs, cpu = time.perf_counter() - start, worker_cpu_s(procs) - cpu
            agree = "" if out == ref else f"  (differs from serial on {sum(a != b for a, b in zip(out, ref))})"
            print(f"{name:<10} {f'pool, {w} worker(s)':<18} {len(preds):>6} {sum(out):>8.0f} {secs:>7.2f} "
                  f"{len(preds) / secs:>8.0f} {len(preds) / cpu:>11.0f} {startup:>9.2f}{agree}")
    pool.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
