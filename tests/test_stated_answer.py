"""The math reward credits what a completion states as its answer, never an expression it mentions: over every
problem of the built-in arithmetic tasks, restating the question scores 0 (math-verify's default reads it as its own
value), stating the answer scores 1. Found in issue 48, where a policy learned to restate `chains` questions."""

from __future__ import annotations

import pytest

from ordergrad_trl.tasks.arithmetic_splits import chains_dataset, digits20_dataset
from ordergrad_trl.tasks.data import load_math_dataset
from ordergrad_trl.tasks.rewards import score_completions


def _problems():
    rows = [(r["question"], r["answer"]) for r in chains_dataset(n_train=1)["validation"]]
    rows += [(r["question"], r["answer"]) for r in digits20_dataset(n_train=1)["validation"]]
    rows += [(r["question"], r["answer"]) for r in load_math_dataset("digits", split="test")]
    return [(q.removeprefix("What is ").removesuffix("?"), a) for q, a in rows]


PROBLEMS = _problems()  # (expression, its integer answer), 600 problems


@pytest.mark.parametrize("template", [
    "To find {expr}, we need to follow the order of operations",  # what the trained policy wrote (truncated)
    "We are given that {expr}.\n\nLet's",
    "The answer is {expr}",  # anchored, but an expression where a number is asked for
    "\\boxed{{{expr}}}",
])
def test_a_restated_question_is_not_its_answer(template):
    texts = [template.format(expr=e) for e, _ in PROBLEMS]
    scores = score_completions(texts, [a for _, a in PROBLEMS])
    # the only credit left: the text's last number is the question's last operand, and that operand is the answer
    # (e.g. "1 * 7" = 7) where no anchor holds an expression
    anchored_expr = template.startswith(("The answer", "\\boxed"))
    expected = [float(not anchored_expr and e.split()[-1] == a) for e, a in PROBLEMS]
    assert scores == expected
    assert sum(expected) <= 0.05 * len(PROBLEMS)


def test_a_stated_answer_is_credited_and_a_wrong_one_is_not():
    golds = [a for _, a in PROBLEMS]
    for template, right in [("{expr} = {ans}.", True), ("So {expr} = {ans}. Then we", True),
                            ("The answer is {ans}.", True), ("\\boxed{{{ans}}}", True), ("Answer: {ans}", True),
                            ("{expr} = {wrong}.", False), ("The answer is {wrong}, not {ans}", False)]:
        texts = [template.format(expr=e, ans=a, wrong=int(a) + 1) for e, a in PROBLEMS]
        assert score_completions(texts, golds) == [float(right)] * len(PROBLEMS), template


def test_an_integer_gold_takes_a_number_and_other_golds_any_stated_form():
    texts = ["\\boxed{\\frac{1}{2}}", "The answer is \\frac{1}{2}", "\\boxed{0.5}", "\\boxed{2\\sqrt{3}}",
             "\\boxed{\\frac{54}{2}}", "\\boxed{27}", "\\boxed{27.0}"]
    golds = ["0.5", "0.5", "\\frac{1}{2}", "2\\sqrt{3}", "27", "27", "27"]
    assert score_completions(texts, golds) == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0]
