"""Training stops where it cannot go on, and nothing diverged is saved: a non-finite loss stops the step before the
optimizer uses it, weights that turn inf/NaN after an update stop training before that step's checkpoint and the
next generation, and `save_model` refuses non-finite weights; each names the step and the likely settings."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import TrainerCallback


def _trainer(tiny_model, tiny_tokenizer, cpu_training_args, trainer_cls=None, callbacks=None, **overrides):
    from ordergrad_trl import OrderGradConfig, OrderGradTrainer

    settings = dict(per_device_train_batch_size=4, num_generations=4, max_completion_length=4, max_steps=2,
                    save_strategy="steps", save_steps=1)  # fmt: skip
    args = OrderGradConfig(**{**cpu_training_args, **settings, **overrides})

    def reward(completions, **kwargs):
        return [float(len(c) % 2) for c in completions]

    return (trainer_cls or OrderGradTrainer)(
        model=tiny_model, reward_funcs=reward, args=args, processing_class=tiny_tokenizer,
        train_dataset=Dataset.from_dict({"prompt": [f"Q{i}?" for i in range(4)]}), callbacks=callbacks,
    )  # fmt: skip


def _saved(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint") or p.suffix == ".safetensors")


def test_a_non_finite_loss_stops_the_step_and_nothing_is_saved(tiny_model, tiny_tokenizer, cpu_training_args):
    from ordergrad_trl import OrderGradTrainer

    class NaNLoss(OrderGradTrainer):
        def compute_loss(self, *args, **kwargs):
            return super().compute_loss(*args, **kwargs) * math.nan

    trainer = _trainer(tiny_model, tiny_tokenizer, cpu_training_args, trainer_cls=NaNLoss)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.raises(FloatingPointError, match=r"the training loss is not finite at step 1 .*no model is saved. "
                                                 r"Likely: learning_rate"):
        trainer.train()
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters()))  # no update applied
    assert _saved(Path(trainer.args.output_dir)) == []


def test_weights_that_turn_non_finite_stop_training_before_the_checkpoint(tiny_model, tiny_tokenizer,
                                                                         cpu_training_args):
    class Diverge(TrainerCallback):  # runs before the trainer's own check (added when the trainer is built)
        def on_step_end(self, args, state, control, model=None, **kwargs):
            with torch.no_grad():
                dict(model.named_parameters())["lm_head.weight"][0, 0] = math.inf

    trainer = _trainer(tiny_model, tiny_tokenizer, cpu_training_args, callbacks=[Diverge()])
    with pytest.raises(FloatingPointError, match=r"training stopped, nothing saved: the model's weights are not finite "
                                                 r"after step 1 \(first: lm_head.weight\): training diverged"):
        trainer.train()
    assert _saved(Path(trainer.args.output_dir)) == []  # save_steps=1: step 1's checkpoint was not written


def test_save_model_refuses_non_finite_weights(tiny_model, tiny_tokenizer, cpu_training_args, tmp_path):
    trainer = _trainer(tiny_model, tiny_tokenizer, cpu_training_args)
    with torch.no_grad():
        next(trainer.model.parameters()).view(-1)[0] = math.nan
    with pytest.raises(FloatingPointError, match=rf"not saving to {tmp_path / 'final'}: the model's weights are not "
                                                 r"finite after step 0 \(first: "):
        trainer.save_model(str(tmp_path / "final"))
    assert not (tmp_path / "final").exists()


def test_processes_agree_through_one_gathered_flag():
    """Any process's bad value stops every process (else one would raise and the rest wait in the next collective)."""
    from ordergrad_trl.training import finite_guard

    class Accelerator:
        def __init__(self, others):
            self.others = others

        def gather(self, flag):  # what each process's flag becomes: this one's and the others'
            return torch.cat([flag, torch.tensor(self.others)])

    trainer = type("T", (), {})()
    for mine, others, expected in ((False, [0.0], False), (False, [1.0], True), (True, [0.0], True)):
        trainer.accelerator = Accelerator(others)
        assert finite_guard._anywhere(trainer, mine, "cpu") is expected


def test_the_screen_by_sums_is_confirmed_entry_by_entry():
    """A parameter whose finite entries sum past float32's max is not reported; one holding NaN or inf is."""
    from ordergrad_trl.training.finite_guard import _first_non_finite

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    with torch.no_grad():
        model[0].weight.fill_(3e38)  # finite; their sum overflows to inf
        assert _first_non_finite(model) is None
        model[1].bias[1] = math.nan
        assert _first_non_finite(model) == "1.bias"
        model[0].weight[0, 0] = -math.inf
        assert _first_non_finite(model) == "0.weight"
