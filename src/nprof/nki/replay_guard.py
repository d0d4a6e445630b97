"""Guards: the branches the nl layer takes on a kernel's integers, reported while loop iterations are logged.

Contract: while `nprof.nki.replay` logs a loop's iterations, `LOGGING` holds the recorders logging (innermost
last), and the nl layer reports each integer from the kernel on which it branches, with the half-open interval
[lo, hi) (None: unbounded) within which it takes the branch it took: `guard(value, lo, hi)` (a negative index or
slice bound counting from the end, a slice within or past the end of its axis, the length of a stepped slice or
`nl.arange` (ceil((stop - start) / step)), the fast path of an index, a bounds check). `fail(why)` says the nl
layer took a branch the replay does not model; the loop is then traced plainly. Both are no-ops when nothing is
logged (callers on hot paths test `if LOGGING:` first; `drop_recorders(builder)` when a trace ends). `holds(logs,
first, last)` is True when the guards of the logged iterations (one list of (value, lo, hi) per iteration, in
order) have the same intervals, their values lie on lines, and each line stays within its interval at every
iteration `first..last` (so at both ends: it is a line).

Why: the body's integers are polynomials of bounded degree in the loop index (nprof.nki.replay_affine), so on a
line once on one over the logged iterations; the nl layer maps them to the builder's integers by sums and products
with fixed values *within a branch*, but not across one (an index -5 is column size - 5, an index 0 column 0). A
replayed iteration runs no nl code, so its branches are settled here: on the line, within the interval, the
branch is the same and so the log's mapping is exact. Nested loops: a recorder tells its guards to the enclosing
ones too, so an outer loop's log holds an inner loop's guards at its logged and its last (plain) iterations. A
guard's value is a polynomial in both indices, of degree <= 3 in each, linear in the inner index over the outer
loop's logged iterations, hence (its higher coefficients, polynomials in the outer index, vanishing there) linear in
the inner index in every outer iteration: its values in the inner loop's replayed iterations lie between those at
its last logged and its last iteration, both guarded by the outer loop. The intervals being convex, the inner
replayed iterations of replayed outer ones take the logged branch as well (tests/nki/test_replay_guards.py).
"""

from __future__ import annotations

import itertools
from typing import Any

LOGGING: list[Any] = []  # the `replay.Recorder`s logging now, innermost last

Guard = tuple[int, int | None, int | None]


def guard(value: int, lo: int | None, hi: int | None) -> None:
    """The nl layer branched on `value` and takes the same branch for values in [lo, hi) (see module doc)."""
    if LOGGING:
        LOGGING[-1].guard(value, lo, hi)


def fail(why: str) -> None:
    """The nl layer took a branch the replay does not follow (see module doc)."""
    if LOGGING:
        LOGGING[-1].fail(why)


def drop_recorders(builder: object) -> None:
    """Forget the recorders of `builder` (its trace ended; a loop left by an exception is detached only when its
    generator is collected)."""
    LOGGING[:] = [r for r in LOGGING if r.builder is not builder]


def within(value: int, lo: int | None, hi: int | None) -> bool:
    return (lo is None or value >= lo) and (hi is None or value < hi)


def holds(logs: list[list[Guard]], first: int, last: int) -> bool:
    """See module doc: `logs` are the guards of iterations first - len(logs) .. first - 1."""
    newest = logs[-1]
    if any(len(g) != len(newest) for g in logs):
        return False
    span = last - first + 1
    for column in zip(*logs, strict=True):  # (one guard over the logged iterations)
        value, lo, hi = column[-1]
        step = value - column[-2][0]
        for (a, alo, ahi), (b, _, _) in itertools.pairwise(column):
            if b - a != step or alo != lo or ahi != hi:
                return False
        if not (within(value + step, lo, hi) and within(value + span * step, lo, hi)):
            return False
    return True
