"""The one strict reader of `--config` YAML files, for both command lines (`recipes/math_cvar.py`, `ordergrad-eval`).

PyYAML keeps the last of a key given twice and reads anything as a document; here a missing or unreadable file,
invalid YAML, a repeated key or a document that is not a mapping is a `ValueError` naming the file (and the line),
which each command line prints as its one-line error.
"""

from __future__ import annotations

from pathlib import Path

import yaml

__all__ = ["load_yaml_config"]


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice", key_node.start_mark)
            seen.add(key)
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
    try:
        config = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{where}{line}: not valid YAML ({getattr(err, 'problem', None) or err})") from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ValueError(f"{where}: must be a YAML mapping of flag names to values, got {type(config).__name__}")
    return config
