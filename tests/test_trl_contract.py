"""The TRL internals OrderGradTrainer relies on. When TRL changes them, these fail loudly (and first).

Every TRL internal the package uses is a `Seam` of `ordergrad_trl/training/trl_private.py`, checked at import; the
tests below iterate that list (each holds, each one broken fails the check naming it, a renamed method fails the
real import) and check the behaviour behind the main ones.

OrderGradTrainer touches two private GRPOTrainer methods (see ordergrad_trl/training/trainer.py):
- `_calculate_rewards(inputs, prompts, completions, completion_ids_list)` returns the rewards of ALL processes,
  `(N_global, num_funcs)`, None -> NaN, each prompt's group contiguous;
- `_generate_and_score_completions(inputs)` calls it once and returns a dict whose `"advantages"` is this
  process's 1-D slice `[process_index * len(prompts), (process_index + 1) * len(prompts))`, after appending the
  gathered advantages to the `self._logs["advantages"]` deque.
And the unbiasedness claim of OrderGradConfig rests on TRL's losses: on-policy, `luspo` has exactly the gradient
-(1/N) sum_i A_i grad log pi(o_i), and `dr_grpo` the same divided by max_completion_length.
"""

from __future__ import annotations

import inspect
import math
import re
from collections import deque
from pathlib import Path

import pytest
import torch
import trl
from datasets import Dataset
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from trl import GRPOConfig, GRPOTrainer

from ordergrad_trl import OrderGradConfig, OrderGradTrainer
from ordergrad_trl.training.trl_private import SEAMS, TESTED_TRL_VERSIONS, check_seams, seam_problem
from helpers import bounded

G = 4
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_installed_trl_is_in_the_tested_range_and_pyproject_pins_it():
    assert Version(trl.__version__) in TESTED_TRL_VERSIONS, (
        f"trl {trl.__version__} is outside the tested range {TESTED_TRL_VERSIONS}: rerun this file, then widen "
        "TESTED_TRL_VERSIONS and the pyproject pin together"
    )
    pins = re.findall(r'"trl\s*([^";]*)"', PYPROJECT.read_text())
    assert len(pins) == 1 and SpecifierSet(pins[0]) == TESTED_TRL_VERSIONS, (pins, TESTED_TRL_VERSIONS)


@pytest.mark.parametrize("extra", ["vllm", "deepspeed"])
def test_gpu_extras_pin_what_the_installed_trl_supports(extra):
    """pyproject's [vllm] / [deepspeed] extras carry the same version ranges as TRL's own extras of that name."""
    import importlib.metadata
    import tomllib

    from packaging.requirements import Requirement

    ours = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"][extra]
    ours = {r.name: r.specifier for r in map(Requirement, ours)}
    trls = [Requirement(r) for r in importlib.metadata.requires("trl")]
    trls = {r.name: r.specifier for r in trls if r.marker and r.marker.evaluate({"extra": extra})}
    trls.pop("transformers", None)  # deepspeed extra: transformers!=5.1.0, already excluded by our transformers>=5.18
    assert trls and ours == trls


def test_private_method_signatures():
    calc = list(inspect.signature(GRPOTrainer._calculate_rewards).parameters)
    assert calc == ["self", "inputs", "prompts", "completions", "completion_ids_list"]
    gen = list(inspect.signature(GRPOTrainer._generate_and_score_completions).parameters)
    assert gen == ["self", "inputs"]


def test_generate_and_score_completions_source_still_has_the_seams():
    """Layout facts a single process cannot exercise (the 2-process test in test_trainer.py does)."""
    src = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert src.count("self._calculate_rewards(") == 1
    assert "self.accelerator.process_index * len(prompts)" in src, "TRL changed how it slices the local batch"
    assert 'self._logs["advantages"].extend(all_process_advantages.tolist())' in src
    assert re.search(r'"advantages":\s*advantages,', src)
    assert re.search(r"\.view\(-1, num_generations\)", src), "TRL no longer groups the gathered rewards this way"
    assert "rewards_per_func = gather(rewards_per_func)" in inspect.getsource(GRPOTrainer._calculate_rewards)


