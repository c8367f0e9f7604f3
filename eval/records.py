"""The run layout's readers, for scripts of this checkout (`studies/compare_objectives.py`)."""

from ordergrad_trl.evaluation.records import dataset_dirs, read_jsonl

__all__ = ["dataset_dirs", "read_jsonl"]
