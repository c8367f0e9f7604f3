"""Tests for `ordergrad_trl.tasks.rewards` and its `math_verify_pool`: math-verify pitfalls, the hard per-item bound,
and the public MATH-500 / GSM8K reference solutions (skipped when /work/shared/data is absent). The TRL reward
functions' calling convention is in test_reward_functions.py."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from math_verify import parse, verify

from ordergrad_trl.tasks import math_verify_pool as pool
from ordergrad_trl.tasks.rewards import math_reward, score_completions
from ordergrad_trl.tasks.sets import gsm8k_gold
from helpers import bounded

DATA = Path(os.environ.get("ORDERGRAD_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
WORKERS = 2  # every test uses the same pool size so the pool is built once


def score(preds, golds, **kw):
    return score_completions(preds, golds, num_workers=WORKERS, **kw)


def timed(fn, *args, **kw):
    start = time.monotonic()
    out = fn(*args, **kw)
    return out, time.monotonic() - start


def load(name):
    path = DATA / name
    if not path.exists():
        pytest.skip(f"{path} absent: public test sets are not shipped with the repo (set ORDERGRAD_SHARED_DATA)")
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------------------------------- math-verify pitfalls
def test_gold_goes_first():
    # An asymmetric pair: math-verify accepts an interval answer for a relation gold, not the reverse.
    rel, interval = parse(r"$x \le 2$"), parse(r"$(-\infty,2]$")
    assert verify(rel, interval) and not verify(interval, rel)  # so a swapped call would flip both results below
    assert score([r"\boxed{(-\infty,2]}", r"\boxed{x \le 2}"], [r"x \le 2", r"(-\infty,2]"]) == [1.0, 0.0]


def test_bare_gold_is_wrapped():
    assert parse(r"\sqrt{51}") == []  # a bare MATH answer parses to nothing ...
    golds = [r"\sqrt{51}", r"\frac{\pi}{6}", r"$\frac{1}{2}$", r"\boxed{\frac{1}{2}}"]  # ... ours wraps it
    preds = [r"so \boxed{\sqrt{51}}.", r"\boxed{\pi/6}", r"\boxed{0.5}", r"\boxed{\frac12}"]
    assert score(preds, golds) == [1.0] * 4


def test_last_boxed_answer_wins():
    preds = [r"\boxed{5}. Final answer is 3", r"Maybe \boxed{3}? No: the answer is \boxed{5}."]
    assert score(preds, ["5", "5"]) == [1.0, 1.0]
    assert score(preds, ["3", "3"]) == [0.0, 0.0]


def test_gsm8k_gold():
    assert gsm8k_gold("He pays 3*6=<<3*6=18>>18.\n#### 18") == "18"
    assert gsm8k_gold("a #### b\n#### 1,450,000 ") == "1450000"  # last marker, separators removed
    with pytest.raises(ValueError, match="####"):
        gsm8k_gold("The answer is 18")
    assert score([r"\boxed{1,450,000}", r"\boxed{1450000}"], [gsm8k_gold("#### 1,450,000")] * 2) == [1.0, 1.0]


def test_unparseable_gold_is_none():
    assert score([r"\boxed{1}", r"\boxed{1}", r"\boxed{1}"], ["", "$$", "1"]) == [None, None, 1.0]


def test_math_verify_needs_the_main_thread_but_we_do_not():
    errors, results = [], []

    def work():
        try:
            parse(r"$\frac{1}{2}$")  # the pitfall: signal.alarm off the main thread
        except ValueError as e:
            errors.append(e)
        results.append(score([r"\boxed{\frac{1}{2}}", "no"], ["0.5", "0.5"]))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=60)
    assert errors and results == [[1.0, 0.0]]


# --------------------------------------------------------------------------------------- edge cases, hard bound
BOUND_S = 2.0
EDGE = {
    "empty": ("", "1", 0.0),
    "no box, no answer": ("I cannot solve this.", "1", 0.0),
    "no box, plain number": ("The answer is 42", "42", 1.0),
    "malformed latex": (r"\boxed{\frac{1}{", r"\frac{1}{2}", 0.0),
    "empty box": (r"\boxed{}", "1", 0.0),
    "100 KB, box at end": ("Let me think step by step. " * 4000 + r"\boxed{42}", "42", 1.0),
    "100 KB of braces": ("{" * 100_000, "1", 0.0),
    "huge integer tower": (r"\boxed{9^{9^{9^{9^{9}}}}}", "9", 0.0),
}


@pytest.mark.parametrize("name", list(EDGE))
def test_edge_case_within_bound(name):
    pred, gold, want = EDGE[name]
    out, elapsed = timed(score, [pred], [gold], timeout_s=BOUND_S)
    assert out == [want]
    assert elapsed < BOUND_S + 1.0


def warm_pool():
    """Score until every worker has reported ready (a call returns as soon as its items are done)."""
    for _ in range(200):
        score(["warm"] * 8, ["1"] * 8)
        if all(w.ready for w in pool._POOL.workers):
            return
        time.sleep(0.05)
    raise AssertionError("workers did not start")


def _worker_pids():
    return [w.proc.pid for w in pool._POOL.workers]


def test_slow_sympy_item_is_killed_at_the_hard_bound():
    # `9^{9^{9^{9}}}` vs x + 1 keeps sympy busy until math-verify's own alarm (1 s, its whole-second minimum); a 0.5 s
    # hard bound must kill that worker first. (On math-verify 0.9 / CPython 3.11 we found no input that outlives
    # the alarm itself: big-int and regex loops check signals; the test below covers a truly stuck worker.)
    warm_pool()
    before = _worker_pids()
    # (a symbolic gold: a numeric one takes number literals only, and refuses the tower before sympy sees it)
    out, elapsed = timed(score, [r"\boxed{9^{9^{9^{9}}}}", r"\boxed{2}"], ["x + 1", "2"], timeout_s=0.5)
    assert out == [0.0, 1.0]
    assert elapsed < 5.0
    assert set(before) - set(_worker_pids()), "the stuck worker should have been replaced"


def test_stuck_worker_is_killed_and_replaced():
    warm_pool()
    stuck = _worker_pids()
    for pid in stuck:  # a stopped process ignores its own alarm: only the parent's kill can end it
        os.kill(pid, signal.SIGSTOP)
    preds = [rf"\boxed{{{i}}}" for i in range(64)]  # several items per chunk: the rest must be requeued
    out, elapsed = timed(score, preds, [str(i) for i in range(64)], timeout_s=1.0)
    assert sorted(out) == [0.0] * WORKERS + [1.0] * (64 - WORKERS)  # each stuck worker costs its item only
    assert elapsed < 1.0 + 30
    assert not set(stuck) & set(_worker_pids())
    for pid in stuck:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed and reaped
    assert score([r"\boxed{1}"], ["1"]) == [1.0]


def test_worker_that_died_while_idle_is_replaced():
    warm_pool()
    dead = pool._POOL.workers[0].proc
    dead.kill()
    dead.wait()
    assert score([rf"\boxed{{{i}}}" for i in range(16)], [str(i) for i in range(16)]) == [1.0] * 16
    assert dead.pid not in _worker_pids()


def test_many_items_keep_their_order():
    rng = random.Random(0)
    golds = [str(rng.randrange(100)) for _ in range(300)]
    truth = [rng.random() < 0.5 for _ in golds]
    preds = [rf"so \boxed{{{g if ok else int(g) + 1}}}" for g, ok in zip(golds, truth)]
    assert score(preds, golds) == [1.0 if ok else 0.0 for ok in truth]


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(predictions=["a"], golds=["1", "2"]), "same length"),
        (dict(predictions=[None], golds=["1"]), "predictions"),
        (dict(predictions=["a"], golds=[1]), "golds"),
        (dict(predictions=["a"], golds=["1"], timeout_s=0), "timeout_s"),
        (dict(predictions=["a"], golds=["1"], num_workers=0), "num_workers"),
    ],
)
def test_bad_input_raises(kwargs, field):
    with pytest.raises(ValueError, match=field):
        score_completions(**kwargs)


def test_defaults_from_environment(monkeypatch):
    cpus = len(os.sched_getaffinity(0))
    monkeypatch.delenv("ORDERGRAD_REWARD_WORKERS", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert pool.default_workers() == min(4, cpus)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(cpus))  # torchrun: the ranks on a node share its cores
    assert pool.default_workers() == 1
    assert pool.reward_env_settings() == (10.0, 1)
    monkeypatch.setenv("ORDERGRAD_REWARD_WORKERS", "3")
    monkeypatch.setenv("ORDERGRAD_REWARD_TIMEOUT_S", "2.5")
    assert pool.reward_env_settings() == (2.5, 3)
    monkeypatch.setenv("ORDERGRAD_REWARD_TIMEOUT_S", "0")
    with pytest.raises(ValueError, match="ORDERGRAD_REWARD_TIMEOUT_S"):
        score(["a"], ["1"])


@pytest.mark.parametrize(
    "variable, value",
    [("ORDERGRAD_REWARD_WORKERS", "abc"), ("ORDERGRAD_REWARD_WORKERS", "0"), ("ORDERGRAD_REWARD_WORKERS", "²"),
     ("ORDERGRAD_REWARD_TIMEOUT_S", "abc"),
     ("ORDERGRAD_REWARD_TIMEOUT_S", "-1")],
)  # fmt: skip
def test_malformed_environment_fails_at_import_naming_the_variable(variable, value):
    """Before any training step: importing the reward module (as a recipe does at startup) raises."""
    env = dict(os.environ, **{variable: value})
    code = "import ordergrad_trl.tasks.rewards"
    result = bounded.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and f"{variable} must be" in result.stderr and repr(value) in result.stderr


def test_shutdown_then_restart():
    score(["warm"], ["1"])
    procs = [w.proc for w in pool._POOL.workers]
    pool.shutdown()
    assert all(p.poll() is not None for p in procs)
    assert score([r"\boxed{3}"], ["3"]) == [1.0]


def test_forked_child_builds_its_own_pool():
    score(["warm"], ["1"])
    pid = os.fork()
    if pid == 0:  # child: must not talk to the parent's workers
        ok = pool._POOL is None and score([r"\boxed{7}"], ["7"]) == [1.0]
        pool.shutdown()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert score([r"\boxed{8}"], ["8"]) == [1.0]  # the parent's pool still works


# ------------------------------------------------------------------------------- budget, time-outs, busy machine
# Measured here (math-verify 0.9, CPython 3.11): parsing this gold computes a 51,000-digit binomial, ~2.1
# CPU-seconds (1.7 s for 150000, 2.9 s for 200000); a correct prediction is the same expression (math-verify
# caches the parsed LaTeX in the worker, so it is cheap the second time), a wrong one is a small integer.
SLOW_GOLD = r"\binom{170000}{85000}"
SLOWER_GOLD = r"\binom{200000}{100000}"


def nested_fraction(depth):
    """1/(1+1/(1+...)): parses in ~0.5 s, but math-verify spends > 30 s refuting a wrong answer to it."""
    text = "1"
    for _ in range(depth):
        text = rf"\frac{{1}}{{1+{text}}}"
    fib = [1, 1]
    while len(fib) < depth + 2:
        fib.append(fib[-1] + fib[-2])
    return text, fib[depth], fib[depth + 1]  # its value is F(depth+1) / F(depth+2)


@pytest.fixture
def busy_cores():
    """One CPU-burning process per core for the test's duration (each also stops itself after 120 s)."""
    burn = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end:\n    pass"
    procs = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(pool.usable_cpus())]
    time.sleep(0.5)
    yield len(procs)
    for proc in procs:
        proc.kill()
        proc.wait()


