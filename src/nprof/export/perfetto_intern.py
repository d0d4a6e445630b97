"""Per-sequence string interning for the Perfetto writer (event names, categories, annotation strings).

Contract: a `Sequence` is one Perfetto packet sequence with its incremental
state. `Sequence.iids(kind, arr)` maps a string array to interned ids (and a
present mask for nulls), recording the strings not yet sent; `packet()` returns
the bytes of one TracePacket carrying those strings as `InternedData` (with
SEQ_INCREMENTAL_STATE_CLEARED on the first packet and after a reset). Strings
arrive dictionary-encoded (codes into the column's dictionary): columns with at
most LOOKUP_MAX distinct values keep a per-sequence table code -> iid, so each
string is sent once; columns with more get fresh ids per chunk (a string may
then be sent again: bytes traded for memory). Nothing loops per string. When a
sequence has interned more than `limit` strings its state is reset, so the
writer's and the trace reader's memory stay bounded.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nprof.export.protowire import Msg, tag, varint_bytes

SEQ_CLEARED, SEQ_NEEDS = 1, 2
LOOKUP_MAX = 1 << 16  # columns with at most this many distinct values keep a per-sequence table of sent strings
# InternedData fields
NAMES, CATEGORIES, ANNOTATION_NAMES, STRING_VALUES = 2, 1, 3, 29


class Sequence:
    """One packet sequence and its interned strings (see module doc)."""

    def __init__(self, seq_id: int, annotation_names: tuple[str, ...], limit: int) -> None:
        self.id = seq_id
        self.annotation_names = annotation_names
        self.limit = limit
        self.luts: dict[tuple[int, str], np.ndarray] = {}
        self._reset()

    def _reset(self) -> None:
        self.cleared = True  # the next packet must clear the reader's state
        self.next: dict[int, int] = {NAMES: 1, CATEGORIES: 1, STRING_VALUES: 1}
        self.maps: dict[tuple[int, str], dict[str, int]] = {}
        for lut in self.luts.values():
            lut[:] = 0
        self.pending: list[tuple[int, np.ndarray, pa.Array]] = [
            (ANNOTATION_NAMES, np.arange(1, len(self.annotation_names) + 1), pa.array(self.annotation_names))
        ]

    def maybe_reset(self) -> None:
        """Start a new generation of interned state when too many strings were interned."""
        if sum(self.next.values()) > self.limit:
            self._reset()

    def _fresh(self, kind: int, count: int) -> np.ndarray:
        iids = np.arange(self.next[kind], self.next[kind] + count, dtype=np.uint64)
        self.next[kind] += count
        return iids

    def iids(
        self, kind: int, key: str, codes: np.ndarray, dictionary: pa.Array, values: list[str] | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Interned ids of dictionary-encoded strings (`codes` index `dictionary`, -1 = null).

        Returns (iids with 0 for nulls, present mask or None without nulls). `key`
        names the column. With `values` (the dictionary as Python strings, for
        per-batch dictionaries) each used value is looked up in a per-sequence
        dict; otherwise a profile-wide dictionary of at most LOOKUP_MAX values
        gets a per-sequence code -> iid table, and larger ones fresh ids per chunk.
        """
        valid = codes >= 0
        present = None if valid.all() else valid
        used = np.unique(codes[valid]) if present is not None else np.unique(codes)
        if values is not None:
            table = self.maps.setdefault((kind, key), {})
            lut: np.ndarray = np.zeros(max(len(values), 1), np.uint64)
            new: list[int] = []
            for code in used.tolist():
                iid = table.get(values[code])
                if iid is None:
                    iid = table[values[code]] = self.next[kind]
                    self.next[kind] += 1
                    new.append(code)
                lut[code] = iid
            if new:
                idx = np.asarray(new, np.int64)
                self.pending.append((kind, lut[idx], dictionary.take(pa.array(idx))))
            iids = lut[np.maximum(codes, 0)]
        elif len(dictionary) <= LOOKUP_MAX:
            cached = self.luts.get((kind, key))
            if cached is None or cached.size != len(dictionary):
                cached = self.luts[(kind, key)] = np.zeros(len(dictionary), np.uint64)
            lut = cached
            fresh_codes = used[lut[used] == 0]
            if fresh_codes.size:
                lut[fresh_codes] = self._fresh(kind, fresh_codes.size)
                self.pending.append((kind, lut[fresh_codes], dictionary.take(pa.array(fresh_codes))))
            iids = lut[np.maximum(codes, 0)]
        else:  # many distinct strings: fresh ids for this chunk's values, no table kept
            fresh = self._fresh(kind, used.size)
            self.pending.append((kind, fresh, dictionary.take(pa.array(used))))
            iids = fresh[np.searchsorted(used, np.maximum(codes, 0))] if used.size else np.zeros(codes.size, np.uint64)
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
