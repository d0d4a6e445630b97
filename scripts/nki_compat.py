"""NKI compatibility run: AWS's public NKI kernels, imports rewritten to `nprof.nki`, against numpy references.

Usage (from the repository root, with the venv):

    PYTHONPATH=src .venv/bin/python scripts/nki_compat.py [--full] [--only SUBSTR] [--timeout S]
        [--no-pytest] [--keep DIR] [--skip SUBSTR]

Extracts the public sources named in `nki_compat_cases.SOURCES` (the local
mirrors of aws-neuron/aws-neuron-sdk at Neuron 2.26 and aws-neuron/nki-samples)
into a temp dir with `git archive`, rewrites ONLY their import lines
(`neuronxcc.nki` / `nki` / `torch_neuronx.nki_jit` -> `nprof.nki`), then runs
each kernel of `nki_compat_cases.CASES` in its own subprocess (at the small
size, or the published size with `--full`) and compares it with our numpy
reference, and runs every public unit-test file with pytest (numpy's global RNG
seeded 0 before each test: repeatable inputs for tests that draw unseeded
ones, `nki_compat_extra.STUBS`). Prints one table:
kernel, runs, numerics error (max |out - ref| / max |ref|), why not. Nothing
fetched is ever written into this repository.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nki_compat_cases as cases_mod
import nki_compat_extra as extra

ROOT = Path(__file__).resolve().parent.parent
CASES = [*cases_mod.CASES, *extra.EXTRA_CASES]
IMPORT_RULES = [
    (re.compile(r"^(\s*)from torch_neuronx import nki_jit\b"), r"\1from nprof.nki import jit as nki_jit"),
    (
        re.compile(r"^(\s*)from torch_neuronx\.xla_impl\.ops import nki_jit\b"),
        r"\1from nprof.nki import jit as nki_jit",
    ),
    (re.compile(r"^(\s*)from neuronxcc import nki\b"), r"\1from nprof import nki"),
    (re.compile(r"^(\s*)import neuronxcc\.nki(\.\w+)* as "), lambda m: f"{m[1]}import nprof.nki{m[2] or ''} as "),
    (re.compile(r"^(\s*)from neuronxcc\.nki\b"), r"\1from nprof.nki"),
    (re.compile(r"^(\s*)import nki(\.\w+)* as "), lambda m: f"{m[1]}import nprof.nki{m[2] or ''} as "),
    (re.compile(r"^(\s*)import nki[ \t]*$"), r"\1import nprof.nki as nki"),
    (re.compile(r"^(\s*)from nki\b"), r"\1from nprof.nki"),
]


def rewrite_imports(text: str) -> str:
    """`text` with each import line of NKI rewritten to nprof.nki (nothing else changes)."""
    out = []
    for line in text.splitlines(keepends=True):
        if "import" in line:
            for pattern, repl in IMPORT_RULES:
                line = pattern.sub(repl, line)
        out.append(line)
    return "".join(out)


def extract(dest: Path) -> None:
    """`git archive` every source into dest/<source>, imports rewritten."""
    for name, (mirror, ref, sub) in cases_mod.SOURCES.items():
        target = dest / name
        target.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", mirror, "archive", ref, *([sub] if sub else [])], check=True,
                                 capture_output=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
        if sub:  # flatten general/nki -> the source root
            inner = target / sub
            for child in inner.iterdir():
                child.rename(target / child.name)
        for py in target.rglob("*.py"):
            py.write_text(rewrite_imports(py.read_text(errors="replace")))
    extra.write_stubs(dest)


def _load(path: Path) -> Any:
    """The module of a public file: by its dotted name under the nearest `src/` when it uses relative imports
    (nki-samples' reference kernels), else from its path with its directory on sys.path."""
    src = next((p for p in path.parents if p.name == "src"), None)
    if src is not None and re.search(r"^\s*from \.", path.read_text(), re.MULTILINE):
        sys.path.insert(0, str(src))
        return importlib.import_module(".".join(path.relative_to(src).with_suffix("").parts))
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _why(err: BaseException) -> str:
    """One line: the error and, when it is not an nprof error, where it was raised."""
    text = f"{type(err).__name__}: {err}".splitlines()[0]
    from nprof.errors import NprofError

    if not isinstance(err, NprofError):
        frame = traceback.extract_tb(err.__traceback__)[-1]
        text += f" [at {Path(frame.filename).name}:{frame.lineno}]"
    return text


def _error(out: Any, ref: Any) -> float:
    import numpy as np

    outs = out if isinstance(out, tuple | list) else (out,)
    refs = ref if isinstance(ref, tuple | list) else (ref,)
    worst = 0.0
    for o, r in zip(outs, refs, strict=True):
        o, r = np.asarray(o, dtype=np.float64), np.asarray(r, dtype=np.float64)
        if o.shape != r.shape:
            return float("inf")
        worst = max(worst, float(np.abs(o - r).max() / max(np.abs(r).max(), 1e-30)))
    return worst


def run_case(case: cases_mod.Case, tree: Path, full: bool) -> dict[str, Any]:
    """Run one kernel (in this process); the row of the table as a dict."""
    import numpy as np

    dims = case.full if full and case.full else case.small
    rng = np.random.default_rng(0)
    args = case.make(dims, rng)
    sys.path.insert(0, str(tree / "_stubs"))
    try:
        module = _load(tree / case.source / case.path)
        kernel = getattr(module, case.func)
        if case.more is not None:
            args = (*args, *case.more(module))
        if case.jit:
            from nprof import nki

            kernel = nki.jit(kernel)
        if case.grid:
            kernel = kernel[case.grid]
        start = time.process_time()
        out = kernel(*args)
        cpu = time.process_time() - start
    except BaseException as err:
        if case.expect and case.expect in str(err):
            return {"runs": "refused", "err": None, "why": "refused as NKI does: " + _why(err)}
        return {"runs": "no", "err": None, "why": _why(err)}
    if case.expect:
        return {"runs": "yes", "err": None, "why": "ran, but NKI rejects this kernel", "cpu": cpu}
    err = _error(case.decode(out) if case.decode else out, case.ref(*args))
    why = "" if err <= case.tol else f"numerics differ (tolerance {case.tol})"
    return {"runs": "yes" if not why else "wrong", "err": err, "why": why, "cpu": cpu}


def _env(tree: Path, source: str, here: Path) -> dict[str, str]:
    """The environment a public file runs in: our sources, the source's package, its directory, the stubs."""
    path = f"{ROOT / 'src'}:{tree / source / 'src'}:{here}:{tree / '_stubs'}"
    return {"PYTHONPATH": path, "PATH": "/usr/bin:/bin", "HOME": str(tree)}  # HOME: files it writes land here


def run_pytest(tree: Path, source: str, path: Path, args: tuple[str, ...], timeout: float,
               case: str = "") -> dict[str, Any]:  # fmt: skip
    """pytest on one public unit-test file (or its one test `case`, a pytest node id); passed/failed counts
    and the first assertion or error line."""
    name = f"{source}:{path.stem}"
    if name in extra.PYTEST_FULL:
        args = tuple(a for a in args if a != "--simulation-only")
    longer = extra.PYTEST_TIMEOUT.get(name)
    timeout = max(timeout, longer[0]) if longer else timeout
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "nprof_compat_seed",
           case or str(path), *args]  # fmt: skip
    before = _children_cpu()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=path.parent,
                              env=_env(tree, source, path.parent))  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"runs": "no", "err": None, "why": f"timeout after {timeout:.0f} s"}
    cpu = _children_cpu() - before
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode < 0:  # killed (the kernel's OOM killer sends SIGKILL): say so, not an empty reason
        res = {"runs": "no", "err": None, "why": f"killed by signal {-proc.returncode}"
               f"{' (SIGKILL: out of memory?)' if proc.returncode == -9 else ''}"}  # fmt: skip
    elif proc.returncode == 5:  # pytest: nothing collected (no test in the file, or none marked for simulation)
        res = {"runs": "n/a", "err": None, "why": f"no test to run here ({summary})"}
    elif proc.returncode == 0:
        res = {"runs": "yes", "err": None, "why": "" if "passed" in summary else summary}
    else:
        lines = [ln[1:].strip() for ln in proc.stdout.splitlines() if ln.startswith("E ")]
        first = next((ln for ln in lines if "Error" in ln or "assert" in ln), lines[0] if lines else summary)
        res = {"runs": "no", "err": None, "why": first}
    if name in extra.PYTEST_FULL and res["runs"] == "yes":
        res["why"] = "no test marked for simulation: run in full (nothing in it needs a device)"
    if longer:  # (after its own reason: the table cuts long lines)
        res["why"] = (f"{res['why']}; " if res["why"] else "") + f"limit {timeout:.0f} s: {longer[1]}"
    known = extra.PYTEST_KNOWN.get(name)
    if known and res["runs"] != "yes" and known[1] in res["why"]:
        res = {"runs": known[0], "err": None, "why": known[2]}
    res["cpu"] = cpu
    return res


