"""Built-in arithmetic sets with train / validation / test splits: `digits20` (one operation) and `chains` (two).

Harder siblings of `digits` for comparing objectives (issue 48), each with a validation split to calibrate a task
or a budget on, never the test split. `digits20` is `digits` on operands 1..20: at T = 0.7, 32 new tokens, the base
SmolLM2-135M-Instruct sits inside the calibration targets on its validation split
(`studies/assets/digits20_calibration.md`). `chains` (`a o1 b o2 c`) is beyond it at 32 or 64 tokens (pass@8 about
10% and 17%, docs/results.md): a set for larger models. The splits are disjoint, deterministic functions of `seed`,
and do not move when another split's size changes: test first, then validation, then train, from one shuffled list
of the distinct problems.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .prompts import format_rows
from .spec import Generated, MathSetSpec, field, first_field

if TYPE_CHECKING:
    import datasets

__all__ = ["CHAINS_SPEC", "DIGITS20_SPEC", "chain_answer", "chains_dataset", "digits20_dataset"]

SPLITS = ("train", "validation", "test")
_APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.floordiv}


def chain_answer(a: int, o1: str, b: int, o2: str, c: int) -> int:
    """`a o1 b o2 c` with the usual precedence (`*` before `+` and `-`, then left to right)."""
    if o2 == "*" and o1 != "*":
        return _APPLY[o1](a, b * c)
    return _APPLY[o2](_APPLY[o1](a, b), c)


def _chain_rows() -> list[dict[str, Any]]:
    # 12^3 operand triples x 9 operation pairs = 15,552 distinct problems
    return [{"question": f"What is {a} {o1} {b} {o2} {c}?", "answer": str(chain_answer(a, o1, b, o2, c)),
             "a": a, "b": b, "c": c, "op": o1 + o2}
            for o1 in "+-*" for o2 in "+-*" for a in range(1, 13) for b in range(1, 13) for c in range(1, 13)]


def _digits20_rows() -> list[dict[str, Any]]:
    # as `digits` (exact division only), operands 1..20: 3 x 400 + 400 = 1,600 distinct problems
    keys = [(a, op, b) for op in "+-*" for a in range(1, 21) for b in range(1, 21)]
    keys += [(b * q, "/", b) for b in range(1, 21) for q in range(1, 21)]
    return [{"question": f"What is {a} {op} {b}?", "answer": str(_APPLY[op](a, b)), "a": a, "b": b, "op": op}
            for a, op, b in keys]


def _build(spec: MathSetSpec, rows: list[dict], sizes: dict[str, int], seed: int, *, system_prompt: str | None,
           user_template: str) -> datasets.DatasetDict:
    import datasets  # here: the set registry (and `--datasets`' help) is read without loading the datasets library

    for name, value in {**sizes, "seed": seed}.items():  # an empty split is no data set to train on or score
        if not isinstance(value, int) or isinstance(value, bool) or value < (name != "seed"):
            raise ValueError(f"{name} must be a {'non-negative' if name == 'seed' else 'positive'} int, got {value!r}")
    if sum(sizes.values()) > len(rows):
        raise ValueError(f"{' + '.join(sizes)} must be at most {len(rows)} (the distinct problems of {spec.name!r}), "
                         f"got {sum(sizes.values())}")
    random.Random(seed).shuffle(rows)
    cut = (sizes["n_test"], sizes["n_test"] + sizes["n_validation"], sum(sizes.values()))
    chosen = {"test": rows[: cut[0]], "validation": rows[cut[0]: cut[1]], "train": rows[cut[1]: cut[2]]}
    splits = {}
    for split in SPLITS:
        columns = {key: [row[key] for row in chosen[split]] for key in rows[0]}
        columns["id"] = [f"{split}-{i:05d}" for i in range(len(chosen[split]))]
        splits[split] = format_rows(datasets.Dataset.from_dict(columns), spec, split, system_prompt=system_prompt,
                                    user_template=user_template, keep_metadata=True, keep_solution=False,
                                    drop_unanswerable=False)
    return datasets.DatasetDict(splits)


def digits20_dataset(n_train: int = 1200, n_validation: int = 200, n_test: int = 200, seed: int = 0, *,
                     system_prompt: str | None = None, user_template: str = "{question}") -> datasets.DatasetDict:
    """`What is a op b?` (+, -, *, exact /; operands 1..20): every row a distinct problem, no problem in two splits.
    Columns: `prompt`, `answer`, `question`, `id` (`<split>-<index>`), the operands `a`, `b` and `op`."""
    sizes = {"n_train": n_train, "n_validation": n_validation, "n_test": n_test}
    return _build(DIGITS20_SPEC, _digits20_rows(), sizes, seed, system_prompt=system_prompt,
                  user_template=user_template)


def chains_dataset(n_train: int = 4000, n_validation: int = 200, n_test: int = 200, seed: int = 0, *,
                   system_prompt: str | None = None, user_template: str = "{question}") -> datasets.DatasetDict:
    """`What is a o1 b o2 c?` (operands 1..12; +, -, *; integer answers, possibly negative): every row a distinct
    problem, no problem in two splits. Columns: `prompt`, `answer`, `question`, `id`, `a`, `b`, `c` and `op` (two
    characters, e.g. "+*")."""
    sizes = {"n_train": n_train, "n_validation": n_validation, "n_test": n_test}
    return _build(CHAINS_SPEC, _chain_rows(), sizes, seed, system_prompt=system_prompt, user_template=user_template)


def _spec(name: str, description: str, build: Callable, metadata: tuple[str, ...]) -> MathSetSpec:
    return MathSetSpec(name=name, description=description, generator=Generated(build, splits=SPLITS),
                       default_split="train", question=first_field("question"), gold=field("answer"), id_field="id",
                       metadata=metadata)


DIGITS20_SPEC = _spec("digits20", "built-in bare one-step sums 'What is a op b?' on operands 1..20, train / validation "
                      "/ test, user message = question (offline; harder than `digits`, calibrated for a 135M model)",
                      digits20_dataset, ("a", "b", "op"))
CHAINS_SPEC = _spec("chains", "built-in two-operation chains 'What is a o1 b o2 c?' (operands 1..12; +, -, *), train "
                    "/ validation / test, user message = question (offline; for models beyond 135M)", chains_dataset,
                    ("a", "b", "c", "op"))
