"""Jupyter notebooks in ``check``, through the real command line (issue 27, item 1): code
cells joined with a cell map, findings with their cell (text and ruff's JSON ``cell``),
fixes written into the cell's source with every other byte of the file kept, IPython
magics handled as ruff does, and the notebook still valid for ``nbformat`` after ``--fix``."""

import json
import shutil
from pathlib import Path

import pytest

from fsdp_lint.notebook import NotebookError, parse

nbformat = pytest.importorskip("nbformat")

FSD001_CELLS = [
    ("markdown", "# Offload demo \u2014 caf\u00e9"),
    ("code", "%matplotlib inline\n!pip install torch\nfrom torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP"),
    ("code", "model = FSDP(net, cpu_offload=CPUOffload(offload_params=True))"),
    ("code", "%%bash\necho 'with FSDP.summon_full_params(model): pass'"),
    ("code", "with FSDP.summon_full_params(model):\n    for name, param in model.named_parameters():\n        print(name, param.norm())"),
]


def make_notebook(path, cells, language="python", outputs=True):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": language}
    nb.metadata["language_info"] = {"name": language}
    for kind, source in cells:
        if kind == "markdown":
            nb.cells.append(nbformat.v4.new_markdown_cell(source))
        else:
            cell = nbformat.v4.new_code_cell(source)
            if outputs:
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ok\n")]
                cell.execution_count = 1
            nb.cells.append(cell)
    nbformat.write(nb, str(path))
    return path


def valid(path):
    nbformat.validate(nbformat.read(str(path), as_version=4))
    return True


def test_the_fsd001_example_in_a_notebook_is_found_in_its_cell(cli, tmp_path):
    make_notebook(tmp_path / "demo.ipynb", FSD001_CELLS)
    result = cli("check", "--no-cache", "demo.ipynb", cwd=tmp_path)
    assert result.returncode == 1
    (line,) = [l for l in result.stdout.splitlines() if "FSD001" in l]
    assert line.startswith("demo.ipynb:cell 5:1:6: FSD001 [*] ")
    # rows in the message are the notebook's too
    assert "(wrapped at cell 3, line 1)" in line
    found = json.loads(cli("check", "--no-cache", "--format", "json", "demo.ipynb", cwd=tmp_path).stdout)
    assert [(d["code"], d["cell"], d["location"], d["end_location"]) for d in found] == [
        ("FSD001", 5, {"row": 1, "column": 6}, {"row": 1, "column": 36})
    ]
    assert found[0]["fix"]["edits"][0]["location"] == {"row": 1, "column": 35}
    # other files keep "cell": null, as ruff's JSON
    (tmp_path / "plain.py").write_text("import torch\n")
    shutil.copy(Path(__file__).resolve().parent.parent / "fixtures" / "FSD001" / "fix" / "read_only.py", tmp_path / "a.py")
    assert {d["cell"] for d in json.loads(cli("check", "--no-cache", "--format", "json", "a.py", cwd=tmp_path).stdout)} == {None}


