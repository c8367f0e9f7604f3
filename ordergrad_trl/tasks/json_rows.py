"""The one reader of `.jsonl` / `.json` data files, for the eval and for training alike, every number exact.

Used by `ordergrad-eval --datasets file` (its checker) and `load_math_dataset(file)` (the recipe's `--dataset_name
file`, and the eval's loader). Every JSON number keeps its exact value: integers as Python ints (any size), other numbers as `Decimal` of their
literal text, so no gold passes through float64 (`9007199254740993` or `100000000000000000001` written as a JSON
number stays that integer). The rows then go to Arrow column by column (`to_dataset`): a column of integers that
fit int64 stays integer, a column of numbers that float64 holds exactly becomes float, and any other column of
scalars (strings mixed with numbers, an integer beyond int64, a decimal float64 would round) becomes the exact
text of each value, numbers written as `scalar_text` writes them. A line that is not UTF-8 or not JSON is a
`DataFileError` naming `<file>:<line>`.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

from .numerals import number_text

__all__ = ["DataFileError", "read_rows", "rows_to_dataset", "scalar_text"]

_INT64 = 2**63


class DataFileError(ValueError):
    """A data file's line or row that cannot be read, named `<where>:<line>` (or `<where> row <n>`)."""


class _TooLong(ValueError):
    pass


def _int(text: str) -> int:
    if len(text) > 4000:  # Python's int() refuses more than 4300 digits anyway
        raise _TooLong(f"an integer of {len(text)} digits (at most 4000 are read)")
    return int(text)


def _decimal(text: str) -> Decimal | float:
    value = float(text)  # beyond float64's range: inf, which the readers refuse as a non-finite gold
    return Decimal(text) if math.isfinite(value) else value


def _loads(text: str) -> Any:
    return json.loads(text, parse_int=_int, parse_float=_decimal)  # every number exact


def _rows_of_lines(data: bytes, where: str) -> list[tuple[str, Any]]:
    rows = []
    for i, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataFileError(f"{where}:{i}: not UTF-8 (byte {line[err.start]:#04x} at column {err.start + 1}); "
                                "save the file as UTF-8") from None
        try:
            row = _loads(text)
            _no_surrogates(row, f"{where}:{i}")
            rows.append((f":{i}", row))
        except json.JSONDecodeError as err:
            raise DataFileError(f"{where}:{i}: not valid JSON ({err.msg} at column {err.colno})") from None
        except RecursionError:
            raise DataFileError(f"{where}:{i}: not valid JSON (nested too deeply)") from None
        except _TooLong as err:
            raise DataFileError(f"{where}:{i}: {err}") from None
    return rows


def _no_surrogates(value: Any, where: str, field: str | None = None) -> None:
    """DataFileError when a string holds a lone surrogate (`\\ud800` written in JSON): no character, and no
    tokenizer or UTF-8 writer can take it."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            code = ord(value[err.start])
            raise DataFileError(f"{where}: {field or 'a value'!r} holds a lone surrogate \\u{code:04x} at character "
                                f"{err.start + 1}, which is no character (JSON can write it, text cannot hold it); "
                                "remove it or write the character it was meant to be") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _no_surrogates(k, where, field)
            _no_surrogates(v, where, k if field is None else field)
    elif isinstance(value, list):
        for v in value:
            _no_surrogates(v, where, field)


def read_rows(path: str | Path, where: str | None = None) -> list[tuple[str, Any]]:
    """[(place, row)] of a `.jsonl` file, or of a `.json` file holding one list of rows (else read as JSON lines).
    `place` is `:<line>` (or ` row <n>` in a JSON list), to follow `where` (default: the path)."""
    where = str(path) if where is None else where
    data = Path(path).read_bytes()
    if Path(path).suffix.lower() == ".json" and data.lstrip()[:1] == b"[":  # one JSON document, a list of rows
        try:
            doc = _loads(data.decode("utf-8"))
        except UnicodeDecodeError:
            return _rows_of_lines(data, where)  # names the bad byte's line
        except json.JSONDecodeError as err:
            raise DataFileError(f"{where}:{err.lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
        except RecursionError:
            raise DataFileError(f"{where}: not valid JSON (nested too deeply)") from None
        except _TooLong as err:
            raise DataFileError(f"{where}: {err}") from None
        # the document keeps no line numbers per row: name the row by its place in the list
        rows = [(f" row {i}", r) for i, r in enumerate(doc, 1)] if isinstance(doc, list) else [(":1", doc)]
        for at, row in rows:
            _no_surrogates(row, f"{where}{at}")
        return rows
    return _rows_of_lines(data, where)


def scalar_text(value: Any) -> str:
    """The exact text of a JSON scalar: an integral number as its integer (`27.0` -> "27", any size), another
    number as the shortest digits of its float where float64 holds it exactly (`0.1` -> "0.1"), else its literal
    digits; always positional (`1e-07` -> "0.0000001"), never exponent form."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            return str(value)
        as_float = float(value)
        if math.isfinite(as_float) and Decimal(repr(as_float)) == value:
            return number_text(as_float)  # the float's shortest digits: `0.10` -> "0.1"
        return number_text(value)
    if isinstance(value, float) and math.isfinite(value):
        return number_text(value)  # positional: `1e-07` would be scored as Euler's e minus 7
    return str(value)


def _plain(value: Any) -> Any:
    """A nested value for Arrow: decimals become floats (only scalar columns keep exact text)."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _float_exact(value) -> bool:
    if isinstance(value, float):
        return True
    as_float = float(value)
    if not math.isfinite(as_float):
        return False
    return as_float == value if isinstance(value, int) else Decimal(repr(as_float)) == value


def _column(values: list) -> list:
    present = [v for v in values if v is not None]
    if any(isinstance(v, (list, dict)) for v in present):
        return [_plain(v) for v in values]
    numbers = [v for v in present if isinstance(v, (int, Decimal, float)) and not isinstance(v, bool)]
    if len(numbers) == len(present):
        if all(isinstance(v, int) and -_INT64 <= v < _INT64 for v in numbers):
            return values
        if all(_float_exact(v) for v in numbers):
            return [None if v is None else float(v) for v in values]
    if all(isinstance(v, bool) for v in present):
        return values
    return [None if v is None else scalar_text(v) for v in values]  # exact text, whatever the mix


def rows_to_dataset(rows: list[tuple[str, Any]], where: str):
    """A `datasets.Dataset` of JSON-object rows, each column as the module docstring says; DataFileError names
    the first row that is not an object."""
    import datasets

    names: dict[str, None] = {}
    for at, row in rows:
        if not isinstance(row, dict):
            raise DataFileError(f"{where}{at}: a row must be a JSON object, got {type(row).__name__}")
        names.update(dict.fromkeys(row))
    columns = {name: _column([row.get(name) for _, row in rows]) for name in names}
    try:
        return datasets.Dataset.from_dict(columns)
    except (ValueError, TypeError, OverflowError) as err:  # pyarrow's ArrowInvalid/ArrowTypeError are these
        raise DataFileError(f"{where}: a column mixes kinds of values that cannot form one table "
                            f"({type(err).__name__}: {' '.join(str(err).split())[:200]})") from None
