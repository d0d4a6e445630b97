"""Every `nprof ...` command shown in README.md, docs/*.md, the examples' docstrings and each subcommand's
`--help` examples (`nprof.cli_parser.EXAMPLES`) parses with the real
CLI parser: its subcommand and flags exist, choice values are valid, and each `--output-format` is one the
command accepts (`-s`: the exporters or db; `-d`: the multi-worker formats). Commands are not run.

A command is a line starting with `nprof capture|view|compile|analyze`, with its `\\` continuations; a
trailing `# comment`, `$(...)` and `<placeholders>` are replaced by a plain word before parsing.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from nprof.cli_parser import EXAMPLES, build_parser
from nprof.export import EXPORTERS
from nprof.export.group_export import GROUP_FORMATS

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").rglob("*.py"))]
_COMMAND = re.compile(r"^\s*(nprof (?:capture|view|compile|analyze)(?:\s.*)?)$")


def doc_commands(text: str) -> list[str]:
    """The `nprof <subcommand> ...` lines of `text`, continuations joined, comments and `$(...)` replaced."""
    out, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        match = _COMMAND.match(line)
        if not match:
            continue
        command, j = match.group(1), i
        while command.rstrip().endswith("\\") and j + 1 < len(lines):
            j += 1
            command = command.rstrip()[:-1] + " " + lines[j].strip()
        command = re.sub(r"\s#\s.*$|\s{2,}#.*$", "", command)  # a trailing comment
        command = re.sub(r"\$\([^)]*\)", "ARG", command)
        command = re.sub(r"<[^>\s]*>", "X", command).rstrip("`")
        out.append(" ".join(command.split()))
    return out


def _parse(command: str):
    """The parsed namespace of one documented command (argparse's own exit turned into an assertion)."""
    words = shlex.split(command)[1:]
    own = words[: words.index("--")] if "--" in words else words
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(own)
    except SystemExit:
        raise AssertionError(f"{command!r} does not parse: {err.getvalue().strip()}") from None


ALL = [(page.relative_to(ROOT).as_posix(), c) for page in PAGES for c in doc_commands(page.read_text())]
ALL += [(f"nprof {name} --help", c) for name, text in EXAMPLES.items() for c in doc_commands(text)]


def test_the_docs_show_commands() -> None:
    """Guard against a vacuous pass: every subcommand appears, from several pages."""
    assert {c.split()[1] for _, c in ALL} == {"capture", "view", "compile", "analyze"}
    assert len({page for page, _ in ALL}) >= 5


@pytest.mark.parametrize(("page", "command"), ALL)
def test_documented_command_parses(page: str, command: str) -> None:
    args = _parse(command)
    if args.command == "view" and args.output_format != "db":
        formats = GROUP_FORMATS if args.directory and not args.profile else tuple(EXPORTERS)
        assert args.output_format in formats, f"{page}: {command!r}: --output-format not one of {formats}"
    if args.command == "view":
        assert not (args.profile and args.directory), f"{page}: {command!r} gives both -s and -d"


def test_the_extractor_reads_continuations_comments_and_placeholders() -> None:
    text = "```sh\nnprof capture -n a.neff -s p.ntff $(cat x) \\\n  --timing-only   # skip numerics\n```\n"
    text += "$ nprof view -s <file> --output-format summary-text\n"
    assert doc_commands(text) == ["nprof capture -n a.neff -s p.ntff ARG --timing-only"]
    with pytest.raises(AssertionError, match="does not parse"):
        _parse("nprof view -s p.ntff --no-such-flag")


def test_every_subcommand_help_shows_parsing_examples() -> None:
    """Each subcommand's --help ends with its examples, and each example is a command of that subcommand."""
    helps = {name: action for action in build_parser()._subparsers._group_actions for name, action in
             action.choices.items()}  # fmt: skip
    assert set(EXAMPLES) == set(helps)
    for name, text in EXAMPLES.items():
        commands = doc_commands(text)
        assert commands and all(c.split()[1] == name for c in commands), name
        assert helps[name].format_help().rstrip().endswith(text.rstrip().splitlines()[-1].strip()), name
