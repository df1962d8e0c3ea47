"""``fsdp-lint server`` driven over stdio by a real LSP client (pygls's), one server
process per test: diagnostics, quick fixes, fix all, noqa, hover, configuration, syntax
errors, ignored documents, position encodings, and that torch is never imported."""

import asyncio
import textwrap

import pytest

pytest.importorskip("pygls")

from lsprotocol import types  # noqa: E402

from tests.conftest import run_cli  # noqa: E402
from tests.lsp_session import Session, apply_edits, capabilities, workspace_edits  # noqa: E402

# an accelerate-style helper: FSDP with CPU parameter offload, a read-only summon block
TRAIN = textwrap.dedent(
    """\
    import torch
    from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP


    def count_parameters(model: torch.nn.Module) -> int:
        wrapped = FSDP(model, cpu_offload=CPUOffload(offload_params=True))
        with FSDP.summon_full_params(wrapped):
            return sum(p.numel() for p in wrapped.parameters())
    """
)
CALL = "FSDP.summon_full_params(wrapped)"

# torchtune-style export: offload_to_cpu without rank0_only (FSD006: an unsafe fix only)
EXPORT = textwrap.dedent(
    """\
    import torch.distributed.fsdp as fsdp


    def export(model):
        with fsdp.FullyShardedDataParallel.summon_full_params(model, offload_to_cpu=True, writeback=False):
            state = {n: p.clone() for n, p in model.named_parameters()}
        return state
    """
)


def call_range(text: str, call: str, encoding: str = "utf-16") -> types.Range:
    """Where ``call`` stands in ``text``, counted as an LSP client counts."""
    start = text.index(call)
    line = text.count("\n", 0, start)
    line_start = text.rfind("\n", 0, start) + 1

    def units(chunk):
        if encoding == "utf-8":
            return len(chunk.encode("utf-8"))
        return len(chunk.encode("utf-16-le")) // 2

    return types.Range(
        types.Position(line, units(text[line_start:start])),
        types.Position(line, units(text[line_start:start + len(call)])),
    )


@pytest.fixture
def session(tmp_path):
    """Run ``scenario(session)`` against a fresh server rooted at a temporary workspace."""
    root = tmp_path / "workspace"
    root.mkdir()

    def run(scenario, options=None, caps=None, env=None):
        async def main():
            server = Session(root, tmp_path / "server-stderr.log")
            await server.start(options, caps, env)
            try:
                return await scenario(server)
            finally:
                await server.stop()

        try:
            return asyncio.run(main())
        finally:
            log = tmp_path / "server-stderr.log"
            if log.exists() and log.read_text().strip():
                print("server stderr:\n" + log.read_text())

    run.root = root
    return run


def test_fsd001_diagnostic_quick_fix_then_clean(session):
    async def scenario(server):
        uri = server.open(session.root / "train.py", TRAIN)
        published = await server.next_publish(uri, 1)
        [diagnostic] = published.diagnostics
        assert diagnostic.code == "FSD001"
        assert diagnostic.range == call_range(TRAIN, CALL)
        assert diagnostic.severity == types.DiagnosticSeverity.Warning
        assert diagnostic.source == "fsdp-lint"
        assert diagnostic.code_description.href.endswith("docs/rules/FSD001.md")
        assert "writeback" in diagnostic.message

        actions = await server.code_actions(uri, diagnostic.range, diagnostics=[diagnostic])
        [fix] = [a for a in actions if a.kind == types.CodeActionKind.QuickFix and a.is_preferred]
        assert "FSD001" in fix.title and not fix.title.startswith("Unsafe")
        assert fix.diagnostics[0].code == "FSD001"
        fixed = apply_edits(TRAIN, workspace_edits(fix.edit, uri))
        assert "with FSDP.summon_full_params(wrapped, writeback=False):" in fixed
        assert fixed.replace(", writeback=False", "") == TRAIN  # nothing else changed

        version = server.change(uri, fixed)
        after = await server.next_publish(uri, version)
        assert after.diagnostics == ()
        return True

    assert session(scenario)


def test_noqa_action_suppresses_the_finding(session):
    text = TRAIN.replace(
        "with FSDP.summon_full_params(wrapped):", "with FSDP.summon_full_params(wrapped):  # noqa: FSD002"
    )

    async def scenario(server):
        uri = server.open(session.root / "train.py", text)
        [diagnostic] = (await server.next_publish(uri, 1)).diagnostics
        actions = await server.code_actions(uri, diagnostic.range)
        [noqa] = [a for a in actions if "noqa" in a.title]
        suppressed = apply_edits(text, workspace_edits(noqa.edit, uri))
        assert "# noqa: FSD002, FSD001" in suppressed  # the existing list is extended
        version = server.change(uri, suppressed)
        assert (await server.next_publish(uri, version)).diagnostics == ()

    session(scenario)


