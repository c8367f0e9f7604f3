"""`subprocess.run` for tests, with a bound that ends the child's whole process tree.

Why not `subprocess.run(..., timeout=...)`: on timeout it kills only the process it started. A test that launches
`torch.distributed.run`, `accelerate launch` or a vLLM engine leaves that process's workers running (one
`dynamic_sampling_worker.py` was found alive two hours after its test timed out), and they steal the cores of every
later test. Here the child starts its own session (a process group of its own, which its descendants inherit), and
the group is killed when the call ends in any way: timeout, an interrupted test (Ctrl-C, pytest-timeout), or a
normal exit that left strays behind. Children that start sessions of their own (math-verify's pool) end by
themselves when their parent dies.

Every call must name a `timeout`: nothing a test starts may hang the suite. tests/test_layout.py keeps tests on this
function.
"""

from __future__ import annotations

import os
import signal
import subprocess

__all__ = ["run"]


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # the group is gone (PermissionError: macOS, a reaped leader)
        pass


def run(args, *, timeout: float, input=None, capture_output: bool = False, check: bool = False,
        **kwargs) -> subprocess.CompletedProcess:
    """As `subprocess.run(args, timeout=timeout, ...)`, but the child and all it started end with the call."""
    if input is not None:
        if "stdin" in kwargs:
            raise ValueError("stdin and input arguments may not both be used.")
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        if "stdout" in kwargs or "stderr" in kwargs:
            raise ValueError("stdout and stderr arguments may not be used with capture_output.")
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with subprocess.Popen(args, start_new_session=True, **kwargs) as proc:
        try:
            stdout, stderr = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc.pid)
            exc.stdout, exc.stderr = proc.communicate()  # what it printed before the bound, as subprocess.run gives
            raise
        finally:  # an interrupted test too, and strays left by a child that exited (a launcher's hung worker)
            _kill_group(proc.pid)
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, args, stdout, stderr)
    return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)