def test_slow_gold_scores_one_with_every_core_busy(busy_cores):
    pool.shutdown()  # fresh workers: no gold cached
    warm_pool()
    preds = [rf"\boxed{{{SLOW_GOLD}}}", r"\boxed{5}"] * 2
    out, status = score(preds, [SLOW_GOLD] * 4, return_status=True)  # default budget
    assert out == [1.0, 0.0, 1.0, 0.0] and status == ["ok"] * 4


def test_timed_out_gold_is_unscorable_counted_and_never_cached():
    warm_pool()
    before = _worker_pids()
    preds = [rf"\boxed{{{SLOWER_GOLD}}}", r"\boxed{5}"]
    # a 2 s bound leaves math-verify a 1 s alarm: the gold's parse times out, reported as such (not a silent 0)
    out, status = score(preds, [SLOWER_GOLD] * 2, timeout_s=2, return_status=True)
    assert out == [None, None] and status == ["timeout", "timeout"]
    assert _worker_pids() == before  # math-verify's own alarm, not the hard kill: the workers (and caches) live on
    # the same workers, the default budget: the failure was not cached
    assert score(preds, [SLOWER_GOLD] * 2, return_status=True) == ([1.0, 0.0], ["ok", "ok"])


def test_gold_parse_killed_at_the_hard_bound_is_unscorable_for_its_whole_group():
    pool.shutdown()  # fresh workers: the gold is not cached from an earlier test
    warm_pool()
    preds, golds = [rf"\boxed{{{i}}}" for i in range(6)] + [r"\boxed{3}"] * 2, [SLOWER_GOLD] * 6 + ["3"] * 2
    out, status = score(preds, golds, timeout_s=0.5, return_status=True)
    assert out == [None] * 6 + [1.0] * 2  # no item of the group retried the gold after a kill; others unaffected
    assert status == ["timeout"] * 6 + ["ok"] * 2


