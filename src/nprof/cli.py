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
from collections.abc import Sequence
from pathlib import Path

from nprof.cli_parser import build_parser
from nprof.errors import NprofError
from nprof.outcome import Outcome


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
            return _print(
                Outcome(f"wrote {len(paths)} rank profiles to {where}/; view them with: nprof view -d {where}\n")
            )
        return _print(
            Outcome(capture_command(command, args.profile, device=args.device, device_profile=args.device_profile))
        )
    if not args.program:
        raise NprofError("missing -n PROGRAM (a program to run on the virtual device) or `-- COMMAND`")
    from nprof.capture.sim import capture_from_args

    return _print(capture_from_args(args))


def _cmd_view(args: argparse.Namespace) -> int:
    from nprof.export import terminology_text

    if args.terminology:
        return _print(Outcome(terminology_text()))
    from nprof.analysis.thresholds import parse_thresholds

    args.thresholds = parse_thresholds(args.threshold)
    if args.profile and args.directory:
        raise NprofError("give either -s PROFILE or -d DIR, not both")
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
        return _print(export_from_args(args))
    from nprof.web.serve import view_from_args

    outcome, serve = view_from_args(args)
    code = _print(outcome)
    if serve is not None:
        serve()
    return code


def _cmd_compile(args: argparse.Namespace) -> int:
    from nprof.compiler.cache import compile_command

    command = args.command_args
    if not command:
        raise NprofError("nothing to run: nprof compile -- python train.py [args]")
    return _print(compile_command(command, cache_dir=args.cache))


def _cmd_analyze(args: argparse.Namespace) -> int:
    from nprof.dataset import analyze_from_args

    out = analyze_from_args(args)
    return _print(Outcome(out + b"\n" if isinstance(out, bytes) else out))


def _print(outcome: Outcome) -> int:
    """Write a handler's outcome: its text (or bytes) to stdout, flushed, its notes to stderr; its exit code."""
    if isinstance(outcome.stdout, bytes):
        sys.stdout.flush()
        sys.stdout.buffer.write(outcome.stdout)
        sys.stdout.buffer.flush()
    elif outcome.stdout:
        sys.stdout.write(outcome.stdout)
        sys.stdout.flush()
    for note in outcome.notes:
        sys.stderr.write(note + "\n")
    return outcome.code


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
