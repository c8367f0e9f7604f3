"""Bandit diagnostic: does training on Mean, Max@K or LowerTailMean raise *its own* metric most? (CPU, < 1 min)

    OMP_NUM_THREADS=1 python studies/bandit_diagnostic.py                  # writes studies/assets/bandit_diagnostic.*
    OMP_NUM_THREADS=1 python studies/bandit_diagnostic.py --runs mean,max,lowertail,rloo --seeds 3 --no_plot \
        --output_dir /tmp/bandit                                          # a quick look, the committed files untouched

A softmax policy over three arms whose reward distributions make the objectives disagree (K = 4 draws):

    arm      reward                  mean   best of 4   worst of 4
    safe     0.5                     0.50   0.50        0.50        <- LowerTailMean:0.25 (worst of 4) wants it
    steady   0.7 w.p. 0.9, else 0    0.63   0.70        0.46        <- Mean wants it
    risky    1.0 w.p. 0.4, else 0    0.40   0.87        0.03        <- Max@K (best of 4) wants it

(best of 4 is highest for a mixture, about 0.89 with a fifth on `steady`: a set of K draws gains from diversity).

Every run starts from the uniform policy and trains its logits with REINFORCE for the same number of steps and
seeds: each step draws G groups of N arms, samples their rewards, turns each group's rewards into advantages with
an estimator of `ordergrad_trl.core.estimators` and ascends (1/(G N)) sum_i A_i grad log pi(a_i), where the score of a
softmax policy, onehot(a) - pi, is exact. Runs: `mean`, `max`, `lowertail` are `ordergrad` with Mean, ReMax and
LowerTailMean:0.25 at K; `pkpo` and `maxk_tang` (chunks of K) target best of K too; `grpo` and `rloo` the mean. The
metrics are not sampled: mean, best-of-K and worst-of-K of the
policy's reward distribution (a mixture over arms) are computed in closed form after every step.

Writes `bandit_diagnostic.json` (final numbers, mean over seeds) and, with matplotlib installed,
`bandit_diagnostic.png` (learning curves, final arm probabilities and reward distributions) to `--output_dir`,
and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from ordergrad_trl import rank_weights
from ordergrad_trl.core.estimators import get_estimator

# arm -> {reward value: probability}
ARMS = {
    "safe": {0.5: 1.0},
    "steady": {0.7: 0.9, 0.0: 0.1},
    "risky": {1.0: 0.4, 0.0: 0.6},
}
# metric -> its objective string for rank_weights (Mean on one draw, the others on K draws)
METRICS = {"mean": "Mean", "best_of_k": "ReMax", "worst_of_k": "LowerTailMean:0.25"}
# run -> (estimator, its parameters with K filled in later, the metric it is meant to raise)
RUNS = {
    "mean": ("ordergrad", {"objective": "Mean"}, "mean"),
    "max": ("ordergrad", {"objective": "ReMax"}, "best_of_k"),
    "lowertail": ("ordergrad", {"objective": "LowerTailMean:0.25"}, "worst_of_k"),
    "grpo": ("grpo", {"scale": "group"}, None),  # TRL's default GRPO: divided by each group's std
    "rloo": ("rloo", {}, "mean"),
    "pkpo": ("pkpo", {"k": None}, "best_of_k"),
    "maxk_tang": ("maxk_tang", {"k": None}, "best_of_k"),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", default="mean,max,lowertail,grpo,pkpo,maxk_tang", help=f"any of {', '.join(RUNS)}")
    p.add_argument("--k", type=int, default=4, help="K draws of the objectives and metrics")
    p.add_argument("--num_generations", type=int, default=8, help="N rollouts per group (N > K)")
    p.add_argument("--groups", type=int, default=16, help="G groups per step")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=1.0, help="SGD step size on the logits")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--output_dir", default=str(Path(__file__).resolve().parent / "assets"))
    p.add_argument("--no_plot", action="store_true", help="skip the PNG (no matplotlib needed)")
    return p.parse_args(argv)


def arm_tables() -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted support of all rewards `(S,)` and each arm's probability of each support value `(A, S)`."""
    support = sorted({v for dist in ARMS.values() for v in dist})
    probs = torch.tensor([[dist.get(v, 0.0) for v in support] for dist in ARMS.values()], dtype=torch.float64)
    return torch.tensor(support, dtype=torch.float64), probs


