"""TRL's own GRPO trainer tests, vendored, run against OrderGrad and stock GRPO by run.py."""
