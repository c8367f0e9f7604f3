"""MaxRL in the zoo: `maxrl` and `maxrl_loo` against loops written from the paper's formula, what each is unbiased
for (exact enumeration of all 2^N outcomes of a Bernoulli(p) policy, and of a categorical policy), and the
preset `MaxRL:T` against subset enumeration and against MaxRL's gradient (docs/objectives.md, docs/estimators.md).

J_T = sum_{k<=T} pass@k / k; with p a prompt's success probability, pass@k = 1 - (1-p)^k and
dJ_T/dp = sum_{k<=T} (1-p)^(k-1)."""

import itertools
import math
import statistics

import pytest
import torch
from test_estimators import reward_batch, scatter_rows, valid_lists
from test_estimators_unbiased import expected_update

from ordergrad_trl import rank_weights
from ordergrad_trl.core.estimators import maxrl, maxrl_loo, ordergrad, rloo

# ---------------------------------------------------------------- loop oracles from the paper's formula


def loop_maxrl(r):
    """A_i = (r_i - mean r) / mean r over the valid rewards of each group; 0 when mean r = 0 (all fail)."""
    rows = []
    for items in valid_lists(r):
        mean = statistics.fmean([x for _, x in items]) if items else 0.0
        rows.append({i: (x - mean) / mean for i, x in items} if mean > 0 else {})
    return scatter_rows(rows, r.shape)


def loop_maxrl_loo(r, t):
    """(r_i - mean of the others) * sum_{j<T} P(a uniform j-subset of the others holds no success), the
    probabilities counted over every j-subset (not the binomial closed form the estimator uses)."""
    rows = []
    for items in valid_lists(r):
        n = len(items)
        tt = n if t is None else t
        if n < max(2, tt):
            rows.append({})
            continue
        out = {}
        for pos, (i, x) in enumerate(items):
            others = [y for _, y in items[:pos] + items[pos + 1 :]]
            weight = sum(statistics.fmean([all(y == 0 for y in s) for s in itertools.combinations(others, j)])
                         for j in range(tt))  # fmt: skip
            out[i] = (x - statistics.fmean(others)) * weight
        rows.append(out)
    return scatter_rows(rows, r.shape)


