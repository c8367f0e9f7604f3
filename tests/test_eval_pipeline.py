"""eval/ end to end: generate -> score -> report on the tiny offline model, resume after a kill, data-parallel
workers, the vLLM adapter (stubbed), and the benchmarks' own answers (trainer checkpoints: test_eval_checkpoints.py).

Report numbers are checked against an independent recomputation from the known correctness of hand-written
completions (brute force over k-subsets, the Codex closed form), not against the metric code itself.
"""

from __future__ import annotations

import importlib.machinery
import json
import math
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

from helpers.eval_runs import adopt  # noqa: E402  (tests/ is on sys.path via conftest)
from test_eval_metrics import brute_maj, subsets_mean  # noqa: E402

from ordergrad_trl.evaluation import layout, records  # noqa: E402
from ordergrad_trl.evaluation.args import GenerateArgs, PathArgs, ReportArgs, ScoreArgs  # noqa: E402
from ordergrad_trl.evaluation.generate import generate  # noqa: E402
from ordergrad_trl.evaluation.modeling import load_model_and_tokenizer, resolve_model  # noqa: E402
from ordergrad_trl.evaluation.problems import load_problems  # noqa: E402
from ordergrad_trl.evaluation.report import report  # noqa: E402
from ordergrad_trl.evaluation.score import score  # noqa: E402

SHARED = Path(os.environ.get("ORDERGRAD_SHARED_DATA", REPO / ".." / "shared" / "data"))
FAST = dict(bootstrap_samples=200, plot=False)


def tiny_args(model, **kw) -> GenerateArgs:
    base = dict(model=str(model), datasets=["arithmetic"], limit=3, num_samples=4, max_new_tokens=6, batch_size=6)
    return GenerateArgs(**{**base, **kw})


def keys_of(path: Path) -> list[tuple[str, int]]:
    return [(r["id"], r["sample"]) for r in records.read_jsonl(path)]


# ------------------------------------------------------------------------------------- score + report vs oracle
# (completion, correct?, answer class) for gold 3 / 1/2 / 12; equivalent correct spellings share the gold's class
TOY = {
    "p0": ("3", [(r"\boxed{3}", 1, "g"), ("so it is 3", 1, "g"), (r"\boxed{4}", 0, "4"), (r"\boxed{4}", 0, "4"),
                 (r"\boxed{5}", 0, "5"), ("nothing", 0, None)]),
    "p1": (r"\frac{1}{2}", [(r"\boxed{0.5}", 1, "g"), (r"\boxed{\frac{1}{2}}", 1, "g"), (r"\boxed{\dfrac12}", 1, "g"),
                            (r"\boxed{2}", 0, "2"), (r"\boxed{2}", 0, "2"), (r"\boxed{2}", 0, "2")]),
    "p2": ("12", [(r"\boxed{13}", 0, "13")] * 6),
    "p3": ("12", [(r"\boxed{12}", 1, "g")] * 5 + [(r"\boxed{1,2}", 0, "1,2")]),
    "p4": ("\\", [(r"\boxed{1}", None, None)] * 6),  # a gold math-verify cannot parse: left out
}


def write_toy_run(out: Path):
    d = out / "toy"
    d.mkdir(parents=True)
    levels = {"p0": 1, "p1": 1, "p2": 2, "p3": 2, "p4": 2}
    records.write_jsonl_atomic(d / "problems.jsonl", [
        {"id": pid, "answer": gold, "prompt": [{"role": "user", "content": pid}], "level": levels[pid]}
        for pid, (gold, _) in TOY.items()
    ])
    records.append_jsonl(d / "generations.jsonl", [
        {"id": pid, "sample": s, "completion": text, "num_tokens": 10 + s, "finish_reason": "stop"}
        for pid, (_, rows) in TOY.items() for s, (text, _, _) in enumerate(rows)
    ])
    adopt(out)  # the provenance generate would have written