def test_fix_all_is_resolved_and_matches_the_command_line(session):
    from pathlib import Path

    text = (Path(__file__).parent.parent / "fixtures/FSD001/fix/read_only.py").read_text()

    async def scenario(server):
        uri = server.open(session.root / "read_only.py", text)
        published = await server.next_publish(uri, 1)
        assert len(published.diagnostics) > 1
        whole = types.Range(types.Position(0, 0), types.Position(len(text.splitlines()), 0))
        [action] = await server.code_actions(uri, whole, only=[types.CodeActionKind.SourceFixAll])
        assert action.kind == "source.fixAll.fsdp-lint"
        assert action.edit is None  # computed on resolve
        resolved = await server.resolve(action)
        return apply_edits(text, workspace_edits(resolved.edit, uri))

    fixed = session(scenario)
    cli = run_cli("check", "--fix", "--stdin-filename", "read_only.py", "-", input=text)
    assert fixed == cli.stdout
    assert fixed != text


def test_fix_all_sends_one_edit_per_fix(session):
    """Fix all used to send one edit from the first fix to the last, rewriting every line
    between them; now each fix is an edit of its own, touching only its own characters."""
    from pathlib import Path

    text = (Path(__file__).parent.parent / "fixtures/FSD001/fix/read_only.py").read_text()

    async def scenario(server):
        uri = server.open(session.root / "read_only.py", text)
        published = await server.next_publish(uri, 1)
        whole = types.Range(types.Position(0, 0), types.Position(len(text.splitlines()), 0))
        [action] = await server.code_actions(uri, whole, only=[types.CodeActionKind.SourceFixAll])
        resolved = await server.resolve(action)
        return published.diagnostics, workspace_edits(resolved.edit, uri)

    diagnostics, edits = session(scenario)
    fixable = [d for d in diagnostics if "writeback" in d.message]
    assert len(edits) == len(fixable) == 6
    lines = text.splitlines(keepends=True)
    for edit in edits:
        assert edit.range.start.line == edit.range.end.line  # each on its own call's line
        old = lines[edit.range.start.line][edit.range.start.character:edit.range.end.character]
        assert len(old) <= len("True") and len(edit.new_text) <= len("    writeback=False,\n")
    assert apply_edits(text, edits) == (Path(__file__).parent.parent / "fixtures/FSD001/fix/read_only.fixed.py").read_text()


def test_fix_all_without_resolve_support_comes_with_its_edit(session):
    async def scenario(server):
        uri = server.open(session.root / "train.py", TRAIN)
        await server.next_publish(uri, 1)
        whole = types.Range(types.Position(0, 0), types.Position(9, 0))
        [action] = await server.code_actions(uri, whole, only=["source.fixAll.fsdp-lint"])
        return apply_edits(TRAIN, workspace_edits(action.edit, uri))

    fixed = session(scenario, caps=capabilities(resolve_edits=False))
    assert "summon_full_params(wrapped, writeback=False)" in fixed


def test_unsafe_fix_is_labelled_and_left_out_of_fix_all(session):
    async def scenario(server):
        uri = server.open(session.root / "export.py", EXPORT)
        [diagnostic] = (await server.next_publish(uri, 1)).diagnostics
        assert diagnostic.code == "FSD006"
        actions = await server.code_actions(uri, diagnostic.range)
        [unsafe] = [a for a in actions if a.title.startswith("Unsafe fix")]
        assert not unsafe.is_preferred
        assert "rank0_only=True" in apply_edits(EXPORT, workspace_edits(unsafe.edit, uri))
        assert not [a for a in actions if a.kind == "source.fixAll.fsdp-lint"]

    session(scenario)


def test_fix_all_includes_unsafe_fixes_when_the_client_enables_them(session):
    async def scenario(server):
        uri = server.open(session.root / "export.py", EXPORT)
        await server.next_publish(uri, 1)
        whole = types.Range(types.Position(0, 0), types.Position(8, 0))
        [action] = await server.code_actions(uri, whole, only=["source.fixAll"])
        assert "unsafe" in action.title
        resolved = await server.resolve(action)
        return apply_edits(EXPORT, workspace_edits(resolved.edit, uri))

    fixed = session(scenario, options={"fsdp-lint": {"unsafeFixes": True}})
    assert "rank0_only=True" in fixed


