"""The language server, headless: a pytest-lsp client starts `gpulint server` in a subprocess,
opens documents, reads diagnostics, applies code actions and hovers."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls.lsp.server")
pytest_lsp = pytest.importorskip("pytest_lsp")

from lsprotocol import types as lsp  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

from gpulint.rule import Invalid, all_rules  # noqa: E402
from gpulint.testing import example_filename  # noqa: E402

DEBOUNCE_MS = 300
TIMEOUT = 20.0

PYPROJECT = '[tool.gpulint]\nselect = ["GPU"]\n'
# Non-ASCII and an emoji on the finding's line, before it: the column must be counted in UTF-16.
TRAIN = 'import torch\nnote = "héllo 😀"; scaler = torch.cuda.amp.GradScaler()\n'


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=[sys.executable, "-m", "gpulint", "server", "--debounce", str(DEBOUNCE_MS)]
    )
)
async def client(lsp_client: LanguageClient, tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(PYPROJECT)
    lsp_client.registrations = []

    @lsp_client.feature(lsp.CLIENT_REGISTER_CAPABILITY)
    def register_capability(params: lsp.RegistrationParams):
        lsp_client.registrations.extend(params.registrations)

    capabilities = lsp.ClientCapabilities(
        workspace=lsp.WorkspaceClientCapabilities(
            did_change_watched_files=lsp.DidChangeWatchedFilesClientCapabilities(
                dynamic_registration=True
            )
        )
    )
    await lsp_client.initialize_session(
        lsp.InitializeParams(capabilities=capabilities, root_uri=project.as_uri())
    )
    yield
    await lsp_client.shutdown_session()


# -- helpers -----------------------------------------------------------------------------------
class Counter:
    """Counts publishDiagnostics per URI by wrapping the client's handler."""

    def __init__(self, client: LanguageClient):
        self.counts: dict[str, int] = {}
        self.versions: dict[str, int | None] = {}
        features = client.protocol.fm.features
        original = features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

        def counting(*args):
            params = args[-1]
            self.counts[params.uri] = self.counts.get(params.uri, 0) + 1
            self.versions[params.uri] = params.version
            return original(*args)

        features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = counting


async def published(client: LanguageClient, uri: str, send) -> list[lsp.Diagnostic]:
    """Send something, then wait until diagnostics for `uri` arrive; return them."""
    while True:
        waiter = asyncio.ensure_future(
            client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        )
        await asyncio.sleep(0)
        if send is not None:
            send()
            send = None
        params = await asyncio.wait_for(waiter, TIMEOUT)
        if params.uri == uri:
            return list(params.diagnostics)


def open_doc(client: LanguageClient, path: Path, text: str, language: str = "python", version=1):
    path.write_text(text, encoding="utf-8")
    return lambda: client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(
                uri=path.as_uri(), language_id=language, version=version, text=text
            )
        )
    )


def change_doc(client: LanguageClient, uri: str, text: str, version: int):
    return lambda: client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def utf16_offset(text: str, position: lsp.Position) -> int:
    """Code-point offset of an LSP (UTF-16) position, computed independently of the server."""
    lines = text.splitlines(keepends=True)
    start = sum(len(line) for line in lines[: position.line])
    line = lines[position.line] if position.line < len(lines) else ""
    units = 0
    for i, ch in enumerate(line):
        if units >= position.character:
            return start + i
        units += len(ch.encode("utf-16-le")) // 2
    return start + len(line.rstrip("\r\n"))


def apply_workspace_edit(text: str, edit: lsp.WorkspaceEdit, uri: str) -> str:
    edits = [
        e
        for change in edit.document_changes
        if change.text_document.uri == uri
        for e in change.edits
    ]
    spans = sorted(
        (
            (utf16_offset(text, e.range.start), utf16_offset(text, e.range.end), e.new_text)
            for e in edits
        ),
        reverse=True,
    )
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


async def actions_for(client: LanguageClient, uri: str, diagnostic: lsp.Diagnostic, only=None):
    return await client.text_document_code_action_async(
        lsp.CodeActionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            range=diagnostic.range,
            context=lsp.CodeActionContext(diagnostics=[diagnostic], only=only),
        )
    )


