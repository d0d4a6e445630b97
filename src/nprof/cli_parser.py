"""The argparse parser of the `nprof` command line (`nprof.cli` runs what it parses).

Contract: `build_parser()` returns the parser: one subcommand per command, each added by its own
helper; option types reject bad values with one line; usage errors exit 2 with one line. Each
subcommand's `--help` ends with `EXAMPLES[command]` (commands tests/test_docs_commands.py parses,
so they cannot drift from the options).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

from nprof import __version__

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


EXAMPLES = {
    "capture": """examples:
  nprof capture -n file.neff --list-inputs                     # name, shape, dtype of every input
  nprof capture -n file.neff -s profile.ntff in_tensor x.npy   # one execution on the virtual device
  nprof capture -n file.neff -s t3.ntff --device-preset trn3   # trn3: some figures assumed (docs/hardware.md)
  nprof capture -n model.neff -r 8 -s output/                  # 8 workers: output/profile_rank_<i>.ntff
  nprof capture -s run.ntff -- python train.py --steps 3       # a real PyTorch run (system profile)""",
    "view": """examples:
  nprof view -s profile.ntff                                   # ingest and serve the web viewer
  nprof view -s profile.ntff --output-format summary-text      # metrics and findings on stdout
  nprof view -s trace.json.gz --output-format perfetto         # a Chrome/Kineto trace -> ntff.pftrace
  nprof view -d output/ --output-format summary-text           # a multi-worker capture
  nprof view                                                   # serve every stored profile""",
    "compile": """examples:
  nprof compile -- python train.py --steps 1                   # every graph into the compile cache
  NPROF_PRESET=trn2 nprof compile -- python train.py           # compile for another preset (docs/compile.md)""",
    "analyze": """examples:
  nprof analyze output/                                        # a multi-worker capture directory
  nprof analyze job.dataset --engine spark --output-format json""",
}


def _add_file_args(parser: argparse.ArgumentParser, program_help: str, profile_help: str) -> None:
    """The -n/--neff/--program and -s/--session-file/--profile options shared by capture and view."""
    parser.add_argument("-n", "--neff", "--program", dest="program", help=program_help)
    parser.add_argument("-s", "--session-file", "--profile", dest="profile", help=profile_help)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"nprof {self.prog.split()[-1]}: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The `nprof` parser: one subcommand per front-door command (capture, view, compile, analyze)."""
    parser = _Parser(prog="nprof", description="Profile ML workloads on a virtual NeuronCore or real hardware.")
    parser.add_argument("--version", action="version", version=f"nprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_capture_parser(sub)
    _add_view_parser(sub)
    _add_compile_parser(sub)
    _add_analyze_parser(sub)
    return parser


def _add_capture_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    """`nprof capture`: -n PROGRAM on the virtual device (single or multi-worker), or `-- COMMAND` for real."""
    cap = sub.add_parser(
        "capture",
        help="run a program on the virtual device, or a PyTorch script, and write a profile",
        usage="nprof capture -n PROGRAM -s PROFILE [options] [NAME FILE.npy ...]\n"
        "       nprof capture -s PROFILE [--device cpu|cuda] [--device-profile all|nth:N|none] -- COMMAND ...",
        description="Run a compiled program (-n) on the virtual NeuronCore, or a command after `--`\n"
        "under torch.profiler, and write a profile file.",
        epilog=EXAMPLES["capture"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        "--device-preset", choices=("trn1", "trn2", "trn3"), default=None,
        help="virtual device preset (default: the program's); trn3 rests partly on assumed figures, listed in "
        "docs/hardware.md and in every trn3 profile",
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
    _add_collectives_args(cap)


def _add_collectives_args(cap: argparse.ArgumentParser) -> None:
    """The multi-worker options of `nprof capture` (-r, --collectives-*, -m)."""
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
    cap.add_argument(
        "--collectives-rank-delay",
        action="append",
        default=[],
        metavar="RANK:US",
        help="start rank RANK US microseconds late (simulates a straggler; repeatable)",
    )


def _add_view_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    """`nprof view`: ingest and serve a profile, or write it in another format."""
    view = sub.add_parser(
        "view",
        help="post-process a profile: serve the web viewer or write a file",
        description="Ingest a profile into the store and serve the web viewer, or write it in\n"
        "another format with --output-format.",
        epilog=EXAMPLES["view"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_file_args(
        view,
        "program file (optional; validated, and it must be the program that made the profile)",
        "profile file (.ntff) or Chrome-trace JSON (.json, .json.gz)",
    )
    view.add_argument(
        "-d", "--directory", dest="directory", help="directory of a multi-worker capture (profile_rank_<i>.ntff)"
    )
    view.add_argument(
        "--output-format",
        default="db",
        help="db (default), summary-text, summary-json, json, parquet, csv, perfetto; "
        "with -d: summary-text, summary-json, perfetto, dataset",
    )
    view.add_argument("--output-file", default=None, help="where to write the output")
    view.add_argument("--show-perfetto-flows", action="store_true", help="perfetto: draw dependency arrows")
    view.add_argument("--terminology", action="store_true", help="print the table of terms and exit")
    view.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="when a finding or warning is reported, e.g. gap_share=0.02, small_dma_bytes=16384, latency_share=0.3 "
        "(repeatable; names and defaults in docs/profile-format.md; applies to the viewer, summary-text, json, "
        "parquet and csv, and latency_share to summary-json)",
    )
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


def _add_compile_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    """`nprof compile -- python script.py`: fill the compile cache."""
    comp = sub.add_parser(
        "compile",
        help="run a training script once, compiling every graph into the compile cache",
        usage="nprof compile [-h] [--cache DIR] -- python script.py [ARGS ...]",
        description="Run `python script.py` with torch.compile(backend='nprof') graphs compiled into\n"
        "the cache (the neuron_parallel_compile analogue). The preset is $NPROF_PRESET (trn1 by default).",
        epilog=EXAMPLES["compile"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    comp.add_argument(
        "--cache",
        default=None,
        metavar="DIR",
        help="compile cache (default $NPROF_CACHE or ~/.cache/nprof/compile-cache)",
    )


def _add_analyze_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    """`nprof analyze DIR [--engine duckdb|spark] [--master URL] [--top N] [--output-format text|json]`."""
    ana = sub.add_parser(
        "analyze",
        help="cross-rank analysis of a multi-worker capture or dataset, on DuckDB or Spark",
        description="Per-rank totals, collective waits and stragglers, engine utilisation per rank and top ops\n"
        "across ranks, computed by an existing engine over the rank-partitioned Parquet dataset.",
        epilog=EXAMPLES["analyze"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ana.add_argument("directory", metavar="DIR", help="capture directory (profile_rank_<i>.ntff) or dataset directory")
    ana.add_argument("--engine", choices=("duckdb", "spark"), default="duckdb", help="query engine (default duckdb)")
    ana.add_argument("--master", default=None, metavar="URL", help="Spark master (default local[2])")
    ana.add_argument("--top", type=_top_rows, default=20, metavar="N", help="rows of the top-ops table (default 20)")
    ana.add_argument("--output-format", choices=("text", "json"), default="text", help="text tables or JSON")
