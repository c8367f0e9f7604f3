"""Entry points of a source checkout: `python -m eval.run|generate|score|report` from the repository root.

They are `ordergrad-eval <stage>` (the console script `pip install` provides, which works from any directory);
the code is `ordergrad_trl.evaluation`. This folder is not installed.
"""
