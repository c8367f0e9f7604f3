"""Bounds and environment settings of the math-verify pool (`math_verify_pool`), importable without starting it.

`timeout_s` is the hard wall-clock bound per item, in [MIN_TIMEOUT_S, MAX_TIMEOUT_S] (1 ms to an hour: shorter cannot
be told from a process switch, longer overflows the waits and alarms); `num_workers` the pool's size, in
[1, MAX_WORKERS_PER_CPU x the CPUs] (more only queue on the cores: 10000 never even finish starting). Both default
to $ORDERGRAD_REWARD_TIMEOUT_S and $ORDERGRAD_REWARD_WORKERS, checked against the same bounds.
"""

from __future__ import annotations

import os

__all__ = ["MAX_TIMEOUT_S", "MAX_WORKERS_PER_CPU", "MIN_TIMEOUT_S", "check_timeout", "check_workers", "max_workers",
           "reward_env_settings"]

_DEFAULT_TIMEOUT_S = 10.0
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 1e-3, 3600.0
MAX_WORKERS_PER_CPU = 4


def usable_cpus() -> int:
    """CPUs this process may run on; macOS has no `sched_getaffinity`."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def max_workers() -> int:
    """The most worker processes a pool may have: MAX_WORKERS_PER_CPU x the CPUs this process may use."""
    return MAX_WORKERS_PER_CPU * usable_cpus()


def _local_world_size() -> int:
    text = os.environ.get("LOCAL_WORLD_SIZE", "1")
    if not (text.strip().isascii() and text.strip().isdigit() and int(text) >= 1):
        raise ValueError(f"LOCAL_WORLD_SIZE must be an integer >= 1 (processes on this node), got {text!r}")
    return int(text)


def default_workers() -> int:
    return max(1, min(4, usable_cpus() // _local_world_size()))


def check_timeout(timeout_s, name: str = "timeout_s") -> float:
    """`timeout_s` as a float; ValueError naming `name` outside [MIN_TIMEOUT_S, MAX_TIMEOUT_S] (1 ms to an hour:
    shorter cannot even be measured against a process switch, longer overflows the alarms and waits)."""
    ok = isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool)
    if not (ok and MIN_TIMEOUT_S <= timeout_s <= MAX_TIMEOUT_S):
        raise ValueError(f"{name} must be a number of seconds in [{MIN_TIMEOUT_S:g}, {MAX_TIMEOUT_S:g}], "
                         f"got {timeout_s!r}")
    return float(timeout_s)


def check_workers(num_workers, name: str = "num_workers") -> int:
    """ValueError naming `name` unless an integer in [1, max_workers()]."""
    top = max_workers()
    ok = isinstance(num_workers, int) and not isinstance(num_workers, bool)
    if not (ok and 1 <= num_workers <= top):
        raise ValueError(f"{name} must be an integer in [1, {top}] ({MAX_WORKERS_PER_CPU} x the {usable_cpus()} CPUs), "
                         f"got {num_workers!r}")
    return num_workers


def reward_env_settings() -> tuple[float, int]:
    """`(timeout_s, num_workers)` from $ORDERGRAD_REWARD_TIMEOUT_S (default 10) and $ORDERGRAD_REWARD_WORKERS
    (default min(4, cpus / $LOCAL_WORLD_SIZE)); a malformed or out-of-bounds value (`check_timeout`,
    `check_workers`) raises `ValueError` naming the variable. Checked when this module is imported (so before
    training starts) and again by every call that relies on them."""
    timeout_text = os.environ.get("ORDERGRAD_REWARD_TIMEOUT_S", str(_DEFAULT_TIMEOUT_S))
    try:
        timeout_s = check_timeout(float(timeout_text), "ORDERGRAD_REWARD_TIMEOUT_S")
    except ValueError:  # the message quotes the variable's text as given
        raise ValueError(f"ORDERGRAD_REWARD_TIMEOUT_S must be a number of seconds in [{MIN_TIMEOUT_S:g}, "
                         f"{MAX_TIMEOUT_S:g}] (e.g. 10), got {timeout_text!r}") from None
    workers_text = os.environ.get("ORDERGRAD_REWARD_WORKERS")
    if workers_text is None:
        return timeout_s, default_workers()
    number = workers_text.strip()
    try:
        return timeout_s, check_workers(int(number) if number.isascii() and number.isdigit() else None)
    except ValueError:
        raise ValueError(f"ORDERGRAD_REWARD_WORKERS must be an integer in [1, {max_workers()}] ({MAX_WORKERS_PER_CPU} "
                         f"x the {usable_cpus()} CPUs; e.g. 4), got {workers_text!r}") from None