# -- tests -------------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_open_see_diagnostics_fix_them_and_see_them_go(client: LanguageClient, tmp_path):
    path = tmp_path / "project" / "train.py"
    uri = path.as_uri()
    diagnostics = await published(client, uri, open_doc(client, path, TRAIN))
    found = [d for d in diagnostics if d.code == "GPU201"]
    assert len(found) == 1, diagnostics
    d = found[0]
    assert d.source == "gpulint" and d.severity == lsp.DiagnosticSeverity.Warning
    # The rule's page, as ruff's server links each code.
    assert d.code_description is not None
    assert d.code_description.href.endswith("/docs/rules/GPU201.md")
    line = TRAIN.splitlines()[1]
    start = line.index("torch.cuda.amp.GradScaler")
    # 😀 is one code point but two UTF-16 units: the LSP column is one more than the code point's.
    assert d.range.start == lsp.Position(line=1, character=start + 1)
    assert d.range.end.character == start + 1 + len("torch.cuda.amp.GradScaler")

    actions = await actions_for(client, uri, d)
    fixes = [a for a in actions if a.is_preferred]
    assert len(fixes) == 1 and fixes[0].kind == lsp.CodeActionKind.QuickFix
    fixed = apply_workspace_edit(TRAIN, fixes[0].edit, uri)
    assert 'scaler = torch.amp.GradScaler("cuda")' in fixed and "😀" in fixed

    after = await published(client, uri, change_doc(client, uri, fixed, 2))
    assert [x for x in after if x.code == "GPU201"] == []


CHAIN = """import torch


def log_step(loss):
    return report(loss)


def report(loss):
    return {"loss": loss.item()}


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x.cuda(), y.cuda())
        loss.backward()
        optimizer.step()
        log_step(loss)
"""


@pytest.mark.asyncio
async def test_a_sync_reached_through_helpers_carries_its_chain(client: LanguageClient, tmp_path):
    path = tmp_path / "project" / "chain.py"
    uri = path.as_uri()
    diagnostics = await published(client, uri, open_doc(client, path, CHAIN))
    (d,) = [x for x in diagnostics if x.code == "GPU101"]
    assert d.range.start == lsp.Position(line=16, character=8)  # the call in the step loop
    assert [
        (r.location.uri, r.location.range.start.line, r.location.range.start.character, r.message)
        for r in d.related_information or []
    ] == [
        (uri, 4, 11, "`log_step()` calls `report()` here"),
        (uri, 8, 20, "`.item()` syncs here"),
    ]
    assert d.related_information[1].location.range.end == lsp.Position(line=8, character=31)


@pytest.mark.asyncio
async def test_noqa_action_silences_the_finding(client: LanguageClient, tmp_path):
    path = tmp_path / "project" / "amp.py"
    uri = path.as_uri()
    diagnostics = await published(client, uri, open_doc(client, path, TRAIN))
    d = next(x for x in diagnostics if x.code == "GPU201")
    actions = await actions_for(client, uri, d)
    noqa = [a for a in actions if "noqa" in a.title]
    assert len(noqa) == 1
    silenced = apply_workspace_edit(TRAIN, noqa[0].edit, uri)
    assert silenced.splitlines()[1].endswith("GradScaler()  # noqa: GPU201")
    after = await published(client, uri, change_doc(client, uri, silenced, 2))
    assert [x for x in after if x.code == "GPU201"] == []


@pytest.mark.asyncio
async def test_fix_all_source_action(client: LanguageClient, tmp_path):
    text = TRAIN + "with torch.cuda.amp.autocast(dtype=torch.bfloat16):\n    pass\n"
    path = tmp_path / "project" / "both.py"
    uri = path.as_uri()
    diagnostics = await published(client, uri, open_doc(client, path, text))
    assert sum(x.code == "GPU201" for x in diagnostics) == 2
    actions = await actions_for(client, uri, diagnostics[0], only=[lsp.CodeActionKind.SourceFixAll])
    assert [a.kind for a in actions] == ["source.fixAll.gpulint"]
    fixed = apply_workspace_edit(text, actions[0].edit, uri)
    after = await published(client, uri, change_doc(client, uri, fixed, 2))
    assert [x for x in after if x.code == "GPU201"] == []


@pytest.mark.asyncio
async def test_hover_shows_the_rule_documentation(client: LanguageClient, tmp_path):
    path = tmp_path / "project" / "hover.py"
    uri = path.as_uri()
    diagnostics = await published(client, uri, open_doc(client, path, TRAIN))
    d = next(x for x in diagnostics if x.code == "GPU201")
    hover = await client.text_document_hover_async(
        lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=d.range.start)
    )
    assert hover is not None and hover.contents.kind == lsp.MarkupKind.Markdown
    assert "GPU201" in hover.contents.value and "## What it does" in hover.contents.value
    nothing = await client.text_document_hover_async(
        lsp.HoverParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            position=lsp.Position(line=0, character=2),
        )
    )
    assert nothing is None


