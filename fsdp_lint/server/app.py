"""The language server: LSP messages in, the engine's findings, fixes and docs out.

- ``didOpen`` and ``didSave`` lint at once; ``didChange`` lints ``debounceMs`` after the last
  change (each change restarts the wait); ``didClose`` clears the document's diagnostics.
- Documents are synchronised in full (``TextDocumentSyncKind.Full``): the server then holds
  exactly the editor's text, whatever characters it contains.  Each document keeps its last
  parse, and an edit re-parses only the top-level statements it touched (``incremental``).
- A changed ``pyproject.toml`` (``didChangeWatchedFiles``, registered for ``**/pyproject.toml``
  when the client allows it, or saved in the editor) or new client settings
  (``didChangeConfiguration``) re-read the configuration and re-lint every open document.
- Notebook documents (``notebookDocument/didOpen``, ``didChange``, ``didSave``,
  ``didClose``): the Python code cells are linted together (``notebooks``), findings and
  quick fixes are on each cell's document.
- The server never runs the code it reads and never imports torch or the user's modules:
  ``fsdp-lint verify`` stays a command-line action.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Dict, Optional

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from fsdp_lint import __version__
from fsdp_lint.config import ConfigError
from fsdp_lint.server import actions, hover, notebooks
from fsdp_lint.server.incremental import ParseCache
from fsdp_lint.server.linting import DocumentLint, document_path, is_python_document, lint_document
from fsdp_lint.server.lsp_diagnostics import document_diagnostics
from fsdp_lint.server.settings import ClientSettings, parse_client_settings
from fsdp_lint.server.text_index import TextIndex

log = logging.getLogger(__name__)
WATCH_ID = "fsdp-lint-pyproject-watcher"
CONFIG_FILE = "pyproject.toml"


class FsdpLintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "fsdp-lint", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full,
            notebook_document_sync=notebooks.SYNC,
        )
        self.client_settings = ClientSettings()
        self.lint_settings = None
        self.settings_error: Optional[str] = None
        self.generation = 0  # bumped whenever settings are re-read: earlier lints are stale
        self.results: Dict[str, DocumentLint] = {}
        self.timers: Dict[str, asyncio.TimerHandle] = {}
        self.parses: Dict[str, ParseCache] = {}
        self.notebooks: Dict[str, notebooks.NotebookLint] = {}  # notebook URI -> its last lint
        self._shown_errors: set = set()

    # -- settings -------------------------------------------------------------------
    def apply_client_settings(self, raw) -> None:
        self.client_settings, problems = parse_client_settings(raw)
        for problem in problems:
            self.show_once(f"fsdp-lint: settings: {problem}", types.MessageType.Warning)
        self.reload_settings()

    def reload_settings(self) -> None:
        self.generation += 1
        try:
            self.lint_settings = self.client_settings.lint_settings()
            self.settings_error = None
        except ConfigError as exc:
            self.lint_settings = None
            self.settings_error = str(exc)

    def show_once(self, message: str, kind: types.MessageType) -> None:
        if message not in self._shown_errors:
            self._shown_errors.add(message)
            self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    # -- documents ------------------------------------------------------------------
    @property
    def encoding(self) -> str:
        return str(self.workspace.position_encoding or types.PositionEncodingKind.Utf16.value)

    def notebook_of(self, uri: str) -> Optional[str]:
        """The notebook's URI when ``uri`` is a notebook or one of its cells, else None."""
        if uri in self.workspace.notebook_documents:
            return uri
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        return notebook.uri if notebook is not None else None

    def lint_notebook(self, uri: str, republish: bool = True) -> Optional[notebooks.NotebookLint]:
        """Lint the notebook and publish each cell's diagnostics; without ``republish``, a
        notebook whose text was linted already is answered from that lint, silently."""
        timer = self.timers.pop(uri, None)
        if timer is not None:
            timer.cancel()
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is None:
            return None
        if self.lint_settings is None and self.settings_error is None:
            self.reload_settings()
        cells = notebooks.code_cells(
            notebook,
            lambda cell: self.workspace.get_text_document(cell).source,
            lambda cell: self.workspace.get_text_document(cell).language_id,
        )
        text = notebooks.joined(cells)
        previous = self.notebooks.get(uri)
        if previous is not None and previous.lint.generation == self.generation and previous.lint.text == text:
            nb = notebooks.NotebookLint(previous.lint, cells, previous.markers)
            if not republish and [c for c, _ in cells] == [c for c, _ in previous.cells]:
                return nb
        else:
            path = document_path(uri, to_fs_path(uri), self.workspace.root_path)
            parser = self.parses.setdefault(uri, ParseCache()).parse
            lint = lint_document(uri, path, notebook.version, text, self.lint_settings, self.settings_error, parser)
            lint.generation = self.generation
            nb = notebooks.NotebookLint(lint, cells, notebooks.markers_of(text))
        if nb.lint.config_error:
            self.show_once(f"fsdp-lint: {nb.lint.config_error}", types.MessageType.Error)
        published = notebooks.cell_diagnostics(nb, self.encoding)
        if previous is not None:  # cells removed since: cleared
            for cell_uri, _ in previous.cells:
                published.setdefault(cell_uri, [])
        self.notebooks[uri] = nb
        for cell_uri, diagnostics in published.items():
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=cell_uri, diagnostics=diagnostics))
        return nb

    def close_notebook(self, uri: str, cell_uris) -> None:
        timer = self.timers.pop(uri, None)
        if timer is not None:
            timer.cancel()
        self.parses.pop(uri, None)
        previous = self.notebooks.pop(uri, None)
        cleared = set(cell_uris) | {cell for cell, _ in (previous.cells if previous else [])}
        for cell_uri in sorted(cleared):
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=cell_uri, diagnostics=[]))

    def lint_now(self, uri: str) -> Optional[DocumentLint]:
        notebook = self.notebook_of(uri)
        if notebook is not None:  # a cell is linted with its notebook
            self.lint_notebook(notebook)
            return None
        timer = self.timers.pop(uri, None)
        if timer is not None:
            timer.cancel()
        document = self.workspace.get_text_document(uri)
        path = document_path(uri, document.path, self.workspace.root_path)
        if not is_python_document(uri, document.language_id, path):
            return None
        if self.lint_settings is None and self.settings_error is None:
            self.reload_settings()
        result = self.results.get(uri)
        if result is not None and result.generation == self.generation and result.text == document.source:
            result.version = document.version  # saved, or edited back: the text was linted already
        else:
            parser = self.parses.setdefault(uri, ParseCache()).parse
            result = lint_document(
                uri, path, document.version, document.source, self.lint_settings, self.settings_error, parser
            )
            result.generation = self.generation
        if result.config_error:
            self.show_once(f"fsdp-lint: {result.config_error}", types.MessageType.Error)
        self.results[uri] = result
        diagnostics = document_diagnostics(result, TextIndex(result.text, self.encoding))
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=document.version)
        )
        return result

    def lint_later(self, uri: str) -> None:
        timer = self.timers.pop(uri, None)
        if timer is not None:
            timer.cancel()
        delay = self.client_settings.debounce_ms / 1000
        self.timers[uri] = asyncio.get_running_loop().call_later(delay, self._lint_safely, uri)

    def _lint_safely(self, uri: str) -> None:
        self.timers.pop(uri, None)
        try:
            if uri in self.workspace.notebook_documents:
                self.lint_notebook(uri)
            elif uri in self.workspace.text_documents:
                self.lint_now(uri)
        except Exception:  # noqa: BLE001 - a timer callback must not take the loop down
            log.exception("fsdp-lint: linting %s failed", uri)

    def relint_all(self) -> None:
        self._shown_errors.clear()
        self.reload_settings()
        for uri in list(self.results):
            if uri in self.workspace.text_documents:
                self.lint_now(uri)
        for uri in list(self.notebooks):
            if uri in self.workspace.notebook_documents:
                self.lint_notebook(uri)

    def current(self, uri: str) -> Optional[DocumentLint]:
        """The lint of the document's current version (linting it now if a change is pending)."""
        if uri not in self.workspace.text_documents:
            return None
        document = self.workspace.get_text_document(uri)
        result = self.results.get(uri)
        if result is None or result.version != document.version or result.text != document.source:
            result = self.lint_now(uri)
        return result

    def versioned_edits(self) -> bool:
        caps = self.client_capabilities.workspace
        edit = caps.workspace_edit if caps else None
        return bool(edit and edit.document_changes)

    def resolves_edits(self) -> bool:
        caps = self.client_capabilities.text_document
        action = caps.code_action if caps else None
        support = action.resolve_support if action else None
        return bool(support and "edit" in support.properties)