def test_fix_edits_only_the_cell_and_the_notebook_stays_valid(cli, tmp_path):
    path = make_notebook(tmp_path / "demo.ipynb", FSD001_CELLS)
    before = path.read_bytes()
    result = cli("check", "--no-cache", "--fix", "demo.ipynb", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    after = path.read_bytes()
    assert after == before.replace(
        b'"with FSDP.summon_full_params(model):\\n"', b'"with FSDP.summon_full_params(model, writeback=False):\\n"'
    )
    assert valid(path)
    nb = nbformat.read(str(path), as_version=4)
    assert nb.cells[4].source.startswith("with FSDP.summon_full_params(model, writeback=False):\n")
    assert nb.cells[1].source.startswith("%matplotlib inline\n!pip install torch\n")  # magics kept
    assert nb.cells[4].outputs[0]["text"] == "ok\n"
    again = cli("check", "--no-cache", "--fix", "demo.ipynb", cwd=tmp_path)
    assert again.returncode == 0 and path.read_bytes() == after


def test_a_hand_written_layout_is_kept_byte_for_byte(cli, tmp_path):
    """Indent 1, a source as one string, escaped non-ASCII, keys out of nbformat's order:
    only the edited cell's source changes, in the same style."""
    cells = [
        {"cell_type": "code", "id": "first", "metadata": {}, "outputs": [], "execution_count": None,
         "source": "from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP\n"
                   "model = FSDP(net, cpu_offload=CPUOffload(offload_params=True))  # caf\u00e9"},
        {"source": ["x = 1\n", "with FSDP.summon_full_params(model):\n", "    print('\u00e9t\u00e9')"],
         "cell_type": "code", "id": "second", "metadata": {}, "outputs": [], "execution_count": None},
    ]
    data = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"language_info": {"name": "python"}}, "cells": cells}
    text = json.dumps(data, indent=1, ensure_ascii=True)
    path = tmp_path / "hand.ipynb"
    path.write_text(text)
    assert cli("check", "--no-cache", "--fix", "hand.ipynb", cwd=tmp_path).returncode == 0
    assert path.read_text() == text.replace(
        '"with FSDP.summon_full_params(model):\\n"', '"with FSDP.summon_full_params(model, writeback=False):\\n"'
    )
    assert valid(path)
    # one string stays one string
    cells[1]["source"] = "".join(cells[1]["source"])
    text = json.dumps(data, indent=1, ensure_ascii=True)
    path.write_text(text)
    assert cli("check", "--no-cache", "--fix", "hand.ipynb", cwd=tmp_path).returncode == 0
    assert path.read_text() == text.replace(
        "with FSDP.summon_full_params(model):\\n", "with FSDP.summon_full_params(model, writeback=False):\\n"
    )


def test_ipython_magics_as_ruff_treats_them(cli, tmp_path):
    cells = [
        ("code", "import torch\nfrom torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP\n"
                 "model = FSDP(net, cpu_offload=CPUOffload(offload_params=True))"),
        # a cell magic that is not Python: never linted
        ("code", "%%writefile helper.py\nwith FSDP.summon_full_params(model):\n    pass"),
        # %%time's body is Python; line magics, shell escapes, help and `x = !cmd` in between
        ("code", "%%time\nfiles = !ls\n%load_ext autoreload\nmodel?\nfor step in range(2):\n    !nvidia-smi\n"
                 "    with FSDP.summon_full_params(model):\n        print(step)"),
    ]
    path = make_notebook(tmp_path / "magic.ipynb", cells)
    found = json.loads(cli("check", "--no-cache", "--format", "json", "magic.ipynb", cwd=tmp_path).stdout)
    assert [(d["code"], d["cell"], d["location"]["row"]) for d in found] == [("FSD001", 3, 7)]
    assert cli("check", "--no-cache", "--fix", "magic.ipynb", cwd=tmp_path).returncode == 0
    nb = nbformat.read(str(path), as_version=4)
    assert nb.cells[2].source == cells[2][1].replace("summon_full_params(model)", "summon_full_params(model, writeback=False)")
    assert nb.cells[1].source == cells[1][1]
    assert valid(path)


def test_noqa_add_noqa_and_baseline_in_cells(cli, tmp_path):
    path = make_notebook(tmp_path / "demo.ipynb", FSD001_CELLS)
    assert cli("check", "--no-cache", "--add-noqa", "demo.ipynb", cwd=tmp_path).returncode == 0
    nb = nbformat.read(str(path), as_version=4)
    assert nb.cells[4].source.startswith("with FSDP.summon_full_params(model):  # noqa: FSD001\n")
    assert valid(path)
    assert cli("check", "--no-cache", "demo.ipynb", cwd=tmp_path).returncode == 0
    # a baseline survives a cell added above
    make_notebook(path, FSD001_CELLS)
    assert cli("check", "--no-cache", "--write-baseline", "b.json", "demo.ipynb", cwd=tmp_path).returncode == 0
    make_notebook(path, [("code", "import os\nimport sys")] + FSD001_CELLS)
    assert cli("check", "--no-cache", "--baseline", "b.json", "demo.ipynb", cwd=tmp_path).returncode == 0


