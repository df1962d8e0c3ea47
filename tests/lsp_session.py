"""A real LSP client session with ``fsdp-lint server`` over stdio (pygls's client), for
tests and the latency benchmark.

Waiting is on events (a notification arrived); ``WAIT`` only bounds a hang, it is not a
measurement.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional

from lsprotocol import types
from pygls.lsp.client import LanguageClient

WAIT = 120.0  # seconds before a missing answer counts as a hang


def capabilities(resolve_edits: bool = True, encodings: Optional[List[str]] = None) -> types.ClientCapabilities:
    return types.ClientCapabilities(
        general=types.GeneralClientCapabilities(position_encodings=encodings) if encodings else None,
        workspace=types.WorkspaceClientCapabilities(
            workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True),
            did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True),
            did_change_configuration=types.DidChangeConfigurationClientCapabilities(),
        ),
        text_document=types.TextDocumentClientCapabilities(
            synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
            publish_diagnostics=types.PublishDiagnosticsClientCapabilities(
                version_support=True, code_description_support=True,
                tag_support=types.ClientDiagnosticsTagOptions(value_set=list(types.DiagnosticTag)),
            ),
            code_action=types.CodeActionClientCapabilities(
                resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"]) if resolve_edits else None,
                code_action_literal_support=types.ClientCodeActionLiteralOptions(
                    code_action_kind=types.ClientCodeActionKindOptions(
                        value_set=["", "quickfix", "source", "source.fixAll"]
                    )
                ),
            ),
            hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown]),
        ),
    )


def _client_units(char: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(char.encode("utf-8"))
    if encoding == "utf-16":
        return len(char.encode("utf-16-le")) // 2
    return 1


def offset_at(text: str, position: types.Position, encoding: str = "utf-16") -> int:
    """A client's reading of an LSP position: lines end at \\n, \\r\\n or \\r; columns in ``encoding``."""
    import re

    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    if position.line >= len(starts):
        return len(text)
    offset = starts[position.line]
    units = 0
    while offset < len(text) and text[offset] not in "\r\n" and units < position.character:
        units += _client_units(text[offset], encoding)
        offset += 1
    return offset


