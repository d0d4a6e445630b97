"""Long mutation-fuzz run over nprof's readers: cases, clean refusals, crashes (distinct sites), hangs.

Usage: python bench/fuzz.py [--cases N] [--seed S] [--timeout SEC] [--areas chrome,profile,program,npy]
Goal: 0 crash sites, 0 hangs. Each case runs under a SIGALRM timeout (a hang = past it).
Prints one line per area, then every distinct crash site with one case's seed.
"""

from __future__ import annotations

import argparse
import random
import resource
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from tests import fuzz_kit as fk


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Hang


def _case(area: str, rng: random.Random, tmp: Path) -> tuple[Path, object]:
    """Write one mutated input for `area`; (path, reader)."""
    if area == "chrome":
        seed = rng.choice(fk.chrome_seeds())
        path = tmp / "t.json"
        path.write_bytes(fk.dumps(fk.mutate_json(rng, seed, rng.randint(1, 4))))
        return path, fk.read_trace_and_analyse
    if area == "profile":
        from tests.conftest import tiny_profile

        p = tiny_profile()
        path = tmp / "p.ntff"
        tables = {n: p.table(n) for n in ("instructions", "dma", "collectives", "counters")}
        fk.mutate_container(rng, "nprof-profile", 1, p.info.to_json(), tables, path)
        return path, fk.read_profile_and_analyse
    if area == "program":
        from nprof.program.file import save_program
        from tests.program.test_file import sample

        base = tmp / "base.neff"
        save_program(sample(), base)
        from nprof.container import open_container

        box = open_container(base, "nprof-program", 1, "program")
        tables = {n: box.read_table(n) for n in box.table_names}
        manifest = {k: v for k, v in box.manifest.items()}
        box.close()
        path = tmp / "p.neff"
        fk.mutate_container(rng, "nprof-program", 1, manifest, tables, path)
        return path, fk.read_program
    path = tmp / "x.npy"
    path.write_bytes(fk.mutate_npy(rng, np.arange(12, dtype=np.float32).reshape(3, 4)))
    return path, fk.read_npy


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=500, help="cases per area")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--areas", default="chrome,profile,program,npy")
    a = ap.parse_args()
    signal.signal(signal.SIGALRM, _alarm)
    sites: dict[str, str] = {}
    print(f"{'area':8} {'cases':>6} {'accepted':>8} {'refused':>8} {'crashes':>8} {'hangs':>6}  cpu s")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for area in a.areas.split(","):
            counts: Counter[str] = Counter()
            cpu0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime
            for i in range(a.cases):
                case_seed = a.seed * 1_000_003 + i
                rng = random.Random(f"{area}:{case_seed}")
                path, reader = _case(area, rng, tmp)
                signal.setitimer(signal.ITIMER_REAL, a.timeout)
                try:
                    outcome = fk.run_case(reader, path)  # type: ignore[arg-type]
                except _Hang:
                    outcome = "hang"
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                if outcome.startswith("crash:") and "_Hang" in outcome:
                    outcome = "hang"
                counts["crash" if outcome.startswith("crash") else outcome] += 1
                if outcome.startswith("crash") or outcome == "hang":
                    sites.setdefault(f"{area} {outcome}", f"--seed {a.seed} case {i}")
            cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu0
            print(
                f"{area:8} {a.cases:6d} {counts['ok']:8d} {counts['refused']:8d} {counts['crash']:8d} "
                f"{counts['hang']:6d}  {cpu:.1f}",
                flush=True,
            )
    print(f"distinct crash/hang sites: {len(sites)} (goal 0)")
    for site, where in sorted(sites.items()):
        print(f"  {site}  ({where})")
    return 0


if __name__ == "__main__":
    time.perf_counter()
    raise SystemExit(main())