def pytest_cases(tree: Path, source: str, path: Path, args: tuple[str, ...]) -> list[str]:
    """The node ids pytest collects from one public unit-test file with `args` (its own selection rules)."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(path), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=path.parent,
                          env=_env(tree, source, path.parent))  # fmt: skip
    ids = [ln.strip() for ln in proc.stdout.splitlines() if "::" in ln]
    return [f"{path}::{node.split('::', 1)[1]}" for node in ids]  # (ids are relative to pytest's rootdir)


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished child processes so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_script(name: str, tree: Path, source: str, path: Path, timeout: float) -> dict[str, Any]:
    """A public file run with python in its directory: yes when it exits 0 and prints no "False" (a known
    failure of `SCRIPT_KNOWN` is shown with its reason)."""
    try:
        with tempfile.TemporaryDirectory(prefix="home_", dir=tree) as home:  # a fresh HOME: files it writes
            env = {**_env(tree, source, path.parent), "HOME": home}
            proc = subprocess.run([sys.executable, path.name], capture_output=True, text=True, timeout=timeout,
                                  cwd=path.parent, env=env)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"runs": "no", "err": None, "why": f"timeout after {timeout:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        known = extra.SCRIPT_KNOWN.get(name)
        if known and known[1] in tail:
            return {"runs": known[0], "err": None, "why": known[2]}
        return {"runs": "no", "err": None, "why": tail}
    if "False" in proc.stdout:
        line = next(ln for ln in proc.stdout.splitlines() if "False" in ln)
        return {"runs": "wrong", "err": None, "why": f"its own check printed: {line.strip()}"}
    return {"runs": "yes", "err": None, "why": ""}


def _subprocess_case(name: str, tree: Path, full: bool, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--run-case", name, "--tree", str(tree)] + (["--full"] if full else [])
    try:
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}"}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tree, env=env)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"runs": "no", "err": None, "why": f"timeout after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"runs": "no", "err": None, "why": f"crashed: {tail}"}


def _row(name: str, res: dict[str, Any]) -> str:
    err = "" if res.get("err") is None else f"{res['err']:.1e}"
    cpu = f"{res['cpu']:.1f}" if res.get("cpu") is not None else ""
    return f"{name:<34} {res['runs']:<8} {err:>8} {cpu:>7}  {res['why'][:150]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="published input sizes (slow) instead of small ones")
    ap.add_argument("--only", default="", help="run only rows whose name contains this")
    ap.add_argument("--skip", default="", help="leave out rows whose name contains this")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per kernel / test file")
    ap.add_argument("--no-pytest", action="store_true", help="skip the public unit-test files")
    ap.add_argument("--keep", default="", help="extract into this directory (kept) instead of a temp dir")
    ap.add_argument("--run-case", default="", help=argparse.SUPPRESS)
    ap.add_argument("--tree", default="", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.run_case:
        case = next(c for c in CASES if c.name == opts.run_case)
        print(json.dumps(run_case(case, Path(opts.tree), opts.full)))
        return 0
    with tempfile.TemporaryDirectory(prefix="nki_compat_") as tmp:
        tree = Path(opts.keep or tmp)
        if not (tree / "sdk").exists():
            extract(tree)
        extra.write_stubs(tree)  # (a kept tree gets this version's stubs too)
        return _report(tree, opts)


def _report(tree: Path, opts: argparse.Namespace) -> int:
    print(f"{'kernel':<34} {'runs':<8} {'error':>8} {'cpu s':>7}  why not")
    counts: dict[str, int] = {}

    def wanted(name: str) -> bool:
        return opts.only in name and not (opts.skip and opts.skip in name)

    def show(name: str, res: dict[str, Any], prefix: str = "") -> None:
        counts[prefix + res["runs"]] = counts.get(prefix + res["runs"], 0) + 1
        print(_row(name, res), flush=True)

    for case in CASES:
        if wanted(case.name):
            show(case.name, _subprocess_case(case.name, tree, opts.full, opts.timeout))
    for name, source, rel in extra.SCRIPTS:
        if wanted(name):
            show(name, run_script(name, tree, source, tree / source / rel, opts.timeout), "scripts ")
    if not opts.no_pytest:
        for source, sub, args in cases_mod.PYTEST:
            for path in sorted((tree / source / sub).glob("test_*.py")):
                name = f"{source}:{path.stem}"
                if name in extra.PYTEST_SPLIT:  # a row per test case, each in its own pytest
                    for case in pytest_cases(tree, source, path, args):
                        row = name + case[case.index("[") :] if "[" in case else f"{name}::{case.split('::')[-1]}"
                        if wanted(row):
                            show(row, run_pytest(tree, source, path, args, opts.timeout, case), "test cases ")
                elif wanted(name):
                    show(name, run_pytest(tree, source, path, args, opts.timeout), "tests ")
    print("summary: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
