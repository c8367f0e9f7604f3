"""The math recipe: every YAML config parses and the signal-count helper is right (tests/test_docs_commands.py runs it
end to end, as the docs launch it)."""

import importlib.util
import statistics
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "math_cvar.py"
CONFIGS = sorted((REPO / "recipes" / "configs").glob("*.yaml"))


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
    with pytest.raises(ValueError, match=r"reward_funcs must be a list .* got 'math'; in YAML write a list"):
        parse(recipe, ["--config", str(bad)])


@pytest.mark.parametrize("k,m,n", [(2, 1, 8), (4, 2, 8), (4, 3, 6), (8, 2, 16)])
def test_binary_signal_counts_for_lower_tail(recipe, k, m, n):
    # With 0/1 rewards the mean of the worst m of K draws moves only if a K-subset can hold K-m+1 successes,
    # i.e. c >= K-m+1 (and c < N: an all-success group is constant). Mirror image for the best of K: once
    # c > N-K every K-subset of the others already holds a success.
    assert recipe.binary_signal_counts(f"BotM:{m}", k, n) == list(range(k - m + 1, n))
    assert recipe.binary_signal_counts("ReMax", k, n) == list(range(1, n - k + 1))


def test_eval_rewards_ci_is_a_normal_interval_over_problems(recipe):
    values = torch.tensor([0.0, 0.25, 0.5, 1.0], dtype=torch.float64)
    lo, hi = recipe._ci95(values)
    half = 1.96 * statistics.stdev(values.tolist()) / 2  # sqrt(4 problems)
    assert (lo, hi) == pytest.approx((values.mean().item() - half, values.mean().item() + half), abs=1e-12)
