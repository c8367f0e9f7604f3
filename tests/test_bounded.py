"""`helpers.bounded.run`: subprocess.run's results, and a bound that ends the child's whole process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import bounded

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")

# a launcher that starts a worker and waits on it, as torch.distributed.run does; the worker writes its pid first
LAUNCHER = """
import subprocess, sys
worker = subprocess.Popen([sys.executable, "-c", "import os, sys, time; print(os.getpid(), flush=True); time.sleep(600)"],
                          stdout=open(sys.argv[1], "w"))
print("launched", flush=True)
{tail}
"""


def _alive(pid: int) -> bool:
    """Running or sleeping: not gone and not a zombie (a container's init may never reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _worker_pid(path: Path) -> int:
    deadline = time.monotonic() + 60
    while not path.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    return int(path.read_text())


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 10  # SIGKILL is delivered asynchronously
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def test_same_results_as_subprocess_run():
    argv = [sys.executable, "-c", "import sys; s = sys.stdin.read(); print(s.upper()); print('e', file=sys.stderr); "
            "sys.exit(3)"]  # fmt: skip
    ours = bounded.run(argv, input="abc", capture_output=True, text=True, timeout=60)
    theirs = subprocess.run(argv, input="abc", capture_output=True, text=True, timeout=60)
    assert (ours.args, ours.returncode, ours.stdout, ours.stderr) == \
        (theirs.args, theirs.returncode, theirs.stdout, theirs.stderr) == (argv, 3, "ABC\n", "e\n")
    with pytest.raises(subprocess.CalledProcessError) as err:
        bounded.run(argv, input="x", capture_output=True, text=True, check=True, timeout=60)
    assert err.value.returncode == 3 and err.value.stdout == "X\n"
    assert bounded.run([sys.executable, "-c", "pass"], check=True, timeout=60).returncode == 0


def test_a_timeout_ends_the_launchers_worker_too(tmp_path):
    pid_file = tmp_path / "pid"
    pid_file.touch()
    argv = [sys.executable, "-c", LAUNCHER.format(tail="worker.wait()"), str(pid_file)]
    with pytest.raises(subprocess.TimeoutExpired) as err:
        bounded.run(argv, capture_output=True, text=True, timeout=5)
    assert "launched" in err.value.stdout  # what it printed before the bound comes back, as with subprocess.run
    pid = _worker_pid(pid_file)
    assert _gone(pid), f"worker {pid} outlived the timeout"


def test_plain_subprocess_run_would_leave_the_worker(tmp_path):
    """The defect this helper mends, shown on the same launcher (so the test above can fail)."""
    pid_file = tmp_path / "pid"
    pid_file.touch()
    argv = [sys.executable, "-c", LAUNCHER.format(tail="worker.wait()"), str(pid_file)]
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run(argv, stdout=subprocess.DEVNULL, timeout=5)
    pid = _worker_pid(pid_file)
    try:
        assert _alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)


def test_strays_of_a_finished_launcher_end_with_the_call(tmp_path):
    pid_file = tmp_path / "pid"
    pid_file.touch()
    argv = [sys.executable, "-c", LAUNCHER.format(tail="import time; time.sleep(1)"), str(pid_file)]
    assert bounded.run(argv, stdout=subprocess.DEVNULL, timeout=60).returncode == 0
    pid = _worker_pid(pid_file)
    assert _gone(pid), f"worker {pid} outlived its launcher's call"


def test_the_timeout_is_required():
    with pytest.raises(TypeError, match="timeout"):
        bounded.run([sys.executable, "-c", "pass"])
