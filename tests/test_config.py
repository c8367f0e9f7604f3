"""OrderGradConfig: the defaults that keep the gradient unbiased, defaults resolved per copy (in its plan), and
config-time errors that name the fields (no model is built here)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from ordergrad_trl import OrderGradConfig
from ordergrad_trl.core.objectives import DEFAULT_OBJECTIVE


def trained(config) -> tuple[str, int]:
    """The objective and K training starts with: the plan's first stage (the fields keep what the user set)."""
    return config.ordergrad_plan.stages[0].objective, config.ordergrad_plan.stages[0].k


def test_defaults_keep_the_gradient_unbiased(cpu_training_args):
    config = OrderGradConfig(**cpu_training_args)
    assert (*trained(config), config.num_generations) == (DEFAULT_OBJECTIVE, 4, 8)
    assert config.loss_type == "dr_grpo" and config.resolved_importance_sampling_level() == "token"
    assert config.max_grad_norm == 1.0
    assert config.scale_rewards == "none" and config.beta == 0.0 and config.num_iterations == 1
    assert config.multi_objective_aggregation == "sum_then_normalize"
    assert config.bf16 is False  # the CPU test args set it; the library never flips it
    assert OrderGradConfig(**cpu_training_args, loss_type="luspo").resolved_importance_sampling_level() == "sequence"


@pytest.mark.parametrize(
    "n, k, objective",
    [(2, 1, "Mean"), (3, 2, DEFAULT_OBJECTIVE), (4, 3, DEFAULT_OBJECTIVE), (5, 4, DEFAULT_OBJECTIVE),
     (16, 4, DEFAULT_OBJECTIVE)],
)
def test_default_k_fits_any_group_size(cpu_training_args, n, k, objective):
    # a plain GRPOConfig -> OrderGradConfig substitution must not fail on TRL's small test groups
    config = OrderGradConfig(**cpu_training_args, num_generations=n, per_device_train_batch_size=n)
    assert trained(config) == (objective, k)
    # explicit values are kept, and checked
    assert OrderGradConfig(**cpu_training_args, num_generations=n, per_device_train_batch_size=n, ordergrad_k=1,
                           ordergrad_objective="Mean").ordergrad_k == 1  # fmt: skip
    with pytest.raises(ValueError, match=rf"ordergrad_k \({n}\) must be smaller than num_generations \({n}\)"):
        OrderGradConfig(**cpu_training_args, num_generations=n, per_device_train_batch_size=n, ordergrad_k=n)


def test_resolved_defaults_do_not_stick_across_replace(cpu_training_args):
    import dataclasses
    import pickle

    small = OrderGradConfig(**cpu_training_args, num_generations=3, per_device_train_batch_size=3)
    assert trained(small) == (DEFAULT_OBJECTIVE, 2) and small.resolved_importance_sampling_level() == "token"
    assert (small.ordergrad_k, small.ordergrad_objective, small.importance_sampling_level) == (None, None, None)
    # generation_batch_size=None: TRL's own resolved batch fields clash in a copy otherwise
    big = dataclasses.replace(small, num_generations=8, per_device_train_batch_size=8, loss_type="luspo",
                              generation_batch_size=None)  # fmt: skip
    assert trained(big) == (DEFAULT_OBJECTIVE, 4) and big.resolved_importance_sampling_level() == "sequence"
    back = dataclasses.replace(big, loss_type="dapo", generation_batch_size=None)
    assert back.resolved_importance_sampling_level() == "token"
    # values the user set stay set
    user = OrderGradConfig(**cpu_training_args, ordergrad_k=3, importance_sampling_level="sequence")
    copy = dataclasses.replace(user, loss_type="dapo", generation_batch_size=None)
    assert trained(copy)[1] == 3 and copy.resolved_importance_sampling_level() == "sequence"
    # a schedule's first stage is what trains first; without the schedule the defaults again
    scheduled = OrderGradConfig(**cpu_training_args, ordergrad_schedule=["0 ReMax@6", "5 Mean@1"])
    assert trained(scheduled) == ("ReMax", 6)
    plain = dataclasses.replace(scheduled, ordergrad_schedule=None, generation_batch_size=None)
    assert trained(plain) == (DEFAULT_OBJECTIVE, 4)
    # a pickled copy keeps its plan; the JSON form holds the fields as set
    restored = pickle.loads(pickle.dumps(big))
    assert trained(restored) == (DEFAULT_OBJECTIVE, 4) and json.loads(big.to_json_string())["ordergrad_k"] is None


