"""lstat_value / lstat_advantage against brute-force subset enumeration, closed forms and Monte Carlo."""

import itertools
import math

import pytest
import torch
from helpers.fake_mps import FakeMPS, fake_mps, no_float64
from helpers.oracle import brute_advantage, brute_value

from ordergrad_trl import lstat_advantage, lstat_value, rank_weights

PRESETS = [
    "Mean", "ReMax", "ReMin", "Median", "Rank:2", "TopM:2", "BotM:2", "TrimM:1", "WinsorizedM:1",
    "UpperTailMean:0.5", "LowerTailMean:0.25", "CVaR:0.5", "Quantile:0.3", "HarrellDavis:0.7", "GMD",
    "LMoment:2", "LMoment:3", "LMoment:4",
]  # fmt: skip


def groups(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "binary": (torch.rand(n, generator=g) < 0.5).double(),
        "tied": torch.randint(0, 3, (n,), generator=g).double() / 2,
        "continuous": torch.randn(n, generator=g, dtype=torch.float64),
    }


@pytest.mark.parametrize("objective", PRESETS)
@pytest.mark.parametrize("n,k", [(5, 4), (7, 4), (8, 5)])
def test_matches_brute_force(objective, n, k):
    w = rank_weights(objective, k)
    for kind, r in groups(n, seed=n * 10 + k).items():
        expected_adv = torch.tensor(brute_advantage(r.tolist(), w.tolist()), dtype=torch.float64)
        assert torch.allclose(lstat_advantage(r, w), expected_adv, rtol=0, atol=1e-9), kind
        assert lstat_value(r, w).item() == pytest.approx(brute_value(r.tolist(), w.tolist()), abs=1e-9), kind


def test_value_with_n_equal_k_is_the_statistic_itself():
    r = torch.tensor([3.0, 1.0, 2.0], dtype=torch.float64)
    assert lstat_value(r, rank_weights("Median", 3)).item() == 2.0


def test_batched_equals_per_group_loop_and_leading_dims():
    r = torch.randn(6, 5, 9, dtype=torch.float64)
    r[0, 0] = 1.0  # a constant group
    r[1, 2, :4] = 0.5  # ties
    w = rank_weights("TopM:2", 4)
    batched = lstat_advantage(r, w)
    values = lstat_value(r, w)
    assert batched.shape == r.shape and values.shape == r.shape[:-1]
    for idx in itertools.product(range(6), range(5)):
        assert torch.equal(batched[idx], lstat_advantage(r[idx], w))
        assert torch.allclose(values[idx], lstat_value(r[idx], w), rtol=0, atol=1e-14)


def test_permutation_equivariant_centered_and_exact_ties():
    torch.manual_seed(1)
    r = torch.randint(0, 4, (64, 11)).double() * 0.37
    w = rank_weights("HarrellDavis:0.3", 5)
    a = lstat_advantage(r, w)
    perm = torch.randperm(11)
    assert torch.allclose(lstat_advantage(r[:, perm], w), a[:, perm], atol=1e-12)
    assert a.sum(-1).abs().max() < 1e-12
    for row_r, row_a in zip(r, a):
        for value in row_r.unique():
            tied = row_a[row_r == value]
            assert torch.equal(tied, tied[:1].expand_as(tied))  # bit-identical, not just close


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_constant_group_is_exactly_zero(dtype):
    r = torch.full((3, 7), 0.1, dtype=dtype)
    r[1] = 1.0
    r[2] = -123.456
    for objective in ("TopM:2", "GMD", "CVaR:0.5", "LMoment:3"):
        a = lstat_advantage(r, rank_weights(objective, 4))
        assert a.dtype == dtype
        assert torch.equal(a, torch.zeros_like(a))


def test_k1_and_mean_are_rloo():
    r = torch.randn(10, 8, dtype=torch.float64)
    rloo = r - (r.sum(-1, keepdim=True) - r) / 7
    assert torch.allclose(lstat_advantage(r, rank_weights("Mean", 1)), rloo, atol=1e-12)
    for k in (2, 4, 7):
        assert torch.allclose(k * lstat_advantage(r, rank_weights("Mean", k)), rloo, atol=1e-12)


