"""Numbers as positional text, so that math-verify never reads an exponent's `e` as Euler's number.

math-verify parses `1e-07` as `e - 7` and `1e1` as `e`, yet Python writes floats that way (`repr(1e-07)`,
`str(3e21)`), and so do JSON and parquet float columns once turned into text. `number_text` is how every gold
number becomes text (the data readers, the reward, the eval's loader); `positional` rewrites exponent numerals
already in a text (a gold string, a completion's `\\boxed{2.5e-06}`) and runs inside the scoring workers too, so
it must import nothing beyond the standard library (the worker loads this file by path).
"""

from __future__ import annotations

import numbers
import re
from decimal import Decimal, DecimalException

__all__ = ["number_text", "positional"]

# A numeral in exponent form, standing alone: not part of a name (`x1e5`, `\mathrm{e}`), of a longer number or of
# a LaTeX command; the exponent must be written out, so `2e` (two e) stays Euler's number.
_EXPONENT = re.compile(r"(?<![\w.\\])(\d+(?:\.\d*)?|\.\d+)[eE]([+-]?\d+)(?!\w|\.\d)")
# Beyond this many digits a positional numeral stops being readable: write `m \times 10^{n}` instead (a hostile
# `1e999999999` would otherwise become a gigabyte of zeros).
_MAX_DIGITS = 400


def number_text(value) -> str:
    """An int, float or Decimal as positional text: `1e-07` -> "0.0000001", `3e+21` -> "3000000000000000000000",
    `27.0` -> "27". A float uses its shortest round-trip digits (`repr`), never its binary expansion."""
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, float):
        return _decimal_text(Decimal(repr(float(value))))  # float(): numpy's repr reads `np.float64(...)`
    # a Decimal as is; another real (numpy.float32) by its own shortest digits, not float64's longer ones
    return _decimal_text(value if isinstance(value, Decimal) else Decimal(str(value)))


def _decimal_text(exact: Decimal) -> str:
    if abs(exact.adjusted()) >= _MAX_DIGITS:  # as_tuple, not normalize(): that overflows the context here
        sign, digits, exponent = exact.as_tuple()
        while len(digits) > 1 and digits[-1] == 0:
            digits, exponent = digits[:-1], exponent + 1
        mantissa = Decimal((sign, digits, -(len(digits) - 1)))
        return f"{mantissa} \\times 10^{{{exponent + len(digits) - 1}}}"
    if exact == exact.to_integral_value():
        return str(int(exact))
    text = format(exact, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def positional(text: str) -> str:
    """`text` with every standalone exponent numeral rewritten as `number_text` writes it (`\\boxed{2.5e-06}` ->
    `\\boxed{0.0000025}`); `e - 7`, `2e` and `x1e5` are left alone."""
    if "e" not in text and "E" not in text:
        return text

    def rewrite(match: re.Match) -> str:
        try:
            return _decimal_text(Decimal(match.group(0)))
        except (DecimalException, ValueError, OverflowError):
            return match.group(0)

    return _EXPONENT.sub(rewrite, text)