def test_yaml_round_trip_rebuilds_the_same_plan(tmp_path, cpu_training_args):
    import yaml
    from trl import TrlParser

    config = OrderGradConfig(**cpu_training_args, num_generations=6, per_device_train_batch_size=6,
                             ordergrad_schedule=["0 ReMax@4", "10 CVaR:0.5@2"],
                             ordergrad_estimator=" PKPO ")  # fmt: skip
    fields = {k: v for k, v in config.to_dict().items() if k.startswith("ordergrad_") or k == "num_generations"}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(fields))
    argv = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--bf16", "false", "--report_to", "none",
            "--per_device_train_batch_size", "6", "--config", str(tmp_path / "run.yaml")]  # fmt: skip
    (loaded,) = TrlParser((OrderGradConfig,)).parse_args_and_config(argv)
    assert loaded.ordergrad_plan == config.ordergrad_plan  # stages, estimator, contexts (weights by value below)
    for a, b in zip(loaded.ordergrad_plan.stages, config.ordergrad_plan.stages):
        assert torch.equal(a.weights, b.weights)
    with pytest.raises(AttributeError):  # immutable: frozen dataclasses, stages in a tuple
        loaded.ordergrad_plan.stages[0].k = 3
    assert isinstance(loaded.ordergrad_plan.stages, tuple)


@pytest.mark.parametrize("found, ok", [("0.33.0", False), ("0.21.1", False), ("0.31.0", True), ("0.24.0+cu129", True)])
def test_unsupported_vllm_fails_at_construction(cpu_training_args, monkeypatch, found, ok):
    from ordergrad_trl.training import trl_private as probes

    monkeypatch.setattr(probes, "installed_vllm_version", lambda: found)
    assert str(probes.trl_vllm_range()) in (">=0.22.0,<=0.31.0", "<=0.31.0,>=0.22.0")  # trl 1.16's extra
    if ok:
        assert OrderGradConfig(**cpu_training_args, use_vllm=True).use_vllm
    else:
        with pytest.raises(ValueError, match=rf"found vllm {found}, but trl .* supports vllm.*0\.22\.0.*0\.31\.0"):
            OrderGradConfig(**cpu_training_args, use_vllm=True)
    OrderGradConfig(**cpu_training_args, use_vllm=False)  # not checked without use_vllm
    monkeypatch.setattr(probes, "installed_vllm_version", lambda: None)
    OrderGradConfig(**cpu_training_args, use_vllm=True)  # not installed: TRL's trainer says how to install it


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(ordergrad_k=8, num_generations=8), r"ordergrad_k \(8\).*num_generations \(8\)"),
        (dict(ordergrad_k=9, num_generations=8), r"ordergrad_k \(9\).*num_generations \(8\)"),
        (dict(ordergrad_k=0), r"ordergrad_k"),
        (dict(ordergrad_objective="TopM:5", ordergrad_k=4), r"ordergrad_objective='TopM:5'.*ordergrad_k=4"),
        (dict(ordergrad_objective="Best", ordergrad_k=4), r"ordergrad_objective='Best'.*ordergrad_k=4"),
        (dict(ordergrad_objective="0.5,0.5", ordergrad_k=4), r"ordergrad_objective='0.5,0.5'.*ordergrad_k=4"),
        (dict(ordergrad_objective=3), r"ordergrad_objective must be a string"),
        (dict(multi_objective_aggregation="normalize_then_sum"), r"multi_objective_aggregation"),
        (dict(scale_rewards="std"), r"scale_rewards"),
        # as a careless user writes them (Python, YAML or the command line)
        (dict(ordergrad_k="4"), r"ordergrad_k must be a positive integer, got '4'"),
        (dict(ordergrad_estimator_kwargs="{beta: 2}"),
         r"ordergrad_estimator_kwargs must be a dict.*got '\{beta: 2\}': not valid JSON"),
        (dict(num_generations=0), r"num_generations must be an integer >= 2.*got 0"),
        (dict(num_generations_eval=0), r"num_generations_eval must be an integer >= 1"),
        (dict(ordergrad_objective="0,0,0,0", ordergrad_k=4), r"ordergrad_objective='0,0,0,0' has all-zero weights"),
        (dict(ordergrad_schedule=["0 ReMax@4", "5 0,0@2"]), r"ordergrad_schedule\[1\].*all-zero weights"),
        (dict(reward_weights=[float("nan")]), r"reward_weights must be finite numbers.*nan"),
        (dict(reward_weights=[0.0, 0]), r"reward_weights are all zero"),
        (dict(reward_weights=1.0), r"reward_weights must be a list of numbers.*got 1.0"),
        # TRL's own fields that TRL would check only at the first step
        (dict(loss_type="drgrpo"), r"loss_type must be one of .*'dr_grpo'.*got 'drgrpo'"),
        (dict(importance_sampling_level="seq"), r"importance_sampling_level must be one of 'token', 'sequence'"),
    ],
)
def test_bad_config_raises_at_construction(cpu_training_args, overrides, match):
    with pytest.raises(ValueError, match=match):
        OrderGradConfig(**cpu_training_args, **overrides)


