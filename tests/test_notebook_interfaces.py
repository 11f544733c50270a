"""One notebook fixture through every interface: `gpulint check` (text and JSON), SARIF, the
pre-commit hook's entry and the language server (LSP notebook sync, diagnostics per cell
document) give the same findings: code, cell, line, column and message."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls.lsp.server")
pytest_lsp = pytest.importorskip("pytest_lsp")
yaml = pytest.importorskip("yaml")

from lsprotocol import types as lsp  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

from gpulint.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# Cells with a per-step `.item()` in a training loop (under a `%time` line, and in a `%%time`
# cell), line magics and a shell escape, a `%%bash` cell, markdown and raw cells, and a cell
# whose finding carries a noqa comment for GPU101.
FIXTURE = ROOT / "fixtures" / "notebooks" / "training.ipynb"
PYPROJECT = '[tool.gpulint]\nselect = ["GPU"]\n'
TIMEOUT = 30.0


def run_cli(*args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(list(args))
    return out.getvalue()


def cli_findings(name: str) -> set[tuple]:
    data = json.loads(run_cli("check", "--no-cache", "--output-format", "json", name))
    return {(f["code"], f["cell"], f["line"], f["col"], f["message"]) for f in data["findings"]}


def text_findings(output: str) -> set[tuple]:
    found = set()
    for line in output.splitlines():
        _, cell, row, col, rest = line.split(":", 4)
        code, message = rest.strip().split(" ", 1)
        found.add((code, int(cell.removeprefix("cell ")), int(row), int(col), message))
    return found


def sarif_findings(name: str) -> set[tuple]:
    sarif = json.loads(run_cli("check", "--no-cache", "--output-format", "sarif", name))
    found = set()
    for r in sarif["runs"][0]["results"]:
        region = r["locations"][0]["physicalLocation"]["region"]
        found.add(
            (
                r["ruleId"],
                r["properties"]["cell"],
                region["startLine"],
                region["startColumn"],
                r["message"]["text"],
            )
        )
    return found


def pre_commit_findings(name: str) -> set[tuple]:
    """The `gpulint` hook's entry, run as pre-commit runs it: the entry, then the staged files."""
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    (hook,) = [h for h in hooks if h["id"] == "gpulint"]
    assert "jupyter" in hook["types_or"]
    argv = shlex.split(hook["entry"])
    assert argv[0] == "gpulint"
    return text_findings(run_cli(*argv[1:], "--no-cache", "--quiet", name))


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=[sys.executable, "-m", "gpulint", "server", "--debounce", "50"]
    )
)
async def client(lsp_client: LanguageClient, tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(PYPROJECT)
    shutil.copy(FIXTURE, project / "training.ipynb")
    lsp_client.published = {}
    features = lsp_client.protocol.fm.features
    original = features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

    def keep(*args):
        params = args[-1]
        lsp_client.published[params.uri] = list(params.diagnostics)
        return original(*args)

    features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = keep
    # Like VS Code: a client that syncs notebooks (the server advertises it to such clients).
    capabilities = lsp.ClientCapabilities(
        notebook_document=lsp.NotebookDocumentClientCapabilities(
            synchronization=lsp.NotebookDocumentSyncClientCapabilities()
        )
    )
    result = await lsp_client.initialize_session(
        lsp.InitializeParams(capabilities=capabilities, root_uri=project.as_uri())
    )
    lsp_client.server_capabilities = result.capabilities
    yield
    await lsp_client.shutdown_session()


def open_notebook(client: LanguageClient, path: Path) -> tuple[list[lsp.NotebookCell], list]:
    """Open the notebook as VS Code does (a `vscode-notebook-cell:` document per cell)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    uri = path.as_uri()
    cells, documents = [], []
    for i, raw in enumerate(data["cells"]):
        cell_uri = f"vscode-notebook-cell:{path.as_posix()}#W{i}sZmlsZQ%3D%3D"
        source = raw["source"]
        text = "".join(source) if isinstance(source, list) else source
        language = {"code": "python", "markdown": "markdown"}.get(raw["cell_type"], "raw")
        kind = lsp.NotebookCellKind.Markup if language == "markdown" else lsp.NotebookCellKind.Code
        cells.append(lsp.NotebookCell(kind=kind, document=cell_uri))
        documents.append(
            lsp.TextDocumentItem(uri=cell_uri, language_id=language, version=1, text=text)
        )
    client.notebook_document_did_open(
        lsp.DidOpenNotebookDocumentParams(
            notebook_document=lsp.NotebookDocument(
                uri=uri,
                notebook_type="jupyter-notebook",
                version=1,
                cells=cells,
                metadata=data.get("metadata"),
            ),
            cell_text_documents=documents,
        )
    )
    return cells, documents


async def wait_for(client: LanguageClient, condition) -> None:
    for _ in range(int(TIMEOUT / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the server did not publish what was expected")


async def lsp_findings(client: LanguageClient, path: Path) -> set[tuple]:
    """Open the notebook and read the diagnostics published for each cell."""
    cells, _ = open_notebook(client, path)
    wanted = [c.document for c in cells]
    await wait_for(client, lambda: all(u in client.published for u in wanted))
    found = set()
    for number, cell_uri in enumerate(wanted, 1):
        for d in client.published[cell_uri]:
            assert d.code_description is not None and d.code_description.href.endswith(
                f"/docs/rules/{d.code}.md"
            )
            # ASCII cells: the UTF-16 character is the code-point column, 0-based
            found.add(
                (d.code, number, d.range.start.line + 1, d.range.start.character + 1, d.message)
            )
    return found


@pytest.mark.asyncio
async def test_one_notebook_gives_the_same_findings_in_every_interface(
    client: LanguageClient, tmp_path, monkeypatch
):
    sync = client.server_capabilities.notebook_document_sync
    assert sync is not None
    (selector,) = sync.notebook_selector
    assert selector.notebook == "jupyter-notebook"
    assert [c.language for c in selector.cells] == ["python"]

    project = tmp_path / "project"
    monkeypatch.chdir(project)
    name = "training.ipynb"
    expected = cli_findings(name)
    # The fixture's findings: the deprecated GradScaler (cell 3), the per-step `.item()` of the
    # loop in cell 5 and of the `%%time` cell 8; not the `%%bash` cell 6, the raw cell 9 nor
    # cell 7's, which carries a noqa.
    places = {(code, cell, line, col) for code, cell, line, col, _ in expected}
    assert {(3, 1, 10, "GPU201"), (5, 7, 27, "GPU101"), (8, 6, 14, "GPU101")} <= {
        (cell, line, col, code) for code, cell, line, col in places
    }
    assert not {cell for _, cell, *_ in expected} & {6, 7, 9}

    text = text_findings(run_cli("check", "--no-cache", "--quiet", name))
    assert text == expected
    assert sarif_findings(name) == expected
    assert pre_commit_findings(name) == expected
    assert await lsp_findings(client, project / name) == expected


@pytest.mark.asyncio
async def test_notebook_edits_cell_changes_and_close(client: LanguageClient, tmp_path):
    path = tmp_path / "project" / "training.ipynb"
    cells, documents = open_notebook(client, path)
    uris = [c.document for c in cells]
    await wait_for(client, lambda: all(u in client.published for u in uris))
    loop_cell = uris[4]  # cell 5: the training loop
    assert [d.code for d in client.published[loop_cell]] == ["GPU101"]
    assert [d.code for d in client.published[uris[2]]] == ["GPU201"]

    # A text edit in one cell: the loop no longer reads the loss back (prints the step).
    text = documents[4].text
    start = text.index("loss.item()")
    before = text[:start]
    position = lsp.Position(line=before.count("\n"), character=len(before.rsplit("\n", 1)[-1]))
    end = lsp.Position(line=position.line, character=position.character + len("loss.item()"))
    client.published.pop(loop_cell)
    client.notebook_document_did_change(
        lsp.DidChangeNotebookDocumentParams(
            notebook_document=lsp.VersionedNotebookDocumentIdentifier(version=2, uri=path.as_uri()),
            change=lsp.NotebookDocumentChangeEvent(
                cells=lsp.NotebookDocumentCellChanges(
                    text_content=[
                        lsp.NotebookDocumentCellContentChanges(
                            document=lsp.VersionedTextDocumentIdentifier(uri=loop_cell, version=2),
                            changes=[
                                lsp.TextDocumentContentChangePartial(
                                    range=lsp.Range(start=position, end=end), text="step"
                                )
                            ],
                        )
                    ]
                )
            ),
        )
    )
    await wait_for(client, lambda: loop_cell in client.published)
    assert client.published[loop_cell] == []

    # A structure change: cell 3 (the GradScaler) deleted; its diagnostics are cleared and the
    # `%%time` cell, now cell 7, keeps its finding.
    client.published.clear()
    client.notebook_document_did_change(
        lsp.DidChangeNotebookDocumentParams(
            notebook_document=lsp.VersionedNotebookDocumentIdentifier(version=3, uri=path.as_uri()),
            change=lsp.NotebookDocumentChangeEvent(
                cells=lsp.NotebookDocumentCellChanges(
                    structure=lsp.NotebookDocumentCellChangeStructure(
                        array=lsp.NotebookCellArrayChange(start=2, delete_count=1),
                        did_close=[lsp.TextDocumentIdentifier(uri=uris[2])],
                    )
                )
            ),
        )
    )
    await wait_for(client, lambda: uris[2] in client.published and uris[7] in client.published)
    assert client.published[uris[2]] == []
    (timed,) = client.published[uris[7]]
    assert timed.code == "GPU101" and "at cell 7, line 2" in timed.message

    # Closing the notebook clears every cell.
    client.published.clear()
    client.notebook_document_did_close(
        lsp.DidCloseNotebookDocumentParams(
            notebook_document=lsp.NotebookDocumentIdentifier(uri=path.as_uri()),
            cell_text_documents=[
                lsp.TextDocumentIdentifier(uri=u) for i, u in enumerate(uris) if i != 2
            ],
        )
    )
    await wait_for(client, lambda: uris[7] in client.published)
    assert client.published[uris[7]] == []


@pytest.mark.asyncio
async def test_a_notebook_opened_as_json_text_gets_no_diagnostics(client: LanguageClient, tmp_path):
    path = tmp_path / "project" / "training.ipynb"
    uri = path.as_uri()
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(
                uri=uri, language_id="json", version=1, text=path.read_text(encoding="utf-8")
            )
        )
    )
    message = await asyncio.wait_for(client.wait_for_notification(lsp.WINDOW_LOG_MESSAGE), TIMEOUT)
    assert "opened as JSON text" in message.message
    await wait_for(client, lambda: uri in client.published)
    assert client.published[uri] == []


@pytest.mark.asyncio
async def test_pull_diagnostics_for_a_cell(client: LanguageClient, tmp_path):
    path = tmp_path / "project" / "training.ipynb"
    cells, _ = open_notebook(client, path)
    report = await asyncio.wait_for(
        client.text_document_diagnostic_async(
            lsp.DocumentDiagnosticParams(
                text_document=lsp.TextDocumentIdentifier(uri=cells[4].document)
            )
        ),
        TIMEOUT,
    )
    assert [(d.code, d.range.start.line, d.range.start.character) for d in report.items] == [
        ("GPU101", 6, 26)
    ]


@pytest.mark.asyncio
async def test_cell_quick_fix_noqa_and_hover(client: LanguageClient, tmp_path):
    path = tmp_path / "project" / "training.ipynb"
    cells, documents = open_notebook(client, path)
    uris = [c.document for c in cells]
    await wait_for(client, lambda: uris[2] in client.published)
    (scaler,) = client.published[uris[2]]  # cell 3: torch.cuda.amp.GradScaler()
    actions = await asyncio.wait_for(
        client.text_document_code_action_async(
            lsp.CodeActionParams(
                text_document=lsp.TextDocumentIdentifier(uri=uris[2]),
                range=scaler.range,
                context=lsp.CodeActionContext(diagnostics=[scaler]),
            )
        ),
        TIMEOUT,
    )
    by_title = {a.title: a for a in actions}
    noqa = by_title["GPU201: suppress on this line (noqa)"]
    (change,) = noqa.edit.document_changes
    assert change.text_document.uri == uris[2]  # the cell's document, at its own line
    (edit,) = change.edits
    first_line = documents[2].text.splitlines()[0]
    assert edit.range.start == lsp.Position(line=0, character=len(first_line))
    assert "noqa: GPU201" in edit.new_text
    fixes = [a for a in actions if a.is_preferred]
    assert fixes and fixes[0].edit.document_changes[0].text_document.uri == uris[2]
    hover = await asyncio.wait_for(
        client.text_document_hover_async(
            lsp.HoverParams(
                text_document=lsp.TextDocumentIdentifier(uri=uris[2]),
                position=scaler.range.start,
            )
        ),
        TIMEOUT,
    )
    assert hover is not None and "GPU201" in hover.contents.value
