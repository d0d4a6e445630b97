"""Special-value differential testing of the nprof torch.compile backend against eager.

Contract: `CASES` are small functions, each exercising some lowered ATen ops (forward, and backward when the case
has float inputs that take a gradient). `run_case(case, kinds)` compiles it once with ``backend="nprof"`` and, for
each kind of special value in `KINDS` (inf, -inf, NaN, -0.0, huge: +-1e30 and +-3e38, tiny: denormals), runs it on
seeded random inputs with that value put at random positions of every float input (and of the output weights
the backward starts from), and compares outputs and input gradients with eager's (`compare`: NaN positions, inf
positions with their signs, finite values to rtol 1e-4 / atol 1e-5, and the sign of zeros). It returns a
`Result` per kind: the mismatch classes, or that the backend refused (raised), or that it re-ran eagerly (warned).
`covered_ops(case)` traces a case with AOTAutograd and the backend's decompositions (no device run) and returns
the registry names (`nprof.compiler.lowerings.LOWERINGS` keys) the lowering would use; `op_family(name)` is the
op without overload or namespace, the unit of coverage. Element counts are multiples of 64, so eager runs its
vectorised CPU kernels everywhere (their non-finite semantics differ from the scalar tail loops in places).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

KINDS = ("inf", "-inf", "nan", "-0", "huge", "tiny")
_VALUES = {
    "inf": (float("inf"),), "-inf": (float("-inf"),), "nan": (float("nan"),), "-0": (-0.0,),
    "huge": (1e30, -1e30, 3e38, -3e38), "tiny": (1e-40, -1e-40, 1.4e-45, -3e-39),
}  # fmt: skip
RTOL, ATOL = 1e-4, 1e-5
Spec = tuple[int, ...] | Callable[[torch.Generator], Any]


@dataclass(frozen=True)
class Case:
    """`fn(*inputs)`; `inputs`: a shape (a random normal float tensor: special values go in, it takes a gradient
    when `grad`), or a function of a generator giving a fixed input (indices, masks: left as they are)."""

    name: str
    fn: Callable[..., Any]
    inputs: tuple[Spec, ...]
    grad: bool = True


@dataclass
class Result:
    kind: str
    mismatches: list[str] = field(default_factory=list)  # "<output>:<class>" (nan, inf, value, shape)
    notes: list[str] = field(default_factory=list)  # "<output>:zero-sign" (equal under IEEE comparison)
    examples: list[str] = field(default_factory=list)  # one example a mismatch or note
    refused: str = ""  # the backend raised (an acceptable answer: never silently wrong)
    reran: bool = False  # the backend ran the call eagerly with a warning

    @property
    def ok(self) -> bool:
        return not self.mismatches


def _idx(hi: int, *shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.randint(0, hi, shape, generator=g)


def _mask(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.rand(*shape, generator=g) > 0.5


def _sdpa(causal: bool) -> Callable[..., Any]:
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _offsets(_: torch.Generator) -> torch.Tensor:
    return torch.tensor([0, 3, 3, 7, 12, 13, 20, 26])  # bag 1 empty


def _bag(mode: str) -> Case:
    return Case(f"embedding_bag_{mode}", lambda w, idx, off: F.embedding_bag(idx, w, off, mode=mode),
                ((16, 8), _idx(16, 32), _offsets))


def _batch_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.batch_norm(x, x.new_zeros(4), x.new_ones(4), w, b, training=True)


def _batch_norm_c(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = x.shape[1]
    return F.batch_norm(x, x.new_zeros(c), x.new_ones(c), w, b, training=True)


def _moves(x: torch.Tensor) -> Any:
    """Copies, dtype conversions and uninitialised tensors written whole, and a tensor literal."""
    a = torch.empty(4, 16).copy_(x * 2.0)
    b = x.new_empty_strided((4, 16), (16, 1)).copy_(x) + torch.empty_strided((4, 16), (16, 1)).fill_(1.0)
    d = x + torch.tensor([0.5, 1.0, 1.5, 2.0])[:, None]
    e, f = x.split([4, 12], 1)
    return a, b, d, torch.ops.aten.view_copy(x, (16, 4)), e * f[:, :4]


def _views(x: torch.Tensor) -> Any:
    y = x.t().reshape(8, 8).permute(1, 0).unsqueeze(0).expand(2, 8, 8).contiguous()
    a, b = y.split(4, dim=1)
    c = torch.cat([b, a], 1)[:, 1:7:2].squeeze(0) * 2.0
    return c.transpose(1, 2), y.select(0, 1).clone(), torch.flip(x, (0,)), x.view(16, 4)[3]


def _scatters(x: torch.Tensor, src: torch.Tensor) -> Any:
    a = torch.select_scatter(x, src[0], 0, 2)
    b = torch.slice_scatter(x, src[:2], 0, 1, 3)
    return a, b, F.pad(x, (1, 2, 0, 1), value=0.5), x.new_zeros(4, 16) + x.new_ones(16) + x.new_full((4, 16), 2.0)


def _index(x: torch.Tensor, i: torch.Tensor, src: torch.Tensor) -> Any:
    j = i[0, :4] % 4
    picked = x.index_select(0, j), x.index_select(1, i[0])  # (index_select on either dim)
    return x[j], x.gather(1, i), x.index_put((j,), src, accumulate=True), *picked


def _scatter(x: torch.Tensor, i: torch.Tensor, src: torch.Tensor) -> Any:
    return x.scatter(1, i, src), x.scatter_add(1, i, src), x.scatter(1, i, 1.5)


def _reductions(x: torch.Tensor) -> Any:
    return (x.sum(), x.sum(1), x.mean(), x.mean(0), x.amax(1), x.amin(0), x.max(1)[0], x.var(1), x.std(0),
            torch.linalg.vector_norm(x, dim=1))  # fmt: skip


def _unary(name: str, fn: Callable[..., Any]) -> Case:
    return Case(name, fn, ((4, 16),))


def _binary(name: str, fn: Callable[..., Any], grad: bool = True) -> Case:
    return Case(name, fn, ((4, 16), (4, 16)), grad=grad)


CASES: tuple[Case, ...] = (
    *(_unary(n, getattr(torch, n)) for n in ("relu", "exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "erf",
                                             "abs", "neg", "sign", "sin", "cos", "reciprocal", "log1p", "expm1")),
    Case("sgn", torch.sgn, ((4, 16),), grad=False),
    _unary("silu", F.silu),
    _unary("gelu", F.gelu),
    _unary("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    _unary("pow_scalars", lambda x: (x**2, x**0.5, x**-0.5, x**3, 2.0**x)),
    _unary("scalar_arith", lambda x: (x + 2.0, x - 1.5, x * 3.0, x / 3.0, 1.5 - x, 2.0 / x, x % 1.5,
                                      torch.fmod(x, 1.5))),
    _unary("clamp", lambda x: (x.clamp(-0.5, 0.7), x.clamp_min(0.1), x.clamp_max(0.2))),
    _unary("hard_acts", lambda x: (F.relu6(x), F.hardtanh(x, -0.5, 0.5), F.hardswish(x), F.elu(x),
                                   F.leaky_relu(x, 0.1))),
    _unary("compare_scalar", lambda x: (x > 0.5, x >= 0, x < 0.1, x <= 0, x == 0.0, x != 1.0)),
    _unary("logical", lambda x: (~(x > 0), torch.logical_not(x), (x > 0) & (x < 1), (x > 0) | (x < -1))),
    _binary("add_sub", lambda a, b: (a + b, a - b, torch.add(a, b, alpha=2.0), torch.rsub(a, b))),
    _binary("mul_div", lambda a, b: (a * b, a / b)),
    _binary("max_min", lambda a, b: (torch.maximum(a, b), torch.minimum(a, b))),
    _binary("mod_tensor", lambda a, b: (torch.remainder(a, b), torch.fmod(a, b)), grad=False),
    _binary("compare", lambda a, b: (a > b, a >= b, a < b, a <= b, a == b, a != b,
                                     torch.logical_and(a, b), torch.logical_or(a, b)), grad=False),
    _binary("where", lambda a, b: torch.where(a > b, a, b * 2.0)),
    Case("broadcast", lambda a, b: (a + b, a * b), ((4, 16), (16,))),
    _unary("reductions", _reductions),
    _unary("any_argmax", lambda x: (torch.any(x > 0, 1), x.argmax(1))),
    _unary("softmax", lambda x: (torch.softmax(x, 1), torch.log_softmax(x, 0))),
    _unary("cumsum", lambda x: (x.cumsum(1), x.cumsum(0))),
    _unary("views", _views),
    Case("scatters", _scatters, ((4, 16), (4, 16))),
    Case("index", _index, ((4, 16), _idx(16, 4, 16), (4, 16))),
    Case("scatter", _scatter, ((4, 16), _idx(16, 4, 1), (4, 1))),
    Case("mm", torch.mm, ((8, 16), (16, 8))),
    Case("bmm", torch.bmm, ((2, 8, 16), (2, 16, 8))),
    Case("addmm", F.linear, ((8, 16), (8, 16), (8,))),
    Case("layer_norm", lambda x, w, b: F.layer_norm(x, (16,), w, b), ((4, 16), (16,), (16,))),
    Case("batch_norm", _batch_norm, ((4, 4, 4, 4), (4,), (4,))),
    Case("batch_norm_eval", lambda x: F.batch_norm(x, torch.zeros(4), torch.ones(4)), ((4, 4, 4, 4),)),
    Case("embedding", lambda w, i: F.embedding(i, w), ((16, 8), _idx(16, 8, 8))),
    _bag("sum"),
    _bag("mean"),
    Case("cross_entropy", lambda x, t: F.cross_entropy(x, t), ((16, 8), _idx(8, 16))),
    Case("nll_loss", lambda x, t: F.nll_loss(x, t, reduction="sum"), ((16, 8), _idx(8, 16))),
    Case("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1), ((2, 4, 4, 4), (4, 4, 3, 3), (4,))),
    Case("conv2d_strided", lambda x, w: F.conv2d(x, w, stride=2), ((2, 4, 8, 8), (8, 4, 2, 2))),
    Case("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1), ((2, 2, 8, 8),)),
    Case("adaptive_avg_pool", lambda x: F.adaptive_avg_pool2d(x, 1), ((2, 4, 4, 4),)),
    Case("sdpa", _sdpa(False), ((1, 2, 8, 8), (1, 2, 8, 8), (1, 2, 8, 8))),
    Case("sdpa_causal", _sdpa(True), ((1, 2, 8, 8), (1, 2, 8, 8), (1, 2, 8, 8))),
    Case("masked", lambda x, m: x.masked_fill(m, float("-inf")).softmax(-1), ((4, 16), _mask(4, 16))),
    _unary("arange_full", lambda x: x * torch.arange(16.0) + torch.full((4, 16), 0.5) + torch.arange(0, 32, 2)
                                     + torch.ones(16)),
    _unary("moves", _moves),
    Case("embedding_bag_nograd", lambda w, i, o: F.embedding_bag(i, w, o), ((16, 8), _idx(16, 32), _offsets),
         grad=False),
    Case("to_copy", lambda x: (x.to(torch.float64) * 2).to(torch.float32), ((4, 16),)),
)  # fmt: skip


def special_inputs(case: Case, kind: str | None, seed: int) -> list[Any]:
    """The case's inputs for one kind (None: clean), seeded: every float input holds the kind's values at
    ~1/16 of its positions (at least one), the rest standard normal."""
    gen = torch.Generator().manual_seed(seed)
    out: list[Any] = []
    for spec in case.inputs:
        if callable(spec):
            out.append(spec(gen))
            continue
        x = torch.randn(*spec, generator=gen)
        if kind is not None:
            _inject(x, kind, gen)
        out.append(x)
    return out


def _inject(x: torch.Tensor, kind: str, gen: torch.Generator) -> None:
    flat = x.view(-1)
    n = flat.numel()
    picks = torch.randperm(n, generator=gen)[: max(1, n // 16)]
    values = torch.tensor(_VALUES[kind], dtype=x.dtype)
    flat[picks] = values[torch.randint(0, len(values), (len(picks),), generator=gen)]


def compare(got: Any, want: Any, alt: Any = None, scale: float = 0.0) -> list[tuple[str, str]]:
    """The mismatches of `got` against eager's `want`, each (class, first example): shape (or dtype), nan (NaN
    positions), inf (positions or signs of infinities), value (finite values beyond rtol and atol, or unequal
    non-float values), zero-sign (a zero whose sign differs: reported, equal under IEEE comparison).
    With `scale` (the largest input magnitude) finite values may differ by 8 float32 ulps of it besides (a sum
    reassociated at that scale: eager's own order is one of many); with `alt` (eager's result computed in
    float64, rounded to float32) a position where `got` equals `alt`, or where eager's result is non-finite and
    `alt`'s is not (or the reverse), is no mismatch: eager's float32 result there is an overflow of its evaluation
    order (inf or NaN where partial sums overflowed; another order gives another); nor is an inf where eager's
    finite result of the same sign is within 64x of FLT_MAX (the device's order of that sum overflowed), nor a
    non-finite `got` where `alt` (pass it unrounded, float64) is finite beyond FLT_MAX (every float32 order
    overflows there: to +-inf, or NaN where partial sums of both signs overflowed)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return [("shape", f"{tuple(got.shape)} {got.dtype} vs {tuple(want.shape)} {want.dtype}")]
    if not want.dtype.is_floating_point:
        bad = got != want
        return [] if not bool(bad.any()) else [("value", _example(bad.numpy(), got, want))]
    g, w = got.detach().double().numpy(), want.detach().double().numpy()
    atol = ATOL + 8 * float(np.finfo(np.float32).eps) * scale
    gn, wn = np.isnan(g), np.isnan(w)
    fin = np.isfinite(g) & np.isfinite(w)
    with np.errstate(invalid="ignore", over="ignore"):  # over: float64 beyond FLT_MAX rounded to float32
        masks = {
            "nan": gn != wn,
            "inf": (np.isinf(g) | np.isinf(w)) & ~gn & ~wn & (g != w),
            "value": fin & ~np.isclose(g, w, rtol=RTOL, atol=atol),
        }
        if alt is not None:
            wide = alt.detach().double().numpy()
            a = wide.astype(np.float32).astype(np.float64)  # eager's exact-ish result rounded to float32
            # beyond FLT_MAX: every float32 order overflows, to +-inf or (partial sums of both signs) NaN
            unbounded = np.isfinite(wide) & np.isinf(a) & ~np.isfinite(g)
            unstable = (wn != np.isnan(a)) | (np.isinf(w) != np.isinf(a)) | (np.isinf(w) & (w != a))
            # a sum within 64x of FLT_MAX overflows in some orders: device +-inf where eager is finite there
            near = np.isfinite(w) & (np.abs(w) >= np.finfo(np.float32).max / 64) & (np.sign(g) == np.sign(w))
            unstable |= (near & np.isinf(g)) | unbounded
            agrees = unstable | (gn & np.isnan(a)) | (g == a) | np.isclose(g, a, rtol=RTOL, atol=atol)
            masks = {name: m & ~agrees for name, m in masks.items()}
        masks["zero-sign"] = fin & (g == 0) & (w == 0) & (np.signbit(g) != np.signbit(w))
    return [(name, _example(m, got, want)) for name, m in masks.items() if m.any()]


def _example(mask: np.ndarray, got: Any, want: Any) -> str:
    pos = tuple(int(i) for i in np.argwhere(mask)[0])
    return f"{int(mask.sum())} at e.g. {pos}: got {got[pos].item()!r}, eager {want[pos].item()!r}"


def listed(value: Any) -> list[Any]:
    """A tuple or list of outputs as a list; one output as a list of one."""
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _forward_backward(fn: Callable[..., Any], args: Sequence[Any], grad: bool, kind: str | None, seed: int) -> tuple:
    """(outputs, input gradients) of `fn` on `args` (cloned); the backward of a weighted sum of the float
    outputs, the weights holding the kind's special values like the inputs."""
    args = [a.detach().clone().requires_grad_(grad) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
            for a in args]  # fmt: skip
    outs = listed(fn(*args))
    if not grad:
        return [o.detach() for o in outs], []
    gen = torch.Generator().manual_seed(seed + 1)
    floats = [o for o in outs if o.dtype.is_floating_point and o.requires_grad]
    weights = []
    for o in floats:
        w = torch.randn(o.shape, generator=gen)
        if kind is not None and w.numel() >= 16:
            _inject(w, kind, gen)
        weights.append(w)
    loss = sum((o * w).sum() for o, w in zip(floats, weights, strict=True))
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = torch.autograd.grad(loss, leaves, allow_unused=True) if floats else [None] * len(leaves)
    grads = [torch.zeros_like(a) if g is None else g for a, g in zip(leaves, grads, strict=True)]
    return [o.detach() for o in outs], grads


def run_case(case: Case, kinds: Sequence[str] = KINDS, seed: int = 0) -> list[Result]:
    """Compile `case.fn` once with the nprof backend and compare it with eager for each kind (see module doc)."""
    torch._dynamo.reset()
    compiled = torch.compile(case.fn, backend="nprof")
    results = []
    for k, kind in enumerate(kinds):
        res = Result(kind)
        args = special_inputs(case, kind, seed + 101 * k)
        want_out, want_grad = _forward_backward(case.fn, args, case.grad, kind, seed + k)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got_out, got_grad = _forward_backward(compiled, args, case.grad, kind, seed + k)
        except Exception as err:  # the backend refused: recorded, not a mismatch
            res.refused = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
            results.append(res)
            continue
        res.reran = any("ran eagerly" in str(w.message) for w in caught)
        # eager's float64 run: a finite sum of many terms rounds in its own order (K > 128 matmuls: the device's
        # order can be nearer the exact sum than eager's); at the scale of 3e38 they overflow or cancel by order
        alts, scale = _double_reference(case, args, kind, seed + k), 0.0
        if kind == "huge":
            scale = max(float(a[a.isfinite()].abs().max()) for a in args if _is_float(a) and a.numel())
        for prefix, gots, wants, alt in (("out", got_out, want_out, alts[0]), ("grad", got_grad, want_grad, alts[1])):
            for j, (g, w) in enumerate(zip(gots, wants, strict=True)):
                for cls, example in compare(g, w, None if alt is None else alt[j], scale):
                    (res.notes if cls == "zero-sign" else res.mismatches).append(f"{prefix}{j}:{cls}")
                    res.examples.append(f"{prefix}{j}:{cls}: {example}")
        results.append(res)
    return results


def _is_float(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and a.is_floating_point()


def _double_reference(case: Case, args: Sequence[Any], kind: str, seed: int) -> tuple[Any, Any]:
    """Eager's outputs and gradients computed in float64 from the same inputs (and output weights), left in
    float64 (`compare` rounds them); (None, None) when the case does not run in float64."""
    wide = [a.double() if _is_float(a) else a for a in args]
    try:
        outs, grads = _forward_backward(case.fn, wide, case.grad, kind, seed)
    except (RuntimeError, TypeError):
        return None, None
    return outs, grads  # float64: `compare` rounds them, and tells a float32 overflow from a float64 one


def op_family(name: str) -> str:
    """``aten.add.Tensor`` / ``prims.add.default`` / ``add.Scalar`` -> ``add``."""
    parts = name.split(".")
    if parts[0] in ("aten", "prims", "_c10d_functional"):
        parts = parts[1:]
    return parts[0]


def covered_ops(case: Case) -> set[str]:
    """The registry names (`LOWERINGS` keys) of the ops in the case's forward and backward graphs as AOTAutograd
    traces them with the backend's decompositions (the graphs the backend lowers); no device run."""
    from functorch.compile import aot_function, make_boxed_func

    from nprof.compiler.backend import decompositions
    from nprof.compiler.lowerings import LOWERINGS

    seen: set[str] = set()

    def record(gm: Any, _: Any) -> Any:
        seen.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return make_boxed_func(gm)

    traced = aot_function(case.fn, fw_compiler=record, bw_compiler=record, decompositions=decompositions())
    _forward_backward(traced, special_inputs(case, None, 0), case.grad, None, 0)
    return {name for name in seen if name in LOWERINGS}


def reachable_families() -> set[str]:
    """The op families of the registry the backend can be handed: those with a registered overload that exists
    in torch, is not a CompositeImplicitAutograd op (decomposed while tracing) and that the backend's
    decompositions do not always replace (grouped convolutions' decompositions apply to some calls only)."""
    from nprof.compiler import grouped_conv
    from nprof.compiler.backend import decompositions
    from nprof.compiler.lowerings import LOWERINGS

    replaced = {str(op) for op in decompositions()} - {str(op) for op in grouped_conv.decompositions()}
    out = set()
    for name in LOWERINGS:
        namespace, _, rest = name.partition(".")
        packet, _, overload = rest.rpartition(".")
        try:
            op = getattr(getattr(getattr(torch.ops, namespace), packet), overload)
            implicit = op.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd)
        except (AttributeError, RuntimeError):  # registered under a name torch does not have (aten.add.default)
            continue
        if str(op) not in replaced and not implicit:  # implicit: decomposed while tracing
            out.add(op_family(name))
    return out


EXEMPT = {
    "all_gather_into_tensor": "collective: needs a process group (tests/compiler/test_distributed.py)",
    "all_reduce": "collective (see all_gather_into_tensor)",
    "all_reduce_": "collective (see all_gather_into_tensor)",
    "all_to_all_single": "collective (see all_gather_into_tensor)",
    "reduce_scatter_tensor": "collective (see all_gather_into_tensor)",
    "wait_tensor": "collective (see all_gather_into_tensor)",
    "convert_element_type": "a prims op no graph AOTAutograd builds here holds; aten._to_copy is covered (to_copy)",
    "_embedding_bag_dense_backward": "not in the graphs AOTAutograd builds (torch emits _embedding_bag_backward, "
                                     "covered: case embedding_bag_sum); the same lowering function",
    "native_dropout": "random mask: the device RNG's draws are not eager's, so values cannot be compared",
}


def _attn_mask(fill: str, length: int, keys: int, empty_row: bool = False) -> Callable[[torch.Generator], Any]:
    """An [L, S] attention mask hiding ~30% of the keys (key 0 always kept; `empty_row`: query row 1 hides
    every key): bool (True = attend), or additive float, 0 where kept and `fill` ("-inf", "min": finfo.min,
    "bias": a random normal bias everywhere, -inf where hidden) elsewhere."""

    def make(g: torch.Generator) -> torch.Tensor:
        keep = torch.rand(length, keys, generator=g) > 0.3
        keep[:, 0] = True
        if empty_row:
            keep[1] = False
        if fill == "bool":
            return keep
        base = torch.randn(length, keys, generator=g) if fill == "bias" else torch.zeros(length, keys)
        value = torch.finfo(torch.float32).min if fill == "min" else float("-inf")
        return base.masked_fill(~keep, value)

    return make


def _masked_sdpa(causal: bool = False) -> Callable[..., Any]:
    return lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal)


