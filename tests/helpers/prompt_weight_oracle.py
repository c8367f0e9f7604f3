"""Independent oracles of the prompt weights, written from their descriptions with exact fractions.

Not derived from `ordergrad_trl.core.prompt_weights`: CurveRL's histogram over a run of batches, the stateless
weights' formulas, and what an engine (verl, SkyRL) must return for consecutive batches of rows grouped by uid."""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from helpers.plan_cases import trl_path


def oracle_run(batches, window):
    """Per batch, each group's CurveRL weight, from the description: p_hat = c/n over scorable rewards (exact
    fractions); B = largest group + 1 bins; bin floor(p_hat B) (capped at B - 1); reference = the rates in (0, 1) of
    the last `window` batches, or of this batch while none are held; w = count(bin) / count(bins <= bin), 0 for an
    empty bin or p_hat in {0, 1}; the batch joins after."""
    pool, out = [], []
    for groups in batches:
        rates = []
        for g in groups:
            valid = [Fraction(int(r)) for r in g if not math.isnan(r)]
            rates.append(sum(valid) / len(valid) if valid else None)
        bins = max(len(g) for g in groups) + 1
        inner = [p for p in rates if p is not None and 0 < p < 1]
        reference = [p for b in pool for p in b] or inner
        counts = [0] * bins
        for p in reference:
            counts[min(math.floor(p * bins), bins - 1)] += 1
        weights = []
        for p in rates:
            b = None if p is None or not 0 < p < 1 else min(math.floor(p * bins), bins - 1)
            weights.append(Fraction(0) if b is None or counts[b] == 0 else Fraction(counts[b], sum(counts[: b + 1])))
        out.append(weights)
        pool = (pool + [inner])[-window:] if window else []
    return out


def oracle_weights(batches, setting: str, window: int):
    """Per batch, each group's weight: CurveRL's from `oracle_run`; the stateless ones from their formulas."""
    if setting == "curverl":
        return [[float(w) for w in ws] for ws in oracle_run(batches, window)]
    out = []
    for groups in batches:
        ws = []
        for g in groups:
            valid = [r for r in g if not math.isnan(r)]
            p = Fraction(int(sum(valid)), len(valid)) if valid else None
            if p is None:
                ws.append(0.0)
            elif setting == "inverse":
                ws.append(float(1 / p) if p > 0 else 0.0)
            elif setting.startswith("gaussian:"):  # gaussian:MU,SIGMA
                mu, sigma = map(float, setting.split(":")[1].split(","))
                ws.append(math.exp(-((float(p) - mu) ** 2) / (2 * sigma**2)))
            else:  # a weight registered since: the tests that iterate the registry need its oracle here
                raise NotImplementedError(f"no oracle for the prompt weight {setting!r}: write one from its paper")
        out.append(ws)
    return out


def engine_expected(batches, settings: dict, weight: str, window: int, n: int) -> list[torch.Tensor]:
    """Per batch of `(uid, score)` rows, each row's advantage: the TRL trainer's estimator on its uid group (`trl_path`
    without a prompt weight; scale_rewards none), times the oracle's weight of its group (groups in order of first
    appearance, the histogram's bins the largest group + 1), 0 for an unscorable row."""
    groups_of, per_batch = [], []
    for rows in batches:
        uids = list(dict.fromkeys(u for u, _ in rows))
        groups_of.append(uids)
        per_batch.append([[s for u, s in rows if u == uid] for uid in uids])
    weights = oracle_weights(per_batch, weight, window)
    out = []
    for rows, uids, ws in zip(batches, groups_of, weights):
        adv = trl_path(rows, settings, n)
        w = torch.tensor([float(ws[uids.index(u)]) for u, _ in rows], dtype=torch.float64)
        scored = torch.tensor([not math.isnan(s) for _, s in rows])
        out.append(torch.where(scored, adv * w, 0.0))
    return out
