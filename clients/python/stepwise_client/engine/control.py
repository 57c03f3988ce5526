"""Pause, resume, abort and the weight-load gate of the reference engine (vLLM's RL control semantics).

Every generation is a `Run` that passes `Control.boundary` before each forward pass; that token
boundary is where an abort stops it and where a `keep` pause or a weight load parks it. All state
lives under one condition variable; the generation lock (`ReferenceEngine.lock`) is only ever taken
without blocking while that condition is held, so the two cannot deadlock.

Run states: waiting (not admitted: the engine is paused), queued (admitted, before its first
boundary), running (between boundaries: it may touch the model), held (parked at a boundary),
ending (aborted: it will not touch the model again).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

PAUSE_MODES = ("abort", "wait", "keep")
# A safety net for holders of `ReferenceEngine.lock` outside this module, who do not notify on release.
LOCK_POLL_S = 0.5


@dataclass(eq=False)
class Run:
    keys: frozenset[str]  # the ids `/abort_requests` may name it by
    state: str = "waiting"
    aborted: bool = False
    stopped: bool = False  # set by the generation loop when an abort ended it early
    has_lock: bool = False


class Control:
    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.cond = threading.Condition()
        self.runs: list[Run] = []
        self.paused = False
        self.mode: str | None = None
        self.loading = 0  # weight loads in progress on the paused path
        self.update_active = False  # between /start_weight_update and /finish_weight_update
        self.weights_lock = threading.Lock()  # two loads never interleave

    # --- generations -------------------------------------------------------------------------

    def _holding(self) -> bool:
        return (self.paused and self.mode == "keep") or self.loading > 0

    def _running(self) -> bool:
        return any(r.state == "running" for r in self.runs)

    @contextmanager
    def generation(self, keys: set[str]) -> Iterator[Run]:
        """Admits a run (after a resume, if paused) and takes the generation lock for it.

        An abort while it waits ends the wait without the lock: its first boundary then stops it
        before it touches the model.
        """
        run = Run(frozenset(keys))
        with self.cond:
            self.runs.append(run)  # registered before admission, so /abort_requests can name it
            while self.paused and not run.aborted:
                self.cond.wait()
            run.state = "queued"
            while not run.aborted and not self.lock.acquire(blocking=False):
                self.cond.wait(LOCK_POLL_S)
            run.has_lock = not run.aborted
        try:
            yield run
        finally:
            with self.cond:
                self.runs.remove(run)
                run.state = "done"
                if run.has_lock:
                    self.lock.release()
                self.cond.notify_all()

    def boundary(self, run: Run) -> bool:
        """Called before each forward pass: parks while held; False when the run is aborted."""
        with self.cond:
            if self._holding() and not run.aborted:
                run.state = "held"
                self.cond.notify_all()  # a pause or a load waits for running runs to park
                while self._holding() and not run.aborted:
                    self.cond.wait()
            run.state = "ending" if run.aborted else "running"
            if run.aborted:
                self.cond.notify_all()
            return not run.aborted

    # --- pause / resume / abort --------------------------------------------------------------

    def pause(self, mode: str) -> None:
        """Returns once the mode's promise holds: aborted or finished (abort, wait), parked (keep)."""
        assert mode in PAUSE_MODES, mode
        with self.cond:
            self.paused, self.mode = True, mode
            admitted = [r for r in self.runs if r.state != "waiting"]
            if mode == "abort":
                for r in admitted:
                    r.aborted = True
            self.cond.notify_all()
            if mode == "keep":
                done = lambda: not self._running()  # noqa: E731
            else:
                done = lambda: all(r.state == "done" for r in admitted)  # noqa: E731
            # A /resume meanwhile ends the wait too: the pause it answers is over.
            while self.paused and self.mode == mode and not done():
                self.cond.wait()

    def resume(self) -> None:
        with self.cond:
            self.paused, self.mode = False, None
            self.cond.notify_all()

    def is_paused(self) -> bool:
        with self.cond:
            return self.paused

    def abort(self, ids: set[str] | None) -> int:
        """Flags the named runs (all of them for None); each stops at its next boundary."""
        with self.cond:
            targets = [r for r in self.runs if not r.aborted and (ids is None or r.keys & ids)]
            for r in targets:
                r.aborted = True
            self.cond.notify_all()
            return len(targets)

    def counts(self) -> dict[str, int]:
        """How many runs are in each state (for tests and logs)."""
        with self.cond:
            out: dict[str, int] = {}
            for r in self.runs:
                out[r.state] = out.get(r.state, 0) + 1
            return out

    # --- weights -----------------------------------------------------------------------------

    @contextmanager
    def weights_change(self) -> Iterator[None]:
        """Where weights may change: while paused, once no run is between boundaries (parked runs
        are at a safe point and hold until the load ends); otherwise between generations, under
        the generation lock, as the load routes always did.
        """
        with self.cond:
            while True:
                if self.paused:
                    locked = False
                    self.loading += 1
                    while self._running():
                        self.cond.wait()
                    break
                if self.lock.acquire(blocking=False):
                    locked = True
                    break
                self.cond.wait(LOCK_POLL_S)
        try:
            with self.weights_lock:
                yield
        finally:
            with self.cond:
                if locked:
                    self.lock.release()
                else:
                    self.loading -= 1
                self.cond.notify_all()

    def start_update(self) -> bool:
        """False when one is already in progress (the caller answers 409)."""
        with self.cond:
            if self.update_active:
                return False
            self.update_active = True
            return True

    def finish_update(self) -> bool:
        """False when none is in progress."""
        with self.cond:
            if not self.update_active:
                return False
            self.update_active = False
            return True
