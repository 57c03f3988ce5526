"""The lifeline: a process a Stepwise command starts ends when that command is killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The parent starts the child with STEPWISE_PARENT_PID set (as src/train/python.ts does), prints the
# child's pid, then waits to be killed.
PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen(
    [sys.executable, "-c", sys.argv[1]],
    env={**os.environ, "STEPWISE_PARENT_PID": str(os.getpid())} if sys.argv[2] == "1" else dict(os.environ),
)
print(child.pid, flush=True)
time.sleep(120)
"""

CHILD = """
from stepwise_client.lifeline import exit_with_parent
exit_with_parent(interval=0.1)
import time
time.sleep(120)
"""


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody has reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"


class LifelineTest(unittest.TestCase):
    def run_family(self, with_lifeline: bool) -> tuple[subprocess.Popen[str], int]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("STEPWISE_PARENT_PID", None)
        parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, CHILD, "1" if with_lifeline else "0"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(0.5)  # the child is up and watching
        return parent, child

    def kill_and_wait(self, parent: subprocess.Popen[str], child: int) -> bool:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert parent.stdout is not None
        parent.stdout.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if gone(child):
                return True
            time.sleep(0.05)
        return False

    def test_the_child_exits_when_its_parent_is_killed(self) -> None:
        parent, child = self.run_family(with_lifeline=True)
        self.assertFalse(gone(child), "the child is running while its parent lives")
        self.assertTrue(self.kill_and_wait(parent, child), "the child outlived its SIGKILLed parent")

    def test_without_the_variable_nothing_watches(self) -> None:
        parent, child = self.run_family(with_lifeline=False)
        try:
            self.assertFalse(self.kill_and_wait(parent, child), "a hand-started process must keep running")
        finally:
            os.kill(child, signal.SIGKILL)


if __name__ == "__main__":
    unittest.main()
