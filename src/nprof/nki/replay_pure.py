"""Which `nl.affine_range` / `nl.sequential_range` loops `nprof.nki.replay` may replay: pure bodies.

Contract: `pure_body(frame)` is True when the loop at `frame`'s current line has a body of only assignments, `del`
of names, `nl`/`nisa` calls (spelt `module.function`, or a bare name bound to a function of `nl`/`nisa`, e.g.
`par_dim`), calls of pure helpers (a plain Python function of the kernel whose body is only assignments and a
`return` of `+ - *` arithmetic, tuples and `slice(...)`, e.g. an index helper), calls of kernel helpers (below),
`+ - *` arithmetic, subscripts of tiles (names bound to tiles at the loop's start, or bound in the body only to call
results), attributes subscripted by constants (never stored), inner `nl` loops that are pure in turn, and
operations on loop-invariant values (`//`, comparisons, `min`, `x if c else y`, `if` statements: see
`nprof.nki.replay_invariant`; a kernel helper is checked per set of its parameters given iteration-dependent
values). Such a body has no effects beyond the builder requests it makes and no control flow on values that
differ between iterations; the replay still checks that its requests repeat (nprof.nki.replay).

A *kernel helper* is a plain Python function or an `nki.jit` kernel (no grid) called by name, with positional or
keyword arguments, whose own body passes the same checks (recursively: its calls are nki calls or helpers in
turn), optionally ending in `return <expression>`; no `*args`/`**kwargs`/keyword-only parameters, defaults only
immutable constants. The names it subscripts are its parameters (the argument passed must then be a name, a
subscript or a call result, and a name passed is held to the rules of subscripted names where the call is) or
names it binds only to call results: never its globals or closure (a Python list there could be indexed by the
loop variable). It has no effects beyond builder requests either (no `global`/`nonlocal`, no method calls, no
subscript stores but on tiles). Last, the integers the body computes, its helpers' included, must be polynomials
of degree at most `replay_affine.MAX_DEGREE` in the loop variable (`replay_affine.degree`; else a few logged
iterations cannot tell them from a line); `affine_body` says whether the degree is at most 1. Each time the loop
starts, every helper name on the way (nested ones through the helper's own globals and closure) must still name the
function checked.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import linecache
import re
import textwrap
from types import CodeType, FrameType, FunctionType, ModuleType
from typing import Any

from nprof.nki.replay_affine import MAX_DEGREE, Helpers, degree
from nprof.nki.replay_invariant import invariant, needs_invariance, tainted_names

_Code = CodeType | str | None  # a pure helper's code; None: defined in the body; "builtin": an unshadowed builtin
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
    module names it calls are looked up once; the names it subscripts are checked for tiles each time, and it is
    checked again when a helper name no longer names the function checked)."""
    key = (frame.f_code, frame.f_lineno)
    hit = _PURE.get(key)
    if hit is None or (not _same_helpers(frame) if hit else _called(frame) != _CALLED[key][1]):
        hit = _PURE[key] = _check_loop(frame)  # (again when a name it calls names another function now)
    return hit and _tiles_subscripted(frame)


def _called(frame: FrameType) -> tuple[object, ...]:
    """The code objects of the functions that the names the loop at `frame` calls name now (the code of the
    function of a plain `nki.jit` kernel; None for anything else)."""
    scope = _Scope(frame.f_locals, frame.f_globals)
    names = _CALLED[(frame.f_code, frame.f_lineno)][0]
    return tuple(getattr(_helper_function(scope.get(n)), "__code__", None) for n in names)


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
    key = (frame.f_code, frame.f_lineno)
    names = () if node is None else tuple(sorted({c.func.id for c in _walk(node) if isinstance(c, ast.Call) and
                                                  isinstance(c.func, ast.Name)}))  # fmt: skip
    _CALLED[key] = (names, ())
    _CALLED[key] = (names, _called(frame))
    ctx = _Ctx(_Scope(frame.f_locals, frame.f_globals))
    if node is None or node.orelse or not isinstance(node.target, ast.Name):
        return False
    ctx.tainted = ctx.outer = frozenset(tainted_names(node.body, [node.target.id], ctx.scope.builtin_ok))
    if not _pure(node.body, ctx):
        return False
    if not _deletes_names_only(node):
        return False
    _HELPERS[key], _CALLEES[key] = ctx.helpers, ctx.callees
    subscripted = _subscripted(node.body) | ctx.needs
    bound = _bound(node.body)
    if not _tiles_by_call(node, subscripted & bound):
        return False
    found = degree(node, _degree_helpers(node, ctx.helpers, ctx.callees))
    if found > MAX_DEGREE:  # (its integers could look linear over the logged iterations: nprof.nki.replay_affine)
        return False
    _SUBSCRIPTED[key] = frozenset(subscripted - bound)
    _AFFINE[key] = found <= 1
    return True


