"""Issue 52, classes 1 and 2: exact golds through one reader; every eval write inside the locked run.

Each test is a property over every case of its kind, so a case added later is covered by construction. Everything
here is unit-level or the eval's reference backend: no model is trained.
"""

from __future__ import annotations

import errno
import json
import os
from decimal import Decimal
from pathlib import Path

import pytest

from helpers.eval_runs import cli_error

from ordergrad_trl.evaluation import records, safe_io
from ordergrad_trl.evaluation.cli import command as main
from ordergrad_trl.evaluation.errors import UsageError
from ordergrad_trl.evaluation.lock import acquire, lock_path, writer_lock
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
ROW = {"id": "a", "sample": 0}
# every writer of a run file, as (name, call on a path)
WRITERS = {
    "append_jsonl": lambda p: records.append_jsonl(p, [ROW]),
    "write_jsonl_atomic": lambda p: records.write_jsonl_atomic(p, [ROW]),
    "write_json_atomic": lambda p: records.write_json_atomic(p, {"a": 1}),
    "write_bytes_atomic": lambda p: safe_io.write_bytes_atomic(p, b"x\n"),
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


def test_a_lone_surrogate_is_named_by_file_and_line(tmp_path, capsys):
    data = tmp_path / "s.jsonl"
    data.write_text('{"question": "a", "answer": 1}\n{"question": "x \\ud800 y", "answer": 2}\n')
    with pytest.raises(ValueError, match=rf"{data}:2: 'question' holds a lone surrogate \\ud800"):
        load_math_dataset(str(data))
    msg = cli_error(capsys, ["generate", "--backend", "reference", "--datasets", str(data), "--output_dir",
                             str(tmp_path / "run"), "--disable_tqdm"])
    assert f"{data}:2: 'question' holds a lone surrogate" in msg
