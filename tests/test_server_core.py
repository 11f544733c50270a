"""The language server's protocol-free parts: positions, configuration, edits; and the CLI entry
when pygls is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpulint.diagnostics import Edit
from gpulint.fixes import apply_edits
from gpulint.server import positions
from gpulint.server.core import (
    ConfigStore,
    document_name,
    encode_like_disk,
    fix_all_edit,
    fix_edits,
    lint_text,
    minimal_edit,
    noqa_edit,
    suppresses,
)

AMP = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"


def test_positions_count_utf16_units():
    line = 'x = "é😀"; torch.cuda.amp'
    col = line.index("torch") + 1  # 1-based code points
    assert positions.character(line, col) == col - 1 + 1  # the emoji is two UTF-16 units
    assert positions.character(line, col, positions.UTF8) == len(line[: col - 1].encode())
    assert positions.character(line, col, positions.UTF32) == col - 1
    for encoding in (positions.UTF16, positions.UTF8, positions.UTF32):
        assert positions.column(line, positions.character(line, col, encoding), encoding) == col
    assert positions.column("abc", 99) == 4  # clamped to the end of the line


def test_config_store_reloads_when_pyproject_changes(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.gpulint]\nignore = ["GPU201"]\n')
    path = tmp_path / "pkg" / "train.py"
    path.parent.mkdir()
    store = ConfigStore(tmp_path)
    linter, error = store.linter_for(path)
    assert error is None and lint_text(linter, path, path.as_uri(), AMP, "python").findings == []
    assert store.linter_for(path)[0] is linter  # cached while nothing changed
    (tmp_path / "pyproject.toml").write_text('[tool.gpulint]\nselect = ["GPU2"]\n')
    os.utime(tmp_path / "pyproject.toml", ns=(1, 1))  # a different stamp even on coarse clocks
    linter2, _ = store.linter_for(path)
    assert linter2 is not linter
    assert [f.code for f in lint_text(linter2, path, path.as_uri(), AMP, "python").findings] == [
        "GPU201"
    ]


def test_config_error_falls_back_to_defaults_and_says_so(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.gpulint]\nselect = ["NOPE"]\n')
    linter, error = ConfigStore(tmp_path).linter_for(tmp_path / "x.py")
    assert error and "select" in error and linter is not None


def test_per_file_ignores_use_the_path_below_the_config_root(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.gpulint]\nper-file-ignores = { "legacy/*.py" = ["GPU201"] }\n'
    )
    store = ConfigStore(tmp_path)
    legacy = tmp_path / "legacy" / "old.py"
    fresh = tmp_path / "new.py"
    for path, expected in ((legacy, []), (fresh, ["GPU201"])):
        linter, _ = store.linter_for(path)
        result = lint_text(linter, path, path.as_uri(), AMP, "python")
        assert [f.code for f in result.findings] == expected


def test_unsaved_buffers_take_their_front_end_from_the_language_id():
    assert document_name(None, "untitled:Untitled-1", "python") == "Untitled-1.py"
    assert document_name(None, "untitled:Untitled-2", "cuda-cpp") == "Untitled-2.cu"
    assert document_name(Path("/x/kernel.cu"), "file:///x/kernel.cu", "cpp") == "kernel.cu"


def test_text_is_encoded_as_its_cookie_says():
    text = "# -*- coding: latin-1 -*-\nx = 'é'\n"
    assert encode_like_disk(text) == text.encode("latin-1")
    assert encode_like_disk("x = '😀'\n") == "x = '😀'\n".encode()


def _result(tmp_path, text, name="t.py"):
    store = ConfigStore(tmp_path)
    path = tmp_path / name
    linter, _ = store.linter_for(path)
    return linter, lint_text(linter, path, path.as_uri(), text, None)


def test_fix_edits_and_fix_all(tmp_path):
    text = AMP + "with torch.cuda.amp.autocast():\n    pass\n"
    _, result = _result(tmp_path, text)
    assert len(result.findings) == 2
    edits = fix_edits(result, result.findings[0])
    assert apply_edits(text, edits)[0].count("torch.amp.GradScaler") == 1
    everything = fix_all_edit(result)
    fixed = text[: everything.start] + everything.text + text[everything.end :]
    assert "torch.cuda.amp" not in fixed


def test_minimal_edit_spans_only_the_difference():
    assert minimal_edit("abcdef", "abXYef") == Edit(2, 4, "XY")
    assert minimal_edit("aaa", "aaaa") == Edit(3, 3, "a")


def test_noqa_edit_appends_or_extends(tmp_path):
    linter, result = _result(tmp_path, AMP)
    f = result.findings[0]
    edit = noqa_edit(result, f)
    assert apply_edits(AMP, [edit])[0].splitlines()[1].endswith("()  # noqa: GPU201")
    assert suppresses(linter, result, f, edit)

    text = "import torch\nscaler = torch.cuda.amp.GradScaler()  # noqa: E501\n"
    linter, result = _result(tmp_path, text)
    edit = noqa_edit(result, result.findings[0])
    assert apply_edits(text, [edit])[0].splitlines()[1].endswith("# noqa: E501, GPU201")
    assert suppresses(linter, result, result.findings[0], edit)


def test_noqa_is_not_offered_where_it_would_not_work(tmp_path):
    # The finding's line ends inside a string: a comment there would change the string.
    text = 'import torch\nx = (torch.cuda.amp.GradScaler(), """\n""")\n'
    linter, result = _result(tmp_path, text)
    f = result.findings[0]
    assert not suppresses(linter, result, f, noqa_edit(result, f))


def test_noqa_comment_follows_the_language(tmp_path):
    from gpulint.server.core import LintResult

    result = LintResult("k.cu", "launch();\n", language="cuda")
    from gpulint.diagnostics import Finding, Severity

    f = Finding("k.cu", 1, 1, "GPU802", "m", Severity.WARNING)
    assert noqa_edit(result, f) == Edit(9, 9, " // noqa: GPU802")


def test_server_subcommand_without_pygls_exits_2():
    code = (
        "import sys; sys.modules['pygls.lsp.server'] = None\n"
        "from gpulint.cli import main\n"
        "sys.exit(main(['server']))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert 'pip install "gpulint[lsp]"' in run.stderr


def test_cli_does_not_import_pygls():
    code = "import sys, gpulint.cli; gpulint.cli.build_parser(); print('pygls' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "False", run.stderr


def test_editor_findings_carry_the_newest_traces_status(tmp_path):
    """The language server's diagnostics hold `data.trace` from the finding: the status the
    newest `gpulint trace` record under .gpulint/evidence/ gave that line (while the file is the
    one traced)."""
    from gpulint.runtime import evidence
    from gpulint.runtime.trace_cli import record_of_recording

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "trace" / "train_gpt"
    text = (fixtures / "train_gpt.py.txt").read_text(encoding="utf-8")
    (tmp_path / "train_gpt.py").write_text(text, encoding="utf-8")
    record = record_of_recording(fixtures, tmp_path)
    assert isinstance(record, dict)
    evidence.write_record(record, tmp_path / evidence.EVIDENCE_DIR)
    _, result = _result(tmp_path, text, name="train_gpt.py")
    status = {(f.code, f.line): f.trace for f in result.findings}
    assert status[("GPU101", 74)] == "confirmed" and status[("GPU401", 53)] == "confirmed"
    assert status[("GPU201", 62)] is None
    # an edited buffer whose lines moved: the trace names line 74, the finding is now at 75
    _, result = _result(tmp_path, "# edited\n" + text, name="train_gpt.py")
    assert all(f.trace is None for f in result.findings if f.code == "GPU101")