def test_score_and_report_match_brute_force(tmp_path):
    write_toy_run(tmp_path)
    paths = PathArgs(str(tmp_path))
    stats = score(ScoreArgs(reward_workers=1), paths)
    assert stats["toy"]["scored"] == 30
    scores = {(r["id"], r["sample"]): r for r in records.read_jsonl(tmp_path / "toy" / "scores.jsonl")}
    for pid, (_, rows) in TOY.items():
        for s, (text, want, _) in enumerate(rows):
            assert scores[(pid, s)]["correct"] == want, (pid, text)
            assert scores[(pid, s)]["format"] == float(r"\boxed" in text)
    assert score(ScoreArgs(reward_workers=1), paths)["toy"]["scored"] == 0  # resumable: nothing left to score

    args = ReportArgs(ks=[1, 2, 3, 6], objectives=["TopM:2@4", "0.1,0,0.3,0.6"], reward_weights="correct=1,format=0.5",
                      **FAST)
    rep = report(args, paths)["datasets"]["toy"]
    scorable = {pid: rows for pid, (_, rows) in TOY.items() if rows[0][1] is not None}
    assert rep["num_problems"] == 5 and rep["unscorable_problems"] == 1 and rep["num_samples"] == 6
    m = rep["metrics"]

    def mean_over(fn):
        return sum(fn(rows) for rows in scorable.values()) / len(scorable)

    def reward(rows):
        return [c + 0.5 * (r"\boxed" in t) for t, c, _ in rows]

    for k in (1, 2, 3, 6):
        codex = mean_over(lambda rows: 1 - math.comb(6 - sum(c for _, c, _ in rows), k) / math.comb(6, k))
        assert m[f"pass@{k}"]["value"] == pytest.approx(codex, abs=1e-12)
        hat = mean_over(lambda rows: math.comb(sum(c for _, c, _ in rows), k) / math.comb(6, k))
        assert m[f"pass^{k}"]["value"] == pytest.approx(hat, abs=1e-12)
        best = mean_over(lambda rows: subsets_mean(reward(rows), k, max))
        assert m[f"best@{k}"]["value"] == pytest.approx(best, abs=1e-12)
        cvar = mean_over(lambda rows: subsets_mean(reward(rows), k, lambda s: sum(sorted(s)[: math.ceil(k / 4)])
                                                   / math.ceil(k / 4)))
        assert m[f"cvar0.25@{k}"]["value"] == pytest.approx(cvar, abs=1e-12)
        ids = {}
        maj = mean_over(lambda rows: brute_maj([ids.setdefault(lab, len(ids)) if lab else -1 for _, _, lab in rows],
                                               [float(c) for _, c, _ in rows], k))
        assert m[f"maj@{k}"]["value"] == pytest.approx(maj, abs=1e-12)
        for name in (f"pass@{k}", f"maj@{k}", f"best@{k}"):
            lo, hi = m[name]["ci"]
            assert lo <= m[name]["value"] + 1e-12 and m[name]["value"] <= hi + 1e-12
            assert m[name]["num_problems"] == 4
    top2 = mean_over(lambda rows: subsets_mean(reward(rows), 4, lambda s: sum(sorted(s)[-2:]) / 2))
    objectives = rep["objectives"]  # --objectives have their own section, keyed as requested
    assert list(objectives) == ["TopM:2@4", "0.1,0,0.3,0.6@4"] and "TopM:2@4" not in m
    assert objectives["TopM:2@4"]["value"] == pytest.approx(top2, abs=1e-12)
    custom = mean_over(lambda rows: subsets_mean(reward(rows), 4, lambda s: sum(
        w * x for w, x in zip([0.1, 0, 0.3, 0.6], sorted(s)))))
    assert objectives["0.1,0,0.3,0.6@4"]["value"] == pytest.approx(custom, abs=1e-12)
    assert m["mean_reward"]["value"] == pytest.approx(mean_over(lambda rows: sum(reward(rows)) / 6))
    # the level breakdown is the same metric over each level's problems
    lv = rep["breakdown"]["level"]
    assert list(lv) == ["1", "2"] and lv["2"]["num_problems"] == 3
    assert lv["2"]["metrics"]["pass@1"]["value"] == pytest.approx((0 + 5 / 6) / 2)
    assert rep["mean_completion_tokens"] == pytest.approx(12.5) and rep["truncated_fraction"] == 0

    md = (tmp_path / "report.md").read_text()
    assert "## toy" in md and "| pass@k |" in md and "| TopM:2@4 |" in md and "| level | problems |" in md
    assert json.loads((tmp_path / "report.json").read_text())["datasets"]["toy"]["metrics"] == m


