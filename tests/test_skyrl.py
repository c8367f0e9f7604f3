"""The `ordergrad` advantage estimator through SkyRL's own code (Python 3.12 with the `skyrl` extra; docs/skyrl.md).

Oracles: for every estimator of the zoo, the TRL trainer's computation on the same groups (`plan_cases.trl_path`);
for `ordergrad`, K times the subset-enumeration advantage (tests/helpers/oracle.py) with the weights written out by
hand; for every bad setting, the text `OrderGradConfig` raises (tests/helpers/plan_cases.py); for MaxRL, the exact
expected gradient summed over all 2^N outcomes of a group against the closed form sum_{k<N} (1-p)^(k-1).

tests/test_docs_commands.py delegates docs/skyrl.md's SkyRL commands here (`documented()`), which also runs without
SkyRL."""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from helpers import bounded  # noqa: E402
from helpers.docs_commands import REPO, Command, commands_in  # noqa: E402
from helpers.estimator_cases import CASES  # noqa: E402
from helpers.optional import installed  # noqa: E402
from helpers.oracle import brute_advantage  # noqa: E402
from helpers.plan_cases import BAD_SETTINGS, ENGINE_KEY, case_id, expected_message, trl_path  # noqa: E402
from helpers.plan_cases import weighing_settings  # noqa: E402

from ordergrad_trl.core.estimators import ESTIMATORS  # noqa: E402

DOC = "docs/skyrl.md"
ENTRYPOINTS = ("python -m ordergrad_trl.integrations.skyrl", "python -m skyrl.train.entrypoints.main_base")


pytestmark = pytest.mark.skipif(
    not installed("skyrl"), reason="SkyRL is not installed: these run in a Python 3.12 venv with the skyrl extra (docs/skyrl.md)"
)
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def documented() -> list[Command]:
    """The commands of docs/skyrl.md that this module runs."""
    return [c for c in commands_in(DOC) if not c.inline and " ".join(c.argv).startswith(ENTRYPOINTS)]


@pytest.fixture(scope="module")
def skyrl():
    """The adapter (its import registers `ordergrad`) and SkyRL's dispatcher."""
    import ordergrad_trl.integrations.skyrl as adapter
    from skyrl.backends.skyrl_train.utils.ppo_utils import compute_advantages_and_returns

    return adapter, compute_advantages_and_returns


def config(adapter, n: int = 8, adv_estimator: str = "ordergrad", **settings):
    """`OrderGradSkyRLConfig` as SkyRL's parser builds it from overrides: `trainer.algorithm.advantage_estimator`,
    `generator.n_samples_per_prompt` and `trainer.algorithm.<field>` of each `build_plan` keyword of `settings`."""
    overrides = {"trainer.algorithm.advantage_estimator": adv_estimator, "generator.n_samples_per_prompt": n,
                 "trainer.logger": "console"}  # fmt: skip
    overrides.update({f"trainer.algorithm.{ENGINE_KEY[key]}": value for key, value in settings.items()})
    return adapter.OrderGradSkyRLConfig.from_cli_overrides(overrides)


def skyrl_batch(sizes: list[int], seed: int, binary: bool = False, nan: int = 0, length: int = 6):
    """Rows of each uid scattered (as SkyRL's uids list), a row's score split over its response tokens, `nan` rows
    unscorable (NaN). Returns (token_level_rewards (bs, L) float64, response_mask (bs, L), uids, rows)."""
    rng = random.Random(seed)
    uids = [f"{rng.getrandbits(32):08x}-{g}" for g in range(len(sizes))]
    draw = (lambda: float(rng.random() < 0.4)) if binary else (lambda: rng.choice([0.0, 0.5, 1.0, rng.uniform(-2, 2)]))
    rows = [(uid, draw()) for uid, n in zip(uids, sizes) for _ in range(n)]
    rng.shuffle(rows)
    for r in rng.sample(range(len(rows)), nan):
        rows[r] = (rows[r][0], math.nan)
    bs = len(rows)
    lengths = torch.tensor([rng.randint(1, length) for _ in range(bs)])
    mask = (torch.arange(length)[None, :] >= length - lengths[:, None]).to(torch.float64)  # right-aligned, as SkyRL
    rewards = torch.zeros(bs, length, dtype=torch.float64)
    for r, (_, score) in enumerate(rows):
        rewards[r, -1] = score - 0.25 if not math.isnan(score) else score
        rewards[r, length - 1 - rng.randrange(int(lengths[r]))] += 0.25 if not math.isnan(score) else 0.0
    return rewards, mask, [uid for uid, _ in rows], rows


