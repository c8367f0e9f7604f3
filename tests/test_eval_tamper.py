"""Issue 40, by class: no check of a run can be switched off, and no write lands outside the named run.

Each test is a property over everything of its kind, so a field, key or file added later is covered by
construction: every field of every row kind, every key of provenance.json, every folder `dataset_dirs` lists,
every file a stage appends to or replaces. The runs use the reference backend (each sample is its problem's
solution, so the right pass@1 is 100%).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.eval_runs import cli_error
from test_eval_integrity import stage
from test_eval_lock import ENV, HOLDER

from ordergrad_trl.evaluation import layout, records, verify
from ordergrad_trl.evaluation.cli import command as main
from ordergrad_trl.evaluation.errors import UsageError
from ordergrad_trl.evaluation.lock import acquire, lock_path, writer_lock
from ordergrad_trl.evaluation.provenance import read_provenance, write_provenance
from helpers import bounded

FLAGS = ["--reward_workers", "1", "--bootstrap_samples", "20", "--plot", "false", "--disable_tqdm"]
ROW_FILES = ("problems.jsonl", "generations.jsonl", "scores.jsonl")


def ref_run(out: Path, *extra) -> list[str]:
    return ["run", "--backend", "reference", "--datasets", "arithmetic", "--limit", "3", "--num_samples", "2",
            "--output_dir", str(out), *FLAGS, *extra]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tamper") / "run"
    main(ref_run(out, "--plot", "true"))
    return out


@pytest.fixture
def run(finished, tmp_path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out


def pass_at_1(out: Path) -> float:
    rep = main(["report", "--output_dir", str(out), "--bootstrap_samples", "20", "--plot", "false", "--disable_tqdm"])
    return rep["datasets"]["arithmetic"]["metrics"]["pass@1"]["value"]


def changed(value):
    """Another value of the same kind (a hand edit that keeps the row's shape)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return (value + 1) % (1 << 32)
    if isinstance(value, float):
        return 1.0 - value
    if isinstance(value, str):
        return value + " "
    if value is None:
        return "edited"
    return json.loads(json.dumps(value)) + ["edited"] if isinstance(value, list) else {**value, "edited": 1}


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def put_rows(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def leaves(obj, at=()):
    """Paths to every leaf of a JSON value (an empty dict or list is a leaf)."""
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            yield from leaves(v, (*at, k))
    elif isinstance(obj, list) and obj:
        for i, v in enumerate(obj):
            yield from leaves(v, (*at, i))
    else:
        yield at


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


# ------------------------------------------------------------------- 1. every row carries a check over all fields
def test_every_field_of_every_row_is_checked(run, capsys):
    """Any one field edited (the check left as it was), or the check deleted, in any row file: every stage that
    reads the file stops at that file:line, and no number moves."""
    cases = 0
    for name in ROW_FILES:
        path = run / "arithmetic" / name
        original = path.read_bytes()
        rows = rows_of(path)
        assert all("check" in r for r in rows), name  # the writers stamp every row
        fields = sorted({k for r in rows for k in r})
        assert {"id", "check"} <= set(fields)
        for field in fields:
            edited = [dict(r) for r in rows]
            if field == "check":
                del edited[1]["check"]
            else:
                edited[1][field] = changed(edited[1].get(field))
            put_rows(path, edited)
            for which in ("score", "report"):
                msg = cli_error(capsys, stage(which, run))
                assert f"{path}:2:" in msg, (name, field, msg)
                cases += 1
            path.write_bytes(original)
    assert cases >= 2 * (4 + 7 + 8)
    assert pass_at_1(run) == 1.0


@pytest.mark.parametrize("name", ROW_FILES)
def test_an_unchecked_row_put_first_does_not_win(run, capsys, name):
    """First-of-a-key-wins is no back door: a row without its check placed before the real one is refused."""
    path = run / "arithmetic" / name
    rows = rows_of(path)
    forged = {k: v for k, v in rows[0].items() if k != "check"}
    if "correct" in forged:
        forged["correct"] = 0.0
    put_rows(path, [forged, *rows])
    assert f"{path}:1:" in cli_error(capsys, stage("report", run))


def test_a_metadata_or_token_edit_cannot_move_a_breakdown(run, capsys):
    """Problem metadata (level, subject) and generation num_tokens / finish_reason feed the breakdown, token and
    truncation figures: a new key added to a row is an edit too."""
    for name, field, value in (("problems.jsonl", "level", "Level 5"), ("problems.jsonl", "subject", "Algebra"),
                               ("generations.jsonl", "num_tokens", 4096),
                               ("generations.jsonl", "finish_reason", "length")):
        path = run / "arithmetic" / name
        original = path.read_bytes()
        rows = rows_of(path)
        rows[0][field] = value
        put_rows(path, rows)
        assert f"{path}:1:" in cli_error(capsys, stage("report", run))
        path.write_bytes(original)


def test_a_surrogate_in_a_completion_is_checked_not_a_crash(tmp_path):
    """JSON can spell a lone surrogate (\\ud800); the checksums encode it rather than raise UnicodeEncodeError."""
    path = tmp_path / "generations.jsonl"
    records.append_jsonl(path, [{"id": "a", "sample": 0, "completion": "x\ud800", "num_tokens": None,
                                 "finish_reason": None, "tag": 1}])
    (row,) = records.read_jsonl(path)
    assert row["completion"] == "x\ud800" and records.completion_crc(row["completion"]) >= 0


# ------------------------------------------------------------- 2. provenance checks itself; nothing in it disables
def test_every_provenance_key_is_checked(run, capsys):
    """Any leaf of provenance.json edited, a key added (`"tagged": false` once turned the tag check off) or the
    check deleted: read_provenance refuses it, so every stage does."""
    path = run / "provenance.json"
    original = path.read_bytes()
    prov = json.loads(original)
    paths = list(leaves(prov))
    assert len(paths) > 20 and ("check",) in paths
    for at in [*paths, ("tagged",), ("datasets", "arithmetic", "tagged")]:
        edited = json.loads(original)
        node = edited
        for k in at[:-1]:
            node = node[k]
        if at == ("check",):
            del node["check"]
        else:
            node[at[-1]] = False if at[-1] == "tagged" else changed(
                node[at[-1]] if isinstance(node, list) else node.get(at[-1]))
        path.write_text(json.dumps(edited))
        with pytest.raises(UsageError, match="provenance.json"):
            read_provenance(run)
    for which in ("score", "report"):
        assert "edited by hand" in cli_error(capsys, stage(which, run))
    path.write_bytes(original)
    assert pass_at_1(run) == 1.0


def test_no_provenance_key_switches_the_tag_check_off(run, capsys):
    """Even with a valid provenance check (a determined editor), `tagged: false` does not excuse untagged rows."""
    prov = json.loads((run / "provenance.json").read_text())
    prov["datasets"]["arithmetic"]["tagged"] = False
    write_provenance(run, prov)
    gens = run / "arithmetic" / "generations.jsonl"
    rows = rows_of(gens)
    rows = [{k: v for k, v in r.items() if k != "tag"} for r in rows]
    put_rows(gens, [{**r, "check": records.row_check(r)} for r in rows])
    msg = cli_error(capsys, stage("report", run))
    assert f"{gens}:1:" in msg and "'tag'" in msg


# --------------------------------------------------------------- 3. every folder a report lists is the one verified
@pytest.mark.parametrize("name", [".old", "backup", ".arithmetic.bak"])
def test_every_listed_folder_is_verified(run, capsys, name):
    """A backup copy inside the run, hidden or not, is listed and checked by one function (`dataset_dirs`): as a
    folder without a provenance entry it is refused by name, never reported unchecked."""
    shutil.copytree(run / "arithmetic", run / name)
    assert run / name in layout.dataset_dirs(run)
    for which in ("score", "report"):
        assert f"{run / name}: a dataset folder without an entry" in cli_error(capsys, stage(which, run))


def test_the_verifier_and_the_readers_share_one_list(run, monkeypatch):
    seen = []
    real = verify._check_problems
    monkeypatch.setattr(verify, "_check_problems", lambda path, *a, **k: seen.append(path.parent) or real(path, *a,
                                                                                                          **k))
    rep = main(stage("report", run))
    assert seen == layout.dataset_dirs(run) and sorted(rep["datasets"]) == [d.name for d in seen]


# --------------------------------------------------------------------------- 4. writes stay inside the named run
def test_a_hard_linked_copy_never_writes_into_the_original(finished, tmp_path, caplog):
    """`cp -al` (and rsync --link-dest) share every file's data: more samples, scores and a report in the copy
    leave the original byte for byte as it was, and each file broken away from it is said in one line."""
    original = tmp_path / "original"
    shutil.copytree(finished, original)
    copy = tmp_path / "copy"
    shutil.copytree(original, copy, copy_function=os.link)
    assert os.stat(copy / "arithmetic" / "generations.jsonl").st_nlink == 2
    before = snapshot(original)
    with caplog.at_level(logging.WARNING, logger="ordergrad_trl.evaluation.records"):
        rep = main(ref_run(copy, "--num_samples", "4", "--plot", "true"))["report"]
    assert rep["datasets"]["arithmetic"]["num_samples"] == 4
    assert snapshot(original) == before
    assert any("hard link" in r.getMessage() and "generations.jsonl" in r.getMessage() for r in caplog.records)
    assert len(records.read_jsonl(original / "arithmetic" / "generations.jsonl")) == 6


@pytest.mark.parametrize("what", ["folder", "generations.jsonl", "scores.jsonl"])
def test_a_symlink_in_a_run_is_refused_before_any_write(finished, tmp_path, capsys, what):
    """A dataset folder or row file linked to another run's: every writer refuses it by name, and the other run
    is untouched."""
    other = tmp_path / "other"
    shutil.copytree(finished, other)
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    link = run / "arithmetic" if what == "folder" else run / "arithmetic" / what
    shutil.rmtree(link) if what == "folder" else link.unlink()
    link.symlink_to(other / "arithmetic" if what == "folder" else other / "arithmetic" / what)
    before = snapshot(other)
    for argv in (ref_run(run, "--num_samples", "4"), stage("score", run), stage("report", run)):
        msg = cli_error(capsys, argv)
        assert f"{link}: a symbolic link" in msg, msg
    assert snapshot(other) == before


def test_the_writers_refuse_links_themselves(tmp_path):
    """The last line of defence, below every stage: append, repair and replace never follow a link."""
    target = tmp_path / "target.jsonl"
    target.write_bytes(b"")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    row = {"id": "a", "sample": 0, "completion": "x", "num_tokens": None, "finish_reason": None, "tag": 1}
    for write in (lambda: records.append_jsonl(link, [row]), lambda: records.write_jsonl_atomic(link, [row]),
                  lambda: records.repair_tail(link)):
        with pytest.raises(UsageError, match="symbolic link"):
            write()
    assert target.read_bytes() == b""
    folder = tmp_path / "linked"
    folder.symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / "real").mkdir()
    with pytest.raises(UsageError, match="symbolic link"):
        records.write_json_atomic(folder / "report.json", {})
    assert not list((tmp_path / "real").iterdir())


# ------------------------------------------------------------------------- 5. the lock cannot be removed from under
TRY_DIR_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print("held")
else:
    print("free")
"""


def test_deleting_the_lock_file_lets_no_second_writer_in(run, capsys):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], env=ENV, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"locked"
        lock_path(run).unlink()
        before = snapshot(run)
        for argv in (stage("score", run), ref_run(run, "--num_samples", "4"), ref_run(run, "--overwrite")):
            msg = cli_error(capsys, argv)
            assert f"--output_dir {run} is being written by another process" in msg and "directory is locked" in msg
        assert snapshot(run) == before and not list(run.parent.glob("run.replaced-*"))
    finally:
        proc.kill()
        proc.wait()


def test_overwrite_locks_the_new_run_directory_before_writing_it(run, monkeypatch):
    """--overwrite moves the locked directory aside; the new one at the same path is locked before its first
    file is written (checked from another process at that moment)."""
    from ordergrad_trl.evaluation import plan

    states = []
    real = plan.write_provenance

    def spy(out, provenance):
        states.append(bounded.run([sys.executable, "-c", TRY_DIR_LOCK, str(out)], capture_output=True,
                                  text=True, check=True, timeout=120).stdout.strip())
        real(out, provenance)

    monkeypatch.setattr(plan, "write_provenance", spy)
    main(ref_run(run, "--temperature", "0.5", "--overwrite"))
    assert states == ["held"] and len(list(run.parent.glob("run.replaced-*"))) == 1
    with writer_lock(run, "test"):  # released at the end
        acquire(run)