@pytest.mark.parametrize("n,k", [(8, 1), (8, 4), (16, 4), (16, 15)])
def test_binary_max_at_k_is_pass_at_k(n, k):
    w = rank_weights("ReMax", k)
    rows = torch.tensor([[1.0] * c + [0.0] * (n - c) for c in range(n + 1)], dtype=torch.float64)
    values = lstat_value(rows, w)
    adv = lstat_advantage(rows, w)
    for c in range(n + 1):
        assert values[c].item() == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)
        # a success's advantage: pass@K with it minus pass@K from the other n-1 (c-1 successes)
        if 0 < c < n:
            without = 1 - math.comb(n - c, k) / math.comb(n - 1, k)
            with_it = 1.0
            assert adv[c, 0].item() == pytest.approx(with_it - without, abs=1e-12)


def test_nan_is_unscorable():
    w = rank_weights("TopM:2", 3)
    r = torch.tensor(
        [
            [0.3, float("nan"), 0.9, 0.1, 0.5, float("nan")],  # 4 valid > K: ranked as a group of 4
            [float("nan")] * 3 + [1.0, 0.0, 1.0],  # 3 valid = K: all zero
            [float("nan")] * 6,
            [0.2, 0.4, 0.6, 0.8, 1.0, 0.0],  # no NaN in this row, but in the batch
        ],
        dtype=torch.float64,
    )
    a = lstat_advantage(r, w)
    v = lstat_value(r, w)
    keep = ~torch.isnan(r[0])
    assert torch.allclose(a[0, keep], torch.tensor(brute_advantage(r[0, keep].tolist(), w.tolist()), dtype=torch.float64), atol=1e-12)
    assert torch.equal(a[0, ~keep], torch.zeros(2, dtype=torch.float64))
    assert torch.equal(a[1], torch.zeros(6, dtype=torch.float64)) and torch.equal(a[2], torch.zeros(6, dtype=torch.float64))
    assert torch.allclose(a[3], lstat_advantage(r[3], w), atol=1e-15)
    assert v[0].item() == pytest.approx(brute_value(r[0, keep].tolist(), w.tolist()), abs=1e-12)
    assert v[1].item() == pytest.approx(brute_value([1.0, 0.0, 1.0], w.tolist()), abs=1e-12)
    assert math.isnan(v[2].item())
    assert not torch.isnan(a).any()


def test_bad_inputs_raise_naming_the_shape():
    w = rank_weights("TopM:2", 4)
    with pytest.raises(ValueError, match=r"shape \(3, 4\).*N > K"):
        lstat_advantage(torch.zeros(3, 4), w)
    with pytest.raises(ValueError, match=r"shape \(2, 3\).*N >= K"):
        lstat_value(torch.zeros(2, 3), w)
    for bad in (float("inf"), -float("inf")):
        r = torch.zeros(2, 6)
        r[1, 2] = bad
        with pytest.raises(ValueError, match=r"shape \(2, 6\).*inf"):
            lstat_advantage(r, w)
    r = torch.zeros(2, 6)
    r[0, 0], r[0, 1] = float("nan"), float("inf")  # +inf hidden before a NaN after sorting
    with pytest.raises(ValueError, match="inf"):
        lstat_value(r, w)
    with pytest.raises(ValueError, match="scalar"):
        lstat_advantage(torch.tensor(1.0), w)
    with pytest.raises(ValueError, match="weights must be finite"):
        lstat_advantage(torch.zeros(2, 6), [1.0, float("nan")])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_dtypes_follow_float64(dtype):
    torch.manual_seed(0)
    r = torch.randn(32, 16).to(dtype)
    w = rank_weights("CVaR:0.5", 4)
    a = lstat_advantage(r, w)
    exact = lstat_advantage(r.double(), w)
    assert a.dtype == dtype and lstat_value(r, w).dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(a.double(), exact, atol=tol)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_matches_cpu():
    r = torch.randn(64, 16, dtype=torch.float64)
    w = rank_weights("TopM:2", 4)
    assert torch.allclose(lstat_advantage(r.cuda(), w).cpu(), lstat_advantage(r, w), atol=1e-12)


