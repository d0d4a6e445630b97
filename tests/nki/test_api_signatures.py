"""Every name of the targeted NKI API exists with AWS's parameters (tests/nki/nki_api_2_26.txt), and no
function swallows unknown keywords."""

from __future__ import annotations

import functools
import inspect
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nprof.nki.compiler as ncc
import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki
from nprof.nki.calls import NkiCompatWarning
from nprof.nki.tensor import NkiTensor
from tests.nki.helpers import run_tiles

API = Path(__file__).with_name("nki_api_2_26.txt")
MODULES = {"nl": nl, "nisa": nisa, "nki": nki, "ncc": ncc, "ncc.sbuf": ncc.sbuf, "ncc.psum": ncc.psum}
DEFAULTS = {"None": None, "False": False, "True": True, "''": "", "()": (), "bool": nl.bool_, "np.uint8": nl.uint8,
            "np.float32": nl.float32, "engine.unknown": nisa.engine.unknown, "reduce_cmd.idle": nisa.reduce_cmd.idle,
            "oob_mode.error": nisa.oob_mode.error, "dge_mode.unknown": nisa.dge_mode.unknown, "np.amax": np.amax,
            "fp32.min": nl.fp32.min, "'auto'": "auto", "0": 0, "1": 1, "2": 2, "50": 50, "1.0": 1.0,
            "1e-06": 1e-06}  # fmt: skip  (every default the list uses: each one is checked)


def _entries(section: str) -> list[tuple[str, str, list[str]]]:
    rows, current = [], ""
    for line in API.read_text().splitlines():
        if line.startswith("["):
            current = line.strip("[]")
        elif line and not line.startswith("#") and current == section:
            qual, _, params = line.partition(":")
            mod, _, name = qual.rpartition(".")
            rows.append((mod, name, params.split()))
    return rows


def _lookup(mod: str, name: str) -> Any:
    """The object named; a method of `nki.tensor` / `nki.FrameworkKernel` without its `self` (its signature as called
    on an instance)."""
    if mod not in ("nki.tensor", "nki.FrameworkKernel"):
        return getattr(MODULES[mod], name)
    cls = NkiTensor if mod == "nki.tensor" else nki.FrameworkKernel
    attr = inspect.getattr_static(cls, name)
    return attr if isinstance(attr, property) else functools.partial(getattr(cls, name), None)


@pytest.mark.parametrize(("mod", "name", "params"), _entries("") + _entries("newer"),
                         ids=lambda v: v if isinstance(v, str) else "")  # fmt: skip
def test_name_exists_with_aws_parameters(mod: str, name: str, params: list[str]) -> None:
    obj = _lookup(mod, name)
    if params in (["<class>"], ["<value>"]) or not params or (params[0].startswith("*") and len(params) == 1):
        return
    sig = inspect.signature(obj)
    ours = sig.parameters
    positional = [p for p in ours.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword_only = False
    for k, spec in enumerate(params):
        if spec == "*":
            keyword_only = True
            continue
        if spec.startswith("*"):  # *args of AWS's signature
            assert any(p.kind is p.VAR_POSITIONAL for p in ours.values()), f"{mod}.{name} lacks {spec}"
            keyword_only = True
            continue
        pname, _, default = spec.partition("=")
        assert pname in ours, f"{mod}.{name} has no parameter {pname!r} (ours: {list(ours)})"
        if not keyword_only:
            assert positional[k].name == pname, f"{mod}.{name}: positional parameter {k} is {positional[k].name}"
        if default:
            assert ours[pname].default == DEFAULTS[default], f"{mod}.{name}({pname}=) default differs"
    if f"{mod}.{name}" != "nki.simulate_kernel":  # forwards the kernel's own keyword arguments
        assert not any(p.kind is p.VAR_KEYWORD for p in ours.values()), f"{mod}.{name} swallows unknown keywords"


@pytest.mark.parametrize(("mod", "name", "params"), _entries("beta2"), ids=lambda v: v if isinstance(v, str) else "")
def test_beta2_dst_first_order(mod: str, name: str, params: list[str]) -> None:
    obj = getattr(nisa, name, None)
    order = getattr(obj, "_nki_beta2", None)
    if order is None:  # not offered in the dst-first style: its 2.26 form is what nprof runs
        return
    assert list(order) == params[: len(order)], f"nisa.{name} dst-first order differs from AWS's"


def _all_functions() -> list[tuple[str, Any]]:
    out = []
    for prefix, mod in (("nl", nl), ("nisa", nisa), ("nki", nki)):
        for n in dir(mod):
            f = getattr(mod, n)
            if callable(f) and not isinstance(f, type) and not n.startswith("_") and inspect.isfunction(f):
                out.append((f"{prefix}.{n}", f))
    return out


def test_no_public_function_takes_catch_all_keywords() -> None:
    allowed = {"nki.simulate_kernel"}  # forwards the kernel's own keyword arguments
    offenders = [
        q for q, f in _all_functions()
        if q not in allowed and any(p.kind is p.VAR_KEYWORD for p in inspect.signature(f).parameters.values())
    ]  # fmt: skip
    assert offenders == []


def test_unknown_keywords_raise_naming_them() -> None:
    x = np.ones((4, 8), np.float32)
    with pytest.raises(TypeError, match="dtpye"):
        run_tiles(lambda t: nl.exp(t, dtpye=nl.float32), x)
    with pytest.raises(TypeError, match="dest"):
        run_tiles(lambda t: nisa.tensor_copy(t, dest=t), x)
    with pytest.raises(TypeError, match="iteration"):
        nki.benchmark(iteration=50)
    with pytest.raises(TypeError, match="bogus"):
        nki.jit(bogus=1)


def test_unmodelled_parameter_warns_once_per_kernel_naming_it() -> None:
    x = np.ones((128, 8), np.float32)

    def fn(t):
        y = nl.ndarray(t.shape, dtype=t.dtype)
        for _ in range(3):
            nisa.dma_copy(dst=y, src=t, priority=1)
        return y

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run_tiles(fn, x)
    compat = [w for w in seen if issubclass(w.category, NkiCompatWarning)]
    assert len(compat) == 1 and "priority" in str(compat[0].message)


def test_nki_tensor_is_the_tensor_class_and_its_module_is_imported_by_name() -> None:
    """`nki.tensor` is the class (2.26 API); the package attribute shadows the module nprof.nki.tensor, so code
    reaches the module with `from nprof.nki.tensor import ...` only (`import nprof.nki.tensor as m` would bind
    the class)."""
    assert nki.tensor is NkiTensor
    root = Path(__file__).resolve().parents[2]
    pattern = re.compile(r"^\s*import nprof\.nki\.tensor\b", re.M)
    offenders = [str(p) for d in ("src", "tests", "scripts", "bench") for p in (root / d).rglob("*.py")
                 if pattern.search(p.read_text(errors="replace"))]  # fmt: skip
    assert offenders == []


def test_tensor_methods_of_the_2_26_class() -> None:
    x = np.arange(32, dtype=np.float32).reshape(4, 8)

    def fn(t):
        assert t.assert_shape((4, 8)) is t and t.itemsize == 4
        assert t.expand_dims(1).shape == (4, 1, 8)
        return t.astype(nl.bfloat16)

    got = run_tiles(fn, x)
    np.testing.assert_array_equal(np.asarray(got, np.float32), x)  # small integers: exact in bf16
    with pytest.raises(Exception, match=r"has shape \(4, 8\), not \(8, 4\)"):
        run_tiles(lambda t: t.assert_shape((8, 4)), x)
