"""Numerics of a multi-worker job: every rank's program on its own Memory, in lockstep at collectives.

Contract of `run_lockstep(programs, preset, checked, ops, ignore_exec_errors, warnings) -> outputs`:
`checked[r]` is rank r's (checked inputs, missing names) from `simulate.prepare_inputs`, `ops` the matched
collectives of `workers.match_ops`. Each rank runs its instructions in program order up to its next
collective; an operation executes once all its participants stand at it (`collectives.combine` on the
participants' inputs, read as float, written to each output in its dtype). A ring of ranks that wait for
each other in different orders is a deadlock and raises NprofError. Execution errors follow `simulate`:
NprofError naming rank and instruction, or skipped with a warning under `ignore_exec_errors`. Returns every
rank's output tensors; NaN/inf outputs are an error unless inputs were missing or errors are ignored.

Sharing: ranks that run the same Program object on the same input arrays (the same objects, e.g. no inputs,
or one .npy for every rank) hold identical state, so they form one *class* with one Memory, executed once.
A collective whose results differ between members of a class (reduce-scatter, all-to-all) splits the class:
each distinct result gets its own copy of the memory. Results are the same as running every rank apart.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from nprof.arch.presets import Preset
from nprof.device import numerics as num
from nprof.device.collectives import combine
from nprof.device.memory import AccessError, Memory
from nprof.device.simulate import check_input, collect_outputs, one_blas_thread
from nprof.errors import NprofError
from nprof.program.model import Program
from nprof.progress import progress

EXEC_ERRORS = (AccessError, ValueError, IndexError, KeyError, TypeError)
OpKey = tuple[tuple[int, ...], int]


class RankState:
    """Ranks sharing one memory and position (same program, same state); `members[0]` names them in errors."""

    def __init__(self, members: list[int], program: Program, mem: Memory, pos: int = 0) -> None:
        self.members = members
        self.program = program
        self.mem = mem
        self.pos = pos
        self.skipped = 0
        self.notes: list[str] = []  # "{rank}" is replaced by each member's rank

    @property
    def rank(self) -> int:
        return self.members[0]

    def where(self, i: int) -> str:
        ins = self.program.instructions[i]
        return f"rank {{rank}} instruction {i} ({ins.opcode.value}{', ' + ins.source if ins.source else ''})"

    def fail(self, i: int, exc: Exception, ignore: bool) -> None:
        if not ignore:
            raise NprofError(
                f"execution error in {self.where(i).replace('{rank}', str(self.rank))}: {exc}; fix the program or pass "
                "--ignore-exec-errors"
            ) from exc
        self.skipped += 1
        if self.skipped <= 5:
            self.notes.append(f"execution error in {self.where(i)} skipped: {exc}")

    def run_until(self, stop: int, ignore: bool) -> int:
        ran = stop - self.pos
        instructions = self.program.instructions
        handlers = num.HANDLERS
        mem = self.mem
        for i in range(self.pos, stop):
            ins = instructions[i]
            try:
                handlers[ins.opcode](ins, mem)
            except EXEC_ERRORS as exc:
                self.fail(i, exc, ignore)
        self.pos = stop
        return ran * len(self.members)

    def split(self, members: list[int]) -> RankState:
        """A new class for `members` (removed from this one) with a copy of the memory."""
        mem = Memory(self.program, self.mem.preset)
        mem.sbuf[...] = self.mem.sbuf
        mem.psum[...] = self.mem.psum
        for name, arr in self.mem.hbm.items():
            mem.hbm[name][...] = arr
        self.members = [m for m in self.members if m not in members]
        other = RankState(members, self.program, mem, self.pos)
        other.skipped, other.notes = self.skipped, list(self.notes)
        return other


def rank_states(
    programs: list[Program], preset: Preset, checked: list[tuple[dict[str, np.ndarray], list[str]]]
) -> list[RankState]:
    """One state per class of ranks (same program, same input arrays), memory loaded with inputs and weights."""
    by_key: dict[tuple, list[int]] = {}
    for r, p in enumerate(programs):
        given = checked[r][0]
        by_key.setdefault((id(p), tuple(sorted((k, id(v)) for k, v in given.items()))), []).append(r)
    out: list[RankState] = []
    for members in by_key.values():
        program = programs[members[0]]
        mem = Memory(program, preset)
        for name, value in checked[members[0]][0].items():
            mem.load(name, value)
        c = RankState(members, program, mem)
        for t in program.tensors:
            if t.kind != "weight":
                continue
            const = program.constants.get(t.name)
            if const is None:
                c.notes.append(f"rank {{rank}}: weight {t.name!r} has no value in the program: running on zeros")
                continue
            mem.load(t.name, check_input(t, const))
        out.append(c)
    return out


def run_lockstep(
    programs: list[Program],
    preset: Preset,
    checked: list[tuple[dict[str, np.ndarray], list[str]]],
    ops: Mapping[OpKey, Mapping[int, int]],
    ignore_exec_errors: bool,
    warnings: list[list[str]],
) -> list[dict[str, np.ndarray]]:
    """Run every rank's numerics with collectives exchanged (see module doc); outputs per rank."""
    stops: list[list[int]] = [[] for _ in programs]
    key_at: list[dict[int, OpKey]] = [{} for _ in programs]
    for key, where in ops.items():
        for r, i in where.items():
            stops[r].append(i)
            key_at[r][i] = key
    for s in stops:
        s.sort()
    classes = rank_states(programs, preset, checked)
    nxt = [0] * len(programs)
    total = sum(len(p.instructions) for p in programs)
    with (
        progress(total, f"simulating {len(programs)} workers") as bar,
        np.errstate(all="ignore"),
        one_blas_thread(),
    ):
        while True:
            for c in classes:
                r = c.rank
                stop = stops[r][nxt[r]] if nxt[r] < len(stops[r]) else len(c.program.instructions)
                bar.advance(c.run_until(stop, ignore_exec_errors))
            owner = {m: c for c in classes for m in c.members}
            waiting = {r: key_at[r][owner[r].pos] for r in range(len(programs)) if nxt[r] < len(stops[r])}
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
                classes.extend(_execute(key, ops[key], owner, ignore_exec_errors))
                owner = {m: c for c in classes for m in c.members}  # split classes included
                for c in {id(owner[r]): owner[r] for r in key[0]}.values():
                    c.pos += 1
                for r in key[0]:
                    nxt[r] += 1
                bar.advance(len(key[0]))
                owner = {m: c for c in classes for m in c.members}
    outputs: list[dict[str, np.ndarray]] = [{} for _ in programs]
    for c in classes:
        for r in c.members:
            warnings[r].extend(note.replace("{rank}", str(r)) for note in c.notes)
            if c.skipped > 5:
                warnings[r].append(f"rank {r}: {c.skipped - 5} more instructions with execution errors skipped")
            lenient = bool(checked[r][1]) or ignore_exec_errors
            outputs[r] = collect_outputs(c.program, c.mem, lenient, warnings[r], label=f"rank {r}: ")
    return outputs


