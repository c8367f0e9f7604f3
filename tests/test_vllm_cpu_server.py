"""vLLM server mode on CPU: what runs without a GPU, and where TRL stops.

`trl vllm-serve` on 127.0.0.1 (started and stopped here, every wait bounded) serves TRL's `VLLMClient`:
generation works. Server-mode *training* needs the server to receive the policy's weights, and TRL sends them
over NCCL: `VLLMClient.init_communicator` refuses a non-CUDA device, so `OrderGradTrainer(vllm_mode="server")`
fails at construction on CPU with TRL's own error. That is the GPU-only part (docs/multi-gpu.md).
"""

from __future__ import annotations

import importlib.metadata
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.vllm_cpu_env import SKIP_REASON, VLLM_MISSING, build_vllm_model, vllm_env

if VLLM_MISSING:
    pytest.skip(SKIP_REASON, allow_module_level=True)

from ordergrad_trl.training.trl_private import installed_vllm  # noqa: E402

STARTUP_S, REQUEST_S = 600, 120


@pytest.fixture(scope="module")
def vllm_model_dir(tmp_path_factory):
    return build_vllm_model(tmp_path_factory.mktemp("tiny_qwen2_vllm"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_metadata_shim(tmp: Path) -> dict:
    """vLLM's CLI reads the version of the distribution `vllm`; the CPU build is installed as `vllm-cpu`. Users put
    metadata named `vllm` on the path (docs/troubleshooting.md); so does this test, for the server process only."""
    _, version = installed_vllm()
    try:
        importlib.metadata.version("vllm")
        return {}
    except importlib.metadata.PackageNotFoundError:
        pass
    # vLLM also picks its CPU platform from that version: it must say "cpu" (the CPU build's own is plain "0.31.0")
    version = version if "cpu" in version else f"{version}+cpu"
    info = tmp / "shim" / f"vllm-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return {"PYTHONPATH": str(info.parent)}


@pytest.fixture(scope="module")
def server(vllm_model_dir, tmp_path_factory):
    """`trl vllm-serve` on 127.0.0.1; yields its base URL; stopped (SIGTERM, then SIGKILL) whatever happens."""
    import requests

    tmp = tmp_path_factory.mktemp("serve")
    port = free_port()
    log = open(tmp / "server.log", "w+")
    cmd = [str(Path(sys.executable).parent / "trl"), "vllm-serve", "--model", str(vllm_model_dir), "--host",
           "127.0.0.1", "--port", str(port), "--enforce_eager", "true", "--max_model_len", "256"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=vllm_env(**vllm_metadata_shim(tmp)), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"trl vllm-serve exited with {proc.returncode}:\n{log.read()[-6000:]}")
            try:
                if requests.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                log.seek(0)
                pytest.fail(f"trl vllm-serve not up within {STARTUP_S} s:\n{log.read()[-6000:]}")
            time.sleep(1)
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        except ProcessLookupError:  # it had exited already
            pass
        log.close()


def test_generation_client_against_trl_vllm_serve(server, vllm_model_dir):
    from transformers import AutoTokenizer
    from trl.generation.vllm_client import VLLMClient

    tok = AutoTokenizer.from_pretrained(vllm_model_dir)
    client = VLLMClient(base_url=server, connection_timeout=REQUEST_S)
    prompts = [tok("What is 3 plus 4?")["input_ids"], tok("Compute 2 times 5")["input_ids"]]
    out = client.generate(prompts=prompts, n=2, max_tokens=6)  # sampled: vLLM refuses n > 1 when greedy
    completions = out["completion_ids"]
    assert len(completions) == 4 and all(1 <= len(c) <= 6 for c in completions), out
    assert all(0 <= t < len(tok) for c in completions for t in c)
    assert out["prompt_ids"][0] == prompts[0] and out["prompt_ids"][1] == prompts[1]
    greedy = [client.generate(prompts=prompts, max_tokens=6, temperature=0.0)["completion_ids"] for _ in range(2)]
    assert greedy[0] == greedy[1]


def test_weight_transfer_is_gpu_only(server, vllm_model_dir, cpu_training_args):
    """TRL's NCCL weight transfer: the client refuses a CPU device, so server-mode training stops at construction."""
    from datasets import Dataset
    from trl.generation.vllm_client import VLLMClient

    from ordergrad_trl import OrderGradConfig, OrderGradTrainer

    gpu_only = r"Weight synchronization runs on vLLM's NCCL weight-transfer engine, which needs a CUDA device"
    with pytest.raises(NotImplementedError, match=gpu_only):
        VLLMClient(base_url=server, connection_timeout=REQUEST_S).init_communicator(device="cpu")
    host, port = server.removeprefix("http://").split(":")
    args = OrderGradConfig(**cpu_training_args, use_vllm=True, vllm_mode="server", vllm_server_host=host,
                           vllm_server_port=int(port), vllm_server_timeout=REQUEST_S, num_generations=8,
                           per_device_train_batch_size=8, max_completion_length=4)  # fmt: skip
    with pytest.raises(NotImplementedError, match=gpu_only):
        OrderGradTrainer(model=str(vllm_model_dir), reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                         args=args, train_dataset=Dataset.from_dict({"prompt": ["What is 3 plus 4?"] * 8}))  # fmt: skip
