"""Which `nl.affine_range` / `nl.sequential_range` loops `nprof.nki.replay` may replay: pure bodies.

Contract: `pure_body(frame)` is True when the loop at `frame`'s current line has a body of only assignments, `del`
of names, `nl`/`nisa` calls (spelt `module.function`), calls of pure helpers (a plain Python function of the kernel
whose body is only assignments and a `return` of `+ - *` arithmetic, tuples and `slice(...)`, e.g. an index helper),
`+ - *` arithmetic, subscripts of tiles (names bound to tiles at the loop's start, or bound in the body only to call
results), attributes subscripted by constants, and inner `nl` loops that are pure in turn. Such a body has no
effects beyond the builder requests it makes and no control flow on values; the replay still checks that its
requests repeat (nprof.nki.replay).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import linecache
import re
import textwrap
from types import CodeType, FrameType, FunctionType, ModuleType

from nprof.nki.replay_affine import affine

_PURE: dict[tuple[CodeType, int], bool] = {}
_LOOPS: dict[CodeType, list[ast.For]] = {}  # per kernel function: its loops (`_loops`)
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.USub, ast.UAdd)
_NODES = (ast.Name, ast.Load, ast.Store, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Subscript, ast.Slice,
          ast.Tuple, ast.List, ast.Attribute, ast.Call, ast.keyword, ast.Assign, ast.AugAssign, ast.Expr, ast.Pass,
          ast.Delete, ast.Del, *_OPS)  # fmt: skip
_HELPER_NODES = (ast.Name, ast.Load, ast.Store, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Tuple, ast.Call,
                 ast.Assign, ast.Return, ast.Expr, *_OPS)  # fmt: skip


# -- which loops qualify ---------------------------------------------------------------------------------------
def pure_body(frame: FrameType) -> bool:
    """Is the body of the loop at `frame`'s current line pure (see module doc)? Cached per code position (the
    module names it calls are looked up once; the names it subscripts are checked for tiles each time)."""
    key = (frame.f_code, frame.f_lineno)
    hit = _PURE.get(key)
    if hit is None:
        hit = _PURE[key] = _check_loop(frame)
    return hit and _tiles_subscripted(frame) and _same_helpers(frame)


_DEF = re.compile(r"^(\s*def\s)|(\s*async\s+def\s)|(.*(?<!\w)lambda(:|\s))|^(\s*@)")  # (inspect.findsource's)


def source_lines(code: CodeType) -> tuple[list[str], int]:
    """`inspect.getsourcelines(code)` read through `linecache` alone: the same (lines, first line number), without
    `inspect.getmodule`'s pass over every loaded module (~30 ms each call with torch loaded). OSError when the
    source is not available."""
    lines = linecache.getlines(code.co_filename)
    if not lines:
        raise OSError("source not available")
    lnum = code.co_firstlineno - 1
    while lnum > 0:  # back to the def (or its first decorator), as inspect.findsource does for code objects
        if lnum >= len(lines):
            raise OSError("lineno is out of bounds")
        if _DEF.match(lines[lnum]):
            break
        lnum -= 1
    return inspect.getblock(lines[lnum:]), lnum + 1


def _loop_node(frame: FrameType) -> ast.For | None:
    """The `for` statement of the loop at `frame`'s current line (None when its source is unavailable or the line
    holds no single loop)."""
    loops = _loops(frame.f_code)
    line = frame.f_lineno
    found = [n for n in loops if line in (n.lineno, n.iter.lineno)]
    return found[0] if len(found) == 1 else None


def _loops(code: CodeType) -> list[ast.For]:
    """The `for` statements of a function's source, at their lines in the file: parsed once per code object (a
    kernel has a few loops; parsing and tokenizing its source for each one cost more than the check itself)."""
    hit = _LOOPS.get(code)
    if hit is None:
        try:
            lines, first = source_lines(code)
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except (OSError, TypeError, SyntaxError, IndentationError):
            hit = _LOOPS[code] = []
            return hit
        ast.increment_lineno(tree, first - 1)
        hit = _LOOPS[code] = [n for n in ast.walk(tree) if isinstance(n, ast.For)]
    return hit


def _check_loop(frame: FrameType) -> bool:
    node = _loop_node(frame)
    helpers: dict[str, CodeType | None] = {}
    if node is None or node.orelse or not isinstance(node.target, ast.Name) or not _pure(node.body, frame, helpers):
        return False
    if any(isinstance(s, ast.Delete) and not all(isinstance(t, ast.Name) for t in s.targets)
           for stmt in node.body for s in _walk(stmt)):  # fmt: skip
        return False  # (`del name` only: deleting items or attributes changes objects the log does not cover)
    _HELPERS[(frame.f_code, frame.f_lineno)] = helpers
    subscripted = {s.value.id for stmt in node.body for s in _walk(stmt)
                   if isinstance(s, ast.Subscript) and isinstance(s.value, ast.Name)}  # fmt: skip
    bound = {t.id for stmt in node.body for t in _walk(stmt) if isinstance(t, ast.Name) and
             isinstance(t.ctx, ast.Store)}  # fmt: skip
    if not _tiles_by_call(node, subscripted & bound):
        return False
    _SUBSCRIPTED[(frame.f_code, frame.f_lineno)] = frozenset(subscripted - bound)
    _AFFINE[(frame.f_code, frame.f_lineno)] = affine(node, _helper_defs(node, helpers))
    return True


def _helper_defs(loop: ast.For, helpers: dict[str, CodeType | None]) -> dict[str, ast.FunctionDef]:
    """The syntax trees of a loop's pure helpers (those defined in its body, then the kernel's or module's)."""
    defs = {n.name: n for n in _walk(loop) if isinstance(n, ast.FunctionDef) and helpers.get(n.name, 0) is None}
    for name, code in helpers.items():
        body = _parsed(code) if code is not None else None
        if body and isinstance(body[0], ast.FunctionDef):  # (checked by `_pure_helper` already)
            defs[name] = body[0]
    return defs


