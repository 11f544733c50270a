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


def _stubborn(*args, **kwargs):
    """A check that swallows everything an in-process alarm could raise, and never ends."""
    import time

    while True:
        try:
            time.sleep(60)
        except BaseException:  # noqa: BLE001, S110 - the point of the test
            pass


def test_the_budget_is_enforced_from_outside_the_worker(tmp_path, monkeypatch):
    import time

    from gpulint.engine import Linter
    from gpulint.parallel import lint_many
    from gpulint.supervisor import lint_bytes_budgeted
    from gpulint.testing import example_config

    files = []
    for name in ("a.py", "stuck.py", "b.py"):
        (tmp_path / name).write_text("import torch\ns = torch.cuda.amp.GradScaler()\n")
        files.append(tmp_path / name)
    linter = Linter(example_config(root=tmp_path))
    real = linter.lint_bytes

    def lint_bytes(shown, *args, **kwargs):
        if shown.endswith("stuck.py"):
            _stubborn()
        return real(shown, *args, **kwargs)

    monkeypatch.setattr(linter, "lint_bytes", lint_bytes)
    start = time.monotonic()
    results = lint_many(linter, files, jobs=2, budget=1.5)
    assert time.monotonic() - start < 15
    codes = {Path(r.path).name: [f.code for f in r.findings] for r in results}
    assert codes == {"a.py": ["GPU201"], "stuck.py": ["GPU000"], "b.py": ["GPU201"]}
    # The flake8 plugin's and the language server's path: the same budget, the same GPU000.
    start = time.monotonic()
    findings = lint_bytes_budgeted(linter, "stuck.py", b"import torch\n", budget=1.0)
    assert time.monotonic() - start < 10
    assert [f.code for f in findings] == ["GPU000"] and "over 1 s" in findings[0].message
    # ...and the worker that replaced the killed one still lints.
    good = lint_bytes_budgeted(linter, "ok.py", b"import torch\ns = torch.cuda.amp.GradScaler()\n")
    assert [f.code for f in good] == ["GPU201"]


def test_a_memory_bomb_ends_in_its_worker():
    from gpulint.supervisor import Supervisor

    with Supervisor(1) as supervisor:
        outcome = supervisor.call(bytearray, 64 * 1024**3, budget=30)
    assert outcome.status in ("error", "crash")
    assert outcome.status == "crash" or "memory" in outcome.value.lower()


# -- linear-time text analysis -----------------------------------------------------------------
LINE = 100_000
ADVERSARIAL_LINES = {
    "backticks": "`" * LINE,
    "backtick-pairs": "`a" * (LINE // 2),
    "digits": "1" * LINE,
    "ratios": "2x " * (LINE // 3),
    "x": "x" * LINE,
    "percent": "%" * LINE,
    "percent-claims": "5% faster " * (LINE // 10),
    "tags": "<a" * (LINE // 2),
    "anchors": '<a href="' * (LINE // 9),
    "quotes": '"' * LINE,
    "quote-pairs": '"a' * (LINE // 2),
    "brackets": "[" * LINE,
    "links": "[a](" * (LINE // 4),
    "roles": ":a" * (LINE // 2),
    "table-rule": "|--" + " " * LINE + "x",
    "autolinks": "<http://" * (LINE // 8),
    "assignments": "".join(f"A{i}=1;" for i in range(LINE // 8)),
    "mixed": '2.5x faster `a` <b> "q" 10 ms -> 5 ms ' * (LINE // 40),
}
TEXT_FILES = [
    "README.md",
    "guide.rst",
    "run.sh",
    "launch.yaml",
    ".env",
    "levers.toml",
    "m.py",
    "k.cu",
]


def _adversarial(name: str, line: str) -> bytes:
    if name == "m.py":  # a docstring and a string: the docstring claims path and the rules
        safe = line.replace('"', "'").replace("\\", "/")
        text = f'import torch\n"""{safe}"""\nx = "{safe}"\n'
    elif name == "k.cu":
        text = f"__global__ void k() {{}}\n// {line}\nint f() {{ return 0; }}\n/* {line} */\n"
    elif name == "launch.yaml":
        text = "env:\n  A: '" + line.replace("'", "''") + "'\nrun: " + line + "\n"
    else:
        text = line
    # The prefilter's words first, so every parser and rule sees the line.
    return f"torch cuda triton 2x faster NCCL_DEBUG=1 __global__\n{text}\n".encode()


@pytest.mark.parametrize("name", TEXT_FILES)
def test_each_text_front_end_is_linear_on_adversarial_lines(name):
    """Each front-end and every rule on 100 KB lines built to make a backtracking pattern or a
    per-match rescan blow up: under a second of CPU each (minutes before, for several)."""
    import time

    from gpulint.engine import Linter
    from gpulint.testing import example_config

    linter = Linter(example_config(("sm_90",), root=Path.cwd()))
    slow = {}
    for kind, line in ADVERSARIAL_LINES.items():
        start = time.process_time()  # CPU time: the machine may be shared
        findings, _ = linter.lint_bytes(name, _adversarial(name, line), prefilter=False)
        spent = time.process_time() - start
        if spent >= 1.0:
            slow[kind] = round(spent, 2)
        assert all(f.code != "GPU000" or "internal error" not in f.message for f in findings)
    assert not slow, f"{name}: over a second on {slow}"
