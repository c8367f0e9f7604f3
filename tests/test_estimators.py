"""The estimator zoo against per-group loops written from each paper's formula, and the relations between estimators
(the shared contract, centering included: test_estimators_contract.py; unbiasedness: test_estimators_unbiased.py)."""

import itertools
import math
import statistics

import pytest
import torch
from helpers.estimator_cases import CASES
from helpers.oracle import brute_advantage

from ordergrad_trl import lstat_value, rank_weights
from ordergrad_trl.core.estimators import (
    ESTIMATORS,
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

DEFAULT_PARAMS = {name: case.params for name, case in CASES.items()}  # tests/helpers/estimator_cases.py


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


ORACLE_CASES = [  # (estimator, parameters, its per-group loop oracle); MaxRL's oracles: tests/test_maxrl.py
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
    ("passk_chen", dict(k=3), lambda r: loop_passk_chen(r, 3)),
]


def test_every_estimator_has_a_case_and_a_loop_oracle():
    """A registered estimator without default parameters or a loop oracle here (or in test_maxrl.py) fails."""
    from test_maxrl import MAXRL_ORACLES

    assert set(CASES) == set(ESTIMATORS)  # its entry in tests/helpers/estimator_cases.py
    assert {name for name, _, _ in ORACLE_CASES + MAXRL_ORACLES} == set(ESTIMATORS)


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("name,params,oracle", ORACLE_CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_matches_loop_oracle(name, params, oracle, binary):
    if ESTIMATORS[name].binary and not binary:
        with pytest.raises(ValueError, match=f"{name}: rewards must be binary"):
            get_estimator(name)(reward_batch(binary, seed=1), **params)
        return
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