def test_hover_shows_what_fsdp_lint_rule_prints(session):
    async def scenario(server):
        uri = server.open(session.root / "train.py", TRAIN)
        [diagnostic] = (await server.next_publish(uri, 1)).diagnostics
        inside = types.Position(diagnostic.range.start.line, diagnostic.range.start.character + 3)
        on_flag = await server.hover(uri, inside)
        elsewhere = await server.hover(uri, types.Position(0, 2))
        return on_flag, elsewhere

    on_flag, elsewhere = session(scenario)
    assert elsewhere is None
    page = on_flag.contents.value
    assert on_flag.contents.kind == types.MarkupKind.Markdown
    for section in ("## What it does", "## Why is this bad?", "## Use instead", "## Verified"):
        assert section in page
    assert page == run_cli("rule", "FSD001").stdout


def test_pyproject_changes_reapply_configuration(session):
    root = session.root
    pyproject = root / "pyproject.toml"
    pyproject.write_text('[tool.fsdp-lint]\nper-file-ignores = { "scripts/*" = ["FSD001"] }\n')
    (root / "scripts").mkdir()

    async def scenario(server):
        train = server.open(root / "train.py", TRAIN)
        script = server.open(root / "scripts" / "count.py", TRAIN)
        assert [d.code for d in (await server.next_publish(train, 1)).diagnostics] == ["FSD001"]
        assert (await server.next_publish(script, 1)).diagnostics == ()  # per-file-ignores
        assert any(r.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES for r in server.registrations)

        def changed():
            server.client.workspace_did_change_watched_files(
                types.DidChangeWatchedFilesParams(
                    changes=[types.FileEvent(uri=pyproject.as_uri(), type=types.FileChangeType.Changed)]
                )
            )

        pyproject.write_text('[tool.fsdp-lint]\nignore = ["summon-writeback-with-cpu-offload"]\n')
        changed()
        assert (await server.next_publish(train)).diagnostics == ()
        assert (await server.next_publish(script)).diagnostics == ()

        pyproject.write_text('[tool.fsdp-lint]\nignroe = ["FSD001"]\n')
        changed()
        [error] = (await server.next_publish(train)).diagnostics
        assert error.severity == types.DiagnosticSeverity.Error
        assert "ignroe" in error.message and "unknown key" in error.message
        assert any("ignroe" in m.message for m in server.messages)
        assert len((await server.next_publish(script)).diagnostics) == 1

        pyproject.write_text("[tool.fsdp-lint]\n")
        changed()
        assert [d.code for d in (await server.next_publish(train)).diagnostics] == ["FSD001"]
        assert [d.code for d in (await server.next_publish(script)).diagnostics] == ["FSD001"]

    session(scenario)


def test_save_lints_and_a_saved_pyproject_is_read_again(session):
    pyproject = session.root / "pyproject.toml"
    pyproject.write_text("[tool.fsdp-lint]\n")

    async def scenario(server):
        uri = server.open(session.root / "train.py", TRAIN)
        assert [d.code for d in (await server.next_publish(uri, 1)).diagnostics] == ["FSD001"]
        server.client.text_document_did_save(
            types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )
        assert [d.code for d in (await server.next_publish(uri)).diagnostics] == ["FSD001"]
        pyproject.write_text('[tool.fsdp-lint]\nselect = ["FSD002"]\n')  # the editor saved it
        server.client.text_document_did_save(
            types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=pyproject.as_uri()))
        )
        assert (await server.next_publish(uri)).diagnostics == ()

    session(scenario)


def test_client_settings_win_over_pyproject(session):
    (session.root / "pyproject.toml").write_text('[tool.fsdp-lint]\nselect = ["FSD001"]\n')

    async def scenario(server):
        uri = server.open(session.root / "train.py", TRAIN)
        assert [d.code for d in (await server.next_publish(uri, 1)).diagnostics] == ["FSD001"]
        server.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"fsdp-lint": {"ignore": ["FSD001"]}})
        )
        assert (await server.next_publish(uri)).diagnostics == ()
        server.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"fsdp-lint": {"select": ["FSD0"], "ignore": ["NOPE"]}})
        )
        assert [d.code for d in (await server.next_publish(uri)).diagnostics] == ["FSD001"]
        assert any("NOPE" in m.message for m in server.messages)  # a wrong selector is reported

    session(scenario)


