"""The math task that the recipes and eval/ train and evaluate on (a layer on `core`, beside `training`).

Benchmark sets and the built-in offline ones (`data`, `sets`, `spec` with the sources and the row readers,
`prompts`, `arithmetic`), the math-verify worker pool (`math_verify_pool`), the TRL reward functions (`rewards`)
and the default model with its offline copy (`models`).

Nothing is imported here, so `ordergrad_trl.tasks.rewards` loads without `datasets`."""
