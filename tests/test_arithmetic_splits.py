"""The built-in `digits20` and `chains` sets: answers against Python's own arithmetic, disjoint deterministic splits
stable across sizes, the loader, and the refusal of bad sizes."""

from __future__ import annotations

import pytest

from ordergrad_trl.tasks.arithmetic_splits import chain_answer, chains_dataset, digits20_dataset
from ordergrad_trl.tasks.data import load_math_dataset

SPLITS = ("train", "validation", "test")
SETS = {"digits20": (digits20_dataset, 1600), "chains": (chains_dataset, 15_552)}


def _key(row):
    return row["question"]


@pytest.mark.parametrize("name", SETS)
def test_answers_are_pythons_arithmetic_on_the_printed_question(name):
    build, _ = SETS[name]
    dd = build(n_train=600, n_validation=200, n_test=200)
    for split in SPLITS:
        for row in dd[split]:
            expr = row["question"].removeprefix("What is ").removesuffix("?")
            ops = row["op"]
            want = f"{row['a']} {ops[0]} {row['b']}" + (f" {ops[1]} {row['c']}" if name == "chains" else "")
            assert expr == want
            value = eval(expr)  # independent oracle: Python's precedence rules; division is exact in this set
            assert value == int(value) and row["answer"] == str(int(value))
            top = 20 if name == "digits20" else 12
            assert 1 <= row["b"] <= top and (ops == "/" or 1 <= row["a"] <= top)
            assert row["prompt"] == [{"role": "user", "content": row["question"]}]  # bare question by default
    assert chain_answer(2, "-", 3, "*", 4) == -10 and chain_answer(2, "*", 3, "-", 4) == 2


@pytest.mark.parametrize("name", SETS)
def test_splits_are_disjoint_distinct_deterministic_and_stable_across_sizes(name):
    build, total = SETS[name]
    n_train = total - 400 if name == "digits20" else 3000  # chains: a sample of its 15,552 keeps the test fast
    dd = build(n_train=n_train, n_validation=200, n_test=200, seed=0)
    keys = {split: [_key(r) for r in dd[split]] for split in SPLITS}
    assert {s: len(k) for s, k in keys.items()} == {"train": n_train, "validation": 200, "test": 200}
    assert len(set().union(*map(set, keys.values()))) == n_train + 400  # no problem twice, in any splits
    small = build(n_train=10, n_validation=200, n_test=200, seed=0)
    assert [_key(r) for r in small["test"]] == keys["test"]  # test never moves with the train size
    assert [_key(r) for r in small["validation"]] == keys["validation"]
    other = build(n_train=10, n_validation=10, n_test=200, seed=1)
    assert [_key(r) for r in other["test"]] != keys["test"]  # the seed draws another split
    assert len({r["op"] for r in dd["train"]}) == (4 if name == "digits20" else 9)  # every operation represented


@pytest.mark.parametrize("name", SETS)
def test_loader_serves_each_split_and_refuses_others(name):
    build, _ = SETS[name]
    built = build()
    for split in SPLITS:
        assert load_math_dataset(name, split=split).to_list() == built[split].to_list()
    with pytest.raises(ValueError, match=f"split for '{name}' must be 'train' or 'validation' or 'test', got 'dev'"):
        load_math_dataset(name, split="dev")
    with_system = load_math_dataset(name, split="test", system_prompt="S")
    assert with_system[0]["prompt"][0] == {"role": "system", "content": "S"}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"n_train": -1}, "n_train must be a positive int, got -1"),
    ({"n_test": 0}, "n_test must be a positive int, got 0"),
    ({"n_validation": 1.5}, "n_validation must be a positive int, got 1.5"),
    ({"seed": True}, "seed must be a non-negative int, got True"),
    ({"seed": -1}, "seed must be a non-negative int, got -1"),
    ({"n_train": 1500}, "n_train \\+ n_validation \\+ n_test must be at most 1600 \\(the distinct problems of 'digits20'\\)"),
])
def test_bad_sizes_are_refused_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        digits20_dataset(**kwargs)