def exact_lstat(pmf: torch.Tensor, support: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """E[sum_j w_j R_(j:K)] for K i.i.d. draws from `pmf (..., S)` over sorted `support (S,)`; differentiable.

    P(R_(j:K) <= v) = P(Binomial(K, F(v)) >= j), so E[R_(j:K)] = sum_v v (P(R_(j:K) <= v) - P(R_(j:K) < v)).
    """
    k = len(weights)
    cdf = torch.nn.functional.pad(pmf.cumsum(-1), (1, 0))  # (..., S+1): F(v-) of the smallest, then F(v)
    # P(Binomial(K, F) = t) for t = 0..K; python-int powers so that 0**0 = 1 with a zero (not NaN) gradient
    point = torch.stack([math.comb(k, t) * cdf**t * (1 - cdf) ** (k - t) for t in range(k + 1)], -1)  # (..., S+1, K+1)
    at_least = point.flip(-1).cumsum(-1).flip(-1)[..., 1:]  # (..., S+1, K): P(Bin >= j), j = 1..K
    order_means = (support[:, None] * (at_least[..., 1:, :] - at_least[..., :-1, :])).sum(-2)  # (..., K)
    return order_means @ weights.to(order_means.dtype)


def metric_weights(k: int) -> dict[str, torch.Tensor]:
    return {name: rank_weights(obj, 1 if obj == "Mean" else k) for name, obj in METRICS.items()}


def metrics(policy: torch.Tensor, support, arm_probs, k: int) -> dict[str, float]:
    pmf = policy @ arm_probs  # (S,) reward distribution of the mixture over arms
    return {name: exact_lstat(pmf, support, w).item() for name, w in metric_weights(k).items()}


def optimum(support, arm_probs, k: int, resolution: int = 200) -> dict[str, dict]:
    """Best value of each metric over a grid on the policy simplex (optima can be mixtures: best-of-K likes them)."""
    a, b = torch.meshgrid(torch.arange(resolution + 1), torch.arange(resolution + 1), indexing="ij")
    keep = a + b <= resolution
    grid = torch.stack([a[keep], b[keep], resolution - a[keep] - b[keep]], -1).double() / resolution  # (P, 3)
    out = {}
    for name, w in metric_weights(k).items():
        values = exact_lstat(grid @ arm_probs, support, w)  # (P,)
        best = int(values.argmax())
        out[name] = {"value": values[best].item(), "policy": dict(zip(ARMS, grid[best].tolist()))}
    return out


def run_settings(run: str, args):
    """(estimator function, its parameters, the metric the run targets or None)."""
    name, params, target = RUNS[run]
    params = {key: (args.k if value is None else value) for key, value in params.items()}
    if name == "ordergrad":
        params["k"] = args.k
    return get_estimator(name), params, target


def gradient_estimate(logits, estimator, params, args, gen, support, arm_probs) -> torch.Tensor:
    """One REINFORCE step's gradient: G groups of N arms, their rewards, advantages, (1/(G N)) sum A grad log pi."""
    policy = torch.softmax(logits, -1)
    arms = torch.multinomial(policy, args.groups * args.num_generations, replacement=True, generator=gen)
    u = torch.rand(arms.shape, generator=gen, dtype=torch.float64)
    value_index = (u[:, None] > arm_probs.cumsum(-1)[arms]).sum(-1).clamp(max=len(support) - 1)  # inverse CDF
    rewards = support[value_index].view(args.groups, args.num_generations)  # (G, N)
    adv = estimator(rewards, **params).reshape(-1)  # (G*N,)
    score = torch.nn.functional.one_hot(arms, len(ARMS)).double() - policy  # (G*N, A) = grad log pi(a), exact
    return (adv[:, None] * score).mean(0)


def gradient_noise(run: str, args, support, arm_probs, samples: int = 256) -> float | None:
    """sqrt(E||g_hat - grad J||^2) / ||grad J|| at the uniform policy, J the run's target metric (None if none)."""
    estimator, params, target = run_settings(run, args)
    if target is None:
        return None
    logits = torch.zeros(len(ARMS), dtype=torch.float64, requires_grad=True)
    weights = metric_weights(args.k)[target]
    (exact,) = torch.autograd.grad(exact_lstat(torch.softmax(logits, -1) @ arm_probs, support, weights), logits)
    gen = torch.Generator().manual_seed(12345)
    draws = torch.stack(
        [gradient_estimate(logits.detach(), estimator, params, args, gen, support, arm_probs) for _ in range(samples)]
    )
    return ((draws - exact).pow(2).sum(-1).mean().sqrt() / exact.norm()).item()


def train(run: str, seed: int, args, support, arm_probs) -> tuple[torch.Tensor, list[dict[str, float]]]:
    """One REINFORCE run from the uniform policy; returns the final policy `(A,)` and exact metrics after each step."""
    estimator, params, _ = run_settings(run, args)
    gen = torch.Generator().manual_seed(seed)
    logits = torch.zeros(len(ARMS), dtype=torch.float64)
    curve = []
    for _ in range(args.steps):
        logits = logits + args.lr * gradient_estimate(logits, estimator, params, args, gen, support, arm_probs)
        curve.append(metrics(torch.softmax(logits, -1), support, arm_probs, args.k))
    return torch.softmax(logits, -1), curve


def plot(path: Path, runs, curves, finals, start, best, support, arm_probs, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5))
    titles = {"mean": "mean reward", "best_of_k": f"best of K={args.k}", "worst_of_k": f"worst of K={args.k}"}
    for ax, metric in zip(axes[0], METRICS):
        for run in runs:
            values = torch.tensor([[step[metric] for step in seed_curve] for seed_curve in curves[run]])  # (seeds, T)
            steps = torch.arange(1, values.shape[1] + 1)
            line = ax.plot(steps, values.mean(0), label=run, lw=2.5 if RUNS[run][2] == metric else 1)[0]
            ax.fill_between(steps, values.min(0).values, values.max(0).values, color=line.get_color(), alpha=0.15)
        ax.axhline(start[metric], color="gray", ls=":", lw=1, label="uniform start")
        ax.axhline(best[metric]["value"], color="black", ls="--", lw=1, label="optimum")
        ax.set(title=f"{titles[metric]} (exact)", xlabel="step")
    axes[0, 0].legend(fontsize=8)

    def bars(ax, groups, labels, heights):
        width = 0.8 / len(labels)
        for i, (label, h) in enumerate(zip(labels, heights)):
            ax.bar(torch.arange(len(groups)) + (i - (len(labels) - 1) / 2) * width, h, width, label=label)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups)
        ax.set_ylabel("probability")

    values = [f"{v:g}" for v in support.tolist()]
    bars(axes[1, 0], values, list(ARMS), arm_probs)
    axes[1, 0].set(title="the arms' reward distributions", xlabel="reward")
    axes[1, 0].legend(fontsize=8)
    bars(axes[1, 1], list(ARMS), runs, [finals[r] for r in runs])
    axes[1, 1].set(title="final policy (mean over seeds)")
    axes[1, 1].legend(fontsize=8)
    bars(axes[1, 2], values, runs, [finals[r] @ arm_probs for r in runs])
    axes[1, 2].set(title="final reward distribution", xlabel="reward")
    fig.suptitle(
        f"Softmax bandit, REINFORCE: {args.steps} steps x {args.groups} groups x N={args.num_generations}, "
        f"lr {args.lr}, {args.seeds} seeds (line: mean, band: min-max); thick line: the run's own objective"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> dict:
    args = parse_args(argv)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        raise ValueError(f"--runs: unknown {unknown}; valid: {', '.join(RUNS)}")
    if args.num_generations <= args.k:
        raise ValueError(f"--num_generations ({args.num_generations}) must exceed --k ({args.k})")
    torch.set_num_threads(1)
    support, arm_probs = arm_tables()
    began = time.perf_counter()

    # 1. train every run on the same seeds and budget
    curves, finals = {}, {}
    for run in runs:
        results = [train(run, seed, args, support, arm_probs) for seed in range(args.seeds)]
        curves[run] = [curve for _, curve in results]
        finals[run] = torch.stack([policy for policy, _ in results]).mean(0)

    # 2. final numbers (per-seed exact metrics, averaged), reference points, gradient noise at the start
    start = metrics(torch.full((len(ARMS),), 1 / len(ARMS), dtype=torch.float64), support, arm_probs, args.k)
    best = optimum(support, arm_probs, args.k)
    summary = {}
    for run in runs:
        summary[run] = {m: sum(c[-1][m] for c in curves[run]) / args.seeds for m in METRICS}
        summary[run]["policy"] = dict(zip(ARMS, finals[run].tolist()))
        summary[run]["target"] = RUNS[run][2]
        summary[run]["grad_rel_rmse_at_start"] = gradient_noise(run, args, support, arm_probs)
    config = {key: value for key, value in vars(args).items() if key not in ("output_dir", "no_plot")}
    result = {"config": config | {"runs": runs}, "arms": ARMS, "start": start, "optimum": best,
              "final": summary, "seconds": round(time.perf_counter() - began, 1)}  # fmt: skip

    # 3. report: bold = best final value of a metric among the runs
    leader = {m: max(runs, key=lambda r: summary[r][m]) for m in METRICS}
    print(f"| run (trained for) | mean | best of {args.k} | worst of {args.k} | "
          + " | ".join(f"p({a})" for a in ARMS) + " | grad. rel. RMSE at start |")  # fmt: skip
    print("|---" * (5 + len(ARMS)) + "|")
    print(f"| uniform start | {start['mean']:.3f} | {start['best_of_k']:.3f} | {start['worst_of_k']:.3f} | "
          + " | ".join(f"{1 / len(ARMS):.2f}" for _ in ARMS) + " | |")  # fmt: skip
    print("| optimum (grid) | " + " | ".join(f"{best[m]['value']:.3f}" for m in METRICS) + " |" + " |" * len(ARMS)
          + " |")  # fmt: skip
    for run in runs:
        target, noise = summary[run]["target"], summary[run]["grad_rel_rmse_at_start"]
        cells = [f"**{summary[run][m]:.3f}**" if leader[m] == run else f"{summary[run][m]:.3f}" for m in METRICS]
        print(f"| {run} ({target or 'no L-statistic'}) | " + " | ".join(cells) + " | "
              + " | ".join(f"{p:.2f}" for p in finals[run].tolist())
              + f" | {'-' if noise is None else f'{noise:.2f}'} |")  # fmt: skip
    print(f"\n{args.seeds} seeds x {args.steps} steps x {args.groups} groups x N={args.num_generations}, K={args.k}, "
          f"lr {args.lr}: {result['seconds']} s")  # fmt: skip

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bandit_diagnostic.json").write_text(json.dumps(result, indent=2) + "\n")
    if not args.no_plot:
        plot(out / "bandit_diagnostic.png", runs, curves, finals, start, best, support, arm_probs, args)
    return result


if __name__ == "__main__":
    main()
