"""The development guide's example estimator (docs/development.md, "Adding an estimator"), run from the page: its
registry row's claims (NaN rule, minimum group, centering, unbiased for its target) hold as the shared tests check
them for every registered estimator."""

import re
from pathlib import Path

import pytest
import torch
from test_estimators import reward_batch
from test_estimators_contract import check_nan_rule_and_minimum_group
from test_estimators_unbiased import check_unbiased_for_its_target

from ordergrad_trl.core.estimators import registry

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "development.md"


def example_block() -> str:
    section = GUIDE.read_text().split("## Adding an estimator", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks and "@register_estimator(" in blocks[0], "docs/development.md lost its example estimator"
    return blocks[0]


@pytest.fixture
def example():
    """The example registered for the test only (unregistered after: the package's registry stays as it is)."""
    before = set(registry.ESTIMATORS)
    exec(compile(example_block(), str(GUIDE), "exec"), {"__name__": "docs_example"})
    (name,) = set(registry.ESTIMATORS) - before
    try:
        yield registry.ESTIMATORS[name]
    finally:
        registry._ROWS.unregister(name)


def test_the_guides_example_keeps_its_registry_rows_claims(example):
    check_nan_rule_and_minimum_group(example, {})
    check_unbiased_for_its_target(example, {})
    assert example.unbiased and not example.unbiased_for.startswith("nothing")
    r = reward_batch(binary=False, seed=11, g=200)
    a = example.fn(r)
    assert a.shape == r.shape and a.dtype == torch.float64 and bool(torch.isfinite(a).all())
    assert example.centered == "no" and a.sum(-1).abs().max() > 0.1 and bool((a < 0).any())  # not centered, not >= 0


def test_a_baseline_that_includes_the_rollout_itself_would_be_caught(example):
    """The enumeration is sharp enough to fail the example had it used the median of the whole group (i included)."""
    import dataclasses

    def whole_group_median(rewards):
        return rewards - rewards.median(-1, keepdim=True).values

    with pytest.raises(AssertionError):
        check_unbiased_for_its_target(dataclasses.replace(example, fn=whole_group_median), {})
