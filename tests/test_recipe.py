"""The math recipe: every YAML config parses and the signal-count helper is right (tests/test_docs_commands.py runs it
end to end, as the docs launch it)."""

import importlib.util
import statistics
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "math_cvar.py"
CONFIGS = sorted((REPO / "recipes" / "configs").glob("*.yaml")) + sorted((REPO / "studies" / "configs").glob("*.yaml"))


@pytest.fixture(scope="module")
def recipe():
    spec = importlib.util.spec_from_file_location("math_cvar", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse(recipe, argv):
    from trl import ModelConfig, TrlParser

    from ordergrad_trl import OrderGradConfig

    return TrlParser((recipe.MathScriptArguments, OrderGradConfig, ModelConfig)).parse_args_and_config(argv)


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_every_config_parses(recipe, config):
    # GPU configs ask for bf16, which transformers refuses on a CPU-only machine: override just that here
    script_args, training_args, model_args = parse(recipe, ["--config", str(config), "--bf16", "false", "--use_cpu", "true"])
    assert training_args.num_generations > max(s.k for s in training_args.ordergrad_plan.stages)
    assert "vllm_mode" in config.read_text() or not training_args.use_vllm  # always written out for vLLM configs
    assert script_args.dataset_name


def test_stale_key_is_an_error(recipe, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "recipes/configs/cpu_quickstart.yaml").read_text() + "ordergrad_objectiv: Mean\n")
    with pytest.raises((SystemExit, ValueError)):
        parse(recipe, ["--config", str(bad)])


def test_bad_objective_fails_at_parse_time(recipe):
    with pytest.raises(ValueError, match="ordergrad_objective"):
        parse(recipe, ["--config", str(REPO / "recipes/configs/cpu_quickstart.yaml"), "--ordergrad_objective", "CVaR:2"])
    with pytest.raises(ValueError, match="reward_funcs"):
        parse(recipe, ["--config", str(REPO / "recipes/configs/cpu_quickstart.yaml"), "--reward_funcs", "nope"])


def test_yaml_string_where_a_list_belongs_names_the_field(recipe, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "recipes/configs/cpu_quickstart.yaml").read_text() + "reward_funcs: math\n")
    with pytest.raises(ValueError, match=r"reward_funcs must be a non-empty list .* got 'math'; in YAML write a list"):
        parse(recipe, ["--config", str(bad)])
    bad.write_text((REPO / "recipes/configs/cpu_quickstart.yaml").read_text() + "reward_funcs: []\n")
    with pytest.raises(ValueError, match=r"reward_funcs must be a non-empty list .* got \[\]"):
        parse(recipe, ["--config", str(bad)])


@pytest.mark.parametrize("k,m,n", [(2, 1, 8), (4, 2, 8), (4, 3, 6), (8, 2, 16)])
def test_binary_signal_counts_for_lower_tail(recipe, k, m, n):
    # With 0/1 rewards the mean of the worst m of K draws moves only if a K-subset can hold K-m+1 successes,
    # i.e. c >= K-m+1 (and c < N: an all-success group is constant). Mirror image for the best of K: once
    # c > N-K every K-subset of the others already holds a success.
    assert recipe.binary_signal_counts(f"BotM:{m}", k, n) == list(range(k - m + 1, n))
    assert recipe.binary_signal_counts("ReMax", k, n) == list(range(1, n - k + 1))


def test_eval_rewards_report_is_the_paired_problem_bootstrap(recipe):
    """The recipe's before/after line: per-problem means of each run, their bootstrap CIs over problems, and the
    paired change's, from the one statistics module; the intervals are recomputed here by explicit resampling."""
    rec = recipe.EvalRewards()
    score = rec.wrap(lambda prompts, completions, **kw: [float(c) for c in completions])
    before = {f"p{i}": [i % 2, 0.0] for i in range(12)}
    after = {f"p{i}": [1.0, float(i % 3 == 0)] for i in range(12)}
    for run in (before, after):
        with rec.recording():
            for prompt, scores in run.items():
                score(prompts=[prompt] * 2, completions=scores)
    text = rec.report(group_size=2)
    keys = sorted(before)  # the recipe sorts repr(prompt): the same order for these names
    values = torch.tensor([[statistics.mean(run[k]) for k in keys] for run in (before, after)],
                          dtype=torch.float64)  # (2, P)
    idx = torch.randint(12, (1000, 12), generator=torch.Generator().manual_seed(0))  # bootstrap_ci's draws
    q = torch.tensor([0.025, 0.975], dtype=torch.float64)

    def interval(x):
        return torch.quantile(torch.stack([x[row].mean() for row in idx]), q).tolist()

    cells = [f"{x.mean():.3f} [{lo:.3f}, {hi:.3f}]" for x in values for lo, hi in [interval(x)]]
    change = values[1] - values[0]
    lo, hi = interval(change)
    assert text == (f"eval math reward (pass@1, 12 problems x 2 samples, 95% CI): {cells[0]} before -> {cells[1]} "
                    f"after; change {change.mean():+.3f} [{lo:+.3f}, {hi:+.3f}]")

def test_command_line_config_forms_and_errors(recipe, tmp_path, monkeypatch, capsys):
    """`--config=FILE`, a repository-relative path from another directory, and one-line errors with status 2."""
    monkeypatch.chdir(tmp_path)
    script_args, config, _ = recipe.parse_command_line(["--config=recipes/configs/cpu_cvar.yaml", "--max_steps", "3"])
    assert config.ordergrad_plan.stages[0].objective.startswith("LowerTailMean") and config.max_steps == 3
    (tmp_path / "bad.yaml").write_text("max_steps: [1\n")
    for argv, want in [(["--config", "nope.yaml"], "--config nope.yaml: no such file"),
                       (["--config", "bad.yaml"], "--config bad.yaml:2: not valid YAML"),
                       (["--config", "bad.yaml", "--config", "bad.yaml"], "--config takes one YAML file"),
                       (["--ordergrad_k", "99"], "ordergrad_k (99) must be smaller than num_generations")]:
        with pytest.raises(SystemExit) as exc:
            recipe.parse_command_line(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert exc.value.code == 2 and len(err) == 1 and want in err[0], err
