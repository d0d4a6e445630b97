"""The tests holding replayed and stamped Programs to the plain trace can fail: each optimised path, broken on
purpose in a way that gives a wrong Program without an error (a silent wrong result), is caught by the comparison of
tests/nki/test_stamp.py (`_three`: plain == replayed one by one == stamped)."""

from __future__ import annotations

from typing import Any

import pytest

from nprof.nki import replay, stamp
from tests.nki.test_stamp import T, _three, hoisted, same_weights, tiled


def test_the_unbroken_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """(The kernels below stamp, and agree with the plain trace, when nothing is broken.)"""
    assert _three(hoisted, [(2 * T, 8 * T), (2 * T, 9 * 512)], monkeypatch) > 0
    assert _three(same_weights, [(T, T), (T, 9 * 512)], monkeypatch) > 0


def test_a_wrong_step_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replayed iterations made with a zero step (all of them the last logged one) differ from the plain trace."""
    made = replay.template

    def flat_step(logs: Any) -> Any:
        got = made(logs)
        return None if got is None else (got[0], got[1], [0] * len(got[2]))

    monkeypatch.setattr(replay, "template", flat_step)
    with pytest.raises(AssertionError, match=r"^(replayed|stamped)"):
        _three(tiled, [(2 * T, 9 * T), (2 * T, 9 * 512)], monkeypatch)


def test_a_repeated_iteration_on_the_previous_tiles_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """An inner loop's stamped iteration copied for the next ones (`stamp._Template._repeat` / `_copy`) with its
    operands left on the previous iteration's tiles gives a wrong Program, which the comparison catches."""
    copy = stamp._Template._copy
    calls: list[int] = []

    def stale(self: Any, steps: Any, order: Any, ops: Any, kept: Any, per: int, *rest: Any) -> None:
        first = len(self.operands)
        copy(self, steps, order, ops, kept, per, *rest)
        calls.append(per)
        for k in range(first, len(self.operands)):
            key, col = self.operands[k]
            if key[0] == "T" and key[2][1] >= per:
                self.operands[k] = (("T", key[1], (0, key[2][1] - per), *key[3:]), col)

    monkeypatch.setattr(stamp._Template, "_copy", stale)
    with pytest.raises(AssertionError, match=r"^(replayed|stamped)"):
        _three(tiled, [(2 * T, 9 * T), (2 * T, 9 * 512)], monkeypatch)
    assert calls, "the copy-with-shift path did not run: the test proves nothing"


def test_forgotten_weights_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stamped iterations that forget the weights loaded before them (an LDWEIGHTS the plain trace does not make)
    differ from the plain trace."""
    state = stamp._tracker_state

    def forgetful(builder: Any, t: Any) -> Any:
        s = state(builder, t)
        s[1] = 0
        return s

    monkeypatch.setattr(stamp, "_tracker_state", forgetful)
    with pytest.raises(AssertionError, match=r"^(replayed|stamped)"):
        _three(same_weights, [(T, T), (T, 9 * 512)], monkeypatch)
