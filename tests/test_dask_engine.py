"""Running mapped schedules on Dask distributed (mapper.run.dask_engine)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed")

from randdag import round_robin

from mapper.cli import main
from mapper.errors import OptionsError
from mapper.frontend.load import graph_from_text
from mapper.mapping.base import MapResult
from mapper.pipeline import compile_graph
from mapper.run.dask_engine import execute_dask
from mapper.run.execute import ExecutionError, execute

ROOT = Path(__file__).resolve().parents[1]
JACOBI = (ROOT / "examples" / "jacobi2d.tg").read_text().replace("param N = 4096, K = 10, R = 10",
                                                                   "param N = 128, K = 3, R = 3")
ENV = {**os.environ, "DASK_LOGGING__DISTRIBUTED": "error", "PYTHONPATH": str(ROOT)}


def spread(text: str = JACOBI) -> MapResult:
    """The graph (fused, as on cpu-gpu-fpga) with tasks dealt round-robin over their feasible devices."""
    return round_robin(compile_graph(graph_from_text(text), "cpu-gpu-fpga", mapper="heft").result)


def test_in_process_workers_run_every_task_on_its_device_and_match_the_local_run():
    res = spread()
    trace = execute_dask(res, repeats=2, processes=False)
    local = execute(res, repeats=1)
    assert trace.engine == "dask" and trace.workers == 3
    assert [n for n, _ in trace.outputs] == [n for n, _ in local.outputs]
    for (_, x), (_, y) in zip(trace.outputs, local.outputs):
        np.testing.assert_array_equal(x, y)
    for r in trace.records:
        assert r.worker == r.device_name  # the embedded cluster names each worker after its device
        assert r.engine_start is not None and r.engine_end is not None and r.engine_end >= r.engine_start
        assert (r.measured is not None) and (r.modelled is None) == (r.device_kind == "cpu")
    # the mapped per-device order holds on every worker
    for d in {r.device for r in trace.records}:
        mine = sorted((r for r in trace.records if r.device == d), key=lambda r: r.predicted_start)
        assert [r.engine_start for r in mine] == sorted(r.engine_start for r in mine)
    # tensors moved between workers, with the schedule's predicted interval beside the engine's
    assert trace.transfers and all(x.source != x.worker for x in trace.transfers)
    assert any(x.predicted_start is not None for x in trace.transfers)
    doc = trace.to_json_dict()
    assert doc["engine"] == "dask" and {t["worker"] for t in doc["tasks"]} == {"cpu0", "gpu0", "fpga0"}
    assert doc["transfers"][0].keys() >= {"task", "source", "worker", "start", "end", "predicted_start"}


def test_a_failing_task_names_itself_and_its_device(monkeypatch):
    from mapper.kernels import registry

    real = registry.run_kernel

    def flaky(op, inputs, attrs):
        if op == "reduce":
            raise ValueError("boom")
        return real(op, inputs, attrs)

    monkeypatch.setattr(registry, "run_kernel", flaky)  # in-process workers share this module
    with pytest.raises(ExecutionError, match=r"task 'res0' failed on the worker of device \w+0: ValueError: boom"):
        execute_dask(spread(), repeats=1, processes=False)


def test_engine_options_are_checked_before_anything_runs(tmp_path, capsys):
    src = tmp_path / "j.tg"
    src.write_text(JACOBI)
    assert main(["run", str(src), "--platform", "cpu-gpu-fpga", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "--scheduler applies only with --engine dask" in capsys.readouterr().err
    assert main(["run", str(src), "--platform", "cpu-gpu-fpga", "--engine", "dask", "--retries", "-1"]) == 2
    assert "--retries must be >= 0" in capsys.readouterr().err
    assert main(["run", str(src), "--platform", "cpu-gpu-fpga", "--engine", "dask", "--backend", "numpy"]) == 2
    assert "--backend numpy applies only with --engine local" in capsys.readouterr().err
    for address in ("foo://bar", "tcp://", "tcp://a b", "not-an-address", "tcp://127.0.0.1:abc", "ucx://",
                    "tls://", "tls://127.0.0.1:8786", "inproc://x", "tcp://127.0.0.1:99999", "tcp://127.0.0.1:0"):
        assert main(["run", str(src), "--platform", "cpu-gpu-fpga", "--engine", "dask", "--scheduler", address]) == 2
        err = capsys.readouterr().err
        assert "is not a tcp://HOST:PORT address" in err or "has no host and port" in err, err
        assert "Error" not in err


class Peer:
    """A listener on 127.0.0.1 that is not a Dask scheduler: it accepts and stays
    silent, or answers every connection with ``reply``."""

    def __init__(self, reply: bytes = b"") -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        self.reply, self.conns = reply, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
                if self.reply:
                    conn.sendall(self.reply)

    def close(self) -> None:
        for c in [*self.conns, self.sock]:
            c.close()


@pytest.mark.parametrize("reply, needle", [(b"", "does not answer within"),
                                           (b"\xff" * 64 + b"HTTP/1.1 200 OK\r\n\r\n" * 8, "does not answer as"),
                                           (b"\x01" + b"\x00" * 7 + b"\xff" * 8, "does not answer as")])
def test_a_peer_that_is_not_a_scheduler_is_refused_within_the_bound(reply, needle, capsys):
    from mapper.run.dask_engine import PROBE_TIMEOUT, probe_scheduler

    peer = Peer(reply)
    try:
        t0 = time.monotonic()
        with pytest.raises(OptionsError, match=needle):
            probe_scheduler(peer.address, timeout=2.0)
        assert time.monotonic() - t0 < 3 * 2.0 + 5  # connect, write, read: each bounded
        assert 3 * PROBE_TIMEOUT <= 60  # the documented connection bound (docs/execution.md)
    finally:
        peer.close()


def test_nothing_listening_is_bad_input_at_once():
    from mapper.run.dask_engine import probe_scheduler

    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # free once closed
    with pytest.raises(OptionsError, match="cannot reach the Dask scheduler"):
        probe_scheduler(f"tcp://127.0.0.1:{port}", timeout=2.0)


# -- a cluster started by hand ----------------------------------------------------------

class Cluster:
    """A scheduler and named workers in their own processes on 127.0.0.1, all killed on close."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.procs: dict[str, subprocess.Popen] = {}
        file = tmp_path / "scheduler.json"
        self.procs["scheduler"] = self._start([sys.executable, "-m", "distributed.cli.dask_scheduler",
                                               "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                               "--dashboard-address", "127.0.0.1:0",
                                               "--scheduler-file", str(file)])
        deadline = time.monotonic() + 60
        while not file.exists() or not file.read_text().strip():
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.1)
        self.address = json.loads(file.read_text())["address"]

    def _start(self, cmd: list[str]) -> subprocess.Popen:
        return subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)

    def worker(self, name: str, resources: str | None = None) -> None:
        cmd = [sys.executable, "-m", "distributed.cli.dask_worker", self.address, "--name", name, "--nthreads", "1",
               "--host", "127.0.0.1", "--no-nanny", "--no-dashboard", "--dashboard-address", "127.0.0.1:0",
               "--local-directory", str(self.tmp)]
        if resources:
            cmd += ["--resources", resources]
        self.procs[name] = self._start(cmd)

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


