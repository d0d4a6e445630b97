"""DMA rows of a Chrome trace: CUDA memcpy / memset slices as profile `dma` columns.

Contract: `dma_columns(...)` (called by `chrome_rows.build_profile`) returns the dma
table columns in timestamp order: queue ``memcpy:<device>:<stream>`` or
``memset:<device>:<stream>``, direction from the memcpy kind (HtoD -> host->device,
DtoH -> device->host, DtoD / PtoP -> device->device, HtoH -> host->host; memsets:
``memset``), bytes from the slice's ``bytes`` arg, and layer / source / iteration /
op path of the host row that launched it (`chrome_rows` adds their deps).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nprof.capture.chrome_events import ABSENT

if TYPE_CHECKING:
    from nprof.capture.chrome_events import ArgColumns

_DIRECTIONS: tuple[tuple[str, str], ...] = (("HtoD", "host->device"), ("DtoH", "device->host"))
_DIRECTIONS += (("DtoD", "device->device"), ("PtoP", "device->device"), ("HtoH", "host->host"))


DMA_KEYS = ("device", "stream", "bytes")  # the args keys `dma_columns` reads


def dma_columns(
    d_idx: list[int],
    d_owner: list[int],
    d_host: list[int],
    d_order: np.ndarray,
    d_id: np.ndarray,
    names: list[str],
    args: ArgColumns,
    start: np.ndarray,
    dur: np.ndarray,
    t0: int,
    info_of: dict[int, tuple[str | None, str | None, int]],
    chain: Callable[[int, bool], str | None],
    n_i: int,
) -> dict[str, Any]:
    o = d_order.tolist()
    devices, streams, byte_col = map(args.raw, DMA_KEYS)
    queue, direction, nbytes, layer, src, hlo, it = [], [], [], [], [], [], []
    for j in o:
        i = d_idx[j]
        memset = "memset" in names[i].lower()
        queue.append(f"{'memset' if memset else 'memcpy'}:{_or0(devices[i])}:{_or0(streams[i])}")
        direction.append("memset" if memset else _direction(names[i]))
        b = _or0(byte_col[i])
        nbytes.append(int(b) if isinstance(b, int | float) else 0)
        owner = d_owner[j]
        info = info_of.get(owner, (None, None, 0))
        layer.append(info[0])
        src.append(info[1])
        it.append(info[2])
        hlo.append(chain(d_host[j], False) if d_host[j] >= 0 else None)
    idx = np.asarray([d_idx[j] for j in o], dtype=np.int64)
    return {
        "id": np.arange(len(o), dtype=np.int64) + n_i,
        "ts": (start[idx] - t0) if len(o) else np.zeros(0, np.int64),
        "duration": dur[idx] if len(o) else np.zeros(0, np.int64),
        "queue": queue,
        "direction": direction,
        "bytes": nbytes,
        "partitions": [1] * len(o),
        "layer": layer,
        "hlo_name": hlo,
        "nki_source_location": src,
        "iteration": np.asarray(it, dtype=np.int32),
    }


def _or0(value: Any) -> Any:
    """An args value, 0 where absent (`dict.get(key, 0)`)."""
    return 0 if value is ABSENT else value


def _direction(name: str) -> str:
    for key, value in _DIRECTIONS:
        if key in name:
            return value
    low = name.lower()
    if "host" in low and "device" in low:
        return "host->device" if low.index("host") < low.index("device") else "device->host"
    return "device->device"
