"""Messages that must be true: the advice fits the call, and no message claims what the
rule's own doc (or the measured facts) says does not happen."""

from tests.helpers import lint


def _messages(source, code):
    return [(d.location.row, d.message) for d in lint(source) if d.code == code]


def test_fsd104_advice_fits_the_collective():
    found = _messages('''\
        import torch
        import torch.distributed as dist
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        def save(net, loss, path):
            model = FSDP(net)
            if dist.get_rank() == 0:
                dist.barrier()
                dist.all_reduce(loss)
                torch.save(model.state_dict(), path)
        ''', "FSD104")
    assert [row for row, _ in found] == [8, 9, 10]
    for row, message in found[:2]:
        assert "every rank must call it: move it out of the rank test" in message
        assert "save" not in message
    assert "gather on every rank, then save under the rank test" in found[2][1]


def test_fsd106_under_a_rank_test_asks_for_the_full_norm_before_the_test():
    source = '''\
        import torch
        import torch.distributed as dist
        from torch.distributed.fsdp import fully_shard

        def train(model, loader, optimizer):
            fully_shard(model)
            for step, batch in enumerate(loader):
                model(batch).mean().backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                if step % 10 == 0 and dist.get_rank() == 0:
                    print(grad_norm.item())
                print(grad_norm.item())
        '''
    diagnostics = [d for d in lint(source) if d.code == "FSD106"]
    guarded, everywhere = diagnostics
    assert "compute the full norm on every rank before the rank test" in guarded.message
    assert "call `.full_tensor()` first" not in guarded.message
    assert guarded.fix is None
    assert "call `.full_tensor()` first" in everywhere.message
    assert everywhere.fix is not None


def test_undeclared_latin1_byte_on_line_1_says_not_utf8_with_its_position(cli, tmp_path):
    path = tmp_path / "train.py"
    path.write_bytes(b'MODEL = "caf\xe9"  # latin-1, no coding line\nprint(MODEL)\n')
    result = cli("check", "--no-cache", path)
    assert result.returncode == 1
    line = result.stdout.splitlines()[0]
    assert line.startswith(f"{path}:1:13: FSD902 not valid UTF-8 and no encoding declaration"), line
    assert "byte 0xe9 at line 1, column 13" in line
    assert "bad encoding declaration" not in line and "invalid or missing" not in line
    declared = tmp_path / "declared.py"
    declared.write_bytes(b"# -*- coding: no-such-codec -*-\nx = 1\n")
    assert "bad encoding declaration" in cli("check", "--no-cache", declared).stdout


def test_fsd107_message_says_when_the_cast_fails_as_measured():
    found = _messages('''\
        import torch
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        def build(net):
            model = FSDP(net)
            model.to(torch.bfloat16)
            return model
        ''', "FSD107")
    assert len(found) == 1
    message = found[0][1]
    assert "once the model has run a forward, the next forward or state dict fails" in message
    assert "a cast before any forward happened to run" in message
    assert "buffers keep the old dtype and the next forward or state dict fails" not in message


def test_rule_page_says_which_path_a_confirmed_verdict_is_for():
    from fsdp_lint.docs import on_your_torch
    from fsdp_lint.rules import lookup

    text = on_your_torch(lookup("FSD106"), "2.13.0+cpu")
    assert "CONFIRMED" in text
    assert "a CONFIRMED here is for the rule's other paths" in text
    assert "the `total-norm` path (reported by default" in text and "measured clean" in text
    # before the fix release the total-norm path is open: no such note
    assert "total-norm" not in on_your_torch(lookup("FSD106"), "2.9.1")


def test_fsd106_rule_command_names_the_path_measured_clean(cli):
    import pytest

    from fsdp_lint.docs import installed_torch
    from fsdp_lint.versions import version_tuple

    version = installed_torch()
    if version is None or version_tuple(version) < (2, 11):
        pytest.skip("the note is for torch >= 2.11")
    out = cli("rule", "FSD106").stdout
    assert "`total-norm` path (reported by default" in out and "measured clean" in out
