"""Timeline row order (nprof.store.rows): a system profile's host rows come before its device rows."""

from __future__ import annotations

from nprof.store.rows import order_event_rows


def test_system_profile_rows_host_first_device_last() -> None:
    tracks = {"nc:0", "nprof.launch", "cpu:12", "nprof.compile", "cpu:3"}
    rows = order_event_rows(tracks, {"d2h:nc0", "h2d:nc0"})
    assert [(r.key, r.kind) for r in rows] == [
        ("cpu:3", "track"), ("cpu:12", "track"), ("nprof.compile", "track"), ("nprof.launch", "track"),
        ("h2d:nc0", "dma"), ("d2h:nc0", "dma"), ("nc:0", "track"),
    ]  # fmt: skip
    assert [r.index for r in rows] == list(range(7))


def test_other_profiles_keep_the_default_order() -> None:
    assert [r.key for r in order_event_rows({"cpu:11", "cpu:7"}, {"memcpy:0"})] == ["memcpy:0", "cpu:7", "cpu:11"]
    assert [r.key for r in order_event_rows({"vector", "tensor.moving"}, {"q1", "q0"})] == [
        "q0", "q1", "tensor.moving", "vector"]  # fmt: skip
