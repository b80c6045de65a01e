"""One headless engine turn of the supervision host, and the rows it may claim: the turn runs
bounded in its own process group, and :func:`judge_turn` decides whether it handled the wake."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

#: Seconds between TERM and KILL of an engine turn that overran.
ENGINE_GRACE = 5.0
OUTPUT_TAIL = 2000


@attrs.frozen
class EngineRun:
    returncode: int | None
    timed_out: bool = False
    #: Set when the command could not be started at all.
    error: str | None = None
    output: str = ""


def judge_turn(run: EngineRun, outcomes: int, left: Sequence[int],
               timeout: float) -> tuple[bool, str]:
    """Was the wake handled? ``(True, "handled")`` or ``(False, <why>)``. Pure."""
    if run.error is not None:
        return False, f"engine could not start: {run.error}"
    if run.timed_out:
        return False, f"engine turn timed out after {timeout:g}s"
    if run.returncode != 0:
        return False, f"engine turn failed (exit {run.returncode})"
    if outcomes == 0:
        return False, "engine turn reported no outcome (fm host report)"
    if left:
        shown = ",".join(str(s) for s in list(left)[:20])
        return False, f"engine turn left granted row(s) {shown} queued"
    return True, "handled"


def engine_prompt(reasons: Sequence[str], seqs: Sequence[int], generation: str,
                  contract: Sequence[str]) -> str:
    from firstmate.base.waketext import one_line

    lines = [
        "FIRSTMATE_OP: supervision branch turn (the captain is away). Wake:",
        *(f"  {one_line(r)}" for r in reasons),
        f"Granted rows: {','.join(str(s) for s in seqs)} (grant {generation}). You are the "
        "supervision branch: FM_SUPERVISION_ACTOR=branch is set for every fm command you run.",
        "1. Run `fm wake drain` to see your rows.",
        "2. Handle each wake within the away contract below.",
        "3. Record one outcome per wake: `fm host report \"<what happened, what you did>\"` "
        "(add --captain when the captain must see it on return).",
        "4. Run the exact WAKE_ACK_REQUIRED acknowledgement command the drain printed.",
        "Away contract:",
        *(f"- {rule}" for rule in contract),
    ]
    return "\n".join(lines)


def run_engine(argv: Sequence[str], prompt: str, env: Mapping[str, str], timeout: float,
               cwd: str | None = None) -> EngineRun:
    """One bounded turn of *argv* + [*prompt*], in a process group of its own.

    Overrunning *timeout*: TERM to the group, KILL after :data:`ENGINE_GRACE`. Whatever is
    left of the group when the turn ends is TERMed too (tool processes must not outlive it).
    Output goes to a temporary file, so a leftover process holding it cannot stall the wait.
    """
    with tempfile.TemporaryFile() as sink:
        try:
            proc = subprocess.Popen([*argv, prompt], stdin=subprocess.DEVNULL, stdout=sink,
                                    stderr=subprocess.STDOUT, env=dict(env), cwd=cwd,
                                    start_new_session=True, close_fds=True)
        except OSError as exc:
            return EngineRun(None, error=f"{argv[0] if argv else '?'}: {exc.strerror or exc}")
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=ENGINE_GRACE)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        finally:
            if proc.returncode is None:  # interrupted: never leave the engine behind
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        _signal_group(proc.pid, signal.SIGTERM)
        sink.seek(0)
        data = sink.read()
    text = data.decode("utf-8", "replace")[-OUTPUT_TAIL:]
    return EngineRun(proc.returncode, timed_out, None, text)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(pgid, sig)


def claimable_rows(conn: Any, *, away: bool) -> list[int]:
    """Rows the branch may claim now: usable, unclaimed; check rows only while away."""
    from firstmate.store.queue import VALID_SQL

    kinds = "" if away else " AND kind <> 'check'"
    return [int(r[0]) for r in conn.execute(
        f"SELECT seq FROM wakes WHERE {VALID_SQL} AND (claim IS NULL OR claim NOT IN "
        f"('main', 'branch')){kinds} ORDER BY seq")]


def still_queued(conn: Any, seqs: Sequence[int]) -> list[int]:
    if not seqs:
        return []
    marks = ",".join("?" * len(seqs))
    return [int(r[0]) for r in conn.execute(
        f"SELECT seq FROM wakes WHERE seq IN ({marks}) ORDER BY seq", tuple(seqs))]


__all__ = ["EngineRun", "claimable_rows", "engine_prompt", "judge_turn", "run_engine",
           "still_queued"]
