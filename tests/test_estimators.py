"""The estimator zoo against per-group loops written from each paper's formula, exact-enumeration checks of which
estimators are unbiased for which objective, the claimed centering, and the relations between estimators."""

import itertools
import math
import statistics

import pytest
import torch
from oracle import brute_advantage

from ordergrad_trl import lstat_value, rank_weights
from ordergrad_trl.core.estimators import (
    ESTIMATORS,
    bind_estimator,
    estimator_params,
    get_estimator,
    grpo,
    maxk_tang,
    ordergrad,
    passk_chen,
    pkpo,
    rloo,
    rs_grpo,
)

NAN = float("nan")

# one parameter setting per estimator that fits groups of N = 6
DEFAULT_PARAMS = {
    "ordergrad": dict(objective="TopM:2", k=4),
    "grpo": dict(scale="group"),
    "rloo": dict(),
    "maxk_tang": dict(k=None),
    "passk_chen": dict(k=3),
    "pkpo": dict(k=3),
    "rs_grpo": dict(beta=2.0),
}
CENTERED = {"ordergrad", "grpo", "rloo", "passk_chen", "rs_grpo"}


def reward_batch(binary: bool, seed: int = 0, g: int = 40, n: int = 6) -> torch.Tensor:
    """(G, N) float64 rewards with ties, a constant group, NaN (unscorable) entries and an all-NaN group."""
    gen = torch.Generator().manual_seed(seed)
    if binary:
        r = (torch.rand(g, n, generator=gen) < 0.4).double()
    else:
        r = torch.randint(0, 4, (g, n), generator=gen).double() / 3 + (torch.rand(g, n, generator=gen) < 0.5) * 0.25
        r[: g // 2] = torch.randn(g // 2, n, generator=gen, dtype=torch.float64)  # half distinct, half tied
    r[0] = 1.0
    r[1, :2] = NAN
    r[2, 1:] = NAN
    r[3] = NAN
    r[4, 3] = NAN
    return r


def valid_lists(r: torch.Tensor):
    """Per group: list of (index, reward) of the non-NaN entries."""
    return [[(i, x) for i, x in enumerate(row.tolist()) if not math.isnan(x)] for row in r]


def scatter_rows(rows, shape) -> torch.Tensor:
    """Per-group dicts {index: advantage} -> (G, N) tensor, 0 elsewhere."""
    out = torch.zeros(shape, dtype=torch.float64)
    for g, row in enumerate(rows):
        for i, a in row.items():
            out[g, i] = a
    return out


# ---------------------------------------------------------------- per-group loop oracles, one per paper formula


def loop_ordergrad(r, objective, k):
    w = rank_weights(objective, k).tolist()
    rows = []
    for items in valid_lists(r):
        vals = [x for _, x in items]
        adv = brute_advantage(vals, w) if len(vals) > k else [0.0] * len(vals)
        rows.append({i: k * a for (i, _), a in zip(items, adv)})
    return scatter_rows(rows, r.shape)


def loop_grpo(r, scale):
    all_valid = [x for items in valid_lists(r) for _, x in items]
    batch_std = statistics.stdev(all_valid)
    rows = []
    for items in valid_lists(r):
        vals = [x for _, x in items]
        if len(vals) < 2:
            rows.append({})
            continue
        mean = statistics.fmean(vals)
        std = {"group": statistics.stdev(vals), "batch": batch_std, "none": None}[scale]
        rows.append({i: (x - mean) / (std + 1e-4) if std is not None else x - mean for i, x in items})
    return scatter_rows(rows, r.shape)


def loop_rloo(r):
    rows = []
    for items in valid_lists(r):
        rows.append(
            {i: x - statistics.fmean([y for j, y in items if j != i]) for i, x in items} if len(items) > 1 else {}
        )
    return scatter_rows(rows, r.shape)


def loop_maxk_tang(r, k):
    n = r.shape[-1]
    k = n if k is None else k
    rows = []
    for row in r.tolist():
        out = {}
        for start in range(0, n, k):
            chunk = [(i, row[i]) for i in range(start, start + k) if not math.isnan(row[i])]
            if len(chunk) < 2:
                continue
            best = max(x for _, x in chunk)
            for i, _ in chunk:
                out[i] = k * (best - max(y for j, y in chunk if j != i))
        rows.append(out)
    return scatter_rows(rows, r.shape)


def loop_passk_chen(r, k):
    """The README formula of RUCAIBox/Passk_Training with the 1e-6 of its code/passk_adv.py."""
    rows = []
    for items in valid_lists(r):
        n = len(items)
        c = sum(1 for _, x in items if x == 1)
        if n < k:
            rows.append({})
            continue
        mean = 1 - math.comb(n - c, k) / math.comb(n, k)
        sigma = math.sqrt(mean * (1 - mean))
        pos = (1 - mean) / (sigma + 1e-6)
        no_pass = math.comb(n - c - 1, k - 1) / math.comb(n - 1, k - 1) if c < n else 0.0  # scipy's comb(-1, .) = 0
        neg = (1 - mean - no_pass) / (sigma + 1e-6)
        rows.append({i: pos if x == 1 else neg for i, x in items})
    return scatter_rows(rows, r.shape)


def loop_pkpo(r, k):
    """n * s^(loo-1): n/C(n,k) * sum of max over k-subsets holding i, minus k * E[max of (k-1) others]."""
    rows = []
    for items in valid_lists(r):
        vals = [x for _, x in items]
        n = len(vals)
        if n < k:
            rows.append({})
            continue
        out = {}
        for pos, (i, x) in enumerate(items):
            others = vals[:pos] + vals[pos + 1 :]
            with_i = [max((x,) + s) for s in itertools.combinations(others, k - 1)]
            s_i = sum(with_i) / math.comb(n, k)  # the paper's s_i: average of max over all k-subsets, i's share
            baseline = k / n * statistics.fmean(max(s) for s in itertools.combinations(others, k - 1))
            out[i] = n * (s_i - baseline)
        rows.append(out)
    return scatter_rows(rows, r.shape)


def loop_rs_grpo(r, beta):
    rows = []
    for items in valid_lists(r):
        if len(items) < 2:
            rows.append({})
            continue
        mean_exp = statistics.fmean(math.exp(beta * x) for _, x in items)
        rows.append({i: (math.exp(beta * x) / mean_exp - 1) / beta for i, x in items})
    return scatter_rows(rows, r.shape)


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize(
    "name,params,oracle",
    [
        ("ordergrad", dict(objective="TopM:2", k=4), lambda r: loop_ordergrad(r, "TopM:2", 4)),
        ("ordergrad", dict(objective="CVaR:0.5", k=3), lambda r: loop_ordergrad(r, "CVaR:0.5", 3)),
        ("ordergrad", dict(objective="ReMax", k=2), lambda r: loop_ordergrad(r, "ReMax", 2)),
        ("grpo", dict(scale="group"), lambda r: loop_grpo(r, "group")),
        ("grpo", dict(scale="batch"), lambda r: loop_grpo(r, "batch")),
        ("grpo", dict(scale="none"), lambda r: loop_grpo(r, "none")),
        ("rloo", dict(), loop_rloo),
        ("maxk_tang", dict(), lambda r: loop_maxk_tang(r, None)),
        ("maxk_tang", dict(k=3), lambda r: loop_maxk_tang(r, 3)),
        ("maxk_tang", dict(k=2), lambda r: loop_maxk_tang(r, 2)),
        ("pkpo", dict(k=2), lambda r: loop_pkpo(r, 2)),
        ("pkpo", dict(k=4), lambda r: loop_pkpo(r, 4)),
        ("pkpo", dict(k=6), lambda r: loop_pkpo(r, 6)),
        ("rs_grpo", dict(beta=2.0), lambda r: loop_rs_grpo(r, 2.0)),
        ("rs_grpo", dict(beta=-0.7), lambda r: loop_rs_grpo(r, -0.7)),
    ],
)
def test_matches_loop_oracle(name, params, oracle, binary):
    r = reward_batch(binary, seed=len(str(params)))
    got = get_estimator(name)(r, **params)
    assert got.shape == r.shape and got.dtype == torch.float64
    assert torch.allclose(got, oracle(r), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("k", [1, 2, 3, 6])
def test_passk_chen_matches_loop_oracle(k):
    r = reward_batch(binary=True, seed=k)
    assert torch.allclose(passk_chen(r, k=k), loop_passk_chen(r, k), rtol=1e-9, atol=1e-9)


def test_pkpo_matches_numbers_of_the_paper_listing():
    # n * s^(loo-1) from a transcription of Walder & Karkhanis' Listing 1 (numpy), run once on this group
    g = torch.tensor([0.5, -1.25, 2.0, 0.5, 3.0, 0.0], dtype=torch.float64)
    expected = {2: [0.9, 0.0, 3.3, 0.9, 5.3, 0.5], 3: [0.15, 0.0, 2.85, 0.15, 5.85, 0.0], 6: [0, 0, 0, 0, 6.0, 0]}
    for k, values in expected.items():
        assert torch.allclose(pkpo(g, k=k), torch.tensor(values, dtype=torch.float64), atol=1e-12), k


def test_maxk_tang_ties_at_the_top_give_zero():
    r = torch.tensor([[1.0, 3.0, 2.0, 3.0], [1.0, 5.0, 2.0, 3.0]])
    assert torch.equal(maxk_tang(r), torch.tensor([[0.0, 0, 0, 0], [0, 4 * 2.0, 0, 0]]))
    assert torch.equal(maxk_tang(r, k=2), torch.tensor([[0.0, 2 * 2.0, 0, 2 * 1.0], [0, 2 * 4.0, 0, 2 * 1.0]]))


# ---------------------------------------------------------------- relations between estimators


@pytest.mark.parametrize("k", [1, 2, 4, 5])
def test_ordergrad_mean_is_rloo(k):
    r = reward_batch(binary=False, seed=k)[5:]  # full groups: with n <= K valid, ordergrad gives 0 and rloo does not
    assert torch.allclose(ordergrad(r, objective="Mean", k=k), rloo(r), atol=1e-12)


def test_grpo_without_scaling_is_rloo_times_n_minus_one_over_n():
    r = torch.randn(30, 7, dtype=torch.float64)
    assert torch.allclose(grpo(r, scale="none"), rloo(r) * 6 / 7, atol=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_passk_chen_is_ordergrad_remax_rescaled_per_group(k):
    # A_chen = (q_i - pass@k) / (sigma + 1e-6) and K * lstat_advantage = K n/(n-k) (q_i - pass@k)
    r = (torch.rand(200, 8, generator=torch.Generator().manual_seed(k)) < 0.3).double()
    v = lstat_value(r, rank_weights("ReMax", k))  # (G,) unbiased pass@k
    scale = (8 - k) / (8 * k) / ((v * (1 - v)).sqrt() + 1e-6)
    assert torch.allclose(passk_chen(r, k=k), ordergrad(r, objective="ReMax", k=k) * scale[:, None], atol=1e-9)


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("k", [2, 3, 5])
def test_pkpo_centered_is_a_mix_of_ordergrad_remax_at_k_and_k_minus_one(k, binary):
    # pkpo_i - mean_j pkpo_j = (n-k)/n ordergrad(ReMax, k) + k/n ordergrad(ReMax, k-1); the group mean
    # k (pass@k - pass@(k-1)) is the non-centered part
    n = 7
    r = reward_batch(binary, seed=k, n=n)[5:]  # full groups
    a = pkpo(r, k=k)
    mix = (n - k) / n * ordergrad(r, objective="ReMax", k=k) + k / n * ordergrad(r, objective="ReMax", k=k - 1)
    assert torch.allclose(a - a.mean(-1, keepdim=True), mix, atol=1e-12)
    gap = lstat_value(r, rank_weights("ReMax", k)) - lstat_value(r, rank_weights("ReMax", k - 1))
    assert torch.allclose(a.mean(-1), k * gap, atol=1e-12)


def test_pkpo_binary_closed_form():
    # failures get 0, successes k (1 - pass@(k-1) of the other n-1, of which c-1 succeed)
    r = reward_batch(binary=True, seed=3, n=8)[5:]
    k, n = 3, 8
    a = pkpo(r, k=k)
    c = r.sum(-1, keepdim=True)
    no_pass = [[math.comb(n - 1 - int(ci - 1), k - 1) / math.comb(n - 1, k - 1)] for ci in c]
    success = k * torch.tensor(no_pass, dtype=torch.float64)  # k (1 - pass@(k-1))
    assert torch.allclose(a, torch.where(r == 1, success, 0.0), atol=1e-12)


def test_rs_grpo_small_beta_is_mean_centered_reward_and_stable_for_large_beta():
    r = torch.randn(20, 6, dtype=torch.float64)
    assert torch.allclose(rs_grpo(r, beta=1e-9), r - r.mean(-1, keepdim=True), atol=1e-8)
    assert torch.equal(rs_grpo(r, beta=0.0), r - r.mean(-1, keepdim=True))
    big = rs_grpo(r * 100, beta=50.0)  # exp(5000) overflows; the shifted form does not
    assert bool(torch.isfinite(big).all()) and big.sum(-1).abs().max() < 1e-9


# ---------------------------------------------------------------- the shared contract


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_contract_shape_dtype_nan_constant_and_permutation(name):
    params = DEFAULT_PARAMS[name]
    fn = get_estimator(name)
    r = reward_batch(binary=name == "passk_chen", seed=7)
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
    r = reward_batch(binary=name == "passk_chen", seed=11, g=200)
    a = get_estimator(name)(r, **DEFAULT_PARAMS[name])
    sums = a.sum(-1).abs()
    if name in CENTERED:
        assert sums.max() < 1e-9
    else:
        assert sums.max() > 0.1  # not centered, and the test would notice if it became so
        assert bool((a >= 0).all())


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
    assert get_estimator(" PKPO ") is pkpo
    with pytest.raises(ValueError, match="valid names: ordergrad, grpo, rloo, maxk_tang, passk_chen, pkpo, rs_grpo"):
        get_estimator("dapo")
    assert estimator_params("ordergrad") == {"objective": "TopM:2", "k": 4}
    assert estimator_params("rloo") == {}
    r = torch.rand(3, 8)
    bound = bind_estimator("ordergrad", num_generations=8, objective="ReMax", k=3)
    assert torch.equal(bound(r), ordergrad(r, objective="ReMax", k=3))
    with pytest.raises(ValueError, match="accepts: objective, k"):
        bind_estimator("ordergrad", beta=1.0)
    with pytest.raises(ValueError, match="N=4"):
        bind_estimator("ordergrad", num_generations=4, k=4)  # caught at bind time, not at the first batch
    with pytest.raises(ValueError, match="multiple of k"):
        bind_estimator("maxk_tang", num_generations=6, k=4)


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
    r = reward_batch(binary=name == "passk_chen", seed=2)
    cpu = get_estimator(name)(r, **DEFAULT_PARAMS[name])
    gpu = get_estimator(name)(r.cuda(), **DEFAULT_PARAMS[name])
    assert gpu.device.type == "cuda" and torch.allclose(gpu.cpu(), cpu, atol=1e-12)


@pytest.mark.parametrize("n_max,k", [(256, 128), (300, 7)])
def test_pass_at_k_and_pkpo_tables_at_user_sizes_match_exact_ratios(n_max, k):
    from fractions import Fraction

    from ordergrad_trl.core.estimators import _passk_table, _pkpo_table

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
    from fake_mps import fake_mps, no_float64

    no_float64(monkeypatch)
    r = reward_batch(binary=name == "passk_chen", seed=4)
    expected = get_estimator(name)(r, **DEFAULT_PARAMS[name])
    got = get_estimator(name)(fake_mps(r.float()), **DEFAULT_PARAMS[name])
    assert got.dtype == torch.float32 and torch.allclose(got.double(), expected, atol=1e-5)
    if name != "passk_chen":
        assert get_estimator(name)(fake_mps(torch.ones(2, 6, dtype=torch.int32)), **DEFAULT_PARAMS[name]).dtype \
            == torch.float32
