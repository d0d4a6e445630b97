"""The `nprof` command line: `capture`, `view`, `compile`, `analyze`.

This module only parses arguments and calls one library function per command;
it maps `NprofError` to one line on stderr and the error's exit code (2), and
Ctrl-C to exit code 130. It contains no logic of its own.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from nprof import __version__
from nprof.errors import NprofError

DEFAULT_PORT = 3001
MAX_WORKERS = 4096  # simulated workers per node / in all: each is a process-level simulation
MAX_NTH_EXEC = 10_000  # each warm-up execution is simulated in full


def _int_in(minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse `type` accepting whole numbers in [minimum, maximum], with one-line messages."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a number >= {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"expected a number <= {maximum}, got {str(value)[:40]}")
        return value

    return parse


_port = _int_in(1, 65535)
_workers = _int_in(1, MAX_WORKERS)
_nth_exec = _int_in(1, MAX_NTH_EXEC)
_top_rows = _int_in(1, 1_000_000)


def _add_file_args(parser: argparse.ArgumentParser, program_help: str, profile_help: str) -> None:
    """The -n/--neff/--program and -s/--session-file/--profile options shared by capture and view."""
    parser.add_argument("-n", "--neff", "--program", dest="program", help=program_help)
    parser.add_argument("-s", "--session-file", "--profile", dest="profile", help=profile_help)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"nprof {self.prog.split()[-1]}: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nprof", description="Profile ML workloads on a virtual NeuronCore or real hardware.")
    parser.add_argument("--version", action="version", version=f"nprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    cap = sub.add_parser(
        "capture",
        help="run a program on the virtual device, or a PyTorch script, and write a profile",
        description="Run a compiled program (-n) on the virtual NeuronCore, or a command after `--` "
        "under torch.profiler, and write a profile file.",
    )
    _add_file_args(cap, "program file (.neff) to run", "profile file to write (a directory for multi-worker captures)")
    cap.add_argument(
        "inputs", nargs="*", metavar="NAME FILE.npy", help="input tensors as name/file pairs; none = all-zero inputs"
    )
    cap.add_argument(
        "--device",
        choices=("sim", "cpu", "cuda"),
        default=None,
        help="sim = virtual NeuronCore (default with -n); cpu/cuda profile a real run",
    )
    cap.add_argument(
        "--device-preset", choices=("trn1", "trn2"), default=None, help="virtual device preset (default: the program's)"
    )
    cap.add_argument(
        "--ignore-exec-errors",
        action="store_true",
        help="write the profile even if execution reports errors (inf/NaN, bounds)",
    )
    cap.add_argument(
        "--profile-nth-exec",
        type=_nth_exec,
        default=1,
        metavar="N",
        help="profile the N-th execution (earlier ones are warm-up)",
    )
    cap.add_argument("--timing-only", action="store_true", help="skip numerics (timing model only), for large programs")
    cap.add_argument(
        "--device-profile",
        default="default",
        metavar="all|nth:N|none",
        help="-- COMMAND with torch.compile(backend='nprof'): which executions of each graph keep a device "
        "profile (default: the first after warm-up)",
    )
    cap.add_argument("--list-inputs", action="store_true", help="list the program's inputs and exit")
    cap.add_argument(
        "-r",
        "--collectives-workers-per-node",
        type=_workers,
        default=None,
        metavar="N",
        help="simulate N workers per node running the program",
    )
    cap.add_argument(
        "--collectives-profile-id", default="all", metavar="all|ID", help="which worker ranks to profile (default all)"
    )
    cap.add_argument(
        "--collectives-worker-count",
        type=_workers,
        default=None,
        metavar="N",
        help="total workers across all nodes (multi-node)",
    )
    cap.add_argument(
        "--collectives-worker-start-id",
        type=_int_in(0, MAX_WORKERS - 1),
        default=0,
        metavar="ID",
        help="rank of this node's first worker (multi-node)",
    )
    cap.add_argument(
        "-m",
        "--multi-input",
        default=None,
        metavar="FILE",
        help="per-rank inputs: a file listing `RANK NAME FILE.npy` lines",
    )

    view = sub.add_parser(
        "view",
        help="post-process a profile: serve the web viewer or write a file",
        description="Ingest a profile into the store and serve the web viewer, or write it in "
        "another format with --output-format.",
    )
    _add_file_args(view, "program file (optional)", "profile file (.ntff) or Chrome-trace JSON (.json, .json.gz)")
    view.add_argument(
        "-d", "--directory", dest="directory", help="directory of a multi-worker capture (profile_rank_<i>.ntff)"
    )
    view.add_argument(
        "--output-format", default="db", help="db (default), summary-text, summary-json, json, parquet, csv, perfetto"
    )
    view.add_argument("--output-file", default=None, help="where to write the output")
    view.add_argument("--show-perfetto-flows", action="store_true", help="perfetto: draw dependency arrows")
    view.add_argument("--terminology", action="store_true", help="print the table of terms and exit")
    view.add_argument("--ingest-only", action="store_true", help="ingest into the store, do not serve")
    view.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"web port (default {DEFAULT_PORT})")
    view.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    view.add_argument("--force", action="store_true", help="replace a stored profile with the same id")
    view.add_argument("--db-bucket", default=None, metavar="ID", help="id to store the profile under")
    view.add_argument("--display-name", default=None, help="name shown in the profile list")
    view.add_argument(
        "--nki-source-root",
        default=None,
        metavar="DIR",
        help="directory holding the kernel sources (default: the copies stored in the profile at capture)",
    )
    view.add_argument(
        "--db", default=None, metavar="PATH", help="store directory (default $NPROF_DB or ~/.local/share/nprof/store)"
    )

    comp = sub.add_parser(
        "compile",
        help="run a training script once, compiling every graph into the compile cache",
        description="Run `python script.py` with torch.compile(backend='nprof') graphs compiled into "
        "the cache (the neuron_parallel_compile analogue).",
    )
    comp.add_argument(
        "--cache",
        default=None,
        metavar="DIR",
        help="compile cache (default $NPROF_CACHE or ~/.cache/nprof/compile-cache)",
    )
    _add_analyze_parser(sub)
    return parser


def _add_analyze_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`nprof analyze DIR [--engine duckdb|spark] [--master URL] [--top N] [--output-format text|json]`."""
    ana = sub.add_parser(
        "analyze",
        help="cross-rank analysis of a multi-worker capture or dataset, on DuckDB or Spark",
        description="Per-rank totals, collective waits and stragglers, engine utilisation per rank and top ops "
        "across ranks, computed by an existing engine over the rank-partitioned Parquet dataset.",
    )
    ana.add_argument("directory", metavar="DIR", help="capture directory (profile_rank_<i>.ntff) or dataset directory")
    ana.add_argument("--engine", choices=("duckdb", "spark"), default="duckdb", help="query engine (default duckdb)")
    ana.add_argument("--master", default=None, metavar="URL", help="Spark master (default local[2])")
    ana.add_argument("--top", type=_top_rows, default=20, metavar="N", help="rows of the top-ops table (default 20)")
    ana.add_argument("--output-format", choices=("text", "json"), default="text", help="text tables or JSON")


