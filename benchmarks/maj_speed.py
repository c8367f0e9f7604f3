"""maj@k speed and memory: the exact DP against the subset enumeration / Monte Carlo it replaced.

The generating-function DP (`ordergrad_trl.evaluation.metrics.maj_at_k`) and the previous code run on the same
synthetic answer distributions.

    OMP_NUM_THREADS=1 python benchmarks/maj_speed.py

Problems: n samples each; the number of distinct answers is uniform in [1, max_classes], their frequencies
skewed (weights u^3), class 0 the correct one, 10% of samples without an answer. Each case runs in a fresh
subprocess: time per problem, the process's peak-RSS growth over its state after imports (ru_maxrss), and for
the DP the peak of its traced allocations (tracemalloc, a second call).
The baselines are the previous implementation: every k-subset when C(n, k) <= 20000, else 4096 random subsets
per problem (an estimate, not the exact value).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def make_problems(num: int, n: int, max_classes: int, seed: int = 0):
    import torch

    rng = random.Random(seed)
    labels, correct = [], []
    for _ in range(num):
        classes = rng.randint(1, max_classes)
        weights = [rng.random() ** 3 + 1e-3 for _ in range(classes)]
        lab = [-1 if rng.random() < 0.1 else rng.choices(range(classes), weights)[0] for _ in range(n)]
        labels.append(lab)
        correct.append([float(x == 0) for x in lab])
    return torch.tensor(labels), torch.tensor(correct, dtype=torch.float64)


def old_maj(labels, correct, k, exact_limit=20_000, num_draws=4096, seed=0):
    """The previous maj_at_k for full rows (no NaN): enumeration, else Monte Carlo."""
    import torch

    rows, v = labels.shape
    same = (labels[:, :, None] == labels[:, None, :]) & (labels[:, :, None] >= 0)
    ids = torch.where(same.any(-1), same.int().argmax(-1), v)  # (R, v)
    total = torch.zeros(rows, v + 1, dtype=torch.float64).scatter_add_(1, ids, correct)
    size = torch.zeros(rows, v + 1, dtype=torch.float64).scatter_add_(1, ids, torch.ones_like(correct))
    class_ok = torch.where(size > 0, total / size.clamp(min=1), 0.0)
    class_ok[:, v] = 0.0
    gen = torch.Generator().manual_seed(seed)
    if math.comb(v, k) <= exact_limit:
        subsets = torch.combinations(torch.arange(v), k) if k > 1 else torch.arange(v)[:, None]
        draws = subsets.expand(rows, -1, -1)
    else:
        draws = torch.rand(rows, num_draws, v, generator=gen).argsort(-1)[..., :k]
    num_s = draws.shape[1]
    result = torch.empty(rows, dtype=torch.float64)
    chunk = max(1, (1 << 22) // max(1, num_s * (v + 1)))
    for start in range(0, rows, chunk):
        sl = slice(start, start + chunk)
        picked = torch.gather(ids[sl, None, :].expand(-1, num_s, -1), 2, draws[sl])
        votes = torch.zeros(picked.shape[0], num_s, v + 1, dtype=torch.float64)
        votes.scatter_add_(2, picked, torch.ones_like(picked, dtype=torch.float64))
        votes[..., v] = 0.0
        top = votes.max(-1, keepdim=True).values
        tied = (votes == top) & (top > 0)
        result[sl] = ((tied * class_ok[sl, None, :]).sum(-1) / tied.sum(-1).clamp(min=1)).mean(-1)
    return result


def run_case(case: dict) -> dict:
    """In this (fresh) process: build the problems, time one call, report the peak-RSS growth."""
    import torch

    from ordergrad_trl.evaluation.metrics import maj_at_k

    labels, correct = make_problems(case["problems"], case["n"], case["classes"])
    fn = maj_at_k if case["method"] == "dp" else old_maj
    if case["method"] == "dp":
        maj_at_k(labels[:2], correct[:2], case["k"])  # binomial table and imports, once per n
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    values = fn(labels, correct, case["k"])
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    traced = None
    if case["method"] == "dp":  # numpy reports its buffers to tracemalloc (torch does not): a second, traced call
        tracemalloc.start()
        fn(labels, correct, case["k"])
        traced = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return {**case, "seconds": seconds, "ms_per_problem": 1e3 * seconds / case["problems"],
            "peak_rss_growth_mib": peak / 1024, "traced_peak_mib": traced, "mean": float(torch.nanmean(values))}


CASES = [
    # the target: 500 problems, n = 64, k = 64, up to 64 distinct answers; and the k along a maj@k curve
    *({"method": "dp", "problems": 500, "n": 64, "k": k, "classes": 64} for k in (64, 32, 16, 8, 4, 1)),
    # against the old code on the same problems: Monte Carlo at n = 64, enumeration where it still runs
    {"method": "dp", "problems": 50, "n": 64, "k": 16, "classes": 64},
    {"method": "old", "problems": 50, "n": 64, "k": 16, "classes": 64},
    {"method": "dp", "problems": 50, "n": 12, "k": 6, "classes": 12},
    {"method": "old", "problems": 50, "n": 12, "k": 6, "classes": 12},
    {"method": "old", "problems": 50, "n": 16, "k": 8, "classes": 16},  # the README's n = 16: fails
    {"method": "dp", "problems": 100, "n": 256, "k": 128, "classes": 256},
    {"method": "dp", "problems": 100, "n": 256, "k": 256, "classes": 256},
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="3 cases of 5 problems (a smoke run of the same code)")
    a = p.parse_args()
    if a.case:
        print(json.dumps(run_case(json.loads(a.case))))
        return
    rows = []
    quick = [CASES[0], *(c for c in CASES if c["n"] == 12)]  # the target case, and dp vs enumeration
    cases = [{**c, "problems": 5} for c in quick] if a.quick else CASES
    for case in cases:
        out = subprocess.run([sys.executable, __file__, "--case", json.dumps(case)], capture_output=True, text=True)
        if out.returncode:
            error = (out.stderr.strip().splitlines() or ["?"])[-1]
            print(f"{case['method']:>3} P={case['problems']:<4} n={case['n']:<4} k={case['k']:<4} fails: {error}")
            continue
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"{r['method']:>3} P={r['problems']:<4} n={r['n']:<4} k={r['k']:<4} classes<={r['classes']:<4}"
              f"{r['ms_per_problem']:9.2f} ms/problem {r['seconds']:8.2f} s total  "
              f"peak RSS +{r['peak_rss_growth_mib']:.1f} MiB"
              + (f" (traced {r['traced_peak_mib']:.2f} MiB)" if r["traced_peak_mib"] is not None else "")
              + f"  maj={r['mean']:.4f}", flush=True)
    by = {(r["method"], r["n"], r["k"]): r for r in rows}
    for n, k in ((64, 16), (12, 6)):
        if ("old", n, k) not in by:
            continue
        old = by[("old", n, k)]
        new = next(r for r in rows if (r["method"], r["n"], r["k"], r["problems"]) == ("dp", n, k, old["problems"]))
        print(f"n={n}, k={k}, same {old['problems']} problems: old / dp time = "
              f"{old['ms_per_problem'] / new['ms_per_problem']:.0f}x, |old - dp| of the mean = "
              f"{abs(old['mean'] - new['mean']):.2e}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
