"""Stale panes and the tmux backend, against a real tmux server on a private socket."""

from __future__ import annotations

import os
import select
import shutil
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from firstmate.store import crew
from firstmate.store.home import Home
from firstmate.testing.procs import eventually
from firstmate.watch.backends import panebatch
from firstmate.watch.backends.base import CrewBackend
from firstmate.watch.backends.tmux import TmuxBackend
from firstmate.watch.sources.base import PollContext, Source, Wake
from firstmate.watch.sources.stale import UNREAD, PaneState, StaleSource
from watch_support import alive, let_one_go

pytestmark = pytest.mark.tmux

DEADLINE = 15.0
T0 = 1_700_000_000.0

STATIC = "printf 'ready for orders\\n'; exec sleep 100000"
CHATTY = "i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.05; done"
BUSY = "printf 'Working (12s - esc to interrupt)\\n'; exec sleep 100000"


@attrs.define
class Server:
    socket: str

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=30, check=False)

    def window(self, name: str, script: str) -> str:
        """A new window running *script*; its pane's id (crews are bound to pane ids)."""
        done = self.tmux("new-window", "-d", "-t", "fleet", "-n", name, "-P", "-F", "#{pane_id}",
                         "sh", "-c", script)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def wait_for(self, target: str, ok: Callable[[str], bool]) -> str:
        """Pane *target*'s screen once *ok* accepts it."""
        def shown() -> str:
            out = self.tmux("capture-pane", "-p", "-t", target)
            return out.stdout if out.returncode == 0 and ok(out.stdout) else ""
        return eventually(f"pane {target} to reach the expected content", shown, DEADLINE,
                          interval=0.02)

    @property
    def backend(self) -> TmuxBackend:
        return TmuxBackend.from_env({"FM_TMUX_SOCKET": self.socket})