def apply_edits(text: str, edits, encoding: str = "utf-16") -> str:
    spans = [
        (offset_at(text, e.range.start, encoding), offset_at(text, e.range.end, encoding), e.new_text)
        for e in edits
    ]
    for start, end, new in sorted(spans, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def workspace_edits(edit: types.WorkspaceEdit, uri: str) -> list:
    if edit.document_changes:
        return [e for change in edit.document_changes if change.text_document.uri == uri for e in change.edits]
    return list((edit.changes or {}).get(uri, []))


class Session:
    """One server process and the notifications it sent, queued per document."""

    def __init__(self, root: Path, log: Path):
        self.root = root
        self.log = log
        self.client = LanguageClient("fsdp-lint-tests", "1")
        self.published: Dict[str, asyncio.Queue] = defaultdict(asyncio.Queue)
        self.every_publish: asyncio.Queue = asyncio.Queue()
        self.messages: List[types.ShowMessageParams] = []
        self.registrations: List[types.Registration] = []
        self.versions: Dict[str, int] = {}

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def publish(params: types.PublishDiagnosticsParams):
            self.published[params.uri].put_nowait(params)
            self.every_publish.put_nowait(params)

        @self.client.feature(types.WINDOW_SHOW_MESSAGE)
        def show(params: types.ShowMessageParams):
            self.messages.append(params)

        @self.client.feature(types.CLIENT_REGISTER_CAPABILITY)
        def register(params: types.RegistrationParams):
            self.registrations.extend(params.registrations)

        @self.client.feature(types.WINDOW_LOG_MESSAGE)
        def log_message(params):
            pass

    async def start(self, options=None, caps: Optional[types.ClientCapabilities] = None, env=None):
        # stderr goes to a file: nothing reads the pipe pygls would give it
        await self.client.start_io(
            "/bin/sh", "-c", 'exec "$0" -m fsdp_lint server 2>>"$1"', sys.executable, str(self.log),
            cwd=str(self.root), env=env or dict(os.environ),
        )
        result = await asyncio.wait_for(
            self.client.initialize_async(
                types.InitializeParams(
                    capabilities=caps or capabilities(),
                    root_uri=self.root.as_uri(),
                    workspace_folders=[types.WorkspaceFolder(uri=self.root.as_uri(), name=self.root.name)],
                    initialization_options=options,
                )
            ),
            WAIT,
        )
        self.client.initialized(types.InitializedParams())
        return result

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), WAIT)
            self.client.exit(None)
        finally:
            await asyncio.wait_for(self.client.stop(), WAIT)

    async def next_publish(self, uri: str, version: Optional[int] = None) -> types.PublishDiagnosticsParams:
        """The next diagnostics for ``uri`` (of ``version`` when given: older ones are skipped)."""
        while True:
            params = await asyncio.wait_for(self.published[uri].get(), WAIT)
            if version is None or params.version == version:
                return params

    def open(self, path: Path, text: str, language_id: str = "python") -> str:
        uri = path.as_uri()
        self.versions[uri] = 1
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=uri, language_id=language_id, version=1, text=text)
            )
        )
        return uri

    def change(self, uri: str, text: str) -> int:
        self.versions[uri] += 1
        version = self.versions[uri]
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )
        return version

    async def code_actions(self, uri: str, rng: types.Range, only=None, diagnostics=()) -> List[types.CodeAction]:
        params = types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=rng,
            context=types.CodeActionContext(diagnostics=list(diagnostics), only=only),
        )
        return list(await asyncio.wait_for(self.client.text_document_code_action_async(params), WAIT) or [])

    async def resolve(self, action: types.CodeAction) -> types.CodeAction:
        return await asyncio.wait_for(self.client.code_action_resolve_async(action), WAIT)

    async def hover(self, uri: str, position: types.Position) -> Optional[types.Hover]:
        params = types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=position)
        return await asyncio.wait_for(self.client.text_document_hover_async(params), WAIT)

    def open_notebook(self, path: Path, cells: List[tuple]) -> List[str]:
        """``notebookDocument/didOpen`` of ``cells`` ((kind, language, text): kind "code" or
        "markdown"); returns the cell documents' URIs, in order."""
        uri = path.as_uri()
        cell_uris = [f"vscode-notebook-cell:{path.as_posix()}#C{n}" for n in range(len(cells))]
        notebook = types.NotebookDocument(
            uri=uri, notebook_type="jupyter-notebook", version=1,
            cells=[
                types.NotebookCell(
                    kind=types.NotebookCellKind.Code if kind == "code" else types.NotebookCellKind.Markup,
                    document=cell_uri,
                )
                for (kind, _, _), cell_uri in zip(cells, cell_uris)
            ],
        )
        documents = [
            types.TextDocumentItem(uri=cell_uri, language_id=language, version=1, text=text)
            for (_, language, text), cell_uri in zip(cells, cell_uris)
        ]
        self.client.notebook_document_did_open(
            types.DidOpenNotebookDocumentParams(notebook_document=notebook, cell_text_documents=documents)
        )
        return cell_uris

    def change_cell(self, notebook: Path, version: int, cell_uri: str, cell_version: int, text: str) -> None:
        """``notebookDocument/didChange``: one cell's whole text replaced."""
        self.client.notebook_document_did_change(
            types.DidChangeNotebookDocumentParams(
                notebook_document=types.VersionedNotebookDocumentIdentifier(version=version, uri=notebook.as_uri()),
                change=types.NotebookDocumentChangeEvent(
                    cells=types.NotebookDocumentCellChanges(
                        text_content=[
                            types.NotebookDocumentCellContentChanges(
                                document=types.VersionedTextDocumentIdentifier(uri=cell_uri, version=cell_version),
                                changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
                            )
                        ]
                    )
                ),
            )
        )

    def close_notebook(self, notebook: Path, cell_uris: List[str]) -> None:
        self.client.notebook_document_did_close(
            types.DidCloseNotebookDocumentParams(
                notebook_document=types.NotebookDocumentIdentifier(uri=notebook.as_uri()),
                cell_text_documents=[types.TextDocumentIdentifier(uri=u) for u in cell_uris],
            )
        )
