"""The degree of a pure loop body (`nprof.nki.replay_pure`) in its loop variable, by its source alone.

Contract: `degree(loop, helpers)` bounds the degree, as polynomials in the loop's variable, of every integer the
body of `loop` (an `ast.For` whose body `replay_pure` found pure) computes: in its statements, its inner loops
and the helpers it calls (`helpers`: name -> (`ast.FunctionDef`, the helpers visible from that function), kernel
helpers and pure helpers alike, to any depth). The result is exact for the operations counted and saturates at
`UNBOUNDED` (= MAX_DEGREE + 1: not bounded, or greater than the replay can check). Degrees: the loop variable 1;
a constant, and a name the body does not bind (fixed for the whole loop: `restore_python_values` puts every name
back before each iteration), 0; an inner loop's variable the degree of its range's arguments (`affine_range(i,
i + 4)` makes it 1); `a * b` the sum of degrees, `a + b`, `a - b`, `-a`, subscripts, slices, tuples,
attributes and calls of nl/nisa functions the greatest degree of their parts; a name bound in the body the
greatest degree of the values ever bound to it (to a fixed point over the whole body, inner loops included); a
helper's result the greatest degree of its `return`s, its parameters taking the degrees of the arguments passed
(by position or keyword; one not passed: its constant default, 0), its other names the loop's (a closure may read
the loop variable); any other operation (`//`, `%`, `**`, comparisons, `and`/`or`, `not`, the builtins `min`,
`max`, `abs`, `int`, ...), the test of `x if c else y` and of an `if` statement: 0 when all its operands are 0
(values fixed for the loop), else UNBOUNDED, as is any other kind of expression or statement, a helper nested
deeper than 8 calls, or a call with `*args`/`**kwargs`. `affine(loop, helpers)` is `degree(...) <= 1`.

Why: the integers a pure body passes to the nl layer (slice bounds, indices, sizes) are polynomials in the loop
index of at most this degree, and the nl layer maps them to the integers of the builder requests (HBM offsets,
offsets within tiles) by sums and products with values fixed for the loop, within one branch of its own checks
(`nprof.nki.replay` guards those). A polynomial of degree d is determined by d + 1 values, so when the RECORDED
(= MAX_DEGREE + 1) logged iterations put an integer on a line, it is on that line for every iteration; two suffice
for an affine body. A body of greater or unknown degree could look linear over the logged iterations (e.g.
`r * (r - 1) * (r - 2) * (r - 3)` is 0 for r = 0..3) and is traced plainly instead.
"""

from __future__ import annotations

import ast

MAX_DEGREE = 3  # the greatest degree the replay's RECORDED logged iterations verify
UNBOUNDED = MAX_DEGREE + 1
_BUILTINS = frozenset({"min", "max", "abs", "len", "int", "float", "bool", "round", "divmod", "pow", "sum"})

Helpers = dict[str, tuple[ast.FunctionDef, "Helpers"]]


def _cap(d: int) -> int:
    return min(d, UNBOUNDED)


