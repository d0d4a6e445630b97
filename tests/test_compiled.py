"""`nprof.compiled.load_compiled`: a compiled core is used from its size threshold, or once loaded."""

from __future__ import annotations

import importlib.util

import pytest

from nprof.compiled import load_compiled


def test_small_inputs_skip_an_unloaded_core_and_large_ones_load_it() -> None:
    assert load_compiled("json", 5, 10, loaded="no_such_module_xyz") is None
    if importlib.util.find_spec("numba") is None:
        pytest.skip("numba is not installed: every core is refused")
    assert load_compiled("json", 10, 10, loaded="no_such_module_xyz").__name__ == "json"


def test_an_already_loaded_module_makes_a_small_input_worth_it() -> None:
    if importlib.util.find_spec("numba") is None:
        pytest.skip("numba is not installed: every core is refused")
    assert load_compiled("json", 1, 10, loaded="sys").__name__ == "json"  # sys is always imported
