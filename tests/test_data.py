"""Tests for ordergrad_trl.tasks.data: gold extraction per benchmark, prompt format, loading, the arithmetic set."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import datasets
import pytest

from ordergrad_trl.tasks import data as data_mod
from ordergrad_trl.tasks.arithmetic import arithmetic_dataset, digits_dataset
from ordergrad_trl.tasks.data import (
    DEFAULT_USER_TEMPLATE,
    MATH_SETS,
    REFERENCE_SOLUTION_SETS,
    get_math_set,
    last_boxed,
    load_math_dataset,
    shared_data_dir,
)
from ordergrad_trl.tasks.sets import set_table
from helpers import bounded

DATA = shared_data_dir()


def _raw(file: str) -> list[dict]:
    # Test-side oracle reads the file independently of the library's datasets-based loader.
    with open(DATA / file, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _local(name: str, **kwargs) -> datasets.Dataset:
    spec = get_math_set(name)
    if not (DATA / spec.local_file).is_file():
        pytest.skip(f"shared benchmark file {DATA / spec.local_file} absent (set ORDERGRAD_SHARED_DATA)")
    return load_math_dataset(name, local=True, **kwargs)


# ------------------------------------------------------------------------------------------------ last_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so $\\boxed{5}$.", "5"),
        ("\\boxed{1} then \\boxed{\\frac{a}{b^{2}}} done", "\\frac{a}{b^{2}}"),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("answer \\fbox{7}", "7"),
        ("$\\boxed 5$", "5"),
        ("\\boxed{unclosed {x}", None),
        ("no box here", None),
        ("", None),
        (None, None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


# ------------------------------------------------------------------------------------------------ registry


def test_registry_names_aliases_and_unknown_name():
    docs = (Path(__file__).resolve().parents[1] / "docs" / "evaluation.md").read_text()
    assert set_table() in docs, "docs/evaluation.md's Benchmarks table is stale: paste set_table() there"
    assert {"math500", "gsm8k", "digits"} <= set(MATH_SETS)  # the README's and the comparison's sets
    assert get_math_set("MATH-500") is MATH_SETS["math500"]
    assert get_math_set("HuggingFaceH4/MATH-500") is MATH_SETS["math500"]
    assert get_math_set("minerva_math") is MATH_SETS["minerva"]
    assert get_math_set("AIME_2024") is MATH_SETS["aime24"]
    assert MATH_SETS["gsm8k"].hub_id == "openai/gsm8k" and MATH_SETS["gsm8k"].hub_config == "main"
    with pytest.raises(ValueError, match="unknown math set 'mathh'.*valid names: math, math500"):
        load_math_dataset("mathh")
    with pytest.raises(ValueError, match="valid names"):
        get_math_set("gsm9k")


def test_reference_solution_sets():
    assert set(REFERENCE_SOLUTION_SETS) == {"math", "math500", "gsm8k", "minerva"}
    assert not MATH_SETS["aime24"].has_reference_solution
    with pytest.raises(ValueError, match="keep_solution=True but 'arithmetic' has no reference"):
        load_math_dataset("arithmetic", "test", keep_solution=True)


# ------------------------------------------------------------------------------------------------ benchmarks


def test_gsm8k_gold_and_reference_solution():
    ds = _local("gsm8k", keep_solution=True)
    raw = _raw("gsm8k_test.jsonl")
    assert len(ds) == len(raw) == 1319
    with_commas = 0
    for row, src in zip(ds, raw):
        last_line = src["answer"].strip().splitlines()[-1]
        assert last_line.startswith("####")
        with_commas += "," in last_line
        assert int(row["answer"]) == int(last_line[4:].replace(",", ""))
        assert "," not in row["answer"]
        assert row["question"] == src["question"].strip()
        # The reference solution, scored like a completion, must yield the gold.
        assert last_boxed(row["solution"]) == row["answer"] and "<<" not in row["solution"]
    assert with_commas == 14  # the README's count of golds with thousands separators
    assert ds[0]["answer"] == "18" and ds[0]["id"] == "gsm8k-test-0" and ds[1318]["id"] == "gsm8k-test-1318"


def test_math500_gold_metadata_and_reference_solution():
    ds = _local("math500", keep_solution=True)
    raw = _raw("math500_test.jsonl")
    assert len(ds) == 500
    assert ds.column_names == ["prompt", "answer", "question", "id", "solution", "subject", "level"]
    for row, src in zip(ds, raw):
        assert row["answer"] == src["answer"]
        assert row["id"] == f"math500-{src['unique_id']}"
        assert (row["subject"], row["level"]) == (src["subject"], src["level"])
        assert last_boxed(row["solution"]) == row["answer"]
    assert len(set(ds["id"])) == 500
    bare = _local("math500", keep_metadata=False)
    assert bare.column_names == ["prompt", "answer", "question", "id"]


def test_minerva_gold_is_last_balanced_boxed():
    ds = _local("minerva", keep_solution=True)
    raw = _raw("minerva_math_test.jsonl")
    assert len(ds) == 272
    nested = 0
    for row, src in zip(ds, raw):
        gold, solution = row["answer"], src["solution"]
        start = solution.rfind("\\boxed{")
        assert solution[start:].startswith("\\boxed{" + gold + "}")
        depth = 0
        for ch in gold:  # balanced and never closing below zero
            depth += (ch == "{") - (ch == "}")
            assert depth >= 0
        assert depth == 0
        nested += "{" in gold
    assert nested > 10  # the balanced-brace path is exercised, not just flat answers
    assert ds[0]["answer"] == "1.6" and ds[0]["id"] == "minerva-0" and ds[0]["type"] == raw[0]["type"]


def test_olympiadbench_gold_strips_dollars():
    ds = _local("olympiadbench")
    raw = _raw("olympiadbench_test.jsonl")
    assert len(ds) == 675
    for row, src in zip(ds, raw):
        (final,) = src["final_answer"]
        assert "$" not in row["answer"] and row["answer"] == final.replace("$", "").strip()
        assert row["id"] == f"olympiadbench-{src['id']}"
        assert row["question"] == src["question"].strip()
    by_id = {row["id"]: row["answer"] for row in ds}
    multi = next(src for src in raw if src["final_answer"] == ["$69$,$84$"])
    assert by_id[f"olympiadbench-{multi['id']}"] == "69,84"
    assert {"subfield", "answer_type", "unit", "is_multiple_answer"} <= set(ds.column_names)


def test_amc23_float_answers_become_integers():
    ds = _local("amc23")
    raw = _raw("amc23_test.jsonl")
    assert ds[0]["answer"] == "27"
    for row, src in zip(ds, raw):
        assert row["answer"].lstrip("-").isdigit() and int(row["answer"]) == src["answer"]


def test_aime_answers_are_canonical_integers():
    aime25 = _local("aime25")
    assert aime25[0]["answer"] == "70" and aime25[0]["id"] == "aime25-0"
    assert aime25["answer"] == [str(src["answer"]) for src in _raw("aime25_test.jsonl")]
    aime24 = _local("aime24")
    raw = _raw("aime24_test.jsonl")
    assert "025" in [src["answer"] for src in raw]
    for row, src in zip(aime24, raw):
        assert row["answer"] == str(int(src["answer"])) and 0 <= int(row["answer"]) <= 999
        assert not (len(row["answer"]) > 1 and row["answer"].startswith("0"))


def test_prompt_format_default_and_system_prompt():
    ds = _local("aime25")
    first = ds[0]
    instruction = "\nPlease reason step by step, and put your final answer within \\boxed{}."
    assert first["prompt"] == [{"role": "user", "content": first["question"] + instruction}]
    with_system = _local("aime25", system_prompt="You are a careful mathematician.", user_template="Q: {question}\nA:")
    assert with_system[0]["prompt"] == [
        {"role": "system", "content": "You are a careful mathematician."},
        {"role": "user", "content": f"Q: {first['question']}\nA:"},
    ]
    with pytest.raises(ValueError, match="user_template must contain '\\{question\\}'"):
        _local("aime25", user_template="no placeholder")


def test_local_split_and_source_errors(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="holds the 'test' split only"):
        load_math_dataset("gsm8k", split="train", local=True)
    with pytest.raises(ValueError, match="'math' has no local file"):
        load_math_dataset("math", local=True)
    with pytest.raises(FileNotFoundError, match="local file for 'aime25' not found"):
        load_math_dataset("aime25", local=True, data_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="data file not found"):
        load_math_dataset(str(tmp_path / "missing.jsonl"))
    (tmp_path / "rows.csv").write_text("problem,answer\n1+1,2\n")
    with pytest.raises(ValueError, match="expected a .jsonl, .json or .parquet"):
        load_math_dataset(tmp_path / "rows.csv")
    # ORDERGRAD_LOCAL_DATA switches registry names to the local files.
    (tmp_path / "aime25_test.jsonl").write_text(json.dumps({"problem": "Compute 2+3.", "answer": 5, "id": "x"}) + "\n")
    monkeypatch.setenv("ORDERGRAD_LOCAL_DATA", "1")
    monkeypatch.setenv("ORDERGRAD_SHARED_DATA", str(tmp_path))
    ds = load_math_dataset("aime25")
    assert ds["answer"] == ["5"] and ds["id"] == ["aime25-x"]


# ------------------------------------------------------------------------------------------------ files


def test_generic_jsonl_and_parquet(tmp_path):
    rows = [
        {"problem": "What is 2+2?", "answer": "4", "solution": "2+2=\\boxed{4}"},
        {"question": "What is half of 10?", "solution": "Half of 10 is $\\boxed{5}$."},
        {"problem": "What is 3*3?", "answer": "9"},
    ]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = load_math_dataset(path)
    assert ds["answer"] == ["4", "5", "9"]
    assert ds["question"] == ["What is 2+2?", "What is half of 10?", "What is 3*3?"]
    assert ds["id"] == ["custom-test-0", "custom-test-1", "custom-test-2"]
    assert ds[1]["prompt"][0]["content"].startswith("What is half of 10?\n")

    parquet = tmp_path / "mine.parquet"
    ds.select_columns(["question", "answer"]).to_parquet(str(parquet))
    again = load_math_dataset(parquet, split="train")
    assert again["answer"] == ["4", "5", "9"] and again["id"][0] == "custom-train-0"


def test_file_with_registry_spec_and_unanswerable_rows(tmp_path):
    rows = [
        {"question": "Sam has 3 pens and gets 2. How many?", "answer": "3 + 2 = <<3+2=5>>5\n#### 5"},
        {"question": "A farm has 1,000 hens and buys 200. How many?", "answer": "1000+200=1200\n#### 1,200"},
        {"question": "A row without a final answer line.", "answer": "no marker"},
        {"question": "Three 4s?", "answer": "3*4=12\n#### 12"},
    ]
    path = tmp_path / "grade_school.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match="gsm8k row 2: no gold answer could be extracted"):
        load_math_dataset(path, spec="gsm8k")
    ds = load_math_dataset(path, spec="gsm8k", drop_unanswerable=True, keep_solution=True)
    assert ds["answer"] == ["5", "1200", "12"]
    assert ds["id"] == ["gsm8k-test-0", "gsm8k-test-1", "gsm8k-test-3"]  # source row indices survive the drop
    assert ds[0]["solution"] == "3 + 2 = 5\nThe final answer is $\\boxed{5}$."


# ------------------------------------------------------------------------------------------------ hub


def test_hub_failure_is_wrapped_with_offline_hint(monkeypatch):
    def unreachable(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'HuggingFaceH4/MATH-500' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(data_mod.datasets, "load_dataset", unreachable)
    with pytest.raises(ConnectionError) as info:
        load_math_dataset("math500")
    message = str(info.value)
    assert "'math500' (HuggingFaceH4/MATH-500" in message and "Hub is unreachable" in message
    assert "local=True" in message and "math500_test.jsonl" in message and "spec='math500'" in message
    assert isinstance(info.value.__cause__, ConnectionError)


def test_hub_offline_real_error_is_clear():
    # Real datasets/huggingface_hub offline path, in a subprocess so HF_HUB_OFFLINE is read at import.
    code = (
        "from ordergrad_trl.tasks.data import load_math_dataset\n"
        "try:\n"
        "    load_math_dataset('ordergrad-test/does-not-exist', split='test')\n"
        "except ConnectionError as e:\n"
        "    print('WRAPPED:', e)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    out = bounded.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "WRAPPED: could not load dataset 'custom' (ordergrad-test/does-not-exist" in out.stdout, out.stderr[-2000:]
    assert "Hub is unreachable" in out.stdout and ".jsonl" in out.stdout


def test_unregistered_hub_id_needs_split():
    with pytest.raises(ValueError, match="split is required"):
        load_math_dataset("someone/some-math-set")


# ------------------------------------------------------------------------------------------------ arithmetic

_ORACLE = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def test_arithmetic_answers_are_correct_and_easy():
    dd = arithmetic_dataset(n_train=300, n_test=100, seed=3)
    for split in ("train", "test"):
        for row in dd[split]:
            a, b, op = row["a"], row["b"], row["op"]
            if op == "/":
                assert a % b == 0
                expected = a // b
            else:
                expected = _ORACLE[op](a, b)
            assert row["answer"] == str(expected) and expected > 0
            assert max(a, b) <= 144 and expected <= 144
            assert f" {a} " in f" {row['question']} " and f" {b} " in f" {row['question']} "
            user = DEFAULT_USER_TEMPLATE.replace("{question}", row["question"])
            assert row["prompt"] == [{"role": "user", "content": user}]
    assert set(dd["train"]["op"]) == {"+", "-", "*", "/"}
    assert len(set(dd["train"]["id"])) == 300 and dd["test"][0]["id"] == "arithmetic-test-00000"


def test_arithmetic_is_deterministic_and_splits_do_not_overlap():
    first, second = arithmetic_dataset(seed=0), arithmetic_dataset(seed=0)
    for split in ("train", "test"):
        assert first[split].to_dict() == second[split].to_dict()
    assert arithmetic_dataset(seed=1)["test"]["question"] != first["test"]["question"]
    keys = {split: {(r["op"], r["a"], r["b"]) for r in first[split]} for split in ("train", "test")}
    assert len(keys["test"]) == len(first["test"])  # test problems are distinct
    assert not keys["train"] & keys["test"]
    assert not set(first["train"]["question"]) & set(first["test"]["question"])
    # More train rows than distinct problems left: train repeats problems, test stays disjoint.
    big = arithmetic_dataset(n_train=2000, n_test=100, seed=0)
    big_keys = {(r["op"], r["a"], r["b"]) for r in big["train"]}
    assert len(big["train"]) == 2000 and not big_keys & {(r["op"], r["a"], r["b"]) for r in big["test"]}


def test_arithmetic_via_registry_and_bad_sizes():
    assert load_math_dataset("arithmetic", split="test").to_dict() == arithmetic_dataset()["test"].to_dict()
    assert len(load_math_dataset("Arithmetic")) == 1000
    with pytest.raises(ValueError, match="split for 'arithmetic' must be 'train' or 'test'"):
        load_math_dataset("arithmetic", split="validation")
    with pytest.raises(ValueError, match="n_test must be at most"):
        arithmetic_dataset(n_test=10_000)
    with pytest.raises(ValueError, match="n_train must be a non-negative int"):
        arithmetic_dataset(n_train=-1)


# ------------------------------------------------------------------------------------------------ digits


def test_digits_answers_prompts_and_coverage():
    dd = digits_dataset(n_train=1000, n_test=200, seed=0)
    for split in ("train", "test"):
        for row in dd[split]:
            a, b, op = row["a"], row["b"], row["op"]
            # independent oracle: Python's own arithmetic on the printed question
            assert row["question"] == f"What is {a} {op} {b}?"
            expected = eval(f"{a} {op} {b}")
            assert float(row["answer"]) == expected and expected == int(expected)
            assert 1 <= b <= 12 and (op == "/" or 1 <= a <= 12)
            assert row["prompt"] == [{"role": "user", "content": row["question"]}]  # bare question by default
    keys = {split: {(r["op"], r["a"], r["b"]) for r in dd[split]} for split in ("train", "test")}
    assert len(keys["test"]) == 200 and not keys["train"] & keys["test"]
    assert len(keys["train"] | keys["test"]) == 4 * 144  # every distinct problem is used
    with_template = load_math_dataset("digits", split="test", user_template="Q: {question}", system_prompt="S")
    assert with_template[0]["prompt"] == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q: " + dd["test"][0]["question"]},
    ]
    assert load_math_dataset("digits", split="test").to_dict() == dd["test"].to_dict()
    with pytest.raises(ValueError, match="split for 'digits' must be 'train' or 'test'"):
        load_math_dataset("digits", split="validation")
    with pytest.raises(ValueError, match="n_test must be at most 288"):
        digits_dataset(n_test=289)
