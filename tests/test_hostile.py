"""A hostile repository: files that are not what their names say, links out of the tree,
bombs and floods. gpulint reads none of them unsafely, reports each as its GPU000 and lints
the rest (issue 25)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpulint.safeio import Unreadable, escape, read_bytes
from gpulint.testing import assert_no_internal_error


def test_safe_read_refuses_what_is_not_a_regular_file_inside_the_roots(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "ok.py").write_bytes(b"x = 1\n")
    os.mkfifo(root / "fifo.py")
    os.mkfifo(root / ".git")  # a worktree's .git is a file naming the git folder: read it
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
        assert_no_internal_error(findings, kind)
    assert not slow, f"{name}: over a second on {slow}"


# -- a hostile repository, end to end ----------------------------------------------------------
GOOD_PY = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
BOMB_YAML = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10)
)


def build_hostile_tree(root: Path) -> dict[str, str]:
    """A repository written by an attacker, next to files that deserve their findings. Returns
    the bad files, each with a word its GPU000 must say."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(
        "[tool.gpulint]\njobs = 100000\n"  # a fork storm, if taken at its word
    )
    (root / ".gitignore").write_text("bin\\\n\\\n!\n*.log\n")  # lines git rejects
    (root / "good.py").write_text(GOOD_PY)
    (root / "levers.toml").write_text('[[levers]]\nname = 5\nfact = "x"\n')  # off-schema
    (root / "good.md").write_text("Our kernel is 3x faster.\n")
    (root / "run.sh").write_text("export NCCL_DEBUG=INFO\ntorchrun train.py\n")
    # Escape sequences in a name and in the text a message quotes; a newline in a name.
    (root / "esc\x1b[31m\nname.py").write_text(GOOD_PY)
    (root / ".env").write_text("NCCL_DEBUG=INFO\x1b]0;owned\x07\n")
    (root / os.fsdecode(b"latin1-\xe9.py")).write_text(GOOD_PY)  # a name that is not UTF-8
    os.mkfifo(root / "fifo.py")
    os.mkfifo(root / "fifo.md")
    (root / "zero.py").symlink_to("/dev/zero")
    (root / "passwd.py").symlink_to("/etc/passwd")
    (root / "loop.py").symlink_to(root / "loop.py")
    (root / "sub").mkdir()
    (root / "sub" / "up").symlink_to("..")  # a folder loop
    (root / "sub" / "machine").symlink_to("/")  # the whole machine
    os.mkfifo(root / "sub" / ".gitignore")
    with open(root / "sparse.py", "wb") as f:  # 8 GB that takes no disk
        f.truncate(8 * 1024**3)
    (root / "bomb.yaml").write_text(BOMB_YAML + "env:\n  NCCL_DEBUG: INFO\n")
    (root / "deep.py").write_text(GOOD_PY + "x = " + "(" * 5000 + ")" * 5000 + "\n")
    (root / "odd").mkdir()
    (root / "odd" / "pyproject.toml").write_text("tool = 1\n")
    (root / "escape").mkdir()  # a package whose configuration reaches out of the project
    (root / "escape" / "pyproject.toml").write_text('[tool.gpulint]\ncache-dir = "/tmp/x"\n')
    (root / "escape" / "good.py").write_text(GOOD_PY)
    (root / "nested").mkdir()
    (root / "nested" / "pyproject.toml").write_text(
        "# levers\na = " + "[" * 50_000 + "]" * 50_000 + "\n"
    )
    evidence = root / ".gpulint" / "evidence"
    evidence.mkdir(parents=True)
    (evidence / "nested.json").write_text("[" * 100_000 + "]" * 100_000)
    (evidence / "zero-median.json").write_text(
        '{"schema": "gpulint.evidence/1", "bench": "sync", "variants": '
        '[{"status": "ok", "median": 0}]}'
    )
    os.mkfifo(evidence / "fifo.json")
    (evidence / "dev.json").symlink_to("/dev/zero")
    return {
        "fifo.py": "FIFO",
        "fifo.md": "FIFO",
        "zero.py": "outside the project",
        "passwd.py": "outside the project",
        "loop.py": "loop",
        "sub/machine": "outside the project",
        "sub/.gitignore": "FIFO",
        ".gitignore": "invalid pattern",
        "levers.toml": "lever registry not used",
        "sparse.py": "too large",
        "deep.py": "nested",
        "nested/pyproject.toml": "nested",
        "escape/pyproject.toml": "configuration not used",
        ".gpulint/evidence/nested.json": "evidence record",
        ".gpulint/evidence/zero-median.json": "evidence record",
        ".gpulint/evidence/fifo.json": "FIFO",
        ".gpulint/evidence/dev.json": "evidence record",
    }


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def run_bounded(argv: list[str], cwd: Path, limit_s: float = 120.0) -> dict:
    """Run a command, kill it at `limit_s`; its wall time, peak memory (max RSS of it and its
    workers), the most processes it had at once, its exit code and output."""
    import subprocess
    import threading
    import time

    out, err = cwd.parent / "out.txt", cwd.parent / "err.txt"
    start = time.monotonic()
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=o, stderr=e, start_new_session=True)
    peak = [0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], len(_descendants(proc.pid)))
            if time.monotonic() - start > limit_s:
                os.killpg(proc.pid, 9)
            done.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    watcher.join()
    return {
        "seconds": time.monotonic() - start,
        "max_rss_mb": usage.ru_maxrss / 1024,
        "processes": peak[0],
        "code": proc.returncode,
        "stdout": out.read_text(errors="replace"),
        "stderr": err.read_text(errors="replace"),
    }


