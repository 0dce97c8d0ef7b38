"""Every ```python block of docs/python.md runs as it is, each in a fresh interpreter."""

import pathlib
import re

import pytest

from conftest import run_script

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def test_the_chapter_has_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index):
    r = run_script(BLOCKS[index], timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stderr == b""
