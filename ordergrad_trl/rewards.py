"""Reward functions for math RL with TRL: correctness (math-verify), format, and length penalty.

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
In the worker, math-verify runs on the main thread with whole-second timeouts (a float timeout makes
`signal.alarm` fail and every item silently score 0); parsed golds are cached, as a GRPO group shares its gold.

Pitfalls handled (each has a test): `verify(gold, pred)` is gold first; bare MATH answers are wrapped in `$..$`
(unwrapped, 51/500 MATH-500 golds parse to nothing); predictions prefer the last `\\boxed{}`; GSM8K golds come
from `gsm8k_gold`. Linux only (`os.sched_getaffinity`, fd passing).
"""

from __future__ import annotations

import atexit
import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from multiprocessing.connection import Connection, Pipe, wait

_STARTUP_TIMEOUT_S = 120.0  # importing sympy on a loaded node can be slow; failing to start at all is an error
_BOOT = (
    "import importlib.util as u, sys; s = u.spec_from_file_location('_ordergrad_reward_worker', sys.argv[1]); "
    "m = u.module_from_spec(s); s.loader.exec_module(m); m._worker_main(int(sys.argv[2]))"
)


def _worker_main(fd: int) -> None:
    import functools
    import logging

    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # timeouts are expected; keep training logs clean
    pred_config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]  # last \boxed{} wins

    @functools.lru_cache(maxsize=4096)
    def parse_gold(gold: str, t: int):
        wrapped = gold if re.search(r"(?<!\\)\$|\\boxed|\\\(|\\\[", gold) else f"${gold}$"  # \$ is a dollar sign
        return parse(wrapped, parsing_timeout=t)

    def score(pred: str, gold: str, t: int) -> float | None:
        try:
            g = parse_gold(gold, t)
            if not g:
                return None
            p = parse(pred, extraction_config=pred_config, parsing_timeout=t)
            return 1.0 if p and verify(g, p, timeout_seconds=t) else 0.0  # gold first: verify is asymmetric
        except Exception:
            return 0.0

    conn = Connection(fd)
    conn.send("ready")
    while True:
        try:
            msg = conn.recv()
        except EOFError:  # the parent is gone
            return
        if msg is None:
            return
        for idx, pred, gold in msg[1]:
            conn.send((idx, score(pred, gold, msg[0])))


