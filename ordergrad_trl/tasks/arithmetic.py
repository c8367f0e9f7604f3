"""Built-in offline task families with exact integer answers: `arithmetic` (word problems) and `digits` (bare sums).

Their registry entries (`ARITHMETIC_SPEC`, `DIGITS_SPEC`, in `sets.MATH_SETS`) are defined here, beside the
generators they name (`load_math_dataset("digits", split="train")`). `digits` is calibrated for
SmolLM2-135M-Instruct at T=0.7: its base pass@1 is inside (0, 1) with per-problem success spread from 0 to 1,
which is what a group-relative RL signal needs (measured in `studies/compare_objectives.py`, base unit).
"""

from __future__ import annotations

import operator
import random
from typing import TYPE_CHECKING, Any

from .prompts import DEFAULT_USER_TEMPLATE, format_rows
from .spec import Generated, MathSetSpec, field, first_field

if TYPE_CHECKING:
    import datasets

__all__ = ["ARITHMETIC_SPEC", "DIGITS_SPEC", "arithmetic_dataset", "digits_dataset"]

_NAMES = ("Tom", "Anna", "Ben", "Maria", "Sam", "Lily", "Omar", "Priya", "Jack", "Mia")
_ITEMS = ("apples", "oranges", "pencils", "marbles", "cookies", "stickers", "books", "balloons", "cards", "candies")
_TEMPLATES = {
    "+": (
        "{name} has {a} {item} and buys {b} more. How many {item} does {name} have now?",
        "There are {a} {item} in a basket. {name} puts {b} more {item} in the basket. "
        "How many {item} are in the basket now?",
    ),
    "-": (
        "{name} has {a} {item} and gives {b} of them to a friend. How many {item} does {name} have left?",
        "A basket holds {a} {item}. {name} takes {b} {item} out of the basket. How many {item} are left in the basket?",
    ),
    "*": (
        "{name} buys {a} bags with {b} {item} in each bag. How many {item} does {name} buy in total?",
        "There are {a} boxes and each box holds {b} {item}. How many {item} are there in all?",
    ),
    "/": (
        "{name} shares {a} {item} equally among {b} friends. How many {item} does each friend get?",
        "{name} packs {a} {item} equally into {b} boxes. How many {item} go in each box?",
    ),
}
_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.floordiv}


def _arithmetic_keys() -> list[tuple[str, int, int]]:
    # Every distinct (op, a, b) problem; small operands keep it within reach of a 135M model.
    keys = [("+", a, b) for a in range(2, 31) for b in range(2, 31)]
    keys += [("-", a, b) for a in range(4, 31) for b in range(2, a)]
    keys += [("*", a, b) for a in range(2, 13) for b in range(2, 13)]
    keys += [("/", b * q, b) for b in range(2, 13) for q in range(2, 13)]
    return keys


def _digits_keys() -> list[tuple[str, int, int]]:
    # Operands 1..12 and exact division: single digits are easy for a 135M model, teens much harder.
    keys = [(op, a, b) for op in "+-*" for a in range(1, 13) for b in range(1, 13)]
    keys += [("/", b * q, b) for b in range(1, 13) for q in range(1, 13)]
    return keys


