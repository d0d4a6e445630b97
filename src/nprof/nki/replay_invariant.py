"""Loop-invariant expressions of a loop body that `nprof.nki.replay_pure` checks.

Contract: `tainted_names(stmts, seeds)` is the set of names the statements may bind to a value that differs from
one iteration of the loop to the next: the `seeds` (the loop variable; for a kernel helper, its parameters whose
arguments are not invariant and the loop's tainted names), every inner loop's variable, every function defined
in the statements, and every name bound (by `=`, `+=`, ...) to an expression that is not invariant, to a fixed
point (flow-insensitive: one such binding anywhere taints the name everywhere). `invariant(node, tainted,
builtin_ok)` is True when the expression reads only constants, names outside `tainted`, their attributes and
subscripts, and combines them with operators (any arithmetic, comparisons, `and`/`or`/`not`, `x if c else y`),
tuples, lists, slices and calls, without keywords or `*`, of the builtins `min max abs len int float bool
round` (`builtin_ok(name)`: the name is not shadowed where the code runs); never any other call (a call result,
e.g. a tile, is never invariant). `needs_invariance(node, builtin_ok)` is True for the operations a pure body
allows only on invariant values (all but `+ - *` and unary `- +`, comparisons, `and`/`or`, the test of
`x if c else y`, the builtin calls above).

Why this is sound: `nprof.nki.scopes.restore_python_values` puts the loop frame's names back before every
iteration, so every iteration runs the same statements from the same names, and a kernel helper starts from its
arguments; a pure body has no other effects on Python values (no attribute stores, no `global`, subscript stores
on tiles only, calls only of nl/nisa functions and helpers). So an expression computed only from names no
iteration-dependent value reaches has the same value at the same place in every iteration, and an `if` on it
takes the same path every time. Whatever reads the loop variable, directly or through a name or a call result,
is tainted.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

BUILTINS = frozenset({"min", "max", "abs", "len", "int", "float", "bool", "round"})
_LINEAR = (ast.Add, ast.Sub, ast.Mult, ast.USub, ast.UAdd)
_NODES = (ast.Name, ast.Load, ast.Constant, ast.Attribute, ast.Subscript, ast.Slice, ast.Tuple, ast.List, ast.BinOp,
          ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp, ast.Call, ast.operator, ast.unaryop, ast.cmpop,
          ast.boolop)  # fmt: skip


def invariant(node: ast.AST, tainted: set[str] | frozenset[str], builtin_ok: Callable[[str], bool]) -> bool:
    """Is the expression invariant across the loop's iterations (see module doc)?"""
    for sub in ast.walk(node):
        if not isinstance(sub, _NODES):
            return False
        if isinstance(sub, ast.Name) and (not isinstance(sub.ctx, ast.Load) or sub.id in tainted):
            return False
        if isinstance(sub, ast.Attribute | ast.Subscript | ast.Tuple | ast.List) and not isinstance(sub.ctx,
                                                                                                    ast.Load):
            return False
        if isinstance(sub, ast.Call) and not _builtin_call(sub, builtin_ok):
            return False
    return True


def _builtin_call(call: ast.Call, builtin_ok: Callable[[str], bool]) -> bool:
    func = call.func
    return (isinstance(func, ast.Name) and func.id in BUILTINS and builtin_ok(func.id) and not call.keywords
            and not any(isinstance(a, ast.Starred) for a in call.args))  # fmt: skip


def needs_invariance(node: ast.AST, builtin_ok: Callable[[str], bool]) -> bool:
    """Is `node` an operation a pure body allows only on invariant values (see module doc)?"""
    if isinstance(node, ast.BinOp | ast.UnaryOp):
        return not isinstance(node.op, _LINEAR)
    if isinstance(node, ast.Compare | ast.BoolOp | ast.IfExp):
        return True
    return isinstance(node, ast.Call) and _builtin_call(node, builtin_ok)


def _stored(target: ast.AST) -> Iterable[str]:
    return (t.id for t in ast.walk(target) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store))


def tainted_names(stmts: list[ast.stmt], seeds: Iterable[str], builtin_ok: Callable[[str], bool]) -> set[str]:
    """The names the statements may bind to iteration-dependent values (see module doc)."""
    tainted = set(seeds)
    nodes = [sub for stmt in stmts for sub in ast.walk(stmt)]
    while True:
        size = len(tainted)
        for sub in nodes:
            if isinstance(sub, ast.For):
                tainted.update(_stored(sub.target))
            elif isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                tainted.add(sub.name)
            elif isinstance(sub, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.NamedExpr):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                value = sub.value
                names = [n for t in targets for n in _stored(t)]
                if isinstance(sub, ast.AugAssign) and any(n in tainted for n in names):
                    continue
                if value is None or not invariant(value, tainted, builtin_ok):
                    tainted.update(names)
        if len(tainted) == size:
            return tainted
