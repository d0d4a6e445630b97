"""Progress reporting for long work: a rich bar on a terminal, silence when piped.

Library code calls `progress(total, description)` and `.advance(n)`; the bar
renders on stderr only when stderr is a terminal and NPROF_NO_PROGRESS is unset,
so library functions stay quiet in tests, pipes and CI.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID


class Progress(Protocol):
    def advance(self, n: int = 1) -> None: ...


class _Silent:
    def advance(self, n: int = 1) -> None:
        return None


class _RichBar:
    def __init__(self, bar: RichProgress, task: TaskID) -> None:
        self._bar = bar
        self._task = task

    def advance(self, n: int = 1) -> None:
        self._bar.advance(self._task, n)


def interactive() -> bool:
    """True when a progress bar should be drawn (stderr is a terminal)."""
    return sys.stderr.isatty() and not os.environ.get("NPROF_NO_PROGRESS")


@contextmanager
def progress(total: int | None, description: str) -> Iterator[Progress]:
    """Yield an object with `.advance(n)`; draws a bar only on an interactive terminal."""
    if not interactive():
        yield _Silent()
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        yield _RichBar(bar, bar.add_task(description, total=total))
