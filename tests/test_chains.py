"""The built-in `chains` task: answers against Python's own arithmetic, disjoint deterministic splits, the loader."""

from __future__ import annotations

import pytest

from ordergrad_trl.tasks.chains import chain_answer, chains_dataset
from ordergrad_trl.tasks.data import load_math_dataset

SPLITS = ("train", "validation", "test")


def _key(row):
    return row["a"], row["op"], row["b"], row["c"]


def test_answers_are_pythons_arithmetic_on_the_printed_question():
    dd = chains_dataset(n_train=600, n_validation=200, n_test=200)
    for split in SPLITS:
        for row in dd[split]:
            expr = row["question"].removeprefix("What is ").removesuffix("?")
            assert expr == f"{row['a']} {row['op'][0]} {row['b']} {row['op'][1]} {row['c']}"
            assert row["answer"] == str(eval(expr))  # independent oracle: Python's precedence rules
            assert all(1 <= row[k] <= 12 for k in "abc") and set(row["op"]) <= set("+-*")
            assert row["prompt"] == [{"role": "user", "content": row["question"]}]  # bare question by default
    assert chain_answer(2, "-", 3, "*", 4) == -10 and chain_answer(2, "*", 3, "-", 4) == 2


def test_splits_are_disjoint_distinct_deterministic_and_stable_across_sizes():
    dd = chains_dataset(n_train=3000, n_validation=200, n_test=200, seed=0)
    keys = {split: [_key(r) for r in dd[split]] for split in SPLITS}
    assert {s: len(k) for s, k in keys.items()} == {"train": 3000, "validation": 200, "test": 200}
    assert all(len(set(k)) == len(k) for k in keys.values())  # no problem twice in a split
    assert not set(keys["train"]) & set(keys["validation"]) and not set(keys["train"]) & set(keys["test"])
    assert not set(keys["validation"]) & set(keys["test"])
    small = chains_dataset(n_train=10, n_validation=200, n_test=200, seed=0)
    assert [_key(r) for r in small["test"]] == keys["test"]  # test never moves with the train size
    assert [_key(r) for r in small["validation"]] == keys["validation"]
    other = chains_dataset(n_train=10, n_validation=10, n_test=200, seed=1)
    assert [_key(r) for r in other["test"]] != keys["test"]  # the seed draws another split
    ops = {r["op"] for r in dd["train"]}
    assert len(ops) == 9  # every operation pair is represented


def test_loader_serves_each_split_and_refuses_others():
    for split in SPLITS:
        assert load_math_dataset("chains", split=split).to_list() == chains_dataset()[split].to_list()
    with pytest.raises(ValueError, match="split for 'chains' must be 'train' or 'validation' or 'test', got 'dev'"):
        load_math_dataset("chains", split="dev")
    with_system = load_math_dataset("chains", split="test", system_prompt="S")
    assert with_system[0]["prompt"][0] == {"role": "system", "content": "S"}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"n_train": -1}, "n_train must be a positive int, got -1"),
    ({"n_test": 0}, "n_test must be a positive int, got 0"),
    ({"n_validation": 1.5}, "n_validation must be a positive int, got 1.5"),
    ({"seed": -1}, "seed must be a non-negative int, got -1"),
    ({"seed": True}, "seed must be a non-negative int, got True"),
    ({"n_train": 15_500}, "n_train \\+ n_validation \\+ n_test must be at most 15552"),
])
def test_bad_sizes_are_refused_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        chains_dataset(**kwargs)