def _walk(node: ast.AST) -> tuple[ast.AST, ...]:
    """`ast.walk(node)` (same nodes, same order), listed once per node: the trees checked are kept (`_loops`,
    `_parsed`), and an inner loop's statements are walked again for each loop enclosing it."""
    hit = _WALKED.get(node)
    if hit is None:
        hit = _WALKED[node] = tuple(ast.walk(node))
    return hit


def _parsed(code: CodeType) -> list[ast.stmt] | None:
    """The statements of the source of a function's code object (None when unavailable), parsed once per code
    object: a helper (e.g. a closure the kernel defines) is checked for every loop calling it, and each
    definition of a closure makes a new function of the same code. The trees are only read."""
    if code not in _PARSED:
        try:
            _PARSED[code] = ast.parse(textwrap.dedent("".join(source_lines(code)[0]))).body
        except (OSError, TypeError, SyntaxError, IndentationError):
            _PARSED[code] = None
    return _PARSED[code]


def affine_body(frame: FrameType) -> bool:
    """Is the body of the loop at `frame`'s current line, found pure by `pure_body`, affine in the loop variable by
    its source (`nprof.nki.replay_affine`)?"""
    return _AFFINE.get((frame.f_code, frame.f_lineno), False)


def _tiles_by_call(loop: ast.For, names: set[str]) -> bool:
    """Are the subscripted names the body binds bound only to results of calls (nl/nisa: tiles), never to
    other values (a Python list aliased in the body and indexed by the loop variable would not replay)?"""
    for node in _walk(loop):
        if isinstance(node, ast.For) and node is not loop and isinstance(node.target, ast.Name):
            if node.target.id in names:
                return False
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id in names:
            return False
        elif isinstance(node, ast.Assign):
            stored = {t.id for target in node.targets for t in _walk(target) if isinstance(t, ast.Name)}
            if stored & names and not isinstance(node.value, ast.Call):
                return False
    return True