@pytest.mark.parametrize("binary", [True, False])
def test_devices_without_float64_compute_in_float32(monkeypatch, binary):
    """Simulated MPS (no float64): no float64 tensor on the device; tables come from the CPU in float32."""
    no_float64(monkeypatch)
    g = torch.Generator().manual_seed(0)
    r = (torch.rand(64, 16, generator=g) < 0.5).float() if binary else torch.randn(64, 16, generator=g)
    r[3, 2] = math.nan
    w = rank_weights("TopM:2", 4)
    for rewards in (fake_mps(r), fake_mps((r.nan_to_num() * 3).int())):
        expected_a = lstat_advantage(rewards.as_subclass(torch.Tensor).double(), w)
        a, v = lstat_advantage(rewards, w), lstat_value(rewards, w)
        assert isinstance(a, FakeMPS) and a.dtype == torch.float32 and v.dtype == torch.float32
        assert torch.allclose(a.as_subclass(torch.Tensor).double(), expected_a, atol=1e-6)
    with pytest.raises(TypeError, match="float64"):  # the simulation does catch float64 on the device
        fake_mps(r).double()


def test_reward_and_weights_validation_messages_name_the_problem():
    with pytest.raises(ValueError, match="1-D"):
        lstat_advantage(torch.zeros(2, 6), [[1.0, 2.0]])
    with pytest.raises(ValueError, match="non-empty"):
        lstat_value(torch.zeros(2, 6), [])


def exact_objective(theta, arm_rewards, w):
    """J(theta) = E[sum_j w_j R_(j:K)] for K draws from softmax(theta), by enumerating all arm K-tuples."""
    p = torch.softmax(theta, 0)
    k, total = len(w), 0.0
    for arms in itertools.product(range(len(arm_rewards)), repeat=k):
        prob = torch.prod(p[list(arms)])
        total = total + prob * sum(wj * r for wj, r in zip(w, sorted(arm_rewards[a] for a in arms)))
    return total


@pytest.mark.parametrize("objective", ["TopM:2", "CVaR:0.5", "GMD", "Mean"])
def test_policy_gradient_estimator_is_unbiased(objective):
    """(K/N) sum_i a_i grad log p(x_i), averaged over many batches, hits grad J within a few standard errors."""
    k, n, reps = 3, 6, 40000
    arm_rewards = [0.0, 0.2, 0.2, 0.7, 1.0]  # a tie between two arms
    w = rank_weights(objective, k)
    theta = torch.tensor([0.3, -0.2, 0.1, 0.0, -0.5], dtype=torch.float64, requires_grad=True)
    (true_grad,) = torch.autograd.grad(exact_objective(theta, arm_rewards, w.tolist()), theta)

    g = torch.Generator().manual_seed(1234)
    p = torch.softmax(theta.detach(), 0)
    arms = torch.multinomial(p.expand(reps, -1), n, replacement=True, generator=g)  # (R, N)
    a = lstat_advantage(torch.tensor(arm_rewards, dtype=torch.float64)[arms], w)  # (R, N)
    score = torch.nn.functional.one_hot(arms, len(arm_rewards)).double() - p  # (R, N, A): grad log p(x)
    estimates = (k / n) * (a[..., None] * score).sum(1)  # (R, A)
    mean, se = estimates.mean(0), estimates.std(0) / reps**0.5
    assert ((mean - true_grad).abs() < 4 * se + 1e-12).all(), (mean, true_grad, se)
    assert true_grad.abs().max() > 10 * se.max()  # the test has power: the gradient is far from zero