def expected_of(rows, settings: dict, n: int) -> torch.Tensor:
    """The TRL trainer's advantages per row, with unscorable rows at 0 (the engine's documented rule)."""
    out = trl_path(rows, settings, n)
    out[torch.tensor([math.isnan(score) for _, score in rows])] = 0.0
    return out


# ------------------------------------------------------------------------------------------ the whole zoo

ZOO_SETTINGS = [{"estimator": name, **settings} for name, case in CASES.items() for settings in case.engine]
ZOO_SETTINGS.append({"estimator": "MaxRL_LOO"})  # names are case-insensitive, as in the TRL config


def test_every_estimator_is_covered():
    assert {s["estimator"].lower() for s in ZOO_SETTINGS} == set(ESTIMATORS)


@pytest.mark.parametrize("settings", ZOO_SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_every_estimator_through_skyrl_equals_the_trl_path(skyrl, settings):
    adapter, dispatch = skyrl
    name = settings["estimator"].lower()
    sizes = [8, 6, 8, 3, 8, 7, 8, 2]  # ragged: groups smaller than n_samples_per_prompt, some too small for K
    rewards, mask, uids, rows = skyrl_batch(sizes, seed=len(str(settings)), binary=ESTIMATORS[name].binary, nan=3)
    cfg = config(adapter, **settings)
    adapter.check_config(cfg)
    adv, returns = dispatch(token_level_rewards=rewards, response_mask=mask, index=uids, adv_estimator="ordergrad",
                            config=cfg.trainer.algorithm, values=None, gamma=1.0, lambd=1.0)  # fmt: skip
    expected = expected_of(rows, settings, n=8)
    assert torch.max(torch.abs(adv - expected[:, None] * mask)) <= 1e-12
    assert torch.equal(returns, adv) and torch.any(expected != 0)


OBJECTIVES = [  # objective as a SkyRL command line writes it, K, the ascending weights written out by hand
    ("TopM:2", 4, [0, 0, 0.5, 0.5]),
    ("ReMax", 3, [0, 0, 1]),
    ("CVaR:0.5", 4, [0.5, 0.5, 0, 0]),
    ("[0.1,-0.2,0.3,0.8]", 4, [0.1, -0.2, 0.3, 0.8]),  # a list on SkyRL's command line
    ("Mean", 1, [1.0]),  # K=1: RLOO
]


@pytest.mark.parametrize("objective,k,weights", OBJECTIVES, ids=lambda v: str(v))
def test_ordergrad_equals_subset_enumeration_from_a_command_line(skyrl, objective, k, weights):
    adapter, dispatch = skyrl
    cfg = adapter.OrderGradSkyRLConfig.from_cli_overrides([
        "trainer.algorithm.advantage_estimator=ordergrad", f"trainer.algorithm.ordergrad_objective={objective}",
        f"trainer.algorithm.ordergrad_k={k}", "generator.n_samples_per_prompt=8"])  # fmt: skip
    adapter.check_config(cfg)
    sizes = [5, 8, 6, k, 8, 2 * k + 1, k + 1]  # a group of K rows: N <= K, advantage 0
    rewards, mask, uids, rows = skyrl_batch(sizes, seed=k)
    import numpy as np

    adv, _ = dispatch(token_level_rewards=rewards.float(), response_mask=mask.float(), index=np.array(uids),
                      adv_estimator="ordergrad", config=cfg.trainer.algorithm)  # float32 and numpy uids: SkyRL's
    expected = torch.zeros(len(rows), dtype=torch.float64)
    for uid in dict.fromkeys(u for u, _ in rows):
        members = [r for r, (u, _) in enumerate(rows) if u == uid]
        if len(members) > k:
            expected[members] = k * torch.tensor(brute_advantage([rows[r][1] for r in members], weights), dtype=torch.float64)
    assert adv.dtype == torch.float32
    torch.testing.assert_close(adv.double(), expected[:, None] * mask, atol=2e-5, rtol=2e-6)


def test_padding_rows_get_zero_without_a_warning(skyrl, caplog):
    """SkyRL pads a batch with singleton uids `pad<i>` (loss-masked): 0, and not a reason to warn."""
    from ordergrad_trl.integrations import engine

    adapter, dispatch = skyrl
    rewards, mask, uids, rows = skyrl_batch([6, 6], seed=9)
    padded = torch.cat([rewards, rewards[:2]]), torch.cat([mask, mask[:2]]), uids + ["pad0", "pad1"]
    engine._warned.discard("skyrl")
    adv, _ = dispatch(token_level_rewards=padded[0], response_mask=padded[1], index=padded[2],
                      adv_estimator="ordergrad", config=config(adapter, n=6).trainer.algorithm)  # fmt: skip
    assert torch.all(adv[-2:] == 0) and torch.any(adv[:-2] != 0)
    assert "undefined for groups" not in caplog.text


# ------------------------------------------------------------------------------------------ settings


@pytest.mark.parametrize("case", BAD_SETTINGS, ids=case_id)
def test_bad_settings_raise_the_trl_configs_text(skyrl, case):
    """From the start-up check and from the estimator; a schedule is refused with SkyRL's reason."""
    adapter, dispatch = skyrl
    settings, n = case
    expected = (expected_message(settings, n) if "schedule" not in settings
                else "trainer.algorithm.ordergrad_schedule is not available in SkyRL")  # fmt: skip
    with pytest.raises(ValueError) as info:
        config(adapter, n=n, **settings)  # SkyRL's parser builds the config, and our check runs there
    assert str(info.value).startswith(expected) and (str(info.value) == expected or "schedule" in settings)
    algorithm = adapter.OrderGradAlgorithmConfig(advantage_estimator="ordergrad",
                                                 **{ENGINE_KEY[key]: value for key, value in settings.items()})
    rewards, mask, uids, _ = skyrl_batch([n, n], seed=1, binary=True)
    with pytest.raises(ValueError) as info:  # a config built without the check: the estimator refuses too
        dispatch(token_level_rewards=rewards, response_mask=mask, index=uids, adv_estimator="ordergrad",
                 config=algorithm)  # fmt: skip
    assert str(info.value).startswith(expected)


def test_the_config_adds_exactly_the_engine_keys(skyrl):
    """The fields our subclass adds to SkyRL's AlgorithmConfig are the keys every engine maps to `build_plan`."""
    from dataclasses import fields

    from skyrl.train.config import AlgorithmConfig

    from ordergrad_trl.integrations.engine import KEYS

    adapter, _ = skyrl
    added = {f.name for f in fields(adapter.OrderGradAlgorithmConfig)} - {f.name for f in fields(AlgorithmConfig)}
    assert added == set(KEYS)


def test_main_stops_a_bad_setting_before_ray_starts(skyrl):
    import ray

    adapter, _ = skyrl
    with pytest.raises(ValueError, match=r"must be smaller than num_generations \(8\)"):
        adapter.main(["trainer.algorithm.advantage_estimator=ordergrad", "trainer.algorithm.ordergrad_k=8",
                      "generator.n_samples_per_prompt=8", "trainer.logger=console"])  # fmt: skip
    assert not ray.is_initialized()


def test_ordergrad_fields_with_another_estimator_are_an_error(skyrl):
    adapter, _ = skyrl
    with pytest.raises(ValueError, match=r"ordergrad_k is set but trainer.algorithm.advantage_estimator='grpo'"):
        config(adapter, adv_estimator="grpo", k=4)
    assert adapter.check_config(config(adapter, adv_estimator="grpo")) is None


def test_defaults_follow_n_samples_per_prompt(skyrl):
    adapter, _ = skyrl
    for n, k, objective in [(3, 2, "TopM:2"), (2, 1, "Mean"), (12, 4, "TopM:2")]:
        stage = adapter.check_config(config(adapter, n=n)).stages[0]
        assert (stage.objective, stage.k) == (objective, k)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_skyrls_validation_accepts_every_estimator(skyrl, name):
    from skyrl.train.utils import validate_cfg

    adapter, _ = skyrl
    settings = next(s for s in ZOO_SETTINGS if s["estimator"] == name)
    cfg = config(adapter, **settings)
    adapter.check_config(cfg)
    validate_cfg(cfg)  # asserts, among others, that advantage_estimator is registered


def test_skyrls_strict_parser_refuses_a_misspelt_field(skyrl):
    adapter, _ = skyrl
    with pytest.raises(ValueError, match=r"Invalid fields \{'ordergrad_objetive'\} for OrderGradAlgorithmConfig"):
        adapter.OrderGradSkyRLConfig.from_cli_overrides(["trainer.algorithm.ordergrad_objetive=ReMax"])


# ------------------------------------------------------------------------------------------ MaxRL


def test_maxrl_ours_and_skyrls_have_the_exact_expected_gradient(skyrl):
    """E[(1/N) sum_i A_i d/dp log P(r_i)] over all 2^N outcome vectors of one group, Bernoulli(p) rewards, against
    d/dp sum_{k<N} pass@k / k = sum_{k<N} (1-p)^(k-1): ours exactly, SkyRL's up to its 1e-6 in the denominator."""
    adapter, dispatch = skyrl
    for n in (2, 3, 5, 8):
        outcomes = torch.tensor(list(itertools.product([0.0, 1.0], repeat=n)), dtype=torch.float64)  # (2^n, n)
        uids = [f"g{g}" for g in range(len(outcomes)) for _ in range(n)]
        rewards, mask = outcomes.reshape(-1, 1), torch.ones(outcomes.numel(), 1, dtype=torch.float64)
        ours, _ = dispatch(token_level_rewards=rewards, response_mask=mask, index=uids, adv_estimator="ordergrad",
                           config=config(adapter, n=n, estimator="maxrl").trainer.algorithm)
        theirs, _ = dispatch(token_level_rewards=rewards.clone(), response_mask=mask, index=uids,
                             adv_estimator="maxrl", config=config(adapter, n=n, adv_estimator="maxrl").trainer.algorithm)
        for p in (0.05, 0.3, 0.5, 0.9):
            prob = (p**outcomes * (1 - p) ** (1 - outcomes)).prod(1)  # (2^n,)
            score = outcomes / p - (1 - outcomes) / (1 - p)  # d/dp log P(r_i)
            closed = sum((1 - p) ** (k - 1) for k in range(1, n))
            for adv, tol in ((ours, 1e-12), (theirs, 1e-5)):
                grad = (prob * (adv.reshape(-1, n) * score).mean(1)).sum().item()
                assert abs(grad - closed) <= tol * closed, (n, p, grad, closed)
        some = outcomes.sum(1) > 0  # where SkyRL's epsilon is all that differs
        torch.testing.assert_close(theirs.reshape(-1, n)[some], ours.reshape(-1, n)[some], rtol=1e-5, atol=0)


# ------------------------------------------------------------------------------------------ processes


def _python(code: str, timeout: int = 600):
    return bounded.run([sys.executable, "-c", textwrap.dedent(code)], env=ENV, cwd=REPO.parent, text=True,
                       capture_output=True, timeout=timeout)  # fmt: skip


def test_a_ray_worker_gets_the_estimator_from_skyrls_registry_actor():
    """A fresh interpreter registers, starts a local Ray (1 CPU) and syncs as SkyRL's `initialize_ray` does; a Ray
    task that never imported this package fetches `ordergrad` from SkyRL's actor and computes what the driver does."""
    proc = _python("""
        import json, sys, ray, torch
        import ordergrad_trl.integrations.skyrl  # registers
        from skyrl.backends.skyrl_train.utils.ppo_utils import compute_advantages_and_returns, sync_registries
        from skyrl.train.config import AlgorithmConfig

        rewards = torch.tensor([[0.0], [1.0], [0.5], [1.0], [0.0], [2.0], [0.25], [1.0], [0.0], [0.75]])
        args = dict(token_level_rewards=rewards, response_mask=torch.ones_like(rewards), index=list("ababababab"),
                    adv_estimator="ordergrad", config=AlgorithmConfig(advantage_estimator="ordergrad"))

        @ray.remote(num_cpus=1)
        def in_a_worker(args):
            before = "ordergrad_trl.integrations.skyrl" in sys.modules
            from skyrl.backends.skyrl_train.utils.ppo_utils import compute_advantages_and_returns
            adv, _ = compute_advantages_and_returns(**args)
            return before, sys.modules["ordergrad_trl.integrations.skyrl"].__file__, adv.tolist(), __import__("os").getpid()

        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        sync_registries()
        before, where, adv, pid = ray.get(in_a_worker.remote(args))
        local, _ = compute_advantages_and_returns(**args)
        print(json.dumps({"before": before, "where": where, "same": adv == local.tolist(), "other_process":
                          pid != __import__("os").getpid(), "nonzero": any(a[0] != 0 for a in adv)}))
        ray.shutdown()
    """)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"before": False, "where": result["where"], "same": True, "other_process": True, "nonzero": True}
    assert result["where"].endswith("ordergrad_trl/integrations/skyrl.py")


