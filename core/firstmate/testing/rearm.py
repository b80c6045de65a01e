"""The continuity half of the harness contract: drive a plugin's declared re-arm path for real.

A harness plugin exists to keep the fleet watched: after every actionable close the wake must
reach the model exactly once, and a watcher must be armed again without the model's help. The
checks here prove that with a real home, real arms and watchers, and the plugin's own entry
points, along the path its :class:`~firstmate.plugin.harness.HarnessInfo` declares:

``rearm_owner == "hook"``
    ``fm hook <harness> <rearm_event>`` with the plugin's sample payload parks on the watcher
    and returns the wake; a successor watcher holds the lock when it does, and the next run of
    the hook parks on that successor.
``rearm_owner == "extension"``
    ``fm bridge <harness>`` (the plugin's bridge profile) is driven as its shim would: ``hello``,
    ``session_start``; the wake arrives as one ``deliver`` while a successor holds the lock.
``rearm_owner in ("checkpoint", "model-task")``
    the model re-arms by running ``fm <rearm_command…>`` (a protocol backed by the turn-end
    guard): the command returns the wake, and while nothing is armed the harness's stop hook
    refuses to let a turn end silently; once re-armed it lets it end.

Between two wakes the rig plays the model: it drains and acknowledges what was delivered, so the
second delivery must carry the second wake and never the first again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from firstmate.store.home import Home
from firstmate.testing.procs import DEADLINE, drain_output, eventually, fm_command

#: The crew whose status lines the contract's wakes are.
CREW = "builder"



def lets_the_turn_end(done: subprocess.CompletedProcess[str]) -> bool:
    """A stop hook's answer that lets the turn end quietly: exit 0 and no continuation."""
    return done.returncode == 0 and done.stdout.strip() in ("", "{}")


@attrs.define(eq=False)
class ContinuityRig:
    """A real home with one registered crew, and the processes a harness would run in it.

    The test process plays the harness: ``FM_SESSION_HOLDER_PID`` names it as the holder of
    the session lock, as the harness process above a real hook would be."""

    harness: str
    home: Home
    project: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[Any]] = attrs.Factory(list)
    delivered: list[str] = attrs.Factory(list)
    #: The watcher that held the lock when the last wake was delivered.
    delivered_successor: int | None = None

    # --- the fleet -------------------------------------------------------------------------

    def fm(self, *args: str, stdin: str = "",
           env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(fm_command(*args), input=stdin, env=dict(env or self.env),
                              capture_output=True, text=True, timeout=DEADLINE * 2, check=False)

    def add_crew(self) -> None:
        done = self.fm("crew", "add", CREW, "--pane", "%99999")
        assert done.returncode == 0, done.stderr

    def wake(self) -> str:
        """Append one actionable crew status line; its unique marker is returned."""
        marker = f"CONTRACT-WAKE-{uuid.uuid4().hex[:10]}"
        done = self.fm("crew", "status", CREW, f"done: {marker}")
        assert done.returncode == 0, done.stderr
        return marker

    def watcher(self) -> int | None:
        from firstmate.store.health import watcher_health

        health = watcher_health(self.home, self.env)
        return health.pid if health.healthy and health.pid else None

    def linked(self, proc: subprocess.Popen[Any]) -> int | None:
        """The healthy watcher when an arm in *proc*'s process tree started or attached to it:
        from then on a wake cannot close the watcher with nobody following it."""
        import psutil

        from firstmate.continuity.armlinks import links
        from firstmate.store.database import open_store

        watcher = self.watcher()
        if watcher is None or proc.poll() is not None:
            return None
        tree = {proc.pid}
        with contextlib.suppress(psutil.Error):
            tree |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        db = open_store(self.home)
        try:
            found = any(link.watcher_pid == watcher and link.arm_pid in tree
                        for link in links(db))
        finally:
            db.close()
        return watcher if found else None

    def parked(self, proc: subprocess.Popen[Any], what: str) -> int:
        """Wait until *proc* watches through a healthy watcher; fail if it ends first."""
        return eventually(f"{what} to arm a watcher", lambda: self.linked(proc), gone=proc,
                          gone_means=f"{what} ended before any wake: it never armed a watcher "
                                     "(the plugin does not re-arm)")

    def handle(self) -> None:
        """Play the model handling its wake: drain, then run the acknowledgement printed."""
        done = self.fm("wake", "drain", "--json")
        assert done.returncode == 0, done.stderr
        drained = json.loads(done.stdout)
        command = drained.get("ack_command")
        if command:
            ack = self.fm(*str(command).split()[1:])
            assert ack.returncode == 0, ack.stderr

    def record(self, text: str, marker: str, *, before: tuple[str, ...] = ()) -> None:
        """One delivery's text: it carries *marker* exactly once and no earlier wake."""
        assert text.count(marker) == 1, (
            f"{self.harness}: the wake {marker} must reach the model exactly once; it was "
            f"delivered {text.count(marker)} time(s) in {text!r}")
        for old in before:
            assert old not in text, (
                f"{self.harness}: the already handled wake {old} was delivered again: {text!r}")
        self.delivered.append(text)

    def successor(self, closed: int) -> int:
        """The watcher holding the lock now: alive, healthy, and not the one that closed."""
        now = self.watcher()
        assert now is not None and now != closed, (
            f"{self.harness}: no successor watcher held the lock when the wake was delivered "
            f"(the closed watcher was {closed}, now {now}): supervision lapsed after the wake")
        return now

    # --- processes -------------------------------------------------------------------------

    def spawn(self, argv: list[str], *, stdin: str | None = None,
              env: Mapping[str, str] | None = None, keep_stdin: bool = False,
              ) -> subprocess.Popen[str]:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=dict(env or self.env),
                                start_new_session=True)
        self.procs.append(proc)
        assert proc.stdin is not None
        if stdin is not None:
            proc.stdin.write(stdin)
            proc.stdin.flush()
        if not keep_stdin:
            proc.stdin.close()
            proc.stdin = None  # communicate() must not flush a closed pipe
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
            drain_output(proc)
        self.fm("arm", "--stop")