def test_comparison_time_out_is_counted():
    gold, num, den = nested_fraction(18)
    preds = [rf"\boxed{{\frac{{{num}}}{{{den}}}}}", rf"\boxed{{\frac{{{num + 1}}}{{{den}}}}}"]
    warm_pool()
    out, status = score(preds, [gold] * 2, timeout_s=5, return_status=True)  # alarms of 4 s: the gold fits
    assert out == [1.0, 0.0] and status == ["ok", "timeout"]


def test_a_group_of_256_long_completions():
    """User size: one prompt's N=256 rollouts, ~12 KB of reasoning each (about 3k tokens), answers boxed at the end."""
    rng = random.Random(1)
    steps = "".join(f"Step {i}: we have {rng.randrange(10**6)} + {rng.randrange(10**6)}, carry on. " for i in range(280))
    truth = [rng.random() < 0.3 for _ in range(256)]
    answers = [r"\frac{7}{12}" if ok else rng.choice([r"\frac{5}{12}", "0.5", r"\frac{7}{13}"]) for ok in truth]
    preds = [steps + rf"So the answer is $\boxed{{{a}}}$." for a in answers]
    assert min(map(len, preds)) > 12_000
    out, status = score(preds, [r"\frac{7}{12}"] * 256, return_status=True)
    assert out == [1.0 if ok else 0.0 for ok in truth] and status == ["ok"] * 256


