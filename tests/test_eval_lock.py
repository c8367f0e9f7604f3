"""One writer per run directory: `run`, `generate` and `score` hold an OS lock (flock) on the run while they work.

Issue 28: `--overwrite` while another `generate` still wrote moved the run aside under it, and the old process
went on appending into the new run, whose report printed the new settings over samples made with the old ones.
Now a second writer, or an `--overwrite`, is refused by name (one line, exit 2), and a lock left by a killed
process never blocks (the kernel releases a flock with its holder).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.eval_runs import cli_error

from ordergrad_trl.evaluation.cli import command as main
from ordergrad_trl.evaluation.lock import acquire, lock_path, writer_lock

FLAGS = ["--reward_workers", "1", "--bootstrap_samples", "20", "--plot", "false", "--disable_tqdm"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", ORDERGRAD_REWARD_WORKERS="1")

HOLDER = """
import sys, time
from pathlib import Path
from ordergrad_trl.evaluation.lock import acquire, writer_lock
with writer_lock(Path(sys.argv[1]), "generate"):
    acquire(Path(sys.argv[1]))
    print("locked", flush=True)
    time.sleep(600)
"""


def ref_run(out: Path, *extra) -> list[str]:
    return ["run", "--backend", "reference", "--datasets", "arithmetic", "--limit", "2", "--num_samples", "2",
            "--output_dir", str(out), *FLAGS, *extra]


@pytest.fixture
def holder(tmp_path):
    """A finished run in tmp_path/run, and another process holding its writer lock (as a generate in flight
    would)."""
    out = tmp_path / "run"
    main(ref_run(out))
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], env=ENV, stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"locked"
    yield out, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_a_second_writer_and_an_overwrite_are_refused_by_name(holder, capsys):
    out, proc = holder
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    for argv in (ref_run(out), ref_run(out, "--overwrite"),
                 ["generate", "--backend", "reference", "--datasets", "arithmetic", "--output_dir", str(out)],
                 ["score", "--output_dir", str(out), "--reward_workers", "1"]):
        msg = cli_error(capsys, argv)
        assert f"--output_dir {out} is being written by another process (pid {proc.pid}, generate" in msg
    assert not list(out.parent.glob("run.replaced-*"))  # --overwrite moved nothing
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # and nothing was written
    assert main(["report", "--output_dir", str(out), "--plot", "false"])  # a reader is not a writer


def test_a_lock_left_by_a_killed_process_never_blocks(holder):
    out, proc = holder
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert lock_path(out).exists()  # the file stays; its lock went with the process
    rep = main(ref_run(out, "--num_samples", "4"))["report"]
    assert rep["datasets"]["arithmetic"]["num_samples"] == 4
    assert rep["datasets"]["arithmetic"]["metrics"]["pass@1"]["value"] == 1.0


def test_overwrite_of_an_idle_run_moves_it_and_the_lock_stays_beside_it(tmp_path):
    out = tmp_path / "run"
    main(ref_run(out))
    main(ref_run(out, "--temperature", "0.5", "--overwrite"))
    (aside,) = tmp_path.glob("run.replaced-*")
    assert json.loads((aside / "provenance.json").read_text())["sampling"]["temperature"] == 1.0
    assert json.loads((out / "provenance.json").read_text())["sampling"]["temperature"] == 0.5
    with writer_lock(out, "test"):  # free again after both runs; re-entrant within one process
        acquire(out)
        with writer_lock(out, "test"):
            acquire(out)


def test_two_writers_started_together_one_is_refused(tmp_path):
    """Two real `ordergrad-eval run` processes into one fresh --output_dir, started at once: exactly one writes."""
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "ordergrad_trl.evaluation.cli", "run", "--backend", "reference", "--datasets",
            "arithmetic", "--limit", "40", "--num_samples", "16", "--output_dir", str(out), *FLAGS]
    procs = [subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    (refused,) = [err for code, err in results if code == 2]
    assert "Traceback" not in refused and "is being written by another process" in refused
    assert len(refused.strip().splitlines()) == 1
    rows = [json.loads(line) for line in (out / "arithmetic" / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == len({(r["id"], r["sample"]) for r in rows}) == 40 * 16  # one writer's samples, once each


def test_a_killed_writer_releases_the_run(tmp_path):
    """SIGKILL a real `run` while it works: the next one starts at once and finishes the run."""
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "ordergrad_trl.evaluation.cli", *ref_run(out)]
    argv[argv.index("--limit") + 1] = "40"
    argv[argv.index("--num_samples") + 1] = "16"
    proc = subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out / "arithmetic" / "generations.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    rep = main(argv[3:])["report"]["datasets"]["arithmetic"]
    assert rep["num_samples"] == 16 and rep["metrics"]["pass@1"]["value"] == 1.0
