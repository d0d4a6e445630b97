"""Is a pure loop body (`nprof.nki.replay_pure`) affine in its loop variable, by its source alone?

Contract: `affine(loop, helpers)` is True when every expression of the body of `loop` (an `ast.For` whose body
`replay_pure` found pure), of the bodies of its inner loops and of the pure helpers it calls (`helpers`: name ->
`ast.FunctionDef`), has degree at most 1 in the loop's variable. Degrees: the loop variable 1; a constant, a name
the body does not bind (fixed for the whole loop: `restore_python_values` puts every name back before each
iteration) and an inner loop's variable 0; `a * b` the sum of degrees, `a + b`, `a - b`, `-a`, subscripts,
slices, tuples, attributes and calls (of `nl`/`nisa` functions, of `slice`) the greatest degree of their parts;
a name bound in the body the greatest degree of the values bound to it; a helper's result its `return`'s degree,
its parameters taking the degrees of the arguments and its other names the loop's (a closure may read the loop
variable); any other operation (`//`, `%`, ...) 0 when its operands are 0 (a value fixed for the loop), else 2
(not affine), as is any other kind of expression.

Why: an affine body's builder requests carry integers (HBM offsets, offsets within tiles) that are affine in the
loop index, so two logged iterations give every later one (`nprof.nki.replay` then logs fewer iterations before
replaying); the nl layer maps its integer arguments to offsets affinely (slice bounds times strides).
"""

from __future__ import annotations

import ast

_NOT_AFFINE = 2


class _Degrees:
    """Degrees of the expressions of one loop body (see module doc); `worst` is the greatest seen."""

    def __init__(self, var: str, helpers: dict[str, ast.FunctionDef]) -> None:
        self.env: dict[str, int] = {var: 1}
        self.helpers = helpers
        self.worst = 0
        self.depth = 0  # helper calls being analysed (a recursive helper is not affine)

    def of(self, node: ast.AST) -> int:
        """The degree of an expression (recorded in `worst`)."""
        d = self._of(node)
        self.worst = max(self.worst, d)
        return d

    def _of(self, node: ast.AST) -> int:
        if isinstance(node, ast.Name):
            return self.env.get(node.id, 0)
        if isinstance(node, ast.Constant):
            return 0
        if isinstance(node, ast.BinOp):
            a, b = self.of(node.left), self.of(node.right)
            if isinstance(node.op, ast.Mult):
                return a + b
            return max(a, b) if isinstance(node.op, ast.Add | ast.Sub) or a + b == 0 else _NOT_AFFINE
        if isinstance(node, ast.UnaryOp):
            d = self.of(node.operand)
            return d if isinstance(node.op, ast.USub | ast.UAdd) or d == 0 else _NOT_AFFINE
        if isinstance(node, ast.Tuple | ast.List):
            return max((self.of(e) for e in node.elts), default=0)
        if isinstance(node, ast.Subscript):
            return max(self.of(node.value), self.of(node.slice))
        if isinstance(node, ast.Slice):
            return max((self.of(p) for p in (node.lower, node.upper, node.step) if p is not None), default=0)
        if isinstance(node, ast.Attribute):
            return self.of(node.value)
        if isinstance(node, ast.Call):
            return self._call(node)
        return _NOT_AFFINE

    def _call(self, node: ast.Call) -> int:
        args = [self.of(a) for a in node.args] + [self.of(k.value) for k in node.keywords]
        func = node.func
        if isinstance(func, ast.Name) and func.id in self.helpers:
            return self._helper(self.helpers[func.id], args)
        return max([self.of(func), *args])

    def _helper(self, fn: ast.FunctionDef, args: list[int]) -> int:
        """The degree of a pure helper's result for arguments of degrees `args`."""
        params = [a.arg for a in fn.args.args]
        if self.depth > 8 or len(params) != len(args):
            return _NOT_AFFINE
        saved = self.env
        self.env = {**saved, **dict(zip(params, args, strict=True))}
        self.depth += 1
        try:
            result = 0
            for stmt in fn.body:
                if isinstance(stmt, ast.Assign):
                    self._bind(stmt.targets, self.of(stmt.value))
                elif isinstance(stmt, ast.Return) and stmt.value is not None:
                    result = self.of(stmt.value)
            return result
        finally:
            self.env, self.depth = saved, self.depth - 1

    def _bind(self, targets: list[ast.expr], degree: int) -> None:
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store):
                    self.env[t.id] = max(self.env.get(t.id, 0), degree)
                elif isinstance(t, ast.Subscript | ast.Attribute) and isinstance(t.ctx, ast.Store):
                    self.of(t.value)
                    if isinstance(t, ast.Subscript):
                        self.of(t.slice)

    def body(self, stmts: list[ast.stmt]) -> None:
        """Walk statements in order, binding names (see module doc)."""
        for stmt in stmts:
            if isinstance(stmt, ast.Assign):
                self._bind(stmt.targets, self.of(stmt.value))
            elif isinstance(stmt, ast.AugAssign):
                value, target = self.of(stmt.value), self.of(stmt.target)
                degree = value + target if isinstance(stmt.op, ast.Mult) else max(value, target)
                if not isinstance(stmt.op, ast.Add | ast.Sub | ast.Mult):
                    degree = _NOT_AFFINE
                self.worst = max(self.worst, degree)
                self._bind([stmt.target], degree)
            elif isinstance(stmt, ast.Expr):
                self.of(stmt.value)
            elif isinstance(stmt, ast.For):
                self.of(stmt.iter)
                if isinstance(stmt.target, ast.Name):
                    self.env[stmt.target.id] = 0  # (an inner loop's variable is independent of this one)
                self.body(stmt.body)
            elif not isinstance(stmt, ast.Delete | ast.Pass | ast.FunctionDef):
                self.worst = _NOT_AFFINE


def affine(loop: ast.For, helpers: dict[str, ast.FunctionDef]) -> bool:
    """See module doc (the body is walked twice, so a name bound late in one pass is seen by earlier uses)."""
    if not isinstance(loop.target, ast.Name):
        return False
    degrees = _Degrees(loop.target.id, helpers)
    for _ in range(2):
        degrees.body(loop.body)
        degrees.env[loop.target.id] = 1
    return degrees.worst <= 1
