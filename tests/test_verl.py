"""The `ordergrad` advantage estimator through verl's own code (verl environment; docs/verl.md#tests).

Oracles: the leave-one-out advantage by enumerating K-subsets, a_i = mean L(S) over S holding i minus mean L(S)
over S drawn from the others, with L(S) = sum_j w_j (S sorted ascending)_j and weights written out by hand; for
every estimator of the zoo, the TRL trainer's computation on the same groups (`plan.advantages`, then
`scale_advantages`); for every bad setting, the text `OrderGradConfig` raises (tests/helpers/plan_cases.py)."""

from __future__ import annotations

import itertools
import logging
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.optional import installed  # noqa: E402  (tests/, on sys.path by conftest)

if not installed("verl"):
    pytest.skip("verl is not installed: these tests run in the verl environment (docs/verl.md)",
                allow_module_level=True)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402

import ordergrad_trl.integrations.verl as adapter  # noqa: E402
from ordergrad_trl.integrations import engine  # noqa: E402
from helpers.estimator_cases import CASES  # noqa: E402
from ordergrad_trl.core.estimators import ESTIMATORS  # noqa: E402
from ordergrad_trl.core.plan import DEFAULT_OBJECTIVE, build_plan  # noqa: E402

from helpers.plan_cases import BAD_SETTINGS, ENGINE_KEY, case_id, expected_message, trl_path  # noqa: E402
from helpers import bounded  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

# objective (as a user writes it), K, the ascending weights written out by hand for the oracle
OBJECTIVES = [
    ("TopM:2", 4, [0, 0, 0.5, 0.5]),
    ("ReMax", 3, [0, 0, 1]),
    ("CVaR:0.5", 4, [0.5, 0.5, 0, 0]),
    ("Median", 3, [0, 1, 0]),
    ([0.1, -0.2, 0.3, 0.8], 4, [0.1, -0.2, 0.3, 0.8]),  # a list from Hydra: +algorithm.ordergrad_objective=[...]
    ("Mean", 1, [1.0]),  # K=1: RLOO
]


def oracle(scores: list[float], weights: list[float]) -> list[float]:
    """K * (E[L(S) | i in S] - E[L(S) | S from the others]) for every member, by enumeration."""
    n, k = len(scores), len(weights)

    def value(members) -> float:
        return sum(w * x for w, x in zip(weights, sorted(scores[m] for m in members)))

    out = []
    for i in range(n):
        others = [m for m in range(n) if m != i]
        with_i = [value((i, *rest)) for rest in itertools.combinations(others, k - 1)]
        without_i = [value(s) for s in itertools.combinations(others, k)]
        out.append(k * (sum(with_i) / len(with_i) - sum(without_i) / len(without_i)))
    return out


def shuffled_ragged_batch(sizes: list[int], seed: int, length: int = 7, binary: bool = False):
    """A DataProto like verl's: rows of each uid scattered, rewards spread over the response tokens."""
    rng = random.Random(seed)
    uids = [f"uid-{g}-{rng.getrandbits(32):08x}" for g in range(len(sizes))]
    draw = (lambda: float(rng.random() < 0.4)) if binary else (lambda: rng.choice([0.0, 0.5, 1.0, rng.uniform(-2, 2)]))
    rows = [(uid, draw()) for uid, n in zip(uids, sizes) for _ in range(n)]
    rng.shuffle(rows)
    bs = len(rows)
    lengths = torch.tensor([rng.randint(1, length) for _ in range(bs)])
    mask = (torch.arange(length)[None, :] < lengths[:, None]).to(torch.float64)  # (bs, L)
    rewards = torch.zeros(bs, length, dtype=torch.float64)  # (bs, L)
    for r, (_, score) in enumerate(rows):
        last = int(lengths[r]) - 1
        rewards[r, last] = score - 0.25  # a token-level part and an outcome part that sum to the score
        rewards[r, rng.randrange(last + 1)] += 0.25
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": np.array([uid for uid, _ in rows], dtype=object)},
    )
    return data, rows


def algorithm_config(objective, k: int):
    from omegaconf import OmegaConf

    return OmegaConf.create({"adv_estimator": "ordergrad", "ordergrad_objective": objective, "ordergrad_k": k})


# ------------------------------------------------------------------------------------------------ registration


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return bounded.run([sys.executable, "-c", textwrap.dedent(code)], env={**ENV, **env}, cwd=REPO.parent,
                       capture_output=True, text=True, timeout=300)  # fmt: skip


