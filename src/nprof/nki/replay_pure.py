"""Which `nl.affine_range` / `nl.sequential_range` loops `nprof.nki.replay` may replay: pure bodies.

Contract: `pure_body(frame)` is True when the loop at `frame`'s current line has a body of only assignments,
`nl`/`nisa` calls (spelt `module.function`), `+ - *` arithmetic, subscripts of tiles (names bound to tiles at
the loop's start, or bound in the body only to call results), attributes subscripted by constants, and inner
`nl` loops that are pure in turn. Such a body has no effects beyond the builder requests it makes and no control
flow on values; the replay still checks that its requests repeat (nprof.nki.replay).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from types import CodeType, FrameType, ModuleType

_PURE: dict[tuple[CodeType, int], bool] = {}
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.USub, ast.UAdd)
_NODES = (ast.Name, ast.Load, ast.Store, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Subscript, ast.Slice,
          ast.Tuple, ast.List, ast.Attribute, ast.Call, ast.keyword, ast.Assign, ast.AugAssign, ast.Expr, ast.Pass,
          *_OPS)  # fmt: skip


# -- which loops qualify ---------------------------------------------------------------------------------------
def pure_body(frame: FrameType) -> bool:
    """Is the body of the loop at `frame`'s current line pure (see module doc)? Cached per code position (the
    module names it calls are looked up once; the names it subscripts are checked for tiles each time)."""
    key = (frame.f_code, frame.f_lineno)
    hit = _PURE.get(key)
    if hit is None:
        hit = _PURE[key] = _check_loop(frame)
    return hit and _tiles_subscripted(frame)


def _loop_node(frame: FrameType) -> ast.For | None:
    code = frame.f_code
    try:
        lines, first = inspect.getsourcelines(code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    ast.increment_lineno(tree, first - 1)
    line = frame.f_lineno
    found = [n for n in ast.walk(tree) if isinstance(n, ast.For) and line in (n.lineno, n.iter.lineno)]
    return found[0] if len(found) == 1 else None


def _check_loop(frame: FrameType) -> bool:
    node = _loop_node(frame)
    if node is None or node.orelse or not isinstance(node.target, ast.Name) or not _pure(node.body, frame):
        return False
    subscripted = {s.value.id for stmt in node.body for s in ast.walk(stmt)
                   if isinstance(s, ast.Subscript) and isinstance(s.value, ast.Name)}  # fmt: skip
    bound = {t.id for stmt in node.body for t in ast.walk(stmt) if isinstance(t, ast.Name) and
             isinstance(t.ctx, ast.Store)}  # fmt: skip
    if not _tiles_by_call(node, subscripted & bound):
        return False
    _SUBSCRIPTED[(frame.f_code, frame.f_lineno)] = frozenset(subscripted - bound)
    return True


def _tiles_by_call(loop: ast.For, names: set[str]) -> bool:
    """Are the subscripted names the body binds bound only to results of calls (nl/nisa: tiles), never to
    other values (a Python list aliased in the body and indexed by the loop variable would not replay)?"""
    for node in ast.walk(loop):
        if isinstance(node, ast.For) and node is not loop and isinstance(node.target, ast.Name):
            if node.target.id in names:
                return False
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id in names:
            return False
        elif isinstance(node, ast.Assign):
            stored = {t.id for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name)}
            if stored & names and not isinstance(node.value, ast.Call):
                return False
    return True


def _pure(body: list[ast.stmt], frame: FrameType) -> bool:
    """The statements of a pure body (see `pure_body`); inner nl loops are pure in turn (their range may be any
    expression of nki calls: a range that varies changes the logged requests, which then do not replay)."""
    for stmt in body:
        if isinstance(stmt, ast.For):
            if stmt.orelse or not isinstance(stmt.target, ast.Name) or not isinstance(stmt.iter, ast.Call):
                return False
            if not all(_nki_call(c.func, frame) for c in ast.walk(stmt.iter) if isinstance(c, ast.Call)):
                return False
            if not _pure(stmt.body, frame):
                return False
            continue
        for sub in ast.walk(stmt):
            if not isinstance(sub, _NODES):
                return False
            if isinstance(sub, ast.BinOp | ast.UnaryOp) and not isinstance(sub.op, _OPS):
                return False
            if isinstance(sub, ast.Call) and not _nki_call(sub.func, frame):
                return False
            if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Attribute) and not isinstance(
                sub.slice, ast.Constant
            ):
                return False
            if isinstance(sub, ast.Subscript) and not isinstance(sub.value, ast.Name | ast.Attribute):
                return False
    return True


_SUBSCRIPTED: dict[tuple[CodeType, int], frozenset[str]] = {}


def _nki_call(func: ast.expr, frame: FrameType) -> bool:
    """A call of a function of the `nprof.nki` package spelt `module.function` (e.g. `nl.load`)."""
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
        return False
    name = func.value.id
    value = frame.f_locals.get(name, frame.f_globals.get(name))
    return isinstance(value, ModuleType) and value.__name__.startswith("nprof.nki")


def _tiles_subscripted(frame: FrameType) -> bool:
    """Names the body subscripts without binding them hold tiles (not Python lists indexed by the loop)."""
    from nprof.nki.tensor import NkiTensor

    names = _SUBSCRIPTED.get((frame.f_code, frame.f_lineno), frozenset())
    scope = frame.f_locals
    return all(isinstance(scope.get(n, frame.f_globals.get(n)), NkiTensor) for n in names)
