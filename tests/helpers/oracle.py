"""Brute-force oracles: enumerate every K-subset of a group (exact definitions, no shortcuts)."""

import itertools
import math


def lstat(sample, w):
    """L(S) = sum_j w_j (S sorted ascending)_j."""
    return sum(wj * x for wj, x in zip(w, sorted(sample)))


def subset_mean(values, w):
    """E[L(S)] for S a uniform len(w)-subset of `values`."""
    subsets = list(itertools.combinations(values, len(w)))
    return sum(lstat(s, w) for s in subsets) / len(subsets)


def brute_value(rewards, w):
    return subset_mean(list(rewards), w)


def brute_advantage(rewards, w):
    """a_i = E[L(S) | i in S] - E[L(S) | S drawn from the other N-1], by enumeration."""
    r, k = list(rewards), len(w)
    out = []
    for i in range(len(r)):
        others = r[:i] + r[i + 1 :]
        include = [lstat((r[i],) + s, w) for s in itertools.combinations(others, k - 1)]
        out.append(sum(include) / math.comb(len(others), k - 1) - subset_mean(others, w))
    return out