def _deletes_names_only(node: ast.AST) -> bool:
    """`del name` only: deleting items or attributes changes objects the log does not cover."""
    return not any(isinstance(s, ast.Delete) and not all(isinstance(t, ast.Name) for t in s.targets)
                   for s in _walk(node))  # fmt: skip


def _subscripted(body: list[ast.stmt]) -> set[str]:
    """The names subscripted by the statements (`x[...]`)."""
    return {s.value.id for stmt in body for s in _walk(stmt)
            if isinstance(s, ast.Subscript) and isinstance(s.value, ast.Name)}  # fmt: skip


def _bound(body: list[ast.stmt]) -> set[str]:
    """The names the statements bind (assigned, loop targets)."""
    return {t.id for stmt in body for t in _walk(stmt) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}


def _degree_helpers(where: ast.AST, helpers: dict[str, _Code], callees: _Tree) -> Helpers:
    """The syntax trees of the helpers a loop body or kernel helper (`where`) calls, for `replay_affine.degree`:
    its pure helpers (those defined in `where`, then the kernel's or module's) and its kernel helpers, each with the
    helpers visible from it in turn."""
    defs: Helpers = {}
    for n in _walk(where):
        if isinstance(n, ast.FunctionDef) and n is not where and helpers.get(n.name, 0) is None:
            defs[n.name] = (n, {})
    for name, code in helpers.items():
        body = _parsed(code) if isinstance(code, CodeType) else None
        if body and isinstance(body[0], ast.FunctionDef):  # (checked by `_pure_helper` already)
            defs[name] = (body[0], {})
    for name, (code, tree, pure) in callees.items():
        body = _parsed(code)
        if body and isinstance(body[0], ast.FunctionDef):  # (checked by `_kernel_helper` already)
            defs[name] = (body[0], _degree_helpers(body[0], pure, tree))
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


def _tiles_by_call(loop: ast.For | ast.FunctionDef, names: set[str]) -> bool:
    """Are the subscripted names the body (of a loop or a kernel helper) binds bound only to results of calls
    (nl/nisa: tiles), never to other values (a Python list aliased in the body and indexed by the loop variable
    would not replay)?"""
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


class _Scope:
    """Where the names of checked code resolve: a loop's frame (its locals, then globals), or a helper function
    (its closure, then globals; its own parameters and locals are unknown when checked: they resolve to None)."""

    def __init__(self, local: Any, glob: dict[str, Any], own: frozenset[str] = frozenset()) -> None:
        self.local, self.glob, self.own = local, glob, own

    @staticmethod
    def of(fn: FunctionType) -> _Scope:
        code = fn.__code__
        cells: dict[str, Any] = {}
        for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=True):
            try:
                cells[name] = cell.cell_contents
            except ValueError:  # (an empty cell: unknown)
                cells[name] = None
        return _Scope(cells, fn.__globals__, frozenset(code.co_varnames))

    def get(self, name: str) -> object:
        return None if name in self.own else self.local.get(name, self.glob.get(name))

    def builtin_ok(self, name: str) -> bool:
        """Does `name` name the builtin of that name here (not shadowed)?"""
        return name not in self.own and name not in self.local and name not in self.glob

    def slice_ok(self) -> bool:
        """Does `slice` name the builtin here?"""
        return self.glob.get("slice", builtins.slice) is builtins.slice and "slice" not in self.local and \
            "slice" not in self.own  # fmt: skip


class _Ctx:
    """What checking one body found: its scope, its pure helpers (name -> code; None: defined in the body), its
    kernel helpers (name -> (code, their own kernel helpers and pure helpers)), the names passed where a kernel
    helper subscripts its parameter (`needs`), the helpers being checked (recursion), and the names that may
    differ between iterations (`tainted`; `outer`: the loop's, see `nprof.nki.replay_invariant`)."""

    def __init__(self, scope: _Scope, stack: tuple[CodeType, ...] = ()) -> None:
        self.scope, self.stack = scope, stack
        self.helpers: dict[str, _Code] = {}
        self.callees: _Tree = {}
        self.needs: set[str] = set()
        self.tainted: frozenset[str] = frozenset()  # names that may differ between iterations (replay_invariant)
        self.outer: frozenset[str] = frozenset()  # the loop's own tainted names (a helper's free names among them)


