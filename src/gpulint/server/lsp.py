"""The gpulint language server (pygls 2): diagnostics as you type and on save, quick fixes,
noqa actions and rule documentation on hover, for every file type gpulint has a front-end for.

Imported only by `gpulint server`: this module needs pygls (`pip install "gpulint[lsp]"`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from gpulint import __version__
from gpulint.diagnostics import Edit, Finding, Severity
from gpulint.rule import rule_by_code
from gpulint.ruledocs import rule_hover
from gpulint.server import positions
from gpulint.server.core import (
    CONFIG_FILE,
    ConfigStore,
    LintResult,
    fix_all_edit,
    fix_edits,
    lint_text,
    noqa_edit,
    suppresses,
)

log = logging.getLogger("gpulint.server")

SOURCE = "gpulint"
_CODE = re.compile(r"\bGPU\d{3}\b", re.IGNORECASE)
FIX_ALL_KIND = f"{lsp.CodeActionKind.SourceFixAll.value}.gpulint"
_SEVERITY = {
    Severity.ERROR: lsp.DiagnosticSeverity.Error,
    Severity.WARNING: lsp.DiagnosticSeverity.Warning,
    Severity.INFO: lsp.DiagnosticSeverity.Information,
}


class GpulintServer(LanguageServer):
    def __init__(self, debounce: float = 0.3):
        super().__init__(
            "gpulint", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental
        )
        self.debounce = debounce
        self.configs = ConfigStore()
        self.results: dict[str, tuple[int | None, LintResult]] = {}  # uri -> (version, result)
        self._pending: dict[str, asyncio.TimerHandle] = {}
        self._shown_errors: set[str] = set()

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

    def lint(self, uri: str) -> LintResult | None:
        """Lint the open document's current text; cached per document version."""
        try:
            document = self.workspace.get_text_document(uri)
        except Exception:  # not open
            return None
        cached = self.results.get(uri)
        if cached and cached[0] is not None and cached[0] == document.version:
            return cached[1]
        path = self.path_of(uri)
        linter, error = self.configs.linter_for(path)
        if error and error not in self._shown_errors:
            log.warning("%s", error)
            self._shown_errors.add(error)
            self.window_show_message(
                lsp.ShowMessageParams(type=lsp.MessageType.Error, message=error)
            )
        result = lint_text(linter, path, uri, document.source, document.language_id)
        self.results[uri] = (document.version, result)
        return result

    def publish(self, uri: str) -> None:
        self._pending.pop(uri, None)
        result = self.lint(uri)
        if result is None:
            return
        version = self.results[uri][0]
        diagnostics = [self.diagnostic(result, f) for f in result.findings]
        self.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version)
        )

    def schedule(self, uri: str) -> None:
        """Lint `debounce` seconds after the last change, not on every keystroke."""
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        if self.debounce <= 0:
            self.publish(uri)
            return
        loop = asyncio.get_running_loop()
        self._pending[uri] = loop.call_later(self.debounce, self.publish, uri)

    def forget(self, uri: str) -> None:
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self.results.pop(uri, None)
        self.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[])
        )

    def config_changed(self) -> None:
        """A pyproject.toml changed: reload the configuration and re-lint every open document."""
        self.configs.invalidate()
        self.results.clear()
        self._shown_errors.clear()
        for uri in list(self.workspace.text_documents):
            self.publish(uri)

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
    def diagnostic(self, result: LintResult, f: Finding) -> lsp.Diagnostic:
        rule = rule_by_code(f.code)
        tags = [lsp.DiagnosticTag.Deprecated] if rule and "deprecated" in rule.tags else None
        return lsp.Diagnostic(
            range=self.finding_range(result, f),
            message=f.message,
            severity=_SEVERITY[f.severity],
            code=f.code,
            source=SOURCE,
            tags=tags,
            data={"fixable": f.fix is not None, "line": f.line, "col": f.col},
        )

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


def build_server(debounce: float = 0.3) -> GpulintServer:
    server = GpulintServer(debounce)

    @server.feature(lsp.INITIALIZED)
    def initialized(ls: GpulintServer, params: lsp.InitializedParams) -> None:
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
            ls.results.pop(uri, None)  # a save re-lints, picking up configuration changes
            ls.publish(uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: GpulintServer, params: lsp.DidCloseTextDocumentParams) -> None:
        ls.forget(params.text_document.uri)

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
    def code_action(ls: GpulintServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
        uri = params.text_document.uri
        result = ls.lint(uri)
        if result is None:
            return []
        version = ls.results[uri][0]
        only = params.context.only
        actions: list[lsp.CodeAction] = []
        wants_quickfix = not only or any(k.startswith("quickfix") for k in only)
        wants_fix_all = not only or any(
            FIX_ALL_KIND.startswith(k) or k.startswith("source.fixAll") for k in only
        )
        linter, _ = ls.configs.linter_for(ls.path_of(uri))
        if wants_quickfix:
            for f in result.findings:
                f_range = ls.finding_range(result, f)
                if not _overlaps(f_range, params.range):
                    continue
                diagnostic = ls.diagnostic(result, f)
                edits = fix_edits(result, f)
                if edits:
                    actions.append(
                        lsp.CodeAction(
                            title=f"{f.code}: {f.fix.description}",  # type: ignore[union-attr]
                            kind=lsp.CodeActionKind.QuickFix,
                            diagnostics=[diagnostic],
                            is_preferred=True,
                            edit=ls.edit(uri, version, [ls.text_edit(result, e) for e in edits]),
                        )
                    )
                noqa = noqa_edit(result, f)
                if noqa is not None and suppresses(linter, result, f, noqa):
                    actions.append(
                        lsp.CodeAction(
                            title=f"{f.code}: suppress on this line (noqa)",
                            kind=lsp.CodeActionKind.QuickFix,
                            diagnostics=[diagnostic],
                            edit=ls.edit(uri, version, [ls.text_edit(result, noqa)]),
                        )
                    )
        if wants_fix_all:
            everything = fix_all_edit(result)
            if everything is not None:
                actions.append(
                    lsp.CodeAction(
                        title="gpulint: apply every autofix in this file",
                        kind=FIX_ALL_KIND,
                        edit=ls.edit(uri, version, [ls.text_edit(result, everything)]),
                    )
                )
        return actions

    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    def hover(ls: GpulintServer, params: lsp.HoverParams) -> lsp.Hover | None:
        result = ls.lint(params.text_document.uri)
        if result is None:
            return None
        line, col = ls.cursor(result, params.position)
        here = (line, col)
        for f in result.findings:
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
        # A rule code under the cursor, as in the code list of a noqa comment.
        for m in _CODE.finditer(result.source.line_text(line)):
            rule = rule_by_code(m.group(0))
            if rule is not None and m.start() + 1 <= col <= m.end() + 1:
                return lsp.Hover(
                    contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=rule_hover(rule))
                )
        return None

    return server


def serve(args) -> int:
    server = build_server(debounce=max(args.debounce, 0) / 1000.0)
    if args.tcp:
        server.start_tcp(args.host, args.port)
    else:
        server.start_io()
    return 0