@contextlib.contextmanager
def continuity_rig(harness: str, tmp_path: Path, extra_env: Mapping[str, str]) -> Iterator[
        ContinuityRig]:
    """A rig in a fresh home under *tmp_path*: no tmux, no coalescing, only *harness* loaded."""
    home = Home(tmp_path / "rearm-home").ensure()
    project = tmp_path / "rearm-project"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(FM_HOME=str(home.root), FM_SIGNAL_GRACE="0", FM_TMUX=str(tmp_path / "no-tmux"),
               FM_SESSION_HOLDER_PID=str(os.getpid()), FM_PROJECT_DIR=str(project),
               FIRSTMATE_PLUGINS=harness)
    env.update(extra_env)
    rig = ContinuityRig(harness, home, project, env)
    try:
        rig.add_crew()
        yield rig
    finally:
        rig.close()


# --- the three paths ---------------------------------------------------------------------------


def hook_call(info: Any, event: str) -> tuple[str, dict[str, str]]:
    """The stdin and extra environment of *info*'s harness calling its *event* hook."""
    from firstmate.testing.samples import sample_of

    call = sample_of(info, event)
    assert call is not None, (
        f"{info.name} declares no sample_payload: the contract cannot call its {event} hook")
    payload, env = call
    return json.dumps(payload), env


#: The turn ends :func:`drive_hook` plays, in order: how many calls of the hook run at once
#: (hooks are not deduplicated, and a harness may retry), 0 for one call that meets a wake
#: already queued. Four turn ends in a row catch a plugin that re-arms only sometimes (at its
#: first turn end, every other one, only while the queue is empty) within seconds.
TURN_ENDS = (1, 0, 1, 2)


def _turn_end(number: int, what: str) -> str:
    """How a failure names turn end *number* of the hook *what*."""
    return f"{what} at turn end {number} of {len(TURN_ENDS)}"


def _did_not_park(number: int, what: str) -> str:
    if number == 1:
        return (f"{_turn_end(number, what)} ended before any wake: it never armed a watcher "
                "(the plugin does not re-arm)")
    return (f"{_turn_end(number, what)} ended before any wake without parking, though an "
            "earlier turn end parked: the plugin re-arms only sometimes, and a turn end that "
            "does not park leaves the fleet unwatched")