def test_careless_values_from_the_command_line_and_yaml_name_the_field(tmp_path):
    from trl import TrlParser

    cli = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--bf16", "false", "--report_to", "none"]

    def parse(argv):
        return TrlParser((OrderGradConfig,)).parse_args_and_config(cli + argv)

    with pytest.raises(ValueError, match=r"ordergrad_estimator_kwargs must be a dict.*not valid JSON"):
        parse(["--ordergrad_estimator", "rs_grpo", "--ordergrad_estimator_kwargs", "{beta: 2}"])
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("num_generations: 0\n")
    with pytest.raises(ValueError, match=r"num_generations must be an integer >= 2"):
        parse(["--config", str(yaml_file)])
    yaml_file.write_text("ordergrad_estimator: rs_grpo\nordergrad_estimator_kwargs: {beta: 2}\n")  # a YAML mapping
    (args,) = parse(["--config", str(yaml_file), "--per_device_train_batch_size", "8"])
    assert args.ordergrad_plan.stages[0].options == {"beta": 2}


def test_a_plain_replace_copy_builds_its_own_plan(cpu_training_args):
    """`dataclasses.replace` with only the fields that change: TRL's derived batch fields come along in the copy."""
    import dataclasses

    config = OrderGradConfig(**cpu_training_args)
    assert config.steps_per_generation is not None and config.generation_batch_size is not None  # TRL derived both
    copy = dataclasses.replace(config, num_generations=4)
    assert trained(copy) == (DEFAULT_OBJECTIVE, 3) and copy.generation_batch_size == config.generation_batch_size
    assert trained(dataclasses.replace(config, ordergrad_objective="ReMax", ordergrad_k=5)) == ("ReMax", 5)
    with pytest.raises(ValueError, match=r"generation_batch_size \(16\) and steps_per_generation \(1\) disagree"):
        dataclasses.replace(config, generation_batch_size=16)  # ambiguous: which one did the user mean?
    assert dataclasses.replace(config, generation_batch_size=16, steps_per_generation=None).steps_per_generation == 2