MAXRL_ORACLES = [  # (estimator, parameters, oracle): test_estimators.test_every_estimator_has_a_case_and_a_loop_oracle reads it
    ("maxrl", {}, loop_maxrl),
    ("maxrl_loo", {}, lambda r: loop_maxrl_loo(r, None)),
    ("maxrl_loo", {"k": 1}, lambda r: loop_maxrl_loo(r, 1)),
    ("maxrl_loo", {"k": 3}, lambda r: loop_maxrl_loo(r, 3)),
    ("maxrl_loo", {"k": 6}, lambda r: loop_maxrl_loo(r, 6)),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name,params,oracle", MAXRL_ORACLES, ids=lambda v: v if isinstance(v, str) else None)
def test_matches_the_papers_formula(name, params, oracle, seed):
    r = reward_batch(binary=True, seed=seed, n=6)  # ties, an all-ones group, NaN entries, an all-NaN group
    r[5] = 0.0  # an all-fail group
    fn = {"maxrl": maxrl, "maxrl_loo": maxrl_loo}[name]
    got = fn(r, **params)
    assert got.shape == r.shape and got.dtype == torch.float64
    assert torch.allclose(got, oracle(r), rtol=1e-12, atol=1e-12)
    assert torch.equal(got[5], torch.zeros(6))


def test_numbers_by_hand():
    # c = 2 of n = 4: mean 1/2, successes (1 - 1/2) / (1/2) = 1, failures -1
    assert maxrl(torch.tensor([1.0, 0, 0, 1])).tolist() == [1.0, -1.0, -1.0, 1.0]
    # T = n = 4: a success has m = 1 other success, (1 - 1/3) * 4/2 = 4/3; a failure m = 2, (0 - 2/3) * 4/3 = -8/9
    assert torch.allclose(maxrl_loo(torch.tensor([1.0, 0, 0, 1], dtype=torch.float64)),
                          torch.tensor([4 / 3, -8 / 9, -8 / 9, 4 / 3], dtype=torch.float64), atol=1e-15)  # fmt: skip


def test_non_binary_rewards_are_refused_by_name():
    for fn in (maxrl, maxrl_loo):
        with pytest.raises(ValueError, match=rf"{fn.__name__}: rewards must be binary .*objective='MaxRL:T'"):
            fn(torch.tensor([[0.0, 0.5, 1.0, 1.0]]))
    with pytest.raises(ValueError, match="k=5 needs N >= k"):
        maxrl_loo(torch.tensor([[0.0, 1.0, 1.0, 1.0]]), k=5)


def test_loo_with_t_one_is_rloo_and_the_t_equal_n_normalizer_is_one_over_mean():
    r = reward_batch(binary=True, seed=4, n=7)
    assert torch.allclose(maxrl_loo(r, k=1), rloo(r), atol=1e-12)
    full = r[~torch.isnan(r).any(-1)]  # groups without NaN
    wins = full.sum(-1, keepdim=True)
    success = maxrl_loo(full)[full == 1]
    # a success: (1 - (c-1)/(n-1)) * n / c, i.e. maxrl's n/c - 1 rescaled by n / (n-1)
    assert torch.allclose(success, (maxrl(full) * 7 / 6)[full == 1], atol=1e-12)
    assert success.numel() > 20 and bool((maxrl_loo(full)[wins[:, 0] == 0] == 0).all())  # all-fail: 0 by itself


# ---------------------------------------------------------------- what each is unbiased for: exact enumeration


def bernoulli_expected_update(estimator, n: int, p: float) -> float:
    """E[(1/N) sum_i A_i d/dp log P(r_i)] over all 2^N outcome vectors of N i.i.d. Bernoulli(p) rewards."""
    outcomes = torch.tensor(list(itertools.product([0.0, 1.0], repeat=n)), dtype=torch.float64)  # (2^N, N)
    prob = (p**outcomes * (1 - p) ** (1 - outcomes)).prod(-1)  # (2^N,)
    score = outcomes / p - (1 - outcomes) / (1 - p)  # d/dp log P(r_i)
    return float((prob * (estimator(outcomes) * score).sum(-1)).sum() / n)


def d_objective(t: int, p: float) -> float:
    """d/dp sum_{k<=T} (1 - (1-p)^k) / k, by autograd of the objective itself."""
    x = torch.tensor(p, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(sum((1 - (1 - x) ** k) / k for k in range(1, t + 1)), x)
    return float(grad)


@pytest.mark.parametrize("n", [2, 3, 5, 7])
@pytest.mark.parametrize("p", [0.07, 0.3, 0.8])
def test_ordergrad_maxrl_preset_equals_maxrl_gradient_in_expectation(n, p):
    for t in range(1, n):  # OrderGrad needs K = T < N
        preset = bernoulli_expected_update(lambda r: ordergrad(r, objective=f"MaxRL:{t}", k=t), n, p)
        loo = bernoulli_expected_update(lambda r: maxrl_loo(r, k=t), n, p)
        assert preset == pytest.approx(d_objective(t, p), rel=1e-12, abs=1e-12)
        assert loo == pytest.approx(d_objective(t, p), rel=1e-12, abs=1e-12)
    # MaxRL's own estimator at group size N: exactly the gradient of J_(N-1), which the preset at K = T = N-1 has
    own = bernoulli_expected_update(maxrl, n, p)
    assert own == pytest.approx(d_objective(n - 1, p), rel=1e-12, abs=1e-12)
    assert own == pytest.approx(bernoulli_expected_update(
        lambda r: ordergrad(r, objective=f"MaxRL:{n - 1}", k=n - 1), n, p), rel=1e-12, abs=1e-12)  # fmt: skip
    # ... and not of J_N, the paper's T = N: the all-fail groups' 0 drops (1-p)^(N-1) = d/dp pass@N / N
    assert d_objective(n, p) - own == pytest.approx((1 - p) ** (n - 1), rel=1e-12)
    # the leave-one-out form reaches T = N
    assert bernoulli_expected_update(maxrl_loo, n, p) == pytest.approx(d_objective(n, p), rel=1e-12)


def test_maxrl_is_not_a_constant_rescaling_of_the_t_equal_n_gradient():
    ratios = [bernoulli_expected_update(maxrl, 5, p) / d_objective(5, p) for p in (0.05, 0.3, 0.9)]
    assert max(ratios) - min(ratios) > 0.05  # depends on p: no fixed scale turns it into grad J_N


def test_unbiased_on_a_categorical_policy_with_binary_rewards():
    # several outcomes per reward value: the gradient w.r.t. every logit, not only along p
    logits = torch.tensor([0.3, -0.5, 0.1, 0.4, -1.0], dtype=torch.float64)
    values = [0.0, 1.0, 0.0, 1.0, 1.0]
    win = torch.tensor(values, dtype=torch.float64)

    def true_gradient(t):
        theta = logits.clone().requires_grad_(True)
        p = (torch.softmax(theta, -1) * win).sum()
        (grad,) = torch.autograd.grad(sum((1 - (1 - p) ** k) / k for k in range(1, t + 1)), theta)
        return grad

    n = 4
    for t in (1, 2, 3):
        got = expected_update(logits, values, n, lambda r: ordergrad(r, objective=f"MaxRL:{t}", k=t))
        assert torch.allclose(got, true_gradient(t), atol=1e-12)
        assert torch.allclose(expected_update(logits, values, n, lambda r: maxrl_loo(r, k=t)), true_gradient(t),
                              atol=1e-12)  # fmt: skip
    assert torch.allclose(expected_update(logits, values, n, maxrl), true_gradient(n - 1), atol=1e-12)
    assert torch.allclose(expected_update(logits, values, n, maxrl_loo), true_gradient(n), atol=1e-12)


# ---------------------------------------------------------------- the preset MaxRL:T


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7])
def test_preset_is_the_average_over_subsets_of_sum_of_max_at_k_over_k(k):
    """sum_j w_j x_(j) over K values equals sum_{m<=T} (1/m) * mean over all m-subsets of their max, for any
    values (ties included): the L-statistic of MaxRL's objective at K."""
    gen = torch.Generator().manual_seed(k)
    for trial in range(5):
        x = torch.randint(-3, 4, (k,), generator=gen).double() if trial % 2 else torch.randn(k, generator=gen,
                                                                                              dtype=torch.float64)
        for t in range(1, k + 1):
            w = rank_weights(f"MaxRL:{t}", k)
            brute = sum(statistics.fmean(max(s) for s in itertools.combinations(x.tolist(), m)) / m
                        for m in range(1, t + 1))  # fmt: skip
            assert float(w @ x.sort().values) == pytest.approx(brute, abs=1e-12)
            assert float(w.sum()) == pytest.approx(sum(1 / m for m in range(1, t + 1)), abs=1e-12)