def test_plot_written_or_skipped_without_matplotlib(tmp_path, monkeypatch):
    write_toy_run(tmp_path)
    paths = PathArgs(str(tmp_path))
    score(ScoreArgs(reward_workers=1), paths)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    with pytest.warns(UserWarning, match="matplotlib is not installed"):
        rep = report(ReportArgs(bootstrap_samples=50), paths)
    assert "plot" not in rep and not (tmp_path / "passk.png").exists()
    monkeypatch.undo()
    pytest.importorskip("matplotlib")
    rep = report(ReportArgs(bootstrap_samples=50), paths)
    assert Path(rep["plot"]).read_bytes()[:4] == b"\x89PNG"


def test_report_argument_errors(tmp_path):
    write_toy_run(tmp_path)
    paths = PathArgs(str(tmp_path))
    for bad, match in [
        (dict(reward_weights="correct=1,length=2"), "reward_weights"),
        (dict(objectives=["TopM:2"]), "needs '@K'"),
        (dict(objectives=["Bogus@4"]), "Invalid objective"),
        (dict(cvar_q=0.0), "cvar_q"),
    ]:
        with pytest.raises(ValueError, match=match):
            report(ReportArgs(**bad, **FAST), paths)
    with pytest.raises(FileNotFoundError, match="generate stage"):
        report(ReportArgs(**FAST), PathArgs(str(tmp_path / "empty")))


# ------------------------------------------------------------------------------------------ tiny model, end to end
def test_end_to_end_cli_on_tiny_model(tiny_model_dir, tmp_path):
    from ordergrad_trl.evaluation.cli import command

    def main(argv):
        return command(["run", *argv])

    out = tmp_path / "run"
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(f"model: {tiny_model_dir}\ndatasets: [arithmetic]\nlimit: 3\nnum_samples: 4\nbatch_size: 6\n"
                   "bootstrap_samples: 100\n")
    argv = ["--config", str(cfg), "--max_new_tokens", "6", "--output_dir", str(out), "--ks", "1", "4",
            "--reward_workers", "1"]
    result = main(argv)
    gens = records.read_jsonl(out / "arithmetic" / "generations.jsonl")
    assert sorted((g["id"], g["sample"]) for g in gens) == sorted(
        (f"arithmetic-test-{i:05d}", s) for i in range(3) for s in range(4))
    for g in gens:
        assert 1 <= g["num_tokens"] <= 6 and (g["finish_reason"] == "length") == (g["num_tokens"] == 6)
    scores = records.read_jsonl(out / "arithmetic" / "scores.jsonl")
    assert len(scores) == 12 and all(s["correct"] in (0.0, 1.0) for s in scores)
    rep = result["report"]["datasets"]["arithmetic"]
    assert rep["metrics"]["pass@1"]["value"] == pytest.approx(sum(s["correct"] for s in scores) / 12)
    assert set(rep["ks"]) == {1, 4} and (out / "report.md").is_file()
    settings = json.loads((out / "provenance.json").read_text())
    assert settings["model"]["model"] == str(tiny_model_dir) and settings["sampling"]["max_new_tokens"] == 6
    assert result["report"]["generation"]["model"] == str(tiny_model_dir)

    # rerun: nothing generated or scored twice
    again = main(argv)
    assert again["generate"] == {} and again["score"]["arithmetic"]["scored"] == 0
    assert len(records.read_jsonl(out / "arithmetic" / "generations.jsonl")) == 12
    # more samples per problem: only the new sample indices are generated
    more = generate(tiny_args(tiny_model_dir, num_samples=5), PathArgs(str(out)))
    assert more["arithmetic"]["samples"] == 3
    assert sorted(s for _, s in keys_of(out / "arithmetic" / "generations.jsonl"))[-3:] == [4, 4, 4]
    # the same seed and batching reproduce the same samples in a fresh directory
    fresh = tmp_path / "fresh"
    generate(tiny_args(tiny_model_dir), PathArgs(str(fresh)))
    assert [g["completion"] for g in records.read_jsonl(fresh / "arithmetic" / "generations.jsonl")] == [
        g["completion"] for g in gens]
    # settings that change the distribution cannot be mixed into an existing run
    with pytest.raises(ValueError, match="other provenance: temperature 1.0 -> 0.5"):
        generate(tiny_args(tiny_model_dir, temperature=0.5), PathArgs(str(out)))


