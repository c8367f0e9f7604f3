"""Runs TRL's own GRPO trainer tests, from a TRL checkout, against OrderGrad and stock GRPO (run.py)."""
