"""Issue 52, by class: exact golds, writes that resolve inside the run, numbers that cannot train, a checkpoint
that knows its run, and one line (exit 2) for every failure left.

Each test is a property over every case of its kind (every size and spelling of a number, every reader, every
file a run writes, every field of the resolved config), so a case added later is covered by construction.
Everything here is unit-level or the eval's reference backend: no model is trained.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from eval_runs import cli_error

from ordergrad_trl.evaluation.cli import command as main
from ordergrad_trl.tasks.data import load_math_dataset
from ordergrad_trl.tasks.json_rows import scalar_text
from ordergrad_trl.tasks.spec import integer_answer

FLAGS = ["--reward_workers", "1", "--bootstrap_samples", "20", "--plot", "false", "--disable_tqdm"]

# ------------------------------------------------------------------------------ 1. golds keep their exact text
# JSON number literals a gold may be written as, and the text it must keep (any size; never through float64)
BIG = {
    "9007199254740993": "9007199254740993",  # 2**53 + 1
    "100000000000000000001": "100000000000000000001",  # 10**20 + 1, beyond int64
    "-9223372036854775809": "-9223372036854775809",  # below int64
    "18446744073709551617": "18446744073709551617",  # 2**64 + 1
    "9007199254740993.0": "9007199254740993",  # integral, written as a float
    "1e21": "1000000000000000000000",
    "123456789012345678901.5": "123456789012345678901.5",  # more digits than float64 holds
    "0.1": "0.1",
    "27.0": "27",
    "5": "5",
}
# what shares the column with the gold: nothing, a small float, a string, a small int (each changes Arrow's typing)
NEIGHBOURS = {"alone": None, "float": "2.5", "string": '"x"', "int": "7"}


def _file(tmp_path: Path, literal: str, neighbour: str | None, suffix: str) -> Path:
    rows = [f'{{"question": "What is the number {i}?", "answer": {lit}}}'
            for i, lit in enumerate([literal] + ([neighbour] if neighbour else []))]
    path = tmp_path / f"golds{suffix}"
    path.write_text("[" + ",\n".join(rows) + "]" if suffix == ".json" else "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_every_number_keeps_its_exact_text_in_the_training_loader(tmp_path, suffix):
    """Every literal of BIG, alone or beside every kind of neighbour, in both file kinds: the loaded gold is its
    exact text (the datasets json builder gave 9007199254740992 next to a float, and failed on 10**20+1)."""
    for literal, text in BIG.items():
        for kind, neighbour in NEIGHBOURS.items():
            golds = load_math_dataset(str(_file(tmp_path, literal, neighbour, suffix)))["answer"][:]
            assert golds[0] == text, (literal, kind, golds)
            if neighbour is not None:
                assert golds[1] == scalar_text(json.loads(neighbour, parse_float=Decimal)), (literal, kind, golds)


def test_integer_golds_of_any_size_stay_exact():
    """The integer canonicalizer (AIME's "025" -> "25") never rounds: every integer text keeps its digits."""
    for n in (0, 25, 2**53 + 1, 10**20 + 1, -(2**63) - 1, 10**40 + 7):
        assert integer_answer(str(n)) == str(n)
        assert integer_answer(n) == str(n)
        assert integer_answer(f"0{n}" if n >= 0 else str(n)) == str(n)
    assert integer_answer("25.0") == "25"
    assert integer_answer("inf") == "inf"  # not an integer: kept as text, no OverflowError


def test_the_eval_keeps_and_scores_big_golds(tmp_path):
    """A data file of big golds through `ordergrad-eval run` (reference backend: each sample is the gold in
    \\boxed{}): problems.jsonl holds every gold's exact text and every true answer scores 1."""
    rows = [f'{{"question": "Number {i}?", "answer": {lit}}}' for i, lit in enumerate(BIG)]
    rows.append('{"question": "s", "answer": "x"}')
    data = tmp_path / "big.jsonl"
    data.write_text("\n".join(rows) + "\n")
    out = tmp_path / "run"
    main(["run", "--backend", "reference", "--datasets", str(data), "--num_samples", "1", "--output_dir", str(out),
          *FLAGS])
    rep = main(["report", "--output_dir", str(out), "--bootstrap_samples", "20", "--plot", "false", "--disable_tqdm"])
    golds = [json.loads(line)["answer"] for line in (out / "big" / "problems.jsonl").read_text().splitlines()]
    assert golds == [*BIG.values(), "x"]
    assert rep["datasets"]["big"]["metrics"]["pass@1"]["value"] == 1.0


def test_a_bad_line_is_named_by_both_readers(tmp_path, capsys):
    """One reader: a line that is not JSON is named file:line by the eval (one line, exit 2) and by the loader."""
    data = tmp_path / "bad.jsonl"
    data.write_text('{"question": "a", "answer": 1}\n{"question": "b", "answer": 9007199254740993,}\n')
    with pytest.raises(ValueError, match=rf"{data}:2: not valid JSON"):
        load_math_dataset(str(data))
    msg = cli_error(capsys, ["generate", "--backend", "reference", "--datasets", str(data), "--output_dir",
                             str(tmp_path / "run"), "--disable_tqdm"])
    assert f"{data}:2: not valid JSON" in msg


# --------------------------------------------------------------------- 2. every write resolves inside the run
from ordergrad_trl.evaluation import records  # noqa: E402
from ordergrad_trl.evaluation.errors import UsageError  # noqa: E402
from ordergrad_trl.evaluation.lock import acquire, lock_path, writer_lock  # noqa: E402

ROW = {"id": "a", "sample": 0}
# every writer of a run file, as (name, call on a path)
WRITERS = {
    "append_jsonl": lambda p: records.append_jsonl(p, [ROW]),
    "write_jsonl_atomic": lambda p: records.write_jsonl_atomic(p, [ROW]),
    "write_json_atomic": lambda p: records.write_json_atomic(p, {"a": 1}),
    "write_bytes_atomic": lambda p: records.write_bytes_atomic(p, b"x\n"),
    "repair_tail": lambda p: records.repair_tail(p),
}


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _other_run(tmp_path: Path) -> Path:
    other = tmp_path / "other"
    (other / "ds").mkdir(parents=True)
    (other / "ds" / "rows.jsonl").write_bytes(b'{"id": "keep"}\n{"partial')  # repair_tail would cut it
    return other


@pytest.mark.parametrize("swap", ["run_dir_to_link", "run_dir_moved", "dataset_dir_to_link"])
def test_no_writer_follows_a_swap_out_of_the_locked_run(tmp_path, swap):
    """Every writer, after the run directory (or a dataset folder inside it) is swapped for a link to another
    run while the stage holds its lock: the write stops with a UsageError and the other run is untouched."""
    other = _other_run(tmp_path)
    before = _tree(other)
    out = tmp_path / "run"
    (out / "ds").mkdir(parents=True)
    (out / "ds" / "rows.jsonl").write_bytes(b'{"partial')
    with writer_lock(out, "generate"):
        acquire(out)
        if swap == "run_dir_to_link":
            out.rename(tmp_path / "aside")
            out.symlink_to(other)
        elif swap == "run_dir_moved":
            out.rename(tmp_path / "aside")
            out.mkdir()
            (out / "ds").symlink_to(other / "ds")
        else:
            (out / "ds").rename(out / "ds_aside")
            (out / "ds").symlink_to(other / "ds")
        for name, write in WRITERS.items():
            with pytest.raises(UsageError) as err:
                write(out / "ds" / "rows.jsonl")
            assert str(out) in str(err.value), (name, err.value)
            assert _tree(other) == before, name


def test_writes_inside_a_locked_run_land_there(tmp_path):
    """The descriptor-relative writers still write what they wrote before (the run's own files)."""
    out = tmp_path / "run"
    (out / "ds").mkdir(parents=True)
    with writer_lock(out, "generate"):
        acquire(out)
        for name, write in WRITERS.items():
            path = out / "ds" / f"{name}.jsonl"
            path.write_bytes(b'{"id": 1}\n{"cut')
            write(path)
            assert path.read_bytes().endswith(b"\n"), name
            assert not path.is_symlink() and oct(path.stat().st_mode & 0o777) == "0o644", name
    assert not [p for p in (out / "ds").iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("kind", ["symlink", "dangling_symlink", "hardlink", "fifo"])
def test_the_lock_file_is_never_written_through(tmp_path, capsys, kind):
    """A lock file beside the run that is a link (to a file, or to nowhere), a hard link or a FIFO: `run` stops
    with one line naming it; the victim keeps its bytes and nothing is created elsewhere."""
    import os

    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    out = tmp_path / "run"
    lock = lock_path(out)
    if kind == "symlink":
        lock.symlink_to(victim)
    elif kind == "dangling_symlink":
        lock.symlink_to(tmp_path / "elsewhere" / "made.txt")
        (tmp_path / "elsewhere").mkdir()
    elif kind == "hardlink":
        os.link(victim, lock)
    else:
        os.mkfifo(lock)
    msg = cli_error(capsys, ["run", "--backend", "reference", "--datasets", "arithmetic", "--limit", "2",
                             "--num_samples", "1", "--output_dir", str(out), *FLAGS])
    assert str(lock) in msg, msg
    assert victim.read_bytes() == b"precious\n"
    assert not (tmp_path / "elsewhere" / "made.txt").exists()


# ------------------------------------------------------------------ 3. numbers that cannot train, a stale launch
from ordergrad_trl.training.launch_env import LAUNCHER_MARKS, check_launch_environment  # noqa: E402
from ordergrad_trl.training.numeric_fields import MIN_TEMPERATURE, check_numeric_fields  # noqa: E402


def _config(**kw):
    from tiny_model import CPU_TRAINING_ARGS

    from ordergrad_trl import OrderGradConfig

    return OrderGradConfig(**{**CPU_TRAINING_ARGS, "output_dir": "/tmp/unused-ordergrad-52", **kw})


@pytest.mark.parametrize("settings, named", [
    ({"learning_rate": 1e-3, "weight_decay": 1e6}, "learning_rate * weight_decay"),
    ({"learning_rate": 0.5, "weight_decay": 2.0}, "learning_rate * weight_decay"),  # exactly 1: weights zeroed
    ({"temperature": 1e-300}, "temperature"),
    ({"temperature": MIN_TEMPERATURE / 2}, "temperature"),
    ({"steps_per_generation": 0}, "steps_per_generation"),
    ({"steps_per_generation": -3}, "steps_per_generation"),
])
def test_numbers_that_cannot_train_are_refused_when_the_config_is_built(settings, named):
    with pytest.raises(ValueError, match=named.replace("*", r"\*")):
        _config(**settings)


def test_numbers_at_the_documented_bounds_still_train():
    """Just inside each bound is accepted (the bounds refuse only what cannot train)."""
    config = _config(learning_rate=1e-3, weight_decay=999.0, temperature=MIN_TEMPERATURE)
    assert config.temperature == MIN_TEMPERATURE


def test_numpy_numbers_are_the_numbers_they_hold():
    """Every numpy integer / float type is accepted where an int / float belongs, and stored as a plain one."""
    import dataclasses

    import numpy as np

    @dataclasses.dataclass
    class Args:
        max_steps: int = 1
        learning_rate: float = 1e-6

    for kind in (np.int8, np.int16, np.int32, np.int64, np.uint32):
        args = Args(max_steps=kind(8))
        check_numeric_fields(args)
        assert type(args.max_steps) is int and args.max_steps == 8
    for kind in (np.float16, np.float32, np.float64):
        args = Args(learning_rate=kind(0.5))
        check_numeric_fields(args)
        assert type(args.learning_rate) is float
    with pytest.raises(ValueError, match="max_steps"):
        check_numeric_fields(Args(max_steps=np.float64(1.5)))


@pytest.mark.parametrize("stale", [
    {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"},
    {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"},
    {"WORLD_SIZE": "8"},
])
def test_a_stale_distributed_environment_is_refused_naming_its_variables(stale):
    with pytest.raises(ValueError) as err:
        check_launch_environment(env=stale)
    for name, value in stale.items():
        assert f"{name}={value}" in str(err.value)
    for mark in LAUNCHER_MARKS:  # a launcher's own mark: trusted
        check_launch_environment(env={**stale, mark: "x"})
    check_launch_environment(env={**stale, "ORDERGRAD_TRUST_DIST_ENV": "1"})
    check_launch_environment(env={"WORLD_SIZE": "1", "RANK": "0"})


def test_a_stale_environment_stops_the_config_in_seconds(monkeypatch):
    """Through OrderGradConfig (which would otherwise block in torch.distributed's start-up)."""
    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}.items():
        monkeypatch.setenv(name, value)
    for mark in LAUNCHER_MARKS:
        monkeypatch.delenv(mark, raising=False)
    import signal

    def hung(*_):
        raise TimeoutError("the config waited for ranks that never come")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)  # without the check the start-up blocks for torch.distributed's whole timeout
    try:
        with pytest.raises(ValueError, match="WORLD_SIZE=2"):
            _config()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_fsdp_unlaunched_and_deepspeed_missing_are_named(monkeypatch):
    import importlib.util
    from types import SimpleNamespace

    with pytest.raises(ValueError, match="fsdp='full_shard'.*no launcher"):
        check_launch_environment(SimpleNamespace(fsdp="full_shard", deepspeed=None), env={})
    check_launch_environment(SimpleNamespace(fsdp="full_shard", deepspeed=None),
                             env={"WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x"})
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a))
    with pytest.raises(ValueError, match="deepspeed package is not installed"):
        check_launch_environment(SimpleNamespace(fsdp="", deepspeed="zero2.json"), env={})
    with pytest.raises(ValueError, match="ACCELERATE_USE_DEEPSPEED='true'.*not installed"):
        check_launch_environment(SimpleNamespace(fsdp="", deepspeed=None), env={"ACCELERATE_USE_DEEPSPEED": "true"})


