"""The validation layer of Chrome-trace import: field types and ranges, checked before anything computes.

Contract (every failure is a one-line `NprofError` naming the file, the field and the fix):
* `check_events(events, path)`: every event is a JSON object. A list of event lists (traces
  concatenated into one array) is flattened one level; anything else that is not an object is refused.
* `check_slices(sl, path)`: on the columns of `chrome_events.SliceColumns` (args: `ArgColumns`):
  `pid`/`tid` are numbers, strings or null; the args fields the importer reads have their Kineto types —
  `device`, `stream`, `correlation`, `External id`, `Sequence number`: number/string/null;
  `bytes`: a number in [0, 2^63); `Input Dims`: a list whose shapes are lists (or, for a TensorList,
  lists of lists) of whole numbers in [0, 2^31); `Input type` a list of strings/null;
  `Concrete Inputs` a list of scalars; `grid`/`block` lists of numbers; `registers per thread`,
  `shared memory` numbers or strings.
* `check_times(ts_us, dur_us, c_ts, f_ts, path)`: numbers (not lists), finite, no negative `dur` (a reversed B/E
  pair included), and a span that fits the importer's 2^45 ns tracks (refused before the ns cast).
* `check_counters(values, path)`: counter values are finite doubles (a JSON number beyond the double range
  reads as inf: see `chrome_fast.loads`).
* `check_flows(flows, path)`: `pid`/`tid`/`cat`/`id` of flow events (columns: `chrome_events.flow_columns`)
  are scalars.
Checks run column-wise (`set(map(type, ...))`): the clean path costs a few C-level passes, none for the
columns whose types the fast parse counted as it read them (`SliceColumns.types`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import partial
from itertools import chain
from operator import is_not
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nprof.capture.chrome_events import ABSENT
from nprof.errors import NprofError

if TYPE_CHECKING:
    from nprof.capture.chrome_events import SliceColumns

MAX_SPAN_NS = 1 << 45  # chrome_tree.TRACK_SHIFT: ns inside one track code
MAX_DIM = 1 << 31
MAX_BYTES = 1 << 63  # the profile's int64 byte columns
_SCALARS: frozenset[type] = frozenset({int, float, str, type(None)})
_NUMBERS: frozenset[type] = frozenset({int, float, type(None)})
_SCALAR_ARGS = (
    "device", "stream", "correlation", "External id", "Sequence number", "registers per thread", "shared memory",
)  # fmt: skip
_not_none = partial(is_not, None)
_ARG_SCALARS = _SCALARS | {type(ABSENT)}  # an args column: ABSENT where a slice lacks the key
_ARG_NUMBERS = _NUMBERS | {type(ABSENT)}


def _fail(path: Path, what: str) -> NprofError:
    return NprofError(f"{path}: not a valid Chrome trace ({what}); fix or re-export the trace")


def check_events(events: list[Any], path: Path) -> list[Any]:
    """`events` if all are objects; a list of event lists flattened one level; else NprofError."""
    kinds = set(map(type, events))
    if kinds <= {dict}:
        return events
    if kinds <= {list} and all(set(map(type, e)) <= {dict} for e in events):
        return list(chain.from_iterable(events))
    for i, e in enumerate(events):
        if type(e) is not dict:
            raise _fail(path, f"event {i} is a JSON {type(e).__name__}, not an object")
    return events


def _types(values: Iterable[Any]) -> set[type]:
    return set(map(type, values))


def _check_scalar_column(
    values: list[Any], what: str, allowed: frozenset[type], path: Path, types: set[type] | None = None
) -> None:
    """NprofError naming the first value of a type not `allowed`; `types`: the column's types if known."""
    if (_types(values) if types is None else types) <= allowed:
        return
    bad = next(v for v in values if type(v) not in allowed)
    shown = f" ({str(bad)[:40]})" if type(bad) in _SCALARS or type(bad) is bool else ""  # never repr a deep list
    raise _fail(path, f"{what} is a {type(bad).__name__}{shown}, expected a number or string")


def _check_dims(values: list[Any], path: Path) -> None:
    """Check the present 'Input Dims' values (see module doc)."""
    if not _types(values) <= {list}:
        raise _fail(path, "args 'Input Dims' is not a list")
    items = list(chain.from_iterable(values))
    kinds = _types(items)
    if not kinds <= {list, int, float, str, type(None)}:
        raise _fail(path, "args 'Input Dims' holds an object")
    dims = list(chain.from_iterable(items if kinds <= {list} else [d for d in items if type(d) is list]))
    kinds = _types(dims)
    if list in kinds:  # a TensorList input: a list of shapes
        nested = [d for d in dims if type(d) is list]
        dims = [d for d in dims if type(d) is not list] + list(chain.from_iterable(nested))
        kinds = _types(dims)
    if not kinds <= {int}:
        raise _fail(path, "args 'Input Dims' has a shape with a non-integer size")
    if dims and not 0 <= min(dims) <= max(dims) < MAX_DIM:
        raise _fail(path, f"args 'Input Dims' has a size outside [0, {MAX_DIM})")