def test_without_the_import_skyrl_does_not_know_the_name():
    """Registration is by import only (SkyRL has no plugin entry point): SkyRL's own main_base refuses the name."""
    proc = _python("""
        from skyrl.train.config import SkyRLTrainConfig
        from skyrl.train.utils import validate_cfg
        cfg = SkyRLTrainConfig.from_cli_overrides(["trainer.algorithm.advantage_estimator=ordergrad",
                                                   "trainer.logger=console"])
        validate_cfg(cfg)
    """)
    assert proc.returncode != 0 and "invalid advantage_estimator: ordergrad" in proc.stderr, proc.stderr[-3000:]


# ------------------------------------------------------------------------------------------ docs/skyrl.md


def _of(entry: str) -> list[Command]:
    return [c for c in documented() if " ".join(c.argv).startswith(entry)]


def test_the_page_shows_both_entrypoints_and_the_recipe():
    hand_over, recipe = _of(ENTRYPOINTS[1]), _of(ENTRYPOINTS[0])
    assert len(hand_over) == 1 and len(recipe) == 1, documented()
    assert hand_over[0].argv[3] == "trainer.override_entrypoint=ordergrad_trl.integrations.skyrl"
    assert "trainer.algorithm.advantage_estimator=ordergrad" in recipe[0].argv


