"""The signal planner (`core.signal`, `ordergrad-eval plan`) against independent oracles: Monte Carlo of the same
Bernoulli-logit model through the real estimator code (random rollout order), the closed-form Max@K contrast, and
E[g] = J'(p) p (1 - p) for every unbiased estimator, J from its target's rank weights in closed form."""

from __future__ import annotations

import itertools
import json
import math
import sys

import pytest
import torch
from test_eval_pipeline import write_toy_run

from ordergrad_trl.core.estimators import ESTIMATORS
from ordergrad_trl.core.objectives import rank_weights
from ordergrad_trl.core.plan import build_plan
from ordergrad_trl.core.prompt_weights import PROMPT_WEIGHTS, PromptWindow, inner
from ordergrad_trl.core.signal import crossover_p, gradient_table, group_signal, pool_signal
from ordergrad_trl.evaluation.args import PathArgs, ScoreArgs
from ordergrad_trl.evaluation.score import score
from ordergrad_trl.evaluation.signal_plan import PlanArgs, plan_signal
from helpers import bounded

SIZES = (4, 8, 16, 32)
RATES = (0.05, 0.3, 0.8)
POOL = torch.tensor([0.1, 0.2, 0.25, 0.5, 0.7, 0.9], dtype=torch.float64)  # a stateful weight's reference


def plan_for(name: str, n: int, **kw):
    """The estimator's plan at its defaults; K = 2 where the default K does not fit N (chunks of k must tile N)."""
    try:
        return build_plan(num_generations=n, estimator=name, **kw)
    except ValueError:
        return build_plan(num_generations=n, estimator=name, k=2, **kw)


def monte_carlo(plan, p: float, reference=None, samples: int = 20000, seed: int = 0):
    """(P(g != 0), E g, E g^2) and their standard errors from random groups in random order, advantages from the
    plan's own pipeline (what the trainer calls), g = (1/N) sum_j A_j (r_j - p)."""
    gen = torch.Generator().manual_seed(seed)
    n = plan.num_generations
    r = (torch.rand(samples, n, generator=gen, dtype=torch.float64) < p).to(torch.float64)
    window = None if reference is None else PromptWindow(size=1, batches=[inner(reference).tolist()])
    adv = torch.nan_to_num(plan.scaled_advantages(r, None, window).to(torch.float64))
    g = (adv * (r - p)).sum(-1) / n
    out = []
    for x in ((g.abs() > 1e-12).to(torch.float64), g, g**2):
        out.append((x.mean().item(), x.std().item() / math.sqrt(samples)))
    return out


def close(exact: float, estimate: tuple[float, float], proportion: bool = False, samples: int = 20000) -> bool:
    """Within 4 standard errors; a proportion's from the exact value (a sample of all ones has an SE of 0)."""
    mean, se = estimate
    if proportion:
        se = math.sqrt(exact * (1 - exact) / samples)
    return abs(exact - mean) <= 4 * se + 1e-12


@pytest.mark.parametrize("name", list(ESTIMATORS))
@pytest.mark.parametrize("n", SIZES)
def test_every_estimator_matches_monte_carlo(name, n):
    plan = plan_for(name, n)
    law = group_signal(plan, torch.tensor(RATES, dtype=torch.float64))
    for i, p in enumerate(RATES):
        nonzero, mean, second = monte_carlo(plan, p, seed=n * 100 + i)
        assert close(law.nonzero[i].item(), nonzero, True), (name, n, p, "P(g != 0)", law.nonzero[i].item(), nonzero)
        assert close(law.mean[i].item(), mean), (name, n, p, "E g", law.mean[i].item(), mean)
        assert close(law.second[i].item(), second), (name, n, p, "E g^2", law.second[i].item(), second)


@pytest.mark.parametrize("weight", [w for w in PROMPT_WEIGHTS if w != "none"])
@pytest.mark.parametrize("scale", ["none", "group"])
def test_every_prompt_weight_and_scale_matches_monte_carlo(weight, scale):
    setting = weight + (":0.3,0.2" if PROMPT_WEIGHTS[weight].params else "")
    for name, n in (("ordergrad", 8), ("maxk_tang", 8)):
        plan = plan_for(name, n, prompt_weight=setting, scale=scale)
        law = group_signal(plan, torch.tensor(RATES, dtype=torch.float64), reference=POOL)
        for i, p in enumerate(RATES):
            nonzero, mean, second = monte_carlo(plan, p, reference=POOL, seed=i)
            assert close(law.nonzero[i].item(), nonzero, True), (weight, scale, name, p)
            assert close(law.mean[i].item(), mean), (weight, scale, name, p, law.mean[i].item(), mean)
            assert close(law.second[i].item(), second), (weight, scale, name, p)


