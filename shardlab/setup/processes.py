"""Several JAX processes on one machine: start them, wait for them, always clean up.

A real cluster starts one process per host with its own tooling (Slurm, a TPU
pod's launcher, Kubernetes). To show the same program on one machine we start
the processes ourselves: every one runs the same Python file, learns where the
coordinator listens and which process it is from its command line, and writes
what it found to a JSON file that the caller reads back.

The worker program is called as::

    python WORKER COORDINATOR NUM_PROCESSES PROCESS_ID RESULT_FILE [ARGS...]

with ``COORDINATOR`` a ``127.0.0.1:PORT`` address on a port that was free when
the launch began. Every worker runs in its own process group, which is killed
when the launch ends, however it ends (success, failure, time-out, Ctrl-C), so
that nothing is left running behind a notebook.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOCALHOST = "127.0.0.1"
MAX_PROCESSES = 64
_POLL_S = 0.05
# After one worker fails, the others usually wait for it forever (a collective,
# the coordinator); give them this long to fail on their own, then kill them.
_FAILURE_GRACE_S = 2.0
_TAIL_LINES = 15


class ProcessesFailed(RuntimeError):
    """A worker exited with a non-zero status (the message names it and shows its error output)."""


class ProcessesTimedOut(TimeoutError):
    """Workers were still running when the time limit ran out (the message names them); they were killed."""


@dataclass(frozen=True)
class ProcessResult:
    """What one worker process left behind.

    ``result`` is the JSON value the worker wrote to its result file, or ``None``
    if it wrote none. ``stdout`` and ``stderr`` are its complete output.
    """

    process_id: int
    pid: int
    returncode: int
    seconds: float
    result: Any = field(default=None, repr=False)
    stdout: str = field(default="", repr=False)
    stderr: str = field(default="", repr=False)


def free_port(host: str = LOCALHOST) -> int:
    """Return a TCP port on ``host`` that nothing listens on at this moment.

    The operating system picks it; another program could still take it before
    it is used, which is unlikely in the second between choosing and using it.
    """
    if not isinstance(host, str) or not host:
        raise ValueError(f"free_port: host must be a non-empty string such as '127.0.0.1', got {host!r}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _check_arguments(script, num_processes, timeout, args, env,
                     name: str = "run_processes") -> tuple[Path, list[str], dict]:
    if not isinstance(script, (str, os.PathLike)):
        raise ValueError(f"{name}: script must be the path of a Python file, got {type(script).__name__}")
    path = Path(script)
    if not path.is_file():
        raise ValueError(f"{name}: script must be the path of an existing Python file, got {str(path)!r}")
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or not 1 <= num_processes <= MAX_PROCESSES:
        raise ValueError(f"{name}: num_processes must be an integer from 1 to {MAX_PROCESSES}, "
                         f"got {num_processes!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"{name}: timeout must be a positive number of seconds, got {timeout!r}")
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"{name}: args must be a list of strings (extra command-line arguments), got {args!r}")
    if env is None:
        env = {}
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError(f"{name}: env must map variable names to string values, got {env!r}")
    return path.resolve(), list(args), dict(env)


def _kill_group(proc: subprocess.Popen) -> None:
    # Each worker leads its own process group (start_new_session), so this also
    # reaches whatever it started itself.
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)
        else:  # pragma: no cover - Windows has no process groups of this kind
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join("    " + line for line in kept) or "    (nothing)"


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return json.loads(text) if text.strip() else None


def run_processes(script, num_processes: int = 2, *, timeout: float = 60.0, args: Sequence[str] = (),
                  env: Mapping[str, str] | None = None) -> list[ProcessResult]:
    """Run ``num_processes`` copies of the Python file ``script`` at once and wait for all of them.

    Process ``i`` is started as ``python script 127.0.0.1:PORT num_processes i RESULT_FILE *args``
    with the same Python interpreter as the caller, the caller's environment
    updated with ``env``, and a port that was free at the start. Returns one
    :class:`ProcessResult` per process, in process order, each holding the JSON
    value that process wrote to its ``RESULT_FILE``.

    Raises :class:`ProcessesTimedOut` (a ``TimeoutError``) naming the processes
    still running after ``timeout`` seconds, and :class:`ProcessesFailed` (a
    ``RuntimeError``) naming a process that exited with a non-zero status, with
    the end of its error output. In every case, every process group started here
    has been killed and every process reaped before this function returns.
    """
    path, extra, env_updates = _check_arguments(script, num_processes, timeout, args, env)
    coordinator = f"{LOCALHOST}:{free_port()}"
    child_env = dict(os.environ, **env_updates)

    with tempfile.TemporaryDirectory(prefix="shardlab-processes-") as tmp, contextlib.ExitStack() as files:
        tmpdir = Path(tmp)
        procs: list[subprocess.Popen] = []
        logs = []
        started = time.monotonic()
        ended: dict[int, float] = {}
        try:
            for i in range(num_processes):
                # Files, not pipes: a chatty worker cannot block on a full pipe nobody reads.
                out = files.enter_context(open(tmpdir / f"stdout.{i}", "w+", encoding="utf-8", errors="replace"))
                err = files.enter_context(open(tmpdir / f"stderr.{i}", "w+", encoding="utf-8", errors="replace"))
                logs.append((out, err))
                command = [sys.executable, str(path), coordinator, str(num_processes), str(i),
                           str(tmpdir / f"result.{i}.json"), *extra]
                procs.append(subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                              env=child_env, cwd=tmp, start_new_session=True))
            deadline = started + timeout
            first_failure_at = None
            while True:
                now = time.monotonic()
                for i, proc in enumerate(procs):
                    if i not in ended and proc.poll() is not None:
                        ended[i] = now
                        if proc.returncode != 0 and first_failure_at is None:
                            first_failure_at = now
                if len(ended) == num_processes or now >= deadline:
                    break
                if first_failure_at is not None and now - first_failure_at >= _FAILURE_GRACE_S:
                    break
                time.sleep(_POLL_S)
        finally:
            # However we got here (done, failure, time-out, Ctrl-C): kill every group, reap every process.
            for proc in procs:
                _kill_group(proc)
            for proc in procs:
                proc.wait()

        outputs = []
        for out, err in logs:
            out.seek(0)
            err.seek(0)
            outputs.append((out.read(), err.read()))

        name = path.name
        failed = [i for i in sorted(ended, key=ended.get) if procs[i].returncode != 0]
        if failed:
            i = failed[0]
            others = "" if len(ended) == num_processes else " (the processes still running were then stopped)"
            raise ProcessesFailed(
                f"process {i} of {num_processes} ({name}, pid {procs[i].pid}) exited with status "
                f"{procs[i].returncode}{others}; the end of its error output:\n{_tail(outputs[i][1])}")
        still_running = [i for i in range(num_processes) if i not in ended]
        if still_running:
            which = ", ".join(f"process {i} (pid {procs[i].pid})" for i in still_running)
            i = still_running[0]
            raise ProcessesTimedOut(
                f"{which} of {num_processes} running {name} did not finish within {timeout:g} s and "
                f"{'was' if len(still_running) == 1 else 'were'} killed; the end of process {i}'s error "
                f"output:\n{_tail(outputs[i][1])}")

        results = []
        for i, proc in enumerate(procs):
            try:
                value = _read_json(tmpdir / f"result.{i}.json")
            except ValueError as exc:
                raise ProcessesFailed(f"process {i} of {num_processes} ({name}) wrote a result file "
                                      f"that is not JSON: {exc}") from None
            results.append(ProcessResult(process_id=i, pid=proc.pid, returncode=proc.returncode,
                                         seconds=round(ended[i] - started, 3), result=value,
                                         stdout=outputs[i][0], stderr=outputs[i][1]))
        return results
