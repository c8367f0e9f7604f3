"""The commands of docs/verl.md through verl's own Hydra config, validation and loaders (verl environment).

tests/test_docs_commands.py delegates these commands here (`documented()`); that part also runs without verl."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from helpers.docs_commands import REPO, Command, commands_in
from helpers.optional import installed
from helpers import bounded

DOC = "docs/verl.md"
MAIN, PREPARE, LAUNCH = "python -m verl.trainer.main_ppo", "python recipes/verl/prepare_math.py", "bash recipes/verl/"
SHARED = Path(os.environ.get("ORDERGRAD_SHARED_DATA", REPO.parent / "shared" / "data"))


needs_verl = pytest.mark.skipif(
    not installed("verl"), reason="verl is not installed: this runs in the verl environment (docs/verl.md)"
)
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def documented() -> list[Command]:
    """The commands of docs/verl.md that this module runs."""
    return [c for c in commands_in(DOC) if not c.inline and " ".join(c.argv).startswith((MAIN, PREPARE, LAUNCH))]


def _of(prefix: str) -> list[Command]:
    return [c for c in documented() if " ".join(c.argv).startswith(prefix)]


def test_the_page_shows_the_override_syntax_and_the_recipe():
    assert len(_of(MAIN)) == 1 and len(_of(PREPARE)) == 1 and len(_of(LAUNCH)) == 1, documented()
    overrides = _of(MAIN)[0].argv[3:]
    assert overrides[:3] == ("algorithm.adv_estimator=ordergrad", "+algorithm.ordergrad_objective=TopM:2",
                             "+algorithm.ordergrad_k=4")  # fmt: skip


def test_the_gpu_install_line_is_the_one_ci_resolves():
    """docs/verl.md's GPU line, word for word, is what .ci/run resolves with `pip install --dry-run` (runs without
    verl)."""
    import shlex

    gpu = [c for c in commands_in(DOC) if c.argv[:2] == ("pip", "install") and any("verl[" in a for a in c.argv)]
    assert len(gpu) == 1, gpu
    ci = [shlex.split(line) for line in (REPO / ".ci" / "run").read_text().splitlines()
          if line.startswith("pip install --dry-run")]  # fmt: skip
    assert len(ci) == 1, ci
    dropped = {"--dry-run", "--ignore-installed", "-q"}
    words = [w for i, w in enumerate(ci[0]) if w not in dropped and ci[0][i - 1] != "--report" and w != "--report"]
    assert tuple(words) == gpu[0].argv


def compose(overrides) -> object:
    """verl's own trainer config (`ppo_trainer`, as `verl.trainer.main_ppo` composes it) with these overrides."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))


def verl_validate(config) -> None:
    """What `verl.trainer.main_ppo.main` runs on the composed config before starting Ray."""
    from verl.trainer.main_ppo import validate_config
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


@needs_verl
def test_override_syntax_composes_and_drives_the_estimator():
    import torch
    from test_verl import algorithm_config, shuffled_ragged_batch
    from verl.trainer.ppo.ray_trainer import compute_advantage

    import ordergrad_trl.integrations.verl as adapter

    config = compose(_of(MAIN)[0].argv[3:])
    assert config.algorithm.adv_estimator == "ordergrad"
    assert (config.algorithm.ordergrad_objective, config.algorithm.ordergrad_k) == ("TopM:2", 4)
    adapter.check_config(config)  # verl's own checks also want batch sizes: the recipe test runs those
    from verl.trainer import main_ppo

    assert getattr(main_ppo.validate_config, "_ordergrad_checks", False), "the start-up check is not installed"
    # what the trainer passes (config=self.config.algorithm) reaches the estimator
    data, _ = shuffled_ragged_batch([9, 6, 4], seed=11)
    composed = compute_advantage(data, adv_estimator=config.algorithm.adv_estimator, config=config.algorithm)
    data2, _ = shuffled_ragged_batch([9, 6, 4], seed=11)
    explicit = compute_advantage(data2, adv_estimator="ordergrad", config=algorithm_config("TopM:2", 4))
    assert torch.equal(composed.batch["advantages"], explicit.batch["advantages"])
    # the objective key changes the estimate
    other = compose([*_of(MAIN)[0].argv[3:], "algorithm.ordergrad_objective=ReMin"])
    data3, _ = shuffled_ragged_batch([9, 6, 4], seed=11)
    changed = compute_advantage(data3, adv_estimator="ordergrad", config=other.algorithm)
    assert not torch.equal(changed.batch["advantages"], explicit.batch["advantages"])


