"""eval/ launch behaviour without a GPU: the GPUs each data-parallel worker is given, stop tokens, prompts without
a chat template, and the one-line errors of bad input (before any model loads).
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the checkout's `eval/` entry points (not installed)

from helpers.tiny_model import IM_END, build_model, build_tokenizer  # noqa: E402

from ordergrad_trl.evaluation import parallel, records, sampling, tokens  # noqa: E402
from ordergrad_trl.evaluation.args import GenerateArgs, PathArgs  # noqa: E402
from ordergrad_trl.evaluation.errors import UsageError  # noqa: E402
from ordergrad_trl.evaluation.generate import generate  # noqa: E402
from ordergrad_trl.evaluation.problems import load_problems  # noqa: E402


def tiny_args(model, **kw) -> GenerateArgs:
    base = dict(model=str(model), datasets=["arithmetic"], limit=3, num_samples=4, max_new_tokens=6, batch_size=6)
    return GenerateArgs(**{**base, **kw})


class FakeWorker:
    """Stands in for subprocess.Popen: records the command and environment and 'finishes' at once."""

    launched: list = []
    exit_codes: dict = {}

    def __init__(self, cmd, env=None, **kw):
        assert "cwd" not in kw  # workers keep the user's working directory (relative --model paths)
        self.cmd, self.env = cmd, env
        spec = json.loads(Path(cmd[-1]).read_text())
        self.rank = spec["rank"]
        FakeWorker.launched.append(self)
        done = sum(len(v["units"]) for v in spec["work"].values())
        records.write_json_atomic(Path(spec["output_dir"]) / f".dp_worker{self.rank}.stats.json",
                                  {"arithmetic": {"samples": done, "tokens": 0, "seconds": 1.0}})

    def wait(self):
        return FakeWorker.exit_codes.get(self.rank, 0)


@pytest.fixture
def fake_gpus(monkeypatch):
    """A machine with `count` GPUs as torch sees them, and worker processes that only record their launch."""
    FakeWorker.launched, FakeWorker.exit_codes = [], {}
    monkeypatch.setattr(parallel.subprocess, "Popen", FakeWorker)

    def no_model(*a, **k):
        raise AssertionError("the parent process must not load a model")

    monkeypatch.setattr("ordergrad_trl.evaluation.backends.HFBackend", no_model)
    monkeypatch.setattr("ordergrad_trl.evaluation.backends.VLLMBackend", no_model)

    def set_count(count, visible=None):
        monkeypatch.setattr("ordergrad_trl.evaluation.devices.gpu_count", lambda: count)
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)

    return set_count


@pytest.mark.parametrize("visible,count,dp,tp,want", [
    ("4,5,6,7", 4, 2, 2, ["4,5", "6,7"]),  # the parent's mask is honoured, not 0,1 / 2,3
    ("4,5,6,7", 4, None, 2, ["4,5", "6,7"]),  # default dp = visible GPUs / tp
    (None, 4, 4, 1, ["0", "1", "2", "3"]),
    ("GPU-aa,GPU-bb,GPU-cc", 3, 3, 1, ["GPU-aa", "GPU-bb", "GPU-cc"]),  # UUIDs pass through
    ("3,1,2,0", 4, 2, 1, ["3", "1"]),  # spare GPUs stay unused
])
def test_worker_gpus_follow_the_parents_visible_devices(tiny_model_dir, tmp_path, monkeypatch, fake_gpus, visible,
                                                        count, dp, tp, want):
    fake_gpus(count, visible)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    stats = generate(tiny_args(tiny_model_dir, data_parallel_size=dp, tensor_parallel_size=tp, backend="hf"),
                     PathArgs("runs/dp"))  # relative: resolved against the cwd once, for every worker
    assert [w.env["CUDA_VISIBLE_DEVICES"] for w in FakeWorker.launched] == want
    assert stats["arithmetic"]["samples"] == 12
    for w in FakeWorker.launched:
        assert w.cmd[1:3] == ["-m", "ordergrad_trl.evaluation.parallel"]
        assert Path(w.cmd[-1]).parent == elsewhere / "runs" / "dp"
        assert str(REPO) in w.env["PYTHONPATH"].split(":")
    assert (elsewhere / "runs" / "dp" / "arithmetic" / "problems.jsonl").is_file()


def test_worker_spec_has_the_absolute_output_dir_and_disjoint_units(tiny_model_dir, tmp_path, monkeypatch,
                                                                    fake_gpus):
    fake_gpus(2, "0,1")
    monkeypatch.chdir(tmp_path)
    specs = []

    class Recording(FakeWorker):
        def __init__(self, cmd, env=None, **kw):
            specs.append(json.loads(Path(cmd[-1]).read_text()))
            super().__init__(cmd, env, **kw)

    monkeypatch.setattr(parallel.subprocess, "Popen", Recording)
    generate(tiny_args(tiny_model_dir, data_parallel_size=2), PathArgs("out"))
    assert [s["output_dir"] for s in specs] == [str(tmp_path / "out")] * 2
    units = [tuple(u) for s in specs for u in s["work"]["arithmetic"]["units"]]
    assert sorted(units) == [(i, s) for i in range(3) for s in range(4)]  # each sample exactly once


def test_a_crashed_worker_is_reported_and_the_rest_is_kept(tiny_model_dir, tmp_path, fake_gpus):
    fake_gpus(2, "0,1")
    FakeWorker.exit_codes = {1: 137}
    with pytest.raises(RuntimeError, match=r"codes \[0, 137\].*rerun"):
        generate(tiny_args(tiny_model_dir, data_parallel_size=2), PathArgs(str(tmp_path)))


@pytest.mark.parametrize("count,visible,dp,tp", [(2, None, 2, 2), (2, "6,7", 3, 1), (8, None, 3, 3)])
def test_too_few_gpus_is_a_usage_error_before_any_model_loads(tiny_model_dir, tmp_path, fake_gpus, count,
                                                              visible, dp, tp):
    fake_gpus(count, visible)
    with pytest.raises(UsageError, match=rf"--data_parallel_size {dp} x --tensor_parallel_size {tp}"):
        generate(tiny_args(tiny_model_dir, data_parallel_size=dp, tensor_parallel_size=tp), PathArgs(str(tmp_path)))
    assert not FakeWorker.launched and not (tmp_path / "arithmetic").exists()


def test_cpu_only_workers_get_no_gpu_mask(tiny_model_dir, tmp_path, fake_gpus):
    fake_gpus(0, None)
    generate(tiny_args(tiny_model_dir, data_parallel_size=2), PathArgs(str(tmp_path)))
    assert [("CUDA_VISIBLE_DEVICES" in w.env) for w in FakeWorker.launched] == [False, False]


def test_cpu_only_workers_are_bounded_by_the_cores(tiny_model_dir, tmp_path, fake_gpus, monkeypatch):
    """Without a GPU each worker is a process loading the model on the CPU: more than the usable cores is refused,
    naming the machine's figure, before any worker starts (a fixed cap of 1024 allowed 1024 model loads)."""
    from ordergrad_trl.tasks import reward_settings

    fake_gpus(0, None)
    monkeypatch.setattr(reward_settings, "usable_cpus", lambda: 2)
    with pytest.raises(UsageError, match=r"--data_parallel_size 3: no GPU is visible, and this machine gives this "
                                         r"process 2 CPU core\(s\); .* use at most 2"):
        generate(tiny_args(tiny_model_dir, data_parallel_size=3), PathArgs(str(tmp_path)))
    assert not FakeWorker.launched and not (tmp_path / "arithmetic").exists()


