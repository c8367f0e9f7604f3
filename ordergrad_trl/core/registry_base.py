"""`Registry`: the name -> row table behind each of the package's registries.

The estimators, objective presets, prompt weights, math sets, eval metrics, dynamic-sampling modes and eval
protocols are each one (tests/test_registry_base.py checks that every `Registry` of the package is listed there).
Each registry holds rows by a lower-case name, in registration order, behind a read-only view that the config help,
docs tables and tests iterate; a name is checked once, here, and a name held by another definition is refused,
naming both (re-running the same definition, e.g. a module reloaded, replaces its row). `unregister` and
`registered` are for tests and plugins that add a row for a while. Look-ups beyond the name (aliases, Hub ids)
belong to the registry's module. Pure Python: every layer can hold one.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Generic, TypeVar

__all__ = ["NAME", "Registry"]

Row = TypeVar("Row")
NAME = re.compile(r"[a-z][a-z0-9_]*")  # a registered name: what a config value, a flag or a YAML key can spell


class Registry(Generic[Row]):
    """Rows of one kind (`what`, e.g. "estimator") by name. `holder(row)` says who defined a row (in the refusal of
    a taken name); `same(taken, row)` whether a new row is the taken one's definition again (then it replaces it)."""

    def __init__(self, what: str, *, holder: Callable[[Row], str] = repr,
                 same: Callable[[Row, Row], bool] = lambda taken, row: False):  # fmt: skip
        self.what, self.holder, self.same = what, holder, same
        self.rows: dict[str, Row] = {}  # the table itself; a module may name it (tests pop rows they added)
        self.view: Mapping[str, Row] = MappingProxyType(self.rows)  # what the rest of the package reads

    def check_name(self, name) -> str:
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ValueError(f"{self.what} names are lower-case identifiers, got {name!r}")
        return name

    def check(self, name: str, row: Row) -> str:
        """`name`, if `add(name, row)` would take it; `ValueError` for a bad name or one another definition holds
        (a registering decorator asks before it reads the rest of a definition, so a taken name is named first)."""
        self.check_name(name)
        taken = self.rows.get(name)
        if taken is not None and not self.same(taken, row):
            raise ValueError(f"{self.what} name {name!r} is already registered by {self.holder(taken)}; "
                             f"{self.holder(row)} needs another name")
        return name

    def add(self, name: str, row: Row) -> Row:
        """Register `row` under `name`; `ValueError` for a bad name or one another definition holds."""
        self.rows[self.check(name, row)] = row
        return row

    def unregister(self, name: str) -> Row | None:
        """Remove `name`'s row (None if absent): a test's or a plugin's row, when it is done."""
        return self.rows.pop(name, None)

    @contextlib.contextmanager
    def registered(self, name: str, row: Row) -> Iterator[Row]:
        """`row` under `name` for the `with` block only; a row it replaced comes back after."""
        before = self.rows.get(name)
        self.rows[self.check_name(name)] = row
        try:
            yield row
        finally:
            if before is None:
                self.rows.pop(name, None)
            else:
                self.rows[name] = before

    def help(self, line: Callable[[Row], str]) -> str:
        """Every row's `line`, joined with "; ", in registration order: a config field's help."""
        return "; ".join(line(row) for row in self.rows.values())

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {', '.join(self.rows)})"