def test_preset_weights_written_out_and_hypergeometric_form():
    assert torch.allclose(rank_weights("MaxRL:4", 4), torch.tensor([1 / 4, 1 / 3, 1 / 2, 1.0], dtype=torch.float64))
    assert torch.allclose(rank_weights("maxrl:1", 5), rank_weights("Mean", 5), atol=1e-15)  # any case; T=1: the mean
    for k, t in [(6, 3), (9, 9), (40, 17)]:  # w_j = sum_{m<=T} C(j-1, m-1) / (m C(K, m)), in exact integers
        exact = [sum(math.comb(j - 1, m - 1) / (m * math.comb(k, m)) for m in range(1, t + 1)) for j in range(1, k + 1)]
        assert torch.allclose(rank_weights(f"MaxRL:{t}", k), torch.tensor(exact, dtype=torch.float64), rtol=1e-12)
    big = rank_weights("MaxRL:600", 1100)  # C(1100, 550) overflows a float; the products of ratios do not
    assert bool(torch.isfinite(big).all()) and float(big.sum()) == pytest.approx(
        sum(1 / m for m in range(1, 601)), rel=1e-12)  # fmt: skip


@pytest.mark.parametrize("objective", ["MaxRL:5", "MaxRL:0", "MaxRL", "MaxRL:2.5"])
def test_preset_bad_parameters(objective):
    with pytest.raises(ValueError, match="Valid forms: .*MaxRL:T"):
        rank_weights(objective, 4)


def test_preset_on_continuous_rewards_is_unbiased_for_sum_of_expected_max_over_k():
    # where MaxRL's estimator cannot go (it refuses these rewards): E[max of m] from the distribution function,
    # sum_v v (F(v)^m - F(v-)^m), not from rank weights
    logits = torch.tensor([0.3, -0.5, 0.1, 0.4], dtype=torch.float64)
    values = [0.0, 0.5, 0.5, 2.0]
    support = sorted(set(values))
    v = torch.tensor(values, dtype=torch.float64)

    def objective(theta, t):
        probs = torch.softmax(theta, -1)
        cdf = torch.stack([(probs * (v <= s)).sum() for s in support])
        below = torch.cat([torch.zeros(1, dtype=torch.float64), cdf[:-1]])
        return sum(sum(s * (cdf[i] ** m - below[i] ** m) for i, s in enumerate(support)) / m for m in range(1, t + 1))

    for t, n in [(2, 4), (3, 4), (3, 5)]:
        theta = logits.clone().requires_grad_(True)
        (truth,) = torch.autograd.grad(objective(theta, t), theta)
        got = expected_update(logits, values, n, lambda r: ordergrad(r, objective=f"MaxRL:{t}", k=t))
        assert torch.allclose(got, truth, atol=1e-12)
    with pytest.raises(ValueError, match="maxrl: rewards must be binary"):
        maxrl(v[None])
