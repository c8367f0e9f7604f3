"""Issue 37 (4): no silent fallback. A launch that asked for FSDP or DeepSpeed on a machine where accelerate
builds another engine (on CPU it drops the FSDP plugin), or that accelerate counts as fewer processes than joined,
is refused when the config or trainer is built, naming what was asked, what was built and the fix, instead of
training unsharded and exiting 0.

accelerate's fallback is reproduced here as it happens: the launcher's environment variable set, a CPU process,
and accelerate's own state deciding; the check reads only what accelerate built."""

from __future__ import annotations

import pytest
from accelerate.state import AcceleratorState, PartialState
from datasets import Dataset


@pytest.fixture
def fresh_state():
    """accelerate's state is a per-process singleton: let this test's launch settings build their own."""
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    unset_hf_deepspeed_config()  # a DeepSpeed launch leaves transformers' global config behind
    AcceleratorState._reset_state(reset_partial_state=True)


def _build(tiny_model, tiny_tokenizer, cpu_training_args, **overrides):
    from ordergrad_trl import OrderGradConfig, OrderGradTrainer

    args = OrderGradConfig(**{**cpu_training_args, "per_device_train_batch_size": 4, "num_generations": 4,
                              "max_completion_length": 4, "max_steps": 1, **overrides})
    return OrderGradTrainer(model=tiny_model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                            args=args, processing_class=tiny_tokenizer,
                            train_dataset=Dataset.from_dict({"prompt": ["Q?"] * 4}))


def test_fsdp_asked_for_on_cpu_is_refused(tiny_model, tiny_tokenizer, cpu_training_args, monkeypatch, fresh_state):
    """What `accelerate launch --config_file accelerate_configs/fsdp2.yaml` sets, on a CPU: accelerate builds no FSDP
    (the DeepSpeed launches, real ones, are in tests/test_sharded_cpu.py)."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    with pytest.raises(ValueError) as err:
        _build(tiny_model, tiny_tokenizer, cpu_training_args)
    msg = str(err.value)
    assert "FSDP was asked for (ACCELERATE_USE_FSDP=true" in msg and "not FSDP" in msg
    assert "accelerate_configs/zero3.yaml" in msg  # the fix names a config that runs here
    assert AcceleratorState().distributed_type.value in msg  # what accelerate built, by name


def test_the_training_arguments_count_as_asking():
    from ordergrad_trl.training.engine_guard import _asked

    class Args:
        fsdp = "full_shard"
        deepspeed = None

    assert _asked(Args, "FSDP") == "the `fsdp` training argument" and _asked(Args, "DeepSpeed") is None
    Args.fsdp, Args.deepspeed = "", "ds_config.json"
    assert _asked(Args, "FSDP") is None and _asked(Args, "DeepSpeed") == "the `deepspeed` training argument"


def test_more_processes_joined_than_counted_is_refused(monkeypatch):
    """accelerate counting one process while torch.distributed joined two (a DeepSpeed launch on CPU without
    --ddp_backend gloo; the real launch is in tests/test_sharded_cpu.py)."""
    import torch.distributed as dist

    from ordergrad_trl.training.engine_guard import check_world_size

    check_world_size(1)  # nothing joined: one process
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    with pytest.raises(ValueError, match=r"2 processes joined torch.distributed but the trainer's accelerator counts "
                                         r"1: .* `--ddp_backend gloo`"):
        check_world_size(1)
    check_world_size(2)


def test_a_plain_launch_is_not_refused(tiny_model, tiny_tokenizer, cpu_training_args, monkeypatch, fresh_state):
    for env in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"):
        monkeypatch.setenv(env, "false")
    trainer = _build(tiny_model, tiny_tokenizer, cpu_training_args)
    assert not trainer.is_fsdp_enabled and not trainer.is_deepspeed_enabled
    assert PartialState().distributed_type.value == "NO"
