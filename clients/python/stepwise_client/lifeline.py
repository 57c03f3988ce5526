"""Ends a process whose parent is gone, for processes a Stepwise command starts.

`stepwise train` starts the reference engine and the trainer and stops them when it ends. If it is
killed outright (SIGKILL, a test worker torn down) it cannot: the children would be reparented and
go on serving. The parent names itself in STEPWISE_PARENT_PID; when this process's parent is no
longer that pid, it exits. Without the variable (started by hand) nothing watches.
"""

from __future__ import annotations

import os
import threading

PARENT_ENV = "STEPWISE_PARENT_PID"


def exit_with_parent(interval: float = 1.0) -> threading.Thread | None:
    """Watches, in a daemon thread, that the parent named in STEPWISE_PARENT_PID is still ours."""
    # Taken out of the environment: it names our parent, not our children's.
    value = os.environ.pop(PARENT_ENV, "")
    if not value.isdigit():
        return None
    parent = int(value)
    if os.getppid() != parent and not _alive(parent):
        os._exit(1)  # the parent died before we looked

    def watch() -> None:
        stop = threading.Event()
        while not stop.wait(interval):
            if os.getppid() != parent:
                # os._exit: the main thread may be deep in torch; there is nothing to flush for anyone.
                os._exit(1)

    thread = threading.Thread(target=watch, name="stepwise-lifeline", daemon=True)
    thread.start()
    return thread


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
