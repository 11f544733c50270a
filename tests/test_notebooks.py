"""Jupyter notebooks (`.ipynb`): findings placed by cell as ruff places them, magics masked,
noqa per cell line, fixes written into the cell sources only, a broken notebook one GPU000,
and every output format agreeing on where each finding is."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from gpulint.cli import main
from gpulint.config import Config
from gpulint.diagnostics import Edit, Finding, Fix, Severity
from gpulint.engine import Linter, lint_source
from gpulint.frontends.notebook import (
    Notebook,
    NotebookFile,
    cell_source,
    load,
    mask,
    place_finding,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "notebooks"
TRAINING = FIXTURES / "training.ipynb"
BROKEN = FIXTURES / "broken.ipynb"
# (cell, line, col, code) of the training fixture: the deprecated GradScaler in cell 3, the
# per-step `.item()` of the loop in cell 5 (below a masked `%time` line) and of the `%%time`
# cell 8; cell 6 (`%%bash`) and the raw cell 9 hold `.item()` text and are not Python; cell 7's
# finding carries a noqa.
EXPECTED = {(3, 1, 10, "GPU201"), (5, 7, 27, "GPU101"), (8, 6, 14, "GPU101")}


def run(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(TRAINING, tmp_path / "training.ipynb")
    return tmp_path


def _notebook(*sources: str | tuple[str, str], **top) -> str:
    cells = []
    for source in sources:
        kind, text = source if isinstance(source, tuple) else ("code", source)
        cell = {"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True)}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        cells.append(cell)
    data = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5, **top}
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def _places(findings) -> set[tuple]:
    # (GPU202, a loop that runs in FP32, fires on the bare loops written here: not the point)
    return {(f.cell, f.line, f.col, f.code) for f in findings if f.code != "GPU202"}


LOOP = (
    "for x, y in train_loader:\n"
    "    loss = model(x.cuda(), y.cuda())\n"
    "    loss.backward()\n"
    "    optimizer.step()\n"
    "    print(loss.item()){comment}\n"
)


# -- locations ----------------------------------------------------------------------------------
def test_findings_are_placed_by_cell_line_and_column():
    findings = lint_source(TRAINING.read_bytes(), "training.ipynb")
    assert _places(findings) == EXPECTED
    loop = next(f for f in findings if f.cell == 5)
    # the message's own line reference is the notebook's too, not the joined source's
    assert "step loop at cell 5, line 1" in loop.message
    assert loop.end_line == 7 and loop.end_col == 38
    line = cell_source(TRAINING.read_text(encoding="utf-8"), 5).splitlines()[loop.line - 1]
    assert line[loop.col - 1 : loop.end_col - 1] == "loss.item()"


def test_line_references_in_messages_are_relabelled_only_for_this_notebook():
    from gpulint.frontends.notebook import relabel

    nb = Notebook.from_text(_notebook("a = 1\nb = 2\n", ("markdown", "m"), "c = 3\n"))
    assert relabel("the loop at line 3; and line 2", nb, "d/nb.ipynb") == (
        "the loop at cell 3, line 1; and cell 1, line 2"
    )
    assert relabel("see d/nb.ipynb:3 and nb.ipynb:1, x/nb.ipynb:3", nb, "d/nb.ipynb") == (
        "see d/nb.ipynb:cell 3:1 and nb.ipynb:cell 1:1, x/nb.ipynb:3"
    )
    remote = "a graph break there: `print()` at line 3 in `f`, line 2 of m.py, utils.py:3"
    assert relabel(remote, nb, "nb.ipynb") == remote
    assert relabel("line 99", nb, "nb.ipynb") == "line 99"  # past the joined source's end


def test_text_output_is_ruffs_concise_form(project):
    code, out = run("check", "--no-cache", "training.ipynb")
    assert code == 1
    assert "training.ipynb:cell 5:7:27: GPU101 " in out
    assert "training.ipynb:cell 3:1:10: GPU201 " in out
    grouped = run("check", "--no-cache", "--output-format", "grouped", "training.ipynb")[1]
    assert "  cell 8:6:14 GPU101" in grouped
    full = run("check", "--no-cache", "--output-format", "full", "training.ipynb")[1]
    assert '7 |     print(f"step {step}: {loss.item():.3f}")' in full  # the cell's own line


def test_cells_count_markdown_and_raw_cells_and_empty_code_cells():
    text = _notebook(("markdown", "# title"), "", ("raw", "x"), LOOP.format(comment=""))
    assert _places(lint_source(text, "nb.ipynb")) == {(4, 5, 11, "GPU101")}


def test_every_format_gives_the_same_places(project):
    as_json = json.loads(run("check", "--no-cache", "--output-format", "json", ".")[1])
    json_places = {(f["cell"], f["line"], f["col"], f["code"]) for f in as_json["findings"]}
    sarif = json.loads(run("check", "--no-cache", "--output-format", "sarif", ".")[1])
    sarif_places = set()
    for r in sarif["runs"][0]["results"]:
        region = r["locations"][0]["physicalLocation"]["region"]
        sarif_places.add(
            (r["properties"]["cell"], region["startLine"], region["startColumn"], r["ruleId"])
        )
        assert r["locations"][0]["logicalLocations"] == [
            {"name": f"cell {r['properties']['cell']}", "kind": "module"}
        ]
    text_places = set()
    for line in run("check", "--no-cache", "--quiet", ".")[1].splitlines():
        _, cell, row, col, rest = line.split(":", 4)
        text_places.add((int(cell.removeprefix("cell ")), int(row), int(col), rest.split()[0]))
    lines = run("check", "--no-cache", "--output-format", "json-lines", ".")[1].splitlines()
    lines_places = {(d["cell"], d["line"], d["col"], d["code"]) for d in map(json.loads, lines)}
    assert json_places == sarif_places == text_places == lines_places == EXPECTED


def test_sarif_fingerprints_and_fixes_read_the_cell(project):
    sarif = json.loads(run("check", "--no-cache", "--output-format", "sarif", ".")[1])
    (amp,) = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "GPU201"]
    (change,) = amp["fixes"][0]["artifactChanges"]
    regions = [rep["deletedRegion"] for rep in change["replacements"]]
    assert regions[0] == {"startLine": 1, "startColumn": 10, "endLine": 1, "endColumn": 35}
    # the fingerprint hashes the cell's line, not the JSON line with the same number
    from gpulint.reporters.sarif import _line_hash

    finding = Finding("training.ipynb", 1, 10, "GPU201", "", Severity.WARNING, cell=3)
    want = _line_hash(finding, "scaler = torch.cuda.amp.GradScaler()", 1)
    assert amp["partialFingerprints"]["gpulintLineHash/v1"] == want


# -- magics -------------------------------------------------------------------------------------
def test_magics_are_masked_line_for_line():
    source = "%matplotlib inline\n!nvidia-smi\nfiles = !ls\nmodel?\n??torch\nx = 1\n"
    masked, lines = mask(source)
    assert lines == {1, 2, 3, 4, 5}
    assert masked == "pass\npass\npass\npass\npass\nx = 1\n"
    indented, lines = mask("if a:\n    %time f()\n")
    assert indented == "if a:\n    pass\n" and lines == {2}


def test_percent_and_bang_inside_strings_and_brackets_are_python():
    source = 'doc = """\n%s items\n!important\n"""\nx = (a\n     % b)\ny = a \\\n    % b\n'
    masked, lines = mask(source)
    assert lines == frozenset() and masked == source


def test_cell_magics_python_or_not():
    assert mask("%%time\nx = 1\n") == ("pass\nx = 1\n", {1})
    assert mask("%%bash\nfor x in loader; do echo $x.item(); done\n")[0] is None
    assert mask("%%writefile train.py\nimport torch\n")[0] is None


def test_non_python_notebooks_are_left_alone():
    kernel = {"language_info": {"name": "R"}}
    text = _notebook(LOOP.format(comment=""), metadata=kernel)
    assert lint_source(text, "nb.ipynb") == []


# -- noqa, per-file-ignores ---------------------------------------------------------------------
def test_noqa_works_per_cell_line():
    cells = ("import torch", LOOP.format(comment=""), LOOP.format(comment="  # noqa: GPU101"))
    assert _places(lint_source(_notebook(*cells), "nb.ipynb")) == {(2, 5, 11, "GPU101")}
    assert _places(lint_source(_notebook(cells[0], cells[2]), "nb.ipynb")) == set()


def test_per_file_ignores_and_config_apply_as_for_python(project):
    (project / "pyproject.toml").write_text(
        '[tool.gpulint]\nignore = ["GPU201"]\n[tool.gpulint.per-file-ignores]\n'
        '"*.ipynb" = ["GPU101"]\n'
    )
    code, out = run("check", "--no-cache", ".")
    assert code == 0, out


def test_notebooks_are_found_by_default(project):
    (project / "nested").mkdir()
    shutil.copy(TRAINING, project / "nested" / "other.ipynb")
    out = json.loads(run("check", "--no-cache", "--output-format", "json", ".")[1])
    assert out["files_checked"] == 2
    assert {f["path"] for f in out["findings"]} == {"training.ipynb", "nested/other.ipynb"}


# -- broken notebooks ---------------------------------------------------------------------------
def test_a_broken_notebook_is_one_diagnostic_and_the_run_goes_on(project):
    shutil.copy(BROKEN, project / "broken.ipynb")
    code, out = run("check", "--no-cache", ".")
    assert code == 1
    broken = [line for line in out.splitlines() if line.startswith("broken.ipynb")]
    assert broken == [
        "broken.ipynb:4:2: GPU000 not a valid notebook: invalid JSON: Expecting ',' delimiter"
    ]
    assert "training.ipynb:cell 5:7:27: GPU101" in out


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[]", "the top level is not a JSON object"),
        ('{"cells": {}}', 'no "cells" list'),
        ('{"nbformat": 3, "worksheets": []}', "only nbformat 4"),
        ('{"cells": [{"cell_type": "code", "source": 7}]}', "cell 1: source is not"),
        ('{"cells": [{"cell_type": "code", "source": ["a", 1]}]}', "not a list of strings"),
        ('{"cells": [3]}', "cell 1 is not a cell object"),
        ("[" * 100_000 + "]" * 100_000, "not a valid notebook"),
        ("\xff\xfe not utf-8", "not a valid notebook"),
    ],
)
def test_wrong_shapes_are_said_once(text, why):
    data = text.encode("latin-1") if text.startswith("\xff") else text.encode()
    (finding,) = lint_source(data, "nb.ipynb")
    assert finding.code == "GPU000" and why in finding.message and finding.cell is None


def test_a_syntax_error_is_placed_in_its_cell():
    # (a file no rule looks at is not parsed, notebook or not: this one has a step loop)
    (finding,) = lint_source(_notebook("loss.backward()", "x = 1", "y = (1,\n"), "nb.ipynb")
    assert (finding.code, finding.cell, finding.line) == ("GPU000", 3, 1)
    assert finding.message == "syntax error: '(' was never closed"
    (finding,) = lint_source(_notebook("loss.backward()", "if x:\n"), "nb.ipynb")
    assert finding.cell == 2 and finding.message.endswith("statement on cell 2, line 1")


# -- fixes --------------------------------------------------------------------------------------
def test_fix_writes_only_the_cell_source(project):
    before = (project / "training.ipynb").read_bytes()
    code, _ = run("check", "--no-cache", "--fix", "training.ipynb")
    after = (project / "training.ipynb").read_bytes()
    old, new = b"torch.cuda.amp.GradScaler()", b'torch.amp.GradScaler(\\"cuda\\")'
    assert after == before.replace(old, new) and before.count(old) == 1
    was, now = json.loads(before), json.loads(after)
    for a, b in zip(was["cells"], now["cells"], strict=True):
        assert {k: v for k, v in a.items() if k != "source"} == {
            k: v for k, v in b.items() if k != "source"
        }  # outputs, metadata, execution counts, ids
    assert was["metadata"] == now["metadata"]
    assert code == 1  # the per-step readbacks have no fix and are left
    assert not any(f.code == "GPU201" for f in lint_source(after, "training.ipynb"))


def test_fix_keeps_the_files_own_layout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # indent 2, CRLF between lines, one string for the source, non-ASCII kept raw
    data = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "Größe ✓"},
            {
                "cell_type": "code",
                "execution_count": 3,
                "metadata": {"tags": ["x"]},
                "outputs": [{"output_type": "stream", "name": "stdout", "text": "é\n"}],
                "source": "import torch\nscaler = torch.cuda.amp.GradScaler()",
            },
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 2,
    }
    text = json.dumps(data, indent=2, ensure_ascii=False).replace("\n", "\r\n")
    (tmp_path / "nb.ipynb").write_bytes(text.encode("utf-8"))
    run("check", "--no-cache", "--fix", "nb.ipynb")
    written = (tmp_path / "nb.ipynb").read_bytes().decode("utf-8")
    assert written == text.replace(
        "torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler(\\"cuda\\")'
    )


def test_a_list_source_of_one_line_becomes_lines_as_the_file_writes_them():
    nb = Notebook.from_text(_notebook("a = 1\nb = 2\n", "x = 1"))
    text = nb.with_sources({2: "x = 1\ny = 2\n"})
    assert '[\n    "x = 1\\n",\n    "y = 2\\n"\n   ]' in text
    assert json.loads(text)["cells"][1]["source"] == ["x = 1\n", "y = 2\n"]


def test_diff_shows_cells_and_writes_nothing(project):
    before = (project / "training.ipynb").read_bytes()
    code, out = run("check", "--no-cache", "--diff", "training.ipynb")
    assert code == 1 and (project / "training.ipynb").read_bytes() == before
    assert out.startswith("--- a/training.ipynb:cell 3\n+++ b/training.ipynb:cell 3\n")
    assert '-scaler = torch.cuda.amp.GradScaler()\n+scaler = torch.amp.GradScaler("cuda")\n' in out


def test_stdin_fix_prints_the_fixed_notebook(project, monkeypatch, capsys):
    data = (project / "training.ipynb").read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    main(["check", "--fix", "-", "--stdin-filename", "training.ipynb"])
    out = capsys.readouterr()
    fixed = data.replace(b"torch.cuda.amp.GradScaler()", b'torch.amp.GradScaler(\\"cuda\\")')
    assert out.out.encode() == fixed != data
    assert "training.ipynb:cell 5:7:27: GPU101" in out.err


def test_add_noqa_writes_into_the_cells(project):
    run("check", "--no-cache", "--add-noqa", "training.ipynb")
    after = (project / "training.ipynb").read_bytes()
    assert lint_source(after, "training.ipynb") == []
    nb = load(after)
    assert nb.cell(5).source.endswith('{loss.item():.3f}")  # noqa: GPU101')
    assert nb.cell(3).source.startswith("scaler = torch.cuda.amp.GradScaler()  # noqa: GPU201\n")


def _parsed(text: str) -> NotebookFile:
    return NotebookFile("nb.ipynb", Notebook.from_text(text))


def test_a_fix_across_cells_or_on_a_magic_line_is_not_offered():
    parsed = _parsed(_notebook("a = 1\n", "%time b = 2\nc = 3\n"))
    src = parsed.text
    assert src == "a = 1\npass\nc = 3\n"  # the joined source the rules saw

    def finding(line: int, start: int, end: int) -> Finding:
        fix = Fix("f", (Edit(start, end, "x"),))
        return Finding("nb.ipynb", line, 1, "GPU201", "m", Severity.WARNING, fix=fix)

    one, magic, c = src.index("1"), src.index("pass"), src.index("c")
    across = place_finding(parsed, finding(1, one, c))
    on_magic = place_finding(parsed, finding(2, magic, magic + 1))
    inside = place_finding(parsed, finding(1, one, one + 1))
    assert (across.cell, across.fix) == (1, None)
    assert (on_magic.cell, on_magic.line, on_magic.fix) == (2, 1, None)
    assert inside.fix == Fix("f", (Edit(4, 5, "x"),))
    # below a masked line, an offset into the cell's own text (not the masked one)
    below = place_finding(parsed, finding(3, c, c + 1))
    assert (below.cell, below.line) == (2, 2)
    assert below.fix == Fix("f", (Edit(len("%time b = 2\n"), len("%time b = 2\nc"), "x"),))


def test_a_fix_for_a_cell_that_changed_is_refused(project):
    from gpulint.fixes import choose_fixes

    text = (project / "training.ipynb").read_text(encoding="utf-8")

    def finding(cell: int, end: int) -> Finding:
        fix = Fix("f", (Edit(0, end, ""),))
        return Finding("training.ipynb", 1, 1, "GPU201", "m", Severity.WARNING, fix=fix, cell=cell)

    new, count, refused = choose_fixes(text, [finding(3, 10**6)], "training.ipynb")
    assert new == text and count == 0 and refused[0][1] == "the fix lies outside its cell"
    markdown = choose_fixes(text, [finding(1, 1)], "training.ipynb")
    assert markdown[:2] == (text, 0) and "no code cell" in markdown[2][0][1]


# -- cache, prefilter, editors, hooks -----------------------------------------------------------
def test_notebooks_go_through_the_result_cache(project):
    first = run("check", "--output-format", "json", ".")[1]
    (stored,) = list((project / ".gpulint_cache").glob("results-*.json"))
    assert '"cell":5' in stored.read_text()
    second = run("check", "--output-format", "json", ".")[1]
    assert json.loads(first)["findings"] == json.loads(second)["findings"]
    assert {f["cell"] for f in json.loads(second)["findings"]} == {3, 5, 8}


def test_the_prefilter_reads_the_cells_not_the_json():
    # `"` and a newline are escaped in the JSON text: a gate on them must still open
    linter = Linter(Config(root=Path.cwd()))
    data = TRAINING.read_bytes()
    gated, _ = linter.lint_bytes("training.ipynb", data, prefilter=True)
    ungated, _ = linter.lint_bytes("training.ipynb", data, prefilter=False)
    assert _places(gated) == _places(ungated) == EXPECTED
    assert linter.lint_bytes("x.ipynb", b'{"cells": [], "nbformat": 4}')[0] == []


def test_the_language_server_leaves_notebooks_alone(tmp_path):
    from gpulint.server.core import ConfigStore, lint_text

    path = tmp_path / "nb.ipynb"
    linter, _ = ConfigStore(tmp_path).linter_for(path)
    text = TRAINING.read_text(encoding="utf-8")
    assert lint_text(linter, path, path.as_uri(), text, "json").findings == []


def test_pre_commit_hooks_take_notebooks():
    import yaml

    hooks = yaml.safe_load((FIXTURES.parent.parent / ".pre-commit-hooks.yaml").read_text())
    assert all("jupyter" in hook["types_or"] for hook in hooks)


def test_the_fixture_is_what_jupyter_writes():
    """The fixture keeps nbformat's layout (indent 1, sorted keys, a final newline), so the
    byte-for-byte fix test above is about the layout users have."""
    text = TRAINING.read_text(encoding="utf-8")
    assert json.dumps(json.loads(text), indent=1, sort_keys=True, ensure_ascii=False) + "\n" == text


def test_flake8_leaves_notebooks_to_gpulint_check(project):
    """flake8 reads no notebooks; named to it (`--filename=*.ipynb`), the JSON parses as a
    Python expression, and the plugin stays silent rather than put cell findings on the
    JSON file's lines."""
    import subprocess
    import sys

    pytest.importorskip("flake8")
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", "--select=GPU", "--filename=*.ipynb", "."],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr
