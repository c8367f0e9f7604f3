"""The estimator zoo's shared contract (shape, dtype, NaN, constant groups, centering, bad parameters, registry),
TRL's GRPO statistics, pass@k/PKPO tables at user sizes, CUDA and devices without float64."""

import math

import pytest
import torch
from test_estimators import DEFAULT_PARAMS, reward_batch

from ordergrad_trl.core.estimators import (
    ESTIMATORS,
    NAN_RULES,
    bind_estimator,
    estimator_params,
    get_estimator,
    grpo,
    maxk_tang,
    ordergrad,
    passk_chen,
    pkpo,
    register_estimator,
    rs_grpo,
)
from ordergrad_trl.core.estimators import registry as estimator_registry
from ordergrad_trl.core.objectives import DEFAULT_K, DEFAULT_OBJECTIVE
from ordergrad_trl.core.schedule import ObjectiveStage


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_contract_shape_dtype_nan_constant_and_permutation(name):
    params = DEFAULT_PARAMS[name]
    fn = get_estimator(name)
    r = reward_batch(binary=ESTIMATORS[name].binary, seed=7)
    a = fn(r, **params)
    assert a.shape == r.shape and a.dtype == torch.float64 and bool(torch.isfinite(a).all())
    assert bool((a[torch.isnan(r)] == 0).all())  # unscorable -> 0
    assert bool((a[3] == 0).all())  # all-NaN group
    const = torch.full((3, 6), 1.0, dtype=torch.float32)
    const[1] = 0.0
    out = fn(const, **params)
    assert out.dtype == torch.float32 and torch.equal(out, torch.zeros_like(out))  # exactly 0, not 1e-17
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(fn(r[:, perm], **params), a[:, perm], atol=1e-12)
    ints = fn(torch.ones(2, 6, dtype=torch.long), **params)
    assert ints.dtype == torch.float64
    with pytest.raises(ValueError, match="inf"):
        fn(torch.tensor([[0.0, 1.0, math.inf, 0.0, 1.0, 0.0]]), **params)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_centered_exactly_where_claimed(name):
    """The registry's `centered` column (docs/estimators.md's table) holds: "exactly", or not (and ">= 0")."""
    r = reward_batch(binary=ESTIMATORS[name].binary, seed=11, g=200)
    a = get_estimator(name)(r, **DEFAULT_PARAMS[name])
    sums = a.sum(-1).abs()
    claim = ESTIMATORS[name].centered
    if claim == "exactly":
        assert sums.max() < 1e-9
    else:
        assert claim.startswith("no") and sums.max() > 0.1  # not centered, and the test would notice if it became so
        assert bool((a >= 0).all()) == (">= 0" in claim)


def check_nan_rule_and_minimum_group(entry, params) -> None:
    """The registry row's `nan` rule and `min_group`, checked on groups with every count of valid rewards: NaN gets 0;
    "drop": the rest equals the group of its valid rewards alone; "chunk": NaN is left out of its chunk (the same
    as a reward below every valid one of the chunk); fewer valid rewards than the minimum: all 0, the minimum
    itself: some nonzero advantage (so it is tight); a narrower call raises ValueError or gives all 0."""
    minimum, fn, width = entry.group_minimum(**params), entry.fn, 6
    assert isinstance(minimum, int) and 1 <= minimum <= width, (entry.name, minimum)
    gen = torch.Generator().manual_seed(3)
    r = reward_batch(binary=entry.binary, seed=21, g=70)  # (70, 6)
    for g in range(5, 70):  # every count of NaN entries, at random places
        r[g, torch.randperm(width, generator=gen)[: g % (width + 1)]] = math.nan
    a = fn(r, **params)
    for row, adv in zip(r, a):
        valid = ~torch.isnan(row)
        assert bool((adv[~valid] == 0).all())
        if int(valid.sum()) < minimum:
            assert bool((adv == 0).all()), (entry.name, row)
        elif entry.nan == "drop":
            assert torch.allclose(adv[valid], fn(row[valid][None], **params)[0], rtol=1e-12, atol=1e-12), row
        else:  # "chunk", one chunk of the whole group (the default k)
            assert torch.allclose(adv, fn(row.nan_to_num(float(row.nan_to_num(0.0).min()) - 1.0)[None], **params)[0]
                                  .where(valid, 0.0), rtol=1e-12, atol=1e-12), row  # fmt: skip
    tight = torch.full((1, width), math.nan, dtype=torch.float64)
    tight[0, :minimum] = torch.arange(minimum) == 0 if entry.binary else torch.arange(minimum, dtype=torch.float64)
    assert bool((fn(tight, **params) != 0).any()), f"{entry.name}: min_group={minimum} is not tight"
    for n in range(1, minimum):
        try:
            assert bool((fn((torch.arange(n)[None] == 0).double(), **params) == 0).all())
        except ValueError:
            pass


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_the_nan_rule_and_minimum_group_of_the_registry_row_hold(name):
    entry = ESTIMATORS[name]
    assert entry.nan in NAN_RULES and entry.min_group is not None, f"{name}: declare nan= and min_group="
    check_nan_rule_and_minimum_group(entry, DEFAULT_PARAMS[name])


def test_bad_parameters_raise():
    r = torch.rand(2, 6)
    with pytest.raises(ValueError, match="binary"):
        passk_chen(r, k=2)
    with pytest.raises(ValueError, match="scale"):
        grpo(r, scale="batchwise")
    with pytest.raises(ValueError, match="k must be an integer >= 2"):
        pkpo(r, k=1)
    with pytest.raises(ValueError, match="N >= k"):
        pkpo(r, k=7)
    with pytest.raises(ValueError, match="multiple of k"):
        maxk_tang(r, k=4)
    with pytest.raises(ValueError, match="beta"):
        rs_grpo(r, beta=math.inf)
    with pytest.raises(ValueError, match="N=6"):
        ordergrad(r, objective="ReMax", k=6)  # leave-one-out needs N > K
    with pytest.raises(ValueError, match="Valid forms"):
        ordergrad(r, objective="Maxx", k=2)


def test_registry_lookup_and_binding():
    assert get_estimator(" PKPO ") is pkpo and ESTIMATORS["pkpo"].fn is pkpo
    with pytest.raises(ValueError, match="valid names: " + ", ".join(ESTIMATORS)):
        get_estimator("dapo")
    assert list(ESTIMATORS)[:3] == ["ordergrad", "grpo", "rloo"] and {"maxrl", "maxrl_loo"} <= set(ESTIMATORS)
    assert estimator_params("ordergrad") == {"objective": DEFAULT_OBJECTIVE, "k": DEFAULT_K}
    assert estimator_params("rloo") == {}
    assert estimator_params("grpo") == {"scale": "none"}  # the std is the caller's scale_rewards
    r = torch.rand(3, 8)
    bound = bind_estimator("ordergrad", num_generations=8, objective="ReMax", k=3)
    assert torch.equal(bound(r), ordergrad(r, objective="ReMax", k=3))
    with pytest.raises(ValueError, match="accepts: objective, k"):
        bind_estimator("ordergrad", beta=1.0)
    with pytest.raises(ValueError, match="N=4"):
        bind_estimator("ordergrad", num_generations=4, k=4)  # caught at bind time, not at the first batch
    with pytest.raises(ValueError, match="multiple of k"):
        bind_estimator("maxk_tang", num_generations=6, k=4)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_one_registry_every_lookup_agrees(name):
    """The function, the registry entry called with keyword parameters and with a default stage compute the same
    thing (the two registries this replaced disagreed about grpo); a stage hands `objective` its weights."""
    r = reward_batch(binary=ESTIMATORS[name].binary, seed=8)
    entry = ESTIMATORS[name]
    defaults = get_estimator(name)(r)
    assert torch.equal(entry(r), defaults)
    stage = ObjectiveStage(k=entry.params.get("k") or r.shape[-1])
    expected = get_estimator(name)(r, **{p: getattr(stage, p) for p in entry.reads})  # `objective` as its string
    assert torch.equal(entry(r, stage), expected)
    if not entry.reads:
        assert torch.equal(entry(r, stage), defaults)


def test_a_duplicate_name_is_refused_and_a_new_one_is_listed():
    facts = dict(advantage="a", unbiased_for="u", centered="exactly", source="s", summary="s")
    with pytest.raises(ValueError, match=r"estimator name 'grpo' is already registered by .*mean\.grpo"):
        register_estimator("grpo", **facts)(lambda rewards: rewards)
    with pytest.raises(ValueError, match="already registered"):
        register_estimator("rloo")(lambda rewards: rewards)  # with or without the table's facts
    with pytest.raises(ValueError, match="lower-case identifiers"):
        register_estimator("My Estimator", **facts)

    try:
        @register_estimator("zero", **facts)
        def zero(rewards, *, k: int = 3):
            return torch.zeros_like(rewards)

        entry = ESTIMATORS["zero"]
        assert (entry.params, entry.reads, entry.options) == ({"k": 3}, ("k",), {})
        assert "zero (s)" in estimator_registry.estimator_help()
        assert "| `zero` (k=3) | a | u | exactly | any | s |" in estimator_registry.estimator_table()
    finally:
        estimator_registry._ROWS.unregister("zero")  # the package's registry stays as it was
    assert "zero" not in ESTIMATORS


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_grpo_matches_trl_statistics(scale):
    # TRL 1.16 _generate_and_score_completions (sum_then_normalize) on a flat (G*N,) reward vector, NaN = unscorable
    nanstd = pytest.importorskip("trl.trainer.utils").nanstd
    r = reward_batch(binary=False, seed=5)
    flat, n = r.reshape(-1), r.shape[-1]
    mean = torch.nanmean(flat.view(-1, n), dim=1).repeat_interleave(n, dim=0)
    std = nanstd(flat.view(-1, n), dim=1).repeat_interleave(n, dim=0) if scale != "batch" else nanstd(flat)
    expected = flat - mean
    if scale != "none":
        expected = expected / (std + 1e-4)
    expected = torch.nan_to_num(expected, nan=0.0).view(-1, n)
    assert torch.allclose(grpo(r, scale=scale), expected, atol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_cuda_matches_cpu(name):
    r = reward_batch(binary=ESTIMATORS[name].binary, seed=2)
    cpu = get_estimator(name)(r, **DEFAULT_PARAMS[name])
    gpu = get_estimator(name)(r.cuda(), **DEFAULT_PARAMS[name])
    assert gpu.device.type == "cuda" and torch.allclose(gpu.cpu(), cpu, atol=1e-12)


@pytest.mark.parametrize("n_max,k", [(256, 128), (300, 7)])
def test_pass_at_k_and_pkpo_tables_at_user_sizes_match_exact_ratios(n_max, k):
    from fractions import Fraction

    from ordergrad_trl.core.estimators.best_of_k import _passk_table, _pkpo_table

    passk, pk = _passk_table(n_max, k), _pkpo_table(n_max, k)
    for n in (k, k + 1, n_max // 2, n_max - 1, n_max):
        for c in sorted({0, 1, n // 3, n - k, n - k + 1, n - 1, n} & set(range(n + 1))):
            e0 = Fraction(math.comb(n - c, k), math.comb(n, k))
            e1 = Fraction(math.comb(n - c - 1, k - 1), math.comb(n - 1, k - 1)) if c < n else 0
            assert passk[n, c, 0].item() == pytest.approx(float(e0), rel=1e-12, abs=1e-300), (n, c)
            assert passk[n, c, 1].item() == pytest.approx(float(e1), rel=1e-12, abs=1e-300), (n, c)
        total = math.comb(n - 1, k - 1)
        for s in sorted({1, k - 1, k, n // 2, n - 1} & set(range(1, n))):
            cdf = Fraction(k * sum(math.comb(m - 1, k - 2) for m in range(1, s + 1)), total)
            assert pk[n, s - 1].item() == pytest.approx(float(cdf), rel=1e-12, abs=1e-300), (n, s)
    assert (passk[:k] == 0).all() and (pk[:k] == 0).all()


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_devices_without_float64_compute_on_the_cpu(monkeypatch, name):
    """Simulated MPS (no float64): float64 math moves to the CPU and the result comes back as float32."""
    from helpers.fake_mps import fake_mps, no_float64

    no_float64(monkeypatch)
    r = reward_batch(binary=ESTIMATORS[name].binary, seed=4)
    expected = get_estimator(name)(r, **DEFAULT_PARAMS[name])
    got = get_estimator(name)(fake_mps(r.float()), **DEFAULT_PARAMS[name])
    assert got.dtype == torch.float32 and torch.allclose(got.double(), expected, atol=1e-5)
    if name != "passk_chen":
        assert get_estimator(name)(fake_mps(torch.ones(2, 6, dtype=torch.int32)), **DEFAULT_PARAMS[name]).dtype \
            == torch.float32


def test_docs_table_and_config_help_are_generated_from_the_registry():
    """docs/estimators.md shows `estimator_table()` verbatim and the config help lists every registered name."""
    from pathlib import Path

    from ordergrad_trl.core.estimators import estimator_help, estimator_table

    docs = (Path(__file__).resolve().parents[1] / "docs" / "estimators.md").read_text()
    assert estimator_table() in docs, "docs/estimators.md's table is stale: paste estimator_table() there"
    help_text = estimator_help()
    assert all(f"{name} (" in help_text for name in ESTIMATORS)
    for entry in ESTIMATORS.values():  # every fact of the table is given
        assert all((entry.advantage, entry.unbiased_for, entry.centered, entry.source, entry.summary)), entry.name