def _pure(body: list[ast.stmt], frame: FrameType, helpers: dict[str, CodeType | None]) -> bool:
    """The statements of a pure body (see `pure_body`); inner nl loops are pure in turn (their range may be any
    expression of nki calls: a range that varies changes the logged requests, which then do not replay)."""
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef):  # a helper defined in the body: pure by its code alone
            slice_ok = frame.f_globals.get("slice", builtins.slice) is builtins.slice and "slice" not in frame.f_locals
            if not _pure_def(stmt, slice_ok):
                return False
            helpers[stmt.name] = None
            continue
        if isinstance(stmt, ast.For):
            if stmt.orelse or not isinstance(stmt.target, ast.Name) or not isinstance(stmt.iter, ast.Call):
                return False
            if not all(_nki_call(c.func, frame) for c in _walk(stmt.iter) if isinstance(c, ast.Call)):
                return False
            if not _pure(stmt.body, frame, helpers):
                return False
            continue
        for sub in _walk(stmt):
            if not isinstance(sub, _NODES):
                return False
            if isinstance(sub, ast.BinOp | ast.UnaryOp) and not isinstance(sub.op, _OPS):
                return False
            if isinstance(sub, ast.Call) and not (_nki_call(sub.func, frame) or _helper_call(sub, frame, helpers)):
                return False
            if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Attribute) and not isinstance(
                sub.slice, ast.Constant
            ):
                return False
            if isinstance(sub, ast.Subscript) and not isinstance(sub.value, ast.Name | ast.Attribute):
                return False
    return True


_SUBSCRIPTED: dict[tuple[CodeType, int], frozenset[str]] = {}
_AFFINE: dict[tuple[CodeType, int], bool] = {}  # per pure loop: is its body affine in the loop variable?
_HELPERS: dict[tuple[CodeType, int], dict[str, CodeType | None]] = {}  # per loop: its pure helpers (None: def
# in the body), by name
_HELPER_OK: dict[CodeType, bool] = {}
_WALKED: dict[ast.AST, tuple[ast.AST, ...]] = {}  # (`_walk`)
_PARSED: dict[CodeType, list[ast.stmt] | None] = {}  # (`_parsed`)


def _resolve(name: str, frame: FrameType) -> object:
    return frame.f_locals.get(name, frame.f_globals.get(name))


def _helper_call(call: ast.Call, frame: FrameType, helpers: dict[str, CodeType | None]) -> bool:
    """A call, with positional arguments only, of a pure helper function (see module doc); noted in `helpers`."""
    func = call.func
    if not isinstance(func, ast.Name) or call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    if func.id in helpers and helpers[func.id] is None:
        return True  # defined by the body itself (checked there)
    value = _resolve(func.id, frame)
    if not isinstance(value, FunctionType):
        return False
    ok = _HELPER_OK.get(value.__code__)
    if ok is None:
        ok = _HELPER_OK[value.__code__] = _pure_helper(value)
    if ok:
        helpers[func.id] = value.__code__
    return ok


def _pure_helper(fn: FunctionType) -> bool:
    """Is `fn` a pure helper: plain positional parameters, no defaults, a body of assignments to names and one
    final `return`, with only names, constants, `+ - *`, tuples and calls of the builtin `slice`?"""
    code = fn.__code__
    if fn.__defaults__ or fn.__kwdefaults__ or code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return False
    if code.co_kwonlyargcount or code.co_posonlyargcount:
        return False
    body = _parsed(code)
    node = body[0] if body is not None and len(body) == 1 else None
    if not isinstance(node, ast.FunctionDef):
        return False
    slice_ok = fn.__globals__.get("slice", builtins.slice) is builtins.slice and "slice" not in code.co_freevars
    return _pure_def(node, slice_ok)


def _pure_def(node: ast.FunctionDef, slice_ok: bool) -> bool:
    """The code rules of a pure helper (see `_pure_helper`); `slice_ok`: `slice` names the builtin there."""
    a = node.args
    if node.decorator_list or a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults or a.kw_defaults:
        return False
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
        return False
    if not all(isinstance(s, ast.Assign) and all(isinstance(t, ast.Name) for t in s.targets) for s in body[:-1]):
        return False
    for stmt in body:
        for sub in _walk(stmt):
            if not isinstance(sub, _HELPER_NODES):
                return False
            if isinstance(sub, ast.BinOp | ast.UnaryOp) and not isinstance(sub.op, _OPS):
                return False
            if isinstance(sub, ast.Call) and not (
                slice_ok and isinstance(sub.func, ast.Name) and sub.func.id == "slice" and not sub.keywords
            ):
                return False
    return True


def _same_helpers(frame: FrameType) -> bool:
    """Do the helper names of the loop at `frame` still call the functions checked (a name may be rebound)?"""
    helpers = _HELPERS.get((frame.f_code, frame.f_lineno))
    if not helpers:
        return True
    for name, code in helpers.items():
        if code is None:  # defined in the body
            continue
        value = _resolve(name, frame)
        if not isinstance(value, FunctionType) or value.__code__ is not code:
            return False
    return True


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
