"""ruff's command-line habits in `gpulint check`: standard input, --statistics, --add-noqa,
--show-fixes, --exit-non-zero-on-fix, --watch, --quiet, colour, the full/grouped/gitlab/junit
formats, git's ignore rules from the repository's top, and one configuration per file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

TRAIN = textwrap.dedent(
    """\
    import torch
    from torch.utils.checkpoint import checkpoint

    scaler = torch.cuda.amp.GradScaler()
    for batch in loader:
        loss = model(batch)
        print(loss.item())  # noqa: E501
        loss.backward()  # the next readback waits for the backward: a finding of its own
        log(\"\"\"step
        %s\"\"\" % loss.item())
    y = checkpoint(block, x)
    """
)
KERNEL = """\
__global__ void k(float* x) { printf("hi"); }
void run(float* x, int n) {
  k<<<(n + 32) / 33, 33>>>(x);
}
"""


def gpulint(cwd: Path, *args: str, stdin: str | None = None, env=None):
    return subprocess.run(
        [sys.executable, "-m", "gpulint", "check", "--no-cache", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "", **(env or {})},
    )


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.gpulint]\n")
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "k.cu").write_text(KERNEL)
    return tmp_path


def codes(out: str) -> list[str]:
    return [line.split(": ", 1)[1].split()[0] for line in out.splitlines() if ": GPU" in line]


# -- standard input ----------------------------------------------------------------------------
def test_stdin_is_linted_as_the_named_file(project):
    on_disk = gpulint(project, "train.py")
    piped = gpulint(project, "-", "--stdin-filename", "train.py", stdin=TRAIN)
    assert piped.returncode == 1
    assert piped.stdout == on_disk.stdout.replace("(1 checked)", "(1 checked)")
    # The name picks the language: the same text named .cu is not Python.
    kernel = gpulint(project, "--stdin-filename", "sub/k.cu", stdin=KERNEL)
    assert sorted(codes(kernel.stdout)) == ["GPU801", "GPU809"]
    assert "sub/k.cu:3:" in kernel.stdout


def test_stdin_honours_the_named_files_configuration(project):
    pkg = project / "pkg"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text('[tool.gpulint]\nignore = ["GPU201"]\n')
    piped = gpulint(project, "-", "--stdin-filename", "pkg/train.py", stdin=TRAIN)
    assert "GPU201" not in codes(piped.stdout) and "GPU101" in codes(piped.stdout)


def test_stdin_fix_prints_the_fixed_file_and_findings_on_stderr(project):
    proc = gpulint(project, "-", "--stdin-filename", "train.py", "--fix", stdin=TRAIN)
    assert 'torch.amp.GradScaler("cuda")' in proc.stdout
    assert proc.stdout.startswith("import torch\n") and "GPU101" not in proc.stdout
    assert "GPU101" in proc.stderr and proc.returncode == 1
    assert (project / "train.py").read_text() == TRAIN  # nothing written


# -- --statistics, --quiet, --show-fixes, --exit-non-zero-on-fix -------------------------------
def test_statistics_counts_per_code(project):
    proc = gpulint(project, "--statistics", ".")
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert rows[0] == ["2", "GPU101", "[ ] host-sync-in-step-loop", "pedantic"]
    assert ["1", "GPU201", "[*] deprecated-amp-api", "pedantic"] in rows
    assert {r[1] for r in rows} == {"GPU101", "GPU201", "GPU501", "GPU801", "GPU809"}
    assert proc.returncode == 1


def test_quiet_prints_findings_and_nothing_else(project):
    loud = gpulint(project, ".").stdout.splitlines()
    quiet = gpulint(project, "-q", ".").stdout.splitlines()
    assert quiet == loud[:-1] and loud[-1].startswith("Found ")
    assert gpulint(project, "--quiet", "k.cu", "--select", "GPU2").stdout == ""


def test_show_fixes_and_exit_non_zero_on_fix(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.gpulint]\n")
    fixable = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
    (tmp_path / "a.py").write_text(fixable)
    proc = gpulint(tmp_path, "--fix", "--show-fixes", ".")
    assert proc.returncode == 0  # nothing left
    assert "Fixed 1 finding:\n- a.py:\n    1 × GPU201 (deprecated-amp-api)" in proc.stdout
    (tmp_path / "a.py").write_text(fixable)
    assert gpulint(tmp_path, "--fix", "--exit-non-zero-on-fix", ".").returncode == 1
    # Nothing to fix: exit 0.
    assert gpulint(tmp_path, "--fix", "--exit-non-zero-on-fix", ".").returncode == 0


# -- --add-noqa --------------------------------------------------------------------------------
def test_add_noqa_silences_everything_keeps_codes_and_is_idempotent(project):
    before = gpulint(project, ".")
    assert before.returncode == 1 and len(codes(before.stdout)) == 6
    added = gpulint(project, "--add-noqa", ".")
    assert added.returncode == 0 and "Added 6 noqa codes in 2 files." in added.stderr
    text = (project / "train.py").read_text()
    assert "print(loss.item())  # noqa: E501, GPU101\n" in text  # E501 kept
    # A finding inside a multi-line string: the comment goes where the string ends.
    assert '    %s""" % loss.item())  # noqa: GPU101\n' in text
    assert "// noqa: GPU809" in (project / "k.cu").read_text()
    after = gpulint(project, ".")
    assert after.returncode == 0 and "All checks passed" in after.stdout
    snapshot = {p: p.read_bytes() for p in project.iterdir() if p.is_file()}
    again = gpulint(project, "--add-noqa", ".")
    assert "Added 0 noqa codes" in again.stderr
    assert {p: p.read_bytes() for p in project.iterdir() if p.is_file()} == snapshot