def _masked_cases(prefix: str, b: int, h: int, length: int, d: int) -> tuple[Case, ...]:
    qkv = ((b, h, length, d),) * 3
    return tuple(Case(f"{prefix}_{fill}{'_empty' if empty else ''}", _masked_sdpa(),
                      (*qkv, _attn_mask(fill, length, length, empty)))
                 for fill, empty in (("bool", False), ("-inf", False), ("min", False), ("bias", False),
                                     ("bool", True), ("-inf", True), ("min", True)))  # fmt: skip


MASKED_CASES: tuple[Case, ...] = _masked_cases("sdpa_mask", 1, 2, 8, 8)
"""Attention with an `attn_mask`: bool and additive float masks (-inf and finfo.min fills, a random bias), some
with a fully hidden query row; small shapes (one tile). ``bench/special_values.py`` runs them by default."""


def _big_elementwise(x: torch.Tensor, y: torch.Tensor) -> Any:
    return torch.exp(x), torch.tanh(x), torch.sigmoid(y), F.gelu(x), torch.relu(y), x * y, x / y, torch.maximum(x, y)


def _big_norms(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
    return F.layer_norm(x, (x.shape[1],), w, b), torch.softmax(x, 1), torch.log_softmax(x, 0)


LARGE_CASES: tuple[Case, ...] = (
    Case("big_elementwise", _big_elementwise, ((192, 640), (192, 640))),
    Case("big_reductions", _reductions, ((192, 640),)),
    Case("big_norms", _big_norms, ((192, 640), (640,), (640,))),
    Case("big_cumsum", lambda x: (x.cumsum(1), x.cumsum(0)), ((136, 576),)),
    Case("rowpack_norms", _big_norms, ((1024, 16), (16,), (16,))),
    Case("big_mm", torch.mm, ((160, 320), (320, 640))),
    Case("big_bmm", torch.bmm, ((2, 136, 256), (2, 256, 576))),
    Case("big_linear", F.linear, ((200, 384), (576, 384), (576,))),
    Case("big_conv_channels", lambda x, w, b: F.conv2d(x, w, b, padding=1), ((2, 160, 8, 8), (144, 160, 3, 3),
                                                                           (144,))),
    Case("big_conv_spread", lambda x, w: F.conv2d(x, w, padding=1), ((2, 8, 32, 32), (16, 8, 3, 3))),
    Case("big_conv_image", lambda x, w: F.conv2d(x, w, padding=1), ((1, 4, 64, 64), (8, 4, 3, 3))),
    Case("big_conv_strided", lambda x, w: F.conv2d(x, w, stride=2, padding=1), ((2, 32, 32, 32), (64, 32, 3, 3))),
    Case("big_batch_norm", _batch_norm_c, ((4, 192, 8, 8), (192,), (192,))),
    Case("big_batch_norm_spread", _batch_norm_c, ((2, 16, 16, 16), (16,), (16,))),
    Case("big_max_pool", lambda x: F.max_pool2d(x, 3, 2, 1), ((2, 8, 64, 64),)),
    Case("big_cross_entropy", lambda x, t: F.cross_entropy(x, t), ((192, 640), _idx(640, 192))),
    Case("big_embedding", lambda w, i: F.embedding(i, w), ((640, 64), _idx(640, 8, 64))),
    Case("big_sdpa", _sdpa(False), ((1, 2, 200, 64),) * 3),
    Case("big_sdpa_causal", _sdpa(True), ((1, 2, 200, 64),) * 3),
    *_masked_cases("big_sdpa_mask", 1, 1, 200, 64),
)  # fmt: skip
"""Multi-tile shapes: more than 128 rows, long rows (> 512 columns), matmuls with K > 128 (PSUM accumulation)
and N > 512, convolutions of > 128 channels, few-channel (spread) and large-image variants, row-packed inputs,
attention over several 128-row tiles with and without masks. ``bench/special_values.py --large`` runs them."""
