"""`ordergrad_dynamic_sampling`: train only on groups that carry a gradient; each mode is a row of `DYNAMIC_SAMPLING`.

A mode's row says what it reads, the rule that leaves a group out (given the plan's record of each generated round,
`GroupedBatch`), and whether it refills; the config's check and help, the trainer and the tests iterate the rows, so
a new mode is its row and its test. The package's `filter` and `refill` leave out the empty groups: the plan's own
advantages (estimator, prompt weight, scaling) are 0 for every rollout, decided on the gathered batch so every
process keeps the same groups; a reward-variance rule (`std != 0`) is wrong for
order statistics (docs/training.md). Shapes never change across processes: an empty group's rows stay in the batch
with a loss weight of 0 (TRL's `tool_mask`, which `_compute_loss` multiplies into the completion mask), and the
normalizer is corrected so the loss equals that of the same batch with the empty groups removed by hand:
`dr_grpo` / `luspo` average over rows (kept rows weigh n / n_kept), `dapo` / `cispo` / `vespo` divide by the
batch's token count (recounted over the kept rows). `refill` generates further rounds of prompts with the same
weights (no optimizer step in between) from a second, independently shuffled pass over the training set, keeps
each round's non-empty groups while every process has room for their rows, and fills what stays free with
empty rows weighted 0. A generation batch without any non-empty group skips the optimizer step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from transformers import TrainerCallback

from ..core.plan import GroupedBatch
from ..core.registry_base import Registry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplingMode:
    """One `ordergrad_dynamic_sampling` mode: `leaves_out(round's GroupedBatch) -> (G,) bool`, the groups it does
    not train (None: every group trains, no dynamic sampling at all); `refills`: further rounds are generated until
    the batch is full of kept groups (or `ordergrad_dynamic_sampling_max_rounds`)."""

    name: str
    reads: str  # what its rule reads, shown in the config help
    refills: bool
    help: str
    leaves_out: Callable[[GroupedBatch], torch.Tensor] | None


_ROWS: Registry[SamplingMode] = Registry("dynamic-sampling mode", holder=lambda m: f"the row of {m.help!r}")
_MODES = _ROWS.rows
DYNAMIC_SAMPLING: Mapping[str, SamplingMode] = _ROWS.view  # name -> row, in registration order


def register_dynamic_sampling(mode: SamplingMode) -> SamplingMode:
    """Add a mode's row; a name that is not a lower-case identifier, or is taken, raises."""
    return _ROWS.add(mode.name, mode)


def dynamic_sampling_help() -> str:
    """`ordergrad_dynamic_sampling`'s help: every mode with its summary."""
    return _ROWS.help(lambda m: f"'{m.name}' ({m.help}" + (f"; reads {m.reads})" if m.leaves_out else ")"))


def empty_of(batch: GroupedBatch) -> torch.Tensor:
    """The plan's empty groups (every final advantage 0), the rule of `ordergrad/frac_zero_adv_groups`."""
    return batch.empty


_FINAL = "the plan's final advantages, after the estimator, prompt weight and scaling"
register_dynamic_sampling(SamplingMode("off", "nothing", False, "train on every group", None))
register_dynamic_sampling(SamplingMode(
    "filter", _FINAL, False, "train without the groups whose advantages are all 0", empty_of))
register_dynamic_sampling(SamplingMode(
    "refill", _FINAL, True, "also generate further prompts until the batch is full of groups with a gradient",
    empty_of))
ROW_MEAN_LOSSES = ("dr_grpo", "luspo")  # loss = sum over rows / rows per micro-batch: kept rows weigh n / n_kept
TOKEN_COUNT_LOSSES = ("dapo", "cispo", "vespo")  # loss / the generation batch's token count: recounted over kept rows
SUPPORTED_LOSS_TYPES = ROW_MEAN_LOSSES + TOKEN_COUNT_LOSSES
# output keys `refill` knows how to put rows of several rounds together in: left-padded (prompt) and right-padded
_LEFT = {"prompt_ids": None, "prompt_mask": 0}  # None: the tokenizer's pad token
_RIGHT = {"completion_ids": None, "completion_mask": 0, "tool_mask": 1, "old_per_token_logps": 0.0,
          "ref_per_token_logps": 0.0, "sampling_per_token_logps": 0.0, "importance_sampling_ratio": 0.0}  # fmt: skip


def empty_groups(advantages: torch.Tensor) -> torch.Tensor:
    """`(num_groups, N)` final advantages -> `(num_groups,)` bool: the groups whose every advantage is 0 (NaN rows
    are already 0), `GroupedBatch.empty` for a batch already reshaped."""
    return (advantages == 0).all(dim=1)