def _is_config_file(uri: str) -> bool:
    return uri.rstrip("/").endswith("/" + CONFIG_FILE)


def create_server() -> FsdpLintServer:
    server = FsdpLintServer()

    @server.feature(types.INITIALIZE)
    def initialize(params: types.InitializeParams) -> None:
        server.apply_client_settings(params.initialization_options)

    @server.feature(types.INITIALIZED)
    def initialized(params: types.InitializedParams) -> None:
        caps = server.client_capabilities.workspace
        watch = caps.did_change_watched_files if caps else None
        if watch and watch.dynamic_registration:
            options = types.DidChangeWatchedFilesRegistrationOptions(
                watchers=[types.FileSystemWatcher(glob_pattern=f"**/{CONFIG_FILE}")]
            )
            registration = types.Registration(
                id=WATCH_ID, method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES, register_options=options
            )
            server.client_register_capability(types.RegistrationParams(registrations=[registration]))

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        server.lint_now(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: types.DidChangeTextDocumentParams) -> None:
        server.lint_later(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(params: types.DidSaveTextDocumentParams) -> None:
        if _is_config_file(params.text_document.uri):
            server.relint_all()
        else:
            server.lint_now(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        timer = server.timers.pop(uri, None)
        if timer is not None:
            timer.cancel()
        server.parses.pop(uri, None)
        if server.results.pop(uri, None) is not None:
            server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_did_open(params: types.DidOpenNotebookDocumentParams) -> None:
        server.lint_notebook(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_did_change(params: types.DidChangeNotebookDocumentParams) -> None:
        server.lint_later(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_did_save(params: types.DidSaveNotebookDocumentParams) -> None:
        server.lint_notebook(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_did_close(params: types.DidCloseNotebookDocumentParams) -> None:
        server.close_notebook(params.notebook_document.uri, [cell.uri for cell in params.cell_text_documents])

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(params: types.DidChangeConfigurationParams) -> None:
        if isinstance(params.settings, dict) and params.settings:
            server.apply_client_settings(params.settings)
        server.relint_all()

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(params: types.DidChangeWatchedFilesParams) -> None:
        if any(_is_config_file(change.uri) for change in params.changes):
            server.relint_all()

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=list(actions.KINDS), resolve_provider=True),
    )
    def code_action(params: types.CodeActionParams):
        notebook = server.notebook_of(params.text_document.uri)
        if notebook is not None:  # a cell: its quick fixes, from the notebook's lint
            nb = server.lint_notebook(notebook, republish=False)
            if nb is None or nb.lint.config_error or not actions.wanted(types.CodeActionKind.QuickFix, params.context.only):
                return None
            rng = params.range
            return notebooks.quick_fixes(
                nb, params.text_document.uri, (rng.start.line, rng.start.character),
                (rng.end.line, rng.end.character), server.encoding,
            ) or None
        lint = server.current(params.text_document.uri)
        if lint is None or lint.config_error:
            return None
        rng = params.range
        return actions.code_actions(
            lint,
            server.encoding,
            (rng.start.line, rng.start.character),
            (rng.end.line, rng.end.character),
            params.context.only,
            server.versioned_edits(),
            server.resolves_edits(),
        ) or None

    @server.feature(types.CODE_ACTION_RESOLVE)
    def code_action_resolve(action: types.CodeAction) -> types.CodeAction:
        data = action.data if isinstance(action.data, dict) else {}
        if action.kind == actions.FIX_ALL_KIND and action.edit is None and "uri" in data:
            lint = server.current(data["uri"])
            if lint is not None and not lint.config_error:
                action.edit = actions.fix_all_edit(lint, server.encoding, server.versioned_edits())
        return action

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def on_hover(params: types.HoverParams) -> Optional[types.Hover]:
        lint = server.current(params.text_document.uri)
        if lint is None:
            return None
        return hover.hover(lint, server.encoding, params.position.line, params.position.character)

    return server
