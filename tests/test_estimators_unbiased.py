"""Which estimators are unbiased for which objective, by exact enumeration of all N-tuples of a small categorical
policy: the expected update against the autograd gradient of the closed-form objective."""

import itertools

import pytest
import torch
from helpers.oracle import lstat
from test_estimators import DEFAULT_PARAMS

from ordergrad_trl import rank_weights
from ordergrad_trl.core.estimators import ESTIMATORS, get_estimator, ordergrad, pkpo, rloo

# ---------------------------------------------------------------- unbiasedness by exact enumeration


def exact_objective(logits, values, w):
    """J = E[sum_j w_j R_(j:K)] for K i.i.d. draws from softmax(logits) over outcomes with rewards `values`."""
    p = torch.softmax(logits, -1)
    total = 0.0
    for draw in itertools.product(range(len(values)), repeat=len(w)):
        prob = torch.prod(torch.stack([p[o] for o in draw]))
        total = total + prob * lstat([values[o] for o in draw], w)
    return total


def expected_update(logits, values, n, estimator):
    """E[(1/N) sum_i A_i grad log p(x_i)] over all N-tuples of outcomes, every tuple one group of the batch."""
    m = len(values)
    p = torch.softmax(logits, -1).detach()
    tuples = torch.tensor(list(itertools.product(range(m), repeat=n)))  # (M^N, N)
    prob = p[tuples].prod(-1)  # (M^N,)
    adv = estimator(torch.tensor(values, dtype=torch.float64)[tuples])  # (M^N, N)
    score = torch.nn.functional.one_hot(tuples, m).double() - p  # (M^N, N, M) grad of log softmax
    return torch.einsum("t,tn,tnm->m", prob, adv, score) / n


def true_gradient(logits, values, w):
    theta = logits.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(exact_objective(theta, values, w), theta)
    return grad


LOGITS = torch.tensor([0.3, -0.5, 0.1, 0.4], dtype=torch.float64)
VALUES = [0.0, 0.5, 0.5, 2.0]  # a tie between two outcomes


@pytest.mark.parametrize(
    "objective,k,n",
    [("ReMax", 3, 5), ("TopM:2", 3, 4), ("CVaR:0.5", 2, 5), ("GMD", 3, 5), ("Median", 3, 4), ("Mean", 1, 5)],
)
def test_ordergrad_is_unbiased_for_its_objective(objective, k, n):
    w = rank_weights(objective, k).tolist()
    got = expected_update(LOGITS, VALUES, n, lambda r: ordergrad(r, objective=objective, k=k))
    assert torch.allclose(got, true_gradient(LOGITS, VALUES, w), atol=1e-12)


@pytest.mark.parametrize(
    "name,params,n,target_k",
    [
        ("rloo", {}, 4, 1),
        ("maxk_tang", {}, 4, 4),
        ("maxk_tang", {"k": 2}, 6, 2),
        ("pkpo", {"k": 2}, 5, 2),
        ("pkpo", {"k": 3}, 5, 3),
        ("pkpo", {"k": 4}, 4, 4),
    ],
)
def test_unbiased_for_mean_or_max_at_k(name, params, n, target_k):
    w = [0.0] * (target_k - 1) + [1.0]  # max of target_k (k = 1: the mean)
    got = expected_update(LOGITS, VALUES, n, lambda r: get_estimator(name)(r, **params))
    assert torch.allclose(got, true_gradient(LOGITS, VALUES, w), atol=1e-12)


def test_centering_pkpo_by_its_group_mean_makes_it_biased():
    # why pkpo is left uncentered: subtracting the group mean k (pass@k - pass@(k-1)) correlates with the samples
    w = [0.0, 0.0, 1.0]
    centered = expected_update(LOGITS, VALUES, 5, lambda r: pkpo(r, k=3) - pkpo(r, k=3).mean(-1, keepdim=True))
    assert (centered - true_gradient(LOGITS, VALUES, w)).abs().max() > 1e-3


def two_prompt_direction(estimator, prompts, n):
    return torch.cat([expected_update(lg, vals, n, estimator) for lg, vals in prompts])