def test_loss_types_are_read_from_trl_and_scale_rewards_takes_the_command_line_bool(cpu_training_args):
    from ordergrad_trl.training.trl_private import trl_loss_types

    # contract: TRL's help still lists its loss types (else the config-time check is silently off)
    assert {"grpo", "dr_grpo", "dapo", "luspo"} <= set(trl_loss_types())
    for loss_type in trl_loss_types():
        OrderGradConfig(**cpu_training_args, loss_type=loss_type)
    assert OrderGradConfig(**cpu_training_args, scale_rewards="False").scale_rewards == "none"
    assert OrderGradConfig(**cpu_training_args, scale_rewards="true").scale_rewards == "group"


def _numeric_fields():
    """(name, kinds) of every int / float field of OrderGradConfig, read from its annotations (as the check does)."""
    import dataclasses
    import typing

    from ordergrad_trl.training.numeric_fields import _kinds

    hints = typing.get_type_hints(OrderGradConfig)
    out = []
    for f in dataclasses.fields(OrderGradConfig):
        kinds, _ = _kinds(hints[f.name])
        if kinds and f.init and not f.name.startswith("ordergrad_"):
            out.append((f.name, kinds))
    return out


@pytest.mark.parametrize("name, kinds", _numeric_fields(), ids=lambda v: v if isinstance(v, str) else None)
def test_every_numeric_field_refuses_what_cannot_train_by_name(cpu_training_args, name, kinds):
    """Per class, not per case: NaN and inf in every float field, 1.5 in every int field, are refused when the config
    is built, naming the field (a field a new TRL adds is covered by its annotation)."""
    bad = [1.5, True] if kinds == {int} else [math.nan, math.inf, -math.inf]
    for value in bad:
        with pytest.raises(ValueError, match=rf"^{name} must be "):
            OrderGradConfig(**{**cpu_training_args, name: value})


@pytest.mark.parametrize("name", sorted(__import__("ordergrad_trl.training.numeric_fields", fromlist=["RANGES"]).RANGES))
def test_each_bounded_field_refuses_the_first_value_outside_its_range(cpu_training_args, name):
    from ordergrad_trl.training.numeric_fields import RANGES

    low, high, low_in, high_in = RANGES[name]
    outside = [v for v in ((low - 1 if low_in else low) if low is not None else None,
                           (high + 1 if high_in else high) if high is not None else None) if v is not None]  # fmt: skip
    for value in outside:
        with pytest.raises(ValueError, match=rf"^{name} must be .* got {value!r}"):
            OrderGradConfig(**{**cpu_training_args, name: value})
    inside = low if low_in and low is not None else (high if high_in and high is not None else None)
    if inside is not None and name not in ("seed", "data_seed", "max_steps") and "batch" not in name:
        OrderGradConfig(**{**cpu_training_args, name: inside})  # the edge itself is accepted (batch sizes: TRL's rules)


def test_a_field_whose_annotation_cannot_be_resolved_does_not_hide_the_others():
    """A config class may annotate a field with a name imported only for type checkers: that field is skipped, and
    the numeric fields beside it are still checked."""
    import dataclasses

    from ordergrad_trl.training.numeric_fields import check_numeric_fields

    @dataclasses.dataclass
    class Config:
        model: "NotImportedHere" = None  # noqa: F821
        learning_rate: float = math.nan

    with pytest.raises(ValueError, match="learning_rate must be a finite number, got nan"):
        check_numeric_fields(Config())
    check_numeric_fields(Config(learning_rate=1e-5))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for machines without a GPU")
def test_a_config_on_a_machine_without_a_gpu_says_use_cpu_and_bf16_in_one_line(tmp_path):
    """Issue 51: TRL defaults bf16 on, which a CPU-only machine refuses; the error is one line naming both fixes (it
    was an AttributeError about `distributed_state`), and following it works."""
    with pytest.raises(ValueError) as info:
        OrderGradConfig(output_dir=str(tmp_path))
    message = str(info.value)
    assert "\n" not in message and "use_cpu=True and bf16=False" in message and "--bf16 false" in message
    assert OrderGradConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False).bf16 is False
