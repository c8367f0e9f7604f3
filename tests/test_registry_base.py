"""The registry base: the prompt weights, eval metrics and dynamic-sampling modes are each a `Registry`, so each
checks names, refuses a taken one naming both definitions, and lends rows for a while the same way."""

from __future__ import annotations

import pytest

from ordergrad_trl.core.prompt_weights import PROMPT_WEIGHTS
from ordergrad_trl.core import prompt_weights
from ordergrad_trl.core.registry_base import Registry
from ordergrad_trl.evaluation import metrics
from ordergrad_trl.training import dynamic_sampling

REGISTRIES = {  # module's table -> its public view
    "prompt weights": (prompt_weights._ROWS, PROMPT_WEIGHTS),
    "metrics": (metrics._ROWS, metrics.METRICS),
    "dynamic sampling": (dynamic_sampling._ROWS, dynamic_sampling.DYNAMIC_SAMPLING),
}


@pytest.mark.parametrize("kind", list(REGISTRIES))
def test_every_registry_is_the_base_and_its_view_is_read_only(kind):
    table, view = REGISTRIES[kind]
    assert isinstance(table, Registry) and view is table.view and list(view) == list(table.rows)
    with pytest.raises(TypeError):
        view["x"] = None  # the package reads rows; only the registry's add writes them


@pytest.mark.parametrize("kind", list(REGISTRIES))
def test_every_registry_refuses_a_bad_or_taken_name_and_lends_a_row_for_a_while(kind):
    table, view = REGISTRIES[kind]
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