# ------------------------------------------------------------------------------------------------ stops
def _model_that_ends_its_turn(path: Path, tok) -> Path:
    """Greedy: the answer token 'A', then <|im_end|>, then 'B' forever. Attention and MLP outputs are zeroed, so
    each position's logits depend on its own token only: embedding one-hots route token -> next token."""
    model = build_model(tok)
    text = tok.apply_chat_template([{"role": "user", "content": "q"}], add_generation_prompt=True, tokenize=False)
    prompt_end = tok(text, add_special_tokens=False)["input_ids"]
    a, b, im_end = tok.convert_tokens_to_ids(["A", "B", IM_END])
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        emb.zero_()
        emb[:, 3] = 1.0
        for token, dim in ((prompt_end[-1], 0), (a, 1), (im_end, 2)):
            emb[token].zero_()
            emb[token, dim] = 1.0
        head.zero_()
        head[a, 0] = head[im_end, 1] = head[b, 2] = head[b, 3] = 10.0
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_generation_stops_at_end_of_turn_when_eos_differs(tmp_path):
    tok = build_tokenizer()
    tok.eos_token = "<|endoftext|>"  # like Qwen2.5-Math base: eos is not the end-of-turn token
    assert tok.eos_token_id != tok.convert_tokens_to_ids(IM_END)
    assert tokens.end_of_turn_id(tok) == tok.convert_tokens_to_ids(IM_END)
    assert tokens.stop_token_ids(tok, [tok.eos_token_id, 7]) == [tok.eos_token_id, 7, tok.convert_tokens_to_ids(
        IM_END)]
    model_dir = _model_that_ends_its_turn(tmp_path / "m", tok)
    out = tmp_path / "run"
    generate(tiny_args(model_dir, temperature=0.0, num_samples=1, max_new_tokens=8), PathArgs(str(out)))
    gens = records.read_jsonl(out / "arithmetic" / "generations.jsonl")
    assert [(g["completion"], g["num_tokens"], g["finish_reason"]) for g in gens] == [("A", 2, "stop")] * 3


def test_end_of_turn_of_a_tokenizer_without_template_is_none():
    tok = build_tokenizer()
    tok.chat_template = None
    assert tokens.end_of_turn_id(tok) is None
    assert tokens.stop_token_ids(tok, None) == [tok.eos_token_id]


