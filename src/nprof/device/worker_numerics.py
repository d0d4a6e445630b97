"""Numerics of a multi-worker job: every rank's program on its own Memory, in lockstep at collectives.

Contract of `run_lockstep(programs, preset, checked, ops, ignore_exec_errors, warnings) -> outputs`:
`checked[r]` is rank r's (checked inputs, missing names) from `simulate.prepare_inputs`, `ops` the matched
collectives of `workers.match_ops`. Each rank runs its instructions in program order up to its next
collective; an operation executes once all its participants stand at it (`collectives.combine` on the
participants' inputs, read as float, written to each output in its dtype). A ring of ranks that wait for
each other in different orders is a deadlock and raises NprofError. Execution errors follow `simulate`:
NprofError naming rank and instruction, or skipped with a warning under `ignore_exec_errors`. Returns every
rank's output tensors; NaN/inf outputs are an error unless inputs were missing or errors are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from nprof.arch.isa import Instruction
from nprof.arch.presets import Preset
from nprof.device import numerics as num
from nprof.device.collectives import combine
from nprof.device.memory import AccessError, Memory
from nprof.device.simulate import _check_input
from nprof.errors import NprofError
from nprof.program.model import Program
from nprof.progress import progress

_EXEC_ERRORS = (AccessError, ValueError, IndexError, KeyError, TypeError)


def _where(rank: int, i: int, ins: Instruction) -> str:
    return f"rank {rank} instruction {i} ({ins.opcode.value}{', ' + ins.source if ins.source else ''})"


class _Rank:
    """One worker's memory and position."""

    def __init__(self, rank: int, program: Program, preset: Preset, inputs: Mapping[str, np.ndarray]) -> None:
        self.rank = rank
        self.program = program
        self.mem = Memory(program, preset)
        self.pos = 0
        self.skipped = 0
        self.notes: list[str] = []
        for name, value in inputs.items():
            self.mem.load(name, value)
        for t in program.tensors:
            if t.kind != "weight":
                continue
            const = program.constants.get(t.name)
            if const is None:
                self.notes.append(f"rank {rank}: weight {t.name!r} has no value in the program: running on zeros")
                continue
            self.mem.load(t.name, _check_input(t, const))

    def fail(self, i: int, exc: Exception, ignore: bool) -> None:
        ins = self.program.instructions[i]
        if not ignore:
            raise NprofError(
                f"execution error in {_where(self.rank, i, ins)}: {exc}; fix the program or pass --ignore-exec-errors"
            ) from exc
        self.skipped += 1
        if self.skipped <= 5:
            self.notes.append(f"execution error in {_where(self.rank, i, ins)} skipped: {exc}")

    def run_until(self, stop: int, ignore: bool) -> int:
        ran = stop - self.pos
        instructions = self.program.instructions
        for i in range(self.pos, stop):
            try:
                num.execute(instructions[i], self.mem)
            except _EXEC_ERRORS as exc:
                self.fail(i, exc, ignore)
        self.pos = stop
        return ran


def run_lockstep(
    programs: list[Program],
    preset: Preset,
    checked: list[tuple[dict[str, np.ndarray], list[str]]],
    ops: Mapping[tuple[tuple[int, ...], int], Mapping[int, int]],
    ignore_exec_errors: bool,
    warnings: list[list[str]],
) -> list[dict[str, np.ndarray]]:
    """Run every rank's numerics with collectives exchanged (see module doc); outputs per rank."""
    ranks = [_Rank(r, p, preset, checked[r][0]) for r, p in enumerate(programs)]
    stops: list[list[int]] = [[] for _ in programs]
    key_at: list[dict[int, tuple[tuple[int, ...], int]]] = [{} for _ in programs]
    for key, where in ops.items():
        for r, i in where.items():
            stops[r].append(i)
            key_at[r][i] = key
    for s in stops:
        s.sort()
    nxt = [0] * len(programs)
    total = sum(len(p.instructions) for p in programs)
    with progress(total, f"simulating {len(programs)} workers") as bar:
        while True:
            for w in ranks:
                r = w.rank
                stop = stops[r][nxt[r]] if nxt[r] < len(stops[r]) else len(w.program.instructions)
                bar.advance(w.run_until(stop, ignore_exec_errors))
            waiting = {w.rank: key_at[w.rank][w.pos] for w in ranks if nxt[w.rank] < len(stops[w.rank])}
            if not waiting:
                break
            ready = [k for k in dict.fromkeys(waiting.values()) if all(waiting.get(r) == k for r in k[0])]
            if not ready:
                r = min(waiting)
                group, seq = waiting[r]
                other = next(x for x in group if waiting.get(x) != (group, seq))
                raise NprofError(
                    f"deadlock: rank {r} waits at collective #{seq} of group {group} while rank {other} waits at "
                    "another collective; issue collectives in the same order on every rank"
                )
            for key in ready:
                _execute(key, ops[key], ranks, ignore_exec_errors)
                for r in key[0]:
                    ranks[r].pos += 1
                    nxt[r] += 1
                bar.advance(len(key[0]))
    outputs = []
    for w in ranks:
        warnings[w.rank].extend(w.notes)
        if w.skipped > 5:
            warnings[w.rank].append(f"rank {w.rank}: {w.skipped - 5} more instructions with execution errors skipped")
        zero = bool(checked[w.rank][1])
        outputs.append(_outputs(w, zero or ignore_exec_errors, warnings[w.rank]))
    return outputs


def _execute(key: tuple[tuple[int, ...], int], where: Mapping[int, int], ranks: list[_Rank], ignore: bool) -> None:
    group = key[0]
    instrs = {r: ranks[r].program.instructions[where[r]] for r in group}
    first = instrs[group[0]]
    try:
        contributions = [ranks[r].mem.read(instrs[r].ins[0]) for r in group]
        sizes = [instrs[r].outs[0].elements for r in group]
        results = combine(first.opcode, str(first.attr("op", "add")), contributions, sizes)
    except _EXEC_ERRORS as exc:
        ranks[group[0]].fail(where[group[0]], exc, ignore)
        return
    for r, value in zip(group, results, strict=True):
        try:
            ranks[r].mem.write(instrs[r].outs[0], value.reshape(instrs[r].outs[0].shape))
        except _EXEC_ERRORS as exc:
            ranks[r].fail(where[r], exc, ignore)


def _outputs(w: _Rank, lenient: bool, warnings: list[str]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for t in w.program.outputs:
        value = w.mem.hbm[t.name].reshape(t.shape).copy()
        out[t.name] = value
        if value.dtype.kind in "iu":
            continue
        bad = ~np.isfinite(value.astype(np.float32))
        if bad.any():
            text = f"rank {w.rank}: output {t.name!r} has {int(bad.sum())} NaN/inf values of {value.size}"
            if not lenient:
                raise NprofError(f"execution error: {text}; check the inputs or pass --ignore-exec-errors")
            warnings.append(text)
    return out