def test_entry_point_registers_in_a_fresh_interpreter():
    code = """
        import sys, verl
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn
        print(get_adv_estimator_fn("ordergrad").__module__, "trl" in sys.modules)
    """
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["ordergrad_trl.integrations.verl", "False"]  # no TRL import
    # and it is the entry point that does it: with verl's plugin loading off, the name is unknown
    off = _python(code, VERL_USE_EXTERNAL_PLUGINS="none")
    assert off.returncode != 0 and "Unknown advantage estimator" in off.stderr, off.stderr[-3000:]
    from importlib.metadata import entry_points

    assert [ep.value for ep in entry_points(group="verl.plugins") if ep.name == "ordergrad"] == [adapter.__name__]


def test_a_failing_registration_is_loud(tmp_path):
    """verl logs a failing plugin at debug level only; ours logs an error with the cause."""
    (tmp_path / "squatter.py").write_text(textwrap.dedent("""
        from verl.trainer.ppo.core_algos import register_adv_est
        register_adv_est("ordergrad")(lambda **kwargs: None)  # takes the name before the plugin loads
    """))
    proc = _python("import verl", VERL_USE_EXTERNAL_MODULES="squatter", PYTHONPATH=str(tmp_path))
    assert "ordergrad_trl could not register algorithm.adv_estimator=ordergrad with verl" in proc.stderr
    assert "has already been registered" in proc.stderr  # the cause, with its traceback
    # a failing import of the math core is just as loud (it happens before registration is tried)
    blocked = _python("""
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "ordergrad_trl.core.advantage":
                    raise ImportError("blocked by the test")
        sys.meta_path.insert(0, Block())
        import verl
    """)
    assert "ordergrad_trl could not register algorithm.adv_estimator=ordergrad" in blocked.stderr, blocked.stderr
    assert "blocked by the test" in blocked.stderr


@pytest.mark.parametrize(
    "found, tested",
    [("0.9.1", True), ("0.9.2", True), ("0.9.10.post1", True), ("0.9.0", False), ("0.9.0rc1", False),
     ("0.9.1rc1", False), ("0.10.0rc1", False), ("0.10.0.dev3", False), ("0.10.0", False), ("garbage", False)],
)  # fmt: skip
def test_untested_verl_versions_are_told_apart(found, tested):
    assert adapter.is_tested_verl(found) is tested


# ------------------------------------------------------------------------------------------ the estimator


@pytest.mark.parametrize("objective,k,weights", OBJECTIVES, ids=lambda v: str(v))
def test_compute_advantage_equals_subset_enumeration(objective, k, weights, caplog, monkeypatch):
    sizes = [5, 8, 6, k, 8, 1, 2 * k + 1, k + 1]  # ragged; groups of k and 1 rows have N <= K
    data, rows = shuffled_ragged_batch(sizes, seed=len(sizes) * k)
    mask = data.batch["response_mask"].clone()
    monkeypatch.setattr(engine, "_warned", set())  # the warning is once per process
    with caplog.at_level(logging.WARNING, logger=adapter.__name__):
        out = compute_advantage(data, adv_estimator="ordergrad", config=algorithm_config(objective, k))

    expected = torch.zeros(len(rows), dtype=torch.float64)
    for uid in {u for u, _ in rows}:
        members = [r for r, (u, _) in enumerate(rows) if u == uid]
        if len(members) > k:
            expected[members] = torch.tensor(oracle([rows[r][1] for r in members], weights), dtype=torch.float64)
    advantages = out.batch["advantages"]  # (bs, L)
    assert advantages.dtype == torch.float64
    assert torch.max(torch.abs(advantages - expected[:, None] * mask)) <= 1e-10
    assert torch.equal(out.batch["returns"], advantages)
    assert torch.all(advantages[mask == 0] == 0)
    small = sorted({n for n in sizes if n <= k})
    assert f"estimator 'ordergrad' is undefined for groups of {small} rollouts" in caplog.text


def test_float32_rewards_keep_their_dtype_and_match():
    data, rows = shuffled_ragged_batch([6, 9, 7], seed=3)
    exact = compute_advantage(data, adv_estimator="ordergrad", config=algorithm_config("TopM:2", 4))
    data32 = DataProto.from_dict(
        tensors={k: data.batch[k].float() for k in ("token_level_rewards", "response_mask")},
        non_tensors={"uid": data.non_tensor_batch["uid"]},
    )
    out = compute_advantage(data32, adv_estimator="ordergrad", config=algorithm_config("TopM:2", 4))
    assert out.batch["advantages"].dtype == torch.float32
    torch.testing.assert_close(out.batch["advantages"].double(), exact.batch["advantages"], atol=1e-6, rtol=0)


def test_defaults_are_top2_of_4_and_no_config_is_allowed():
    """verl writes the advantages into the batch it is given and returns that batch, so every call gets a fresh batch
    and each result is cloned: compared in place, the two results would be one tensor and the test could not fail."""
    from omegaconf import OmegaConf

    def advantages(config) -> torch.Tensor:
        data, _ = shuffled_ragged_batch([6, 9], seed=5)
        return compute_advantage(data, adv_estimator="ordergrad", config=config).batch["advantages"].clone()

    explicit = advantages(algorithm_config("TopM:2", 4))
    default = advantages(OmegaConf.create({"adv_estimator": "ordergrad"}))
    assert torch.equal(default, explicit)
    assert torch.any(explicit != 0)
    # the comparison can fail: another objective on the same batch gives other advantages
    assert not torch.equal(advantages(algorithm_config("ReMax", 3)), explicit)


def test_v1_trainer_path_delegates_to_the_estimator():
    """verl's V1 trainer (the default) goes through compute_advantage_for_multi_trajectories."""
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    data, rows = shuffled_ragged_batch([6, 5], seed=7)
    keys = [f"{uid}_0_{i}" for i, (uid, _) in enumerate(rows)]
    config = algorithm_config("ReMax", 3)
    direct = compute_advantage(data, adv_estimator="ordergrad", config=config).batch["advantages"].clone()
    data2, _ = shuffled_ragged_batch([6, 5], seed=7)
    out = compute_advantage_for_multi_trajectories(data2, batch_keys=keys, adv_estimator="ordergrad", config=config)
    assert torch.equal(out.batch["advantages"], direct)


@pytest.mark.parametrize("case", BAD_SETTINGS, ids=case_id)
def test_bad_settings_raise_the_same_text_as_the_trl_config(case):
    """The text `OrderGradConfig` raises for the same settings (tests/test_plan.py checks that side), from the
    start-up check of the composed config and from the estimator itself."""
    from omegaconf import OmegaConf

    settings, n = case
    expected = expected_message(settings, n)
    algorithm = {"adv_estimator": "ordergrad", **{ENGINE_KEY[key]: value for key, value in settings.items()}}
    full = OmegaConf.create({"algorithm": algorithm, "actor_rollout_ref": {"rollout": {"n": n}}})
    with pytest.raises(ValueError) as info:
        adapter.check_config(full)
    assert str(info.value) == expected
    data, _ = shuffled_ragged_batch([n, n], seed=1, binary=True)
    with pytest.raises(ValueError) as info:
        compute_advantage(data, adv_estimator="ordergrad", config=full.algorithm)  # n read from the parent config
    assert str(info.value) == expected


# ------------------------------------------------------------------------------------------ the whole zoo


ZOO_SETTINGS = [{"estimator": name, **settings} for name, case in CASES.items() for settings in case.engine]
ZOO_SETTINGS.append({"estimator": "MaxRL_LOO"})  # names are case-insensitive, as in the TRL config


def test_every_estimator_is_covered():
    assert {s["estimator"].lower() for s in ZOO_SETTINGS} == set(ESTIMATORS)


