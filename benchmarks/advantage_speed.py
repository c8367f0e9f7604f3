"""Speed of `lstat_advantage` vs GRPO's group mean/std and vs a per-group Python loop, on the same (G, N) tensor.

    OMP_NUM_THREADS=1 python benchmarks/advantage_speed.py            # one thread, as in the README table
    python benchmarks/advantage_speed.py --threads 8 --device cuda

Prints microseconds per call (median of repeats) and the ratios ours/GRPO and loop/ours. Rewards are binary
(pass/fail, many ties) like math-verify's.
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


def timed(fn, *args, repeats: int) -> float:
    fn(*args)  # warm up caches and allocator
    if args[0].is_cuda:
        torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        if args[0].is_cuda:
            torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)

    print(f"torch {torch.__version__}, device {args.device}, threads {torch.get_num_threads()}, float32 0/1 rewards")
    print("| G | N | K | GRPO mean/std (us) | OrderGrad (us) | per-group loop (us) | ours / GRPO | loop / ours |")
    print("|---|---|---|---|---|---|---|---|")
    for g in (256, 4096):
        for n in (8, 16, 64):
            for k in sorted({4, n // 2}):
                rewards = (torch.rand(g, n, generator=gen) < 0.4).float().to(args.device)
                weights = rank_weights("TopM:2", k)
                t_grpo = timed(grpo_advantage, rewards, repeats=args.repeats)
                t_ours = timed(lstat_advantage, rewards, weights, repeats=args.repeats)
                t_loop = timed(loop_advantage, rewards, weights, repeats=max(3, args.repeats // 10))
                print(
                    f"| {g} | {n} | {k} | {t_grpo:.0f} | {t_ours:.0f} | {t_loop:.0f} "
                    f"| {t_ours / t_grpo:.2f}x | {t_loop / t_ours:.0f}x |"
                )


if __name__ == "__main__":
    main()
