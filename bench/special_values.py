"""Special-value sweep of the nprof torch.compile backend: every case of `tests/compiler/special_kit.py`
(forward and backward) on inputs holding inf, -inf, NaN, -0.0, huge and denormal values, compared with eager.

Usage: ``PYTHONPATH=src .venv/bin/python bench/special_values.py [--only NAME ...] [--seeds N] [--coverage]
[--large]``. The cases are `special_kit.CASES` and `special_kit.MASKED_CASES` (attention with bool and float
masks); ``--large`` adds `special_kit.LARGE_CASES` (multi-tile shapes: > 128 rows, > 512 columns, K > 128
matmuls, many-channel and spread convolutions, row-packed inputs, multi-tile masked attention).
Prints one row per case: for each kind of special value ``.`` (equal to eager), ``R`` (equal, the call re-ran
eagerly with a warning), ``X`` (the backend refused) or the mismatch classes (``out0:nan``...), then the ops
of the registry no case covers (``--coverage``). Goal: no mismatch anywhere. Exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.compiler import special_kit as sk


def _cell(res: sk.Result) -> str:
    if res.refused:
        return "X"
    if res.mismatches:
        return ",".join(sorted(set(res.mismatches)))
    return "R" if res.reran else "."


def _coverage() -> list[str]:
    covered = {sk.op_family(n) for case in sk.CASES for n in sk.covered_ops(case)}
    return sorted(sk.reachable_families() - covered - set(sk.EXEMPT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="case names")
    ap.add_argument("--seeds", type=int, default=1, help="seeds per case (each a new draw of positions)")
    ap.add_argument("--coverage", action="store_true", help="also list registry ops no case covers")
    ap.add_argument("--large", action="store_true", help="also the multi-tile cases (special_kit.LARGE_CASES)")
    args = ap.parse_args()
    pool = (*sk.CASES, *sk.MASKED_CASES, *(sk.LARGE_CASES if args.large else ()))
    cases = [c for c in pool if args.only is None or c.name in args.only]
    bad = 0
    cpu0 = time.process_time()
    print(f"{'case':24s} " + " | ".join(f"{k:>6s}" for k in sk.KINDS))
    for case in cases:
        for seed in range(args.seeds):
            cells = [_cell(r) for r in sk.run_case(case, seed=seed)]
            bad += sum(c not in (".", "R", "X") for c in cells)
            print(f"{case.name:24s} " + " | ".join(f"{c:>6s}" for c in cells), flush=True)
    print(f"cases: {len(cases)}, mismatching cells: {bad} (goal 0); CPU {time.process_time() - cpu0:.1f} s")
    if args.coverage:
        missing = _coverage()
        print(f"registry ops no case covers: {missing or 'none'} (goal none)")
        bad += len(missing)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
