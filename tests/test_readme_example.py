"""The README's usage example runs as written on a machine without a GPU (issue 51): only its Hub model id is swapped
for the offline tiny model (the Hub is unreachable here), and CUDA is hidden so the CPU branch is the one taken."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from helpers import bounded

REPO = Path(__file__).resolve().parents[1]


def _usage_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    (example,) = [b for b in blocks if "OrderGradTrainer(" in b]
    return example


def test_readme_usage_example_trains_on_cpu_as_written(tmp_path, tiny_model_dir):
    example = _usage_example()
    assert example.count('model="Qwen/Qwen2.5-0.5B-Instruct"') == 1
    script = example.replace('model="Qwen/Qwen2.5-0.5B-Instruct"', f"model={str(tiny_model_dir)!r}")
    script += "\nprint('trained steps:', trainer.state.global_step)\n"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    proc = bounded.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = int(re.search(r"trained steps: (\d+)", proc.stdout).group(1))
    assert steps > 0 and (tmp_path / "qwen-maxk").is_dir()
