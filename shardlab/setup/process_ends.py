"""Several local processes watched to the end, however each one ends: for showing what a failure does.

:func:`~shardlab.run_processes` raises as soon as one worker fails, and stops the
others, which is what a chapter wants when nothing should fail. To *see* what
the other processes of a job do when one of them dies, they must be left alone
until they end by themselves, up to a time limit. :func:`watch_processes`
starts the workers exactly as ``run_processes`` does (the same command line, a
process group each, a temporary folder) and returns, for every process, how and
when it ended: its exit status, the signal that killed it, the second it ended
(measured from the start), and whether the time limit had to stop it. Nothing is
left running when it returns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardlab.setup.processes import LOCALHOST, _check_arguments, _kill_group, _read_json, free_port

_POLL_S = 0.05


@dataclass(frozen=True)
class ProcessEnd:
    """How one watched process ended.

    ``seconds`` is when it ended, from the moment the processes were started
    (for a process stopped at the time limit: the limit). ``signal`` is the name
    of the signal that ended it (``"SIGKILL"``, ``"SIGABRT"``) or ``None`` when it
    exited by itself; ``timed_out`` says the time limit stopped it. ``result`` is
    the JSON value it wrote to its result file (``None`` if none).
    """

    process_id: int
    returncode: int
    signal: str | None
    seconds: float
    timed_out: bool
    result: Any = field(default=None, repr=False)
    stdout: str = field(default="", repr=False)
    stderr: str = field(default="", repr=False)

    @property
    def how(self) -> str:
        """How the process ended, in one phrase ('exited with status 0', 'killed by SIGABRT', ...)."""
        if self.timed_out:
            return "still running at the limit"
        if self.signal is not None:
            return f"killed by {self.signal}"
        return f"exited with status {self.returncode}"


def _signal_name(returncode: int) -> str | None:
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def watch_processes(script, num_processes: int = 2, *, timeout: float = 60.0, args: Sequence[str] = (),
                    env: Mapping[str, str] | None = None) -> list[ProcessEnd]:
    """Run ``num_processes`` copies of ``script`` as :func:`~shardlab.run_processes` does; wait for each to end.

    No process is stopped because another failed: each one runs until it ends by
    itself or ``timeout`` seconds have passed since the start, when every process
    still running is killed (its :class:`ProcessEnd` says ``timed_out``). Returns
    one :class:`ProcessEnd` per process, in process order. Every process group
    started here has been killed and every process reaped before it returns.
    """
    path, extra, env_updates = _check_arguments(script, num_processes, timeout, args, env,
                                                name="watch_processes")
    coordinator = f"{LOCALHOST}:{free_port()}"
    child_env = dict(os.environ, **env_updates)

    with tempfile.TemporaryDirectory(prefix="shardlab-watch-") as tmp, contextlib.ExitStack() as files:
        tmpdir = Path(tmp)
        procs: list[subprocess.Popen] = []
        logs = []
        started = time.monotonic()
        ended: dict[int, float] = {}
        try:
            for i in range(num_processes):
                out = files.enter_context(open(tmpdir / f"stdout.{i}", "w+", encoding="utf-8", errors="replace"))
                err = files.enter_context(open(tmpdir / f"stderr.{i}", "w+", encoding="utf-8", errors="replace"))
                logs.append((out, err))
                command = [sys.executable, str(path), coordinator, str(num_processes), str(i),
                           str(tmpdir / f"result.{i}.json"), *extra]
                procs.append(subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                              env=child_env, cwd=tmp, start_new_session=True))
            deadline = started + timeout
            while len(ended) < num_processes and time.monotonic() < deadline:
                now = time.monotonic()
                for i, proc in enumerate(procs):
                    if i not in ended and proc.poll() is not None:
                        ended[i] = now
                time.sleep(_POLL_S)
        finally:
            for proc in procs:
                _kill_group(proc)
            for proc in procs:
                proc.wait()

        ends = []
        for i, (proc, (out, err)) in enumerate(zip(procs, logs)):
            out.seek(0)
            err.seek(0)
            timed_out = i not in ended
            try:
                value = _read_json(tmpdir / f"result.{i}.json")
            except ValueError:
                value = None
            ends.append(ProcessEnd(
                process_id=i, returncode=proc.returncode,
                signal=None if timed_out else _signal_name(proc.returncode),
                seconds=round(float(timeout) if timed_out else ended[i] - started, 3),
                timed_out=timed_out, result=value, stdout=out.read(), stderr=err.read()))
        return ends
