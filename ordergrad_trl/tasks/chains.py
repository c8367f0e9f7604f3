"""The built-in `chains` task: two-operation integer chains `What is a o1 b o2 c?`, with train/validation/test splits.

A harder sibling of `digits` for comparing objectives (issue 48): at T=0.7 SmolLM2-135M-Instruct solves a `digits`
problem 28% of the time and 83% at pass@8, too close to the ceiling for pass@k to separate objectives; two
operations put its pass@8 near the middle (the calibration report, `studies/assets/chains_calibration.md`, measures
it on the validation split only). The three splits are disjoint, deterministic functions of `seed`, and do not move
when another split's size changes: test first, then validation, then train, from one shuffled list of problems.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from .prompts import format_rows
from .spec import Generated, MathSetSpec, field, first_field

if TYPE_CHECKING:
    import datasets

__all__ = ["CHAINS_SPEC", "chain_answer", "chains_dataset"]

OPERANDS = range(1, 13)
OPERATIONS = "+-*"
SPLITS = ("train", "validation", "test")


def chain_answer(a: int, o1: str, b: int, o2: str, c: int) -> int:
    """`a o1 b o2 c` with the usual precedence (`*` before `+` and `-`, then left to right)."""
    apply = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}
    if o2 == "*" and o1 != "*":
        return apply[o1](a, b * c)
    return apply[o2](apply[o1](a, b), c)


def _keys() -> list[tuple[int, str, int, str, int]]:
    # 12^3 operand triples x 9 operation pairs = 15,552 distinct problems
    return [(a, o1, b, o2, c) for o1 in OPERATIONS for o2 in OPERATIONS
            for a in OPERANDS for b in OPERANDS for c in OPERANDS]  # fmt: skip


def _split(n_train: int, n_validation: int, n_test: int, seed: int) -> dict[str, list]:
    sizes = {"n_train": n_train, "n_validation": n_validation, "n_test": n_test, "seed": seed}
    for name, value in sizes.items():  # every split holds a problem: an empty split is no data set to train or score
        if not isinstance(value, int) or isinstance(value, bool) or value < (name != "seed"):
            raise ValueError(f"{name} must be a {'non-negative' if name == 'seed' else 'positive'} int, got {value!r}")
    keys = _keys()
    if n_train + n_validation + n_test > len(keys):
        raise ValueError(f"n_train + n_validation + n_test must be at most {len(keys)} (the distinct problems), "
                         f"got {n_train + n_validation + n_test}")
    random.Random(seed).shuffle(keys)
    cut = (n_test, n_test + n_validation, n_test + n_validation + n_train)
    return {"test": keys[: cut[0]], "validation": keys[cut[0]: cut[1]], "train": keys[cut[1]: cut[2]]}


def chains_dataset(
    n_train: int = 4000,
    n_validation: int = 200,
    n_test: int = 200,
    seed: int = 0,
    *,
    system_prompt: str | None = None,
    user_template: str = "{question}",
) -> datasets.DatasetDict:
    """`What is a o1 b o2 c?` (operands 1..12, operations +, -, *; answers are integers, possibly negative).

    Every row is a distinct problem and no problem is in two splits. Columns: `prompt`, `answer`, `question`,
    `id` (`<split>-<index>`), the operands `a`, `b`, `c` and the operations `op` (two characters, e.g. "+*").
    """
    import datasets  # here: the set registry (and `--datasets`' help) is read without loading the datasets library

    splits = {}
    for split, keys in _split(n_train, n_validation, n_test, seed).items():
        columns: dict[str, list[Any]] = {k: [] for k in ("question", "answer", "id", "a", "b", "c", "op")}
        for i, (a, o1, b, o2, c) in enumerate(keys):
            columns["question"].append(f"What is {a} {o1} {b} {o2} {c}?")
            columns["answer"].append(str(chain_answer(a, o1, b, o2, c)))
            columns["id"].append(f"{split}-{i:05d}")
            for name, value in (("a", a), ("b", b), ("c", c), ("op", o1 + o2)):
                columns[name].append(value)
        splits[split] = format_rows(datasets.Dataset.from_dict(columns), CHAINS_SPEC, split,
                                    system_prompt=system_prompt, user_template=user_template, keep_metadata=True,
                                    keep_solution=False, drop_unanswerable=False)
    return datasets.DatasetDict({split: splits[split] for split in SPLITS})


CHAINS_SPEC = MathSetSpec(
    name="chains",
    description="built-in two-operation chains 'What is a o1 b o2 c?' (operands 1..12; +, -, *), train / validation / "
    "test, user message = question (offline; harder than `digits`, calibrated for a 135M model)",
    generator=Generated(chains_dataset, splits=SPLITS),
    default_split="train",
    question=first_field("question"),
    gold=field("answer"),
    id_field="id",
    metadata=("a", "b", "c", "op"),
)