def _split_keys(keys: list, n_train: int, n_test: int, seed: int) -> tuple[list, list, random.Random]:
    """Disjoint test and train keys: test draws distinct keys, train cycles through the rest (reshuffled per pass)."""
    for field_name, value in (("n_train", n_train), ("n_test", n_test), ("seed", seed)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{field_name} must be a non-negative int, got {value!r}")
    if n_test > len(keys) // 2:
        raise ValueError(
            f"n_test must be at most {len(keys) // 2} (half the {len(keys)} distinct problems), got {n_test}"
        )
    rng = random.Random(seed)
    keys = list(keys)
    rng.shuffle(keys)
    test_keys, pool = keys[:n_test], keys[n_test:]
    train_keys: list = []
    while len(train_keys) < n_train:
        rng.shuffle(pool)
        train_keys += pool[: n_train - len(train_keys)]
    return train_keys, test_keys, rng


def _build(spec: MathSetSpec, train_keys, test_keys, question_of, *, system_prompt, user_template
           ) -> datasets.DatasetDict:
    import datasets  # here: the set registry (and `--datasets`' help) is read without loading the datasets library

    splits = {}
    for split, split_keys in (("train", train_keys), ("test", test_keys)):
        columns: dict[str, list[Any]] = {k: [] for k in ("question", "answer", "id", "a", "b", "op")}
        for i, (op, a, b) in enumerate(split_keys):
            columns["question"].append(question_of(op, a, b))
            columns["answer"].append(str(_OPS[op](a, b)))
            columns["id"].append(f"{split}-{i:05d}")
            columns["a"].append(a)
            columns["b"].append(b)
            columns["op"].append(op)
        splits[split] = format_rows(
            datasets.Dataset.from_dict(columns),
            spec,
            split,
            system_prompt=system_prompt,
            user_template=user_template,
            keep_metadata=True,
            keep_solution=False,
            drop_unanswerable=False,
        )
    return datasets.DatasetDict(splits)


def digits_dataset(
    n_train: int = 2000,
    n_test: int = 200,
    seed: int = 0,
    *,
    system_prompt: str | None = None,
    user_template: str = "{question}",
) -> datasets.DatasetDict:
    """Bare one-step sums `What is a op b?` (+, -, *, exact /; operands 1..12): 576 distinct problems, offline.

    Short prompts and answers (a few tokens when the model answers directly), so a CPU run can afford many
    rollouts. Train and test share no (op, a, b); columns as in `arithmetic_dataset`.
    """
    train_keys, test_keys, _ = _split_keys(_digits_keys(), n_train, n_test, seed)
    return _build(
        DIGITS_SPEC,
        train_keys,
        test_keys,
        lambda op, a, b: f"What is {a} {op} {b}?",
        system_prompt=system_prompt,
        user_template=user_template,
    )


def arithmetic_dataset(
    n_train: int = 1000,
    n_test: int = 200,
    seed: int = 0,
    *,
    system_prompt: str | None = None,
    user_template: str = DEFAULT_USER_TEMPLATE,
) -> datasets.DatasetDict:
    """Seeded one-step arithmetic word problems (+, -, *, exact /) with integer answers, offline.

    Train and test share no (op, a, b) problem, so test accuracy is not memorization of the same sum with other
    names. Test draws distinct problems; train cycles through the remaining ones (reshuffled each pass) when
    `n_train` exceeds them. Columns: `prompt`, `answer`, `question`, `id`, and the operands `a`, `b`, `op`
    (answer == a op b).
    """
    train_keys, test_keys, rng = _split_keys(_arithmetic_keys(), n_train, n_test, seed)

    def question(op: str, a: int, b: int) -> str:
        return rng.choice(_TEMPLATES[op]).format(name=rng.choice(_NAMES), item=rng.choice(_ITEMS), a=a, b=b)

    return _build(
        ARITHMETIC_SPEC,
        train_keys,
        test_keys,
        question,
        system_prompt=system_prompt,
        user_template=user_template,
    )


def _reader(name: str, description: str, generator) -> MathSetSpec:
    return MathSetSpec(name=name, description=description, generator=Generated(generator), default_split="train",
                       question=first_field("question"), gold=field("answer"), id_field="id",
                       metadata=("a", "b", "op"))


ARITHMETIC_SPEC = _reader("arithmetic", "built-in procedurally generated one-step arithmetic word problems (offline)",
                          arithmetic_dataset)
DIGITS_SPEC = _reader("digits", "built-in bare one-step sums 'What is a op b?' on operands 1..12, user message = "
                      "question (offline; calibrated for a 135M model)", digits_dataset)
