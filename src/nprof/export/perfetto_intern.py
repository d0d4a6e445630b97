"""Per-sequence string interning for the Perfetto writer (event names, categories, annotation strings).

Contract: a `Sequence` is one Perfetto packet sequence with its incremental
state. `Sequence.iids(kind, arr)` maps a string array to interned ids (and a
present mask for nulls), recording the strings not yet sent; `packet()` returns
the bytes of one TracePacket carrying those strings as `InternedData` (with
SEQ_INCREMENTAL_STATE_CLEARED on the first packet and after a reset). Few
distinct values per chunk are looked up in a dict (sent once per sequence);
many distinct values get fresh ids in bulk without a Python loop per string
(a repeated string may then be sent again: bytes traded for speed). When a
sequence has interned more than `limit` strings its state is reset, so the
writer's and the trace reader's memory stay bounded.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nprof.export.protowire import Msg, tag, varint_bytes

SEQ_CLEARED, SEQ_NEEDS = 1, 2
LOOKUP_MAX = 512  # chunks with at most this many distinct values use the dict lookup
# InternedData fields
NAMES, CATEGORIES, ANNOTATION_NAMES, STRING_VALUES = 2, 1, 3, 29


def flat(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


class Sequence:
    """One packet sequence and its interned strings (see module doc)."""

    def __init__(self, seq_id: int, annotation_names: tuple[str, ...], limit: int) -> None:
        self.id = seq_id
        self.annotation_names = annotation_names
        self.limit = limit
        self._reset()

    def _reset(self) -> None:
        self.cleared = True  # the next packet must clear the reader's state
        self.maps: dict[int, dict[str, int]] = {NAMES: {}, CATEGORIES: {}, STRING_VALUES: {}}
        self.next: dict[int, int] = {NAMES: 1, CATEGORIES: 1, STRING_VALUES: 1}
        self.pending: list[tuple[int, np.ndarray, pa.Array]] = [
            (ANNOTATION_NAMES, np.arange(1, len(self.annotation_names) + 1), pa.array(self.annotation_names))
        ]

    def maybe_reset(self) -> None:
        """Start a new generation of interned state when too many strings were interned."""
        if sum(self.next.values()) > self.limit:
            self._reset()

    def iids(self, kind: int, arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
        """Interned ids of a string array (0 where null) and its present mask (None without nulls)."""
        enc = pc.dictionary_encode(flat(arr))
        dictionary = enc.dictionary
        k = len(dictionary)
        if k <= LOOKUP_MAX:
            lut = np.zeros(max(k, 1), np.uint64)
            table = self.maps[kind]
            fresh: list[int] = []
            for j, value in enumerate(dictionary.to_pylist()):
                iid = table.get(value)
                if iid is None:
                    iid = table[value] = self.next[kind]
                    self.next[kind] += 1
                    fresh.append(j)
                lut[j] = iid
            if fresh:
                idx = np.asarray(fresh, np.int64)
                self.pending.append((kind, lut[idx], dictionary.take(pa.array(idx))))
        else:
            lut = np.arange(self.next[kind], self.next[kind] + k, dtype=np.uint64)
            self.next[kind] += k
            self.pending.append((kind, lut, dictionary))
        indices = enc.indices
        codes = indices.fill_null(0).to_numpy(zero_copy_only=False)
        present = indices.is_valid().to_numpy(zero_copy_only=False) if indices.null_count else None
        iids = lut[codes]
        if present is not None:
            iids = np.where(present, iids, np.uint64(0))
        return iids, present

    def packet(self) -> bytes:
        """A TracePacket with the strings interned since the last call ("" when there is nothing to send)."""
        if not self.pending and not self.cleared:
            return b""
        body = b"".join(_entries(kind, iids, strings) for kind, iids, strings in self.pending)
        self.pending = []
        flags = SEQ_CLEARED if self.cleared else SEQ_NEEDS
        self.cleared = False
        packet = (
            tag(10, 0) + varint_bytes(self.id) + tag(12, 2) + varint_bytes(len(body)) + body
            + tag(13, 0) + varint_bytes(flags)
        )  # fmt: skip
        return tag(1, 2) + varint_bytes(len(packet)) + packet


def _entries(kind: int, iids: np.ndarray, strings: pa.Array) -> bytes:
    """Repeated InternedData field `kind` of {iid = 1, name/str = 2} entries, encoded in bulk."""
    strings = strings.cast(pa.string())
    n = len(strings)
    if n == 0:
        return b""
    bufs = strings.buffers()
    offsets = np.frombuffer(bufs[1], np.int32, count=n + 1, offset=strings.offset * 4).astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None and len(bufs[2]) else np.zeros(1, np.uint8)
    entry = Msg(n).varint(1, iids.astype(np.uint64)).bytes_(2, data, offsets)
    framed = Msg(n).message(kind, entry)
    sizes = framed.lengths()
    pos = np.zeros(n, np.int64)
    np.cumsum(sizes[:-1], out=pos[1:])
    out = np.empty(int(sizes.sum()), np.uint8)
    framed.write(out, pos)
    return out.tobytes()
