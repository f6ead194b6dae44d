"""Fixtures for the bench tests: a small workspace on disk and the tiny model."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

SHAPES = textwrap.dedent('''\
    """Shapes with areas."""


    class Square:
        def __init__(self, side):
            self.side = side

        def area(self):
            result = self.side * self.side
            return result

        def perimeter(self):
            result = 4 * self.side
            return result


    class Rectangle:
        def __init__(self, width, height):
            self.width = width
            self.height = height

        def area(self):
            result = self.width * self.height
            return result

        def perimeter(self):
            result = 2 * (self.width + self.height)
            return result


    def describe(shape):
        """Say what a shape is, in words, with its area and perimeter.

        The description is meant for people reading a log, not for machines,
        so it favours plain sentences over any particular structured format.
        """
        name = type(shape).__name__.lower()
        text = f"a {name} of area {shape.area()} and perimeter {shape.perimeter()}"
        return text
''')

UTIL = textwrap.dedent('''\
    def clamp(value, low, high):
        if value < low:
            return low
        if value > high:
            return high
        return value


    def lerp(a, b, t):
        t = clamp(t, 0.0, 1.0)
        return a + (b - a) * t
''')


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "shapes.py").write_text(SHAPES)
    (root / "pkg" / "util.py").write_text(UTIL)
    (root / "README.md").write_text("not python\n")
    return root


@pytest.fixture(scope="session")
def tiny_runtime():
    from ngramd.daemon.runtime.loading import load_runtime

    return load_runtime("tiny", "cpu")
