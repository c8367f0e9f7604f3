"""A stand-in for an Apple MPS tensor on Linux CI: a CPU tensor subclass that, like MPS, refuses float64.

Every op on a `FakeMPS` tensor returns `FakeMPS` tensors (torch's subclass propagation) and raises the error MPS
raises if any result is float64. An explicit copy to the CPU (`.cpu()`, `.to("cpu")`, `.to(device=cpu)`) returns
a plain tensor, as on a Mac. `no_float64(monkeypatch)` makes `ordergrad_trl` treat FakeMPS tensors as having no
float64. Blind spot: factories (`torch.zeros(..., device=x.device)`) do not see the subclass.
"""

import torch

from ordergrad_trl.core import advantage


class FakeMPS(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.cpu, torch.Tensor.to) and _to_cpu(func, args, kwargs):
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs).as_subclass(torch.Tensor)  # `.to` may return self: unwrap
        out = super().__torch_function__(func, types, args, kwargs)
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
                raise TypeError(f"Cannot convert a MPS Tensor to float64 dtype ({func.__name__})")
        return out


def _to_cpu(func, args, kwargs) -> bool:
    if func is torch.Tensor.cpu:
        return True
    targets = list(args[1:]) + [kwargs.get("device")]
    return any(isinstance(t, (str, torch.device)) and torch.device(t).type == "cpu" for t in targets)


def fake_mps(tensor: torch.Tensor) -> FakeMPS:
    if tensor.dtype == torch.float64:
        raise TypeError("MPS has no float64: make the fake tensor float32 (or an integer type)")
    return tensor.as_subclass(FakeMPS)


def no_float64(monkeypatch) -> None:
    monkeypatch.setattr(advantage, "_has_float64", lambda t: not isinstance(t, FakeMPS))
