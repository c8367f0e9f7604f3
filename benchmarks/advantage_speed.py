"""Speed of `lstat_advantage` vs GRPO's group mean/std and vs a per-group Python loop, on the same (G, N) tensor.

    OMP_NUM_THREADS=1 python benchmarks/advantage_speed.py            # one thread, as in the docs/benchmarks.md table
    python benchmarks/advantage_speed.py --threads 8 --device cuda

Two reward kinds: 0/1 (pass/fail, what math-verify gives; `lstat_advantage` needs no sort there) and continuous
(e.g. a weighted sum of several reward functions: one sort per group). GRPO and OrderGrad calls alternate within
each repeat so that load from other processes hits both alike; the ratio ours/GRPO is taken per repeat and its
median reported, with the min time of each (the least disturbed run) in microseconds; "sort alone" times the
per-group `torch.sort` by itself, the floor for continuous rewards. Loop: min of a few repeats.
"""

import argparse
import statistics
import time

import torch

from ordergrad_trl import lstat_advantage, rank_weights


def grpo_advantage(rewards: torch.Tensor) -> torch.Tensor:
    """TRL's GRPO advantage (scale_rewards="group"), written the way grpo_trainer.py computes it."""
    g, n = rewards.shape
    flat = rewards.view(-1)  # (G*N,)
    mean = flat.view(-1, n).mean(dim=1).repeat_interleave(n, dim=0)
    std = flat.view(-1, n).std(dim=1).repeat_interleave(n, dim=0)
    return ((flat - mean) / (std + 1e-4)).view(g, n)


def loop_advantage(rewards: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The same function called once per group, as a one-group-at-a-time reference library would be used."""
    return torch.stack([lstat_advantage(row, weights) for row in rewards])


def once(fn, *args) -> float:
    if args[0].is_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn(*args)
    if args[0].is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def sort_only(rewards: torch.Tensor) -> torch.Tensor:
    """The per-group sort (values and order) that OrderGrad needs on continuous rewards, alone."""
    return rewards.sort(dim=-1)


def paired(rewards, weights, repeats: int) -> tuple[float, float, float, float]:
    """(min GRPO s, min ours s, median of per-repeat ratios ours/GRPO, min sort s), calls alternating."""
    grpo_advantage(rewards), lstat_advantage(rewards, weights), sort_only(rewards)  # warm up caches and allocator
    t_grpo, t_ours, t_sort = [], [], []
    for _ in range(repeats):
        t_grpo.append(once(grpo_advantage, rewards))
        t_ours.append(once(lstat_advantage, rewards, weights))
        t_sort.append(once(sort_only, rewards))
    return min(t_grpo), min(t_ours), statistics.median(o / g for o, g in zip(t_ours, t_grpo)), min(t_sort)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--no-loop", action="store_true", help="skip the (slow) per-group loop column")
    parser.add_argument("--quick", action="store_true", help="G=256 and N<=16 only (a smoke run of the same code)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)

    print(f"torch {torch.__version__}, device {args.device}, threads {torch.get_num_threads()}, float32 rewards, "
          f"TopM:2; times: min of {args.repeats} alternating repeats; ratio: median of per-repeat ratios")
    print("| G | N | K | rewards | GRPO mean/std (us) | OrderGrad (us) | ours / GRPO | sort alone (us) "
          "| per-group loop (us) | loop / ours |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for g in (256,) if args.quick else (256, 4096):
        for n in (8, 16) if args.quick else (8, 16, 64):
            for k in sorted({4, n // 2}):
                weights = rank_weights("TopM:2", k)
                for kind in ("0/1", "continuous"):
                    u = torch.rand(g, n, generator=gen)
                    rewards = ((u < 0.4).float() if kind == "0/1" else u).to(args.device)
                    t_grpo, t_ours, ratio, t_sort = paired(rewards, weights, args.repeats)
                    loop = "- | -"
                    if not args.no_loop and kind == "0/1":
                        t_loop = min(once(loop_advantage, rewards, weights) for _ in range(3))
                        loop = f"{t_loop * 1e6:.0f} | {t_loop / t_ours:.0f}x"
                    times = f"{t_grpo * 1e6:.0f} | {t_ours * 1e6:.0f} | {ratio:.2f}x | {t_sort * 1e6:.0f}"
                    print(f"| {g} | {n} | {k} | {kind} | {times} | {loop} |")


if __name__ == "__main__":
    main()
