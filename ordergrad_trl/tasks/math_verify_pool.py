"""A bounded pool of math-verify worker processes: `score_completions(predictions, golds)` -> scores and statuses.

The correctness reward (`ordergrad_trl.tasks.rewards.math_reward`) and `eval/` score through it; other trainers
(e.g. a verl reward) can call `score_completions(..., return_status=True)` directly. Public API: `score_completions`,
`shutdown`, `reward_env_settings` (the two environment variables, checked) and the bounds `check_timeout`,
`check_workers` (`max_workers`). A worker ends itself within a second of its parent's death (SIGKILL included).

Correctness is scored out of process. math-verify bounds its own work with `signal.alarm`, which raises off the
main thread (TRL may call rewards from any thread), is cancelled by any other alarm, and cannot stop C code that
does not check for signals. So `score_completions` hands items to a small pool of worker processes and enforces
a hard wall-clock bound per item: a worker that has not answered `timeout_s` after starting an item is killed
(SIGKILL) and replaced, the item scores 0.0 and the rest of its chunk goes back to the queue. Training never
hangs, and one hostile completion costs at most `timeout_s` on one worker.

Design: workers are plain `subprocess` children running this file's `_worker_main` (loaded by path: neither the
package nor torch is imported there) over an inherited socket wrapped in a `multiprocessing.connection.Connection`.
Not `multiprocessing.Process`: spawn/forkserver re-import the user's `__main__` (a script without a main guard
re-runs in every worker) and fork is unsafe in a process holding torch threads or CUDA; `ProcessPoolExecutor`
cannot kill one stuck task. The parent only waits on sockets (no signals), so any thread may call; a lock
serialises callers. Each process (each torchrun rank) lazily builds its own pool, a forked child a fresh one;
atexit stops it. Items go out in chunks and come back one by one, each answer restarting that worker's deadline.

Budget. In the worker, math-verify runs on the main thread with whole-second alarms (a float timeout makes
`signal.alarm` fail and every item silently score 0), each set to what is left of the current `timeout_s` window
minus a second, so that math-verify's own time-out is reported before the parent's kill. Parsing a gold gets a
window of its own (the worker tells the parent when it starts and ends one): golds are shared by a GRPO group and
some are slow (`\\binom{170000}{85000}` takes ~2 CPU-seconds), so on a machine whose cores are all busy a gold can
take several wall-clock seconds, and the default `timeout_s` (10 s) leaves it 9. Parsed golds are cached per
worker; a gold that failed or timed out never is: it scores None (unscorable) in this call and is parsed again in
the next. Time-outs and unscorable items are reported per item (the statuses), logged by `math_reward` through TRL's
`log_metric` and by `eval/`, and warned about, never silently scored 0.

Pitfalls handled (each has a test): `verify(gold, pred)` is gold first; bare MATH answers are wrapped in `$..$`
(unwrapped, 51/500 MATH-500 golds parse to nothing); the prediction is what the completion states: the last
`\\boxed{}`, else an anchored "answer is ..." / "Answer: ...", else the text's last number literal, never an
unanchored expression (a restated question scored as its own answer); an integer gold takes a number only; GSM8K golds come
from `ordergrad_trl.tasks.sets.gsm8k_gold`. POSIX only (fd passing, `signal.alarm`); the pool size falls back to
`os.cpu_count()` where
`os.sched_getaffinity` is missing (macOS).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter, OrderedDict, deque
from multiprocessing.connection import Connection, Pipe, wait

if __package__:  # not in a worker, which loads this file by path, outside the package, and needs none of them
    from .reward_settings import (  # noqa: F401 (the pool's bounds and settings, re-exported)
        MAX_TIMEOUT_S,
        MAX_WORKERS_PER_CPU,
        MIN_TIMEOUT_S,
        default_workers,
        usable_cpus,
        check_timeout,
        check_workers,
        max_workers,
        reward_env_settings,
    )

    reward_env_settings()  # a malformed variable fails at import, before any training step

logger = logging.getLogger(__name__)

_STARTUP_TIMEOUT_S = 120.0  # importing sympy on a loaded node can be slow; failing to start at all is an error
_MARGIN_S = 1.0  # math-verify's alarms end this much before the parent's kill, so its time-out is what we see
_GOLD_CACHE = 4096
_KILL_FLOOR_S = 0.25  # below this a time-out marks the item but the worker is left to finish it (no restart)
_BOOT = (
    "import importlib.util as u, sys; s = u.spec_from_file_location('_ordergrad_reward_worker', sys.argv[1]); "
    "m = u.module_from_spec(s); s.loader.exec_module(m); m._die_with_parent(int(sys.argv[3]), sys.argv[4] == '1'); "
    "m._worker_main(int(sys.argv[2]))"
)


def _die_with_parent(parent: int, pdeathsig: bool) -> None:
    """A worker's first act, before the slow imports: end when the parent dies (a SIGKILLed parent runs no atexit),
    by PR_SET_PDEATHSIG where Linux has it and, everywhere, a thread polling the parent's pid."""
    if pdeathsig:
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
        except (OSError, AttributeError):  # not Linux
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _worker_main(fd: int) -> None:
    import importlib.util

    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    # the worker runs outside the package (loaded by path), so its one sibling is loaded by path too
    spec = importlib.util.spec_from_file_location("_ordergrad_numerals", os.path.join(os.path.dirname(__file__),
                                                                                      "numerals.py"))
    numerals = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(numerals)
    positional = numerals.positional  # `1e-07` is read as `e - 7` by math-verify: golds and answers lose the e

    # math-verify reports its own time-outs only as a "Timeout during parsing/comparison" warning (returning []
    # or False): count those, and keep them out of the training logs
    timeouts = [0]

    class CountTimeouts(logging.Handler):
        def emit(self, record):
            timeouts[0] += record.getMessage().startswith("Timeout")

    log = logging.getLogger("math_verify")
    log.setLevel(logging.WARNING)
    log.propagate, log.handlers = False, [CountTimeouts()]
    # Only what a completion states as its answer: \boxed{} (the last wins), "answer is ...", "Answer: ...". Not an
    # unanchored expression it mentions: math-verify's default reads "To find 6 - 3 + 5, we" as 8, and a policy
    # learns to restate the question (issue 48: 97% of a trained unit's credited samples on `chains`).
    pred_config = [LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False),
                   ExprExtractionConfig(try_extract_without_anchor=False)]
    number = re.compile(r"(?:(?<![\w)])-)?\d+(?:,\d{3})*(?:\.\d+)?")  # a literal; "-" only as a sign
    integer = re.compile(r"-?\d+(?:,\d{3})*")  # (a decimal gold such as 0.5 may be answered \frac{1}{2})
    parsed_golds: OrderedDict = OrderedDict()  # gold -> parsed, successes only

    def seconds(window: float, budget: float) -> int:  # whole seconds left in this window, minus the margin
        return max(1, int(budget - _MARGIN_S - (time.monotonic() - window)))

    def parse_gold(gold: str, budget: float) -> tuple[list, str]:
        gold = positional(gold)
        wrapped = gold if re.search(r"(?<!\\)\$|\\boxed|\\\(|\\\[", gold) else f"${gold}$"  # \$ is a dollar sign
        before = timeouts[0]
        try:
            g = parse(wrapped, parsing_timeout=seconds(time.monotonic(), budget))
        except Exception:
            g = []
        return g, "ok" if g else "timeout" if timeouts[0] > before else "unscorable"

    def score(pred: str, g: list, window: float, budget: float) -> tuple[float, str]:
        before = timeouts[0]
        pred = positional(pred)
        try:
            p = parse(pred, extraction_config=pred_config, parsing_timeout=seconds(window, budget))
            literal = number.fullmatch(str(p[-1]).replace("\\$", "").strip(" $.")) if p else None
            if p and integer.fullmatch(str(g[-1]).strip(" $")) and not literal:
                p = []  # an integer gold takes a number, never an expression such as the question restated
            elif not p and (found := number.findall(pred)):  # nothing stated: the text's last number (GSM8K-style)
                p = parse(f"${found[-1].replace(',', '')}$", parsing_timeout=seconds(window, budget))
            ok = bool(p) and verify(g, p, timeout_seconds=seconds(window, budget))  # gold first: verify is asymmetric
        except Exception:
            ok = False
        return (1.0, "ok") if ok else (0.0, "timeout" if timeouts[0] > before else "ok")

    conn = Connection(fd)
    conn.send("ready")
    while True:
        try:
            msg = conn.recv()
        except EOFError:  # the parent is gone
            return
        if msg is None:
            return
        budget, failed = msg[0], {}  # failed golds: remembered for this message only
        for idx, pred, gold in msg[1]:
            if gold not in parsed_golds and gold not in failed:
                conn.send(("gold", idx))  # the parent gives the gold a window of its own
                g, status = parse_gold(gold, budget)
                if g:
                    parsed_golds[gold] = g
                    if len(parsed_golds) > _GOLD_CACHE:
                        parsed_golds.popitem(last=False)
                else:
                    failed[gold] = status
                conn.send(("gold done", idx))
            if gold in failed:
                conn.send((idx, None, failed[gold]))
            else:
                parsed_golds.move_to_end(gold)
                conn.send((idx, *score(pred, parsed_golds[gold], time.monotonic(), budget)))