def _execute(key: OpKey, where: Mapping[int, int], owner: Mapping[int, RankState], ignore: bool) -> list[RankState]:
    """Run one collective; returns the classes split off because their members got different results."""
    group = key[0]
    first_class = owner[group[0]]
    ins0 = first_class.program.instructions[where[group[0]]]
    reads: dict[int, np.ndarray] = {}
    try:
        contributions = []
        for r in group:
            c = owner[r]
            if id(c) not in reads:
                reads[id(c)] = c.mem.read(c.program.instructions[where[r]].ins[0])
            contributions.append(reads[id(c)])
        sizes = [owner[r].program.instructions[where[r]].outs[0].elements for r in group]
        results = combine(ins0.opcode, str(ins0.attr("op", "add")), contributions, sizes)
    except EXEC_ERRORS as exc:
        first_class.fail(where[group[0]], exc, ignore)
        return []
    result_of = dict(zip(group, results, strict=True))
    new: list[RankState] = []
    for c in list({id(owner[r]): owner[r] for r in group}.values()):
        distinct: list[tuple[np.ndarray, list[int]]] = []
        for m in c.members:
            value = result_of[m]
            for seen, ms in distinct:
                if seen is value or np.array_equal(seen, value):
                    ms.append(m)
                    break
            else:
                distinct.append((value, [m]))
        parts = [c] + [c.split(ms) for _, ms in distinct[1:]]
        new.extend(parts[1:])
        for part, (value, _) in zip(parts, distinct, strict=True):
            out = part.program.instructions[where[part.rank]].outs[0]
            try:
                part.mem.write(out, value.reshape(out.shape))
            except EXEC_ERRORS as exc:
                part.fail(where[part.rank], exc, ignore)
    return new