def _report_numbers(what: str, run: dict) -> None:
    print(
        f"\n[hostile tree] {what}: {run['seconds']:.1f} s, max RSS {run['max_rss_mb']:.0f} MB, "
        f"{run['processes']} processes at most, exit {run['code']}"
    )


def test_gpulint_check_finishes_on_a_hostile_repository(tmp_path):
    import json
    import sys

    repo = tmp_path / "repo"
    bad = build_hostile_tree(repo)
    cmd = [sys.executable, "-m", "gpulint", "check", "--format", "json", "."]
    for attempt in ("cold", "cached"):  # the cached run looks files up before reading them
        run = run_bounded(cmd, repo)
        _report_numbers(f"gpulint check ({attempt})", run)
        assert run["code"] == 1, run["stderr"]
        assert "Traceback" not in run["stderr"] + run["stdout"]
        assert run["seconds"] < 90 and run["max_rss_mb"] < 1500
        assert run["processes"] <= len(os.sched_getaffinity(0)) + 1  # jobs = 100000, capped
        report = json.loads(run["stdout"])
        findings = report["findings"]
        # gpulint failed nowhere (GPU001 would also make the exit status 2)
        assert not [d for d in report["diagnostics"] if d["code"] == "GPU001"], report
        by_path: dict[str, list] = {}
        for f in findings:
            by_path.setdefault(f["path"], []).append(f)
        for path, word in bad.items():
            messages = [f["message"] for f in by_path.get(path, []) if f["code"] == "GPU000"]
            assert any(word in m for m in messages), (path, by_path.get(path))
        # The rest is linted, the folder loop and the link to / not walked.
        assert [f["code"] for f in by_path["good.py"]] == ["GPU201"]
        assert [f["code"] for f in by_path["escape/good.py"]] == ["GPU201"]
        assert [f["code"] for f in by_path[os.fsdecode(b"latin1-\xe9.py")]] == ["GPU201"]
        assert [f["code"] for f in by_path["esc\x1b[31m\nname.py"]] == ["GPU201"]
        assert any(f["code"] == "GPU903" for f in by_path["bomb.yaml"])
        assert any(f["code"] == "GPU903" for f in by_path["run.sh"])
        assert not any(p.startswith(("sub/up/", "sub/machine/")) for p in by_path)
    text = run_bounded([*cmd[:4], "--format", "text", "."], repo)
    assert "\x1b" not in text["stdout"] and "\\x1b[31m\\nname.py:2:" in text["stdout"]
    assert "\x07" not in text["stdout"]
    github = run_bounded([*cmd[:4], "--format", "github", "."], repo)
    assert "\x1b" not in github["stdout"] and github["code"] == 1
    sarif = run_bounded([*cmd[:4], "--format", "sarif", "-o", "out/r.sarif", "."], repo)
    assert sarif["code"] == 1, sarif["stderr"]  # reads the files it quotes; -o makes out/
    assert json.loads((repo / "out" / "r.sarif").read_text())["runs"][0]["results"]