class _Worker:
    def __init__(self) -> None:
        parent, child = Pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, os.path.abspath(__file__), str(child.fileno())],
            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, start_new_session=True,  # no terminal SIGINT
        )
        child.close()
        self.conn, self.ready, self.pending = parent, False, deque()  # pending: item ids sent, not yet answered
        self.deadline = time.monotonic() + _STARTUP_TIMEOUT_S

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

    def run(self, preds: list[str], golds: list[str], timeout_s: float) -> list[float | None]:
        n, t = len(preds), max(1, int(timeout_s) // 3)  # math-verify's own bound, whole seconds
        out: list[float | None] = [0.0] * n
        todo, left = deque(range(n)), n
        chunk = max(1, min(32, -(-n // (4 * len(self.workers)))))
        while left:
            for k, w in enumerate(self.workers):  # hand a chunk to every idle worker
                if w.ready and not w.pending and todo:
                    ids = [todo.popleft() for _ in range(min(chunk, len(todo)))]
                    try:
                        w.conn.send((t, [(i, preds[i], golds[i]) for i in ids]))
                    except OSError:  # it died while idle: none of these items ran there
                        todo.extendleft(reversed(ids))
                        self._replace(k)
                        continue
                    w.pending.extend(ids)
                    w.deadline = time.monotonic() + timeout_s
            busy = [w for w in self.workers if w.pending or not w.ready]
            wait([w.conn for w in busy], max(0.0, min(w.deadline for w in busy) - time.monotonic()))
            for k, w in enumerate(self.workers):
                if w not in busy:
                    continue
                try:
                    while w.conn.poll():
                        msg = w.conn.recv()
                        if msg == "ready":
                            w.ready = True
                            continue
                        if msg[0] != w.pending.popleft():
                            raise RuntimeError("ordergrad_trl.rewards: a worker answered out of order")
                        out[msg[0]], left = msg[1], left - 1
                        w.deadline = time.monotonic() + timeout_s
                    dead = False
                except (EOFError, OSError):
                    dead = True  # e.g. the OOM killer took it on a hostile item
                if dead or time.monotonic() > w.deadline:
                    if not w.ready:
                        raise RuntimeError("ordergrad_trl.rewards: a math-verify worker failed to start")
                    if w.pending:  # the item it was on is the culprit: 0.0; the rest goes back to the queue
                        out[w.pending.popleft()], left = 0.0, left - 1
                        todo.extendleft(reversed(w.pending))
                        w.pending.clear()
                    self._replace(k)
        return out


_LOCK = threading.Lock()
_POOL: _Pool | None = None


def _default_workers() -> int:
    if "ORDERGRAD_REWARD_WORKERS" in os.environ:
        return int(os.environ["ORDERGRAD_REWARD_WORKERS"])
    per_rank = len(os.sched_getaffinity(0)) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, min(4, per_rank))


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
    predictions: list[str], golds: list[str], *, timeout_s: float | None = None, num_workers: int | None = None
) -> list[float | None]:
    """Score each prediction against its gold with math-verify: 1.0 equal, 0.0 not (or over `timeout_s`), None if
    the gold does not parse. Golds are plain answers (`\\frac{1}{2}`, `18`) or already `$..$`/`\\boxed{}` wrapped.

    `timeout_s` (default $ORDERGRAD_REWARD_TIMEOUT_S, else 5) is the hard wall-clock bound per item; `num_workers`
    (default $ORDERGRAD_REWARD_WORKERS, else min(4, cpus / $LOCAL_WORLD_SIZE)) sizes this process's pool.
    """
    global _POOL
    if len(predictions) != len(golds):
        raise ValueError(f"predictions and golds must have the same length, got {len(predictions)} and {len(golds)}")
    for name, seq in (("predictions", predictions), ("golds", golds)):
        bad = [x for x in seq if not isinstance(x, str)][:1]
        if bad:
            raise ValueError(f"{name} must be strings, got {type(bad[0]).__name__}: {bad[0]!r:.80}")
    if timeout_s is None:
        timeout_s = float(os.environ.get("ORDERGRAD_REWARD_TIMEOUT_S", "5"))
    if not timeout_s > 0:
        raise ValueError(f"timeout_s (or $ORDERGRAD_REWARD_TIMEOUT_S) must be > 0 seconds, got {timeout_s}")
    num_workers = _default_workers() if num_workers is None else num_workers
    if not (isinstance(num_workers, int) and num_workers >= 1):
        raise ValueError(f"num_workers (or $ORDERGRAD_REWARD_WORKERS) must be an integer >= 1, got {num_workers!r}")
    if not predictions:
        return []
    with _LOCK:
        if _POOL is not None and len(_POOL.workers) != num_workers:
            _POOL.close()
            _POOL = None
        _POOL = _POOL or _Pool(num_workers)
        try:
            return _POOL.run(list(predictions), list(golds), float(timeout_s))
        except BaseException:  # e.g. KeyboardInterrupt: answers still in flight would poison the next call
            _POOL.close()
            _POOL = None
            raise


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion
    msgs = [m for m in completion if m.get("role") == "assistant"] or list(completion)  # conversational
    content = msgs[-1]["content"] if msgs else ""
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def gsm8k_gold(answer_text: str) -> str:
    """GSM8K gold: the text after the last `####`, thousands separators removed ("#### 1,450,000" -> "1450000")."""
    if "####" not in answer_text:
        raise ValueError(f"gsm8k answer_text has no '####' final-answer marker: {answer_text!r:.80}")
    return answer_text.rsplit("####", 1)[1].strip().replace(",", "")


def math_reward(completions, answer, **kwargs) -> list[float | None]:
    """TRL reward: 1.0 if the completion's final answer (last `\\boxed{}`, else last expression) equals the
    `answer` column per math-verify, 0.0 if not or unscorable in time, None (TRL: NaN) if the gold does not parse."""
    golds = ["" if a is None else str(a) for a in answer]  # int/float columns (AIME, AMC) are fine; None: no gold
    return score_completions([_text(c) for c in completions], golds)


_BOXED = re.compile(r"\\boxed\s*\{")


def _one_closed_box(text: str) -> bool:
    starts = [m.end() for m in _BOXED.finditer(text)]
    if len(starts) != 1:
        return False
    depth = 1
    for ch in text[starts[0]:]:  # LaTeX's \{ \} come in pairs, so counting every brace is fine
        depth += (ch == "{") - (ch == "}")
        if depth == 0:
            return True
    return False


def format_reward(completions, **kwargs) -> list[float]:
    """TRL reward: 1.0 if the completion has exactly one `\\boxed{` and that box's braces close, else 0.0."""
    return [1.0 if _one_closed_box(_text(c)) else 0.0 for c in completions]


def length_penalty(completion_ids, max_len: int | None = None, **kwargs) -> list[float]:
    """TRL reward: -(completion tokens / max_len), in [-1, 0]; weight it against correctness with GRPOConfig's
    `reward_weights`. TRL passes `completion_ids` (one token list per completion) but not the length budget, so
    bind it: `functools.partial(length_penalty, max_len=args.max_completion_length)` (TRL names a partial after
    its function, so it logs as "length_penalty")."""
    if not (isinstance(max_len, int) and max_len >= 1):
        raise ValueError(
            f"length_penalty needs max_len (an int >= 1, got {max_len!r}); pass "
            "functools.partial(length_penalty, max_len=<GRPOConfig.max_completion_length>) as the reward function"
        )
    return [-min(len(ids), max_len) / max_len for ids in completion_ids]
