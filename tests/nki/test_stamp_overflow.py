"""A loop whose replayed or stamped iterations run out of SBUF/PSUM fails as the plain trace does.

The kernels (in nprof's own words) fragment memory so that the first iterations fit and a later one does not
(next-fit placement drifts from iteration to iteration): the failure falls in the iterations that `nprof.nki.replay`
replays one by one or `nprof.nki.stamp` places in bulk. The first trace of `Kernel.trace` (scope lifetimes) must
raise the same `OverCapacity` in all three modes, naming the kernel's line of the tile that did not fit (not the
loop's line, where replay runs); the retried trace (`Kernel.trace` then frees tiles by liveness) gives the same
Program in all three modes.
"""
# ruff: noqa: F841 (the kernels' names hold their tiles live: that is what fills the memory)

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import nprof.nki.language as nl
from nprof.nki import replay
from nprof.nki.alloc import OverCapacity
from nprof.nki.kernel import Kernel
from nprof.nki.typing import tensor


def psum_fragments(x):
    """Seven PSUM tiles before the loop (one freed: a hole), four per iteration: the third iteration's 2 KiB
    tile finds no bank."""
    out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    p0 = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    p1 = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    p2 = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    p3 = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    p4 = nl.zeros((128, 128), nl.float32, buffer=nl.psum)
    p5 = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    p6 = nl.zeros((128, 256), nl.float32, buffer=nl.psum)
    del p5
    for i in nl.affine_range(12):  # noqa: B007
        a = nl.zeros((128, 256), nl.float32, buffer=nl.psum)
        b = nl.zeros((128, 384), nl.float32, buffer=nl.psum)
        c = nl.zeros((128, 512), nl.float32, buffer=nl.psum)  # (the line that fails)
        d = nl.zeros((128, 128), nl.float32, buffer=nl.psum)
        nl.store(out[0:128, 0:128], value=nl.add(d, p4))
    return out


def sbuf_fragments(x):
    """One SBUF tile before the loop, four per iteration (one deleted mid-iteration): the third iteration's
    32 KiB tile finds no room."""
    out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    keep = nl.zeros((128, 24576), nl.bfloat16, buffer=nl.sbuf)
    for i in nl.affine_range(12):  # noqa: B007
        a = nl.zeros((128, 16384), nl.bfloat16, buffer=nl.sbuf)
        b = nl.zeros((128, 32768), nl.bfloat16, buffer=nl.sbuf)
        c = nl.zeros((128, 16384), nl.bfloat16, buffer=nl.sbuf)  # (the line that fails)
        del a
        d = nl.zeros((128, 8192), nl.bfloat16, buffer=nl.sbuf)
        nl.store(out[0:128, 0:8], value=nl.add(b[0:128, 0:8], c[0:128, 0:8]))
    nl.store(out[0:128, 0:8], value=keep[0:128, 0:8])
    return out


def _failing_line(kernel: Callable[..., Any]) -> int:
    import inspect

    lines, first = inspect.getsourcelines(kernel)
    return first + next(k for k, line in enumerate(lines) if "(the line that fails)" in line)


MODES = {"plain": (False, False), "replayed": (True, False), "stamped": (True, True)}


def _first_trace(kernel: Callable[..., Any], spec: Any, monkeypatch: pytest.MonkeyPatch, mode: str) -> str:
    """The OverCapacity message of the kernel's first trace (scope lifetimes) in `mode`."""
    enabled, stamped = MODES[mode]
    monkeypatch.setattr(replay, "ENABLED", enabled)
    monkeypatch.setattr(replay, "STAMP", stamped)
    monkeypatch.setattr(replay, "STAMP_MIN_EVENTS", 0)
    calls: list[int] = []
    real = replay.stamp

    def stamp(*args: Any) -> None:
        calls.append(0)
        try:
            real(*args)
        except OverCapacity:
            calls.append(1)
            raise

    monkeypatch.setattr(replay, "stamp", stamp)
    shape = (tuple(spec.shape), spec.dtype)
    with pytest.raises(OverCapacity) as err:
        Kernel(kernel)._record((spec,), {}, {"x": (shape[0], str(shape[1]))})
    assert (calls[-1:] == [1]) == (mode == "stamped"), mode  # (the failure is met inside the stamp)
    return str(err.value)


@pytest.mark.parametrize("kernel, spec", [(psum_fragments, tensor[[128, 512], nl.float32]),
                                          (sbuf_fragments, tensor[[128, 8], nl.bfloat16])])  # fmt: skip
def test_over_capacity_in_replayed_iterations(kernel: Callable[..., Any], spec: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    messages = {mode: _first_trace(kernel, spec, monkeypatch, mode) for mode in MODES}
    assert messages["plain"].startswith(f"{__file__}:{_failing_line(kernel)}: "), messages["plain"]
    assert "over capacity" in messages["plain"]
    assert messages["replayed"] == messages["plain"]
    assert messages["stamped"] == messages["plain"]
    programs = []
    for mode in MODES:
        monkeypatch.setattr(replay, "ENABLED", MODES[mode][0])
        monkeypatch.setattr(replay, "STAMP", MODES[mode][1])
        programs.append(tuple(Kernel(kernel).trace(spec).program.instructions))
    assert programs[0] == programs[1] == programs[2]
