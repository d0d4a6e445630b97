"""`python` at the head of a user's command means nprof's own interpreter."""

from __future__ import annotations

import sys

import pytest

from nprof.commandline import is_python, with_own_python


@pytest.mark.parametrize("word", ["python", "python3", "python3.11", "/usr/bin/python3", "venv/bin/python"])
def test_interpreters_are_recognised(word: str) -> None:
    assert is_python(word)
    assert with_own_python([word, "train.py", "--steps", "1"]) == [sys.executable, "train.py", "--steps", "1"]


@pytest.mark.parametrize("word", ["pythonista", "train.py", "bash"])  # torchrun: tests/compiler/test_distributed.py
def test_other_commands_run_as_given(word: str) -> None:
    assert not is_python(word)
    assert with_own_python([word, "x"]) == [word, "x"]
