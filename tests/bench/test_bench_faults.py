"""Faults on a real PostgreSQL store: a node SIGKILLed in a two-node torchrun job, the server
restarted mid-run, the server gone for good. Every manifest row ends up stored exactly once,
nothing stored is scored again, and no clip is scored twice while its lease holds."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import List, Tuple

import pytest
from helpers import _torchrun, write_clips, write_jsonl
from pg_server import _free_port

from geocon_torch.bench import ResultStore

TESTS = Path(__file__).resolve().parents[1]  # tests/ (bench_worker.py, helpers.py)
WORKER = TESTS / "bench_worker.py"


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent), env.get("PYTHONPATH", "")])
    return env


def _calls(log: Path) -> List[Tuple[str, str, float]]:
    """(clip_id, node, unix time) of every scorer call logged under ``log.*``."""
    out = []
    for f in log.parent.glob(log.name + ".*"):
        for line in f.read_text().splitlines():
            cid, node, _, t = line.split()
            out.append((cid, node, float(t)))
    return sorted(out, key=lambda c: c[2])


def _stored(db: str) -> Tuple[List[str], int]:
    with ResultStore(db) as s:
        return sorted(r["clip_id"] for r in s.rows()), s.count()


def _wait_calls(log: Path, n: int, procs, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while len(_calls(log)) < n:
        assert time.monotonic() < deadline, "workers never started scoring"
        assert all(p.poll() is None for p in procs), "a worker ended early"
        time.sleep(0.05)


def _tree(pid: int) -> List[int]:
    """``pid`` and every process below it (torchrun starts its workers in new sessions)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, []))
    return out


def _kill_node(agent: subprocess.Popen) -> None:
    """SIGKILL a torchrun agent and its workers at once (a node dying)."""
    for p in _tree(agent.pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _wait_stored(db: str, n: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while _stored(db)[1] < n:
        assert time.monotonic() < deadline, "the surviving node never finished the job"
        time.sleep(0.2)


def _bench_args(m: Path, db: str, *extra: str) -> List[str]:
    return ["bench", str(m), "--db", db, "--no-progress", *extra]


def _agent(node: int, port: int, log: Path, m: Path, db: str, lease: float) -> subprocess.Popen:
    cmd = [_torchrun(), "--nnodes", "2", "--nproc_per_node", "1", "--node_rank", str(node),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id",
           "faults", str(WORKER), str(log), "0.3", "--",
           *_bench_args(m, db, "--lease-s", str(lease))]
    return subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until the first agent hosts the c10d rendezvous store (so node 1 is not the host)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "agent 0 never started"
            time.sleep(0.1)


@pytest.mark.slow
def test_two_nodes_one_sigkilled_then_rerun(tmp_path: Path, pg_url: str):
    """Two torchrun agents (--nnodes 2, c10d on 127.0.0.1) share one PostgreSQL store; node 1
    dies mid-run (agent and worker SIGKILLed): node 0 takes node 1's rows once its lease has
    run out and finishes the job; a re-run scores nothing."""
    n, lease = 24, 3.0
    ids = [f"c{i}" for i in range(n)]
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", n))
    log, port = tmp_path / "calls", _free_port()
    agents = [_agent(0, port, log, m, pg_url, lease)]
    try:
        _wait_port(port, agents[0])
        agents.append(_agent(1, port, log, m, pg_url, lease))
        _wait_calls(log, 6, agents)
        kill_t = time.time()
        _kill_node(agents[1])
        _wait_stored(pg_url, n)  # node 0 alone finishes the job
    finally:
        for a in agents:  # node 0's agent would wait minutes at torchrun's exit barrier
            _kill_node(a)
    first = _calls(log)
    nodes = {node for _, node, _ in first}
    assert nodes == {"0", "1"}
    seen = {}
    for cid, node, t in first:
        if cid in seen:  # scored again only after its killed holder's lease ran out
            assert seen[cid][0] == "1" and node == "0"
            assert t >= kill_t + lease / 2, f"{cid} scored again while its lease held"
        seen[cid] = (node, t)
    assert len(first) - len(seen) <= 1  # at most node 1's clip in flight, scored again
    assert sorted(seen) == sorted(ids) and _stored(pg_url) == (sorted(ids), n)
    rerun = subprocess.run([sys.executable, str(WORKER), str(tmp_path / "calls2"), "0", "--",
                            *_bench_args(m, pg_url)], env=_env(), capture_output=True,
                           text=True, timeout=240)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert _calls(tmp_path / "calls2") == []  # nothing stored is scored again
    assert f"{n} clips on 1 rank(s): 0 scored" in rerun.stdout
    assert _stored(pg_url) == (sorted(ids), n)


def _single_with_outage(tmp_path: Path, server, n: int, calls: int, restart_after_s,
                        *extra: str) -> Tuple[str, subprocess.Popen, str, str]:
    """A one-process run on a fresh database of ``server``, stopped after ``calls`` scorer
    calls and (unless ``restart_after_s`` is None) started again after that many seconds.
    Returns (db, finished process, stdout, stderr)."""
    db = server.url(server.create_db())
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", n))
    proc = subprocess.Popen([sys.executable, str(WORKER), str(tmp_path / "calls"), "0.15", "--",
                             *_bench_args(m, db, *extra)], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_calls(tmp_path / "calls", calls, [proc])
        server.stop("fast")
        if restart_after_s is not None:
            time.sleep(restart_after_s)
            server.start()
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return db, proc, out, err


def test_server_restart_mid_run_retries_then_succeeds(tmp_path: Path, own_pg_server):
    n = 16
    db, proc, out, err = _single_with_outage(tmp_path, own_pg_server, n, 4, 1.5,
                                             "--store-timeout", "120", "--lease-s", "30")
    assert proc.returncode == 0, err[-3000:]
    assert "retry 1 in" in err and "geocon store postgresql://" in err
    calls = [c for c, _, _ in _calls(tmp_path / "calls")]
    assert Counter(calls).most_common(1)[0][1] == 1 and len(calls) == n  # none scored twice
    assert _stored(db) == (sorted(f"c{i}" for i in range(n)), n)
    assert f"{n} clips on 1 rank(s): {n} scored" in out


def test_server_gone_is_a_clear_error_and_loses_no_row(tmp_path: Path, own_pg_server):
    n = 12
    db, proc, out, err = _single_with_outage(tmp_path, own_pg_server, n, 3, None,
                                             "--store-timeout", "3", "--lease-s", "4")
    assert proc.returncode == 2, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("geocon bench: error: postgresql://geocon@127.0.0.1")
    assert "did not answer after" in last and "store timeout 3 s" in last
    own_pg_server.start()
    stored, _ = _stored(db)
    called = [c for c, _, _ in _calls(tmp_path / "calls")]
    assert set(stored) <= set(called) and len(stored) >= 2
    rerun = subprocess.run([sys.executable, str(WORKER), str(tmp_path / "again"), "0", "--",
                            *_bench_args(tmp_path / "m.jsonl", db)], env=_env(),
                           capture_output=True, text=True,
                           timeout=240)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert sorted(c for c, _, _ in _calls(tmp_path / "again")) == \
        sorted(set(f"c{i}" for i in range(n)) - set(stored))
    assert _stored(db) == (sorted(f"c{i}" for i in range(n)), n)