def _tiny_inputs(tmp_path: Path, tiny_model_dir) -> list[str]:
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
                                        "env_class": "gsm8k", "reward_spec": {"method": "rule",
                                                                              "ground_truth": str(i + 1)}}) + "\n"
                            for i in range(4)))  # fmt: skip
    return [f"trainer.policy.model.path={tiny_model_dir}", f"data.train_data=['{data}']", "data.val_data=[]",
            "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.micro_forward_batch_size_per_gpu=1",
            "trainer.micro_train_batch_size_per_gpu=1", "trainer.eval_interval=-1",
            "trainer.eval_before_train=false", "trainer.logger=console", f"trainer.log_path={tmp_path / 'logs'}",
            f"trainer.ckpt_path={tmp_path / 'ckpt'}", f"trainer.export_path={tmp_path / 'export'}"]  # fmt: skip


@pytest.mark.parametrize("entry", ENTRYPOINTS)
def test_documented_command_runs_until_skyrl_needs_a_gpu(entry, tmp_path, tiny_model_dir):
    """The command as written, plus a tiny model and 4 prompts: our check and SkyRL's validation pass, Ray starts,
    and the run stops at a SkyRL placement group asking for GPUs. The recipe (8 GPUs per node) stops at SkyRL's
    peer-access probe in `initialize_ray`; the shorter command (SkyRL's placement defaults) also gets through the
    registry sync and SkyRL's dataset loading to its colocation placement group."""
    cmd, tiny = _of(entry)[0], _tiny_inputs(tmp_path, tiny_model_dir)
    replaced = tuple(arg.split("=")[0] + "=" for arg in tiny)
    argv = [sys.executable, *cmd.argv[1:3], *(a for a in cmd.argv[3:] if not a.startswith(replaced)), *tiny]
    proc = bounded.run(argv, env={**ENV, "SKYRL_RAY_PG_TIMEOUT_IN_S": "5"}, cwd=tmp_path, text=True,
                       capture_output=True, timeout=900)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    assert "Started a local Ray instance" in out, out[-4000:]
    assert re.search(r"Failed to create placement group .*requiring [\d.]+ GPUs", out), out[-4000:]
    if entry == ENTRYPOINTS[1]:
        assert "Synced registries to ray actor" in out and "Filtered dataset size: 4" in out, out[-4000:]
    assert "ordergrad" not in out.split("Failed to create placement group")[1][:2000]  # not our error


