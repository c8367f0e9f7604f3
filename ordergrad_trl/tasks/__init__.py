"""Layer 3: the math task that the recipes and eval/ train and evaluate on.

Benchmark sets and the built-in offline ones (`data`, `sets`, `prompts`, `arithmetic`), the math-verify reward in
a bounded worker pool (`rewards`) and the default model with its offline copy (`models`).

Nothing is imported here, so `ordergrad_trl.tasks.rewards` loads without `datasets`."""