def _pad(rows: list[torch.Tensor], value, left: bool) -> torch.Tensor:
    """Rows of one key (1-D, widths may differ) stacked, padded with `value` on the left or the right."""
    width = max(row.shape[0] for row in rows)
    out = rows[0].new_full((len(rows), width), value)
    for i, row in enumerate(rows):
        if left:
            out[i, width - row.shape[0] :] = row
        else:
            out[i, : row.shape[0]] = row
    return out


class Selection:
    """Which non-empty groups of which round fill the batch: each process holds `n_local` rows (the rows of a group
    can lie on two processes), so a group is taken, in round order, when every process it touches has room."""

    def __init__(self, n_local: int, processes: int, group_size: int):
        self.n_local, self.group_size = n_local, group_size
        self.room = [n_local] * processes
        self.target = n_local * processes // group_size  # the groups of one generation batch
        self.chosen: list[tuple[int, int]] = []  # (round, group)

    def _rows_per_process(self, group: int) -> dict[int, int]:
        counts: dict[int, int] = {}
        for row in range(group * self.group_size, (group + 1) * self.group_size):
            counts[row // self.n_local] = counts.get(row // self.n_local, 0) + 1
        return counts

    def add(self, round_index: int, empty: torch.Tensor) -> None:
        for group in (~empty).nonzero().view(-1).tolist():
            counts = self._rows_per_process(group)
            if all(self.room[p] >= c for p, c in counts.items()):
                self.chosen.append((round_index, group))
                for p, c in counts.items():
                    self.room[p] -= c

    @property
    def full(self) -> bool:
        return len(self.chosen) == self.target

    def local_rows(self, process: int) -> list[tuple[int, int]]:
        """`(round, local row)` of the rows this process trains on, the chosen ones first, then round 0's others."""
        start = process * self.n_local
        rows = [(r, row - start) for r, g in self.chosen
                for row in range(g * self.group_size, (g + 1) * self.group_size)
                if start <= row < start + self.n_local]  # fmt: skip
        taken = {row for r, row in rows if r == 0}
        rows += [(0, row) for row in range(self.n_local) if row not in taken][: self.n_local - len(rows)]
        return rows


def dynamic_sampling_of(trainer) -> DynamicSampling | None:
    """The trainer's dynamic sampling, None for a mode that trains every group."""
    row = DYNAMIC_SAMPLING[trainer.args.ordergrad_dynamic_sampling]
    return None if row.leaves_out is None else DynamicSampling(trainer, row)


class DynamicSampling:
    """The trainer's `ordergrad_dynamic_sampling` (a mode that leaves groups out), in place of one generation batch."""

    def __init__(self, trainer, row: SamplingMode):
        self.trainer, args = trainer, trainer.args
        self.row, self.mode, self.max_rounds = row, row.name, args.ordergrad_dynamic_sampling_max_rounds
        self.batch_has_signal, self.step_has_signal = True, False
        self._order, self._position = None, 0
        if row.refills:
            dataset = trainer.train_dataset
            if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")) or isinstance(
                dataset, torch.utils.data.IterableDataset
            ):
                raise ValueError(f"ordergrad_dynamic_sampling={self.mode!r} needs a train_dataset with len() and "
                                 "indexing (its extra prompts are drawn from it): use a mode that does not refill "
                                 "('filter') with an iterable dataset.")
            self._generator = torch.Generator().manual_seed(args.seed + 1)  # not the main sampler's order
        trainer.add_callback(SkipEmptyUpdates(self))

    def _extra_inputs(self, n_local: int) -> list[dict]:
        """The next generation batch of the refill pass: this process's `n_local` rows, each prompt `num_generations`
        times in a row, the same draw on every process (one seed), as TRL's RepeatSampler lays them out."""
        trainer, n = self.trainer, self.trainer.num_generations
        prompts = n_local * trainer.accelerator.num_processes // n
        dataset = trainer.train_dataset
        indices = []
        while len(indices) < prompts:
            if self._order is None or self._position == len(self._order):
                self._order, self._position = torch.randperm(len(dataset), generator=self._generator).tolist(), 0
            indices.append(self._order[self._position])
            self._position += 1
        rows = [index for index in indices for _ in range(n)]
        start = trainer.accelerator.process_index * n_local
        return [dict(dataset[i]) for i in rows[start : start + n_local]]

    def generate(self, inputs: list[dict], score, metrics) -> tuple[dict, list]:
        """One generation batch: `score(inputs) -> (TRL's output, the plan's GroupedBatch)` per round (the trainer's
        scoring, handed in), the groups to train chosen from each round's record (`empty`). Returns this process's
        output and every round's record (the trainer feeds a stateful prompt weight's window once, from all of
        them); `metrics` is where the rounds and groups trained are logged."""
        trainer = self.trainer
        n, n_local = trainer.num_generations, len(inputs)
        output, batch = score(inputs)
        rounds, records = [output], [batch]
        selection = Selection(n_local, trainer.accelerator.num_processes, n)
        selection.add(0, self.row.leaves_out(batch))
        while self.row.refills and not selection.full and len(rounds) <= self.max_rounds:
            extra, batch = score(self._extra_inputs(n_local))
            rounds.append(extra)
            records.append(batch)
            selection.add(len(rounds) - 1, self.row.leaves_out(batch))
        rows = selection.local_rows(trainer.accelerator.process_index)
        if any(r != 0 for r, _ in selection.chosen):  # decided on the gathered batch: every process assembles
            output = self._assemble(rounds, rows)
        else:  # round 0 alone: its rows stay where TRL put them
            rows = [(0, row) for row in range(n_local)]
        kept = {(r, row) for r, g in selection.chosen for row in range(g * n, (g + 1) * n)}
        start = trainer.accelerator.process_index * n_local
        keep = torch.tensor([(r, row + start) in kept for r, row in rows], device=output["advantages"].device)
        groups = len(selection.chosen)
        if groups < selection.target:
            self._weigh(output, keep, groups * n, selection.target * n)
        metrics["ordergrad/dynamic_sampling/rounds"].append(float(len(rounds)))
        metrics["ordergrad/dynamic_sampling/groups_trained"].append(float(groups))
        self.batch_has_signal = groups > 0
        if self.row.refills and not selection.full:
            logger.warning(
                "ordergrad_dynamic_sampling=%r: step %d trains on %d of %d groups after %d extra rounds "
                "(ordergrad_dynamic_sampling_max_rounds=%d); the other rows carry weight 0.",
                self.mode, trainer.state.global_step + 1, groups, selection.target, len(rounds) - 1, self.max_rounds,
            )  # fmt: skip
        if groups == 0:
            logger.warning("ordergrad_dynamic_sampling=%r: step %d has no group with a nonzero advantage: the "
                           "optimizer step is skipped.", self.mode, trainer.state.global_step + 1)  # fmt: skip
        return output, records

    def _weigh(self, output: dict, keep: torch.Tensor, kept_rows: int, rows: int) -> None:
        """Zero the empty rows' loss and correct the normalizer, so the loss is that of the kept rows alone."""
        loss_type = self.trainer.loss_type
        base = output.get("tool_mask")
        base = torch.ones_like(output["completion_mask"]) if base is None else base
        weight = keep.to(torch.float32)
        if loss_type in ROW_MEAN_LOSSES and kept_rows:
            weight = weight * (rows / kept_rows)
        output["tool_mask"] = base * weight.unsqueeze(1)
        if loss_type in TOKEN_COUNT_LOSSES:  # TRL's count: the gathered sum of the loss mask, here the kept rows'
            tokens = (output["completion_mask"] * base)[keep].sum()
            output["num_items_in_batch"] = self.trainer.accelerator.gather(tokens).sum()

    def _assemble(self, rounds: list[dict], rows: list[tuple[int, int]]) -> dict:
        """This process's batch from `(round, local row)` pairs of several rounds, re-padded to the widest."""
        pad_id = self.trainer._tokenizer.pad_token_id
        out = {}
        for key, first in rounds[0].items():
            if key == "num_items_in_batch":
                continue
            parts = [rounds[r][key][row] for r, row in rows]
            if key == "advantages":
                out[key] = torch.stack(parts)
            elif key in _LEFT or key in _RIGHT:
                value = _LEFT.get(key, _RIGHT.get(key))
                out[key] = _pad(parts, pad_id if value is None else value, left=key in _LEFT)
            else:
                raise ValueError(f"ordergrad_dynamic_sampling={self.mode!r} cannot put together batches holding "
                                 f"{key!r} (multimodal or a newer TRL): use a mode that does not refill ('filter')."
                                 )  # fmt: skip
        loss_mask = out["completion_mask"] * out.get("tool_mask", 1)
        out["num_items_in_batch"] = self.trainer.accelerator.gather(loss_mask.sum()).sum()
        return out

    def note_micro_step(self) -> None:
        """After each micro-step: whether the optimizer step being accumulated has seen a non-empty group."""
        self.step_has_signal = self.step_has_signal or self.batch_has_signal


class SkipEmptyUpdates(TrainerCallback):
    """Skips the optimizer step (parameters and optimizer state untouched) when none of its generation batches held a
    non-empty group: a zero gradient would still move the weights through Adam's moments and weight decay. The
    learning-rate schedule moves on. Under DeepSpeed the engine steps inside backward, on the zero gradient."""

    def __init__(self, sampling: DynamicSampling):
        self.sampling, self.skipped = sampling, None

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        if not self.sampling.step_has_signal and optimizer is not None:
            optimizer.step = lambda *a, **k: None  # this instance only, restored right after the step
            self.skipped = optimizer

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.skipped is not None:
            del self.skipped.step
            self.skipped = None
        self.sampling.step_has_signal = False
