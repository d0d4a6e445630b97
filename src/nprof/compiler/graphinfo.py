"""What the compiler reads off an FX graph besides its ops: names, layers, source lines, the graph hash.

Contract:
* `tensor_name_from_source(source)` turns a dynamo source (``L['self']._modules['fc1']._parameters['weight']``)
  into a readable name (``fc1.weight``); `layer_from_module_stack(node)` turns ``nn_module_stack`` into a
  module path such as ``model.fc1`` (``model`` is the compiled module itself).
* `user_source(node)` is the user's ``file:line``: the innermost frame of ``node.meta["stack_trace"]`` outside
  installed packages and the standard library (the user's line that called into a library), else the
  innermost frame; `user_code(node)` the whole statement there, on one line (multi-line calls joined).
* `hlo_name(node)` is the graph node rendered as ``%addmm_1 = addmm(%primals_2, %relu, %permute_1)``.
* `graph_hash(gm, specs, kind, preset)` is a stable hex digest of everything that decides the Program:
  the graph's ops and arguments, input shapes/dtypes, constants' values, the graph kind, preset, the
  nprof version, the compiler's own source (`compiler_fingerprint`) and the values of its module switches
  (`SWITCHES`, which tests flip to compare lowerings) — not tensor values of inputs, not node metadata, not
  file paths.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import linecache
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nprof import __version__

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')


@dataclass(frozen=True)
class InputSpec:
    """One graph input as the Program sees it."""

    name: str  # program tensor name (unique, readable)
    shape: tuple[int, ...]
    dtype: str  # torch dtype name, e.g. "float32", "int64"

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


def torch_dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def tensor_name_from_source(source: str) -> str:
    """``L['self']._modules['fc1']._parameters['weight']`` -> ``fc1.weight``; ``L['x']`` -> ``x``."""
    parts = re.findall(r"\[['\"]?([^'\"\]]+)['\"]?\]", source)
    if not parts:
        return re.sub(r"\W+", "_", source).strip("_") or "input"
    root = parts[0]
    rest = parts[1:]
    if root in ("self", "fn", "mod", "model") and rest:
        names = rest
    elif root == "args" and rest:
        names = [f"arg{rest[0]}", *rest[1:]]
    else:
        names = parts
    return ".".join(names)


def layer_from_module_stack(node: Any) -> str | None:
    """The innermost module path of a forward node, rooted at ``model`` (``model.fc1``), or None."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    path, _cls = list(stack.values())[-1]
    return _module_path(str(path))


def _module_path(path: str) -> str:
    m = re.match(r"^[LG]\['([^']+)'\]", path)
    rest = path[m.end() :] if m else path
    root = m.group(1) if m else "model"
    if root in ("self", "fn", "mod"):
        root = "model"
    rest = re.sub(r"\._modules\['([^']+)'\]", r".\1", rest)
    rest = re.sub(r"\[(\d+)\]", r".\1", rest)
    rest = re.sub(r"\['([^']+)'\]", r".\1", rest)
    return root + rest


def _is_library(path: str) -> bool:
    """A frame in installed packages or the standard library (not the user's own code)."""
    return any(part in path for part in ("site-packages", "dist-packages", "/lib/python", "<frozen"))


def _last_frame(node: Any) -> tuple[str, str, str] | None:
    """(file, line, code) of the innermost frame of the user's own code in the node's stack trace (the line
    that called into a library), else of the innermost frame; code is the whole statement on one line."""
    trace = node.meta.get("stack_trace") or ""
    frames = [m for m in map(_FRAME.search, trace.rstrip().splitlines()) if m]
    if not frames:
        return None
    own = [m for m in frames if not _is_library(m.group("file"))]
    m = (own or frames)[-1]
    return m.group("file"), m.group("line"), statement_text(m.group("file"), int(m.group("line")))


@functools.lru_cache(maxsize=64)
def _statements(path: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, text on one line) of every simple statement of a source file."""
    try:
        source = Path(path).read_text()
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return ()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not hasattr(node, "body"):
            text = ast.unparse(node)  # the statement without comments or line breaks
            out.append((node.lineno, node.end_lineno or node.lineno, " ".join(text.split())))
    return tuple(out)


def statement_text(path: str, line: int) -> str:
    """The whole statement at `path`:`line` on one line (multi-line calls joined), or that line, or ""."""
    spans = [s for s in _statements(path) if s[0] <= line <= s[1]]
    if spans:
        return min(spans, key=lambda s: s[1] - s[0])[2]
    return linecache.getline(path, line).strip()


def user_source(node: Any) -> str | None:
    """``file.py:LINE`` of the user's code that produced the node, from its stack trace."""
    frame = _last_frame(node)
    return f"{frame[0]}:{frame[1]}" if frame else None


def user_code(node: Any) -> str:
    frame = _last_frame(node)
    return frame[2] if frame else ""


def op_name(target: Any) -> str:
    """``aten.addmm.default`` -> ``addmm``; ``aten.sum.dim_IntList`` -> ``sum.dim_IntList``."""
    text = str(target)
    if text.startswith("<built-in function "):
        return text.removeprefix("<built-in function ").rstrip(">")
    text = text.removeprefix("aten.")
    return text.removesuffix(".default")


