"""The recipe's eval report: the math reward per eval problem, before and after training, and the paired change.

`EvalRewards` wraps the math reward so that every eval completion's score is kept by prompt while `recording()`;
`report` gives the pass@1 with a 95% percentile bootstrap CI over problems (the `eval/` CIs' function) and the
paired change. `learning_note` says why the per-step training reward cannot show that change.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager

import torch

from ordergrad_trl.core.stats import bootstrap_ci


class EvalRewards:
    """Records the math reward of each eval completion (by prompt) while `recording()`, for CIs over problems."""

    def __init__(self):
        self.runs: list[dict[str, list[float]]] = []
        self._active = False

    def wrap(self, func):
        def recorded(prompts, completions, **kwargs):
            scores = func(prompts=prompts, completions=completions, **kwargs)
            if self._active:
                for prompt, score in zip(prompts, scores):
                    self.runs[-1].setdefault(repr(prompt), []).append(0.0 if score is None else score)
            return scores

        return functools.update_wrapper(recorded, func)  # TRL logs it under the function's own name

    @contextmanager
    def recording(self):
        self.runs.append({})
        self._active = True
        try:
            yield
        finally:
            self._active = False

    def report(self, group_size: int) -> str:
        """`eval math reward: 0.31 [0.27, 0.35] before -> 0.52 [...] after; change +0.21 [...]` (95%, over problems)."""
        from accelerate.utils import gather_object

        per_run = []
        for run in self.runs:  # every process scored its own rows: merge them by prompt
            merged: dict[str, list[float]] = {}
            for part in gather_object([run]):
                for prompt, scores in part.items():
                    merged.setdefault(prompt, []).extend(scores)
            per_run.append({p: sum(v) / len(v) for p, v in merged.items()})
        prompts = sorted(set.intersection(*(set(r) for r in per_run)))
        values = torch.tensor([[r[p] for p in prompts] for r in per_run], dtype=torch.float64)  # (runs, P)
        low, high = bootstrap_ci(values)  # (runs,), (runs,): percentile bootstrap over problems, as eval/ reports
        parts = [f"{m:.3f} [{lo:.3f}, {hi:.3f}]" for m, lo, hi in zip(values.mean(1).tolist(), low, high)]
        text = f"eval math reward (pass@1, {len(prompts)} problems x {group_size} samples, 95% CI): " + " before -> ".join(parts)
        if len(per_run) == 2:
            change = values[1] - values[0]  # paired: the same problems before and after
            lo, hi = bootstrap_ci(change)
            text += f" after; change {change.mean():+.3f} [{lo:+.3f}, {hi:+.3f}]"
        return text


def learning_note(log_history: list[dict], prompts_per_step: int) -> str | None:
    """One line for the end of the log: learning shows in the paired eval change, not in the per-step training reward
    (each step scores new prompts), with that reward's mean over the first and last thirds of the steps."""
    rewards = [row["reward"] for row in log_history if "reward" in row and "eval_reward" not in row]
    if not rewards:
        return None
    third = len(rewards) // 3
    thirds = (f" (mean of the first third of steps {sum(rewards[:third]) / third:.3f}, of the last third "
              f"{sum(rewards[-third:]) / third:.3f})") if third else ""  # fmt: skip
    return (f"Learning is read from the paired eval change above (the same problems before and after), not from the "
            f"per-step training reward: each step scores {prompts_per_step} new prompts, so that reward moves with "
            f"their difficulty{thirds}.")
