"""Watching local worker processes to the end: how and when each ended, the limit honoured, nothing left running."""

import os
import signal
import textwrap
from pathlib import Path

import pytest

from shardlab.setup.process_ends import ProcessEnd, watch_processes


def write(tmp_path: Path, name: str, code: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code), encoding="utf-8")
    return path


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


# Process 0 exits cleanly after writing JSON; process 1 kills itself with SIGKILL;
# process 2 never ends by itself and writes its pid first.
WORKER = """
    import json, os, signal, sys, time
    pid_file, i = sys.argv[4], int(sys.argv[3])
    with open(pid_file, "w") as f:
        json.dump({"pid": os.getpid(), "i": i}, f)
    if i == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    if i == 2:
        time.sleep(600)
    sys.exit(int(sys.argv[5]))
"""


def test_each_end_is_told_apart(tmp_path):
    script = write(tmp_path, "worker.py", WORKER)
    ends = watch_processes(script, 3, timeout=4.0, args=["3"])
    assert [e.process_id for e in ends] == [0, 1, 2]
    clean, killed, stuck = ends
    # the reference: Python's own signal numbers and the status the script chose
    assert (clean.returncode, clean.signal, clean.timed_out) == (3, None, False)
    assert clean.how == "exited with status 3"
    assert killed.returncode == -signal.SIGKILL and killed.signal == "SIGKILL"
    assert killed.how == "killed by SIGKILL"
    assert stuck.timed_out and stuck.seconds == 4.0 and stuck.how == "still running at the limit"
    # the ones that ended by themselves did so well before the limit, and after 0 s
    assert 0 < clean.seconds < 3.5 and 0 < killed.seconds < 3.5
    # results come back, and nothing is left running
    assert [e.result["i"] for e in ends] == [0, 1, 2]
    assert all(gone(e.result["pid"]) for e in ends)


def test_a_clean_run_is_not_cut_short(tmp_path):
    script = write(tmp_path, "ok.py", """
        import sys
        print("hello from", sys.argv[3])
    """)
    ends = watch_processes(script, 2, timeout=30.0)
    assert all(isinstance(e, ProcessEnd) for e in ends)
    assert [e.how for e in ends] == ["exited with status 0"] * 2
    assert [e.stdout.strip() for e in ends] == ["hello from 0", "hello from 1"]
    assert all(e.seconds < 29.0 for e in ends)


@pytest.mark.parametrize("kwargs, words", [
    (dict(num_processes=0), "num_processes must be an integer"),
    (dict(timeout=0), "timeout must be a positive number"),
    (dict(args="x"), "args must be a list of strings"),
    (dict(env={"A": 1}), "env must map variable names"),
])
def test_bad_arguments_are_named(tmp_path, kwargs, words):
    script = write(tmp_path, "ok.py", "pass\n")
    with pytest.raises(ValueError, match=f"watch_processes: {words}"):
        watch_processes(script, **kwargs)


def test_a_missing_script_is_named(tmp_path):
    with pytest.raises(ValueError, match="watch_processes: script must be the path of an existing"):
        watch_processes(tmp_path / "nowhere.py")
    assert not os.path.exists(tmp_path / "nowhere.py")