def test_flake8_finishes_on_a_hostile_repository(tmp_path):
    import sys

    repo = tmp_path / "repo"
    build_hostile_tree(repo)
    # flake8 opens and reads every *.py itself before any plugin runs: a FIFO or /dev/zero
    # named *.py hangs flake8 whatever its plugins do, so those are left to `gpulint check`.
    # flake8's own formatter also fails on a file name that is not UTF-8 (it encodes the line
    # strictly), after the plugin reported it.
    own_reads = "fifo.py,zero.py,sparse.py,latin1-*.py"
    flake8 = Path(sys.executable).with_name("flake8")
    run = run_bounded([str(flake8), "--select", "GPU", "--exclude", own_reads, "."], repo)
    _report_numbers("flake8 --select GPU", run)
    assert "Traceback" not in run["stderr"] + run["stdout"]
    assert run["seconds"] < 90 and run["max_rss_mb"] < 1500
    assert "./good.py:2:10: GPU201" in run["stdout"]
    assert " GPU001 " not in run["stdout"]  # the plugin failed on no file
    assert "./esc\x1b[31m\nname.py:2:10: GPU201" in run["stdout"]  # flake8 prints names raw


def _lsp_session(repo: Path, documents: dict[str, str], limit_s: float = 120.0) -> dict:
    """Open `documents` in `gpulint server` over stdio (a bare JSON-RPC client), wait for the
    diagnostics of each, shut down. The diagnostics by file name, the time and peak memory."""
    import json
    import subprocess
    import sys
    import threading
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulint", "server", "--debounce", "0"],
        cwd=repo,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    killer = threading.Timer(limit_s, lambda: os.killpg(proc.pid, 9))
    killer.start()
    start = time.monotonic()

    def send(message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        proc.stdin.flush()

    def receive() -> dict | None:
        length = None
        while True:
            line = proc.stdout.readline()
            if not line:
                return None
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
            if line in (b"\r\n", b"\n"):
                return json.loads(proc.stdout.read(length))

    diagnostics: dict[str, list] = {}
    try:
        send(
            {
                "id": 1,
                "method": "initialize",
                "params": {"rootUri": repo.as_uri(), "capabilities": {}},
            }
        )
        while (m := receive()) is not None and m.get("id") != 1:
            pass
        send({"method": "initialized", "params": {}})
        uris = {}
        for name, text in documents.items():
            uri = (repo / name).as_uri()
            uris[uri] = name
            item = {"uri": uri, "languageId": "", "version": 1, "text": text}
            send({"method": "textDocument/didOpen", "params": {"textDocument": item}})
        while len(diagnostics) < len(documents):
            m = receive()
            if m is None:
                break
            if m.get("method") == "textDocument/publishDiagnostics":
                name = uris.get(m["params"]["uri"])
                if name:
                    diagnostics[name] = m["params"]["diagnostics"]
        send({"id": 2, "method": "shutdown"})
        while (m := receive()) is not None and m.get("id") != 2:
            pass
        send({"method": "exit"})
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        killer.cancel()
        if proc.returncode is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    return {
        "seconds": time.monotonic() - start,
        "max_rss_mb": usage.ru_maxrss / 1024,
        "code": proc.returncode,
        "diagnostics": diagnostics,
        "stderr": proc.stderr.read().decode(errors="replace"),
    }


def test_the_language_server_finishes_on_a_hostile_repository(tmp_path):
    pytest.importorskip("pygls.lsp.server")
    repo = tmp_path / "repo"
    build_hostile_tree(repo)  # its evidence records, .gitignore and pyproject are read from disk
    documents = {
        "good.py": GOOD_PY,
        "bomb.yaml": BOMB_YAML + "env:\n  NCCL_DEBUG: INFO\n",
        "notes.md": "Our kernel is " + "1" * 100_000 + "x faster than `" + "`" * 50_000 + "\n",
        "huge.md": "A line of prose.\n" * 300_000,  # 5 MB of text
    }
    session = _lsp_session(repo, documents)
    print(
        f"\n[hostile tree] gpulint server: {session['seconds']:.1f} s, "
        f"max RSS {session['max_rss_mb']:.0f} MB, exit {session['code']}"
    )
    assert "Traceback" not in session["stderr"]
    assert set(session["diagnostics"]) == set(documents)
    assert session["code"] == 0 and session["seconds"] < 90 and session["max_rss_mb"] < 1500
    codes = {n: [d["code"] for d in ds] for n, ds in session["diagnostics"].items()}
    assert codes["good.py"] == ["GPU201"] and "GPU903" in codes["bomb.yaml"]
    assert not any("GPU001" in cs for cs in codes.values()), codes  # failed on no document


@pytest.mark.parametrize(
    "table, says",
    [
        ('cache-dir = "/tmp/anywhere"', "inside the project"),
        ('cache-dir = "../../elsewhere"', "inside the project"),
        ('cache-dir = "a\\u0000b"', "NUL"),
        ('evidence = ["/etc"]', "inside the project"),
        ("jobs = [[[[1]]]]", "non-negative integer"),
        ("select = " + "[" * 2000 + "]" * 2000, "not valid TOML"),
        ("select = " + "[" * 50 + "]" * 50, "expected a list of strings"),
    ],
)
def test_a_hostile_configuration_is_a_usage_error_not_a_traceback(tmp_path, table, says):
    import subprocess
    import sys

    (tmp_path / "pyproject.toml").write_text(f"[tool.gpulint]\n{table}\n")
    (tmp_path / "good.py").write_text(GOOD_PY)
    done = subprocess.run(
        [sys.executable, "-m", "gpulint", "check", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert says in done.stderr


def test_output_file_folders_are_created_and_a_folder_target_is_a_usage_error(tmp_path):
    from gpulint.cli import main

    (tmp_path / "good.py").write_text(GOOD_PY)
    target = tmp_path / "reports" / "deep" / "out.json"
    assert main(["check", "--no-cache", "--format", "json", "-o", str(target), str(tmp_path)]) == 1
    assert '"GPU201"' in target.read_text()
    assert main(["check", "--no-cache", "-o", str(tmp_path), str(tmp_path)]) == 2


def test_the_cache_follows_the_evidence_records_a_finding_cites(tmp_path, monkeypatch):
    """A cached result of a document is served only while the records it cites (or looked for)
    are as they were: edited, deleted or created, the document is judged again."""
    import json

    from gpulint.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.gpulint]\nselect = ["GPU9"]\n')
    (tmp_path / "README.md").write_text(
        "# Results\n\nOur fused kernel is 2x faster on H100 "
        "([evidence](.gpulint/evidence/run.json)).\n"
    )

    def findings() -> list[str]:
        capsys_out = tmp_path / "out.json"
        main(["check", "--format", "json", "-o", str(capsys_out), "README.md"])
        found = json.loads(capsys_out.read_text())["findings"]
        return sorted(f["message"] for f in found if f["path"] == "README.md")

    missing = findings()  # the record does not exist: a dangling reference
    assert any("run.json" in m for m in missing)
    record = tmp_path / ".gpulint" / "evidence" / "run.json"
    record.parent.mkdir(parents=True)
    record.write_text("{}")  # created (and invalid): no longer the same judgement
    created = findings()
    assert created != missing
    record.unlink()
    assert findings() == missing  # deleted again: judged again, not served from the cache


@pytest.mark.slow
def test_fuzz_command_nothing_escapes_a_file(tmp_path):
    """A short run of the fuzz command (tests/fuzz.py; the full run is 10,000 + 10,000)."""
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("fuzz.py")),
            "--programs",
            "1000",
            "--mutations",
            "1000",
            "--out",
            str(tmp_path / "failures"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1000 generated programs, 1000 mutated fixtures" in done.stdout


N_READS = 2000
SCALING = {
    "GPU601": (
        "a.py",
        "import time, torch\nmodel = torch.nn.Linear(4, 4).cuda()\ndef f(x):\n"
        + "".join(
            f"    t{i} = time.perf_counter()\n    y = model(x)\n"
            f"    print(time.perf_counter() - t{i})\n"
            for i in range(N_READS)
        ),
    ),
    "GPU603": (
        "b.py",
        "import torch\ndef f(x):\n"
        + "".join(
            f"    s{i} = torch.cuda.Event(enable_timing=True)\n"
            f"    e{i} = torch.cuda.Event(enable_timing=True)\n    s{i}.record()\n    y = x @ x\n"
            f"    e{i}.record()\n    print(s{i}.elapsed_time(e{i}))\n"
            for i in range(N_READS)
        ),
    ),
    "GPU806": (
        "a.cu",
        "__global__ void k(float* x) {\n"
        + "".join(
            f"  if (threadIdx.x < {i}) {{ x[{i}] = 1; __syncthreads(); }}\n" for i in range(N_READS)
        )
        + "}\n",
    ),
    "GPU808": (
        "b.cu",
        "#include <cstdlib>\nvoid f(cudaStream_t s, int n) {\n"
        + "".join(
            f"  float* h{i} = (float*)malloc(4);\n  float* d{i}; cudaMalloc(&d{i}, 4);\n"
            f"  for (int k = 0; k < n; ++k) {{\n"
            f"    cudaMemcpyAsync(d{i}, h{i}, 4, cudaMemcpyHostToDevice, s);\n"
            f"    cudaStreamSynchronize(s);\n  }}\n"
            for i in range(N_READS)
        )
        + "}\n",
    ),
}


@pytest.mark.parametrize("code", sorted(SCALING))
def test_rules_that_were_quadratic_are_linear(code):
    """2,000 timed regions, event reads, divergent syncs or pageable copies in one function:
    each rule still reports every one, in seconds (GPU601 took a minute, GPU603 and GPU808 ran
    past the 30 s budget)."""
    import time

    from gpulint.engine import Linter
    from gpulint.testing import example_config

    name, text = SCALING[code]
    linter = Linter(example_config(("sm_90",), root=Path.cwd()))
    start = time.process_time()
    findings, _ = linter.lint_bytes(name, text.encode())
    assert time.process_time() - start < 5.0
    assert sum(f.code == code for f in findings) == N_READS


def test_side_files_of_a_cuda_extension_never_block(tmp_path):
    """The CUDA front-end reads the Python files and setup.py around an extension (who builds
    it, who imports it): a FIFO named `*.py` or `setup.py` there is passed over, not opened
    for a read that never returns, on a cold run and on the warm run that stamps them."""
    import json
    import sys

    repo = tmp_path / "repo"
    ext = repo / "ext"
    ext.mkdir(parents=True)
    (ext / "kernel.cu").write_text(
        "#include <torch/extension.h>\n"
        "__global__ void fill(float* x) { x[threadIdx.x] = 0; }\n"
        "void run(torch::Tensor t) { fill<<<t.numel() / 32, 32>>>(t.data_ptr<float>()); }\n"
    )
    (ext / "loader.py").write_text(
        "from torch.utils.cpp_extension import load\nk = load('k', ['kernel.cu'])\n"
    )
    os.mkfifo(ext / "pipe.py")
    os.mkfifo(repo / "setup.py")
    (repo / "zero.py").symlink_to("/dev/zero")
    cmd = [sys.executable, "-m", "gpulint", "check", "--format", "json", "--exit-zero", "."]
    for attempt in ("cold", "warm"):
        run = run_bounded(cmd, repo, limit_s=60)
        assert run["code"] == 0 and run["seconds"] < 60, (attempt, run["stderr"])
        findings = json.loads(run["stdout"])["findings"]
        fifos = {f["path"] for f in findings if f["code"] == "GPU000" and "FIFO" in f["message"]}
        assert fifos == {"ext/pipe.py", "setup.py"}, (attempt, findings)
        assert any(f["path"] == "ext/kernel.cu" for f in findings), (attempt, findings)


def test_side_files_are_read_only_when_regular_and_small(tmp_path):
    """`read_side` (context files: setup.py, loader scripts; every Python file of the tree for
    the CUDA project): the bytes of a regular file within the limit, also below a folder that
    is a link; None, without blocking, for a link, a FIFO, a folder, a missing or too large
    file."""
    from gpulint.safeio import read_side

    (tmp_path / "real").mkdir()
    ok = tmp_path / "real" / "setup.py"
    ok.write_bytes(b"from torch.utils import cpp_extension\n")
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    (tmp_path / "link.py").symlink_to(ok)
    big = tmp_path / "big.py"
    big.write_bytes(b"x" * 101)
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    assert read_side(ok, 100) == ok.read_bytes()
    assert read_side(tmp_path / "linked" / "setup.py", 100) == ok.read_bytes()
    assert read_side(big, 101) == b"x" * 101
    for path in (tmp_path / "link.py", fifo, tmp_path / "real", tmp_path / "missing.py", big):
        assert read_side(path, 100) is None, path
