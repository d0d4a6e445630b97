"""The plain-index fast path (slices and in-range ints) builds exactly the view the general path builds."""

import random

from nprof.arch.isa import Space
from nprof.nki.trace import ProgramBuilder


def _item(rng: random.Random, size: int):
    """A random index for an axis of `size`: in range mostly, sometimes past the end, negative or stepped."""
    kind = rng.choice(["int", "slice", "slice", "open", "neg", "step", "past", "end", "empty"])
    start = rng.randrange(size)
    if kind == "int":
        return start
    if kind == "end":  # one past the last index
        return size
    if kind == "empty":
        return slice(start, start)
    if kind == "neg":
        return -1 - rng.randrange(size)
    if kind == "open":
        return slice(None, None) if rng.random() < 0.5 else slice(start, None)
    stop = rng.randint(start + 1, size + (3 if kind == "past" else 0))
    return slice(start, stop, rng.choice([None, 1, 2]) if kind == "step" else None)


def _message(err: Exception) -> str:
    """The error's text without its leading `file:line: ` (the two paths are called from different lines)."""
    return str(err).split(": ", 1)[-1]


def _state(view):
    return view.base, view._p0, view._e0, view._dims, view._checks


def test_fast_path_equals_the_general_path_on_random_views():
    b = ProgramBuilder("ix")
    rng = random.Random(7)
    with b.active():
        roots = [
            b.hbm_tensor("h", (6, 10, 12), "bfloat16"),
            b.alloc((64, 40), "float32", Space.SBUF),
            b.alloc((3, 32, 24), "bfloat16", Space.SBUF, partition_axis=1),
            b.alloc((2, 16, 32), "float32", Space.PSUM, partition_axis=1),
        ]
        checked = 0
        for _ in range(600):
            view = rng.choice(roots)
            for _ in range(rng.randint(0, 2)):  # index a view of a view, too
                items = tuple(_item(rng, s) for s in view.shape[: rng.randint(1, view.ndim)])
                try:
                    view = view.index(items)
                except Exception:
                    break
            if view.ndim == 0:
                continue
            items = tuple(_item(rng, s) for s in view.shape[: rng.randint(1, view.ndim)])
            full = items + (slice(None),) * (view.ndim - len(items))
            try:
                want = _state(view._index_basic(full))
            except Exception as err:
                want = type(err), _message(err)
            try:
                got = _state(view.index(items))
            except Exception as err:
                got = type(err), _message(err)
            assert got == want, (view, items)
            checked += 1
    assert checked > 400


def _partition_first_rule(views):
    """The rule `partition_first` implements, without its early return: every on-chip operand of rank > 1 is
    read with its partition axis first; the positions must agree (else an error)."""
    moves = {v._partition_pos() for v in views if not v.is_hbm and v.ndim > 1}
    if moves <= {0}:
        return [_state(v) for v in views]
    if len(moves) > 1:
        return "error"
    (pos,) = moves
    return [_state(v if v.is_hbm or v.ndim <= 1 else v._move_to_front(pos)) for v in views]


def test_partition_first_early_return_equals_the_rule_on_random_operands():
    from nprof.nki.tensor import partition_first

    b = ProgramBuilder("pf")
    rng = random.Random(11)
    with b.active():
        roots = [
            b.hbm_tensor("h", (6, 10, 12), "bfloat16"),
            b.alloc((64, 40), "float32", Space.SBUF),
            b.alloc((1, 40), "float32", Space.SBUF),
            b.alloc((3, 32, 24), "bfloat16", Space.SBUF, partition_axis=1),
            b.alloc((2, 16, 32), "float32", Space.PSUM, partition_axis=1),
        ]
        moved = 0
        for _ in range(500):
            views = []
            for _ in range(rng.randint(1, 3)):
                view = rng.choice(roots)
                items = tuple(_item(rng, s) for s in view.shape[: rng.randint(1, view.ndim)])
                try:
                    view = view.index(items)
                except Exception:
                    pass
                views.append(view)
            want = _partition_first_rule(views)
            try:
                got = [_state(v) for v in partition_first(views)]
            except Exception:
                got = "error"
            assert got == want, views
            moved += want != [_state(v) for v in views]
    assert moved > 20  # the general path ran too, not only the early return