# ------------------------------------------------------------------------------ 4. a checkpoint knows its run
from ordergrad_trl.training import run_identity  # noqa: E402
from ordergrad_trl.training.resolved_config import RESOLVED_CONFIG, resolved_config  # noqa: E402

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "math_cvar.py"


@pytest.fixture(scope="module")
def recipe():
    import importlib.util

    spec = importlib.util.spec_from_file_location("math_cvar_hostile52", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def record(recipe):
    """A real resolved config: every field of the recipe's three groups and the plan, as the recipe saves it."""
    from trl import ModelConfig

    groups = {"script": recipe.MathScriptArguments(dataset_name="arithmetic"), "training": _config(),
              "model": ModelConfig(model_name_or_path="some/model")}
    return json.loads(json.dumps(resolved_config(groups, groups["training"].ordergrad_plan), default=str))


def _other(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if value is None:
        return "set"
    return [value, "x"] if isinstance(value, list) else {**value, "x": 1}


def test_every_field_is_compared_unless_a_resume_may_change_it(record):
    """Each field of every group (and the plan), changed alone: named by `differences` exactly when it is not in
    RESUMABLE; every ordergrad_* field but the logging one is compared, so a field added later is covered."""
    cases = 0
    for group, fields in record.items():
        for name, value in fields.items():
            new = json.loads(json.dumps(record))
            new[group][name] = _other(value)
            diff = run_identity.differences(record, new)
            if run_identity.resumable(name):
                assert diff == [], (group, name, diff)
            else:
                assert len(diff) == 1 and diff[0].startswith(f"{group}.{name}: "), (group, name, diff)
            cases += 1
    assert cases > 200
    ordergrad = [n for n in record["training"] if n.startswith("ordergrad_")]
    assert ordergrad and all(not run_identity.resumable(n) for n in ordergrad if n != "ordergrad_log_ks")
    for named in ("num_generations", "learning_rate", "seed", "ordergrad_objective", "ordergrad_k"):
        assert not run_identity.resumable(named)
    for may in ("max_steps", "logging_steps", "save_steps", "eval_steps", "output_dir", "report_to"):
        assert run_identity.resumable(may)


def test_a_field_the_checkpoint_lacks_counts_unless_it_is_the_default(record):
    old = json.loads(json.dumps(record))
    del old["training"]["ordergrad_k"]
    defaults = {"ordergrad_k": record["training"]["ordergrad_k"]}
    assert run_identity.differences(old, record, defaults) == []
    new = json.loads(json.dumps(record))
    new["training"]["ordergrad_k"] = 7
    assert run_identity.differences(old, new, defaults)[0].startswith("training.ordergrad_k: (not in")


def _checkpoint(root: Path, step: int, record: dict, state: str | None = None) -> Path:
    ckpt = root / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / RESOLVED_CONFIG).write_text(json.dumps(record))
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}) if state is None else state)
    return ckpt