def test_syntax_error_mid_edit_is_a_diagnostic_and_the_server_goes_on(session):
    broken = TRAIN.replace("with FSDP.summon_full_params(wrapped):", "with FSDP.summon_full_params(wrapped")

    async def scenario(server):
        uri = server.open(session.root / "train.py", TRAIN)
        await server.next_publish(uri, 1)
        version = server.change(uri, broken)
        [error] = (await server.next_publish(uri, version)).diagnostics
        assert error.code == "FSD900"
        assert error.severity == types.DiagnosticSeverity.Error
        assert error.range.start.line >= 6  # at or after the unclosed call
        actions = await server.code_actions(uri, error.range)
        assert not [a for a in actions if "noqa" in a.title]
        assert await server.hover(uri, error.range.start) is None  # answered, no crash
        version = server.change(uri, TRAIN)
        assert [d.code for d in (await server.next_publish(uri, version)).diagnostics] == ["FSD001"]

    session(scenario)


def test_untitled_documents_use_the_workspace_config_and_excludes_apply(session):
    root = session.root
    (root / "pyproject.toml").write_text(
        '[tool.fsdp-lint]\nextend-exclude = ["generated"]\nper-file-ignores = { "Untitled-*" = ["FSD001"] }\n'
    )
    (root / "generated").mkdir()

    async def scenario(server):
        generated = server.open(root / "generated" / "train.py", TRAIN)
        untitled = "untitled:Untitled-1"
        server.versions[untitled] = 1
        server.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=untitled, language_id="python", version=1, text=TRAIN)
            )
        )
        plain = server.open(root / "train.py", TRAIN)
        assert (await server.next_publish(generated, 1)).diagnostics == ()
        assert (await server.next_publish(untitled, 1)).diagnostics == ()  # Untitled-* ignores FSD001
        assert [d.code for d in (await server.next_publish(plain, 1)).diagnostics] == ["FSD001"]

    session(scenario)


def test_notebooks_and_other_languages_are_ignored(session):
    root = session.root

    async def scenario(server):
        server.open(root / "NOTES.md", "```python\n" + TRAIN + "```\n", language_id="markdown")
        server.open(root / "analysis.ipynb", TRAIN)
        cell = "vscode-notebook-cell:" + (root / "analysis.ipynb").as_posix() + "#W0sZmlsZQ%3D%3D"
        server.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=cell, language_id="python", version=1, text=TRAIN)
            )
        )
        train = server.open(root / "train.py", TRAIN)
        # notifications are handled in order: anything published for the others would come first
        first = await asyncio.wait_for(server.every_publish.get(), 120)
        assert first.uri == train

    session(scenario)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8"])
def test_ranges_count_columns_in_the_negotiated_encoding(session, encoding):
    text = TRAIN.replace(
        "with FSDP.summon_full_params(wrapped):", 'with nullcontext("🔥 é"), FSDP.summon_full_params(wrapped):'
    )

    async def scenario(server):
        uri = server.open(session.root / "train.py", text)
        [diagnostic] = (await server.next_publish(uri, 1)).diagnostics
        return diagnostic.range

    rng = session(scenario, caps=capabilities(encodings=[encoding]))
    assert rng == call_range(text, CALL, encoding)


def test_the_server_never_imports_torch(session, tmp_path):
    import os

    trap = tmp_path / "trap"
    (trap / "torch").mkdir(parents=True)
    marker = tmp_path / "torch-was-imported"
    (trap / "torch" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(trap), os.environ.get("PYTHONPATH", "")]))

    async def scenario(server):
        uri = server.open(session.root / "train.py", TRAIN)
        [diagnostic] = (await server.next_publish(uri, 1)).diagnostics
        actions = await server.code_actions(uri, diagnostic.range)
        await server.resolve(actions[-1])
        await server.hover(uri, diagnostic.range.start)
        return len(actions)

    assert session(scenario, env=env) == 3
    assert not marker.exists()


def test_server_help(cli):
    result = cli("server", "--help")
    assert result.returncode == 0
    assert "language server" in result.stdout


def test_without_pygls_the_server_says_what_to_install(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "pygls").mkdir()
    (tmp_path / "pygls" / "__init__.py").write_text("raise ImportError('No module named pygls')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-m", "fsdp_lint", "server"], env=env, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    assert "pip install '.[server]' in the fsdp-lint clone" in result.stderr
    assert result.stdout == ""