class _Worker:
    def __init__(self) -> None:
        parent, child = Pipe()
        # PR_SET_PDEATHSIG fires when the *thread* that started the child ends: only safe from the main thread
        main = "1" if threading.current_thread() is threading.main_thread() else "0"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, os.path.abspath(__file__), str(child.fileno()), str(os.getpid()), main],
            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, start_new_session=True,  # no terminal SIGINT
        )
        child.close()
        self.conn, self.ready, self.pending = parent, False, deque()  # pending: item ids sent, not yet answered
        self.parsing_gold = False
        self.overdue = False  # pending[0] was already counted as timed out; its late answer is dropped
        self.deadline = self.kill_at = time.monotonic() + _STARTUP_TIMEOUT_S

    def heard(self, timeout_s: float) -> None:  # any message restarts the clocks
        now = time.monotonic()
        self.deadline, self.kill_at = now + timeout_s, now + max(timeout_s, _KILL_FLOOR_S)

    def stop(self, graceful: bool = False) -> None:
        try:
            if graceful and self.ready and not self.pending:  # idle: let it exit cleanly
                self.conn.send(None)
                self.proc.wait(timeout=1)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.conn.close()


class _Pool:
    def __init__(self, n: int) -> None:
        self.workers = [_Worker() for _ in range(n)]

    def close(self) -> None:
        for w in self.workers:
            w.stop(graceful=True)
        self.workers = []

    def _replace(self, k: int) -> None:  # kill (stuck or dead) and start a fresh one
        self.workers[k].stop()
        self.workers[k] = _Worker()

    def run(self, preds: list[str], golds: list[str], timeout_s: float) -> tuple[list[float | None], list[str]]:
        """Scores and statuses ("ok", "timeout", "unscorable") of every item."""
        n = len(preds)
        out: list[float | None] = [0.0] * n
        status = ["ok"] * n
        todo, left, failed_golds = deque(range(n)), n, set()  # golds whose parse outlived the hard bound
        chunk = max(1, min(32, -(-n // (4 * len(self.workers)))))
        while left or any(w.pending for w in self.workers):  # late answers drained: none leaks into a next call
            for k, w in enumerate(self.workers):  # hand a chunk to every idle worker
                ids = []
                while w.ready and not w.pending and todo and len(ids) < chunk:
                    i = todo.popleft()
                    if golds[i] in failed_golds:  # no second try in this call
                        out[i], status[i], left = None, "timeout", left - 1
                    else:
                        ids.append(i)
                if ids:
                    try:
                        w.conn.send((timeout_s, [(i, preds[i], golds[i]) for i in ids]))
                    except OSError:  # it died while idle: none of these items ran there
                        todo.extendleft(reversed(ids))
                        self._replace(k)
                        continue
                    w.pending.extend(ids)
                    w.heard(timeout_s)
            busy = [w for w in self.workers if w.pending or not w.ready]
            if not busy:
                continue
            wait([w.conn for w in busy], max(0.0, min(w.kill_at if w.overdue else w.deadline for w in busy)
                                             - time.monotonic()))
            for k, w in enumerate(self.workers):
                if w not in busy:
                    continue
                try:
                    while w.conn.poll():
                        msg = w.conn.recv()
                        if msg == "ready":
                            w.ready = True
                        elif msg[0] in ("gold", "gold done"):  # a gold parse starts or ends: a fresh window
                            w.parsing_gold = msg[0] == "gold"
                        elif msg[0] != w.pending.popleft():
                            raise RuntimeError(f"{__name__}: a worker answered out of order")
                        elif w.overdue:  # counted as a time-out already
                            w.overdue = False
                        elif golds[msg[0]] in failed_golds:  # its gold timed out for another item of this call
                            out[msg[0]], status[msg[0]], left = None, "timeout", left - 1
                        else:
                            out[msg[0]], status[msg[0]], left = msg[1], msg[2], left - 1
                        w.heard(timeout_s)
                    dead = False
                except (EOFError, OSError):
                    dead = True  # e.g. the OOM killer took it on a hostile item
                now = time.monotonic()
                if w.ready and w.pending and not w.overdue and (dead or now > w.deadline):
                    i = w.pending[0]  # the item it is on is the culprit
                    if w.parsing_gold:  # its gold: unscorable in this call, for every item that shares it
                        failed_golds.add(golds[i])
                    out[i], status[i], left = (None if w.parsing_gold else 0.0), "timeout", left - 1
                    w.overdue = True
                if dead or now > w.kill_at:
                    if not w.ready:
                        raise RuntimeError(f"{__name__}: a math-verify worker failed to start")
                    if w.pending:  # the culprit is counted; the rest goes back to the queue
                        w.pending.popleft()
                        todo.extendleft(reversed(w.pending))
                        w.pending.clear()
                    self._replace(k)
        return out, status


_LOCK = threading.Lock()
_POOL: _Pool | None = None



def shutdown() -> None:
    """Stop the worker processes (the next call starts new ones). Registered with atexit."""
    global _POOL
    with _LOCK:
        if _POOL is not None:
            _POOL.close()
        _POOL = None


def _forget_pool_in_child() -> None:
    global _POOL, _LOCK
    _POOL, _LOCK = None, threading.Lock()  # the parent's workers are not ours, and its lock may be held


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget_pool_in_child)


def score_completions(
    predictions: list[str],
    golds: list[str],
    *,
    timeout_s: float | None = None,
    num_workers: int | None = None,
    return_status: bool = False,
):
    """Score each prediction against its gold with math-verify: 1.0 equal, 0.0 not (or its parse or comparison
    timed out), None if the gold does not parse (or its parse timed out). Golds are plain answers (`\\frac{1}{2}`,
    `18`) or already `$..$`/`\\boxed{}` wrapped.

    `timeout_s` (default $ORDERGRAD_REWARD_TIMEOUT_S, else 10; in [1 ms, 1 h]) is the hard wall-clock bound per
    item, and again per gold parse; `num_workers` (default $ORDERGRAD_REWARD_WORKERS, else min(4, cpus /
    $LOCAL_WORLD_SIZE); at most 4 x the CPUs) sizes this process's pool. Below 0.25 s an item past its bound is
    counted as timed out but its worker, unless silent for 0.25 s, is not killed: restarting a worker costs
    seconds, so killing one per item would make a tiny bound take longer than a generous one. With
    `return_status`, returns `(scores, statuses)`, each status "ok", "timeout" or "unscorable". Time-outs and
    unscorable items are also logged as a warning.
    """
    global _POOL
    if len(predictions) != len(golds):
        raise ValueError(f"predictions and golds must have the same length, got {len(predictions)} and {len(golds)}")
    for name, seq in (("predictions", predictions), ("golds", golds)):
        bad = [x for x in seq if not isinstance(x, str)][:1]
        if bad:
            raise ValueError(f"{name} must be strings, got {type(bad[0]).__name__}: {bad[0]!r:.80}")
    env_timeout_s, env_workers = reward_env_settings()
    timeout_s = check_timeout(env_timeout_s if timeout_s is None else timeout_s)
    num_workers = check_workers(env_workers if num_workers is None else num_workers)
    if not predictions:
        return ([], []) if return_status else []
    with _LOCK:
        if _POOL is not None and len(_POOL.workers) != num_workers:
            _POOL.close()
            _POOL = None
        _POOL = _POOL or _Pool(num_workers)
        try:
            out, status = _POOL.run(list(predictions), list(golds), float(timeout_s))
        except BaseException:  # e.g. KeyboardInterrupt: answers still in flight would poison the next call
            _POOL.close()
            _POOL = None
            raise
    counts = Counter(status)
    if counts["timeout"] or counts["unscorable"]:
        logger.warning(
            "math-verify: %d of %d items timed out (scored 0.0, or None where the gold's parse did), %d have a "
            "gold that parses to nothing (None); timeout_s=%g ($ORDERGRAD_REWARD_TIMEOUT_S)",
            counts["timeout"], len(out), counts["unscorable"], timeout_s,
        )
    return (out, status) if return_status else out