# -- output formats and colour -----------------------------------------------------------------
def test_full_format_shows_the_line_and_a_caret(project):
    out = gpulint(project, "--output-format", "full", "train.py").stdout
    assert (
        "train.py:4:10: GPU201 `torch.cuda.amp.GradScaler` is deprecated; "
        'use `torch.amp.GradScaler("cuda")`\n'
        "  |\n"
        "4 | scaler = torch.cuda.amp.GradScaler()\n"
        "  |          ^^^^^^^^^^^^^^^^^^^^^^^^^ GPU201\n"
    ) in out
    # --format is the same option.
    assert gpulint(project, "--format", "full", "train.py").stdout == out


def test_concise_is_the_default_and_text_its_alias(project):
    default = gpulint(project, "train.py").stdout
    assert default == gpulint(project, "--format", "text", "train.py").stdout
    assert default == gpulint(project, "--output-format", "concise", "train.py").stdout
    assert default.splitlines()[0].startswith("train.py:4:10: GPU201 ")


def test_grouped_format(project):
    out = gpulint(project, "--output-format", "grouped", ".").stdout
    assert out.startswith("k.cu:\n  1:31 GPU809 ")
    assert "\ntrain.py:\n  4:10  GPU201 [*] `torch.cuda.amp.GradScaler`" in out
    assert "\n  10:" in out


