"""How nprof runs the user's `-- python script.py` commands.

`nprof capture -- ...` and `nprof compile -- ...` run the user's script in a
child process. A leading `python` (`python3`, `python3.11`, or a path to one)
means *nprof's own interpreter* (`sys.executable`): that is the one with nprof
and torch installed, whatever `python` happens to be first on PATH. A program not on PATH that is installed
beside that interpreter (`torchrun` in nprof's virtual environment) runs from there.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

_PYTHON = re.compile(r"^python(\d(\.\d+)?)?(\.exe)?$")


def is_python(word: str) -> bool:
    """True when `word` names a Python interpreter (`python`, `python3.11`, `/usr/bin/python3`...)."""
    return bool(_PYTHON.match(Path(word).name))


def with_own_python(command: list[str]) -> list[str]:
    """`command` with a leading Python interpreter replaced by nprof's own, and a program that is not on PATH
    but installed beside that interpreter (``torchrun`` in nprof's venv) given by its path."""
    if command and is_python(command[0]):
        return [sys.executable, *command[1:]]
    if command and "/" not in command[0] and shutil.which(command[0]) is None:
        beside = Path(sys.executable).parent / command[0]
        if beside.is_file() and os.access(beside, os.X_OK):
            return [str(beside), *command[1:]]
    return list(command)