@pytest.mark.parametrize("bad,match", [
    (dict(backend="tpu"), "backend"), (dict(num_samples=0), "num_samples"), (dict(top_p=0.0), "top_p"),
    (dict(user_template="no placeholder"), "question"), (dict(datasets=["nope"]), "unknown math set"),
])
def test_generate_argument_errors(tiny_model_dir, tmp_path, bad, match):
    with pytest.raises(ValueError, match=match):
        generate(tiny_args(tiny_model_dir, **bad), PathArgs(str(tmp_path)))


def test_resume_after_killed_generation(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    common = ["--model", str(tiny_model_dir), "--datasets", "arithmetic", "--limit", "30", "--num_samples", "4",
              "--max_new_tokens", "24", "--batch_size", "2", "--output_dir", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "eval.generate", *common], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    gen_file = out / "arithmetic" / "generations.jsonl"
    deadline = time.monotonic() + 120
    try:
        while not (gen_file.is_file() and len(keys_of(gen_file)) >= 4):
            assert proc.poll() is None, f"generation ended early: {proc.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "no sample written within 120 s"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before_text = gen_file.read_text()
    before = keys_of(gen_file)
    assert 4 <= len(before) < 120
    with open(gen_file, "a") as f:  # a kill in the middle of a write leaves a torn last line
        f.write('{"id": "arithmetic-test-00029", "sample": 3, "compl')

    args = GenerateArgs(model=str(tiny_model_dir), datasets=["arithmetic"], limit=30, num_samples=4,
                        max_new_tokens=24, batch_size=2)
    stats = generate(args, PathArgs(str(out)))
    assert stats["arithmetic"]["samples"] == 120 - len(before)
    after = keys_of(gen_file)
    assert len(after) == len(set(after)) == 120
    assert gen_file.read_text().startswith(before_text)  # finished samples were kept, not regenerated


def test_data_parallel_workers(tiny_model_dir, tmp_path):
    out = tmp_path / "dp"
    stats = generate(tiny_args(tiny_model_dir, limit=2, num_samples=3, max_new_tokens=4, data_parallel_size=2),
                     PathArgs(str(out)))
    assert stats["arithmetic"]["samples"] == 6
    files = sorted(p.name for p in (out / "arithmetic").glob(layout.GEN_GLOB))
    assert files == ["generations.rank0.jsonl", "generations.rank1.jsonl"]
    assert sorted(records.read_samples(out / "arithmetic")) == sorted(
        (f"arithmetic-test-{i:05d}", s) for i in range(2) for s in range(3))
    assert all(keys_of(out / "arithmetic" / f) for f in files)  # both ranks did work


def test_vllm_backend_plumbing_with_a_stub(tiny_model_dir, tmp_path, monkeypatch):
    """The vLLM code path without vLLM: a stub records the requests and answers deterministically."""
    from ordergrad_trl.evaluation.sampling import sample_seed as _sample_seed

    calls = {}

    class SamplingParams:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    class LLM:
        def __init__(self, **kw):
            calls["init"] = kw

        def generate(self, prompts, params, use_tqdm=False):
            calls.setdefault("requests", []).extend(zip(prompts, params))
            out = types.SimpleNamespace
            return [out(outputs=[out(text=f"\\boxed{{{p.seed % 7}}}", token_ids=[1, 2, 3], finish_reason="stop")])
                    for p in params]

    stub = types.ModuleType("vllm")
    stub.LLM, stub.SamplingParams = LLM, SamplingParams
    stub.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    platforms = types.ModuleType("vllm.platforms")  # a CPU platform: chunked prefill off (seeded requests)
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: True)
    monkeypatch.setitem(sys.modules, "vllm", stub)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    out = tmp_path / "v"
    generate(tiny_args(tiny_model_dir, backend="vllm", limit=2, num_samples=2, top_k=5, temperature=0.7,
                       vllm_chunk=3), PathArgs(str(out)))
    assert calls["init"]["model"] == str(tiny_model_dir) and calls["init"]["seed"] == 0
    assert calls["init"]["enable_chunked_prefill"] is False
    reqs = calls["requests"]
    assert len(reqs) == 4 and all(p.temperature == 0.7 and p.top_k == 5 and p.max_tokens == 6 for _, p in reqs)
    tok_ids = load_model_and_tokenizer(resolve_model(str(tiny_model_dir)))[1].convert_tokens_to_ids
    assert all(tok_ids("<|im_end|>") in p.stop_token_ids for _, p in reqs)  # the chat template's end of turn
    tok = load_model_and_tokenizer(resolve_model(str(tiny_model_dir)))[1]
    problem = load_problems("arithmetic", tiny_args(tiny_model_dir, limit=1))[0][0]
    text = tok.apply_chat_template(problem["prompt"], add_generation_prompt=True, tokenize=False)
    assert reqs[0][0]["prompt_token_ids"] == tok(text, add_special_tokens=False)["input_ids"]
    gens = records.read_jsonl(out / "arithmetic" / "generations.jsonl")
    for g, (_, p) in zip(gens, reqs):
        assert p.seed == _sample_seed(0, "arithmetic", g["id"], g["sample"])
        assert g["completion"] == f"\\boxed{{{p.seed % 7}}}" and g["num_tokens"] == 3
    assert len({p.seed for _, p in reqs}) == 4


