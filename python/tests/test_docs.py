"""Every ```python block of docs/python.md runs as it is, each in a fresh interpreter, from
a file of its own (as a user's script runs: multiprocessing's spawn and forkserver children
import the functions of a script's `__main__` from its file)."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def test_the_chapter_has_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index, tmp_path):
    script = tmp_path / f"example_{index}.py"
    script.write_text(BLOCKS[index])
    r = subprocess.run(
        [sys.executable, str(script)], capture_output=True, timeout=120, env=dict(os.environ)
    )
    assert r.returncode == 0, r.stderr.decode()
    assert r.stderr == b""
