"""The vectorised protobuf encoder produces messages the protobuf runtime parses to the same content."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

from nprof.export.protowire import Msg, frame, varint_bytes, varint_len


def test_varint_len_matches_encoding() -> None:
    values = [0, 1, 127, 128, 16383, 16384, (1 << 35) - 1, 1 << 35, (1 << 63), (1 << 64) - 1]
    lens = varint_len(np.array(values, dtype=np.uint64))
    assert lens.tolist() == [len(varint_bytes(v)) for v in values]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, (1 << 62)),  # timestamp
            st.integers(-(1 << 62), 1 << 62),  # int annotation
            st.booleans(),  # annotation present
            st.text(max_size=12),  # inline string
            st.lists(st.integers(0, (1 << 64) - 1), max_size=3),  # flow ids
            st.floats(allow_nan=False, allow_infinity=False),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_packets_parse_back(rows) -> None:
    n = len(rows)
    ts = np.array([r[0] for r in rows], np.uint64)
    ints = np.array([r[1] for r in rows], np.int64)
    present = np.array([r[2] for r in rows])
    strings = [r[3].encode() for r in rows]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum([len(s) for s in strings], out=offsets[1:])
    data = np.frombuffer(b"".join(strings) or b"\0", np.uint8)
    flows = [r[4] for r in rows]
    foff = np.zeros(n + 1, np.int64)
    np.cumsum([len(f) for f in flows], out=foff[1:])
    fvals = np.array([v for f in flows for v in f], np.uint64)
    doubles = np.array([r[5] for r in rows], np.float64)

    ann_int = Msg(n).const(1, 3).varint(4, ints)
    ann_str = Msg(n).const(1, 4).bytes_(6, data, offsets)
    te = Msg(n).const(9, 1).varint(11, ts).message(4, ann_int, present).message(4, ann_str)
    te.repeated_fixed64(47, fvals, foff).fixed64(44, doubles)
    packet = Msg(n).varint(8, ts).message(11, te).const(10, 5)
    end = Msg(n).varint(8, ts + np.uint64(1)).const(10, 5)
    slots = np.arange(n) * 2
    got = Trace()
    got.ParseFromString(frame([(packet, slots), (end, slots + 1)], 2 * n).tobytes())

    want = Trace()
    for i, r in enumerate(rows):
        p = want.packet.add()
        p.timestamp = r[0]
        p.trusted_packet_sequence_id = 5
        e = p.track_event
        e.type = 1
        e.track_uuid = r[0]
        if r[2]:
            e.debug_annotations.add(name_iid=3, int_value=r[1])
        e.debug_annotations.add(name_iid=4, string_value=r[3])
        e.flow_ids.extend(r[4])
        e.double_counter_value = r[5]
        q = want.packet.add()
        q.timestamp = r[0] + 1
        q.trusted_packet_sequence_id = 5
        assert i >= 0
    assert got == want


def test_subset_of_optional_nested_message() -> None:
    n = 4
    present = np.array([False, True, False, True])
    inner = (
        Msg(n)
        .varint(9, np.array([1, 2, 1, 2]))
        .repeated_fixed64(47, np.array([9, 8, 7], np.uint64), np.array([0, 1, 1, 1, 3]))
    )
    outer = Msg(n).message(11, inner, present).const(10, 1)
    out = frame([(outer, np.arange(n))], n).tobytes()
    t = Trace()
    t.ParseFromString(out)
    assert [p.trusted_packet_sequence_id for p in t.packet] == [1, 1, 1, 1]
    assert [p.HasField("track_event") for p in t.packet] == [False, True, False, True]
    assert [list(p.track_event.flow_ids) for p in t.packet] == [[], [], [], [8, 7]]
    assert [p.track_event.type for p in t.packet] == [0, 2, 0, 2]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, (1 << 64) - 1), st.integers(-(1 << 63), (1 << 63) - 1), st.floats(allow_nan=False)),
        min_size=1,
        max_size=20,
    )
)
def test_fixed_width_rows_parse_back(rows) -> None:
    from nprof.export.protowire import Fixed, place

    n = len(rows)
    ts = np.array([r[0] for r in rows], np.uint64)
    ints = np.array([r[1] for r in rows], np.int64)
    doubles = np.array([r[2] for r in rows], np.float64)
    ann = Fixed(n).const(1, 3).varint(4, ints)
    te = Fixed(n).const(9, 1).varint(11, ts).message(4, ann).fixed64(44, doubles)
    te.repeated_fixed64(47, np.stack([ts, ts ^ np.uint64(1)], axis=1))
    begin = Fixed(n).varint(8, ts).message(11, te).const(10, 5).packets()
    end = Fixed(n).varint(8, ts).const(10, 6).packets()
    got = Trace()
    got.ParseFromString(place([(np.arange(n) * 2, begin), (np.arange(n) * 2 + 1, end)], 2 * n).tobytes())
    want = Trace()
    for r in rows:
        p = want.packet.add(timestamp=r[0], trusted_packet_sequence_id=5)
        e = p.track_event
        e.type, e.track_uuid, e.double_counter_value = 1, r[0], r[2]
        e.debug_annotations.add(name_iid=3, int_value=r[1])
        e.flow_ids.extend([r[0], r[0] ^ 1])
        want.packet.add(timestamp=r[0], trusted_packet_sequence_id=6)
    assert got == want