def _reward(completion_ids, **kwargs):
    # None for about a third of the rows, so the NaN convention is exercised
    return [None if sum(ids) % 3 == 0 else float(sum(ids) % 2) for ids in completion_ids]


class _Spy(GRPOTrainer):
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.seen.append((out.clone(), [list(ids) for ids in completion_ids_list]))
        return out


def _dataset(n=8):
    return Dataset.from_dict({"prompt": [f"Question {i}: what is {i} plus {i + 1}?" for i in range(n)]})


def _first_batch(trainer):
    return next(iter(trainer.get_train_dataloader()))


def test_calculate_rewards_and_generate_and_score_completions_contract(tiny_model, tiny_tokenizer, cpu_training_args):
    args = GRPOConfig(
        **cpu_training_args,
        per_device_train_batch_size=3 * G,
        num_generations=G,
        max_completion_length=6,
        scale_rewards="none",
    )
    trainer = _Spy(
        model=tiny_model, reward_funcs=[_reward, _reward], args=args, train_dataset=_dataset(),
        processing_class=tiny_tokenizer,
    )
    trainer.seen = []
    trainer.model.train()
    batch = _first_batch(trainer)
    logged_before = len(trainer._logs["advantages"])
    output = trainer._generate_and_score_completions(batch)

    assert len(trainer.seen) == 1, "_calculate_rewards must be called exactly once per generation batch"
    rewards_per_func, completion_ids = trainer.seen[0]
    n = len(batch)
    assert rewards_per_func.shape == (n * trainer.accelerator.num_processes, 2)
    assert rewards_per_func.dtype == torch.float32
    expected = torch.tensor([[math.nan if r is None else r] * 2 for r in _reward(completion_ids)])
    torch.testing.assert_close(rewards_per_func, expected, equal_nan=True)

    # each prompt's group is contiguous, and the groups are distinct prompts
    prompts = [x["prompt"] for x in batch]
    assert all(len(set(prompts[i : i + G])) == 1 for i in range(0, n, G))
    assert len(set(prompts[::G])) == n // G

    # the local, 1-D "advantages" is GRPO's (sum, mean-center, unscorable -> 0): the value we replace
    advantages = output["advantages"]
    assert advantages.shape == (n,) and advantages.dtype == torch.float32
    total = rewards_per_func.nansum(dim=1).masked_fill(rewards_per_func.isnan().all(dim=1), math.nan).view(-1, G)
    grpo = torch.nan_to_num(total - total.nanmean(dim=1, keepdim=True), nan=0.0).view(-1)
    torch.testing.assert_close(advantages, grpo)

    # the completions-table log got exactly the gathered advantages appended
    logged = trainer._logs["advantages"]
    assert isinstance(logged, deque) and logged.maxlen == args.generation_batch_size
    assert len(logged) - logged_before == n and list(logged)[-n:] == advantages.tolist()
    assert trainer.accelerator.process_index == 0 and trainer.num_generations_eval == G