@pytest.mark.parametrize("n,k", [(4, 2), (8, 3), (16, 2), (16, 8), (32, 8), (33, 32)])
def test_max_at_k_contrast_is_the_binomial_ratio(n, k):
    """A correct minus a wrong rollout's advantage, c of N correct: K N/(N-K) C(N-1-c, K-1)/C(N-1, K-1), zero
    exactly for c > N - K (the signal Max@K loses on easy prompts)."""
    _, s1, s0, _, _ = gradient_table(build_plan(num_generations=n, objective="ReMax", k=k))
    for c in range(1, n):
        contrast = s1[c].item() / c - s0[c].item() / (n - c)
        want = k * n / (n - k) * math.comb(n - 1 - c, k - 1) / math.comb(n - 1, k - 1)
        assert contrast == pytest.approx(want, rel=1e-12, abs=1e-14), (c, contrast, want)
        if c > n - k:
            assert contrast == 0.0


def lstat_slope(weights: torch.Tensor, p: float) -> float:
    """J'(p) for J = E[sum_j w_j R_(j:K)], K i.i.d. Bernoulli(p): R_(j:K) = 1 iff at least K - j + 1 succeed, and
    d/dp P(Bin(K, p) >= m) = K C(K-1, m-1) p^(m-1) (1-p)^(K-m)."""
    k = weights.numel()
    return sum(w * k * math.comb(k - 1, k - j) * p ** (k - j) * (1 - p) ** (j - 1)
               for j, w in enumerate(weights.tolist(), start=1))  # fmt: skip


@pytest.mark.parametrize("name", [n for n, e in ESTIMATORS.items() if e.unbiased and e.target is not None])
@pytest.mark.parametrize("n", SIZES)
def test_unbiased_estimators_mean_gradient_is_the_objectives_slope(name, n):
    plan = plan_for(name, n)
    objective, k = ESTIMATORS[name].targets(n, **{**plan.stages[0].options, **(
        {"k": plan.stages[0].k} if "k" in ESTIMATORS[name].reads else {}),
        **({"objective": plan.stages[0].objective} if "objective" in ESTIMATORS[name].reads else {})})
    weights = rank_weights(objective, k)
    rates = torch.tensor([0.0, 0.01, 0.2, 0.5, 0.77, 0.99, 1.0], dtype=torch.float64)
    law = group_signal(plan, rates)
    for p, mean in zip(rates.tolist(), law.mean.tolist()):
        assert abs(mean - lstat_slope(weights, p) * p * (1 - p)) <= 1e-12, (name, n, p)


def test_pool_snr_matches_simulated_steps():
    """share and snr against steps simulated as the trainer draws them: B of P prompts without replacement."""
    plan = build_plan(num_generations=8, objective="ReMax", k=4)
    rates, b, steps = torch.tensor([0.05, 0.2, 0.4, 0.6, 0.9], dtype=torch.float64), 2, 40000
    pool = pool_signal(plan, rates, b)
    gen = torch.Generator().manual_seed(1)
    picks = torch.rand(steps, rates.numel(), generator=gen).argsort(-1)[:, :b]  # (S, B)
    chosen = torch.zeros(steps, rates.numel(), dtype=torch.bool).scatter_(1, picks, True)
    r = (torch.rand(steps, rates.numel(), 8, generator=gen, dtype=torch.float64) < rates[None, :, None]).double()
    adv = plan.scaled_advantages(r.reshape(-1, 8)).reshape(r.shape)
    g = (adv * (r - rates[None, :, None])).sum(-1) / 8  # (S, P)
    step = torch.where(chosen, g / b, 0.0)  # (S, P): G_i
    snr = step.mean(0).norm().item() / step.var(0).sum().sqrt().item()
    assert snr == pytest.approx(pool.snr, rel=0.03)
    share = ((g.abs() > 1e-12) & chosen).sum().item() / chosen.sum().item()
    assert share == pytest.approx(pool.share_with_gradient, abs=0.01)