def test_colour_on_request_never_with_no_color(project):
    plain = gpulint(project, "train.py").stdout
    assert "\x1b[" not in plain  # a pipe: no colour
    forced = gpulint(project, "train.py", env={"FORCE_COLOR": "1"}).stdout
    assert "\x1b[1mtrain.py\x1b[0m" in forced
    assert gpulint(project, "--color", "always", "train.py").stdout == forced
    no_color = gpulint(project, "train.py", env={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout
    assert no_color == plain


def test_colour_on_a_terminal(project):
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child: gpulint with a terminal as stdout
        os.chdir(project)
        env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
        os.execve(
            sys.executable, [sys.executable, "-m", "gpulint", "check", "--no-cache", "."], env
        )
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    assert b"\x1b[1mtrain.py\x1b[0m" in out


def test_gitlab_code_quality(project):
    issues = json.loads(gpulint(project, "--output-format", "gitlab", ".").stdout)
    assert len(issues) == 6
    fingerprints = {i["fingerprint"] for i in issues}
    assert len(fingerprints) == 6  # the two identical `.item()` messages differ
    first = next(i for i in issues if i["check_name"] == "GPU201")
    assert first["location"] == {"path": "train.py", "lines": {"begin": 4, "end": 4}}
    assert first["severity"] in {"info", "minor", "major", "critical", "blocker"}
    assert first["description"].startswith("GPU201 ")
    # Stable when unrelated lines move.
    (project / "train.py").write_text("# a new first line\n" + TRAIN)
    moved = json.loads(gpulint(project, "--output-format", "gitlab", ".").stdout)
    assert {i["fingerprint"] for i in moved} == fingerprints


def test_json_lines_rdjson_and_pylint_as_ruff_writes_them(project):
    listed = json.loads(gpulint(project, "--output-format", "json", ".").stdout)["findings"]
    lines = gpulint(project, "--output-format", "json-lines", ".").stdout.splitlines()
    assert [json.loads(line) for line in lines] == listed  # one `json` finding per line
    pylint = gpulint(project, "--output-format", "pylint", ".").stdout.splitlines()
    assert [p.split(": [", 1)[0] for p in pylint] == [f"{f['path']}:{f['line']}" for f in listed]
    assert (
        pylint[0]
        == f"{listed[0]['path']}:{listed[0]['line']}: [{listed[0]['code']}] "
        + (listed[0]["message"])
    )
    rd = json.loads(gpulint(project, "--output-format", "rdjson", ".").stdout)
    assert rd["source"]["name"] == "gpulint" and len(rd["diagnostics"]) == len(listed)
    d = next(d for d in rd["diagnostics"] if d["code"]["value"] == "GPU201")
    assert d["location"]["path"] == "train.py"
    assert d["location"]["range"]["start"] == {"line": 4, "column": 10}
    assert d["code"]["url"].endswith("/docs/rules/GPU201.md") and d["severity"] == "WARNING"
    # The fix's edits as suggestions, one of them rewriting line 4 to `torch.amp`.
    assert any(
        s["range"]["start"]["line"] == 4 and "torch.amp" in s["text"] for s in d["suggestions"]
    ), d["suggestions"]


def test_rdjson_columns_are_utf8_bytes(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.gpulint]\n")
    (tmp_path / "t.py").write_text("import torch\né = 1; s = torch.cuda.amp.GradScaler()\n")
    rd = json.loads(gpulint(tmp_path, "--output-format", "rdjson", ".").stdout)
    (d,) = rd["diagnostics"]
    concise = gpulint(tmp_path, ".").stdout  # t.py:2:12 (code points); é is two bytes
    assert "t.py:2:12: GPU201" in concise
    assert d["location"]["range"]["start"] == {"line": 2, "column": 13}


def test_junit(project):
    root = ET.fromstring(gpulint(project, "--output-format", "junit", ".").stdout)
    assert root.tag == "testsuites" and root.get("failures") == "6"
    suites = {s.get("name"): s for s in root}
    assert set(suites) == {"k.cu", "train.py"}
    cases = suites["train.py"].findall("testcase")
    assert [c.get("name") for c in cases][0] == "gpulint.GPU201"
    assert cases[0].get("line") == "4" and cases[0].find("failure") is not None
    clean = ET.fromstring(gpulint(project, "--output-format", "junit", "--select", "GPU7").stdout)
    assert clean.get("failures") == "0"


# -- --watch -----------------------------------------------------------------------------------
def _lines_until(proc, prefix: str, timeout_s: float) -> list[str]:
    """The process's output lines up to the first that starts with `prefix` (or all it printed
    within the time, which the caller's assertion then shows)."""
    import queue
    import threading

    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            seen.append(lines.get(timeout=max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            break
        if seen[-1].startswith(prefix):
            break
    return seen or [""]


# On file-system events (watchfiles), and polling where watchfiles cannot be imported.
WATCH_WITHOUT_WATCHFILES = (
    "import sys; sys.modules['watchfiles'] = None; from gpulint.cli import main; sys.exit(main())"
)


@pytest.mark.parametrize("how", ["events", "polling"])
def test_watch_checks_again_when_a_file_changes(tmp_path, how):
    (tmp_path / "pyproject.toml").write_text("[tool.gpulint]\n")
    path = tmp_path / "a.py"
    path.write_text("import torch\n")
    start = ["-m", "gpulint"] if how == "events" else ["-c", WATCH_WITHOUT_WATCHFILES]
    proc = subprocess.Popen(
        [sys.executable, *start, "check", "--no-cache", "--watch", "."],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # A missed file event must fail the test, not hang the suite: after 120 s the watcher is
    # killed, its stdout closes and the pending readline returns "".
    watchdog = threading.Timer(120, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout.readline().startswith("All checks passed")
        path.write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
        deadline = time.monotonic() + 30
        line = proc.stdout.readline()
        assert time.monotonic() < deadline
        assert line.startswith("a.py:2:10: GPU201"), line
        (tmp_path / "b.py").write_text("import torch\ns = torch.cuda.amp.GradScaler()\n")
        lines = [proc.stdout.readline() for _ in range(3)]
        assert any(x.startswith("b.py:2:5: GPU201") for x in lines), lines
        # A configuration change is a change too: GPU201 ignored, nothing left to report.
        # (Creating b.py may have made two checks: read up to the line that says so.)
        (tmp_path / "pyproject.toml").write_text('[tool.gpulint]\nignore = ["GPU201"]\n')
        lines = _lines_until(proc, "All checks passed", 30)
        assert lines[-1].startswith("All checks passed"), lines
        assert proc.poll() is None  # still watching
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()


# -- file discovery ----------------------------------------------------------------------------
def test_gitignore_from_the_repository_top_and_info_exclude(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git" / "info").mkdir(parents=True)
    (repo / ".git" / "info" / "exclude").write_text("scratch_*.py\n")
    (repo / ".gitignore").write_text("generated/\n")
    pkg = repo / "services" / "trainer"
    (pkg / "generated").mkdir(parents=True)
    (pkg / "src").mkdir()
    (pkg / "pyproject.toml").write_text("[tool.gpulint]\n")
    bad = "import torch\ns = torch.cuda.amp.GradScaler()\n"
    for rel in ("generated/gen.py", "scratch_me.py", "src/scratch_x.py", "src/real.py"):
        (pkg / rel).write_text(bad)
    # Started below the .gitignore and the exclude file: both still apply.
    out = gpulint(pkg, ".").stdout
    assert codes(out) == ["GPU201"] and "src/real.py:2:5" in out
    out = gpulint(pkg / "src", ".").stdout
    assert codes(out) == ["GPU201"] and "real.py:2:5" in out
    # A file named on the command line is checked even when ignored, as ruff does.
    assert codes(gpulint(pkg, "generated/gen.py").stdout) == ["GPU201"]
    assert len(codes(gpulint(pkg, "--no-gitignore", ".").stdout)) == 4


# -- one configuration per file -----------------------------------------------------------------
def _monorepo(root: Path) -> None:
    bad = "import torch\ns = torch.cuda.amp.GradScaler()\nfrom torch.utils.checkpoint import checkpoint\ny = checkpoint(f, x)\n"
    (root / ".git").mkdir()
    for name, table in (
        ("alpha", 'ignore = ["GPU201"]\nexclude = ["legacy"]'),
        ("beta", 'ignore = ["GPU501"]'),
    ):
        pkg = root / "packages" / name
        (pkg / "legacy").mkdir(parents=True)
        (pkg / "pyproject.toml").write_text(f"[tool.gpulint]\n{table}\n")
        (pkg / "train.py").write_text(bad)
        (pkg / "legacy" / "old.py").write_text(bad)
    (root / "tool.py").write_text(bad)  # no configuration above it: the defaults


def test_monorepo_each_package_its_own_configuration_whatever_the_order(tmp_path):
    _monorepo(tmp_path)
    a, b = "packages/alpha/train.py", "packages/beta/train.py"
    outputs = {
        gpulint(tmp_path, *order, "--force-exclude", "--format", "json").stdout
        for order in ([a, b, "tool.py"], [b, a, "tool.py"], ["tool.py", b, a])
    }
    assert len(outputs) == 1
    found = {(f["path"], f["code"]) for f in json.loads(outputs.pop())["findings"]}
    assert found == {
        (a, "GPU501"),
        (b, "GPU201"),
        ("tool.py", "GPU201"),
        ("tool.py", "GPU501"),
    }
    # A whole-tree run agrees, and alpha's `exclude` keeps its legacy folder out.
    tree = json.loads(gpulint(tmp_path, ".", "--format", "json").stdout)["findings"]
    found_tree = {(f["path"], f["code"]) for f in tree}
    assert found_tree == found | {("packages/beta/legacy/old.py", "GPU201")}


def test_monorepo_flake8_plugin_and_cli_agree(tmp_path):
    pytest.importorskip("flake8")
    _monorepo(tmp_path)
    cli = gpulint(tmp_path, "packages", "tool.py", "--format", "json").stdout
    cli_found = {(f["path"], f["line"], f["code"]) for f in json.loads(cli)["findings"]}
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "GPU", "packages", "tool.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    flake = set()
    for line in proc.stdout.splitlines():
        path, row, _col, rest = line.split(":", 3)
        flake.add((path.removeprefix("./"), int(row), rest.split()[0]))
    # flake8 walks alpha/legacy (it does not read .gitignore; `exclude` keeps it quiet).
    assert flake == cli_found


# -- ruff's configuration flags ----------------------------------------------------------------
def test_config_key_value_overrides_the_file_and_isolated_reads_none(project):
    (project / "pyproject.toml").write_text('[tool.gpulint]\nignore = ["GPU501"]\n')
    assert "GPU501" not in codes(gpulint(project, ".").stdout)
    assert "GPU201" in codes(gpulint(project, ".").stdout)
    # inline TOML, as ruff's `--config "key = value"`: over the file's settings
    out = gpulint(project, "--config", 'extend-ignore = ["GPU201"]', ".").stdout
    assert "GPU201" not in codes(out) and "GPU501" not in codes(out)
    out = gpulint(project, "--config", 'ignore = ["GPU201"]', "--config", "jobs = 1", ".")
    assert "GPU201" not in codes(out.stdout) and "GPU501" in codes(out.stdout)
    # a flag of its own wins over an inline --config of the same setting
    out = gpulint(project, "--config", 'ignore = ["GPU201"]', "--ignore", "GPU501", ".").stdout
    assert "GPU201" in codes(out) and "GPU501" not in codes(out)
    # --isolated: the file is not read
    assert "GPU501" in codes(gpulint(project, "--isolated", ".").stdout)
    # a file and a setting together
    other = project / "other.toml"
    other.write_text('[tool.gpulint]\nselect = ["GPU8"]\n')
    out = gpulint(project, "--config", str(other), "--config", 'ignore = ["GPU801"]', ".").stdout
    assert set(codes(out)) == {"GPU809"}, out
    for bad, said in [
        ("nofile.toml", "no such file"),
        ("select = [", "not a file, nor a TOML"),
        ("bogus = 1", "unknown key 'bogus'"),
    ]:
        proc = gpulint(project, "--config", bad, ".")
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    proc = gpulint(project, "--isolated", "--config", str(other), ".")
    assert proc.returncode == 2 and "--isolated" in proc.stderr


def test_show_files_and_show_settings(project):
    (project / "pyproject.toml").write_text(
        '[tool.gpulint]\nextend-exclude = ["skip"]\nignore = ["GPU501"]\n'
    )
    (project / "skip").mkdir()
    (project / "skip" / "x.py").write_text("x = 1\n")
    proc = gpulint(project, "--show-files", ".")
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == ["k.cu", "pyproject.toml", "train.py"]
    proc = gpulint(project, "--show-settings", "--config", 'targets = ["H100"]', "train.py")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0] == "Resolved settings for: train.py"
    assert lines[1] == f"Settings path: {project / 'pyproject.toml'}"
    assert 'ignore = ["GPU501"]' in lines and 'targets = ["H100"]' in lines
    enabled = json.loads(next(x for x in lines if x.startswith("enabled rules")).split(" = ")[1])
    assert "GPU201" in enabled and "GPU501" not in enabled


def test_unsafe_fixes_is_accepted_and_fixes_nothing_more(project):
    """ruff's --unsafe-fixes: gpulint's fixes are all safe (verified), so the same fixes."""
    safe = gpulint(project, "--diff", ".").stdout
    assert safe  # there is something to fix
    assert gpulint(project, "--diff", "--unsafe-fixes", ".").stdout == safe
    assert gpulint(project, "--diff", "--no-unsafe-fixes", ".").stdout == safe