def _fmt_arg(arg: Any) -> str:
    if hasattr(arg, "op") and hasattr(arg, "name"):
        return f"%{arg.name}"
    if isinstance(arg, (list, tuple)):
        return "[" + ", ".join(_fmt_arg(a) for a in arg) + "]"
    return repr(arg)


def hlo_name(node: Any) -> str:
    args = [_fmt_arg(a) for a in node.args]
    args += [f"{k}={_fmt_arg(v)}" for k, v in node.kwargs.items()]
    return f"%{node.name} = {op_name(node.target)}({', '.join(args)})"


def _canon(arg: Any, index: dict[str, int]) -> str:
    if hasattr(arg, "op") and hasattr(arg, "name"):
        return f"v{index[arg.name]}"
    if isinstance(arg, (list, tuple)):
        return "[" + ",".join(_canon(a, index) for a in arg) + "]"
    if isinstance(arg, dict):
        return "{" + ",".join(f"{k}:{_canon(v, index)}" for k, v in sorted(arg.items())) + "}"
    return repr(arg)


def graph_text(gm: Any) -> str:
    """A canonical text of the graph: one line per node, node names replaced by their position."""
    index: dict[str, int] = {}
    lines = []
    for i, node in enumerate(gm.graph.nodes):
        index[node.name] = i
        args = _canon(tuple(node.args), index)
        kwargs = _canon(dict(node.kwargs), index)
        val = node.meta.get("val")
        meta = ""
        if hasattr(val, "shape"):
            meta = f" : {torch_dtype_name(val.dtype)}{list(val.shape)}"
        lines.append(f"v{i} = {node.op} {node.target if node.op != 'placeholder' else ''}{args}{kwargs}{meta}")
    return "\n".join(lines)


def source_digest(parts: Sequence[str]) -> str:
    """A digest of the source of the nprof packages and modules named in `parts` (``"device"``,
    ``"compiled.py"``), each file's path inside nprof and bytes, in a stable order."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for part in parts:
        paths = sorted((root / part).rglob("*.py")) if (root / part).is_dir() else [root / part]
        for path in paths:
            h.update(path.relative_to(root).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A digest of the source of everything that turns a graph into a Program (the compiler, the NKI tracer, the
    ISA and presets, the Program model): a changed lowering never reuses a Program cached by the old code (the
    version number alone does not change between commits)."""
    return source_digest(("compiler", "nki", "arch", "program"))


# Module-level switches and limits of the compiler that tests set at run time to compare lowerings, as
# (module under nprof.compiler, attribute). The source digest cannot see a value set at run time, so their
# current values enter the graph hash: a Program lowered with one off is never served where it is on.
# tests/compiler/test_cache.py fails when a "# module switch" in the compiler is missing here.
SWITCHES = (
    ("balance", "ENABLED"),
    ("depreduce", "ENABLED"),
    ("dmamerge", "ENABLED"),
    ("dmamerge", "MERGE_LOADS"),
    ("fusion", "ENABLED"),
    ("grouped_conv", "KERNEL"),
    ("kernels.conv_batched", "ENABLED"),
    ("kernels.conv_depthwise", "BUDGET"),
    ("kernels.conv_depthwise", "GPSIMD_ADDS"),
    ("kernels.conv_depthwise", "PIECE"),
    ("kernels.conv_taps", "ROW_PICKS"),
    ("kernels.conv_transposed", "TRANSPOSED"),
    ("kernels.matmul", "PACK_HEADS"),
    ("listsched", "ENABLED"),
    ("packing", "ENABLED"),
    ("prefetch", "ENABLED"),
    ("prefetch", "MERGE_FRONT"),
    ("rowpack", "PAD_BYTES_MAX"),
    ("tailstage", "ENABLED"),
)


def switch_values() -> str:
    """``module.NAME=value`` of every compiler switch in `SWITCHES`, as set now, comma-separated."""
    import importlib

    values = (getattr(importlib.import_module(f"nprof.compiler.{m}"), name) for m, name in SWITCHES)
    return ",".join(f"{m}.{name}={value!r}" for (m, name), value in zip(SWITCHES, values, strict=True))


def graph_hash(
    gm: Any,
    specs: Sequence[InputSpec],
    kind: str,
    preset: str,
    constants: Iterable[np.ndarray] = (),
    nonfinite_inputs: Iterable[str] = (),
) -> str:
    """The compile-cache key of a graph; `nonfinite_inputs` (inputs lowered as holding inf/NaN) enter it."""
    h = hashlib.sha256()
    h.update(f"nprof {__version__} {compiler_fingerprint()}\n{switch_values()}\n{kind}\n{preset}\n".encode())
    marked = sorted(nonfinite_inputs)
    if marked:
        h.update(f"nonfinite {marked}\n".encode())
    h.update(graph_text(gm).encode())
    for spec in specs:
        h.update(f"\n{spec.shape}{spec.dtype}".encode())
    for value in constants:
        arr = np.ascontiguousarray(value)
        h.update(f"\n{arr.dtype}{arr.shape}".encode())
        h.update(arr.tobytes())
    return h.hexdigest()[:20]
