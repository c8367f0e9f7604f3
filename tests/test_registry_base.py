"""The registry base: the estimators, objective presets, prompt weights, math sets, eval metrics, dynamic-sampling
modes and eval protocols are each a `Registry`, so each checks names, refuses a taken one naming both definitions, and lends rows for a
while the same way."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ordergrad_trl
from ordergrad_trl.core import objectives, prompt_weights
from ordergrad_trl.core.estimators import registry
from ordergrad_trl.core.registry_base import Registry
from ordergrad_trl.evaluation import metrics, protocols
from ordergrad_trl.tasks import sets
from ordergrad_trl.training import dynamic_sampling

REGISTRIES = {  # the module holding the table (`_ROWS`) -> its public view
    "estimators": (registry, registry.ESTIMATORS),
    "objective presets": (objectives, objectives.PRESETS),
    "prompt weights": (prompt_weights, prompt_weights.PROMPT_WEIGHTS),
    "math sets": (sets, sets.MATH_SETS),
    "metrics": (metrics, metrics.METRICS),
    "dynamic sampling": (dynamic_sampling, dynamic_sampling.DYNAMIC_SAMPLING),
    "eval protocols": (protocols, protocols.PROTOCOLS),
}


def test_every_registry_of_the_package_is_listed_here():
    """A registry added to the package (a module-level `... = Registry(...)`) is tested by the tests below once
    listed in `REGISTRIES`."""
    package = Path(ordergrad_trl.__file__).parent
    defining = {".".join(path.relative_to(package.parent).with_suffix("").parts) for path in package.rglob("*.py")
                if re.search(r"^\w+(: [^=]+)? = Registry\(", path.read_text(), flags=re.M)}  # fmt: skip
    assert defining == {module.__name__ for module, _ in REGISTRIES.values()}


@pytest.mark.parametrize("kind", list(REGISTRIES))
def test_every_registry_is_the_base_and_its_view_is_read_only(kind):
    module, view = REGISTRIES[kind]
    table = module._ROWS
    assert isinstance(table, Registry) and view is table.view and list(view) == list(table.rows)
    with pytest.raises(TypeError):
        view["x"] = None  # the package reads rows; only the registry's add writes them


@pytest.mark.parametrize("kind", list(REGISTRIES))
def test_every_registry_refuses_a_bad_or_taken_name_and_lends_a_row_for_a_while(kind):
    module, view = REGISTRIES[kind]
    table = module._ROWS
    taken, other = list(view)[:2]
    with pytest.raises(ValueError, match=r"names are lower-case identifiers, got 'Bad Name'"):
        table.add("Bad Name", view[taken])
    with pytest.raises(ValueError, match=rf"name '{taken}' is already registered by .+; .+ needs another name"):
        table.add(taken, view[other])  # another definition under a taken name
    with table.registered("lent", view[taken]):
        assert "lent" in view and list(view)[-1] == "lent"
    assert "lent" not in view
    with table.registered(taken, view[taken]) as row:  # replacing a row for a while gives the old one back
        assert view[taken] is row
    assert table.unregister("absent") is None


def test_a_row_defined_again_replaces_itself():
    """Re-running a definition (a module reloaded) is not a second definition."""
    table = Registry("thing", holder=lambda row: row[0], same=lambda a, b: a[0] == b[0])
    table.add("x", ("f", 1))
    table.add("x", ("f", 2))
    assert table.view["x"] == ("f", 2) and table.help(lambda row: f"{row[0]}{row[1]}") == "f2"
    with pytest.raises(ValueError, match="thing name 'x' is already registered by f; g needs another name"):
        table.add("x", ("g", 3))