def test_unscorable_golds_are_reported():
    out, status = score([r"\boxed{1}"] * 3, ["", "$$", "1"], return_status=True)
    assert out == [None, None, 1.0] and status == ["unscorable", "unscorable", "ok"]


def test_pool_size_without_sched_getaffinity(monkeypatch):
    """macOS has no os.sched_getaffinity: fall back to os.cpu_count()."""
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    monkeypatch.delenv("ORDERGRAD_REWARD_WORKERS", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert pool.usable_cpus() == 3 and pool.default_workers() == 3
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # "undetermined"
    assert pool.default_workers() == 1


# --------------------------------------------------------------------------------- public reference solutions
def test_math500_reference_solutions_all_correct():
    rows = load("math500_test.jsonl")
    assert score([r["solution"] for r in rows], [r["answer"] for r in rows]) == [1.0] * 500
    shifted = [rows[i - 1]["answer"] for i in range(500)]  # the same solutions against wrong golds
    assert sum(s == 1.0 for s in score([r["solution"] for r in rows], shifted)) < 25


def test_gsm8k_reference_solutions_all_correct():
    rows = load("gsm8k_test.jsonl")
    golds = [gsm8k_gold(r["answer"]) for r in rows]
    # The reference reasoning (intermediate numbers, <<calc>> notes) with its `#### N` line boxed as written,
    # thousands separators included: extraction must find the final answer, not the last number it sees.
    parts = [r["answer"].rsplit("####", 1) for r in rows]
    boxed = [body + r"So the answer is \boxed{%s}." % final.strip() for body, final in parts]
    assert score(boxed, golds) == [1.0] * 1319
    assert score([f"The answer is ${g}$." for g in golds], golds) == [1.0] * 1319
    assert sum(s == 1.0 for s in score(boxed, golds[1:] + golds[:1])) < 66


def test_trainer_logs_time_outs_and_unscorable_items(tiny_model, tiny_tokenizer, cpu_training_args):
    """One training step with `math_reward` on prompts whose golds are fine, slow, or empty."""
    from datasets import Dataset

    from ordergrad_trl import OrderGradConfig, OrderGradTrainer

    data = Dataset.from_dict({"prompt": ["What is 1+1?", "And 2+2?"], "answer": [SLOWER_GOLD, ""]})
    args = OrderGradConfig(
        **cpu_training_args, per_device_train_batch_size=6, num_generations=3, ordergrad_k=2, max_steps=1,
        max_completion_length=4,
    )
    os.environ["ORDERGRAD_REWARD_TIMEOUT_S"] = "0.5"  # the slow gold's parse is killed: a time-out per rollout
    try:
        trainer = OrderGradTrainer(
            model=tiny_model, reward_funcs=[math_reward], args=args, train_dataset=data, processing_class=tiny_tokenizer
        )
        trainer.train()
    finally:
        del os.environ["ORDERGRAD_REWARD_TIMEOUT_S"]
    # through TRL's log_metric: fractions of the batch's 6 rollouts (3 slow golds, 3 empty ones)
    logged = [h for h in trainer.state.log_history if "math_reward/timeout_frac" in h]
    assert logged and logged[0]["math_reward/timeout_frac"] == 0.5 and logged[0]["math_reward/unscorable_frac"] == 0.5
