"""Fixes you can trust: the encoding, layout, links, owner and mode of a file survive `--fix`, no
fix writes code that parses and is wrong, and one refused fix does not block the others."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpulint.config import Config
from gpulint.diagnostics import Edit, Finding, Fix, Severity
from gpulint.engine import Linter, lint_source
from gpulint.fixes import (
    apply_edits,
    choose_fixes,
    decode_for_rewrite,
    fix_file,
    fix_until_stable,
    tokens_kept_outside,
)
from gpulint.frontends import ParseError
from gpulint.rule import Invalid, all_rules

AMP = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"


def _gpulint(*args: str, cwd: Path, user: int | None = None) -> subprocess.CompletedProcess:
    def drop() -> None:
        if user is not None:
            os.setgid(user)
            os.setuid(user)

    return subprocess.run(
        [sys.executable, "-m", "gpulint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        preexec_fn=drop if user is not None else None,
        env={**os.environ, "NO_COLOR": "1"},
    )


def _lint_and_fix(path: Path, write: bool = True, root: Path | None = None):
    linter = Linter(Config(root=root or path.parent))
    result = linter.lint_path(path)

    def lint(data: bytes) -> list[Finding]:
        return linter.lint_bytes(result.path, data, linter.relpath(path))[0]

    return fix_until_stable(path, result.findings, result.digest, write, lint, root or path.parent)


# -- encodings and layout ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "encode"),
    [
        ("latin1", lambda t: ("# -*- coding: latin-1 -*-\n" + t).encode("latin-1")),
        ("cp1252", lambda t: ("# coding: cp1252\n" + t).encode("cp1252")),
        ("utf16le", lambda t: b"\xff\xfe" + t.encode("utf-16-le")),
        ("utf16be", lambda t: b"\xfe\xff" + t.encode("utf-16-be")),
        ("utf8bom", lambda t: b"\xef\xbb\xbf" + t.encode("utf-8")),
        ("crlf", lambda t: t.replace("\n", "\r\n").encode("utf-8")),
        ("no_final_newline", lambda t: t.rstrip("\n").encode("utf-8")),
    ],
)
def test_fix_keeps_the_files_encoding_and_layout(tmp_path, name, encode):
    text = 'import torch\nname = "café €"\nscaler = torch.cuda.amp.GradScaler()\n'
    if name == "latin1":
        text = text.replace(" €", "")  # not in latin-1
    path = tmp_path / f"{name}.py"
    path.write_bytes(encode(text))
    outcome = _lint_and_fix(path)
    assert outcome.error is None and outcome.applied == 1
    expected = encode(text.replace("torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")'))
    assert path.read_bytes() == expected


def test_a_file_whose_bytes_would_not_come_back_is_not_fixed(tmp_path):
    # unicode_escape decodes `\x41` to `A` and encodes `A` back as `A`: writing would change
    # bytes the fix never touched, so the file is left alone.
    data = b"# coding: unicode_escape\nimport torch\nx = '\\x41'\nscaler = torch.cuda.amp.GradScaler()\n"
    path = tmp_path / "odd.py"
    path.write_bytes(data)
    with pytest.raises(ParseError):
        decode_for_rewrite(data)
    outcome = _lint_and_fix(path)
    assert outcome.applied == 0 and "written back identically" in (outcome.error or "")
    assert path.read_bytes() == data


# -- wrong code that parses --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "fixed"),
    [
        (
            "import torch\nscaler = torch.cuda.amp.GradScaler((2.0**16))\n",
            'import torch\nscaler = torch.amp.GradScaler("cuda", (2.0**16))\n',
        ),
        (  # torch only bound inside a function: the module-level use must not name it
            "from torch.cuda.amp import GradScaler\n\ndef f():\n    import torch\n\n"
            "scaler = GradScaler()\n",
            "from torch.amp import GradScaler\n\ndef f():\n    import torch\n\n"
            'scaler = GradScaler("cuda")\n',
        ),
        (  # a class attribute named torch shadows the module in the class body
            "import torch\nfrom torch.cuda.amp import GradScaler\n\nclass Cfg:\n"
            "    torch = None\n    scaler = GradScaler()\n",
            "import torch\nfrom torch.amp import GradScaler\n\nclass Cfg:\n"
            '    torch = None\n    scaler = GradScaler("cuda")\n',
        ),
        (  # the commonest shape: no `import torch`, names imported from torch.cuda.amp
            "from torch.cuda.amp import autocast, GradScaler\n\nscaler = GradScaler()\n"
            "with autocast(dtype=torch.bfloat16):\n    pass\n",
            'from torch.amp import autocast, GradScaler\n\nscaler = GradScaler("cuda")\n'
            'with autocast("cuda", dtype=torch.bfloat16):\n    pass\n',
        ),
        (  # comments and layout inside a parenthesised import survive
            "from torch.cuda.amp import (  # amp\n    autocast,  # mixed precision\n"
            "    GradScaler,\n)\nwith autocast(True):\n    pass\n",
            "from torch.amp import (  # amp\n    autocast,  # mixed precision\n"
            '    GradScaler,\n)\nwith autocast("cuda", enabled=True):\n    pass\n',
        ),
        (
            "from torch.cuda import amp\nscaler = amp.GradScaler(\n    init_scale=1024,  # c\n)\n",
            'from torch import amp\nscaler = amp.GradScaler(\n    "cuda", init_scale=1024,  # c\n)\n',
        ),
    ],
)
def test_gpu201_fix_shapes(tmp_path, source, fixed):
    path = tmp_path / "train.py"
    path.write_text(source)
    outcome = _lint_and_fix(path)
    assert outcome.error is None, outcome.error
    assert path.read_text() == fixed
    assert [f for f in lint_source(fixed) if f.code == "GPU201"] == []


def test_alias_used_as_a_value_is_reported_not_fixed(tmp_path):
    source = (
        "from torch.cuda.amp import autocast\nctx = autocast if fp16 else None\n"
        "with autocast():\n    pass\n"
    )
    findings = [f for f in lint_source(source) if f.code == "GPU201"]
    assert len(findings) == 2 and not any(f.fix for f in findings)


def test_show_fixes_says_what_was_not_fixed_and_why(tmp_path):
    (tmp_path / "a.py").write_text(AMP)
    (tmp_path / "b.py").write_text(
        "from torch.cuda.amp import autocast\nctx = autocast if fp16 else None\n"
    )
    run = _gpulint("check", "--fix", "--show-fixes", "--no-cache", ".", cwd=tmp_path)
    assert "Fixed 1 finding:" in run.stdout
    assert "Not fixed (1):\n- b.py:2: GPU201 no safe fix for this use" in run.stdout
    assert run.returncode == 1  # b.py's finding is still there


def test_an_insertion_that_glues_onto_a_token_is_refused():
    old = "x = ab + c\n"
    glued = Edit(6, 6, "1")  # `ab` -> `ab1`: parses, and is another name
    assert tokens_kept_outside(old, apply_edits(old, [glued])[0], [glued]) is not None
    inside = Edit(5, 5, "1")  # into the middle of a token: never what a fix means
    assert tokens_kept_outside(old, apply_edits(old, [inside])[0], [inside]) is not None
    clean = Edit(9, 10, "d")
    assert tokens_kept_outside(old, apply_edits(old, [clean])[0], [clean]) is None


def test_one_refused_fix_does_not_block_the_others():
    text = "import torch\na = torch.cuda.amp.GradScaler()\nb = 1\n"
    good = next(f for f in lint_source(text) if f.code == "GPU201")
    bad = Finding(
        "x.py", 3, 1, "GPU999", "bad", Severity.WARNING, fix=Fix("break", (Edit(49, 50, "("),))
    )
    new, count, refused = choose_fixes(text, [bad, good], "x.py")
    assert count == 1 and new == text.replace(
        "torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")'
    )
    assert [fix for fix, _ in refused] == [bad.fix]


def test_a_fix_that_leaves_its_finding_is_refused():
    text = AMP
    finding = next(f for f in lint_source(text) if f.code == "GPU201")
    useless = Finding(
        finding.path, 2, 1, "GPU201", "x", Severity.WARNING, fix=Fix("noop", (Edit(0, 0, " "),))
    )

    def relint(data: bytes) -> list[Finding]:
        return lint_source(data, "x.py")

    _, count, refused = choose_fixes(text, [useless], "x.py", relint)
    assert count == 0 and refused


# -- the file on disk --------------------------------------------------------------------------
def test_fix_writes_in_place_keeping_inode_mode_and_hard_links(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(AMP)
    os.chmod(path, 0o640)
    twin = tmp_path / "twin.py"
    os.link(path, twin)
    inode = path.stat().st_ino
    outcome = _lint_and_fix(path)
    assert outcome.applied == 1
    assert path.stat().st_ino == inode and (path.stat().st_mode & 0o777) == 0o640
    assert twin.read_text() == path.read_text() and "torch.amp.GradScaler" in twin.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py", "twin.py"]  # no temp files


def test_symlink_inside_the_tree_fixes_its_target_and_stays_a_link(tmp_path):
    target = tmp_path / "real.py"
    target.write_text(AMP)
    link = tmp_path / "link.py"
    link.symlink_to("real.py")
    outcome = _lint_and_fix(link)
    assert outcome.applied == 1
    assert link.is_symlink() and "torch.amp.GradScaler" in target.read_text()


def test_symlink_out_of_the_tree_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "real.py").write_text(AMP)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link.py").symlink_to(outside / "real.py")
    outcome = _lint_and_fix(tree / "link.py", root=tree)
    assert outcome.applied == 0
    assert (outside / "real.py").read_text() == AMP
    # Even with findings in hand (say, from a run that read the target), the fix refuses it.
    findings = [f for f in lint_source(AMP, "link.py") if f.fix]
    digest = hashlib.sha256(AMP.encode()).hexdigest()
    outcome = fix_file(tree / "link.py", findings, digest, write=True, root=tree)
    assert outcome.applied == 0 and "outside the checked tree" in (outcome.error or "")
    assert (outside / "real.py").read_text() == AMP


def test_read_only_file_is_not_fixed(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(AMP)
    os.chmod(path, 0o444)
    outcome = _lint_and_fix(path)
    assert outcome.applied == 0 and "read-only" in (outcome.error or "")
    assert path.read_text() == AMP


def test_file_changed_since_it_was_checked_is_not_fixed(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(AMP)
    result = Linter(Config(root=tmp_path)).lint_path(path)
    path.write_text(AMP + "# edited\n")
    outcome = fix_file(path, result.findings, result.digest, write=True)
    assert outcome.applied == 0 and "changed on disk" in (outcome.error or "")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_root_fixing_a_users_file_keeps_its_owner(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(AMP)
    os.chown(path, 65534, 65534)
    assert _lint_and_fix(path).applied == 1
    assert (path.stat().st_uid, path.stat().st_gid) == (65534, 65534)


def _fix_as(user: int, paths: list[Path]) -> list[str | None]:
    """Lint `paths` as root, then fix them in a forked child that has dropped to `user`: the
    permission checks under test are the fix's own, and no new interpreter (which the user may
    not be allowed to run) or worker process is needed. Returns each file's fix error."""
    linter = Linter(Config(root=paths[0].parent))
    results = [linter.lint_path(p) for p in paths]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 99
        try:
            os.close(read)
            os.setgid(user)
            os.setuid(user)
            errors = [
                fix_file(p, r.findings, r.digest, write=True, root=p.parent).error
                for p, r in zip(paths, results, strict=True)
            ]
            os.write(write, json.dumps(errors).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        output = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, output
    return json.loads(output)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to drop")
def test_unprivileged_user_cannot_fix_what_they_cannot_write():
    folder = Path(tempfile.mkdtemp(prefix="gpulint-fix-"))
    try:
        os.chmod(folder, 0o755)
        os.chown(folder, 65534, 65534)  # the user owns the folder...
        mine_read_only = folder / "ro.py"
        roots = folder / "roots.py"
        mine = folder / "mine.py"
        for p in (mine_read_only, roots, mine):
            p.write_text(AMP)
        for p in (mine_read_only, mine):
            os.chown(p, 65534, 65534)
        os.chmod(mine_read_only, 0o444)  # ...but marked this one read-only,
        os.chmod(roots, 0o644)  # and this one belongs to root.
        errors = _fix_as(65534, [mine_read_only, roots, mine])
        assert "read-only" in errors[0] and "cannot write" in errors[1] and errors[2] is None
        assert mine_read_only.read_text() == AMP and roots.read_text() == AMP
        assert "torch.amp.GradScaler" in mine.read_text()  # what the user may write is fixed
        assert sorted(p.name for p in folder.iterdir()) == ["mine.py", "ro.py", "roots.py"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_diff_with_fix_writes_nothing(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(AMP)
    run = _gpulint("check", "--fix", "--diff", "--no-cache", "train.py", cwd=tmp_path)
    assert 'torch.amp.GradScaler("cuda")' in run.stdout
    assert path.read_text() == AMP


# -- fixed point -------------------------------------------------------------------------------
def _fix_examples():
    for rule in all_rules():
        for example in rule.INVALID:
            if isinstance(example, Invalid) and example.fixed is not None:
                yield pytest.param(rule, example, id=f"{rule.code}-{len(example.code)}")


@pytest.mark.parametrize(("rule", "example"), list(_fix_examples()))
def test_fixes_converge(tmp_path, rule, example):
    """`--fix` on every fixable example reaches a fixed point: a second run changes nothing."""
    suffix = ".py" if "python" in rule.languages() else ".cu"
    path = tmp_path / f"example{suffix}"
    path.write_text(example.code)
    first = _lint_and_fix(path)
    assert first.error is None and first.applied >= 1
    after_first = path.read_bytes()
    second = _lint_and_fix(path)
    assert second.applied == 0 and path.read_bytes() == after_first
    assert after_first != example.code.encode()


def test_a_plain_from_import_is_rewritten_as_libcst_would_without_it(monkeypatch):
    # one-line `from m import x` is rewritten from its text; every other shape goes to libcst
    from gpulint.frontends.python import FRONTEND, edits
    from gpulint.settings import Settings

    shapes = [
        "from torch.cuda.amp import autocast\n",
        "from  torch.cuda.amp  import\tautocast as ac, GradScaler\n",
        "if x:\n    from torch.cuda.amp import custom_bwd  # old\n",
        "from torch.cuda.amp import torch; import os\n",
        "from torch.cuda.amp import (autocast,\n    GradScaler)\n",
        "from torch . cuda . amp import autocast\n",
        "from .torch.cuda.amp import autocast\n",
        "import torch.cuda.amp as amp\n",
    ]
    fast = 0
    for source in shapes:
        file = FRONTEND.parse("t.py", source.encode(), Settings())
        statement = next(
            n for n in ast.walk(file.tree) if isinstance(n, ast.Import | ast.ImportFrom)
        )
        got = edits.rewrite_import(file, statement, "torch.cuda.amp", "torch.amp")
        fast += (
            edits._plain_from_import(statement, file.segment(statement), "torch.cuda.amp")
            is not None
        )
        with monkeypatch.context() as m:
            m.setattr(edits, "_plain_from_import", lambda *a: None)
            assert got == edits.rewrite_import(file, statement, "torch.cuda.amp", "torch.amp"), (
                source
            )
    assert fast == 4