def test_cli_against_a_cluster_of_named_worker_processes(cluster, tmp_path, capsys):
    cluster.worker("cpu0")
    cluster.worker("gpu0")
    cluster.worker("other", resources="fpga0=1")  # a worker may serve a device through a resource
    src = tmp_path / "j.tg"
    src.write_text(JACOBI.replace('kind = "max")', 'kind = "max") @cpu0'))  # a transfer between workers
    out = tmp_path / "r.json"
    code = main(["run", str(src), "--platform", "cpu-gpu-fpga", "--mapper", "heft", "--engine", "dask",
                 "--scheduler", cluster.address, "--repeats", "1", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    assert "engine dask" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["engine"] == "dask"
    for t in doc["tasks"]:
        assert t["worker"] == {"cpu0": "cpu0", "gpu0": "gpu0", "fpga0": "other"}[t["device"]]
        assert t["measured"] is not None and t["engine_start"] is not None
    # engine transfers are matched to the schedule's by the sending worker's device (Dask may also fetch
    # a replica from a third worker, which the schedule does not know)
    assert doc["transfers"] and any(x["predicted_start"] is not None for x in doc["transfers"])


def test_a_device_without_a_worker_is_an_error_naming_it(cluster, tmp_path, capsys, monkeypatch):
    import mapper.run.dask_engine as engine

    monkeypatch.setattr(engine, "WORKER_WAIT", 2.0)
    cluster.worker("cpu0")
    res = spread()
    with pytest.raises(ExecutionError, match="no Dask worker serves devices gpu0, fpga0"):
        engine.execute_dask(res, repeats=1, scheduler=cluster.address)


@pytest.mark.slow
def test_a_worker_killed_mid_run_ends_the_run_naming_it(cluster, tmp_path):
    for name in ("cpu0", "gpu0", "fpga0"):
        cluster.worker(name)
    res = spread(JACOBI.replace("param N = 128, K = 3, R = 3", "param N = 1024, K = 200, R = 3"))
    threading.Timer(4.0, cluster.kill, args=("gpu0",)).start()
    t0 = time.monotonic()
    with pytest.raises(ExecutionError, match="worker of device gpu0 left the cluster"):
        execute_dask(res, repeats=50, scheduler=cluster.address)
    assert time.monotonic() - t0 < 120


@pytest.mark.slow
def test_with_retries_a_lost_worker_that_comes_back_finishes_the_run(cluster):
    for name in ("cpu0", "gpu0", "fpga0"):
        cluster.worker(name)
    res = spread(JACOBI.replace("param N = 128, K = 3, R = 3", "param N = 1024, K = 200, R = 3"))
    local = execute(spread(), repeats=1)

    def bounce():
        cluster.kill("gpu0")
        time.sleep(1.0)
        cluster.worker("gpu0")

    threading.Timer(4.0, bounce).start()
    trace = execute_dask(res, repeats=8, scheduler=cluster.address, retries=1)
    assert {r.worker for r in trace.records} == {"cpu0", "gpu0", "fpga0"}
    assert local.outputs  # the small run for comparison ran too
    small = execute_dask(spread(), repeats=1, scheduler=cluster.address)
    for (_, x), (_, y) in zip(small.outputs, local.outputs):
        np.testing.assert_array_equal(x, y)


def _session_processes(sid: int) -> int:
    """Processes of session ``sid`` (the run and the workers its embedded cluster started)."""
    count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        count += len(fields) > 3 and fields[3] == str(sid)
    return count


def _wait_for_workers(sid: int, workers: int, limit: float) -> None:
    """Wait until the session has ``workers`` processes besides the run (bounded by ``limit`` s)."""
    deadline = time.monotonic() + limit
    while _session_processes(sid) < 1 + workers and time.monotonic() < deadline:
        time.sleep(0.25)


@pytest.mark.slow
def test_ctrl_c_ends_a_dask_run_and_leaves_no_process_behind(tmp_path):
    src = tmp_path / "j.tg"
    src.write_text(JACOBI.replace("param N = 128, K = 3, R = 3", "param N = 1024, K = 200, R = 3"))
    proc = subprocess.Popen([sys.executable, "-m", "mapper", "run", str(src), "--platform", "cpu-gpu-fpga",
                             "--engine", "dask", "--repeats", "200"], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # the cluster's three workers (one per device) are up, however long a loaded machine takes,
        # and the run under way
        _wait_for_workers(proc.pid, 3, 90.0)
        time.sleep(6.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    deadline = time.monotonic() + 30
    while True:  # every worker process of the embedded cluster is gone
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "worker processes were left behind"
        time.sleep(0.5)