def test_crossover_of_max_at_k_is_the_population_weights():
    """Unbiased Max@K has E[g] = K (1-p)^(K-1) p (1-p): Max@8 outweighs Max@2 below p = 1 - 4^(-1/6), at any N."""
    for n in (9, 16, 32):
        p = crossover_p(build_plan(num_generations=n, objective="ReMax", k=8),
                        build_plan(num_generations=n, objective="ReMax", k=2))  # fmt: skip
        assert p == pytest.approx(1 - 4 ** (-1 / 6), abs=1e-8)


def test_a_chunked_estimator_enumerates_chunk_counts():
    """maxk_tang in chunks of k: every multiset of chunk counts once, probabilities summing to 1."""
    plan = build_plan(num_generations=12, estimator="maxk_tang", k=3)
    rewards, _, _, counts, b = gradient_table(plan)
    assert b == 3 and counts.shape[0] == math.comb(4 + 3, 3) and bool((counts.sum(-1) == 4).all())
    assert rewards.shape == (counts.shape[0], 12)
    law = group_signal(plan, [0.37])
    brute = sum(math.prod(0.37 if x else 0.63 for x in bits) * (sum(
        1 for chunk in range(4) if sum(bits[3 * chunk: 3 * chunk + 3]) == 1) > 0)
        for bits in itertools.product((0, 1), repeat=12))  # fmt: skip
    assert law.nonzero.item() == pytest.approx(brute, abs=1e-12)


# ------------------------------------------------------------------------------------------ the command


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("planrun")
    write_toy_run(out)  # scorable problems with 2, 3, 0 and 5 correct of 6 (the fifth has no gold: left out)
    score(ScoreArgs(reward_workers=1), PathArgs(str(out)))
    return out


def test_plan_from_a_run_reads_its_counts(toy_run, tmp_path):
    args = PlanArgs(from_run=str(toy_run), num_generations=4, prompts_per_step=2, candidates=["Mean@1", "ReMax@2",
                    "ReMax@3", "maxrl", "Mean@1+curverl"], output_dir=str(tmp_path / "plan"))  # fmt: skip
    from ordergrad_trl.evaluation.signal_plan import run_plan

    result = run_plan(args)
    saved = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert saved == json.loads(json.dumps(result))
    assert [c["setting"] for c in saved["candidates"]] == ["Mean@1", "ReMax@2", "ReMax@3", "maxrl", "Mean@1+curverl"]
    rates = torch.tensor(sorted([2 / 6, 3 / 6, 0.0, 5 / 6]), dtype=torch.float64)
    expect = pool_signal(build_plan(num_generations=4, objective="ReMax", k=2), rates, 2)
    row = saved["candidates"][1]
    assert row["share_with_gradient"] == pytest.approx(expect.share_with_gradient, abs=1e-12)
    assert row["snr"] == pytest.approx(expect.snr, rel=1e-12)
    assert saved["candidates"][0]["snr_vs_rloo"] == pytest.approx(1.0)
    assert saved["candidates"][2]["next_smaller"] == "ReMax@2"
    # Hypergeometric share, by enumeration of every 4-subset of each problem's 6 samples: Max@2 at N = 4 carries a
    # gradient iff 1 <= count <= 2
    subsets = [sum(1 <= sum(s) <= 2 for s in itertools.combinations([1] * c + [0] * (6 - c), 4)) / math.comb(6, 4)
               for c in (2, 3, 0, 5)]  # fmt: skip
    assert row["share_with_gradient_unbiased"] == pytest.approx(sum(subsets) / 4, abs=1e-12)
    assert (tmp_path / "plan" / "plan.png").stat().st_size > 0 and (tmp_path / "plan" / "plan.md").is_file()


def test_plan_defaults_fit_n_and_rates_file_forms(tmp_path):
    lines = tmp_path / "rates.txt"
    lines.write_text("# base model\n0.1\n\n0.5  # half\n0.9\n")
    listed = tmp_path / "rates.json"
    listed.write_text("[0.1, 0.5, 0.9]")
    a = plan_signal(PlanArgs(success_rates=str(lines), num_generations=6, prompts_per_step=2))
    b = plan_signal(PlanArgs(success_rates=str(listed), num_generations=6, prompts_per_step=2))
    assert [c["setting"] for c in a["candidates"]] == ["Mean@1", "ReMax@2", "ReMax@4", "maxrl", "grpo+curverl"]
    assert [c["snr"] for c in a["candidates"]] == [c["snr"] for c in b["candidates"]]