@pytest.mark.asyncio
async def test_hover_on_a_code_in_a_noqa_comment(client: LanguageClient, tmp_path):
    text = "import torch\nx = 1  # noqa: GPU101\n"
    path = tmp_path / "project" / "noqa_hover.py"
    uri = path.as_uri()
    await published(client, uri, open_doc(client, path, text))
    hover = await client.text_document_hover_async(
        lsp.HoverParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            position=lsp.Position(line=1, character=text.splitlines()[1].index("GPU101") + 2),
        )
    )
    assert hover is not None and hover.contents.value.startswith("**GPU101**")
    # the unused noqa's own finding (GPU003) spans the comment: it is what `noqa` shows
    hover = await client.text_document_hover_async(
        lsp.HoverParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            position=lsp.Position(line=1, character=text.splitlines()[1].index("noqa") + 1),
        )
    )
    assert hover is not None and hover.contents.value.startswith("**GPU003**")


@pytest.mark.asyncio
async def test_changes_are_debounced(client: LanguageClient, tmp_path):
    counter = Counter(client)
    path = tmp_path / "project" / "typing.py"
    uri = path.as_uri()
    await published(client, uri, open_doc(client, path, "import torch\n"))
    assert counter.counts[uri] == 1
    text = "import torch\n"
    for version, ch in enumerate("scaler = torch.cuda.amp.GradScaler()\n", start=2):
        text += ch
        change_doc(client, uri, text, version)()  # a burst of keystrokes
    last = version
    diagnostics = await published(client, uri, None)
    await asyncio.sleep(3 * DEBOUNCE_MS / 1000)
    assert counter.counts[uri] == 2, "one lint for the whole burst"
    assert counter.versions[uri] == last
    assert [x.code for x in diagnostics] == ["GPU201"]


@pytest.mark.asyncio
async def test_configuration_is_honoured_and_reloaded(client: LanguageClient, tmp_path):
    project = tmp_path / "project"
    (project / "pyproject.toml").write_text(PYPROJECT + 'ignore = ["GPU201"]\n')
    path = project / "cfg.py"
    uri = path.as_uri()
    assert await published(client, uri, open_doc(client, path, TRAIN)) == []
    watched = [r.method for r in client.registrations]
    assert watched == [lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES]  # the server asked to watch
    (project / "pyproject.toml").write_text(PYPROJECT)
    notify = lambda: client.workspace_did_change_watched_files(  # noqa: E731
        lsp.DidChangeWatchedFilesParams(
            changes=[
                lsp.FileEvent(
                    uri=(project / "pyproject.toml").as_uri(), type=lsp.FileChangeType.Changed
                )
            ]
        )
    )
    diagnostics = await published(client, uri, notify)
    assert [x.code for x in diagnostics] == ["GPU201"]


@pytest.mark.asyncio
async def test_in_memory_text_is_linted_not_the_file_on_disk(client: LanguageClient, tmp_path):
    path = tmp_path / "project" / "unsaved.py"
    path.write_text("import torch\n")
    uri = path.as_uri()
    send = lambda: client.text_document_did_open(  # noqa: E731
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=TRAIN)
        )
    )
    diagnostics = await published(client, uri, send)
    assert [x.code for x in diagnostics] == ["GPU201"]


def _example_per_language():
    """One INVALID example (without hardware targets) per front-end language in the catalog."""
    from gpulint.frontends import frontends

    suffix = {f.language: f.extensions[0] for f in frontends()}
    seen = {}
    for rule in all_rules():
        language = rule.languages()[0]
        if language in seen or language not in suffix:
            continue
        for example in rule.INVALID:
            case = example if isinstance(example, Invalid) else Invalid(example)
            if not case.targets:
                name = example_filename(rule)
                seen[language] = pytest.param(
                    rule.code, name, case.code, id=f"{language}-{rule.code}"
                )
                break
    return list(seen.values())


@pytest.mark.asyncio
@pytest.mark.parametrize(("code", "name", "text"), _example_per_language())
async def test_every_front_end_language_is_served(
    client: LanguageClient, tmp_path, code, name, text
):
    path = tmp_path / "project" / name
    uri = path.as_uri()
    diagnostics = await published(client, uri, open_doc(client, path, text, language="plaintext"))
    assert code in [x.code for x in diagnostics]


