"""`return` inside an `nl.affine_range` / `nl.sequential_range` body, traced as NKI traces it.

NKI traces the body of such a loop once, for all iterations (the loop stays a
loop in the compiled kernel), so a `return` inside the body ends the trace
after the whole loop was recorded: every iteration runs the statements before
the `return`, and the kernel returns its value (AWS's "layout-dynamic-loop" and
"prof-kernel" examples of the NKI programming-model and profiling guides return
from inside their tile loop). nprof unrolls loops, so `rewrite(fn)` compiles an
equivalent of the kernel's source where such a `return v` records `v` and
skips the rest of the iteration (`continue`), and the statement after the
outermost such loop returns the recorded value. Line numbers are kept, so
instructions keep their `file:line`.

Only returns whose nearest enclosing loop is an affine/sequential range are
rewritten (through nested ones of the same kind), in functions without
closures whose source is available; anything else is left to the loop's own
check, which refuses a loop left early (`nprof.nki.scopes`).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import weakref
from collections.abc import Callable
from typing import Any

_LOOPS = frozenset({"affine_range", "sequential_range"})
_RET, _FLAG = "_nprof_loop_return_value", "_nprof_loop_returned"
_CACHE: weakref.WeakKeyDictionary[Callable[..., Any], Callable[..., Any]] = weakref.WeakKeyDictionary()


def _symbolic(node: ast.AST) -> bool:
    """Is `node` a `for` over nl.affine_range(...) / nl.sequential_range(...)?"""
    if not isinstance(node, ast.For) or not isinstance(node.iter, ast.Call):
        return False
    func = node.iter.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in _LOOPS


class _Rewrite(ast.NodeTransformer):
    """Rewrites returns inside symbolic loops (see module doc); `changed` says whether any was."""

    def __init__(self) -> None:
        self.depth = 0  # enclosing symbolic loops, with no other loop in between
        self.blocked = 0  # enclosing other loops inside a symbolic one (a `continue` would hit them)
        self.changed = False

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return node  # nested functions return on their own

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_For(self, node: ast.For) -> Any:
        if not _symbolic(node) or self.blocked:
            return self._other_loop(node)
        self.depth += 1
        node.body = self._stmts(node.body)
        self.depth -= 1
        if self._sets_flag(node):
            after = ast.Continue() if self.depth else ast.Return(ast.Name(_RET, ast.Load()))
            return [node, ast.If(ast.Name(_FLAG, ast.Load()), [after], [])]
        return node

    def _other_loop(self, node: ast.AST) -> ast.AST:
        inside = self.depth > 0
        self.blocked += inside
        self.generic_visit(node)
        self.blocked -= inside
        return node

    visit_While = visit_AsyncFor = _other_loop

    def _stmts(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            new = self.visit(stmt)
            out.extend(new if isinstance(new, list) else [new])
        return out

    def _sets_flag(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id == _FLAG and isinstance(n.ctx, ast.Store) for n in ast.walk(node))

    def visit_Return(self, node: ast.Return) -> Any:
        if not self.depth or self.blocked:
            return node
        self.changed = True
        value = node.value if node.value is not None else ast.Constant(None)
        return [ast.Assign([ast.Name(_RET, ast.Store())], value), ast.Assign([ast.Name(_FLAG, ast.Store())],
                ast.Constant(True)), ast.Continue()]  # fmt: skip


def rewrite(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, or an equivalent whose returns inside affine/sequential loops behave as in NKI (see module doc)."""
    try:
        return _CACHE[fn]
    except (KeyError, TypeError):
        pass
    new = _rewritten(fn) or fn
    try:
        _CACHE[fn] = new
    except TypeError:
        pass
    return new


def _rewritten(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    code = getattr(fn, "__code__", None)
    if code is None or code.co_freevars:
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef) or not any(_symbolic(n) for n in ast.walk(fdef)):
        return None
    rw = _Rewrite()
    fdef.body = rw._stmts(fdef.body)
    if not rw.changed:
        return None
    init = ast.parse(f"{_RET} = None\n{_FLAG} = False").body
    fdef.body = [*init, *fdef.body]
    fdef.decorator_list = []
    ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, code.co_firstlineno - 1)
    namespace: dict[str, Any] = {}
    exec(compile(tree, code.co_filename, "exec"), fn.__globals__, namespace)  # the user's own kernel, rewritten
    new = namespace[fdef.name]
    new.__defaults__, new.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__
    return new