def test_the_gpu_recipe_passes_our_check_and_skyrls_validation(skyrl):
    from skyrl.train.utils import validate_cfg

    adapter, _ = skyrl
    cmd = _of(ENTRYPOINTS[0])[0]
    overrides = [a.replace("$HOME", str(Path.home())) for a in cmd.argv[3:]]
    cfg = adapter.OrderGradSkyRLConfig.from_cli_overrides(overrides)
    plan = adapter.check_config(cfg)
    assert (plan.estimator, plan.stages[0].objective, plan.stages[0].k) == ("ordergrad", "TopM:2", 4)
    validate_cfg(cfg)
    assert cfg.trainer.algorithm.loss_reduction == "seq_mean_token_sum_norm" and not cfg.trainer.algorithm.use_kl_loss


@pytest.mark.parametrize("weight", weighing_settings())  # every registered prompt weight
def test_prompt_weights_through_skyrls_dispatch_over_consecutive_steps(skyrl, weight):
    """Three steps through SkyRL's dispatch, then a new driver (window emptied): the oracle per uid group, skyrl.md."""
    from helpers.prompt_weight_oracle import engine_expected
    from ordergrad_trl.integrations import engine

    adapter, dispatch = skyrl
    settings = {"objective": "ReMax", "k": 3}
    cfg = config(adapter, **settings, prompt_weight=weight, prompt_weight_window=2)
    steps = [skyrl_batch([8, 6, 8, 8, 5, 8], seed=10 + s, binary=True, nan=2) for s in range(4)]
    expected = engine_expected([s[-1] for s in steps[:3]], settings, weight, 2, 8) + engine_expected(
        [steps[3][-1]], settings, weight, 2, 8)
    for step, ((rewards, mask, uids, _), want) in enumerate(zip(steps, expected)):
        if step in (0, 3):
            engine._windows.clear()  # a new driver (step 3: a resumed run) starts with an empty window
        adv, _ = dispatch(token_level_rewards=rewards, response_mask=mask, index=uids, adv_estimator="ordergrad",
                          config=cfg.trainer.algorithm, values=None, gamma=1.0, lambd=1.0)  # fmt: skip
        assert torch.max(torch.abs(adv - want[:, None] * mask)) <= 1e-12 and torch.any(want != 0)
    engine._windows.clear()
