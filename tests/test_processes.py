"""Launching local worker processes: results come back, hangs and failures are named, nothing is left running."""

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from shardlab.setup.processes import ProcessResult, ProcessesFailed, ProcessesTimedOut, free_port, run_processes


def write(tmp_path: Path, name: str, code: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code), encoding="utf-8")
    return path


def gone(pid: int) -> bool:
    """True when no process `pid` is running: it does not exist, or only a zombie of somebody else is left."""
    if Path("/proc/self/stat").exists():  # Linux: a zombie still answers os.kill, so read its state
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        return state in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def not_our_child(pid: int) -> bool:
    """True when `pid` is no unreaped child of this test process (no zombie left behind by the launcher)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


ECHO = """
    import json, sys
    coordinator, n, i, result_file, *extra = sys.argv[1:]
    print("hello from", i)
    print("to stderr", i, file=sys.stderr)
    with open(result_file, "w") as f:
        json.dump({"coordinator": coordinator, "n": int(n), "i": int(i), "extra": extra}, f)
"""


def test_free_port_is_bindable():
    import socket

    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_launch_returns_each_result_in_process_order(tmp_path):
    script = write(tmp_path, "echo.py", ECHO)
    runs = run_processes(script, 3, timeout=30, args=["a", "b"])
    assert [r.process_id for r in runs] == [0, 1, 2]
    assert all(isinstance(r, ProcessResult) and r.returncode == 0 for r in runs)
    coordinators = {r.result["coordinator"] for r in runs}
    assert len(coordinators) == 1
    host, port = coordinators.pop().rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    assert [r.result for r in runs] == [{"coordinator": f"{host}:{port}", "n": 3, "i": i, "extra": ["a", "b"]}
                                        for i in range(3)]
    assert runs[1].stdout.strip() == "hello from 1" and runs[2].stderr.strip() == "to stderr 2"
    assert all(gone(r.pid) and not_our_child(r.pid) for r in runs)


def test_env_reaches_the_workers_and_missing_result_is_none(tmp_path):
    script = write(tmp_path, "env.py", """
        import os
        print(os.environ["SHARDLAB_TEST_VALUE"])
    """)
    (run,) = run_processes(script, 1, timeout=30, env={"SHARDLAB_TEST_VALUE": "forty-two"})
    assert run.stdout.strip() == "forty-two" and run.result is None


def test_a_hanging_worker_is_killed_at_the_timeout_with_what_it_started(tmp_path):
    pids = tmp_path / "pids.json"
    script = write(tmp_path, "hang.py", f"""
        import json, subprocess, sys, time
        i = int(sys.argv[3])
        if i == 0:
            sys.exit(0)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open({str(pids)!r}, "w") as f:
            json.dump({{"worker": __import__("os").getpid(), "child": child.pid}}, f)
        print("waiting for ever", file=sys.stderr, flush=True)
        time.sleep(600)
    """)
    started = time.monotonic()
    with pytest.raises(ProcessesTimedOut, match=r"process 1 \(pid \d+\) of 2 running hang\.py did not finish "
                                                r"within 3 s") as info:
        run_processes(script, 2, timeout=3)
    assert time.monotonic() - started < 20
    assert "waiting for ever" in str(info.value) and "process 0" not in str(info.value).split(";")[0]
    assert isinstance(info.value, TimeoutError)
    started_pids = json.loads(pids.read_text())
    assert not_our_child(started_pids["worker"]) and gone(started_pids["worker"])
    deadline = time.monotonic() + 5  # the killed grandchild is reaped by whoever adopted it
    while not gone(started_pids["child"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(started_pids["child"])


def test_a_failing_worker_is_named_and_the_others_are_stopped(tmp_path):
    script = write(tmp_path, "fail.py", """
        import sys, time
        if sys.argv[3] == "1":
            raise ValueError("worker one gives up")
        time.sleep(600)   # like a process waiting for a collective that never comes
    """)
    started = time.monotonic()
    with pytest.raises(ProcessesFailed, match=r"process 1 of 2 \(fail\.py, pid \d+\) exited with status 1") as info:
        run_processes(script, 2, timeout=60)
    assert time.monotonic() - started < 20
    assert "worker one gives up" in str(info.value)


def test_processes_already_started_are_killed_when_starting_another_fails(tmp_path, monkeypatch):
    import subprocess

    import shardlab.setup.processes as processes

    script = write(tmp_path, "sleep.py", """
        import time
        time.sleep(600)
    """)
    real_popen, started = subprocess.Popen, []

    def popen_once(*args, **kwargs):
        if started:
            raise OSError("no more processes")
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(processes.subprocess, "Popen", popen_once)
    with pytest.raises(OSError, match="no more processes"):
        run_processes(script, 2, timeout=60)
    assert started and started[0].returncode is not None
    assert gone(started[0].pid) and not_our_child(started[0].pid)


def test_a_result_that_is_not_json_is_an_error(tmp_path):
    script = write(tmp_path, "bad.py", """
        import sys
        open(sys.argv[4], "w").write("{not json")
    """)
    with pytest.raises(ProcessesFailed, match="not JSON"):
        run_processes(script, 1, timeout=30)


@pytest.mark.parametrize("kwargs, name", [
    ({"script": "/no/such/file.py"}, "script"),
    ({"script": 3}, "script"),
    ({"num_processes": 0}, "num_processes"),
    ({"num_processes": 2.0}, "num_processes"),
    ({"num_processes": True}, "num_processes"),
    ({"num_processes": 1000}, "num_processes"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": float("inf")}, "timeout"),
    ({"timeout": "10"}, "timeout"),
    ({"args": "abc"}, "args"),
    ({"args": [1, 2]}, "args"),
    ({"env": {"A": 1}}, "env"),
    ({"env": ["A"]}, "env"),
])
def test_bad_arguments_name_the_argument(tmp_path, kwargs, name):
    script = write(tmp_path, "ok.py", ECHO)
    call = {"script": script, "num_processes": 1, "timeout": 10, **kwargs}
    with pytest.raises(ValueError, match=rf"\b{name} must"):
        run_processes(call.pop("script"), **call)


def test_free_port_rejects_a_bad_host():
    with pytest.raises(ValueError, match="host must"):
        free_port("")


JAX_WORKER = """
    import json, sys
    import jax
    import numpy as np
    from functools import partial
    from jax.sharding import NamedSharding, PartitionSpec as P

    coordinator, n, i, result_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", 2)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=n, process_id=i,
                               coordinator_bind_address=coordinator)
    mesh = jax.make_mesh((n, 2), ("x", "y"))
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x", "y")),
                                               np.full((1, 4), float(i + 1), np.float32), (n, 4))

    @jax.jit
    @partial(jax.shard_map, mesh=mesh, in_specs=P("x", "y"), out_specs=P(None, "y"))
    def total(block):
        return jax.lax.psum(block, "x")

    with open(result_file, "w") as f:
        json.dump({"process_count": jax.process_count(), "devices": len(jax.devices()),
                   "sum": float(jax.jit(lambda a: a.sum())(x)),
                   "psum": [float(s.data.sum()) for s in total(x).addressable_shards]}, f)
"""


def test_real_jax_processes_run_a_cross_process_collective(tmp_path):
    script = write(tmp_path, "jax_worker.py", JAX_WORKER)
    runs = run_processes(script, 2, timeout=120)
    assert len(runs) == 2
    for r in runs:
        assert r.result == {"process_count": 2, "devices": 4, "sum": 12.0, "psum": [6.0, 6.0]}, r.stderr
    assert all(gone(r.pid) and not_our_child(r.pid) for r in runs)