def test_system_prompt_without_chat_template(tiny_model_dir, tmp_path):
    plain = tmp_path / "plain"
    tok = build_tokenizer()
    tok.chat_template = None
    tok.save_pretrained(plain)
    for f in ("config.json", "model.safetensors", "generation_config.json"):
        (plain / f).write_bytes((Path(tiny_model_dir) / f).read_bytes())
    args = tiny_args(plain, system_prompt="Be brief.", limit=1, num_samples=1, max_new_tokens=2)
    with pytest.raises(UsageError, match="--use_chat_template false"):
        generate(args, PathArgs(str(tmp_path / "a")))
    assert not (tmp_path / "a" / "arithmetic").exists()  # refused before any weights loaded or file written
    args.use_chat_template = False  # documented: the system prompt is a plain-text prefix
    problem = load_problems("arithmetic", args)[0][0]
    ids = tokens.prompt_ids(tok, problem, use_chat_template=False)
    assert tok.decode(ids) == "Be brief.\n\n" + problem["prompt"][-1]["content"]
    assert generate(args, PathArgs(str(tmp_path / "b")))["arithmetic"]["samples"] == 1


# ------------------------------------------------------------------------------------------------ bad input
def _cli_error(capsys, main, argv) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err  # one line, no traceback
    return err[0]


def test_bad_input_is_one_line_naming_the_flag(tiny_model_dir, tmp_path, capsys, monkeypatch):
    from eval import generate as gen_mod
    from eval import report as report_mod
    from eval import run as run_mod
    from eval import score as score_mod

    monkeypatch.chdir(tmp_path)
    ref = ["--backend", "reference", "--datasets", "arithmetic", "--limit", "2", "--num_samples", "4"]
    msg = _cli_error(capsys, run_mod.main, [*ref, "--ks", "1", "8", "--output_dir", "r"])
    assert msg.startswith("eval.run: error: --ks") and "--num_samples 4" in msg
    assert not (tmp_path / "r").exists()  # refused before generating anything
    msg = _cli_error(capsys, run_mod.main, [*ref, "--objectives", "TopM:2@8", "--output_dir", "r"])
    assert "TopM:2@8" in msg
    assert "--datasets nope" in _cli_error(capsys, gen_mod.main, ["--datasets", "nope", "--backend", "reference"])
    assert "--datasets" in _cli_error(capsys, gen_mod.main, ["--datasets", "missing.jsonl", "--backend", "reference"])
    assert "--num_samples" in _cli_error(capsys, gen_mod.main, [*ref[:-1], "0"])
    assert "--model ./moved_checkpoint: path not found" in _cli_error(
        capsys, gen_mod.main, ["--model", "./moved_checkpoint", "--datasets", "arithmetic"])
    assert "--data_dir" in _cli_error(capsys, gen_mod.main, ["--datasets", "gsm8k", "--local_data", "--data_dir",
                                                             str(tmp_path / "nowhere"), "--backend", "reference"])
    for main, stage in ((score_mod.main, "score"), (report_mod.main, "report")):
        msg = _cli_error(capsys, main, ["--output_dir", "no_such_run"])
        assert msg.startswith(f"eval.{stage}: error: --output_dir no_such_run") and "generate stage" in msg
    # a run with fewer samples than a requested k, from the stage commands
    gen_mod.main([*ref, "--output_dir", "r"])
    score_mod.main(["--output_dir", "r", "--reward_workers", "1"])
    capsys.readouterr()
    msg = _cli_error(capsys, report_mod.main, ["--output_dir", "r", "--ks", "1", "16"])
    assert msg.startswith("eval.report: error: --ks 1 16") and "n = 4" in msg
    assert "--objectives" in _cli_error(capsys, report_mod.main, ["--output_dir", "r", "--objectives", "Bogus@2"])
    assert "--cvar_q" in _cli_error(capsys, report_mod.main, ["--output_dir", "r", "--cvar_q", "0"])


# ------------------------------------------------------------------------------------------------ progress
class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bars_show_on_a_terminal_only_and_can_be_disabled(tiny_model_dir, tmp_path, capfd):
    from ordergrad_trl.evaluation.progress import progress

    term = _Terminal()
    bar = progress(4, "generate toy", "sample", file=term)
    bar.set_postfix_str("problems 1/2, 9 tok/s")
    bar.update(4)
    bar.close()
    assert "generate toy" in term.getvalue() and "4/4" in term.getvalue() and "tok/s" in term.getvalue()
    for kw, stream in ((dict(disable=True), _Terminal()), ({}, io.StringIO())):  # flag, or a log file
        bar = progress(4, "generate toy", "sample", file=stream, **kw)
        bar.update(4)
        bar.close()
        assert stream.getvalue() == ""
    # the real stages under pytest (stderr captured, not a terminal): no bars in the log
    generate(tiny_args(tiny_model_dir, limit=1, num_samples=2, max_new_tokens=2), PathArgs(str(tmp_path)))
    assert "generate arithmetic" not in capfd.readouterr().err