# ------------------------------------------------------------------------------------------ benchmarks' own answers
ALL_SETS = ["math500", "gsm8k", "aime24", "aime25", "amc23", "minerva", "olympiadbench"]


@pytest.fixture(scope="module")
def shared_data():
    if not (SHARED / "gsm8k_test.jsonl").is_file():
        pytest.skip(f"public benchmark files not found in {SHARED} (set ORDERGRAD_SHARED_DATA)")
    return SHARED


def test_reference_solutions_score_100_percent_through_the_pipeline(shared_data, tmp_path):
    """The `reference` backend emits each set's own worked solution: gold extraction + scoring must agree."""
    out = PathArgs(str(tmp_path))
    args = GenerateArgs(datasets=["math500", "gsm8k", "minerva"], local_data=True, data_dir=str(shared_data),
                        limit=40, num_samples=1, backend="reference")
    generate(args, out)
    score(ScoreArgs(reward_timeout_s=30), out)  # generous bound: a busy machine must not turn 1 into 0
    rep = report(ReportArgs(ks=[1], **FAST), out)["datasets"]
    for name in ("math500", "gsm8k", "minerva"):
        assert rep[name]["num_problems"] == 40 and rep[name]["metrics"]["pass@1"]["value"] == 1.0, name
    # sets without worked solutions get the gold answer in \boxed{}: also 100%
    aime = PathArgs(str(tmp_path / "aime"))
    generate(GenerateArgs(datasets=["aime24", "amc23"], local_data=True, data_dir=str(shared_data), limit=5,
                          num_samples=2, backend="reference"), aime)
    score(ScoreArgs(reward_timeout_s=30), aime)
    rep = report(ReportArgs(ks=[1, 2], **FAST), aime)["datasets"]
    assert all(rep[s]["num_problems"] == 5 and rep[s]["metrics"]["pass@2"]["value"] == 1.0 for s in ("aime24", "amc23"))


def test_every_benchmark_gold_parses_and_echo_scores_100_percent(shared_data, tmp_path):
    """All seven sets: the boxed gold, scored as a completion, is correct (and a shifted gold is not)."""
    args = GenerateArgs(datasets=ALL_SETS, local_data=True, data_dir=str(shared_data), limit=30)
    for name in ALL_SETS:
        problems = load_problems(name, args)[0]
        assert len(problems) == 30 and all(p["answer"] for p in problems)
        d = tmp_path / name
        d.mkdir()
        records.write_jsonl_atomic(d / "problems.jsonl", problems)
        records.append_jsonl(d / "generations.jsonl", [
            {"id": p["id"], "sample": s, "completion": f"The final answer is $\\boxed{{{q['answer']}}}$.",
             "num_tokens": None, "finish_reason": "reference"}
            for p in problems for s, q in enumerate([p, problems[(problems.index(p) + 1) % 30]])
        ])
    adopt(tmp_path)
    score(ScoreArgs(reward_timeout_s=30), PathArgs(str(tmp_path)))  # some golds take seconds on a busy machine
    rep = report(ReportArgs(ks=[1], **FAST), PathArgs(str(tmp_path)))["datasets"]
    for name in ALL_SETS:
        scores = {(r["id"], r["sample"]): r["correct"] for r in records.read_jsonl(tmp_path / name / "scores.jsonl")}
        assert [c for (_, s), c in scores.items() if s == 0] == [1.0] * 30, name
        assert sum(c == 1.0 for (_, s), c in scores.items() if s == 1) <= 3, name  # neighbours' golds differ
        assert rep[name]["unscorable_problems"] == 0