def run_cli(*args, cwd=None):
    return bounded.run([sys.executable, "-m", "ordergrad_trl.evaluation.cli", "plan", *args], capture_output=True,
                       text=True, cwd=cwd, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}, timeout=300)  # fmt: skip


@pytest.mark.parametrize("content,args,flag", [
    ("0.5\n0.2\n", ["--candidates", "ReMax@8", "--num_generations", "8"], "--candidates"),
    ("0.5\n1.2\n", [], "--success_rates"),
    ("0.5\nabc\n", [], "--success_rates"),
    ("0.5\n0.2\n", ["--prompts_per_step", "3"], "--prompts_per_step"),
    ("0.5\n0.2\n", ["--candidates", "nonsense@2"], "--candidates"),
    ("0.5\n0.2\n", ["--scale_rewards", "sometimes"], "--scale_rewards"),
])  # fmt: skip
def test_bad_input_is_one_line_naming_the_flag(tmp_path, content, args, flag):
    rates = tmp_path / "r.txt"
    rates.write_text(content)
    done = run_cli("--success_rates", str(rates), "--prompts_per_step", "1", *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and flag in lines[0], done.stderr


def test_a_run_without_scores_is_refused_by_name(tmp_path):
    write_toy_run(tmp_path / "run")
    done = run_cli("--from", str(tmp_path / "run"), cwd=tmp_path)
    assert done.returncode == 2 and "--from" in done.stderr and "score" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def documented():
    """The `ordergrad-eval plan` commands of README.md and docs/ (tests/test_docs_commands.py delegates them here)."""
    from helpers.docs_commands import commands_in, doc_files

    return [c for doc in doc_files() for c in commands_in(doc) if c.argv[:2] == ("ordergrad-eval", "plan")]


def test_every_documented_plan_command_runs_as_written(toy_run, tmp_path):
    """Each `ordergrad-eval plan` of README.md and docs/ runs from outside the repo, through the console script:
    `--from base_eval` reads a scored run (the toy run's), `--success_rates rates.txt` a file of rates; N and B
    are the documented ones unless the toy pool (4 problems) is smaller than B."""
    import shutil

    for command in documented():  # each --from names a scored eval run of the base model: the toy run's
        if "--from" in command.argv:
            where = tmp_path / command.argv[command.argv.index("--from") + 1]
            if not where.exists():
                shutil.copytree(toy_run, where)
    (tmp_path / "rates.txt").write_text("\n".join(str(x / 20) for x in range(21)) + "\n")
    found = documented()
    assert len(found) >= 3, "the README and docs/evaluation.md show plan commands"
    exe = shutil.which("ordergrad-eval")
    assert exe is not None, "the console script is installed (pip install -e .)"
    for command in found:
        argv = list(command.argv[2:])
        if "--from" in argv and "--prompts_per_step" in argv:  # the toy run has 4 problems
            argv[argv.index("--prompts_per_step") + 1] = "2"
        done = bounded.run([exe, "plan", *argv], capture_output=True, text=True, cwd=tmp_path,
                           env={**__import__("os").environ, "OMP_NUM_THREADS": "1"}, timeout=300)  # fmt: skip
        assert done.returncode == 0, (command.text, done.stderr[-2000:])
        assert "share with a gradient" in done.stdout
        if "--output_dir" in argv:
            saved = json.loads((tmp_path / argv[argv.index("--output_dir") + 1] / "plan.json").read_text())
            assert saved["candidates"] and {"setting", "share_with_gradient", "snr"} <= set(saved["candidates"][0])


def test_the_python_entry_point_is_the_command(tmp_path):
    """`ordergrad_trl.evaluation.plan_settings(...)` gives plan.json's content; a bad keyword or value is a
    UsageError naming it."""
    from ordergrad_trl.evaluation import UsageError, plan_settings

    rates = tmp_path / "r.txt"
    rates.write_text("0.1\n0.4\n0.8\n")
    got = plan_settings(success_rates=str(rates), num_generations=8, prompts_per_step=2, candidates=["ReMax@4"])
    want = plan_signal(PlanArgs(success_rates=str(rates), num_generations=8, prompts_per_step=2, candidates=["ReMax@4"]))
    assert got["candidates"] == want["candidates"] and "_p" not in got
    with pytest.raises(UsageError, match="bogus"):
        plan_settings(success_rates=str(rates), bogus=1)
    with pytest.raises(UsageError, match="--num_generations"):
        plan_settings(success_rates=str(rates), num_generations="8")
