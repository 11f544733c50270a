"""The gpulint language server (pygls 2): diagnostics as you type and on save, quick fixes,
noqa actions and rule documentation on hover, for every file type gpulint has a front-end for.

The event loop never lints. A lint runs in a worker thread (the analysis itself in gpulint's
supervised worker process), once per document version, a debounce after the last keystroke;
a version the user has already typed past is skipped, and its result is never published.
Requests read the cached result of the document's current version: a code action is a lookup
(fix and `noqa` edits are text edits at positions known from the result, prepared once per
version), a hover on one file never waits for another file's lint, and a request the client
cancels stops waiting without stopping the lint others may need.

Imported only by `gpulint server`: this module needs pygls (`pip install "gpulint[lsp]"`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from gpulint import __version__
from gpulint.diagnostics import UNUSED_NOQA, Edit, Finding, Severity, rule_url
from gpulint.rule import rule_by_code
from gpulint.ruledocs import rule_hover
from gpulint.server import positions
from gpulint.server.core import (
    CONFIG_FILE,
    ConfigStore,
    LintResult,
    NotebookCell,
    lint_notebook,
    lint_text,
)

log = logging.getLogger("gpulint.server")

SOURCE = "gpulint"
_CODE = re.compile(r"\bGPU\d{3}\b", re.IGNORECASE)
FIX_ALL_KIND = f"{lsp.CodeActionKind.SourceFixAll.value}.gpulint"
PREPARE_IDLE_S = 0.5  # verify fixes once typing has paused this long (or at the first action)
_SEVERITY = {
    Severity.ERROR: lsp.DiagnosticSeverity.Error,
    Severity.WARNING: lsp.DiagnosticSeverity.Warning,
    Severity.INFO: lsp.DiagnosticSeverity.Information,
}


class GpulintServer(LanguageServer):
    def __init__(self, debounce: float = 0.15):
        super().__init__(
            "gpulint",
            __version__,
            text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
            # LSP 3.17 notebook sync: Jupyter notebooks whose cells are Python, linted as one
            # notebook (cross-cell facts as `gpulint check` has them), published per cell.
            notebook_document_sync=lsp.NotebookDocumentSyncOptions(
                notebook_selector=[
                    lsp.NotebookDocumentFilterWithNotebook(
                        notebook="jupyter-notebook",
                        cells=[lsp.NotebookCellLanguage(language="python")],
                    )
                ],
                save=True,
            ),
        )
        self.debounce = debounce
        self.configs = ConfigStore()
        self.results: dict[str, tuple[int | None, LintResult]] = {}  # uri -> (version, result)
        self._pending: dict[str, asyncio.TimerHandle] = {}
        self._running: dict[str, tuple[int | None, asyncio.Future]] = {}
        self._shown_errors: set[str] = set()
        # One lint at a time (the analysis runs in one supervised worker process anyway); fix
        # verification beside it, so it never delays the next diagnostics.
        self._lints = ThreadPoolExecutor(1, thread_name_prefix="gpulint-lint")
        self._prepares = ThreadPoolExecutor(1, thread_name_prefix="gpulint-prepare")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._prepare_timers: dict[str, asyncio.TimerHandle] = {}
        self._preparing: dict[int, asyncio.Future] = {}
        # Pull diagnostics (textDocument/diagnostic): on when the client says it pulls; then
        # nothing is pushed, and a configuration change asks the client to pull again.
        self.pull = False
        self.pull_refresh = False
        # Notebooks: cell URI -> the notebook version its cached result was linted at (a
        # change in one cell can change another cell's findings), and the cells last published.
        self._cell_versions: dict[str, int] = {}
        self._published_cells: dict[str, set[str]] = {}
        self._told_ipynb_text: set[str] = set()

    # -- documents -------------------------------------------------------------------------------
    @staticmethod
    def path_of(uri: str) -> Path | None:
        if not uri.startswith("file:"):
            return None
        path = to_fs_path(uri)
        return Path(path) if path else None

    @property
    def encoding(self) -> str:
        encoding = self.workspace.position_encoding or lsp.PositionEncodingKind.Utf16
        return getattr(encoding, "value", encoding)

    def _version(self, uri: str) -> int | None | bool:
        """The open document's version (False: not open)."""
        # The workspace keys documents by unquoted URI (a cell's `#W0sZmlsZQ%3D%3D`)
        document = self.workspace.text_documents.get(unquote(uri))
        return False if document is None else document.version

    def notebook_of(self, uri: str) -> lsp.NotebookDocument | None:
        """The open notebook a cell URI (or a notebook URI) belongs to."""
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        return notebook or self.workspace.get_notebook_document(cell_uri=uri)

    def current(self, uri: str) -> LintResult | None:
        """The cached result of the document's current version, if there is one."""
        cached = self.results.get(uri)
        if cached is not None and cached[0] == self._version(uri):
            notebook = self.notebook_of(uri) if uri in self._cell_versions else None
            if notebook is not None and self._cell_versions[uri] != notebook.version:
                return None  # another cell changed since: this cell's findings may have too
            return cached[1]
        return None

    def latest(self, uri: str) -> LintResult | None:
        """The newest result for the document, of whatever version (hover: never waits)."""
        cached = self.results.get(uri)
        return cached[1] if cached is not None else None

    async def result(self, uri: str) -> LintResult | None:
        """The current version's result: cached, the running lint's, or a new lint (awaited
        off the event loop). Cancelling the request does not cancel the lint."""
        cached = self.current(uri)
        if cached is not None:
            return cached
        version = self._version(uri)
        if version is False:
            return None
        notebook = self.notebook_of(uri)
        if notebook is not None:
            future = self.start(notebook.uri)
            if future is None:
                return None
            await asyncio.shield(future)
            linted = self.results.get(uri)
            return linted[1] if linted is not None else None
        running = self._running.get(uri)
        future = running[1] if running and running[0] == version else self.start(uri)
        if future is None:
            return None
        return await asyncio.shield(future)

    def start(self, uri: str) -> asyncio.Future | None:
        """Lint the document's current text in the worker thread; publish when done."""
        self._pending.pop(uri, None)
        notebook = self.notebook_of(uri)
        if notebook is not None:
            return self.start_notebook(notebook)
        try:
            document = self.workspace.get_text_document(uri)
        except Exception:  # not open
            return None
        version = document.version
        running = self._running.get(uri)
        if running and running[0] == version:
            return running[1]
        loop = self._loop = asyncio.get_running_loop()
        future = loop.run_in_executor(
            self._lints, self._lint_job, uri, version, document.source, document.language_id
        )
        self._running[uri] = (version, future)

        def done(f: asyncio.Future) -> None:
            result = self._finished(uri, f)
            if result is None or self._version(uri) is False:
                return
            self.results[uri] = (version, result)
            if self._version(uri) == version:
                self._publish(uri, version, result)
                # Fix verification and the noqa line map, once per version, when the user
                # pauses (or at the first code action): never beside the next lint.
                self._cancel_prepare(uri)
                self._prepare_timers[uri] = loop.call_later(
                    PREPARE_IDLE_S, self.prepare, uri, result
                )

        future.add_done_callback(done)
        return future

    def _finished(self, uri: str, f: asyncio.Future) -> Any:
        """A lint job that ended: off the running table; its result, or None when it was
        cancelled or failed (logged)."""
        if self._running.get(uri, (None, None))[1] is f:
            self._running.pop(uri, None)
        if f.cancelled():
            return None
        if f.exception() is not None:
            log.error("lint of %s failed: %r", uri, f.exception())
            return None
        return f.result()

    def start_notebook(self, notebook: lsp.NotebookDocument) -> asyncio.Future:
        """Lint the notebook's cells, as they are now, as one notebook; publish every cell."""
        uri, version = notebook.uri, notebook.version
        self._pending.pop(uri, None)
        running = self._running.get(uri)
        if running and running[0] == version:
            return running[1]
        cells: list[NotebookCell] = []
        versions: dict[str, int | None] = {}
        for cell in notebook.cells:
            document = self.workspace.text_documents.get(unquote(cell.document))
            text = document.source if document is not None else ""
            language = document.language_id if document is not None else None
            if cell.kind == lsp.NotebookCellKind.Markup:
                kind = "markdown"
            else:  # a code cell in another language is counted, not analysed
                kind = "code" if language in (None, "python") else "raw"
            cells.append((cell.document, kind, text))
            versions[cell.document] = document.version if document is not None else None
        loop = self._loop = asyncio.get_running_loop()
        future = loop.run_in_executor(
            self._lints, self._notebook_job, uri, version, cells, notebook.metadata
        )
        self._running[uri] = (version, future)

        def done(f: asyncio.Future) -> None:
            results = self._finished(uri, f)
            now = self.workspace.get_notebook_document(notebook_uri=uri)
            if results is None or now is None:
                return
            for cell_uri, result in results.items():
                self.results[cell_uri] = (versions[cell_uri], result)
                self._cell_versions[cell_uri] = version
            if now.version == version:
                gone = self._published_cells.get(uri, set()) - set(results)
                for cell_uri in gone:  # cells deleted since the last publication
                    self._clear(cell_uri)
                self._published_cells[uri] = set(results)
                for cell_uri, result in results.items():
                    self._publish(cell_uri, versions[cell_uri], result)
                    self._cancel_prepare(cell_uri)
                    self._prepare_timers[cell_uri] = loop.call_later(
                        PREPARE_IDLE_S, self.prepare, cell_uri, result
                    )

        future.add_done_callback(done)
        return future

    def _notebook_job(
        self, uri: str, version: int, cells: list[NotebookCell], metadata: object
    ) -> dict[str, LintResult] | None:
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is None or notebook.version != version:
            return None  # typed past while waiting, or closed
        path = self.path_of(uri)
        self._config_error(path)
        linter, _ = self.configs.linter_for(path)
        return lint_notebook(linter, path, uri, cells, metadata)

    def _config_error(self, path: Path | None) -> None:
        linter, error = self.configs.linter_for(path)
        if error and error not in self._shown_errors:
            log.warning("%s", error)
            self._shown_errors.add(error)
            loop = self._loop  # set when the server starts, before any lint job runs
            if loop is not None:
                loop.call_soon_threadsafe(
                    self.window_show_message,
                    lsp.ShowMessageParams(type=lsp.MessageType.Error, message=error),
                )

    def _lint_job(
        self, uri: str, version: int | None, text: str, language_id: str | None
    ) -> LintResult | None:
        if self._version(uri) != version:
            return None  # typed past while waiting: the newer version has its own lint
        path = self.path_of(uri)
        if uri.lower().endswith(".ipynb") and uri not in self._told_ipynb_text:
            # The notebook's JSON as a text document: its findings belong in cells, which a
            # text document has not, so it gets none (open it as a notebook instead).
            self._told_ipynb_text.add(uri)
            log.info("%s: a notebook opened as text is not linted; open it as a notebook", uri)
            loop = self._loop
            if loop is not None:
                loop.call_soon_threadsafe(
                    self.window_log_message,
                    lsp.LogMessageParams(
                        type=lsp.MessageType.Info,
                        message=f"gpulint: {uri} is a notebook opened as JSON text: not linted "
                        "(open it as a notebook to see its findings by cell)",
                    ),
                )
        self._config_error(path)
        linter, _ = self.configs.linter_for(path)
        return lint_text(linter, path, uri, text, language_id)

    def prepare(self, uri: str, result: LintResult) -> asyncio.Future:
        """`result.prepare()` in its own thread, once."""
        self._prepare_timers.pop(uri, None)
        future = self._preparing.get(id(result))
        if future is None:
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(self._prepares, result.prepare)
            self._preparing[id(result)] = future
            future.add_done_callback(lambda _: self._preparing.pop(id(result), None))
        return future

    async def prepared(self, uri: str, result: LintResult) -> None:
        if result.verified_fixes is None:
            await asyncio.shield(self.prepare(uri, result))

    def _cancel_prepare(self, uri: str) -> None:
        timer = self._prepare_timers.pop(uri, None)
        if timer is not None:
            timer.cancel()

    def _publish(self, uri: str, version: int | None, result: LintResult) -> None:
        if self.pull:  # the client asks (textDocument/diagnostic); pushing too would show twice
            return
        diagnostics = [self.diagnostic(result, f, uri=uri) for f in result.findings]
        self.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version)
        )

    def publish(self, uri: str) -> None:
        """Lint now (no debounce) and publish."""
        self._loop = asyncio.get_running_loop()
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self.start(uri)

    def schedule(self, uri: str) -> None:
        """Lint `debounce` seconds after the last change, not on every keystroke."""
        self._cancel_prepare(uri)
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        if self.debounce <= 0:
            self.publish(uri)
            return
        loop = self._loop = asyncio.get_running_loop()
        self._pending[uri] = loop.call_later(self.debounce, self.start, uri)

    def forget(self, uri: str) -> None:
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self._running.pop(uri, None)
        self.results.pop(uri, None)
        self.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[])
        )

    def _clear(self, cell_uri: str) -> None:
        self._cancel_prepare(cell_uri)
        self.results.pop(cell_uri, None)
        self._cell_versions.pop(cell_uri, None)
        if not self.pull:
            self.text_document_publish_diagnostics(
                lsp.PublishDiagnosticsParams(uri=cell_uri, diagnostics=[])
            )

    def forget_notebook(self, uri: str, cells: Sequence[str]) -> None:
        """The notebook closed: clear every cell's diagnostics."""
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self._running.pop(uri, None)
        for cell_uri in {*cells, *self._published_cells.pop(uri, set())}:
            self._clear(cell_uri)

    def config_changed(self) -> None:
        """A pyproject.toml changed: reload the configuration and re-lint every open document."""
        self.configs.invalidate()
        self.results.clear()
        self._running.clear()
        self._shown_errors.clear()
        for uri in list(self.workspace.text_documents):
            if self.notebook_of(uri) is None:
                self.publish(uri)
        for uri in list(self.workspace.notebook_documents):
            self.publish(uri)
        if self.pull and self.pull_refresh:
            self.workspace_diagnostic_refresh(None)

    async def pull_report(
        self, uri: str, previous: str | None
    ) -> lsp.RelatedFullDocumentDiagnosticReport | lsp.RelatedUnchangedDocumentDiagnosticReport:
        """textDocument/diagnostic: the current version's findings (awaiting its lint), or
        "unchanged" when they are what the client holds. The result id is a digest of the
        diagnostics themselves, so a re-lint that finds the same things is unchanged too."""
        import hashlib

        result = await self.result(uri)
        items = [self.diagnostic(result, f, uri=uri) for f in result.findings] if result else []
        digest = hashlib.sha256(
            repr([(d.range, d.code, d.message, d.severity) for d in items]).encode()
        ).hexdigest()[:16]
        if previous == digest:
            return lsp.RelatedUnchangedDocumentDiagnosticReport(result_id=digest)
        return lsp.RelatedFullDocumentDiagnosticReport(items=items, result_id=digest)

    # -- code actions -----------------------------------------------------------------------------
    def actions(
        self,
        uri: str,
        version: int | None,
        result: LintResult,
        wanted: lsp.Range,
        only: Sequence[str] | None,
    ) -> list[lsp.CodeAction]:
        """The actions for the findings in `wanted`: lookups in the result, no lint, no parse.
        A whole-file range costs one pass over the findings."""
        actions: list[lsp.CodeAction] = []
        wants_quickfix = not only or any(k.startswith("quickfix") for k in only)
        wants_fix_all = not only or any(
            FIX_ALL_KIND.startswith(k) or k.startswith("source.fixAll") for k in only
        )
        verified = result.verified_fixes or set()  # `prepared` ran before
        if wants_quickfix:
            first, last = wanted.start.line + 1, wanted.end.line + 1
            for f in result.findings:
                if (f.end_line or f.line) < first or f.line > last:
                    continue
                f_range = self.finding_range(result, f)
                if not _overlaps(f_range, wanted):
                    continue
                diagnostic = self.diagnostic(result, f, f_range, uri)
                if f.fix is not None and f.fix.edits and id(f.fix) in verified:
                    edits = [self.text_edit(result, e) for e in sorted(set(f.fix.edits))]
                    actions.append(
                        lsp.CodeAction(
                            title=f"{f.code}: {f.fix.description}",
                            kind=lsp.CodeActionKind.QuickFix,
                            diagnostics=[diagnostic],
                            is_preferred=True,
                            edit=self.edit(uri, version, edits),
                        )
                    )
                noqa = result.noqa.edits([f]) if result.language else []
                if noqa:
                    actions.append(
                        lsp.CodeAction(
                            title=f"{f.code}: suppress on this line (noqa)",
                            kind=lsp.CodeActionKind.QuickFix,
                            diagnostics=[diagnostic],
                            edit=self.edit(uri, version, [self.text_edit(result, noqa[0])]),
                        )
                    )
        if wants_fix_all:
            everything = result.fix_all
            if everything is not None:
                actions.append(
                    lsp.CodeAction(
                        title="gpulint: apply every autofix in this file",
                        kind=FIX_ALL_KIND,
                        edit=self.edit(uri, version, [self.text_edit(result, everything)]),
                    )
                )
        return actions

    # -- positions -------------------------------------------------------------------------------
    def position(self, result: LintResult, line: int, col: int) -> lsp.Position:
        text = result.source.line_text(line)
        character = positions.character(text, col, self.encoding)
        if result.bom and line == 1:
            character += positions.units("\ufeff", self.encoding)
        return lsp.Position(line=max(line - 1, 0), character=character)

    def position_at(self, result: LintResult, offset: int) -> lsp.Position:
        return self.position(result, *result.source.position(offset))

    def finding_range(self, result: LintResult, f: Finding) -> lsp.Range:
        start = self.position(result, f.line, f.col)
        if f.end_line and f.end_col:
            end = self.position(result, f.end_line, f.end_col)
        else:  # a point finding: mark the rest of the line
            line_len = len(result.source.line_text(f.line))
            end = self.position(result, f.line, max(line_len + 1, f.col))
        return lsp.Range(start=start, end=end)

    def text_edit(self, result: LintResult, edit: Edit) -> lsp.TextEdit:
        return lsp.TextEdit(
            range=lsp.Range(
                start=self.position_at(result, edit.start), end=self.position_at(result, edit.end)
            ),
            new_text=edit.text,
        )

    def cursor(self, result: LintResult, position: lsp.Position) -> tuple[int, int]:
        """1-based (line, code-point column) of an LSP position."""
        line = position.line + 1
        text = result.source.line_text(line)
        char = position.character
        if result.bom and line == 1:
            char = max(char - positions.units("\ufeff", self.encoding), 0)
        return line, positions.column(text, char, self.encoding)

    # -- LSP objects ----------------------------------------------------------------------------
    def diagnostic(
        self,
        result: LintResult,
        f: Finding,
        f_range: lsp.Range | None = None,
        uri: str | None = None,
    ) -> lsp.Diagnostic:
        rule = rule_by_code(f.code)
        tags = [lsp.DiagnosticTag.Deprecated] if rule and "deprecated" in rule.tags else None
        return lsp.Diagnostic(
            range=f_range or self.finding_range(result, f),
            message=f.message,
            severity=_SEVERITY[f.severity],
            code=f.code,
            code_description=lsp.CodeDescription(href=rule_url(f.code)) if rule else None,
            source=SOURCE,
            tags=tags,
            data={"fixable": f.fix is not None, "line": f.line, "col": f.col, "trace": f.trace},
            related_information=self.related(result, f, uri) or None,
        )

    def related(
        self, result: LintResult, f: Finding, uri: str | None
    ) -> list[lsp.DiagnosticRelatedInformation]:
        """The finding's related locations (the calls down to a helper's sync): in this document
        at its positions, in another file of the tree by its path under the config's root."""
        out = []
        for r in f.related:
            if r.path == result.shown and result.cells and r.cell and r.cell <= len(result.cells):
                # Another place in this notebook: in its cell, at positions within that cell.
                target, text = result.cells[r.cell - 1]
                cell = LintResult(result.shown, text)
                start = self.position(cell, r.line, r.col)
                end = (
                    self.position(cell, r.end_line, r.end_col)
                    if r.end_line and r.end_col
                    else start
                )
            elif r.path == result.shown and uri is not None:
                start = self.position(result, r.line, r.col)
                end = (
                    self.position(result, r.end_line, r.end_col)
                    if r.end_line and r.end_col
                    else start
                )
                target = uri
            elif result.root is not None:
                # Another file, not open here: its columns as code points (exact for ASCII).
                start = lsp.Position(line=max(r.line - 1, 0), character=max(r.col - 1, 0))
                end_line, end_col = (
                    (r.end_line, r.end_col) if r.end_line and r.end_col else (r.line, r.col)
                )
                end = lsp.Position(line=max(end_line - 1, 0), character=max(end_col - 1, 0))
                target = (result.root / r.path).resolve().as_uri()
            else:
                continue
            out.append(
                lsp.DiagnosticRelatedInformation(
                    location=lsp.Location(uri=target, range=lsp.Range(start=start, end=end)),
                    message=r.message,
                )
            )
        return out

    def edit(self, uri: str, version: int | None, edits: list[lsp.TextEdit]) -> lsp.WorkspaceEdit:
        return lsp.WorkspaceEdit(
            document_changes=[
                lsp.TextDocumentEdit(
                    text_document=lsp.OptionalVersionedTextDocumentIdentifier(
                        uri=uri, version=version
                    ),
                    edits=edits,
                )
            ]
        )