def drive_hook(rig: ContinuityRig, info: Any) -> None:
    """``fm hook <harness> <rearm_event>`` parks at every turn end, returns the wake once, and
    leaves a successor the next turn end parks on; a turn end that meets a queued wake does not
    end quietly. The first turn end that breaks this fails at once, named."""
    event = info.rearm_event
    stdin, env = hook_call(info, event)
    run_env = {**rig.env, **env}
    if "session-start" in info.hook_events:
        start_in, start_env = hook_call(info, "session-start")
        rig.fm("hook", info.name, "session-start", stdin=start_in, env={**rig.env, **start_env})
    what = f"fm hook {info.name} {event}"
    argv = fm_command("hook", info.name, event)
    seen: tuple[str, ...] = ()
    for number, calls in enumerate(TURN_ENDS, start=1):
        if not calls:
            seen = (*seen, _with_a_wake_queued(rig, number, what, argv, stdin, run_env, seen))
            rig.delivered_successor = None
            continue
        # A doubled turn end: one hook parks, the other lets its turn end quietly; one delivery.
        procs = [rig.spawn(argv, stdin=stdin, env=run_env) for _ in range(calls)]
        proc, watcher = _one_parked(rig, procs, number, what)
        if rig.delivered_successor is not None:
            assert watcher == rig.delivered_successor, (
                f"{_turn_end(number, what)} did not park on the successor the previous wake "
                f"left ({watcher} instead of {rig.delivered_successor})")
        marker = rig.wake()
        try:
            out, err = proc.communicate(timeout=DEADLINE * 2)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{_turn_end(number, what)} parked on watcher {watcher} but never "
                        f"delivered the wake {marker} (the plugin does not deliver)")
        rig.record(out + err, marker, before=seen)
        rig.delivered_successor = rig.successor(watcher)
        for other in procs:
            if other is not proc:
                rest = subprocess.CompletedProcess(other.args, other.returncode, *drain_output(other))
                assert marker not in rest.stdout + rest.stderr and lets_the_turn_end(rest), (
                    f"of {calls} concurrent {_turn_end(number, what)}, the one that did not "
                    f"park must end its turn quietly and deliver nothing: {rest!r}")
        seen = (*seen, marker)
        rig.handle()


def _with_a_wake_queued(rig: ContinuityRig, number: int, what: str, argv: list[str], stdin: str,
                        env: Mapping[str, str], seen: tuple[str, ...]) -> str:
    """A turn end that meets a wake already queued must not end quietly: the hook delivers it
    (or answers with a continuation that makes the model drain it). The wake's marker."""
    marker = rig.wake()
    proc = rig.spawn(argv, stdin=stdin, env=env)
    try:
        out, err = proc.communicate(timeout=DEADLINE * 2)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{_turn_end(number, what)} (the wake {marker} already queued) neither "
                    "delivered it nor ended")
    done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    assert not lets_the_turn_end(done), (
        f"{_turn_end(number, what)} let the turn end quietly with the wake {marker} queued: "
        "it neither delivered the wake nor went on to drain it, so the wake waits unseen; a "
        "plugin must keep watch at every turn end, not only while the queue is empty (exit {done.returncode}; stdout {out!r}; stderr {err!r})")
    for old in seen:
        assert old not in out + err, (
            f"{_turn_end(number, what)}: the already handled wake {old} was delivered again")
    rig.handle()
    return marker


def _one_parked(rig: ContinuityRig, procs: list[subprocess.Popen[str]], number: int,
                what: str) -> tuple[subprocess.Popen[str], int]:
    """The one hook of *procs* parked on a healthy watcher once every other one has ended;
    fails as soon as all of them have ended without parking."""
    if len(procs) == 1:
        return procs[0], eventually(f"{_turn_end(number, what)} to arm a watcher",
                                    lambda: rig.linked(procs[0]), gone=procs[0],
                                    gone_means=_did_not_park(number, what))

    def settled() -> tuple[subprocess.Popen[str], int] | None:
        live = [proc for proc in procs if proc.poll() is None]
        if not live:
            ended = [subprocess.CompletedProcess(p.args, p.returncode, *drain_output(p))
                     for p in procs]
            pytest.fail(f"{_did_not_park(number, what)} (all {len(procs)} concurrent calls "
                        f"ended: {[(e.returncode, e.stdout, e.stderr) for e in ended]!r})")
        if len(live) != 1:
            return None
        watcher = rig.linked(live[0])
        return (live[0], watcher) if watcher is not None else None

    return eventually(f"one of {len(procs)} concurrent {_turn_end(number, what)} to park and "
                      "the rest to end", settled)