@pytest.mark.parametrize("loss_type", ["luspo", "dr_grpo"])
def test_loss_gradient_is_plain_reinforce(tiny_model, tiny_tokenizer, cpu_training_args, loss_type):
    """On-policy, the loss's gradient is -(c/B) sum_i A_i grad log pi(o_i) with c = 1 (luspo), 1/L_max (dr_grpo)."""
    max_len = 6
    args = OrderGradConfig(
        **cpu_training_args,
        per_device_train_batch_size=2 * G,
        num_generations=G,
        ordergrad_k=2,
        max_completion_length=max_len,
        loss_type=loss_type,
    )
    trainer = OrderGradTrainer(
        model=tiny_model, reward_funcs=_reward, args=args, train_dataset=_dataset(), processing_class=tiny_tokenizer
    )
    model = trainer.model
    model.train()
    inputs = trainer._generate_and_score_completions(_first_batch(trainer))
    torch.manual_seed(0)
    inputs["advantages"] = torch.randn(inputs["advantages"].shape)  # any advantages, not only centered ones
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop

    def grads(loss):
        model.zero_grad()
        loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    trl_grads = grads(trainer.compute_loss(model, inputs))

    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    c_len = inputs["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=mask).logits[:, -c_len - 1 : -1]  # (B, C, V)
    token_logps = logits.log_softmax(-1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)  # (B, C)
    seq_logps = (token_logps * inputs["completion_mask"]).sum(-1)  # (B,)
    scale = 1.0 if loss_type == "luspo" else 1.0 / max_len
    reinforce = grads(-scale * (inputs["advantages"] * seq_logps).mean())

    assert any(g.abs().max() > 0 for g in reinforce.values())
    for name, g in reinforce.items():
        torch.testing.assert_close(trl_grads[name], g, rtol=1e-4, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")


# ----------------------------------------------------------------------------------------------- the fence


@pytest.mark.parametrize("seam", SEAMS, ids=lambda s: s.label)
def test_every_fenced_seam_holds(seam):
    assert seam_problem(seam) is None


def _break(seam, monkeypatch):
    """Simulate a TRL release that renamed (or reworded) `seam`."""
    from copy import copy
    from types import MappingProxyType

    from ordergrad_trl.training import trl_private

    owner = trl_private._resolve(seam.owner)
    if seam.source_of is not None:  # the method no longer assigns the attribute
        monkeypatch.setattr(owner, seam.source_of.rpartition(".")[2], lambda self, *a, **k: None)
    elif seam.help_of:
        field = owner.__dataclass_fields__[seam.name]
        monkeypatch.setitem(owner.__dataclass_fields__, seam.name, copy(field))
        owner.__dataclass_fields__[seam.name].metadata = MappingProxyType({"help": "Accepted: 'grpo' or 'dapo'"})
    else:  # renamed: gone from the owner and all its bases
        for cls in getattr(owner, "__mro__", [owner]):
            if seam.name in vars(cls):
                monkeypatch.delattr(cls, seam.name)


@pytest.mark.parametrize("seam", SEAMS, ids=lambda s: s.label)
def test_a_broken_seam_fails_the_check_naming_it(seam, monkeypatch):
    _break(seam, monkeypatch)
    with pytest.raises(ImportError, match=re.escape(f"trl.{seam.label}:")):
        check_seams()


def test_renamed_private_method_fails_the_import_naming_it(tmp_path):
    """As if TRL renamed `_generate_and_score_completions`: importing the trainer fails, naming it, and no GRPO
    training can start (a fresh interpreter, so the real import path runs)."""
    import sys

    code = (
        "from trl import GRPOTrainer\n"
        "GRPOTrainer._generate_and_score_completions_v2 = GRPOTrainer._generate_and_score_completions\n"
        "del GRPOTrainer._generate_and_score_completions\n"
        "from ordergrad_trl import OrderGradTrainer\n"
    )
    proc = bounded.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError:") and "trl.GRPOTrainer._generate_and_score_completions:" in last, last
    assert "silently be GRPO" in last


def test_log_averages_each_metric_list_over_the_window(tiny_model, tiny_tokenizer, cpu_training_args):
    """The logging-window semantics the trainer's metrics rely on: each `_metrics[mode]` list is averaged (NaN left
    out), eval keys get `eval_`, and the lists are cleared after logging."""
    args = GRPOConfig(**cpu_training_args, per_device_train_batch_size=G, num_generations=G)
    trainer = GRPOTrainer(model=tiny_model, reward_funcs=_reward, args=args, train_dataset=_dataset(),
                          processing_class=tiny_tokenizer)  # fmt: skip
    for training, prefix in ((True, ""), (False, "eval_")):
        trainer.model.train(training)
        mode = "train" if training else "eval"
        trainer._metrics[mode]["x/pass@2"].extend([1.0, 0.0, math.nan, 0.5])
        trainer.log({})
        assert trainer.state.log_history[-1][f"{prefix}x/pass@2"] == pytest.approx(0.5)
        assert not trainer._metrics[mode]
