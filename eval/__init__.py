"""Evaluation of math models for order-statistic objectives: generate -> score -> report.

Installed with the project (`pip install -e .`), so `python -m eval.run ...` works from any directory; see
docs/evaluation.md.
"""