def _pure(body: list[ast.stmt], ctx: _Ctx) -> bool:
    """The statements of a pure body (see `pure_body`); inner nl loops are pure in turn (their range may be any
    expression of nki calls: a range that varies changes the logged requests, which then do not replay)."""
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef):  # a helper defined in the body: pure by its code alone
            if not _pure_def(stmt, ctx.scope.slice_ok()):
                return False
            ctx.helpers[stmt.name] = None
            continue
        if isinstance(stmt, ast.For):
            if stmt.orelse or not isinstance(stmt.target, ast.Name) or not isinstance(stmt.iter, ast.Call):
                return False
            if not all(_nki_call(c.func, ctx.scope) for c in _walk(stmt.iter) if isinstance(c, ast.Call)):
                return False
            if not _pure(stmt.body, ctx):
                return False
            continue
        if isinstance(stmt, ast.If):  # on a loop-invariant condition: the same branch in every iteration
            if not _invariant(stmt.test, ctx):
                return False
            if not (_pure(stmt.body, ctx) and _pure(stmt.orelse, ctx)):
                return False
            continue
        if not _pure_tree(stmt, ctx):
            return False
    return True


def _invariant(node: ast.AST, ctx: _Ctx) -> bool:
    """Is the expression invariant across iterations (nprof.nki.replay_invariant)? The builtins it calls are
    noted in `ctx.helpers` (checked again when the loop starts: not shadowed since)."""
    if not invariant(node, ctx.tainted, ctx.scope.builtin_ok):
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
            ctx.helpers[sub.func.id] = "builtin"
    return True


def _pure_tree(node: ast.AST, ctx: _Ctx) -> bool:
    """The nodes of a statement of a pure body: `_pure_node` each, but for operations allowed only on invariant
    values (nprof.nki.replay_invariant), which must be invariant (an `x if c else y`: its test)."""
    if needs_invariance(node, ctx.scope.builtin_ok):
        if not isinstance(node, ast.IfExp):
            return _invariant(node, ctx)
        if not _invariant(node.test, ctx):
            return False
        return _pure_tree(node.body, ctx) and _pure_tree(node.orelse, ctx)
    if not _pure_node(node, ctx):
        return False
    return all(_pure_tree(child, ctx) for child in ast.iter_child_nodes(node))


def _pure_node(sub: ast.AST, ctx: _Ctx) -> bool:
    """One node of a statement of a pure body."""
    if not isinstance(sub, _NODES):
        return False
    if isinstance(sub, ast.BinOp | ast.UnaryOp) and not isinstance(sub.op, _OPS):
        return False
    if isinstance(sub, ast.Attribute) and not isinstance(sub.ctx, ast.Load):
        return False  # (an attribute store changes a Python value the log does not cover)
    if isinstance(sub, ast.Call) and not (_nki_call(sub.func, ctx.scope) or _helper_call(sub, ctx)
                                          or _kernel_helper_call(sub, ctx)):  # fmt: skip
        return False
    if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Attribute) and not isinstance(
        sub.slice, ast.Constant
    ):
        return False
    return not (isinstance(sub, ast.Subscript) and not isinstance(sub.value, ast.Name | ast.Attribute))


_SUBSCRIPTED: dict[tuple[CodeType, int], frozenset[str]] = {}
_AFFINE: dict[tuple[CodeType, int], bool] = {}  # per pure loop: is its body affine in the loop variable?
_HELPERS: dict[tuple[CodeType, int], dict[str, _Code]] = {}  # per loop: its pure helpers (None: def
# in the body), by name
_HELPER_OK: dict[CodeType, bool] = {}
_CALLED: dict[tuple[CodeType, int], tuple[tuple[str, ...], tuple[object, ...]]] = {}  # per loop: the names it
# calls, and the code they named when it was checked (`_called`)
_Tree = dict[str, Any]  # kernel helper name -> (code, its kernel helpers (a _Tree), its pure helpers)
_CALLEES: dict[tuple[CodeType, int], _Tree] = {}  # per loop: its kernel helpers
_KERNEL_HELPER: dict[tuple[CodeType, frozenset[str]],
                    tuple[list[str], frozenset[str], _Tree, dict[str, _Code]] | None] = {}  # fmt: skip
