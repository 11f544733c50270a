"""A hostile repository: files that are not what their names say, links out of the tree,
bombs and floods. gpulint reads none of them unsafely, reports each as its GPU000 and lints
the rest (issue 25)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpulint.safeio import Unreadable, escape, read_bytes


def test_safe_read_refuses_what_is_not_a_regular_file_inside_the_roots(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "ok.py").write_bytes(b"x = 1\n")
    os.mkfifo(root / "fifo.py")
    (root / "zero.py").symlink_to("/dev/zero")
    (root / "loop.py").symlink_to(root / "loop.py")
    (tmp_path / "secret.py").write_bytes(b"token\n")
    (root / "out.py").symlink_to(tmp_path / "secret.py")
    (root / "in.py").symlink_to(root / "ok.py")
    (root / "to_fifo.py").symlink_to(root / "fifo.py")
    (root / "big.py").write_bytes(b"#" * 2000)
    roots = [root]
    assert read_bytes(root / "ok.py", 100, roots) == b"x = 1\n"
    assert read_bytes(root / "in.py", 100, roots) == b"x = 1\n"
    for name, why in [
        ("fifo.py", "FIFO"),  # would block forever
        ("zero.py", "outside the project"),  # /dev/zero would never end
        ("to_fifo.py", "FIFO"),
        ("loop.py", "loop"),
        ("out.py", "outside the project"),
        ("big.py", "too large"),
        ("missing.py", "No such file"),
    ]:
        with pytest.raises(Unreadable, match=why):
            read_bytes(root / name, 1000, roots)
    with pytest.raises(Unreadable, match="character device"):
        read_bytes("/dev/zero", 1000)  # no roots: any target, but still only a regular file
    # A path outside the roots that the user named is read as given.
    assert read_bytes(tmp_path / "secret.py", 100, roots) == b"token\n"


def test_escape_keeps_one_line_and_no_terminal_control():
    assert escape("a\x1b[31mb\nc\u202ed\udcff") == "a\\x1b[31mb\\nc\\u202ed\\udcff"
    assert escape("plain é µs →") == "plain é µs →"


def test_python_dash_m_ignores_the_working_folder(tmp_path):
    import subprocess
    import sys

    (tmp_path / "json.py").write_text("raise SystemExit('the analysed tree was imported')\n")
    done = subprocess.run(
        [sys.executable, "-m", "gpulint", "rules", "--format", "json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert Path(tmp_path / "json.py").exists()
