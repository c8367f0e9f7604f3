"""Every numeric flag and environment variable of `ordergrad-eval` is bounded when it is parsed (one line, exit 2,
before any work), a tiny time-out finishes and marks time-outs, and a killed scorer leaves no worker behind.

Issue 28: `--reward_timeout_s 1e-9` hung in score, `--reward_workers 10000` hung while spawning and left ~140
orphaned workers when killed, and `--reward_timeout_s 1e308`, `--temperature 1e-320`, `--num_samples 1e9`,
`--bootstrap_samples 1e9`, overflowing reward weights, an `--output_dir` under /proc and a bad `ORDERGRAD_REWARD_*`
value ended in tracebacks, some after all the work was done.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ordergrad_trl.evaluation.args import BOUNDS
from ordergrad_trl.evaluation.cli import command as main
from ordergrad_trl.tasks import math_verify_pool as pool
from helpers import bounded

MAX_WORKERS = pool.max_workers()


def cli_error(capsys, argv) -> str:
    t0 = time.perf_counter()
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert time.perf_counter() - t0 < 30  # refused at parse time, not after the work
    return err.strip()


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps({"problem": f"{i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(3)))
    return path


def run_argv(out: Path, data: Path, *extra, workers: bool = True) -> list[str]:
    return ["run", "--backend", "reference", "--datasets", str(data), "--num_samples", "2", "--output_dir", str(out),
            "--plot", "false", "--disable_tqdm", *(["--reward_workers", "1"] if workers else []), *extra]


BAD_FLAGS = [
    ("--reward_timeout_s", "1e-9"), ("--reward_timeout_s", "1e308"), ("--reward_timeout_s", "0"),
    ("--reward_workers", "10000"), ("--reward_workers", str(MAX_WORKERS + 1)),
    ("--num_samples", "1000000000"), ("--bootstrap_samples", "1000000000"), ("--temperature", "1e-320"),
    ("--temperature", "1e-5"), ("--temperature", "1e308"), ("--max_new_tokens", "100000000000"),
    ("--batch_size", "1000000000"), ("--seed", "99999999999999999999999"), ("--bootstrap_seed", "-1"),
    ("--top_k", "99999999999999"), ("--score_chunk", "1000000000000"), ("--ks", "1000000000"),
    ("--reward_weights", "correct=1e308,format=1e308"), ("--reward_weights", "correct=1e-320"),
    ("--reward_weights", "correct=0,format=0"), ("--limit", "99999999999999"),
    ("--objectives", "TopM:2@1000000000"), ("--cvar_q", "1e-320"), ("--ci_level", "1e-320"),
]


@pytest.mark.parametrize(("flag", "value"), BAD_FLAGS)
def test_a_value_out_of_bounds_is_one_line_exit_2_before_any_work(tmp_path, data, capsys, flag, value):
    out = tmp_path / "run"
    msg = cli_error(capsys, run_argv(out, data, flag, value))  # the flag given last wins in argparse
    assert flag.split("=")[0] in msg
    assert not out.exists()  # nothing was written


def test_bounds_are_stated_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in ("num_samples", "reward_timeout_s", "bootstrap_samples", "temperature"):
        low, high = BOUNDS[name]
        assert f"In [{low:g}, {high:g}]" in text
    assert "at most 4 x the CPUs" in text


def test_the_bounds_hold_for_config_files_and_python_too(tmp_path, data, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("num_samples: 1000000000\n")
    assert "--num_samples" in cli_error(capsys, ["run", "--config", str(config), "--output_dir", str(tmp_path / "x")])
    from ordergrad_trl.evaluation import UsageError, evaluate

    with pytest.raises(UsageError, match="--bootstrap_samples"):
        evaluate(output_dir=tmp_path / "y", backend="reference", datasets=[str(data)], bootstrap_samples=10**9)
    assert not (tmp_path / "y").exists()


@pytest.mark.parametrize("out", ["/proc/ordergrad_eval_run", "/proc/self/ordergrad/run"])
def test_an_output_dir_that_cannot_be_written_is_refused_before_any_work(data, capsys, out):
    msg = cli_error(capsys, run_argv(Path(out), data))
    assert "--output_dir" in msg and "cannot write" in msg


@pytest.mark.parametrize(("var", "value"), [
    ("ORDERGRAD_REWARD_WORKERS", "abc"), ("ORDERGRAD_REWARD_WORKERS", "10000"), ("ORDERGRAD_REWARD_WORKERS", "0"),
    ("ORDERGRAD_REWARD_TIMEOUT_S", "1e-9"), ("ORDERGRAD_REWARD_TIMEOUT_S", "1e308"),
    ("ORDERGRAD_REWARD_TIMEOUT_S", "nan"), ("LOCAL_WORLD_SIZE", "0"),
])
def test_a_bad_reward_variable_is_one_line_exit_2(tmp_path, data, capsys, monkeypatch, var, value):
    if var != "ORDERGRAD_REWARD_WORKERS":
        monkeypatch.delenv("ORDERGRAD_REWARD_WORKERS", raising=False)
    monkeypatch.setenv(var, value)
    assert var in cli_error(capsys, run_argv(tmp_path / "run", data, workers=False))
    assert var in cli_error(capsys, ["score", "--output_dir", str(tmp_path / "run")])


def test_a_bad_reward_variable_in_a_fresh_process_is_one_line_exit_2(tmp_path):
    """The pool module checks the variables when imported: that must not become a traceback either."""
    env = dict(os.environ, OMP_NUM_THREADS="1", ORDERGRAD_REWARD_WORKERS="10000")
    proc = bounded.run([sys.executable, "-m", "ordergrad_trl.evaluation.cli", "score", "--output_dir",
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "ORDERGRAD_REWARD_WORKERS" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_the_flag_and_the_pool_share_the_time_out_bounds():
    assert BOUNDS["reward_timeout_s"] == (pool.MIN_TIMEOUT_S, pool.MAX_TIMEOUT_S)


def test_a_tiny_time_out_on_the_command_line_finishes_and_counts_time_outs(tmp_path, data):
    out = tmp_path / "run"
    main(["generate", "--backend", "reference", "--datasets", str(data), "--num_samples", "4", "--output_dir",
          str(out), "--disable_tqdm"])
    t0 = time.perf_counter()
    main(["score", "--output_dir", str(out), "--reward_timeout_s", "0.001", "--reward_workers", "2", "--disable_tqdm"])
    assert time.perf_counter() - t0 < 60
    rows = [json.loads(line) for line in (out / "set" / "scores.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and {r["status"] for r in rows} <= {"ok", "timeout"}
    rep = main(["report", "--output_dir", str(out), "--plot", "false", "--bootstrap_samples", "20"])
    assert rep["datasets"]["set"]["samples_timed_out"] == sum(r["status"] == "timeout" for r in rows)


def test_the_pool_api_is_bounded_too():
    for kwargs, name in [({"timeout_s": 1e308}, "timeout_s"), ({"timeout_s": 1e-9}, "timeout_s"),
                         ({"num_workers": MAX_WORKERS + 1}, "num_workers"), ({"timeout_s": float("nan")}, "timeout_s")]:
        with pytest.raises(ValueError, match=name):
            pool.score_completions(["1"], ["1"], **kwargs)


def test_a_tiny_time_out_finishes_and_marks_time_outs():
    """1 ms per item: every slower item is a time-out, and no worker is restarted per item (that took minutes)."""
    preds = [rf"The answer is \boxed{{{i}}}" for i in range(64)]
    golds = [str(i) for i in range(64)]
    t0 = time.perf_counter()
    out, status = pool.score_completions(preds, golds, timeout_s=pool.MIN_TIMEOUT_S, num_workers=2,
                                         return_status=True)
    elapsed = time.perf_counter() - t0
    assert set(status) <= {"ok", "timeout"} and "timeout" in status
    assert all((o == 1.0) if s == "ok" else o in (0.0, None) for o, s in zip(out, status))
    assert elapsed < 30
    # no late answer leaks into the next call
    assert pool.score_completions([r"\boxed{7}", r"\boxed{8}"], ["7", "9"], num_workers=2) == [1.0, 0.0]


PARENT = """
import sys
from ordergrad_trl.tasks.math_verify_pool import score_completions
print("start", flush=True)
score_completions([r"\\boxed{1}"] * 2000, ["1"] * 2000, num_workers=int(sys.argv[1]))
"""


def _tagged(tag: str) -> list[int]:
    """Live processes whose environment holds `tag`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if tag.encode() in (entry / "environ").read_bytes():
                status = (entry / "status").read_text()
                if "\nState:\tZ" not in status:
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="counts processes through /proc")
def test_a_killed_parent_leaves_no_worker_alive():
    """SIGKILL the parent while a pool of the largest allowed size starts: a few seconds later no worker lives."""
    tag = f"ORDERGRAD_TEST_TAG={uuid.uuid4().hex}"
    key, value = tag.split("=")
    env = dict(os.environ, OMP_NUM_THREADS="1", **{key: value})
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(MAX_WORKERS)], env=env, stdout=subprocess.PIPE)
    try:
        assert parent.stdout.readline().strip() == b"start"
        deadline = time.monotonic() + 60
        while len(_tagged(tag)) < 2 and time.monotonic() < deadline:  # the parent and a worker at least
            time.sleep(0.05)
        time.sleep(0.3)
        assert len(_tagged(tag)) >= 2
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 5
    while _tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _tagged(tag)
    for pid in left:  # do not leave them to the rest of the suite
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{len(left)} workers outlived their parent by 5 s"
