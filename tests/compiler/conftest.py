"""Fixtures for the compiler tests: a private compile cache, and eager-vs-device comparison helpers."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

RTOL = 1e-4
ATOL = 1e-5


@pytest.fixture(scope="session", autouse=True)
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("compile-cache")
    old = os.environ.get("NPROF_CACHE")
    os.environ["NPROF_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("NPROF_CACHE", None)
    else:
        os.environ["NPROF_CACHE"] = old


def _clone(args: Sequence[object]) -> list[object]:
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            c = a.detach().clone()
            c.requires_grad_(a.requires_grad)
            out.append(c)
        else:
            out.append(a)
    return out


def check_fn(fn: Callable[..., object], *args: object, grad: bool = True, atol: float = ATOL) -> None:
    """fn compiled with the nprof backend gives eager's outputs and input gradients (fp32, rtol 1e-4)."""
    torch._dynamo.reset()
    eager_args = _clone(args)
    dev_args = _clone(args)
    expected = fn(*eager_args)
    got = torch.compile(fn, backend="nprof")(*dev_args)
    exp_list = expected if isinstance(expected, (tuple, list)) else [expected]
    got_list = got if isinstance(got, (tuple, list)) else [got]
    assert len(exp_list) == len(got_list)
    for e, g in zip(exp_list, got_list, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        torch.testing.assert_close(g.detach(), e.detach(), rtol=RTOL, atol=atol)
    if not grad:
        return
    gen = torch.Generator().manual_seed(1)
    floats_e = [e for e in exp_list if e.dtype.is_floating_point]
    floats_g = [g for g in got_list if g.dtype.is_floating_point]
    weights = [torch.randn(e.shape, generator=gen) for e in floats_e]
    loss_e = sum((e * w).sum() for e, w in zip(floats_e, weights, strict=True))
    loss_g = sum((g * w).sum() for g, w in zip(floats_g, weights, strict=True))
    loss_e.backward()
    loss_g.backward()
    for a, b in zip(eager_args, dev_args, strict=True):
        if isinstance(a, torch.Tensor) and a.requires_grad:
            torch.testing.assert_close(b.grad, a.grad, rtol=RTOL, atol=atol)


def check_module(make: Callable[[], torch.nn.Module], *inputs: torch.Tensor) -> None:
    """A module compiled with nprof: same outputs, same parameter and input gradients as eager."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = make().eval()  # eval: dropout is the identity (training-mode dropout needs a device RNG)
    dev = make().eval()
    dev.load_state_dict(eager.state_dict())
    e_in = _clone(inputs)
    d_in = _clone(inputs)
    out_e = eager(*e_in)
    out_d = torch.compile(dev, backend="nprof")(*d_in)
    torch.testing.assert_close(out_d.detach(), out_e.detach(), rtol=RTOL, atol=ATOL)
    w = torch.randn(out_e.shape, generator=torch.Generator().manual_seed(2))
    (out_e * w).sum().backward()
    (out_d * w).sum().backward()
    for (name, pe), (_, pd) in zip(eager.named_parameters(), dev.named_parameters(), strict=True):
        torch.testing.assert_close(pd.grad, pe.grad, rtol=RTOL, atol=ATOL, msg=f"gradient of {name}")
    for a, b in zip(e_in, d_in, strict=True):
        if a.requires_grad:
            torch.testing.assert_close(b.grad, a.grad, rtol=RTOL, atol=ATOL)


def lower_with_switch(module: object, on: bool, fn: object, args: Sequence[torch.Tensor], name: str) -> tuple:
    """(program, slots, input names) of `fn` traced by make_fx with the backend's decompositions and lowered as
    an inference graph (inputs in0.., outputs out0, out1) with `module.ENABLED` set to `on` (restored after)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from nprof.compiler.backend import decompositions
    from nprof.compiler.lower import GraphPlan, lower_graph

    old = module.ENABLED  # type: ignore[attr-defined]
    module.ENABLED = on  # type: ignore[attr-defined]
    try:
        gm = make_fx(fn, decomposition_table=decompositions())(*args)
        names = [f"in{i}" for i in range(len(args))]
        program, slots = lower_graph(gm, GraphPlan(name, "inference", names, ["out0", "out1"]))
    finally:
        module.ENABLED = old  # type: ignore[attr-defined]
    return program, slots, names