_WALKED: dict[ast.AST, tuple[ast.AST, ...]] = {}  # (`_walk`)
_PARSED: dict[CodeType, list[ast.stmt] | None] = {}  # (`_parsed`)


def _helper_call(call: ast.Call, ctx: _Ctx) -> bool:
    """A call, with positional arguments only, of a pure helper function (see module doc); noted in `helpers`."""
    func = call.func
    if not isinstance(func, ast.Name) or call.keywords or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    if func.id in ctx.helpers and ctx.helpers[func.id] is None:
        return True  # defined by the body itself (checked there)
    value = ctx.scope.get(func.id)
    if not isinstance(value, FunctionType):
        return False
    ok = _HELPER_OK.get(value.__code__)
    if ok is None:
        ok = _HELPER_OK[value.__code__] = _pure_helper(value)
    if ok:
        ctx.helpers[func.id] = value.__code__
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


# -- kernel helpers ----------------------------------------------------------------------------------------------
_IMMUTABLE = (int, float, bool, str, type(None))


def _helper_function(value: object) -> FunctionType | None:
    """The Python function a call of `value` runs as a kernel helper: a plain function, or the function of an
    `nki.jit` kernel without a grid (`Kernel.__call__` traces it into the active builder); None for anything
    else."""
    from nprof.nki.kernel import Kernel

    if type(value) is Kernel:
        if value.grid:
            return None
        value = getattr(value.func, "__wrapped_kernel__", value.func)
    return value if type(value) is FunctionType else None


def _kernel_helper_call(call: ast.Call, ctx: _Ctx) -> bool:
    """A call of a kernel helper (see module doc), its arguments checked where its parameters are subscripted;
    noted in `ctx.callees` (and `ctx.needs`)."""
    func = call.func
    if not isinstance(func, ast.Name) or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    fn = _helper_function(ctx.scope.get(func.id))
    if fn is None or fn.__code__ in ctx.stack or len(ctx.stack) > 8:
        return False
    params = list(fn.__code__.co_varnames[: fn.__code__.co_argcount])
    if len(call.args) > len(params):
        return False
    passed: dict[str, ast.expr] = dict(zip(params, call.args, strict=False))
    for kw in call.keywords:
        if kw.arg is None or kw.arg not in params or kw.arg in passed:
            return False
        passed[kw.arg] = kw.value
    seeds = frozenset(p for p, arg in passed.items() if not _invariant(arg, ctx)) | (ctx.outer - set(params))
    key = (fn.__code__, seeds)  # (the helper's names that may differ between iterations: its parameters given
    found = _KERNEL_HELPER.get(key)  # values that may, its free names the loop taints; see replay_invariant)
    if key not in _KERNEL_HELPER or (found is not None and not _same_callees(found, fn)):  # (checked again when
        found = _KERNEL_HELPER[key] = _kernel_helper(fn, ctx.stack, seeds, ctx.outer)  # a name it calls names
        # another function now)
    if found is None:
        return False
    subscripted, tree, pure = found[1:]
    for name in subscripted & passed.keys():
        arg = passed[name]
        if isinstance(arg, ast.Name):
            ctx.needs.add(arg.id)
        elif not isinstance(arg, ast.Subscript | ast.Call):
            return False
    ctx.callees[func.id] = (fn.__code__, tree, pure)
    return True


_Found = tuple[list[str], frozenset[str], _Tree, dict[str, _Code]]


def _same_callees(found: _Found, fn: FunctionType) -> bool:
    """Do the helper names a kernel helper calls still name the functions its check found?"""
    scope = _Scope.of(fn)
    return _same_pure(found[3], scope) and _same_tree(found[2], scope)