def check_slices(sl: SliceColumns, path: Path) -> None:
    """Check the columns of the slices (see module doc)."""
    known = sl.types.get  # the types the fast parse met, where it counted them
    _check_scalar_column(sl.pid, "a slice's pid", _SCALARS, path, known("pid"))
    _check_scalar_column(sl.tid, "a slice's tid", _SCALARS, path, known("tid"))
    cols = sl.args.cols  # absent keys need no check
    for key in filter(cols.__contains__, _SCALAR_ARGS):
        _check_scalar_column(cols[key], f"args {key!r}", _ARG_SCALARS, path, known(key))
    nbytes = cols.get("bytes", [])
    _check_scalar_column(nbytes, "args 'bytes'", _ARG_NUMBERS, path, known("bytes"))
    numbers = list(set(nbytes) - {None, ABSENT})  # numbers only (checked above): hashable
    if numbers and min(numbers) < 0:
        raise _fail(path, "args 'bytes' is negative")
    if numbers and max(numbers) >= MAX_BYTES:  # inf included (a number beyond the double range)
        raise _fail(path, f"args 'bytes' is {max(numbers):g}, more than 2^63")
    if "Input Dims" in cols:
        _check_dims(sl.args.distinct_values("Input Dims"), path)
    for key, allowed in (
        ("Input type", {str, type(None)}),
        ("Concrete Inputs", _SCALARS),
        ("grid", _NUMBERS),
        ("block", _NUMBERS),
    ):
        if key not in cols:
            continue
        values = sl.args.distinct_values(key)
        if not _types(values) <= {list} or not _types(chain.from_iterable(values)) <= allowed:
            raise _fail(path, f"args {key!r} is not a list of strings or numbers")


def check_times(ts_us: np.ndarray, dur_us: np.ndarray, c_ts: np.ndarray, f_ts: np.ndarray, path: Path) -> None:
    """Finite times, no negative durations, a span of at most MAX_SPAN_NS (see module doc). Finite by each
    array's min and max (NaN propagates into both, an infinity is one of them): the passes the span needs anyway,
    no isfinite pass (which also touched 192 kB more of numpy's code pages for a small trace's import)."""
    arrays = (ts_us, dur_us, c_ts, f_ts)
    if any(a.ndim != 1 for a in arrays):
        raise _fail(path, "an event has a list as its 'ts' or 'dur'")
    lows = [float(a.min()) if len(a) else 0.0 for a in arrays]
    highs = [float(a.max()) if len(a) else 0.0 for a in arrays]
    if not all(map(math.isfinite, lows + highs)):
        raise _fail(path, "an event has an infinite or NaN 'ts' or 'dur'")
    if len(dur_us) and lows[1] < 0:
        raise _fail(path, f"a slice has a negative duration ({lows[1]:g} us; an 'E' before its 'B'?)")
    starts = [low for a, low in zip((ts_us, c_ts, f_ts), lows[:1] + lows[2:], strict=True) if len(a)]
    ends = [float((ts_us + dur_us).max())] if len(ts_us) else []
    ends += [high for a, high in zip((c_ts, f_ts), highs[2:], strict=True) if len(a)]
    if starts and (max(ends) - min(starts)) * 1000.0 >= MAX_SPAN_NS:
        raise _fail(path, f"the trace spans more than {MAX_SPAN_NS} ns (9.7 hours), the longest nprof imports")


def check_counters(values: list[Any], path: Path) -> np.ndarray:
    """The counter values as a float array; NprofError if one is beyond the double range (or infinite or NaN).
    Finite by min and max, as `check_times`: numpy's isfinite loop is not touched (192 kB of code pages)."""
    try:
        out = np.asarray(values, dtype=np.float64)
    except OverflowError:
        raise _fail(path, "a counter value is beyond the double range") from None
    if out.size and not (math.isfinite(out.min()) and math.isfinite(out.max())):  # NaN propagates into both
        raise _fail(path, "a counter value is infinite")
    return out


def check_flows(flows: dict[str, Any], path: Path) -> None:
    """Flow events' pid, tid, cat and id are scalars (they key dictionaries)."""
    for key in ("pid", "tid", "cat", "id"):
        _check_scalar_column(flows[key], f"a flow event's {key}", _SCALARS, path)
