"""The model fingerprint (what a resume compares) counts only the files that define the model and, when a resume
is refused, names the file that changed.

Issue 28: a NOTES.txt added to a checkpoint refused the resume with "weights or config differ", naming no file.
"""

from __future__ import annotations

import json
import shutil

import pytest

from ordergrad_trl.evaluation.args import GenerateArgs, PathArgs
from ordergrad_trl.evaluation.errors import UsageError
from ordergrad_trl.evaluation.generate import generate
from ordergrad_trl.evaluation.modeling import (
    ModelSource,
    fingerprint,
    fingerprint_changes,
    is_model_file,
)
from ordergrad_trl.evaluation.provenance import _run_changes

MODEL = ["config.json", "generation_config.json", "model.safetensors", "model-00001-of-00002.safetensors",
         "model.safetensors.index.json", "pytorch_model.bin", "tokenizer.json", "tokenizer_config.json",
         "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja",
         "adapter_config.json", "adapter_model.safetensors", "added_tokens.json", "model.gguf"]
NOT_MODEL = ["NOTES.txt", "README.md", "trainer_state.json", "training_args.bin", "optimizer.pt", "scheduler.pt",
             "rng_state.pth", "log.txt", "eval_results.json", "all_results.json", "notes.json"]


@pytest.mark.parametrize("name", MODEL)
def test_model_files_count(name):
    assert is_model_file(name)


@pytest.mark.parametrize("name", NOT_MODEL)
def test_other_files_do_not_count(name):
    assert not is_model_file(name)


def fake_model(path, **files):
    path.mkdir(parents=True, exist_ok=True)
    for name, text in {"config.json": "{}", "model.safetensors": "weights", "tokenizer.json": "{}", **files}.items():
        (path / name).write_text(text)
    return ModelSource(str(path), str(path), None, str(path))


def entry(fp) -> dict:
    return {"model": {"model": "m", "base": "m", "adapter": None, "fingerprint": fp}, "prompt": {}, "sampling": {}}


def test_a_note_added_to_the_checkpoint_changes_nothing(tmp_path):
    source = fake_model(tmp_path / "ckpt")
    before = fingerprint(source)
    (tmp_path / "ckpt" / "NOTES.txt").write_text("trained on Tuesday")
    (tmp_path / "ckpt" / "trainer_state.json").write_text("{}")
    after = fingerprint(source, before)
    assert after["base"]["sha256"] == before["base"]["sha256"]
    assert fingerprint_changes(before, after) == [] and _run_changes(entry(before), entry(after)) == []


@pytest.mark.parametrize(("change", "said"), [
    (lambda d: (d / "model.safetensors").write_text("other weights"), "base file model.safetensors changed"),
    (lambda d: (d / "tokenizer.json").unlink(), "base file tokenizer.json removed"),
    (lambda d: (d / "generation_config.json").write_text("{}"), "base file generation_config.json added"),
])
def test_a_change_names_the_file(tmp_path, change, said):
    source = fake_model(tmp_path / "ckpt")
    before = fingerprint(source)
    change(tmp_path / "ckpt")
    after = fingerprint(source, before)
    assert fingerprint_changes(before, after) == [said]
    (msg,) = _run_changes(entry(before), entry(after))
    assert msg == f"model m -> m (weights or config differ): {said}"


def test_a_record_that_counted_a_note_still_resumes(tmp_path):
    """Runs recorded before this fix fingerprinted every .txt / .json: their notes must not refuse the resume."""
    source = fake_model(tmp_path / "ckpt")
    now = fingerprint(source)
    old = json.loads(json.dumps(now))
    old["base"]["files"]["NOTES.txt"] = {"size": 1, "mtime_ns": 1, "sha256": "0" * 64}
    old["base"]["sha256"] = "f" * 64
    assert _run_changes(entry(old), entry(now)) == []


def test_resume_with_a_real_model_ignores_a_note_and_names_a_changed_file(tiny_model_dir, tmp_path):
    model_dir = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, model_dir)
    args = GenerateArgs(model=str(model_dir), datasets=["arithmetic"], limit=1, num_samples=1, max_new_tokens=2)
    generate(args, PathArgs(str(tmp_path / "run"), disable_tqdm=True))
    (model_dir / "NOTES.txt").write_text("a note")
    two = GenerateArgs(**{**vars(args), "num_samples": 2})
    assert generate(two, PathArgs(str(tmp_path / "run"), disable_tqdm=True))["arithmetic"]["samples"] == 1
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    config["model_max_length"] = 12345
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError, match=r"\(weights or config differ\): base file tokenizer_config.json changed"):
        generate(two, PathArgs(str(tmp_path / "run"), disable_tqdm=True))
