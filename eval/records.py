"""The run layout's readers, for scripts of this checkout (`studies/compare_objectives.py`)."""

from ordergrad_trl.evaluation.layout import dataset_dirs
from ordergrad_trl.evaluation.records import read_jsonl

__all__ = ["dataset_dirs", "read_jsonl"]