@needs_verl
@pytest.mark.parametrize(
    "override,message",
    [
        ("algorithm.ordergrad_objective=Bogus", "ordergrad_objective='Bogus' is not valid for ordergrad_k=4"),
        ("algorithm.ordergrad_k=8", "ordergrad_k (8) must be smaller than num_generations (8)"),
        ("+algorithm.ordergrad_estimator=maxrl_lo", "ordergrad_estimator='maxrl_lo' is unknown; valid names: "),
    ],
)
def test_bad_settings_stop_verl_main_before_ray_starts(override, message):
    argv = [sys.executable, *_of(MAIN)[0].argv[1:], override]
    proc = bounded.run(argv, cwd=REPO.parent, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr[-3000:]
    assert "ray init kwargs" not in proc.stdout  # run_ppo prints it just before ray.init


@needs_verl
def test_bad_settings_at_composition_time():
    import ordergrad_trl.integrations.verl as adapter

    base = list(_of(MAIN)[0].argv[3:])
    without_k = [o for o in base if "ordergrad_k" not in o]
    with pytest.raises(Exception, match=r"To append to your config use \+algorithm.ordergrad_k=3"):
        compose(without_k + ["algorithm.ordergrad_k=3"])  # a key verl lacks is added with a leading +
    with pytest.raises(ValueError, match="ordergrad_k must be a positive integer, got 'four'"):
        adapter.check_config(compose(without_k + ["+algorithm.ordergrad_k=four"]))
    stray = [o.replace("adv_estimator=ordergrad", "adv_estimator=grpo") for o in base]
    with pytest.raises(ValueError, match="only apply to algorithm.adv_estimator=ordergrad"):
        adapter.check_config(compose(stray))
    weights = compose([o for o in base if "objective" not in o] + ["+algorithm.ordergrad_objective=[0,0,0.5,0.5]"])
    assert adapter.plan_from_config(weights.algorithm, 8).stages[0].weights.tolist() == [0, 0, 0.5, 0.5]
    zoo = compose(base + ["+algorithm.ordergrad_estimator=maxrl_loo", "+algorithm.ordergrad_scale_rewards=group",
                          '+algorithm.ordergrad_schedule=["0 MaxRL:4@4","100 Mean@1"]'])  # fmt: skip
    adapter.check_config(zoo)
    plan = adapter.plan_from_config(zoo.algorithm, zoo.actor_rollout_ref.rollout.n)
    assert (plan.estimator, plan.scale, [(s.objective, s.k) for s in plan.stages]) == (
        "maxrl_loo", "group", [("MaxRL:4", 4), ("Mean", 1)])  # fmt: skip
    beta = compose(base + ["+algorithm.ordergrad_estimator=rs_grpo", "+algorithm.ordergrad_estimator_kwargs={beta:0.5}"])
    assert dict(adapter.plan_from_config(beta.algorithm, 8).stages[0].options) == {"beta": 0.5}
    with pytest.raises(ValueError, match="algorithm.ordergrad_kk is not an OrderGrad key; valid keys: "):
        adapter.check_config(compose(base + ["+algorithm.ordergrad_kk=3"]))


def _launch_overrides(tmp_path: Path, *extra: str) -> list[str]:
    """The recipe script's command line (with `extra` arguments after its name), caught by a stand-in `python3`
    first on PATH."""
    (launch,) = _of(LAUNCH)
    stub = tmp_path / "bin" / "python3"
    stub.parent.mkdir()
    stub.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {tmp_path / "argv.txt"}\n')
    stub.chmod(0o755)
    env = {**ENV, "PATH": f"{stub.parent}:{os.environ['PATH']}", "DATA_DIR": str(tmp_path / "data")}
    bounded.run([launch.argv[0], str(REPO / launch.argv[1]), *extra], env=env, check=True, timeout=60)
    argv = (tmp_path / "argv.txt").read_text().splitlines()
    assert argv[:2] == ["-m", "verl.trainer.main_ppo"], argv
    return argv[2:]


@needs_verl
def test_recipe_script_composes_and_passes_verls_validation(tmp_path):
    overrides = _launch_overrides(tmp_path)
    config = compose(overrides)
    verl_validate(config)  # ours first (extended validate_config), then all of verl's
    algorithm, actor = config.algorithm, config.actor_rollout_ref.actor
    assert algorithm.adv_estimator == "ordergrad" and config.actor_rollout_ref.rollout.n > algorithm.ordergrad_k
    # the settings docs/verl.md lists for an unbiased on-policy gradient
    assert actor.loss_agg_mode == "seq-mean-token-sum-norm"
    assert actor.loss_scale_factor == config.data.max_response_length
    assert actor.ppo_mini_batch_size == config.data.train_batch_size and actor.ppo_epochs == 1
    assert not actor.use_kl_loss and not algorithm.use_kl_in_reward
    assert config.data.train_files == str(tmp_path / "data" / "train.parquet")
    from verl.trainer.ppo.reward import get_custom_reward_fn

    assert get_custom_reward_fn(config)(data_source="x", solution_str="\\boxed{4}", ground_truth="4") == 1.0


@needs_verl
def test_recipe_script_takes_the_documented_extra_overrides(tmp_path):
    """docs/verl.md's example of changing the objective after the script's name, taken from the page."""
    text = (REPO / DOC).read_text()
    example = re.search(r"`bash recipes/verl/\S+\.sh\s+([^`]+)`", text)
    assert example, "docs/verl.md shows no example of extra overrides after the recipe script"
    extra = example.group(1).split()
    config = compose(_launch_overrides(tmp_path, *extra))
    verl_validate(config)
    assert [f"algorithm.{k}={config.algorithm[k]}" for k in ("ordergrad_objective", "ordergrad_k")] == extra


@needs_verl
@pytest.mark.skipif(not (SHARED / "math500_test.jsonl").is_file(), reason=f"MATH-500 not found in {SHARED}")
def test_prepare_math_writes_rows_verl_reads_and_scores(tmp_path, tiny_tokenizer):
    import json

    import pandas as pd

    (prepare,) = _of(PREPARE)
    offline = ["--train_set", "math500", "--local", "--out_dir", str(tmp_path / "data")]  # the Hub is unreachable
    bounded.run([sys.executable, str(REPO / prepare.argv[1]), *prepare.argv[2:], *offline], env=ENV, check=True,
                cwd=tmp_path, timeout=300)  # fmt: skip
    test = pd.read_parquet(tmp_path / "data" / "test.parquet")
    assert len(test) == 500 and len(pd.read_parquet(tmp_path / "data" / "train.parquet")) == 500
    assert set(test.columns) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    row = test.iloc[0]
    assert list(row["prompt"][0]) == ["role", "content"] and row["prompt"][0]["role"] == "user"
    assert re.search(r"\\boxed\{\}", row["prompt"][0]["content"])
    # verl's RL dataset reads the files (it applies the tokenizer's chat template to `prompt`)
    from verl.utils.dataset.rl_dataset import RLHFDataset

    dataset = RLHFDataset(data_files=[str(tmp_path / "data" / "test.parquet")], tokenizer=tiny_tokenizer,
                          config=compose(["data.max_prompt_length=4096"]).data)  # fmt: skip
    assert len(dataset) == 500
    assert dataset[0]["raw_prompt"] == list(row["prompt"]) and dataset[0]["reward_model"] == row["reward_model"]
    solutions = [json.loads(line)["solution"] for line in (SHARED / "math500_test.jsonl").read_text().splitlines()]
    config = compose(["reward.custom_reward_function.path=pkg://ordergrad_trl.integrations.verl_reward"])
    from verl.trainer.ppo.reward import get_custom_reward_fn

    fn = get_custom_reward_fn(config)
    scores = [fn(data_source=r.data_source, solution_str=s, ground_truth=r.reward_model["ground_truth"],
                 extra_info=r.extra_info) for r, s in zip(test.head(40).itertuples(), solutions)]  # fmt: skip
    assert sum(scores) >= 38, scores
