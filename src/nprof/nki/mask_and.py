"""`m1 and m2` between masks is their conjunction, as NKI reads it.

AWS's nc_match_replace8 example writes `mask=(ix < n // 2 and iy < m // 2)`. Python cannot overload `and`:
it tests the truth of `m1` and yields `m2`. So a mask's truth test looks at the bytecode running it: when it is
the left operand of an `and` expression (3.11: JUMP_IF_FALSE_OR_POP; 3.12+: COPY 1 then [TO_BOOL]
POP_JUMP_IF_FALSE), the mask is truthy and is remembered; the next mask comparison evaluated in the same frame,
inside that expression, is conjoined with it. Any other truth test (`if mask:`) stays a TypeError.
"""

from __future__ import annotations

import dis
from types import CodeType, FrameType
from typing import Any

from nprof.nki.source import user_frame

_PENDING: list[tuple[FrameType, int, Any]] = []  # (frame, end offset of the `and` expression, left mask)
_CODE: dict[CodeType, dict[int, dis.Instruction]] = {}


def _instructions(code: CodeType) -> dict[int, dis.Instruction]:
    table = _CODE.get(code)
    if table is None:
        table = _CODE[code] = {i.offset: i for i in dis.get_instructions(code)}
    return table


def and_end(frame: FrameType) -> int | None:
    """Where the `and` expression ends if `frame` is testing its left operand now, else None."""
    table = _instructions(frame.f_code)
    cur = table.get(frame.f_lasti)
    if cur is None:
        return None
    if cur.opname == "JUMP_IF_FALSE_OR_POP":
        return int(cur.argval)
    if cur.opname not in ("POP_JUMP_IF_FALSE", "TO_BOOL"):
        return None
    ops = [table[o] for o in sorted(table) if o < cur.offset][-2:]
    if cur.opname == "TO_BOOL":
        nxt = next((table[o] for o in sorted(table) if o > cur.offset and table[o].opname != "CACHE"), None)
        if nxt is None or nxt.opname != "POP_JUMP_IF_FALSE":
            return None
        cur = nxt
    if any(i.opname == "COPY" and i.arg == 1 for i in ops):
        return int(cur.argval)
    return None


def truth(mask: Any) -> bool:
    """The truth test of a mask (see module doc): True when it is the left side of `and`, else TypeError."""
    frame = user_frame()
    end = and_end(frame) if frame is not None else None
    if frame is None or end is None:
        raise TypeError("a mask has no truth value; pass it as mask= (combine masks with & or and)")
    _PENDING.append((frame, end, mask))
    return True


def conjoin(mask: Any) -> Any:
    """`mask`, conjoined with the left side of an `and` it is the right side of (see module doc)."""
    if not _PENDING:
        return mask
    frame = user_frame()
    while _PENDING:
        left_frame, end, left = _PENDING[-1]
        if left_frame is not frame or frame.f_lasti >= end:
            _PENDING.pop()  # stale: that expression is over (its right side was no mask)
            if left_frame is frame:
                continue
            return mask
        _PENDING.pop()
        mask = left & mask
    return mask