class _Degrees:
    """Degrees of the expressions of one loop body (see module doc); `worst` is the greatest seen."""

    def __init__(self, var: str, helpers: Helpers) -> None:
        self.env: dict[str, int] = {var: 1}
        self.helpers = helpers
        self.worst = 0
        self.ret = 0  # the greatest degree returned by the helper being analysed
        self.depth = 0  # helper calls being analysed (a recursive helper is not bounded)

    def of(self, node: ast.AST) -> int:
        """The degree of an expression (recorded in `worst`)."""
        d = _cap(self._of(node))
        self.worst = max(self.worst, d)
        return d

    def _fixed(self, parts: list[ast.AST]) -> int:
        """An operation defined only on values fixed for the loop: 0 when all its parts are, else UNBOUNDED."""
        return UNBOUNDED if max((self.of(p) for p in parts), default=0) else 0

    def _of(self, node: ast.AST) -> int:
        if isinstance(node, ast.Name):
            return self.env.get(node.id, 0)
        if isinstance(node, ast.Constant):
            return 0
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Mult):
                return self.of(node.left) + self.of(node.right)
            if isinstance(node.op, ast.Add | ast.Sub):
                return max(self.of(node.left), self.of(node.right))
            return self._fixed([node.left, node.right])
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub | ast.UAdd):
                return self.of(node.operand)
            return self._fixed([node.operand])
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
        if isinstance(node, ast.IfExp):
            return max(self._fixed([node.test]), self.of(node.body), self.of(node.orelse))
        if isinstance(node, ast.Compare):
            return self._fixed([node.left, *node.comparators])
        if isinstance(node, ast.BoolOp):
            return self._fixed(list(node.values))
        return UNBOUNDED

    def _call(self, node: ast.Call) -> int:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return UNBOUNDED
        func = node.func
        if isinstance(func, ast.Name) and func.id in self.helpers:
            fn, inner = self.helpers[func.id]
            args = [self.of(a) for a in node.args]
            kwargs = {k.arg: self.of(k.value) for k in node.keywords if k.arg is not None}
            return self._helper(fn, inner, args, kwargs)
        if isinstance(func, ast.Name) and func.id in _BUILTINS:  # (a builtin, or whatever shadows it: either way
            return self._fixed([*node.args, *(k.value for k in node.keywords)])  # not polynomial)
        return max([self.of(func), *(self.of(a) for a in node.args), *(self.of(k.value) for k in node.keywords)])

    def _helper(self, fn: ast.FunctionDef, inner: Helpers, args: list[int], kwargs: dict[str, int]) -> int:
        """The degree of a helper's result for arguments of degrees `args` (and keyword arguments `kwargs`)."""
        params = [a.arg for a in fn.args.args]
        if self.depth > 8 or len(args) > len(params) or set(kwargs) - set(params[len(args):]):
            return UNBOUNDED
        bound = {p: 0 for p in params} | dict(zip(params, args, strict=False)) | kwargs
        saved = self.env, self.helpers, self.ret
        self.env, self.helpers, self.ret = {**saved[0], **bound}, inner, 0
        self.depth += 1
        try:
            self.settle(fn.body)
            return self.ret
        finally:
            (self.env, self.helpers, self.ret), self.depth = saved, self.depth - 1

    def _bind(self, targets: list[ast.expr], degree: int) -> None:
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store):
                    self.env[t.id] = max(self.env.get(t.id, 0), degree)
                elif isinstance(t, ast.Subscript | ast.Attribute) and isinstance(t.ctx, ast.Store):
                    self.of(t.value)
                    if isinstance(t, ast.Subscript):
                        self.of(t.slice)
                elif isinstance(t, ast.Starred):
                    self.worst = UNBOUNDED

    def settle(self, stmts: list[ast.stmt]) -> None:
        """Walk the statements until the degrees of the names they bind no longer grow (they only grow, and
        saturate at UNBOUNDED, so this ends)."""
        while True:
            before = dict(self.env)
            self.body(stmts)
            if self.env == before:
                return

    def body(self, stmts: list[ast.stmt]) -> None:
        """Walk statements in order once, binding names (see module doc)."""
        for stmt in stmts:
            if isinstance(stmt, ast.Assign):
                self._bind(stmt.targets, self.of(stmt.value))
            elif isinstance(stmt, ast.AugAssign):
                value, target = self.of(stmt.value), self.of(stmt.target)
                degree = value + target if isinstance(stmt.op, ast.Mult) else max(value, target)
                if not isinstance(stmt.op, ast.Add | ast.Sub | ast.Mult) and value + target:
                    degree = UNBOUNDED
                self.worst = max(self.worst, _cap(degree))
                self._bind([stmt.target], _cap(degree))
            elif isinstance(stmt, ast.Expr):
                self.of(stmt.value)
            elif isinstance(stmt, ast.Return):
                self.ret = max(self.ret, self.of(stmt.value) if stmt.value is not None else 0)
            elif isinstance(stmt, ast.For):
                self._bind([stmt.target], self.of(stmt.iter))
                self.body(stmt.body)
                self.body(stmt.orelse)
            elif isinstance(stmt, ast.If):
                self.worst = max(self.worst, self._fixed([stmt.test]))
                self.body(stmt.body)
                self.body(stmt.orelse)
            elif not isinstance(stmt, ast.Delete | ast.Pass | ast.FunctionDef):  # (a def in the body: a pure
                self.worst = UNBOUNDED  # helper, analysed where it is called)


def degree(loop: ast.For, helpers: Helpers) -> int:
    """See module doc."""
    if not isinstance(loop.target, ast.Name):
        return UNBOUNDED
    degrees = _Degrees(loop.target.id, helpers)
    degrees.settle(loop.body)
    return degrees.worst


def affine(loop: ast.For, helpers: Helpers) -> bool:
    """Is the body affine in the loop variable (degree at most 1; see module doc)?"""
    return degree(loop, helpers) <= 1
