"""Evaluation of math models for order-statistic objectives: generate -> score -> report.

Run from the repository root as `python -m eval.run ...` (or `python eval/run.py ...`); see eval/README.md.
"""
