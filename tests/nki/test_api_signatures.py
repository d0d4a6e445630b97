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


# Names of the newer (beta-2) API reference that nprof does not offer yet: listed here so the gap is visible and
# a new one fails. None of AWS's public kernels (nki-samples, the SDK's NKI tests and tutorials) calls them.
NOT_OFFERED = {
    "get_nc_sub_version", "tensor_scalar_cumulative", "activate2", "rng", "set_rng_seed", "rand_set_state",
    "rand_get_state", "rand2", "exponential", "core_barrier", "dma_compute", "sendrecv", "nonzero_with_count",
    "topk",
}  # fmt: skip
# 2.26 and beta 2 order these positional tiles differently; nprof reads positional calls in the 2.26 order and warns
POSITIONAL_2_26 = {"nc_stream_shuffle"}


@pytest.mark.parametrize(("mod", "name", "params"), _entries("beta2"), ids=lambda v: v if isinstance(v, str) else "")
def test_beta2_signatures(mod: str, name: str, params: list[str]) -> None:
    """Every function of the beta-2 list exists (or is a listed gap), takes all its parameters by keyword, and
    takes its positional arguments in AWS's dst-first order (natively, or by the beta-2 dispatch of `calls.beta2`)."""
    obj = getattr(nisa, name, None)
    if obj is None:
        assert name in NOT_OFFERED, f"nisa.{name} of the beta-2 API is missing"
        return
    assert name not in NOT_OFFERED, f"nisa.{name} exists now: drop it from NOT_OFFERED"
    ours = inspect.signature(obj).parameters
    assert [p for p in params if p not in ours] == [], f"nisa.{name} lacks beta-2 parameters"
    order = getattr(obj, "_nki_beta2", None)
    if order is not None:
        assert list(order) == params[: len(order)], f"nisa.{name} dst-first order differs from AWS's"
    elif name not in POSITIONAL_2_26:
        positional = [p.name for p in ours.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        assert positional[: len(params)] == params[: len(positional)], f"nisa.{name} positional order differs"


def _beta2_kernel(x, seg):
    """dropout, sequence_bounds and range_select in the beta-2 call style (dst first, by position)."""
    out = nl.ndarray((3, 128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    kept = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dropout(kept, t, 0.0)  # p = 0 keeps everything
    lo = nl.full((128, 1), 2.0, dtype=nl.float32, buffer=nl.sbuf)
    hi = nl.full((128, 1), 5.0, dtype=nl.float32, buffer=nl.sbuf)
    picked = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.range_select(picked, t, np.greater_equal, np.less, lo, hi, on_false_value=-1.0)
    bounds = nl.ndarray((1, 2, 8), dtype=nl.int32, buffer=nl.sbuf)
    nisa.sequence_bounds(bounds, nl.load(seg))
    nl.store(out[0], kept)
    nl.store(out[1], picked)
    nl.store(out[2, 0:1, :], nl.copy(bounds[:, 1, :], dtype=nl.float32))
    return out


def test_beta2_dst_first_calls_of_the_newer_signatures() -> None:
    x = np.tile(np.arange(8, dtype=np.float32), (128, 1))
    seg = np.array([[1, 1, 2, 2, 2, 0, 3, 3]], np.int32)
    got = nki.jit(_beta2_kernel)(x, seg)
    np.testing.assert_array_equal(got[0], x)
    cols = np.arange(8)
    np.testing.assert_array_equal(got[1], np.where((cols >= 2) & (cols < 5), x, -1.0))  # range_start 0: column i
    np.testing.assert_array_equal(got[2, 0], [2, 2, 5, 5, 5, -1, 8, 8])  # each segment's exclusive end; padding -1


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
