"""Which loop bodies `nprof.nki.replay_affine.affine` finds affine in the loop variable, and that a loop it
refuses keeps the four logged iterations (a non-affine body then falls back to the plain trace, exactly)."""

from __future__ import annotations

import ast
import textwrap

import pytest

import nprof.nki.language as nl
from nprof.nki import replay
from nprof.nki.kernel import Kernel
from nprof.nki.replay_affine import affine
from nprof.nki.typing import tensor

T = 128


def _affine(source: str) -> bool:
    tree = ast.parse(textwrap.dedent(source))
    helpers = {n.name: (n, {}) for n in tree.body if isinstance(n, ast.FunctionDef)}
    loop = next(n for n in tree.body if isinstance(n, ast.For))
    return affine(loop, helpers)


@pytest.mark.parametrize("body, expected", [
    ("x = nl.load(a[i * 128 : i * 128 + 128])", True),
    ("c = (m * 2 + i) * 128\nnl.store(o[c : c + 8], value=t)", True),
    ("x = nl.load(a[i * i : i * i + 8])", False),
    ("c = i * 4\nx = nl.load(a[c * i : c * i + 8])", False),
    ("c = i * 4\nc = 3\nx = nl.load(a[c * i : c * i + 8])", False),  # (a name keeps its greatest degree)
    ("for k in nl.affine_range(K // 128):\n    x = nl.load(a[k * i : k * i + 8])", True),
    ("for k in nl.affine_range(i):\n    x = nl.load(a[k * i : k * i + 8])", False),  # (k's range moves with i)
    ("for k in nl.affine_range(i, i + 4):\n    x = nl.load(a[k * i : k * i + 8])", False),
    ("for k in nl.affine_range(i * i):\n    pass", False),
    ("x = nl.load(a[i // 4 : i // 4 + 8])", False),
    ("x = nl.load(a[K // 4 * i : K // 4 * i + 8])", True),
    ("x = nl.load(a[-i : -i + 8])", True),
    ("x = nl.load(a[rows(i)])", True),
    ("x = nl.load(a[rows(i) * i])", False),
    ("x = nl.load(a[sq(i)])", False),
    ("x = nl.load(a[closed(2)])", False),  # (a helper reading the loop variable as a closure)
    ("t = nl.load(a[i * 8 : i * 8 + 8])\nt *= i", False),
    ("t = nl.load(a[i * 8 : i * 8 + 8])\nt += i", True),
    ("x = nl.load(a[(lambda: i)()])", False),
])  # fmt: skip
def test_degrees(body: str, expected: bool) -> None:
    helpers = """
        def rows(r):
            first = r * 128
            return slice(first, first + 128)

        def sq(r):
            return slice(r * r, r * r + 1)

        def closed(j):
            return slice(i * i + j, i * i + j + 1)
    """
    source = textwrap.dedent(helpers) + "for i in nl.affine_range(8):\n" + textwrap.indent(body, "    ")
    assert _affine(source) is expected


def closure_square(x):
    """A kernel helper reading the loop variable from the kernel's scope, squared: pure, but not affine."""
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    r = 0

    def cols(j):
        return slice(r * r + j, r * r + j + 8)

    for r in nl.affine_range(10):  # noqa: B007 (read by cols)
        nl.store(out[0:T, 0:8], value=nl.load(x[0:T, cols(0)]))
    return out


def test_a_body_found_not_affine_is_logged_four_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """Logged twice, r * r (0, 1) would look affine and replay wrong offsets; logged four times it falls back,
    and the Program is the plain trace's."""
    programs = []
    for enabled in (False, True):
        monkeypatch.setattr(replay, "ENABLED", enabled)
        before = replay.STATS["iterations"]
        programs.append(Kernel(closure_square).trace(tensor[[T, 96], nl.bfloat16]).program)
    assert replay.STATS["iterations"] == before
    assert tuple(programs[0].instructions) == tuple(programs[1].instructions)
