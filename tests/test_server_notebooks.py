"""The language server's notebook documents (LSP 3.17 ``notebookDocument/*``), driven by a
real LSP client over stdio: the code cells linted together, findings and quick fixes on each
cell's document (issue 27, item 1)."""

import asyncio

import pytest

pytest.importorskip("pygls")

from lsprotocol import types  # noqa: E402

from tests.lsp_session import apply_edits, workspace_edits  # noqa: E402
from tests.test_server import session  # noqa: E402,F401 - the fixture

IMPORTS = "%matplotlib inline\nfrom torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP\n"
WRAP = "model = FSDP(net, cpu_offload=CPUOffload(offload_params=True))"
SUMMON = "!nvidia-smi\nwith FSDP.summon_full_params(model):\n    for name, param in model.named_parameters():\n        print(name, param.norm())"
CELLS = [("code", "python", IMPORTS), ("markdown", "markdown", "# notes"), ("code", "python", WRAP),
         ("code", "python", SUMMON)]


async def publishes(server, uris):
    """The next diagnostics published for each of ``uris``."""
    return {uri: await server.next_publish(uri) for uri in uris}


def test_a_notebook_is_linted_across_cells_and_each_cell_gets_its_findings(session):
    root = session.root

    async def scenario(server):
        path = root / "demo.ipynb"
        uris = server.open_notebook(path, CELLS)
        code = [uris[0], uris[2], uris[3]]
        got = await publishes(server, code)
        assert got[uris[0]].diagnostics == () and got[uris[2]].diagnostics == ()
        [finding] = got[uris[3]].diagnostics
        assert finding.code == "FSD001"
        # the range is the cell's own: line 1 (0-based) of cell 4, after the shell escape
        assert finding.range == types.Range(types.Position(1, 5), types.Position(1, 35))
        assert "(wrapped at cell 3, line 1)" in finding.message

        actions = await server.code_actions(uris[3], finding.range, diagnostics=[finding])
        [fix] = [a for a in actions if a.kind == types.CodeActionKind.QuickFix]
        assert "FSD001" in fix.title
        fixed = apply_edits(SUMMON, fix.edit.changes[uris[3]])
        assert fixed == SUMMON.replace("summon_full_params(model)", "summon_full_params(model, writeback=False)")

        # the edit applied in the editor: the cell is clean
        server.change_cell(path, 2, uris[3], 2, fixed)
        after = await server.next_publish(uris[3])
        assert after.diagnostics == ()

        # the wrap removed from cell 3: the finding in cell 4 had needed it
        server.change_cell(path, 3, uris[3], 3, SUMMON)
        assert len((await server.next_publish(uris[3])).diagnostics) == 1
        server.change_cell(path, 4, uris[2], 2, "model = FSDP(net)")
        assert (await server.next_publish(uris[3])).diagnostics == ()

        server.close_notebook(path, uris)
        cleared = await publishes(server, code)
        assert all(p.diagnostics == () for p in cleared.values())
        return True

    assert session(scenario)


def test_cells_of_other_languages_are_not_linted(session):
    root = session.root

    async def scenario(server):
        uris = server.open_notebook(root / "mixed.ipynb", [
            ("code", "python", IMPORTS + WRAP),
            ("code", "r", "with FSDP.summon_full_params(model):\n    pass"),
            ("code", "python", "x = 1"),
        ])
        got = await publishes(server, [uris[0], uris[2]])
        assert all(p.diagnostics == () for p in got.values())
        # nothing is ever published for the R cell
        await asyncio.sleep(0)
        assert server.published[uris[1]].empty()
        return True

    assert session(scenario)


def test_unused_noqa_in_the_server_when_the_project_selects_it(session):
    """FSD800 is opt-in in the editor as on the command line: the project's extend-select."""
    (session.root / "pyproject.toml").write_text('[tool.fsdp-lint]\nextend-select = ["unused-noqa"]\n')
    text = "import os  # noqa: F401, FSD104\n"

    async def scenario(server):
        uri = server.open(session.root / "plain.py", text)
        [finding] = (await server.next_publish(uri, 1)).diagnostics
        assert finding.code == "FSD800" and "`FSD104`" in finding.message
        actions = await server.code_actions(uri, finding.range, diagnostics=[finding])
        [fix] = [a for a in actions if a.kind == types.CodeActionKind.QuickFix and a.is_preferred]
        assert apply_edits(text, workspace_edits(fix.edit, uri)) == "import os  # noqa: F401\n"
        return True

    assert session(scenario)
