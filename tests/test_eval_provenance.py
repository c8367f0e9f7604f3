"""A run directory knows what defines its numbers: a rerun with other data, split, gold, model weights or sampling
settings is refused (exit 2, one line naming the change), `--overwrite` moves the old run aside, and adding
samples or datasets still resumes. Dataset names never lead outside `--output_dir`. The tokenizer is loaded and
a LoRA adapter merged once per run.

All runs use the reference backend (each problem's own solution), which must score 100%: a report that mixes
one set's samples with another's golds cannot.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ordergrad_trl.evaluation import evaluate, records
from ordergrad_trl.evaluation.args import GenerateArgs, PathArgs
from ordergrad_trl.evaluation.cli import command as main
from ordergrad_trl.evaluation.errors import UsageError
from ordergrad_trl.evaluation.generate import generate

FAST = dict(reward_workers=1, bootstrap_samples=20, plot=False, disable_tqdm=True)


def write_set(path: Path, pairs) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"problem": q, "answer": a}) + "\n" for q, a in pairs))
    return path


@pytest.fixture
def two_sets(tmp_path):
    a = write_set(tmp_path / "A" / "test.jsonl", [("1 + 1?", "2"), ("2 + 2?", "4"), ("3 + 3?", "6")])
    b = write_set(tmp_path / "B" / "test.jsonl", [("5 + 5?", "10"), ("6 + 6?", "12"), ("7 + 7?", "14")])
    return a, b


def cli_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def ref_run(*extra) -> list[str]:
    return ["run", "--backend", "reference", "--reward_workers", "1", "--bootstrap_samples", "20", "--plot", "false",
            "--disable_tqdm", *extra]


@pytest.mark.parametrize("second_n", [2, 4])
def test_other_data_in_the_same_output_dir_is_refused(two_sets, tmp_path, capsys, second_n):
    a, b = two_sets
    out = tmp_path / "run"
    main(ref_run("--datasets", str(a), "--num_samples", "2", "--output_dir", str(out)))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    msg = cli_error(capsys, ref_run("--datasets", str(b), "--num_samples", str(second_n), "--output_dir", str(out)))
    assert msg.startswith("ordergrad-eval run: error: --output_dir") and "test: the question of problem" in msg
    assert str(b) in msg and "--overwrite" in msg
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # nothing touched
    # --overwrite: the old run is moved aside, whole, and B is evaluated afresh (100% on the reference backend)
    report = main(ref_run("--datasets", str(b), "--num_samples", str(second_n), "--output_dir", str(out),
                          "--overwrite"))["report"]
    ds = report["datasets"]["test"]
    assert ds["num_problems"] == 3 and ds["num_samples"] == second_n
    assert ds["metrics"]["pass@1"]["value"] == 1.0
    (aside,) = tmp_path.glob("run.replaced-*")
    assert {aside / p.relative_to(out): v for p, v in before.items()} == {
        p: p.read_bytes() for p in aside.rglob("*") if p.is_file()}
    golds = [p["answer"] for p in records.read_jsonl(out / "test" / "problems.jsonl")]
    assert golds == ["10", "12", "14"]


def test_an_edited_gold_is_refused_and_named(two_sets, tmp_path, capsys):
    a, _ = two_sets
    out = tmp_path / "run"
    main(ref_run("--datasets", str(a), "--num_samples", "2", "--output_dir", str(out)))
    write_set(a, [("1 + 1?", "2"), ("2 + 2?", "5"), ("3 + 3?", "6")])
    msg = cli_error(capsys, ref_run("--datasets", str(a), "--num_samples", "2", "--output_dir", str(out)))
    assert "the gold of problem 'custom-test-1' changed" in msg and '"4" -> "5"' in msg


def test_another_split_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    main(ref_run("--datasets", "arithmetic", "--limit", "2", "--num_samples", "1", "--output_dir", str(out)))
    msg = cli_error(capsys, ref_run("--datasets", "arithmetic", "--limit", "2", "--num_samples", "1", "--split",
                                    "train", "--output_dir", str(out)))
    assert "arithmetic: split 'test' -> 'train'" in msg


def test_more_samples_problems_and_datasets_resume(two_sets, tmp_path):
    a, _ = two_sets
    out = tmp_path / "run"
    evaluate(output_dir=out, backend="reference", datasets=[str(a)], limit=2, num_samples=2, **FAST)
    first = (out / "test" / "generations.jsonl").read_bytes()
    rep = evaluate(output_dir=out, backend="reference", datasets=[str(a), "arithmetic"], limit=3, num_samples=4,
                   ks=[1, 4], **FAST)
    assert (out / "test" / "generations.jsonl").read_bytes().startswith(first)  # kept, only the rest added
    for name in ("test", "arithmetic"):
        assert rep["datasets"][name]["num_problems"] == 3 and rep["datasets"][name]["num_samples"] == 4
        assert rep["datasets"][name]["metrics"]["pass@4"]["value"] == 1.0
    prov = rep["provenance"]["datasets"]
    assert prov["test"]["limit"] == 3 and prov["test"]["num_problems"] == 3 and prov["test"]["source"] == str(a)
    # the report of a directory of generations, from Python
    again = evaluate(generations=out, ks=[1, 4], **{k: v for k, v in FAST.items()})
    assert again["datasets"] == rep["datasets"]


def test_changed_weights_of_a_local_checkpoint_are_refused(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    model_dir = tmp_path / "ckpt"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model.save_pretrained(model_dir)
    for f in Path(tiny_model_dir).iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            (model_dir / f.name).write_bytes(f.read_bytes())
    args = GenerateArgs(model=str(model_dir), datasets=["arithmetic"], limit=1, num_samples=1, max_new_tokens=2)
    generate(args, PathArgs(str(tmp_path / "run")))
    prov = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert len(prov["model"]["fingerprint"]["base"]["sha256"]) == 64
    moved = tmp_path / "moved_ckpt"  # the same weights elsewhere are the same model: the run resumes
    shutil.copytree(model_dir, moved)
    assert generate(GenerateArgs(**{**vars(args), "model": str(moved), "num_samples": 2}),
                    PathArgs(str(tmp_path / "run")))["arithmetic"]["samples"] == 1
    model.lm_head.weight.data[0, 0] += 1.0  # one weight
    model.save_pretrained(model_dir)
    with pytest.raises(UsageError, match=r"model .*moved_ckpt -> .*/ckpt \(weights or config differ\)"):
        generate(args, PathArgs(str(tmp_path / "run")))


def test_a_run_without_provenance_is_not_resumed(tmp_path):
    out = tmp_path / "old"
    (out / "arithmetic").mkdir(parents=True)
    (out / "generation_config.json").write_text("{}")
    records.write_jsonl_atomic(out / "arithmetic" / "problems.jsonl", [{"id": "arithmetic-test-00000"}])
    args = GenerateArgs(datasets=["arithmetic"], backend="reference", limit=1, num_samples=1)
    with pytest.raises(UsageError, match="written without provenance"):
        generate(args, PathArgs(str(out)))


def test_a_kill_while_the_run_is_written_resumes(two_sets, tmp_path, monkeypatch):
    """provenance.json is written before the problems: a kill between the two leaves a run that resumes."""
    a, _ = two_sets
    out = tmp_path / "run"

    def killed(*args, **kwargs):
        assert (out / "provenance.json").is_file()  # already there when the first problems file is written
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(records, "write_jsonl_atomic", killed)
        with pytest.raises(KeyboardInterrupt):
            evaluate(output_dir=out, backend="reference", datasets=[str(a)], num_samples=2, **FAST)
    assert not (out / "test" / "problems.jsonl").exists()
    rep = evaluate(output_dir=out, backend="reference", datasets=[str(a)], num_samples=2, **FAST)
    assert rep["datasets"]["test"]["metrics"]["pass@1"]["value"] == 1.0 and rep["datasets"]["test"]["num_problems"] == 3


@pytest.mark.parametrize("content", ['{"model": ', "[]", '{"schema": 1}'])
def test_a_damaged_provenance_file_is_named_and_overwrite_moves_it_aside(tmp_path, capsys, content):
    out = tmp_path / "run"
    main(ref_run("--datasets", "arithmetic", "--limit", "1", "--num_samples", "1", "--output_dir", str(out)))
    (out / "provenance.json").write_text(content)
    for stage in (ref_run, lambda *a: ["report", "--output_dir", str(out)]):
        msg = cli_error(capsys, stage("--datasets", "arithmetic", "--limit", "1", "--num_samples", "1",
                                      "--output_dir", str(out)))
        assert f"{out / 'provenance.json'}: not " in msg and "--overwrite" in msg
    main(ref_run("--datasets", "arithmetic", "--limit", "1", "--num_samples", "1", "--output_dir", str(out),
                 "--overwrite"))
    (aside,) = tmp_path.glob("run.replaced-*")
    assert (aside / "provenance.json").read_text() == content and json.loads((out / "report.json").read_text())


# ------------------------------------------------------------------------------------------------ paths
@pytest.mark.parametrize("name", ["...jsonl", ".hidden.jsonl", "merged_model.jsonl"])
def test_dataset_names_cannot_leave_or_clash_inside_the_output_dir(tmp_path, capsys, name):
    data = write_set(tmp_path / "data" / name, [("1 + 1?", "2")])
    parent = tmp_path / "parent"
    parent.mkdir()
    out = parent / "run"
    msg = cli_error(capsys, ref_run("--datasets", str(data), "--output_dir", str(out)))
    assert f"--datasets {data}" in msg and "rename the file" in msg
    assert list(parent.iterdir()) == []  # nothing written, inside or beside --output_dir


def test_two_files_with_one_stem_are_refused(two_sets, tmp_path, capsys):
    a, b = two_sets
    msg = cli_error(capsys, ref_run("--datasets", str(a), str(b), "--output_dir", str(tmp_path / "run")))
    assert "would both be stored as 'test'" in msg
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------------ loads
def test_tokenizer_loaded_and_adapter_merged_once_per_run(tiny_model_dir, tmp_path, monkeypatch):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter = tmp_path / "adapter"
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                          LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    lora.save_pretrained(adapter)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(adapter)
    calls = {"tokenizer": 0, "adapter": 0}
    real_tok, real_peft = AutoTokenizer.from_pretrained, PeftModel.from_pretrained

    def count(kind, real):
        def wrapper(*a, **k):
            calls[kind] += 1
            return real(*a, **k)

        return wrapper

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", count("tokenizer", real_tok))
    monkeypatch.setattr(PeftModel, "from_pretrained", count("adapter", real_peft))
    rep = evaluate(str(adapter), output_dir=tmp_path / "run", datasets=["arithmetic", "digits"], limit=2,
                   num_samples=2, max_new_tokens=2, batch_size=4, ks=[1, 2], **FAST)
    assert calls == {"tokenizer": 1, "adapter": 1}
    assert set(rep["datasets"]) == {"arithmetic", "digits"}
    assert rep["provenance"]["model"]["adapter"] == str(adapter)


def test_a_long_run_name_is_moved_aside_within_the_name_limit(tmp_path):
    """--overwrite renames the old run to `<name>.replaced-<stamp>`: a name near the file system's 255-byte limit is
    cut and keeps a hash (it used to fail with OSError: File name too long)."""
    from ordergrad_trl.evaluation.provenance import _aside_name, _move_aside

    out = tmp_path / ("r" * 250)
    out.mkdir()
    (out / "x").write_text("kept")
    dest = _move_aside(out)
    assert not out.exists() and (dest / "x").read_text() == "kept" and len(dest.name.encode()) <= 255
    assert ".replaced-" in dest.name
    assert _aside_name("run", ".replaced-1") == "run.replaced-1"  # short names unchanged
    assert _aside_name("é" * 200, ".s") != _aside_name("é" * 199 + "e", ".s")  # cut names stay distinct