def test_a_resume_with_other_settings_is_refused_naming_each(tmp_path, record):
    out = tmp_path / "out"
    _checkpoint(out, 9, record)
    newest = _checkpoint(out, 10, record)
    for value in ("true", "TRUE", " last ", True):
        assert run_identity.check_run(record, out, value, overwrite=False) == str(newest)
    longer = json.loads(json.dumps(record))
    longer["training"]["max_steps"] = 1000
    assert run_identity.check_run(longer, out, str(newest), overwrite=False) == str(newest)
    other = json.loads(json.dumps(record))
    other["training"]["ordergrad_objective"] = "Mean"
    other["training"]["num_generations"] = 16
    other["model"]["model_name_or_path"] = "other/model"
    with pytest.raises(run_identity.RunIdentityError) as err:
        run_identity.check_run(other, out, "true", overwrite=False)
    for key in ("training.ordergrad_objective", "training.num_generations", "model.model_name_or_path"):
        assert key in str(err.value)


@pytest.mark.parametrize("value, state, named", [
    ("true", None, "holds no checkpoint"),
    ("nowhere/checkpoint-3", None, "no such checkpoint folder"),
    ("{ckpt}", "{not json", "trainer_state.json cannot be read"),
    ("{ckpt}", "[1, 2]", "not a JSON object"),
    ("{ckpt}", '{"global_step": "x"}', "no valid global_step"),
])
def test_a_bad_checkpoint_is_named(tmp_path, record, value, state, named):
    out = tmp_path / "out"
    out.mkdir()
    ckpt = _checkpoint(tmp_path / "elsewhere", 3, record, state) if state else None
    with pytest.raises(run_identity.RunIdentityError, match=named):
        run_identity.check_run(record, out, value.format(ckpt=ckpt), overwrite=False)
    for value in (None, False, "", "false", "None"):
        assert run_identity.resolve_checkpoint(value, out) is None