def test_folders_notebooks_of_other_languages_broken_notebooks_and_stdin(cli, tmp_path):
    make_notebook(tmp_path / "demo.ipynb", FSD001_CELLS)
    make_notebook(tmp_path / "r.ipynb", FSD001_CELLS, language="R")
    (tmp_path / "broken.ipynb").write_text('{"cells": [')
    found = json.loads(cli("check", "--no-cache", "--format", "json", ".", cwd=tmp_path).stdout)
    assert sorted((d["filename"], d["code"]) for d in found) == [("broken.ipynb", "FSD902"), ("demo.ipynb", "FSD001")]
    shown = cli("check", "--show-files", ".", cwd=tmp_path).stdout.split()
    assert "demo.ipynb" in shown and "r.ipynb" in shown
    # standard input: --fix prints the notebook's JSON with the cell fixed
    text = (tmp_path / "demo.ipynb").read_text()
    result = cli("check", "--fix", "--stdin-filename", "demo.ipynb", "-", input=text, cwd=tmp_path)
    assert result.stdout == text.replace("summon_full_params(model):\\n", "summon_full_params(model, writeback=False):\\n")
    assert result.stdout != text


def test_cell_map_and_writing_back_refuse_what_cannot_be_mapped():
    data = {"cells": [{"cell_type": "code", "source": "%time x = f()\nwith a:\n    pass"}], "metadata": {}}
    nb = parse(json.dumps(data))
    assert nb.python_text == "# <fsdp-lint cell 1>\npass\nwith a:\n    pass\n"
    with pytest.raises(NotebookError):
        nb.encode(nb.python_text.replace("pass\nwith", "y = 2\nwith"))  # edits the magic's line
    with pytest.raises(NotebookError):
        nb.encode(nb.python_text.replace("# <fsdp-lint cell 1>\n", ""))
    assert json.loads(nb.encode(nb.python_text.replace("with a:", "with b:")))["cells"][0]["source"] == (
        "%time x = f()\nwith b:\n    pass"
    )


@pytest.mark.slow
def test_pre_commit_runs_the_hook_on_notebooks(tmp_path, pre_commit_hook):
    """The real pre-commit with the hook's `types_or: [python, pyi, jupyter]`: a staged
    notebook is checked, and the --fix hook fixes its cell.  Both runs use the hook
    repository at one commit, so pre-commit builds its environment once (shared with
    test_pre_commit's `run`: the environment is keyed by repository and commit, not args)."""
    pytest.importorskip("pre_commit")
    from tests.test_pre_commit import git, hook_config, pre_commit

    snapshot, rev, home = pre_commit_hook
    repo = tmp_path / "user"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    make_notebook(repo / "demo.ipynb", FSD001_CELLS)
    git("add", "demo.ipynb", cwd=repo)
    config = repo / ".pre-commit-config.yaml"
    config.write_text(hook_config(snapshot, rev))
    blocked = pre_commit("run", "--files", "demo.ipynb", cwd=repo, home=home)
    assert blocked.returncode == 1 and "demo.ipynb:cell 5:1:6: FSD001" in blocked.stdout, blocked.stdout + blocked.stderr
    assert "summon_full_params(model)" in (repo / "demo.ipynb").read_text()  # the check hook edits nothing
    config.write_text(hook_config(snapshot, rev, fix=True))
    fixing = pre_commit("run", "--files", "demo.ipynb", cwd=repo, home=home)
    assert fixing.returncode == 1 and "files were modified by this hook" in fixing.stdout, fixing.stdout
    assert "summon_full_params(model, writeback=False)" in (repo / "demo.ipynb").read_text()
    assert valid(repo / "demo.ipynb")
    git("add", "demo.ipynb", cwd=repo)
    assert pre_commit("run", "--files", "demo.ipynb", cwd=repo, home=home).returncode == 0


@pytest.mark.parametrize("source,python", [
    ("x = (a\n!= b)", "x = (a\n!= b)\n"),  # a continuation line starting with != or % is Python
    ("x = (a\n% b)", "x = (a\n% b)\n"),
    ("s = '''\n%not a magic\n'''\n%ls", "s = '''\n%not a magic\n'''\npass\n"),
    ("y = 1 + \\\n  2\n!ls", "y = 1 + \\\n  2\npass\n"),
    ("for i in x:\n    !echo\n    %time f(i)\n    files = !ls", "for i in x:\n    pass\n    pass\n    files = None\n"),
    ("x = 1  # (\nobj?", "x = 1  # (\npass\n"),
])
def test_ipython_lines_are_told_from_python_lines(source, python):
    nb = parse(json.dumps({"cells": [{"cell_type": "code", "source": source}], "metadata": {}}))
    assert nb.python_text == "# <fsdp-lint cell 1>\n" + python
    assert json.loads(nb.encode(nb.python_text))["cells"][0]["source"] == source