@pytest.fixture
def server() -> Iterator[Server]:
    if shutil.which("tmux") is None:
        pytest.skip("the tmux binary is not installed; stale-pane tests need a real tmux server")
    srv = Server(f"fmtest-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    started = srv.tmux("new-session", "-d", "-s", "fleet", "-x", "100", "-y", "20", "sh", "-c", "exec sleep 100000")
    assert started.returncode == 0, started.stderr
    try:
        yield srv
    finally:
        srv.tmux("kill-server")


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home").ensure()


#: These tests look at every crew in each poll (the slice is tested on its own, below).
WHOLE_FLEET = {"FM_STALE_SLICE_MS": "600000"}


def ctx(home: Home, now: float, triage: list[str] | None = None,
        env: dict[str, str] | None = None) -> PollContext:
    log = triage if triage is not None else []
    return PollContext(home=home, env=WHOLE_FLEET if env is None else env, now=now, poll=1,
                       triage=log.append)


def test_the_tmux_backend_is_a_crew_backend(server: Server) -> None:
    assert isinstance(server.backend, CrewBackend)
    assert isinstance(StaleSource(Home(Path("/nonexistent")), server.backend), Source)


def test_an_unchanging_idle_pane_is_stale_after_two_polls_then_suppressed(server: Server, home: Home) -> None:
    target = server.window("w1", STATIC)
    server.wait_for(target, lambda text: "ready for orders" in text)
    crew.add(home, "w1", target)
    source = StaleSource(home, server.backend)
    assert source.poll(ctx(home, T0)) is None
    assert source.next_due(ctx(home, T0)) == pytest.approx(T0 + 15)
    # Two polls closer together than FM_POLL prove nothing.
    assert source.poll(ctx(home, T0 + 1)) is None
    wake = source.poll(ctx(home, T0 + 16))
    assert wake == Wake("stale", "w1", "stale: w1")
    source.commit(wake, ctx(home, T0 + 16))
    assert source.poll(ctx(home, T0 + 40)) is None
    # The suppression is durable: the next watcher cycle does not raise it again.
    assert StaleSource(home, server.backend).poll(ctx(home, T0 + 100)) is None

    # New content lifts the suppression, and it goes stale again once it settles.
    before = server.wait_for(target, lambda text: True)
    server.tmux("send-keys", "-t", target, "-l", "typed")
    server.wait_for(target, lambda text: text != before)
    source = StaleSource(home, server.backend)
    assert source.poll(ctx(home, T0 + 200)) is None
    wake = source.poll(ctx(home, T0 + 216))
    assert wake is not None and wake.reason == "stale: w1"


@pytest.mark.parametrize("cached", [b"abc \xc2\xb2 1.0 -\n", b"abc 1 inf -\n", b"abc 1 nan -\n",
                                    b"abc \xd9\xa1 1.0 - - -\n", b"\xff\xfe 1 1.0 -\n"])
def test_a_cache_entry_that_does_not_parse_is_rebuilt_for_that_crew_only(
        server: Server, home: Home, cached: bytes) -> None:
    for name in ("a0", "a1"):
        target = server.window(name, STATIC)
        server.wait_for(target, lambda text: "ready for orders" in text)
        crew.add(home, name, target)
    (home.crew_dir / "a0.pane-state").write_bytes(cached)
    source = StaleSource(home, server.backend)
    assert source.poll(ctx(home, T0)) is None  # (first sight of both; the bad entry rebuilt)
    assert PaneState.decode((home.crew_dir / "a0.pane-state").read_text()) is not None
    wake = source.poll(ctx(home, T0 + 16))
    assert wake == Wake("stale", "a0", "stale: a0")
    source.commit(wake, ctx(home, T0 + 16))
    assert source.poll(ctx(home, T0 + 17)) == Wake("stale", "a1", "stale: a1")


def test_an_uncommitted_stale_wake_is_raised_again(server: Server, home: Home) -> None:
    target = server.window("w1", STATIC)
    server.wait_for(target, lambda text: "ready for orders" in text)
    crew.add(home, "w1", target)
    source = StaleSource(home, server.backend)
    source.poll(ctx(home, T0))
    assert source.poll(ctx(home, T0 + 16)) is not None
    assert StaleSource(home, server.backend).poll(ctx(home, T0 + 30)) == Wake("stale", "w1", "stale: w1")


def test_a_pane_that_keeps_printing_is_never_stale(server: Server, home: Home) -> None:
    target = server.window("w2", CHATTY)
    server.wait_for(target, lambda text: "tick" in text)
    crew.add(home, "w2", target)
    source = StaleSource(home, server.backend)
    now = T0
    for _ in range(4):
        assert source.poll(ctx(home, now)) is None
        seen = server.wait_for(target, lambda text: True)

        def changed(text: str, seen: str = seen) -> bool:
            return text != seen

        server.wait_for(target, changed)  # it printed since that poll
        now += 20


def test_a_busy_pane_is_never_stale(server: Server, home: Home) -> None:
    target = server.window("w3", BUSY)
    server.wait_for(target, lambda text: "esc to interrupt" in text)
    crew.add(home, "w3", target)
    source = StaleSource(home, server.backend)
    for now in (T0, T0 + 16, T0 + 100, T0 + 1000):
        assert source.poll(ctx(home, now)) is None
    assert server.backend.busy(target)


BLANK = "exec sleep 100000"


@pytest.mark.parametrize("grace", [None, "40"])
def test_a_blank_pane_is_not_stale_while_its_crew_may_still_be_starting(
        server: Server, home: Home, grace: str | None) -> None:
    """A harness can take many seconds to draw its first screen on a loaded machine: a crew
    spawned (or added) less than FM_STALE_START_GRACE ago whose pane is blank is not stale yet;
    still blank after it, it is. A pane that drew something goes stale on the usual clock."""
    blank, drawn = server.window("w1", BLANK), server.window("w2", STATIC)
    server.wait_for(drawn, lambda text: "ready for orders" in text)
    crew.add(home, "w1", blank)
    crew.add(home, "w2", drawn)
    for name in ("w1", "w2"):  # both registered at T0
        os.utime(home.crew_dir / f"{name}.pane", (T0, T0))
    env = {**WHOLE_FLEET, **({"FM_STALE_START_GRACE": grace} if grace else {})}
    ends = T0 + float(grace or 120)
    backend = batch_counting(server)

    def reads() -> int:  # (the blank pane's, alone or in a batch)
        return backend.captured.count(blank) + sum(b.count(blank) for b in backend.batches)

    source = StaleSource(home, backend)
    assert source.poll(ctx(home, T0 + 1, env=env)) is None
    wake = source.poll(ctx(home, T0 + 20, env=env))
    assert wake == Wake("stale", "w2", "stale: w2")  # the blank one is held, not skipped past
    source.commit(wake, ctx(home, T0 + 20, env=env))
    assert source.poll(ctx(home, T0 + 20, env=env)) is None
    assert source.next_due(ctx(home, T0 + 20, env=env)) == pytest.approx(ends)
    assert source.poll(ctx(home, ends - 1, env=env)) is None
    assert reads() == 1  # read blank once: held while nothing changes
    assert source.poll(ctx(home, ends, env=env)) == Wake("stale", "w1", "stale: w1")


def test_blank_panes_in_their_start_grace_are_not_read_again_in_batches(
        server: Server, home: Home) -> None:
    blanks = [server.window(f"b{i}", BLANK) for i in range(3)]
    for i, target in enumerate(blanks):
        crew.add(home, f"b{i}", target)
        os.utime(home.crew_dir / f"b{i}.pane", (T0, T0))
    backend = batch_counting(server)
    source = StaleSource(home, backend)
    for now in (T0 + 1, T0 + 20, T0 + 40, T0 + 60):
        assert source.poll(ctx(home, now)) is None
    assert backend.batches == [tuple(blanks)] and backend.captured == []


def test_a_registration_time_ahead_of_the_clock_gives_a_blank_pane_no_grace(
        server: Server, home: Home) -> None:
    crew.add(home, "w1", server.window("w1", BLANK))
    os.utime(home.crew_dir / "w1.pane", (T0 + 3600, T0 + 3600))
    source = StaleSource(home, server.backend)
    assert source.poll(ctx(home, T0)) is None
    assert source.poll(ctx(home, T0 + 16)) == Wake("stale", "w1", "stale: w1")


def test_a_missing_pane_is_noted_once_and_skipped(server: Server, home: Home) -> None:
    crew.add(home, "gone", "fleet:no-such-window")
    target = server.window("w1", STATIC)
    server.wait_for(target, lambda text: "ready for orders" in text)
    crew.add(home, "w1", target)
    source = StaleSource(home, server.backend)
    triage: list[str] = []
    source.poll(ctx(home, T0, triage))
    wake = source.poll(ctx(home, T0 + 16, triage))
    assert wake is not None and wake.key == "w1"
    assert triage == ["stale: gone: pane fleet:no-such-window is gone; not read"]


def test_pane_state_files_are_private(server: Server, home: Home) -> None:
    target = server.window("w1", STATIC)
    server.wait_for(target, lambda text: "ready" in text)
    crew.add(home, "w1", target)
    StaleSource(home, server.backend).poll(ctx(home, T0))
    assert stat.S_IMODE((home.crew_dir / "w1.pane-state").stat().st_mode) == 0o600


# --- the backend itself ----------------------------------------------------------------------


def test_capture_of_a_missing_pane_is_none_with_a_reason(server: Server) -> None:
    backend = server.backend
    assert backend.capture("fleet:nope") is None
    assert backend.last_error is not None and "nope" in backend.last_error
    assert not backend.busy("fleet:nope")


def test_capture_reads_a_real_pane_and_send_types_into_it(server: Server) -> None:
    target = server.window("cat", "exec cat")
    server.wait_for(target, lambda text: True)
    backend = server.backend
    assert backend.send(target, "hello crew")
    text = server.wait_for(target, lambda text: text.count("hello crew") >= 2)  # echo + cat's copy
    assert "hello crew" in (backend.capture(target) or "")
    assert backend.last_error is None and text


def test_busy_markers(server: Server) -> None:
    backend = server.backend
    assert backend.busy_in("foo\n  ✻ Thinking… (3s · esc to interrupt)\n\n")
    assert backend.busy_in("Working (5s • Esc to interrupt)")
    assert not backend.busy_in("> ready\n")
    old = "esc to interrupt\n" + "\n".join(f"line {i}" for i in range(30))
    assert not backend.busy_in(old)  # only the bottom of the pane counts
    custom = TmuxBackend.from_env({"FM_BUSY_RE": r"^BUSY$"})
    assert custom.busy_in("x\nBUSY\n") and not custom.busy_in("esc to interrupt")
    assert TmuxBackend.from_env({"FM_BUSY_RE": "(broken"}).busy_in("esc to interrupt")


def test_socket_option_selects_the_server() -> None:
    nowhere = {"PATH": "/nonexistent"}
    assert TmuxBackend.from_env({"FM_TMUX_SOCKET": "fleet", **nowhere}).command("ls") == [
        "tmux", "-L", "fleet", "ls"]
    assert TmuxBackend.from_env({"FM_TMUX_SOCKET": "/run/t.sock", "FM_TMUX": "/opt/tmux"}).command("ls") == [
        "/opt/tmux", "-S", "/run/t.sock", "ls"]
    assert TmuxBackend.from_env(nowhere).command("ls") == ["tmux", "ls"]


def test_a_bare_tmux_name_is_looked_up_on_path_once(tmp_path: Path) -> None:
    fake = tmp_path / "tmux"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    backend = TmuxBackend.from_env({"PATH": str(tmp_path)})
    assert backend.command("ls") == [str(fake), "ls"]


def test_a_hung_tmux_call_is_bounded(tmp_path: Path) -> None:
    fake = tmp_path / "tmux"
    fake.write_text("#!/bin/sh\necho $$ > \"$0.pid\"\nexec sleep 100000\n")
    fake.chmod(0o755)
    backend = TmuxBackend.from_env({"FM_TMUX": str(fake), "FM_TMUX_TIMEOUT": "0.5"})
    assert backend.capture("x") is None
    assert backend.last_error == "tmux capture-pane timed out after 0.5s"
    pid = int((tmp_path / "tmux.pid").read_text())
    def ended() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    eventually("the hung tmux call to be killed", ended, DEADLINE, interval=0.02)


def test_a_missing_tmux_binary_reads_as_no_pane() -> None:
    backend = TmuxBackend.from_env({"FM_TMUX": "/nonexistent/tmux"})
    assert backend.capture("x") is None
    assert backend.last_error is not None and "FM_TMUX" in backend.last_error


@attrs.define
class CountingBackend(TmuxBackend):
    """The real backend, counting the panes it captures."""

    captured: list[str] = attrs.Factory(list)

    def capture(self, target: str) -> str | None:
        self.captured.append(target)
        return super().capture(target)


def counting(server: Server) -> CountingBackend:
    real = server.backend
    return CountingBackend(real.tmux, real.socket, real.timeout, real.busy_re)


def test_panes_are_read_only_to_confirm_they_are_stale(server: Server, home: Home) -> None:
    quiet = server.window("w1", STATIC)
    other = server.window("w2", STATIC)
    for target in (quiet, other):
        server.wait_for(target, lambda text: "ready for orders" in text)
    crew.add(home, "w1", quiet)
    crew.add(home, "w2", other)
    backend = counting(server)
    source = StaleSource(home, backend)
    assert source.poll(ctx(home, T0)) is None
    assert source.poll(ctx(home, T0 + 1)) is None
    assert backend.captured == []  # one list-panes call per poll told it all
    before = server.wait_for(other, lambda text: True)
    server.tmux("send-keys", "-t", other, "-l", "typed")
    server.wait_for(other, lambda text: text != before)
    assert source.poll(ctx(home, T0 + 2)) is None
    assert backend.captured == []  # a change restarts the quiet clock without a read
    # A re-armed watcher (a new source) starts from the kept signatures.
    fresh = StaleSource(home, backend)
    wake = fresh.poll(ctx(home, T0 + 16))
    assert wake == Wake("stale", "w1", "stale: w1") and backend.captured == [quiet]
    fresh.commit(wake, ctx(home, T0 + 16))
    assert fresh.poll(ctx(home, T0 + 18)) == Wake("stale", "w2", "stale: w2")
    assert backend.captured == [quiet, other]


def test_a_pane_is_read_for_real_before_it_is_called_stale(server: Server, home: Home) -> None:
    target = server.window("w1", STATIC)
    server.wait_for(target, lambda text: "ready for orders" in text)
    crew.add(home, "w1", target)
    backend = counting(server)
    source = StaleSource(home, backend)
    assert source.poll(ctx(home, T0)) is None
    assert source.poll(ctx(home, T0 + 1)) is None
    assert backend.captured == []
    # The text changes without the signature showing it (as if within one second): the read
    # before the verdict sees the change, and the quiet clock restarts instead of a wake.
    state = home.crew_dir / "w1.pane-state"
    parts = state.read_text().split()
    parts[0] = "0" * 64  # a text the pane never had
    state.write_text(" ".join(parts) + "\n")
    source = StaleSource(home, backend)  # (a watcher reads the file once: a re-armed one)
    assert source.poll(ctx(home, T0 + 16)) is None
    assert backend.captured == [target]
    wake = source.poll(ctx(home, T0 + 32))
    assert wake == Wake("stale", "w1", "stale: w1")


def test_signatures_name_each_pane_every_way_it_may_be_registered(server: Server) -> None:
    target = server.window("w1", STATIC)
    server.wait_for(target, lambda text: "ready for orders" in text)
    pane_id = server.tmux("display-message", "-p", "-t", target, "#{pane_id}").stdout.strip()
    index = server.tmux("display-message", "-p", "-t", target, "#{window_index}").stdout.strip()
    found = server.backend.signatures()
    assert found is not None
    names = {pane_id, f"fleet:{index}.0", "fleet:w1.0", f"fleet:{index}", "fleet:w1"}
    assert names <= set(found)
    assert len({found[name] for name in names}) == 1


def test_a_busy_pane_is_read_once_while_it_does_not_change(server: Server, home: Home) -> None:
    target = server.window("w1", BUSY)
    server.wait_for(target, lambda text: "esc to interrupt" in text)
    crew.add(home, "w1", target)
    backend = counting(server)
    source = StaleSource(home, backend)
    assert source.poll(ctx(home, T0)) is None
    assert source.poll(ctx(home, T0 + 16)) is None  # read, found busy
    assert backend.captured == [target]
    assert source.poll(ctx(home, T0 + 32)) is None
    assert StaleSource(home, backend).poll(ctx(home, T0 + 48)) is None
    assert backend.captured == [target]  # the verdict holds while the signature does


def test_a_ring_while_tmux_lists_the_panes_leaves_the_listing_to_the_next_poll(
        home: Home, tmp_path: Path) -> None:
    # The fake tmux lists one pane once the test lets it go.
    log, gate, fake = tmp_path / "tmux.log", tmp_path / "gate", tmp_path / "gated-tmux"
    os.mkfifo(gate)
    fake.write_text(f'#!/bin/sh\necho "$1 $$" >> {log}\nread line < {gate}\n'
                    "printf '%%1\\t4242\\t0\\tSIG\\t0\\t0\\t1\\tfleet\\tw\\n'\n")
    fake.chmod(0o755)
    crew.add(home, "w1", "%1")
    source = StaleSource(home, TmuxBackend(tmux=str(fake), timeout=600))
    rung = PollContext(home=home, env=WHOLE_FLEET, now=T0, poll=1, triage=[].append,
                       rung=lambda: True)

    def calls() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []  # "list-panes <pid>"

    try:
        assert source.poll(rung) is None
        assert source.next_due(rung) == T0  # due again at once
        assert source.poll(rung) is None  # still under way: no second listing
        eventually("the listing to start", lambda: len(calls()) == 1)
        assert calls()[0].startswith("list-panes ")
        assert not (home.crew_dir / "w1.pane-state").exists()
        eventually("the listing to wait", lambda: let_one_go(gate))
        assert source.poll(ctx(home, T0 + 1)) is None
        state = PaneState.decode((home.crew_dir / "w1.pane-state").read_text())
        assert state is not None and state.signature == "SIG.0" and state.digest == UNREAD
        assert len(calls()) == 1  # the listing the ring left, taken up: no other tmux call
        # A listing left under way ends when the watcher closes the source.
        assert source.poll(attrs.evolve(rung, now=T0 + 2)) is None
        eventually("the second listing to start", lambda: len(calls()) == 2)
        source.close()
        listing = int(calls()[1].split()[1])
        eventually("the listing to be ended", lambda: not alive(listing))
    finally:
        for _ in range(2):
            let_one_go(gate)


def test_a_fleet_going_quiet_at_once_is_read_a_slice_per_poll(server: Server, home: Home) -> None:
    targets = [server.window(f"w{i}", BUSY) for i in range(4)]
    for i, target in enumerate(targets):
        server.wait_for(target, lambda text: "esc to interrupt" in text)
        crew.add(home, f"w{i}", target)
    backend = counting(server)
    source = StaleSource(home, backend)
    one_read = {"FM_STALE_SLICE_MS": "0"}  # the slice is spent by the first crew of a poll
    for step in range(4):  # first sight, one crew a poll: signatures only, nothing read
        assert source.poll(ctx(home, T0 + step, env=one_read)) is None
    assert backend.captured == []
    # Every pane's quiet clock runs out together: each poll reads one pane and leaves the rest
    # to the next poll, due at once (the watcher answers its doorbell in between).
    for step in range(4):
        at = T0 + 16 + step
        assert source.poll(ctx(home, at, env=one_read)) is None  # (busy: never stale)
        assert backend.captured == targets[: step + 1]
        assert source.next_due(ctx(home, at, env=one_read)) == at  # the next poll at once
    # All read busy: a whole poll reads nothing more (none changed) and asks for no hurry.
    assert source.poll(ctx(home, T0 + 30)) is None
    assert backend.captured == targets
    assert source.next_due(ctx(home, T0 + 30)) is None


def test_a_fleet_whose_every_poll_is_cut_short_still_sees_a_pane_close(
        server: Server, home: Home) -> None:
    """Polls that each read one crew and leave the rest to the next (a spent slice, or the
    doorbell ringing in every one) go round the fleet over one listing for at most a second:
    then the panes are listed afresh, so a pane that closed meanwhile wakes."""
    targets = [server.window(f"w{i}", BUSY) for i in range(3)]
    for i, target in enumerate(targets):
        server.wait_for(target, lambda text: "esc to interrupt" in text)
        crew.add(home, f"w{i}", target)
    source = StaleSource(home, server.backend)
    one_read = {"FM_STALE_SLICE_MS": "0"}  # every poll is cut short after its first crew
    for _ in range(3):  # each crew seen live once
        assert source.poll(ctx(home, T0, env=one_read)) is None
        assert source.next_due(ctx(home, T0, env=one_read)) == T0
    assert server.tmux("kill-pane", "-t", targets[2]).returncode == 0
    wake = eventually("the closed pane's wake",
                      lambda: source.poll(ctx(home, T0 + 1, env=one_read)), DEADLINE)
    assert wake == Wake("signal", "w2.exited", "signal: w2.exited")


# --- reading many panes through one tmux client (firstmate.watch.backends.panebatch) ----------

#: What crews' panes may show that must not confuse the batch's framing: a marker of the
#: right shape, tmux's separator and format characters, blank lines, tabs and wide text.
HOSTILE = ("printf 'fm-00000000000000000000000000000000 %%1\\n;\\n#{pane_id} #(echo x)\\n\\n"
           "\\tcol ; \\xe2\\x80\\xa8 wide \\xe7\\x95\\x8c\\nlast;\\n'; exec sleep 100000")


@attrs.define
class BatchCounting(CountingBackend):
    """The real backend, counting lone captures and the batches it starts (their panes)."""

    batches: list[tuple[str, ...]] = attrs.Factory(list)

    def start_captures(self, panes: Sequence[str]) -> panebatch.CaptureBatch | None:
        self.batches.append(tuple(panes))
        return super().start_captures(panes)


def batch_counting(server: Server) -> BatchCounting:
    real = server.backend
    return BatchCounting(real.tmux, real.socket, real.timeout, real.busy_re)


def read_batch(backend: TmuxBackend, panes: Sequence[str]) -> dict[str, object] | None:
    call = backend.start_captures(panes)
    assert call is not None
    deadline = time.monotonic() + DEADLINE
    while not call.step():
        assert time.monotonic() < deadline, "the batch never ended"
        select.select([call.fileno()], [], [], 0.25)
    return call.result()


def test_a_batch_reads_each_pane_as_a_lone_capture_does(server: Server) -> None:
    panes = [server.window("hostile", HOSTILE), server.window("busy", BUSY),
             server.window("quiet", STATIC), server.window("blank", "exec sleep 100000")]
    server.wait_for(panes[0], lambda text: "last;" in text)
    server.wait_for(panes[1], lambda text: "esc to interrupt" in text)
    server.wait_for(panes[2], lambda text: "ready for orders" in text)
    backend = server.backend
    found = read_batch(backend, panes)
    assert found == {pane: backend.capture(pane) for pane in panes}
    assert "fm-00000000000000000000000000000000 %1" in str(found[panes[0]])  # shown as it is


def test_a_pane_that_shows_this_batchs_marker_voids_the_batch(
        server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    # As if the pane could know the call's nonce: its text holds the marker of the pane after
    # it. The framing does not hold, and nothing of the batch is taken.
    panes = [server.window("forger", HOSTILE), server.window("next", STATIC)]
    server.wait_for(panes[0], lambda text: "last;" in text)
    server.wait_for(panes[1], lambda text: "ready for orders" in text)
    monkeypatch.setattr(panebatch.os, "urandom", lambda n: bytes(n))
    server.tmux("send-keys", "-t", panes[0], "-l", f"fm-{bytes(16).hex()} {panes[1]}")
    server.wait_for(panes[0], lambda text: f" {panes[1]}" in text)
    assert read_batch(server.backend, panes) is None
    assert panebatch.parse(b"a\nfm-n %1\nb\nfm-n %2\n", ["%1", "%2"], "fm-n ") == {
        "%1": "a\n", "%2": "b\n"}
    assert panebatch.parse(b"a\nfm-n %2\n", ["%1", "%2"], "fm-n ") is None  # out of order
    assert panebatch.parse(b"a\nfm-n %1\nfm-n %1\n", ["%1"], "fm-n ") is None  # one too many
    assert panebatch.parse(b"a\nfm-n %1\ncut", ["%1"], "fm-n ") is None  # a line not ended


def test_a_pane_gone_mid_batch_is_not_read_and_the_panes_after_it_are_left(
        server: Server) -> None:
    first, last = server.window("first", STATIC), server.window("last", STATIC)
    gone = server.window("gone", STATIC)
    for pane in (first, last, gone):
        server.wait_for(pane, lambda text: "ready for orders" in text)
    server.tmux("kill-pane", "-t", gone)
    found = read_batch(server.backend, [first, gone, last])
    assert found is not None and set(found) == {first, gone}
    assert found[first] == server.backend.capture(first)
    text, why = found[gone]  # type: ignore[misc]
    assert text is None and gone in why


def test_a_fleet_going_quiet_at_once_is_read_in_one_tmux_call(server: Server, home: Home) -> None:
    targets = [server.window(f"w{i}", BUSY) for i in range(6)]
    for i, target in enumerate(targets):
        server.wait_for(target, lambda text: "esc to interrupt" in text)
        crew.add(home, f"w{i}", target)
    backend = batch_counting(server)
    source = StaleSource(home, backend)
    triage: list[str] = []
    assert source.poll(ctx(home, T0, triage)) is None  # first sight: signatures only
    assert backend.captured == [] and backend.batches == []
    assert source.poll(ctx(home, T0 + 16, triage)) is None  # every pane read busy, at once
    assert backend.batches == [tuple(targets)] and backend.captured == []
    for i in range(6):
        state = PaneState.decode((home.crew_dir / f"w{i}.pane-state").read_text())
        assert state is not None and state.busy_at == state.signature != "-"
    assert source.poll(ctx(home, T0 + 32, triage)) is None
    assert len(backend.batches) == 1 and backend.captured == []  # the verdicts hold


def test_a_pane_closing_between_the_listing_and_its_batch_is_noted_and_the_rest_read(
        server: Server, home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    targets = [server.window(f"w{i}", STATIC) for i in range(4)]
    for i, target in enumerate(targets):
        server.wait_for(target, lambda text: "ready for orders" in text)
        crew.add(home, f"w{i}", target)
    backend = batch_counting(server)
    source = StaleSource(home, backend)
    triage: list[str] = []
    assert source.poll(ctx(home, T0, triage)) is None
    real = panebatch.start

    def closing_first(backend: TmuxBackend, panes: Sequence[str]) -> object:
        server.tmux("kill-pane", "-t", targets[1])  # after the listing said it was live
        return real(backend, panes)

    monkeypatch.setattr(panebatch, "start", closing_first)
    wakes: list[Wake] = []
    for step in range(8):
        now = ctx(home, T0 + 16 + step, triage)
        wake = source.poll(now)
        if wake is not None:
            wakes.append(wake)
            source.commit(wake, now)
    # The batch read w0 and failed at w1 (gone): w0 is stale; w1's close wakes once as an exit,
    # never as stale; w2 and w3, which the batch did not reach, are read after it.
    assert backend.batches[0] == tuple(targets)
    assert sorted(w.key for w in wakes) == ["w0", "w1.exited", "w2", "w3"], triage


#: A fake tmux: it lists panes %1 to %3 at once; a batch of reads waits for a line on the gate
#: first, then reads every pane busy and prints each marker as tmux expands it.
GATED_BATCH = """\
import sys
argv = sys.argv[1:]
with open(sys.argv[0] + ".log", "a") as log:
    log.write(f"{argv[0]} {__import__('os').getpid()}\\n")
if argv[0] == "list-panes":
    for n in (1, 2, 3):
        print(f"%{n}\\t4242\\t0\\tSIG{n}\\t{n}\\t0\\t1\\tfleet\\tw{n}")
    raise SystemExit(0)
with open(sys.argv[0] + ".gate") as gate:
    gate.readline()
commands, words = [], []
for word in argv + [";"]:
    if word == ";":
        commands.append(words)
        words = []
    else:
        words.append(word)
for command in commands:
    pane = command[command.index("-t") + 1]
    if command[0] == "capture-pane":
        print("Working (3s - esc to interrupt)")
    else:
        print(command[-1].replace("#{pane_id}", pane))
"""


def test_a_ring_while_tmux_reads_a_batch_leaves_the_batch_to_the_next_poll(
        home: Home, tmp_path: Path) -> None:
    fake = tmp_path / "batch-tmux"
    log, gate = Path(f"{fake}.log"), Path(f"{fake}.gate")
    os.mkfifo(gate)
    fake.write_text(f"#!{sys.executable}\n{GATED_BATCH}")
    fake.chmod(0o755)
    for n in (1, 2, 3):
        crew.add(home, f"w{n}", f"%{n}")
    source = StaleSource(home, TmuxBackend(tmux=str(fake), timeout=600))

    def calls() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []  # "<command> <pid>"

    def batches() -> list[str]:
        return [line for line in calls() if line.startswith("capture-pane ")]

    assert source.poll(ctx(home, T0)) is None  # first sight: the listing alone
    rung = PollContext(home=home, env=WHOLE_FLEET, now=T0 + 16, poll=2, triage=[].append,
                       rung=lambda: bool(batches()))  # rings once the batch has started
    try:
        assert source.poll(rung) is None
        assert source.next_due(rung) == T0 + 16  # due again at once
        assert len(batches()) == 1
        assert source.poll(rung) is None  # still under way: no second batch
        eventually("the batch to wait", lambda: let_one_go(gate))
        assert source.poll(ctx(home, T0 + 17)) is None
        assert len(batches()) == 1  # the batch the ring left, taken up
        for n in (1, 2, 3):
            state = PaneState.decode((home.crew_dir / f"w{n}.pane-state").read_text())
            assert state is not None and state.busy_at == f"SIG{n}.0"  # read busy, once each
    finally:
        for _ in range(2):
            let_one_go(gate)


@attrs.define
class ListingKept(BatchCounting):
    """:class:`BatchCounting`, keeping each pane listing it starts."""

    listings: list[Any] = attrs.Factory(list)

    def start_signatures(self) -> Any:
        call = super().start_signatures()
        self.listings.append(call)
        return call


def test_the_panes_a_batch_takes_are_looked_for_only_until_the_doorbell_rings(
        server: Server, home: Home) -> None:
    # A watcher's first poll reads each crew's pane state to learn which panes to read: a ring
    # stops that look (it is answered first), so it never costs a pass over the whole fleet.
    targets = [server.window(f"w{i}", BUSY) for i in range(20)]
    for i, target in enumerate(targets):
        server.wait_for(target, lambda text: "esc to interrupt" in text)
        crew.add(home, f"w{i}", target)
    real = server.backend
    backend = ListingKept(real.tmux, real.socket, real.timeout, real.busy_re)
    assert StaleSource(home, backend).poll(ctx(home, T0)) is None  # first sight
    source = StaleSource(home, backend)  # a new watcher: it reads the states afresh
    # The doorbell rings once the listing is over, before the batch is chosen.
    ringing = attrs.evolve(ctx(home, T0 + 16),
                           rung=lambda: bool(backend.listings) and backend.listings[-1].over)
    assert source.poll(ringing) is None
    assert source.next_due(ringing) == T0 + 16  # the rest at once, after the ring
    assert len(backend.batches) == 1 and 2 <= len(backend.batches[0]) < len(targets)
    source.close()


def test_a_ring_during_a_new_watchers_first_scan_is_answered_before_the_scan_goes_on(
        server: Server, home: Home) -> None:
    # A new watcher reads every registration once: at hundreds of crews that is milliseconds a
    # ring would wait for. Rung, the scan ends early and the source is due again at once.
    from firstmate.store.crewscan import STOP_EVERY

    target = server.window("w1", STATIC)
    server.wait_for(target, lambda text: "ready for orders" in text)
    crew.add(home, "w1", target)
    for i in range(STOP_EVERY * 2):
        crew.add(home, f"gpu.c{i:03d}", "%1", host="gpu")  # (another host's: never read here)
    source = StaleSource(home, server.backend)
    rung = attrs.evolve(ctx(home, T0), rung=lambda: True)
    assert source.poll(rung) is None
    assert source.next_due(rung) == T0
    assert source.poll(rung) is None  # (the rest of the registrations, ended early again)
    assert source.poll(rung) is None
    assert source.next_due(rung) == pytest.approx(T0 + 15)  # (scanned whole: the usual clock)
    source.poll(ctx(home, T0 + 16))
    assert source.poll(ctx(home, T0 + 40)) == Wake("stale", "w1", "stale: w1")