def test_a_new_run_onto_another_run_is_refused_or_moves_it_aside(tmp_path, record):
    out = tmp_path / "out"
    out.mkdir()
    (out / RESOLVED_CONFIG).write_text(json.dumps(record))
    (out / "model.safetensors").write_bytes(b"old")
    assert run_identity.check_new_run(out, record, overwrite=False) is None  # the same run again
    other = json.loads(json.dumps(record))
    other["training"]["ordergrad_objective"] = "Mean"
    with pytest.raises(run_identity.RunIdentityError, match="training.ordergrad_objective"):
        run_identity.check_new_run(out, other, overwrite=False)
    _checkpoint(out, 2, record)
    with pytest.raises(run_identity.RunIdentityError, match="checkpoint-2"):
        run_identity.check_new_run(out, record, overwrite=False)
    aside = run_identity.check_new_run(out, other, overwrite=True)
    assert not out.exists() and (aside / "model.safetensors").read_bytes() == b"old"
    assert aside.name.startswith("out.replaced-")


def test_the_recipe_refuses_before_the_model_loads(tmp_path, recipe, record, monkeypatch):
    """Through the recipe's main: a resume of another run is one InputError (one line, exit 2 in the CLI)."""
    import datasets
    from trl import ModelConfig

    out = tmp_path / "out"
    other = json.loads(json.dumps(record))
    other["training"]["ordergrad_objective"] = "Mean"
    _checkpoint(out, 1, other)
    script = recipe.MathScriptArguments(dataset_name="arithmetic", max_eval_samples=0)
    training = _config(output_dir=str(out), resume_from_checkpoint="true")
    model = ModelConfig(model_name_or_path=str(tmp_path / "no-such-model"))  # never loaded: refused before
    data = (datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": "1+1?"}], "answer": "2"}]), None)
    with pytest.raises(recipe.InputError, match="ordergrad_objective"):
        recipe.main(script, training, model, data=data)


# ------------------------------------------------------------ 5. one line, exit 2, for every failure left
import errno  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402

REPORT = ["--bootstrap_samples", "20", "--plot", "false", "--disable_tqdm"]


def _ref(out: Path, *extra) -> list[str]:
    return ["run", "--backend", "reference", "--datasets", "arithmetic", "--limit", "3", "--num_samples", "2",
            "--output_dir", str(out), *FLAGS, *extra]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hostile52") / "run"
    main(_ref(out))
    return out


@pytest.fixture
def run(finished, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out


def _pass1(out: Path) -> float:
    return main(["report", "--output_dir", str(out), *REPORT])["datasets"]["arithmetic"]["metrics"]["pass@1"]["value"]


def test_only_the_runs_own_generation_files_are_read(run):
    """Every stray name the old glob matched (a backup beside the real file): never read, never checked."""
    from ordergrad_trl.evaluation.records import generation_files, kind_of

    gen = run / "arithmetic" / "generations.jsonl"
    stray = ["generations.bak.jsonl", "generations.old.jsonl", "generations.rank1.bak.jsonl", "generations-2.jsonl",
             "generationsX.jsonl", "generations.rank.jsonl"]
    for name in stray:
        (run / "arithmetic" / name).write_text("not even JSON\n")
        assert kind_of(run / "arithmetic" / name) is None
    assert generation_files(run / "arithmetic") == [gen]
    assert _pass1(run) == 1.0
    assert kind_of(run / "arithmetic" / "generations.rank12.jsonl") == "generations"


@pytest.mark.parametrize("flag, value", [("--num_samples", "1"), ("--limit", "2")])
def test_a_rerun_asking_for_less_than_the_run_holds_is_refused(run, capsys, flag, value):
    argv = _ref(run)
    argv[argv.index(flag) + 1] = value
    assert cli_error(capsys, argv).startswith(f"ordergrad-eval run: error: {flag} {value}: ")
    main(_ref(run))  # the same flags again: fine
    more = _ref(run)
    more[more.index("--num_samples") + 1] = "3"
    main(more)  # more samples: added


def test_a_breakdown_field_no_problem_has_is_named(run, capsys):
    msg = cli_error(capsys, ["report", "--output_dir", str(run), *REPORT, "--breakdown", "op", "nosuchfield"])
    assert "--breakdown nosuchfield" in msg and "op" in msg
    main(["report", "--output_dir", str(run), *REPORT, "--breakdown", "op"])


@pytest.mark.parametrize("name", ["problems.jsonl", "generations.jsonl", "scores.jsonl"])
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_row_file_that_is_not_a_file_is_named(run, capsys, name, kind):
    path = run / "arithmetic" / name
    path.unlink()
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    for stage in (["score", "--output_dir", str(run), "--reward_workers", "1", "--disable_tqdm"],
                  ["report", "--output_dir", str(run), *REPORT]):
        msg = cli_error(capsys, stage)
        assert str(path) in msg and ("FIFO" in msg or "directory" in msg), msg


def test_a_cut_problems_file_is_healed_by_the_hint(run, capsys):
    """F43: the refusal's hint (rerun generate with the same flags) works, and every stage passes after it."""
    path = run / "arithmetic" / "problems.jsonl"
    path.write_bytes(path.read_bytes()[:-40])
    msg = cli_error(capsys, ["report", "--output_dir", str(run), *REPORT])
    assert "rerun generate with the same flags" in msg
    argv = _ref(run)
    argv[0] = "generate"
    main([a for a in argv if a not in ("--reward_workers", "1", "--bootstrap_samples", "20", "--plot", "false")])
    assert _pass1(run) == 1.0


def test_a_full_disk_names_the_file_and_keeps_what_was_written(tmp_path, monkeypatch):
    path = tmp_path / "rows.jsonl"
    records.append_jsonl(path, [ROW])
    before = path.read_bytes()
    real = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(UsageError, match=f"{path}: No space left on device"):
        records.append_jsonl(path, [ROW])
    monkeypatch.setattr(os, "write", real)
    assert path.read_bytes() == before
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left")))
    with pytest.raises(UsageError, match=f"{path}: No space left"):
        records.write_json_atomic(path, {"a": 1})
    monkeypatch.undo()
    assert path.read_bytes().startswith(before) and not list(tmp_path.glob(".*.tmp"))


def test_numpy_numbers_reach_evaluate_as_numbers(tmp_path):
    import numpy as np

    from ordergrad_trl.evaluation.run import evaluate

    rep = evaluate(output_dir=tmp_path / "run", backend="reference", datasets=["arithmetic"], limit=np.int64(2),
                   num_samples=np.int32(2), bootstrap_samples=np.int32(20), reward_workers=np.int8(1),
                   ci_level=np.float32(0.9), plot=np.bool_(False), disable_tqdm=True)
    assert rep["datasets"]["arithmetic"]["metrics"]["pass@1"]["value"] == 1.0


@pytest.mark.parametrize("text, named", [
    ("on: 1\n", "'on' is read as the bool True"),
    ("learning_rate: 1.0e-5\nyes: 2\n", ":2: the key 'yes'"),
    ("1: x\n", "the int 1"),
])
def test_a_yaml_key_that_is_no_flag_name_is_named(tmp_path, text, named):
    from ordergrad_trl.yaml_config import load_yaml_config

    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=named):
        load_yaml_config(path)


def test_yaml_merge_keys_work_and_a_key_twice_is_still_refused(tmp_path):
    from ordergrad_trl.yaml_config import load_yaml_config

    path = tmp_path / "c.yaml"
    path.write_text("<<: &base {learning_rate: 2.0e-5, max_steps: 3}\nmax_steps: 4\n")
    assert load_yaml_config(path) == {"learning_rate": 2.0e-5, "max_steps": 4}
    path.write_text("max_steps: 3\nmax_steps: 4\n")
    with pytest.raises(ValueError, match="given twice"):
        load_yaml_config(path)


@pytest.mark.parametrize("damage", ["no_weights", "truncated", "bad_header", "header_cut"])
def test_a_model_folder_that_cannot_load_is_named(tiny_model_dir, tmp_path, capsys, damage):
    from ordergrad_trl.evaluation.modeling import weights_problem

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    if damage == "no_weights":
        weights.unlink()
    elif damage == "truncated":
        weights.write_bytes(data[: len(data) - 100])
    elif damage == "bad_header":
        weights.write_bytes(data[:8] + b"{" * 20 + data[28:])
    else:
        weights.write_bytes(data[:20])
    assert weights_problem(model)
    msg = cli_error(capsys, ["generate", "--model", str(model), "--datasets", "arithmetic", "--limit", "1",
                             "--output_dir", str(tmp_path / "run"), "--disable_tqdm"])
    assert f"--model {model}: " in msg
    assert weights_problem(tiny_model_dir) is None


def test_a_lone_surrogate_is_named_by_file_and_line(tmp_path, capsys):
    data = tmp_path / "s.jsonl"
    data.write_text('{"question": "a", "answer": 1}\n{"question": "x \\ud800 y", "answer": 2}\n')
    with pytest.raises(ValueError, match=rf"{data}:2: 'question' holds a lone surrogate \\ud800"):
        load_math_dataset(str(data))
    msg = cli_error(capsys, ["generate", "--backend", "reference", "--datasets", str(data), "--output_dir",
                             str(tmp_path / "run"), "--disable_tqdm"])
    assert f"{data}:2: 'question' holds a lone surrogate" in msg


def test_a_reward_that_returns_a_generator_or_lacks_its_column_is_named():
    from ordergrad_trl.tasks.rewards import math_reward
    from ordergrad_trl.training.reward_checks import check_reward_values

    for once in ((x for x in [1.0, 0.0]), iter([1.0, 0.0]), map(float, [1, 0])):
        with pytest.raises(TypeError, match="reward function 'mine' returned a .*read only once"):
            check_reward_values("mine", once, 2)
    check_reward_values("mine", [1.0, None], 2)
    with pytest.raises(ValueError, match="math_reward: the dataset has no 'answer' column .*solution"):
        math_reward(["\\boxed{1}"], prompts=["p"], solution=["1"])


def test_the_recipe_names_a_model_without_a_chat_template(tiny_model_dir, tmp_path, recipe):
    """The recipe's prompts are chat messages: a tokenizer without a template is one InputError, before training."""
    import datasets
    from trl import ModelConfig

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    (model / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    script = recipe.MathScriptArguments(dataset_name="arithmetic", max_eval_samples=0)
    training = _config(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4,
                       num_generations=4, max_completion_length=4)
    data = (datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": "1+1?"}], "answer": "2"}] * 4), None)
    with pytest.raises(recipe.InputError, match="has no chat template"):
        recipe.main(script, training, ModelConfig(model_name_or_path=str(model)), data=data)