def _kernel_helper(fn: FunctionType, stack: tuple[CodeType, ...], seeds: frozenset[str],
                   outer: frozenset[str]) -> _Found | None:  # fmt: skip
    """(parameters, parameters it subscripts, its kernel helpers, its pure helpers) when `fn` is a kernel helper
    (see module doc), else None. `seeds`: its names that may differ between iterations (its parameters passed
    such values, the names the loop `outer` taints but its parameters; nprof.nki.replay_invariant)."""
    code = fn.__code__
    if fn.__kwdefaults__ or code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return None
    if code.co_kwonlyargcount or code.co_posonlyargcount or not all(type(d) in _IMMUTABLE for d in
                                                                     fn.__defaults__ or ()):  # fmt: skip
        return None
    body = _parsed(code)
    node = body[0] if body is not None and len(body) == 1 else None
    if not isinstance(node, ast.FunctionDef):
        return None
    a = node.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
        return None
    stmts = list(node.body)
    last = stmts[-1] if stmts else None
    if isinstance(last, ast.Return):  # (its expression is checked as a statement)
        stmts[-1:] = [ast.Expr(last.value)] if last.value is not None else []
    ctx = _Ctx(_Scope.of(fn), (*stack, code))
    ctx.tainted, ctx.outer = frozenset(tainted_names(stmts, seeds, ctx.scope.builtin_ok)), outer
    if not _pure(stmts, ctx) or not _deletes_names_only(node):
        return None
    params = [p.arg for p in a.args]
    subscripted, bound = _subscripted(node.body) | ctx.needs, _bound(node.body)
    if subscripted - bound - set(params) or not _tiles_by_call(node, subscripted & bound):
        return None  # (a global or closure name subscripted: a Python list could be indexed by the loop)
    return params, frozenset(subscripted & set(params)), ctx.callees, ctx.helpers


def _same_helpers(frame: FrameType) -> bool:
    """Do the helper names of the loop at `frame` still call the functions checked (a name may be rebound)?"""
    key = (frame.f_code, frame.f_lineno)
    helpers, callees = _HELPERS.get(key), _CALLEES.get(key)
    if not helpers and not callees:
        return True
    scope = _Scope(frame.f_locals, frame.f_globals)
    return _same_pure(helpers or {}, scope) and _same_tree(callees or {}, scope)


def _same_pure(helpers: dict[str, _Code], scope: _Scope) -> bool:
    for name, code in helpers.items():
        if code is None:  # defined in the body
            continue
        if code == "builtin":  # (a builtin called on invariant values: still not shadowed)
            if not scope.builtin_ok(name):
                return False
            continue
        value = scope.get(name)
        if not isinstance(value, FunctionType) or value.__code__ is not code:
            return False
    return True


def _same_tree(tree: _Tree, scope: _Scope) -> bool:
    """Does each kernel helper name of `tree` still name a function of the code checked, and so on down?"""
    for name, (code, inner, pure) in tree.items():
        fn = _helper_function(scope.get(name))
        if fn is None or fn.__code__ is not code:
            return False
        own = _Scope.of(fn)
        if not (_same_pure(pure, own) and _same_tree(inner, own)):
            return False
    return True


def _nki_call(func: ast.expr, scope: _Scope) -> bool:
    """A call of a function of the `nprof.nki` package spelt `module.function` (e.g. `nl.load`), or of a bare name
    bound to a public function or class of `nl` or `nisa` (e.g. `par_dim`, imported by name)."""
    if isinstance(func, ast.Name):
        value = scope.get(func.id)
        return value is not None and id(value) in _nki_functions()
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
        return False
    value = scope.get(func.value.id)
    return isinstance(value, ModuleType) and value.__name__.startswith("nprof.nki")


_NKI_FUNCTIONS: list[dict[int, object]] = []


def _nki_functions() -> dict[int, object]:
    """id -> the public functions and classes of `nprof.nki.language` and `nprof.nki.isa` (kept alive here)."""
    if not _NKI_FUNCTIONS:
        from nprof.nki import isa, language

        found: dict[int, object] = {id(v): v for m in (language, isa) for k, v in vars(m).items()
                 if not k.startswith("_") and isinstance(v, FunctionType | type)}  # fmt: skip
        _NKI_FUNCTIONS.append(found)
    return _NKI_FUNCTIONS[0]


def _tiles_subscripted(frame: FrameType) -> bool:
    """Names the body subscripts without binding them hold tiles (not Python lists indexed by the loop)."""
    from nprof.nki.tensor import NkiTensor

    names = _SUBSCRIPTED.get((frame.f_code, frame.f_lineno), frozenset())
    scope = frame.f_locals
    return all(isinstance(scope.get(n, frame.f_globals.get(n)), NkiTensor) for n in names)