def _receive(proc: subprocess.Popen[bytes], pending: bytearray,
             want: Callable[[dict[str, Any]], bool], what: str,
             deadline: float = DEADLINE * 2) -> dict[str, Any]:
    """The next bridge message *want* accepts (others are skipped), read with a deadline."""
    from firstmate.testing.procs import read_line

    end = time.monotonic() + deadline
    while True:
        left = end - time.monotonic()
        if left <= 0:
            pytest.fail(f"fm bridge never sent {what} within {deadline}s")
        line = read_line(proc, left, pending=pending)
        try:
            message = json.loads(line)
        except ValueError:
            pytest.fail(f"fm bridge wrote a line that is not JSON: {line!r}")
        if isinstance(message, dict) and want(message):
            return message


def drive_bridge(rig: ContinuityRig, info: Any, profile: Any) -> None:
    """``fm bridge <harness>`` driven as its shim would: each wake is one ``deliver``."""
    what = f"fm bridge {info.name}"
    proc = subprocess.Popen(fm_command("bridge", info.name), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=rig.env,
                            start_new_session=True)
    rig.procs.append(proc)
    pending = bytearray()

    def send(message: Mapping[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()

    send({"type": "hello", "protocol": 1, "harness": info.name, "shim": "contract",
          "pid": os.getpid(), "cwd": str(rig.project), "argv": [], "restart": False})
    welcome = _receive(proc, pending, lambda m: m.get("type") == "welcome", "its welcome")
    assert welcome.get("delivery") == profile.delivery
    send({"type": "session_start", "id": "s1", "generation": 1, "reason": "startup",
          "session": "contract"})
    reply = _receive(proc, pending, lambda m: m.get("type") == "reply" and m.get("id") == "s1",
                     "a reply to session_start")
    assert reply.get("state") == "started", (
        f"{what} answered session_start with {reply!r}: it never armed a watcher")
    seen: tuple[str, ...] = ()
    for _ in range(2):
        watcher = rig.parked(proc, what)
        marker = rig.wake()
        deliver = _receive(proc, pending, lambda m: m.get("type") == "deliver",
                           f"a deliver message for the wake {marker} (the plugin does not "
                           "deliver)")
        rig.record(str(deliver.get("text", "")), marker, before=seen)
        rig.successor(watcher)
        send({"type": "delivered", "id": deliver.get("id"), "ok": True, "detail": "contract"})
        seen = (*seen, marker)
        rig.handle()
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=DEADLINE * 2) == 0, f"{what} did not end cleanly at end of input"


def drive_command(rig: ContinuityRig, info: Any) -> None:
    """The model's own re-arm command returns each wake once; the stop hook refuses a silent
    turn end while nothing is armed and allows it once the model has re-armed."""
    what = "fm " + " ".join(info.rearm_command)
    stop = info.rearm_event or "stop"
    stdin, env = hook_call(info, stop)
    stop_env = {**rig.env, **env}

    def stop_hook() -> subprocess.CompletedProcess[str]:
        return rig.fm("hook", info.name, stop, stdin=stdin, env=stop_env)

    blind = stop_hook()
    assert not lets_the_turn_end(blind), (
        f"fm hook {info.name} {stop} let the turn end with a crew to supervise and no watcher: "
        f"nothing would make the model re-arm (exit {blind.returncode}, {blind.stdout!r})")
    seen: tuple[str, ...] = ()
    for _ in range(2):
        proc = rig.spawn(fm_command(*info.rearm_command))
        rig.parked(proc, what)
        armed = stop_hook()
        assert lets_the_turn_end(armed), (
            f"fm hook {info.name} {stop} kept the turn from ending although the model had "
            f"re-armed ({armed.returncode}, {armed.stdout!r}, {armed.stderr!r})")
        marker = rig.wake()
        try:
            out, _ = proc.communicate(timeout=DEADLINE * 2)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{what} never returned the wake {marker} (the plugin does not deliver)")
        rig.record(out, marker, before=seen)
        seen = (*seen, marker)
        rig.handle()


__all__ = ["TURN_ENDS", "ContinuityRig", "continuity_rig", "drive_bridge", "drive_command", "drive_hook",
           "lets_the_turn_end"]
