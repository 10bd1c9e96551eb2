"""`rcvgp bench` as a user or a batch scheduler runs it: a subprocess, stopped by a signal."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.integration
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through Linux /proc")
def test_sigterm_ends_the_workers_and_writes_the_table(tmp_path: Path) -> None:
    """`kill` or `timeout` stops a benchmark as Ctrl-C does: no worker is left running its search,
    and the output folder says the benchmark was interrupted."""
    out = tmp_path / "bench"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rcvgp", "bench", "--ids", "sincos-3-2-2/1", "--methods", "racing", "--seeds", "2",
         "--jobs", "2", "--time-cap", "600", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            # the pool's workers, not its resource tracker: they import rcvgp and start a search
            workers = [p for p in _children(proc.pid) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(workers) == 2, proc.communicate(timeout=60)
        time.sleep(2.0)  # into the searches, which take about 20 s each
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in workers), "a worker outlived `rcvgp bench`"