BIASED_CASES = [  # (estimator, parameters, the objective it is biased for): one per row declared `unbiased=False`
    ("grpo", {"scale": "group"}, lambda lg, vals: exact_objective(lg, vals, [1.0])),
    ("passk_chen", {"k": 2}, lambda lg, vals: exact_objective(lg, vals, [0.0, 1.0])),
    ("rs_grpo", {"beta": 2.0},
     lambda lg, vals: torch.log((torch.softmax(lg, -1) * torch.exp(2.0 * torch.tensor(vals))).sum()) / 2.0),
]


@pytest.mark.parametrize("name,params,objective", BIASED_CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_biased_estimators_point_away_from_their_objective_gradient(name, params, objective):
    # two prompts of different difficulty: a per-group rescaling (std, sigma, ratio) reweights them, so the expected
    # update is not parallel to grad (J_1 + J_2) -- while an unbiased estimator would match it exactly
    binary = name == "passk_chen"
    vals = [0.0, 1.0, 1.0] if binary else [0.0, 0.5, 2.0]
    hard = torch.tensor([2.0, -1.0, -1.0], dtype=torch.float64)  # mostly the 0-reward outcome
    prompts = [(hard, vals), (torch.zeros(3, dtype=torch.float64), vals)]
    truth = []
    for lg, v in prompts:
        theta = lg.clone().requires_grad_(True)
        truth.append(torch.autograd.grad(objective(theta, v), theta)[0])
    truth = torch.cat(truth)
    got = two_prompt_direction(lambda r: get_estimator(name)(r, **params), prompts, n=4)
    cosine = torch.nn.functional.cosine_similarity(got, truth, dim=0)
    assert 0.5 < cosine < 0.999  # a useful direction, but not the gradient's (up to any scale); exact arithmetic
    # the same check passes for an unbiased estimator of the mean, so it can tell the two apart
    if name == "grpo":
        unbiased = two_prompt_direction(rloo, prompts, n=4)
        assert torch.allclose(unbiased, truth, atol=1e-12)


def check_unbiased_for_its_target(entry, params, n: int = 5) -> None:
    """The registry row's claim: the exact expected update (every N-tuple of a 4-outcome policy, ties included) is
    the gradient of its `target` L-statistic, `(objective, K)` at this N (0/1 outcomes for a 0/1 estimator)."""
    objective, k = entry.targets(n, **params)
    values = [0.0, 1.0, 1.0, 0.0] if entry.binary else VALUES
    got = expected_update(LOGITS, values, n, lambda r: entry.fn(r, **params))
    assert torch.allclose(got, true_gradient(LOGITS, values, rank_weights(objective, k).tolist()), atol=1e-12)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_every_estimator_is_unbiased_for_its_target_as_its_registry_row_claims(name):
    """Each row's claim, read from the registry: `unbiased` ones by exact enumeration against their `target`; the
    biased ones are the cases of test_biased_estimators_point_away_from_their_objective_gradient."""
    entry = ESTIMATORS[name]
    assert entry.unbiased is not None, f"{name}: declare unbiased= (and target=) in its registry row"
    assert entry.unbiased_for.startswith("nothing") != entry.unbiased  # the docs table says the same
    assert not (entry.unbiased and name in {case[0] for case in BIASED_CASES}), f"{name}: biased or not?"
    if not entry.unbiased:
        assert name in {case[0] for case in BIASED_CASES}, f"{name} is declared biased: add it to BIASED_CASES"
        return
    check_unbiased_for_its_target(entry, DEFAULT_PARAMS[name])


def test_a_wrong_target_or_claim_is_caught():
    """The enumeration tells targets apart: pkpo's row checked against K-1 or the mean fails."""
    import dataclasses

    for wrong in (lambda p, n: ("ReMax", p["k"] - 1), lambda p, n: ("Mean", 1)):
        with pytest.raises(AssertionError):
            check_unbiased_for_its_target(dataclasses.replace(ESTIMATORS["pkpo"], target=wrong), {"k": 3})