def _split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split `nprof capture ... -- python train.py` into (nprof args, command)."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def _same_file(a: str | None, b: str | None) -> bool:
    """True when both paths are given and name the same file (existing or not)."""
    if not a or not b:
        return False
    pa_, pb = Path(a).expanduser(), Path(b).expanduser()
    if pa_.exists() and pb.exists():
        return pa_.samefile(pb)
    return pa_.resolve() == pb.resolve()


def _cmd_capture(args: argparse.Namespace) -> int:
    command = args.command_args
    if command and args.program:
        raise NprofError("give either -n PROGRAM (virtual device) or a command after `--` (real run), not both")
    if _same_file(args.program, args.profile):
        raise NprofError(f"-s {args.profile} is the program file given with -n; write the profile elsewhere")
    for npy in args.inputs[1::2]:
        if _same_file(npy, args.profile):
            raise NprofError(f"-s {args.profile} is an input file; write the profile elsewhere")
    if command or args.device in ("cpu", "cuda"):
        from nprof.capture.torch_run import capture_command

        if not command:
            raise NprofError(
                "nothing to run: give the command after `--`, e.g. nprof capture -s p.ntff -- python train.py"
            )
        if not args.profile:
            raise NprofError("missing -s PROFILE: where to write the profile")
        from nprof.capture.torchrun import capture_torchrun, torchrun_split

        if torchrun_split(command) is not None:  # one system profile per rank
            paths = capture_torchrun(command, args.profile, device=args.device, device_profile=args.device_profile)
            where = paths[0].parent
            sys.stdout.write(f"wrote {len(paths)} rank profiles to {where}/; view them with: nprof view -d {where}\n")
            return 0
        capture_command(command, args.profile, device=args.device, device_profile=args.device_profile)
        return 0
    if not args.program:
        raise NprofError("missing -n PROGRAM (a program to run on the virtual device) or `-- COMMAND`")
    from nprof.capture.sim import capture_from_args

    return capture_from_args(args)