@pytest.mark.parametrize("settings", ZOO_SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_compute_advantage_equals_the_trl_path_for_every_estimator(settings):
    from omegaconf import OmegaConf

    name = settings["estimator"].lower()
    sizes = [8, 6, 8, 3, 8, 7, 8, 2]  # ragged: groups smaller than the rollout.n of 8, some too small for K
    data, rows = shuffled_ragged_batch(sizes, seed=len(str(settings)), binary=ESTIMATORS[name].binary)
    mask = data.batch["response_mask"].clone()
    full = OmegaConf.create({"algorithm": {"adv_estimator": "ordergrad",
                                           **{ENGINE_KEY[key]: value for key, value in settings.items()}},
                             "actor_rollout_ref": {"rollout": {"n": 8}}})  # fmt: skip
    adapter.check_config(full)
    out = compute_advantage(data, adv_estimator="ordergrad", config=full.algorithm)
    expected = trl_path(rows, settings, n=8)
    assert torch.max(torch.abs(out.batch["advantages"] - expected[:, None] * mask)) <= 1e-12
    assert torch.any(expected != 0)


def test_defaults_follow_rollout_n_as_the_trl_defaults_follow_num_generations():
    """Unset K is min(4, n-1) of verl's rollout.n (TRL: num_generations); the default objective, Mean at K=1."""
    from omegaconf import OmegaConf

    data, rows = shuffled_ragged_batch([3, 3, 3], seed=2)
    for n, k, objective in [(3, 2, DEFAULT_OBJECTIVE), (2, 1, "Mean"), (12, 4, DEFAULT_OBJECTIVE)]:
        full = OmegaConf.create({"algorithm": {"adv_estimator": "ordergrad"}, "actor_rollout_ref": {"rollout": {"n": n}}})
        plan = adapter.plan_from_config(full.algorithm, adapter._rollout_n(full.algorithm))
        assert (plan.stages[0].k, plan.stages[0].objective) == (k, objective)
        out = compute_advantage(data, adv_estimator="ordergrad", config=full.algorithm).batch["advantages"]
        expected = trl_path(rows, {}, n=n) if n > 2 else trl_path(rows, {"k": 1}, n=3)
        assert torch.allclose(out, expected[:, None] * data.batch["response_mask"], atol=1e-12)
    assert torch.all(out == 0)  # K=4 at rollout.n=12: groups of 3 are too small, as in TRL's evaluation
    k_one = OmegaConf.create({"adv_estimator": "ordergrad", "ordergrad_k": 1})  # valid in TRL, so here: Mean at K=1
    assert [(s.objective, s.k) for s in adapter.plan_from_config(k_one, 8).stages] == [("Mean", 1)]


def test_schedule_follows_verls_global_step(monkeypatch):
    from omegaconf import OmegaConf
    from verl.utils.skip.skip_manager import SkipManager

    schedule = ["0 ReMax@3", "2 Mean@1"]
    full = OmegaConf.create({"algorithm": {"adv_estimator": "ordergrad", "ordergrad_schedule": schedule},
                             "actor_rollout_ref": {"rollout": {"n": 6}}})  # fmt: skip
    data, rows = shuffled_ragged_batch([6, 6, 5], seed=4)
    for verl_step, stage in [(-1, 0), (1, 0), (2, 0), (3, 1), (40, 1)]:  # TRL's step = verl's - 1
        monkeypatch.setattr(SkipManager, "step", verl_step)
        out = compute_advantage(data, adv_estimator="ordergrad", config=full.algorithm).batch["advantages"]
        expected = trl_path(rows, {"schedule": schedule}, n=6, stage=stage)
        assert torch.allclose(out, expected[:, None] * data.batch["response_mask"], atol=1e-12), verl_step


# ------------------------------------------------------------------------------------------ prompt weights


@pytest.mark.parametrize("weight", ["inverse", "curverl", "gaussian:0.4,0.25"])
def test_prompt_weights_through_verls_dispatch_over_consecutive_steps(weight):
    """Three steps through verl's `compute_advantage`: the estimator per uid group times the oracle's weight; for
    `curverl` the window is carried by this (the driver's) process from step to step, and a restart (a new
    process: the window emptied) makes the next batch its own reference, as docs/verl.md says."""
    from omegaconf import OmegaConf
    from helpers.prompt_weight_oracle import engine_expected

    engine._windows.clear()
    settings = {"objective": "ReMax", "k": 3}
    full = OmegaConf.create({"algorithm": {"adv_estimator": "ordergrad", "ordergrad_prompt_weight": weight,
                                           "ordergrad_prompt_weight_window": 2,
                                           **{ENGINE_KEY[key]: value for key, value in settings.items()}},
                             "actor_rollout_ref": {"rollout": {"n": 8}}})  # fmt: skip
    adapter.check_config(full)
    steps = [shuffled_ragged_batch([8, 6, 8, 8, 5, 8], seed=10 + s, binary=True) for s in range(4)]
    expected = engine_expected([rows for _, rows in steps[:3]], settings, weight, 2, n=8)
    for (data, _), want in zip(steps[:3], expected):
        mask = data.batch["response_mask"].clone()
        out = compute_advantage(data, adv_estimator="ordergrad", config=full.algorithm).batch["advantages"]
        assert torch.max(torch.abs(out - want[:, None] * mask)) <= 1e-12
    assert any(torch.any(w != 0) for w in expected)
    engine._windows.clear()  # a resumed run's driver starts with an empty window
    data, rows = steps[3]
    (want,) = engine_expected([rows], settings, weight, 2, n=8)
    out = compute_advantage(data, adv_estimator="ordergrad", config=full.algorithm).batch["advantages"]
    assert torch.max(torch.abs(out - want[:, None] * data.batch["response_mask"])) <= 1e-12
    engine._windows.clear()