@pytest.mark.asyncio
async def test_closing_clears_diagnostics(client: LanguageClient, tmp_path):
    path = tmp_path / "project" / "closed.py"
    uri = path.as_uri()
    assert await published(client, uri, open_doc(client, path, TRAIN))
    close = lambda: client.text_document_did_close(  # noqa: E731
        lsp.DidCloseTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
    )
    assert await published(client, uri, close) == []


@pytest.mark.asyncio
async def test_save_relints_with_the_configuration_on_disk(client: LanguageClient, tmp_path):
    project = tmp_path / "project"
    pyproject = project / "pyproject.toml"
    pyproject.write_text(PYPROJECT + 'ignore = ["GPU2"]\n')
    path = project / "saved.py"
    uri = path.as_uri()
    assert await published(client, uri, open_doc(client, path, TRAIN)) == []
    pyproject.write_text(PYPROJECT)  # no file-watch notification this time
    os.utime(pyproject, ns=(1, 1))
    save = lambda: client.text_document_did_save(  # noqa: E731
        lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
    )
    assert [x.code for x in await published(client, uri, save)] == ["GPU201"]


# -- pull diagnostics (textDocument/diagnostic) -------------------------------------------------
@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=[sys.executable, "-m", "gpulint", "server", "--debounce", str(DEBOUNCE_MS)]
    )
)
async def pulling(lsp_client: LanguageClient, tmp_path: Path):
    """A client that pulls diagnostics (and can be asked to pull again)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(PYPROJECT)
    lsp_client.refreshes = 0
    features = lsp_client.protocol.fm.features
    original = features[lsp.WORKSPACE_DIAGNOSTIC_REFRESH]

    def refresh(*args):  # pytest-lsp answers it; counted on the way
        lsp_client.refreshes += 1
        return original(*args)

    features[lsp.WORKSPACE_DIAGNOSTIC_REFRESH] = refresh

    capabilities = lsp.ClientCapabilities(
        text_document=lsp.TextDocumentClientCapabilities(
            diagnostic=lsp.DiagnosticClientCapabilities()
        ),
        workspace=lsp.WorkspaceClientCapabilities(
            diagnostics=lsp.DiagnosticWorkspaceClientCapabilities(refresh_support=True)
        ),
    )
    result = await lsp_client.initialize_session(
        lsp.InitializeParams(capabilities=capabilities, root_uri=project.as_uri())
    )
    lsp_client.server_capabilities = result.capabilities
    yield
    await lsp_client.shutdown_session()


async def pull(client: LanguageClient, uri: str, previous: str | None = None):
    return await asyncio.wait_for(
        client.text_document_diagnostic_async(
            lsp.DocumentDiagnosticParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri), previous_result_id=previous
            )
        ),
        TIMEOUT,
    )


@pytest.mark.asyncio
async def test_pull_diagnostics(pulling, tmp_path):
    client = pulling
    provider = client.server_capabilities.diagnostic_provider
    assert provider is not None and provider.identifier == "gpulint"
    path = tmp_path / "project" / "train.py"
    uri = path.as_uri()
    open_doc(client, path, TRAIN)()
    report = await pull(client, uri)
    assert report.kind == "full"
    (d,) = [x for x in report.items if x.code == "GPU201"]
    assert d.code_description.href.endswith("/docs/rules/GPU201.md")
    assert d.range.start == lsp.Position(line=1, character=TRAIN.splitlines()[1].index("torch") + 1)
    # The same findings again: unchanged, by the result id.
    again = await pull(client, uri, report.result_id)
    assert again.kind == "unchanged" and again.result_id == report.result_id
    # An edit that fixes it: a full report without the finding.
    fixed = TRAIN.replace("torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")')
    change_doc(client, uri, fixed, 2)()
    after = await pull(client, uri, report.result_id)
    assert after.kind == "full" and [x for x in after.items if x.code == "GPU201"] == []
    # A client that pulls is not pushed to (it would show every finding twice).
    await asyncio.sleep(DEBOUNCE_MS / 1000 * 2)
    assert not any(client.diagnostics.get(uri, [])), client.diagnostics.get(uri)
    # A configuration change asks the client to pull again.
    client.workspace_did_change_watched_files(
        lsp.DidChangeWatchedFilesParams(
            changes=[
                lsp.FileEvent(
                    uri=(tmp_path / "project" / "pyproject.toml").as_uri(),
                    type=lsp.FileChangeType.Changed,
                )
            ]
        )
    )
    for _ in range(100):
        if client.refreshes:
            break
        await asyncio.sleep(0.1)
    assert client.refreshes >= 1
