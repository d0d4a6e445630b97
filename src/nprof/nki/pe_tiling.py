"""Tensor Engine tiling mode: `tile_position` / `tile_size` of `nisa.nc_matmul` and `nisa.nc_matmul_mx`.

The rules are those of AWS's NKI API reference ("Tiling mode" of `nki.isa.nc_matmul` and
`nki.isa.nc_matmul_mx`): the systolic array of 128 x 128 processing elements can be sliced into row tiles of
64 rows (NeuronCore-v2 and newer) or 32 rows (NeuronCore-v3 and newer), and, for `nc_matmul` only, into
column tiles the same way. `tile_size=(row_size, column_size)` chooses the tile, `tile_position=(start_row,
start_column)` where it sits: each start a multiple of its size, the tile inside the array. Both must be set
to enable tiling (neither: the whole array, `(0, 0)` and `(128, 128)`). The stationary tile [K, M] must fit
the tile: K <= row_size, M <= column_size. `nc_matmul_mx` supports row tiling only (column_size 128, start
column 0). The FP8 `double_row` performance mode cannot be combined with column tiling.

What nprof models: the checks above (a kernel the compiler would reject is refused with its line), the
result, which is the same as on the whole array, and the timing: the instruction pair is tagged with its tile
(`tile_tag`), and the timing model lets matmuls on disjoint tiles run at the same time (`nprof.device.pe_tiles`,
which states the rule).
"""

from __future__ import annotations

from typing import Any

from nprof.nki.source import kernel_error

ARRAY = 128  # rows and columns of processing elements


def _pair(value: Any, what: str, func: str) -> tuple[int, int]:
    try:
        a, b = value
        return int(a), int(b)
    except (TypeError, ValueError):
        raise kernel_error(f"{func}: {what} must be a pair of integers, got {value!r}") from None


def _version(core: str) -> int:
    """3 for "NeuronCore-v3"."""
    return int(core.rsplit("v", 1)[-1])


def _unset(value: Any) -> bool:
    return value is None or (isinstance(value, tuple | list) and len(value) == 0)


Tiles = tuple[tuple[int, int], tuple[int, int]]  # ((start_row, start_column), (row_size, column_size))


def check_tiling(func: str, tile_position: Any, tile_size: Any, k: int, m: int, core: str, *,
                 rows_only: bool = False, double_row: bool = False) -> Tiles | None:  # fmt: skip
    """Check `tile_position`/`tile_size` of a matmul whose stationary tile is [k, m] on a `core` ("NeuronCore-vN")
    (see module doc); returns ((start_row, start_column), (row_size, column_size)), or None when tiling is off.
    `rows_only`: `nc_matmul_mx` (row tiling only); `double_row`: the double-row performance mode is on."""
    if _unset(tile_position) and _unset(tile_size):
        return None
    if _unset(tile_position) or _unset(tile_size):
        given, missing = ("tile_size", "tile_position") if _unset(tile_position) else ("tile_position", "tile_size")
        raise kernel_error(f"{func}: {given} is set but {missing} is not; tiling mode needs both (or neither: the "
                           "whole array)")  # fmt: skip
    (row, col), (rows, cols) = _pair(tile_position, "tile_position", func), _pair(tile_size, "tile_size", func)
    sizes = (32, 64, ARRAY) if _version(core) >= 3 else (64, ARRAY)
    for name, size in (("row_size", rows), ("column_size", cols)):
        if size not in sizes:
            raise kernel_error(f"{func}: tile_size {name} {size} must be one of {sizes} on {core}")
    if rows_only and (cols != ARRAY or col != 0):
        raise kernel_error(f"{func} supports row tiling only: tile_size column_size must be 128 and tile_position "
                           f"start_column 0, got tile_size={tile_size!r}, tile_position={tile_position!r}")  # fmt: skip
    for name, start, size in (("start_row", row, rows), ("start_column", col, cols)):
        if start < 0 or start % size or start + size > ARRAY:
            raise kernel_error(f"{func}: tile_position {name} {start} must be a multiple of {size} (tile_size) "
                               f"with the tile inside the {ARRAY}x{ARRAY} array")  # fmt: skip
    if k > rows or m > cols:
        raise kernel_error(f"{func}: the stationary tile [{k}, {m}] does not fit tile_size ({rows}, {cols}); "
                           "K must be <= row_size and M <= column_size")  # fmt: skip
    if double_row and cols != ARRAY:
        raise kernel_error(f"{func}: perf_mode double_row cannot be combined with column tiling (column_size {cols})")
    return (row, col), (rows, cols)


def tile_tag(tiles: Tiles | None) -> str | None:
    """The `pe_tile` attr of a matmul's instructions: "start_row,start_column,row_size,column_size" (None: the
    whole array, untagged)."""
    return None if tiles is None else ",".join(map(str, (*tiles[0], *tiles[1])))