def _overlaps(f_range: lsp.Range, wanted: lsp.Range) -> bool:
    def key(p: lsp.Position) -> tuple[int, int]:
        return (p.line, p.character)

    return key(f_range.start) <= key(wanted.end) and key(wanted.start) <= key(f_range.end)


def build_server(debounce: float = 0.15) -> GpulintServer:
    server = GpulintServer(debounce)

    @server.feature(lsp.INITIALIZED)
    def initialized(ls: GpulintServer, params: lsp.InitializedParams) -> None:
        document = ls.client_capabilities.text_document
        ls.pull = bool(document and document.diagnostic)
        workspace = ls.client_capabilities.workspace
        ls.pull_refresh = bool(
            workspace and workspace.diagnostics and workspace.diagnostics.refresh_support
        )
        root = ls.workspace.root_path
        if root:
            ls.configs = ConfigStore(Path(root))
        watch = ls.client_capabilities.workspace
        dynamic = (
            watch
            and watch.did_change_watched_files
            and watch.did_change_watched_files.dynamic_registration
        )
        if dynamic:
            ls.client_register_capability(
                lsp.RegistrationParams(
                    registrations=[
                        lsp.Registration(
                            id="gpulint-config-watch",
                            method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                            register_options=lsp.DidChangeWatchedFilesRegistrationOptions(
                                watchers=[lsp.FileSystemWatcher(glob_pattern=f"**/{CONFIG_FILE}")]
                            ),
                        )
                    ]
                )
            )

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: GpulintServer, params: lsp.DidOpenTextDocumentParams) -> None:
        ls.publish(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: GpulintServer, params: lsp.DidChangeTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: GpulintServer, params: lsp.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        if uri.endswith("/" + CONFIG_FILE):
            ls.config_changed()
        else:
            # A save re-lints, picking up configuration changes.
            ls.results.pop(uri, None)
            ls._running.pop(uri, None)
            ls.publish(uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: GpulintServer, params: lsp.DidCloseTextDocumentParams) -> None:
        ls.forget(params.text_document.uri)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_open(ls: GpulintServer, params: lsp.DidOpenNotebookDocumentParams) -> None:
        ls.publish(params.notebook_document.uri)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_change(ls: GpulintServer, params: lsp.DidChangeNotebookDocumentParams) -> None:
        change = params.change
        cells = change.cells if change else None
        if cells is not None and not cells.structure and not cells.text_content:
            return  # only metadata or execution summaries changed: the findings cannot
        ls.schedule(params.notebook_document.uri)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_save(ls: GpulintServer, params: lsp.DidSaveNotebookDocumentParams) -> None:
        uri = params.notebook_document.uri
        ls._running.pop(uri, None)
        notebook = ls.workspace.get_notebook_document(notebook_uri=uri)
        for cell in notebook.cells if notebook else []:
            ls._cell_versions.pop(cell.document, None)  # re-lint, with the config on disk
        ls.publish(uri)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_close(ls: GpulintServer, params: lsp.DidCloseNotebookDocumentParams) -> None:
        ls.forget_notebook(
            params.notebook_document.uri, [c.uri for c in params.cell_text_documents]
        )

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched_files(ls: GpulintServer, params: lsp.DidChangeWatchedFilesParams) -> None:
        if any(change.uri.endswith("/" + CONFIG_FILE) for change in params.changes):
            ls.config_changed()

    @server.feature(
        lsp.TEXT_DOCUMENT_CODE_ACTION,
        lsp.CodeActionOptions(
            code_action_kinds=[lsp.CodeActionKind.QuickFix, lsp.CodeActionKind.SourceFixAll]
        ),
    )
    async def code_action(ls: GpulintServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
        uri = params.text_document.uri
        result = await ls.result(uri)
        if result is None:
            return []
        await ls.prepared(uri, result)
        version = ls.results[uri][0] if uri in ls.results else None
        return ls.actions(uri, version, result, params.range, params.context.only)

    @server.feature(
        lsp.TEXT_DOCUMENT_DIAGNOSTIC,
        # inter_file_dependencies: a CUDA file's findings depend on its callers' files.
        lsp.DiagnosticOptions(
            identifier=SOURCE, inter_file_dependencies=True, workspace_diagnostics=False
        ),
    )
    async def diagnostic(
        ls: GpulintServer, params: lsp.DocumentDiagnosticParams
    ) -> lsp.RelatedFullDocumentDiagnosticReport | lsp.RelatedUnchangedDocumentDiagnosticReport:
        return await ls.pull_report(params.text_document.uri, params.previous_result_id)

    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    async def hover(ls: GpulintServer, params: lsp.HoverParams) -> lsp.Hover | None:
        uri = params.text_document.uri
        # The newest result there is; only a document never linted yet waits for its own lint.
        result = ls.current(uri) or ls.latest(uri) or await ls.result(uri)
        if result is None:
            return None
        line, col = ls.cursor(result, params.position)
        here = (line, col)

        def finding_hover(on_noqa: bool) -> lsp.Hover | None:
            for f in result.findings:
                if (f.code == UNUSED_NOQA) != on_noqa:
                    continue
                start = (f.line, f.col)
                end = (f.end_line or f.line, f.end_col or 10**9)
                rule = rule_by_code(f.code)
                if rule is not None and start <= here <= end:
                    return lsp.Hover(
                        contents=lsp.MarkupContent(
                            kind=lsp.MarkupKind.Markdown, value=rule_hover(rule, f.message)
                        ),
                        range=ls.finding_range(result, f),
                    )
            return None

        found = finding_hover(False)
        if found is not None:
            return found
        # A rule code under the cursor, as in the code list of a noqa comment (before the
        # GPU003 finding that spans the whole comment, when it is unused).
        for m in _CODE.finditer(result.source.line_text(line)):
            rule = rule_by_code(m.group(0))
            if rule is not None and m.start() + 1 <= col <= m.end() + 1:
                return lsp.Hover(
                    contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=rule_hover(rule))
                )
        return finding_hover(True)

    return server


def serve(args) -> int:
    server = build_server(debounce=max(args.debounce, 0) / 1000.0)
    if args.tcp:
        server.start_tcp(args.host, args.port)
    else:
        server.start_io()
    return 0
