"""Pathwise gradient of the L-statistic value: against autograd through a brute-force subset average, finite
differences, and the tie rule (average over tie-breaking perturbations)."""

import itertools
import math

import pytest
import torch

from ordergrad_trl import lstat_value, rank_weights
from ordergrad_trl.core.pathwise import lstat_value_differentiable, lstat_value_grad

OBJECTIVES = ["Mean", "ReMax", "ReMin", "TopM:2", "CVaR:0.5", "GMD", "HarrellDavis:0.3", "LMoment:3"]


def brute_value_autograd(rewards: torch.Tensor, w) -> torch.Tensor:
    """E[L(S)] over all K-subsets, each sorted with torch.sort so autograd differentiates it (distinct rewards)."""
    k = len(w)
    w = torch.as_tensor(w, dtype=rewards.dtype)
    subsets = list(itertools.combinations(range(rewards.shape[-1]), k))
    total = sum((rewards[list(s)].sort().values * w).sum() for s in subsets)
    return total / len(subsets)


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("n,k", [(4, 3), (6, 3), (7, 4)])
def test_gradient_matches_autograd_of_brute_force(objective, n, k):
    w = rank_weights(objective, k)
    r = torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(n * k)).requires_grad_(True)
    (expected,) = torch.autograd.grad(brute_value_autograd(r, w.tolist()), r)
    assert torch.allclose(lstat_value_grad(r.detach(), w), expected, atol=1e-12)
    (got,) = torch.autograd.grad(lstat_value_differentiable(r, w), r)
    assert torch.allclose(got, expected, atol=1e-12)


@pytest.mark.parametrize("objective", ["ReMax", "TopM:2", "GMD", "Quantile:0.3"])
def test_gradient_matches_central_finite_differences(objective):
    w = rank_weights(objective, 3)
    r = torch.randn(5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    grad = lstat_value_grad(r, w)
    h = 1e-6  # distinct continuous rewards are > 1e-3 apart here, so no rank changes within +-h
    for i in range(8):
        e = torch.zeros(8, dtype=torch.float64)
        e[i] = h
        fd = (lstat_value(r + e, w) - lstat_value(r - e, w)) / (2 * h)  # (5,)
        assert torch.allclose(grad[:, i], fd, atol=1e-8)


def test_batched_value_matches_lstat_value_and_grad_sums_to_weight_total():
    w = rank_weights("TopM:2", 4)
    r = torch.randn(3, 5, 9, dtype=torch.float64)
    r[0, 0, :4] = 0.5  # ties
    value = lstat_value_differentiable(r, w)
    assert value.shape == (3, 5) and torch.allclose(value, lstat_value(r, w), atol=1e-13)
    assert torch.allclose(lstat_value_grad(r, w).sum(-1), torch.full((3, 5), w.sum().item(), dtype=torch.float64))


def test_ties_get_the_average_over_tie_breaking_orders():
    # at a tie the value has no gradient; our choice is the mean of the gradients of all the linear pieces that meet
    # there, i.e. of the gradients just after breaking the tie in every possible order
    w = rank_weights("TopM:2", 3)
    r = torch.tensor([0.2, 1.0, 1.0, 1.0, -0.5, 0.2], dtype=torch.float64)
    tied_blocks = [[1, 2, 3], [0, 5]]
    grads = []
    for perm_a in itertools.permutations(range(3)):
        for perm_b in itertools.permutations(range(2)):
            nudged = r.clone()
            for block, perm in zip(tied_blocks, (perm_a, perm_b)):
                for pos, rank in zip(block, perm):
                    nudged[pos] += 1e-7 * rank
            x = nudged.requires_grad_(True)
            grads.append(torch.autograd.grad(brute_value_autograd(x, w.tolist()), x)[0])
    expected = torch.stack(grads).mean(0)
    got = lstat_value_grad(r, w)
    assert torch.allclose(got, expected, atol=1e-12)
    assert got[1] == got[2] == got[3] and got[0] == got[5]  # symmetric in tied items
    x = r.clone().requires_grad_(True)
    lstat_value_differentiable(x, w).backward()
    assert torch.equal(x.grad, got)  # autograd through the sort gives the same tie rule


def test_nan_entries_and_short_groups_get_zero_gradient():
    w = rank_weights("ReMax", 3)
    nan = math.nan
    r = torch.tensor([[1.0, nan, 2.0, 0.5, 3.0], [nan, nan, nan, 1.0, 2.0]], dtype=torch.float64)
    grad = lstat_value_grad(r, w)
    expected_row0 = lstat_value_grad(r[0, [0, 2, 3, 4]], w)
    assert torch.equal(grad[0, [0, 2, 3, 4]], expected_row0) and grad[0, 1] == 0
    assert torch.equal(grad[1], torch.zeros(5, dtype=torch.float64))
    x = r.clone().requires_grad_(True)
    value = lstat_value_differentiable(x, w)
    assert torch.isnan(value[1]) and torch.allclose(value[0], lstat_value(r[0], w))
    value[0].backward()
    assert torch.equal(x.grad, grad)


def test_dtypes_and_input_checks():
    w = rank_weights("TopM:2", 3)
    r32 = torch.randn(4, 6)
    assert lstat_value_grad(r32, w).dtype == torch.float32
    assert lstat_value_grad(torch.tensor([[3, 1, 2, 5]]), w).dtype == torch.float64
    bf = torch.randn(4, 6).bfloat16().requires_grad_(True)
    value = lstat_value_differentiable(bf, w)
    assert value.dtype == torch.bfloat16
    value.sum().backward()
    assert bf.grad is not None and bf.grad.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="floating-point"):
        lstat_value_differentiable(torch.tensor([[1, 2, 3, 4]]), w)
    with pytest.raises(ValueError, match="N >= K"):
        lstat_value_grad(torch.randn(2), w)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_matches_cpu():
    w = rank_weights("TopM:2", 3)
    r = torch.randn(4, 7, dtype=torch.float64)
    r[0, :3] = 0.5
    r[1, 2] = math.nan
    x = r.cuda().requires_grad_(True)
    lstat_value_differentiable(x, w).nansum().backward()
    assert torch.allclose(x.grad.cpu(), lstat_value_grad(r, w), atol=1e-12)
    assert torch.allclose(lstat_value_grad(r.cuda(), w).cpu(), lstat_value_grad(r, w), atol=1e-12)


def test_devices_without_float64_compute_in_float32(monkeypatch):
    from helpers.fake_mps import FakeMPS, fake_mps, no_float64

    no_float64(monkeypatch)
    w = rank_weights("TopM:2", 3)
    r = torch.randn(4, 7, dtype=torch.float64)
    r[0, :3] = 0.5
    r[1, 2] = math.nan
    grad = lstat_value_grad(fake_mps(r.float()), w)
    assert isinstance(grad, FakeMPS) and grad.dtype == torch.float32
    assert torch.allclose(grad.as_subclass(torch.Tensor).double(), lstat_value_grad(r.float().double(), w), atol=1e-6)
