"""Engine-overlap findings only where the engines could run at the same time."""

from __future__ import annotations

from nprof.analysis import findings
from nprof.profile import Profile, ProfileInfo


def _profile(tracks: list[str]) -> Profile:
    return Profile.build(
        ProfileInfo(device="cpu"),
        instructions={
            "id": [1, 2, 3, 4],
            "ts": [0, 100, 200, 300],
            "duration": [100, 100, 100, 100],
            "engine": ["tensor", "vector", "tensor", "vector"],
            "track": tracks,
            "opcode": ["aten::mm", "aten::add", "aten::mm", "aten::add"],
        },
    )


def test_serial_engines_on_one_thread_are_not_a_finding() -> None:
    kinds = findings(_profile(["cpu:1"] * 4))["kind"].to_pylist()
    assert "serial_engines" not in kinds


def test_serial_engines_on_separate_tracks_are_a_finding() -> None:
    table = findings(_profile(["tensor.moving", "vector", "tensor.moving", "vector"]))
    rows = [r for r in table.to_pylist() if r["kind"] == "serial_engines"]
    assert len(rows) == 1 and rows[0]["title"] == "Engines run one at a time"
    assert sorted(rows[0]["event_ids"]) == [1, 2, 3, 4]
