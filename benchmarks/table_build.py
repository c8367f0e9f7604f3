"""Time to build OrderGrad's coefficient tables, i.e. the first `lstat_advantage` call at a new (N, K, objective).

    OMP_NUM_THREADS=1 python benchmarks/table_build.py

Tables are built on the CPU in float64 per count of valid rewards that occurs (see `ordergrad_trl.core.advantage`).
Columns: build time of one table (min of repeats, cache cleared each time; the machine may be shared, so the min is
the least disturbed run), the previous pure-Python implementation (integer `math.comb` loops, kept here as the
baseline; only where it finishes in seconds) and the ratio, measured in the same run. Then the first call after
clearing every cache vs a warm call, on 0/1 rewards with unscorable (NaN) entries, as in training.
"""

import argparse
import math
import time

import torch

from ordergrad_trl import lstat_advantage, rank_weights
from ordergrad_trl.core import advantage

OBJECTIVES = ("TopM:2", "CVaR:0.5", "GMD", "Mean")  # sparse to dense weights


def legacy_coefficients(n: int, weights: tuple[float, ...]) -> torch.Tensor:
    """The tables as built before (pure Python, O(N K) big-integer binomials)."""
    k, comb = len(weights), math.comb
    rows = torch.zeros(2, n, dtype=torch.float64)
    c_nk, c_n1k1 = comb(n, k), comb(n - 1, k - 1)
    for m in range(1, n + 1):
        for j in range(1, k + 1):
            rows[0, m - 1] += weights[j - 1] * (comb(m - 1, j - 1) * comb(n - m, k - j) / c_nk)
            if m < n:
                rows[1, m - 1] += weights[j - 1] * (comb(m - 1, j - 1) * comb(n - m - 1, k - j) / c_n1k1)
    rows[1] *= n / (n - k)
    return rows


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def build(n: int, w: tuple[float, ...]) -> None:
    advantage._coefficients.cache_clear()
    advantage._coefficients(n, w)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="N<=128 only (a smoke run of the same code)")
    args = parser.parse_args()
    keep = (lambda n: n <= 128) if args.quick else (lambda n: True)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread; times: min of {args.repeats} repeats")
    print("| N | K | objective | table build (ms) | previous (ms) | previous / now |")
    print("|---|---|---|---|---|---|")
    for n, k in filter(lambda nk: keep(nk[0]), ((64, 32), (128, 64), (256, 128), (1024, 512))):
        for objective in OBJECTIVES:
            w = tuple(rank_weights(objective, k).tolist())
            now = best_of(lambda: build(n, w), args.repeats)
            old = ratio = "-"
            if n <= 128:  # ~40 s at N=256, K=128
                t_old = best_of(lambda: legacy_coefficients(n, w), 1)
                old, ratio = f"{t_old * 1e3:.0f}", f"{t_old / now:.0f}x"
            print(f"| {n} | {k} | {objective} | {now * 1e3:.2f} | {old} | {ratio} |")

    print("\nFirst call (cold caches) vs warm call, (G=64, N) 0/1 rewards, 10% NaN, all four objectives:")
    print("| N | K | first call (ms) | warm call (ms) | first / warm |")
    print("|---|---|---|---|---|")
    gen = torch.Generator().manual_seed(0)
    for n, k in filter(lambda nk: keep(nk[0]), ((128, 64), (256, 128), (1024, 512))):
        r = (torch.rand(64, n, generator=gen) < 0.3).float()
        r[torch.rand(64, n, generator=gen) < 0.1] = math.nan
        ws = [rank_weights(o, k) for o in OBJECTIVES]

        def all_objectives():
            for w in ws:
                lstat_advantage(r, w)

        def cold():
            advantage._coefficients.cache_clear()
            advantage._padded.cache_clear()
            all_objectives()

        first = best_of(cold, 3)
        warm = best_of(all_objectives, args.repeats)
        print(f"| {n} | {k} | {first * 1e3:.0f} | {warm * 1e3:.1f} | {first / warm:.0f}x |")


if __name__ == "__main__":
    main()