def _cmd_view(args: argparse.Namespace) -> int:
    from nprof.export import terminology_text

    if args.terminology:
        sys.stdout.write(terminology_text())
        return 0
    if args.display_name is not None:
        from nprof.store.catalog import check_display_name

        args.display_name = check_display_name(args.display_name)
    if args.output_format != "db":
        from nprof.export import export_from_args, get_exporter

        if args.output_file == "-":
            if get_exporter(args.output_format).default_output is not None:
                raise NprofError(f"--output-file - (stdout) works for text formats only, not {args.output_format}")
            args.output_file = None  # the text formats write to stdout
        for given, flag in ((args.profile, "-s"), (args.program, "-n")):
            if _same_file(args.output_file, given):
                raise NprofError(f"--output-file {args.output_file} is the {flag} input; choose another output file")
        return export_from_args(args)
    from nprof.web.serve import view_from_args

    return view_from_args(args)


def _cmd_compile(args: argparse.Namespace) -> int:
    from nprof.compiler.cache import compile_command

    command = args.command_args
    if not command:
        raise NprofError("nothing to run: nprof compile -- python train.py [args]")
    return compile_command(command, cache_dir=args.cache)


def _cmd_analyze(args: argparse.Namespace) -> int:
    from nprof.dataset import analyze_from_args

    out = analyze_from_args(args)
    if isinstance(out, bytes):
        sys.stdout.buffer.write(out + b"\n")
    else:
        sys.stdout.write(out)
    return 0


_COMMANDS = {"capture": _cmd_capture, "view": _cmd_view, "compile": _cmd_compile, "analyze": _cmd_analyze}


class _Interrupts:
    """Remembers a Ctrl-C even when a library (DuckDB) turns the KeyboardInterrupt into its own error."""

    seen = False

    @classmethod
    def handler(cls, signum: int, frame: object) -> None:
        cls.seen = True
        raise KeyboardInterrupt


def _run(args: argparse.Namespace) -> int:
    """Run one command; NprofError -> its exit code (2), Ctrl-C -> 130, each with one line on stderr."""
    try:
        return _COMMANDS[args.command](args)
    except NprofError as err:
        if _Interrupts.seen:
            sys.stderr.write("nprof: interrupted\n")
            return 130
        sys.stderr.write(f"nprof {args.command}: {err}\n")
        return err.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("nprof: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except Exception:
        if _Interrupts.seen:  # e.g. DuckDB's "Query interrupted" raised for our KeyboardInterrupt
            sys.stderr.write("nprof: interrupted\n")
            return 130
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI. With `argv` None (a real `nprof` process) it ends the process itself (see `_exit`)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before the command started (parsing, early imports)
        sys.stderr.write("nprof: interrupted\n")
        if argv is None:
            _exit(130)
        return 130


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    own, command = _split_command(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(own)
    args.command_args = command
    if not args.command:
        parser.print_help()
        return 2
    if argv is None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _Interrupts.handler)
    code = _run(args)
    if argv is None:
        _exit(code)
    return code


def _exit(code: int) -> None:
    """Flush and leave without interpreter teardown: pyarrow's and DuckDB's thread pools may abort
    ("terminate called without an active exception", exit 134) when destroyed at shutdown. Every file
    nprof writes is closed (atomically renamed) before its command returns."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
