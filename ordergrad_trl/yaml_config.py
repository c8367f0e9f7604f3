"""The one strict reader of `--config` YAML files, for both command lines (`recipes/math_cvar.py`, `ordergrad-eval`).

PyYAML keeps the last of a key given twice and reads anything as a document; here a missing or unreadable file,
invalid YAML, a repeated key, a top-level key that YAML reads as something other than a string (`on: 1` is
`{True: 1}`) or a document that is not a mapping is a `ValueError` naming the file (and the line), which each command
line prints as its one-line error. Merge keys (`<<: *base`) work as YAML defines them.
"""

from __future__ import annotations

from pathlib import Path

import yaml

__all__ = ["load_yaml_config"]


_MERGE = "tag:yaml.org,2002:merge"


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (a key a merge `<<: *base` brings in may be given
    again: that is what a merge is for), and remembers where each key that is not a string was written."""

    def __init__(self, stream):
        super().__init__(stream)
        self.odd_keys: list[tuple[object, int, str]] = []  # (key, line, as written)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice", key_node.start_mark)
            seen.add(key)
            if not isinstance(key, str):
                self.odd_keys.append((key, key_node.start_mark.line + 1, getattr(key_node, "value", key)))
        return super().construct_mapping(node, deep=deep)


def load_yaml_config(path: str | Path) -> dict:
    """The mapping in YAML file `path` (`{}` for an empty file); `ValueError` starting `--config <path>` otherwise."""
    where = f"--config {path}"
    try:
        text = Path(path).expanduser().read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ValueError(f"{where}: file not found (relative to {Path.cwd()})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{where}: cannot read it as UTF-8 text ({err})") from None
    loader = _UniqueKeyLoader(text)
    try:
        config = loader.get_single_data()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{where}{line}: not valid YAML ({getattr(err, 'problem', None) or err})") from None
    finally:
        loader.dispose()
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ValueError(f"{where}: must be a YAML mapping of flag names to values, got {type(config).__name__}")
    for key in config:
        if not isinstance(key, str):  # `on: 1` is {True: 1} in YAML 1.1 (on/off/yes/no are booleans), `1: x` an int
            line, written = next(((ln, w) for k, ln, w in loader.odd_keys if k == key and type(k) is type(key)),
                                 (None, key))
            raise ValueError(f"{where}{f':{line}' if line else ''}: the key {written!r} is read as the "
                             f"{type(key).__name__} {key!r}, not a flag name (YAML reads on/off/yes/no as booleans); "
                             f"quote it (\"{written}\": ...) or use the flag's own name")
    return config
