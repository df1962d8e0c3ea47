"""Several nodes through torchrun's own rendezvous: two agents on 127.0.0.1 form a 2-node,
1-process-per-node gloo job, each started by its own ``fsdp-lint verify``; their verdicts
are the single-node run's (the session's run of every rule, ``verify_every_rule_on_cpu``)."""

import json
import socket
import subprocess
import sys

import pytest

pytest.importorskip("torch")

RULES = ["FSD004", "FSD102"]  # an exception on every rank; a value gathered across ranks


def _free_ports(count):
    """A first port such that ``count`` consecutive ports are free (each program uses its own)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        if first + count >= 65535:
            continue
        sockets = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError("no free ports")


def _verdicts(stdout):
    return {r["code"]: r["verdict"] for r in json.loads(stdout)["results"]}


@pytest.mark.slow
def test_two_nodes_give_the_single_node_verdicts(tmp_path, verify_every_rule_on_cpu):
    port = _free_ports(2 * len(RULES))
    agents = []
    for node in (0, 1):
        agents.append(subprocess.Popen(
            [sys.executable, "-m", "fsdp_lint", "verify", *RULES, "--nproc", "1", "--nnodes", "2",
             "--node-rank", str(node), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
             "--rdzv-id", "nodes-test", "--format", "json", "--log-dir", str(tmp_path / f"node{node}")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))
    outputs = []
    try:
        for agent in agents:
            outputs.append(agent.communicate(timeout=1200))
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
    single = verify_every_rule_on_cpu  # the same programs on one node, 2 ranks
    expected = {code: row["verdict"] for (code, _), row in single.rows(codes=RULES).items()}
    assert expected == {"FSD004": "CONFIRMED", "FSD102": "CONFIRMED"}, single.result.stderr
    for node, (out, err) in enumerate(outputs):
        assert agents[node].returncode == 0, err
        data = json.loads(out)
        assert data["nnodes"] == 2 and data["world_size"] == 2
        assert _verdicts(out) == expected, err
    # each node holds the logs of the rank that ran on it, and together they hold both
    held = [sorted(p.name for p in (tmp_path / f"node{n}" / "FSD102" / "flagged").glob("rank*.log")) for n in (0, 1)]
    assert sorted(held[0] + held[1]) == ["rank0.log", "rank1.log"], held
