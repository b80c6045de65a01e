"""The doorbell against another local user and against a flood.

Real processes under two real uids: the test runs as root and forks a child that drops to a uid
nobody uses (a throw-away user: no account is needed for the kernel to enforce it). The home lies
in a directory that user can reach as far as the home itself, so only what fm does about the
bell keeps it out. Another user must neither take the bell's address first (the watcher would
poll instead of waking) nor ring it; and a flood of rings by the owner's own runaway writer
must cost the watcher only a bounded amount of CPU (its own rusage, read from /proc) while a
real ring is still answered at once.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import psutil
import pytest
from chaos_support import base_env, fm_argv, run_fm, stop_watcher
from firstmate.fast import bell
from firstmate.store.home import Home
from firstmate.testing import read_line

#: How long a ring may take to become the arm's reason line on a loaded machine (the doorbell
#: takes milliseconds; without it the watcher below would poll once in ten minutes).
RUNG = 5.0
#: How long each flood runs before the watcher's CPU is read.
FLOOD_SECONDS = 2.0
#: The watcher's CPU a flood may cost in that time: a generous bound (the rate-limited bell
#: answers about twenty rings a second, about 0.03 CPU-s here; one answering every ring spent
#: 0.5 CPU-s, and whatever a loaded machine left it).
FLOOD_CPU = 0.25

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="two real uids need root to set up")


def unused_uid() -> int:
    """A uid with no account and no process: another local user nobody else is."""
    busy = {p.info["uids"].real for p in psutil.process_iter(["uids"]) if p.info["uids"]}
    for uid in range(4242, 60000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if uid not in busy:
                return uid
    pytest.skip("no unused uid")


@attrs.define(eq=False)
class Other:
    """A forked child running as another uid; what it reports arrives on a pipe."""

    pid: int
    fd: int
    buf: bytearray = attrs.Factory(bytearray)

    def line(self, deadline: float = 30.0) -> str:
        end = time.monotonic() + deadline
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            assert left > 0, "the other user's process reported nothing"
            import select

            if select.select([self.fd], [], [], left)[0]:
                chunk = os.read(self.fd, 4096)
                assert chunk, "the other user's process ended without a report"
                self.buf += chunk
        line, _, rest = bytes(self.buf).partition(b"\n")
        self.buf[:] = rest
        return line.decode()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        with contextlib.suppress(OSError):
            os.close(self.fd)


def as_user(uid: int | None, body: Callable[[Callable[[str], None]], None]) -> Other:
    """Fork; the child drops every privilege to *uid* (None: stays this user) and runs *body*
    with a ``say`` callback."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            os.close(read)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            body(lambda text: os.write(write, (text + "\n").encode()) and None)
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write)
    return Other(pid, read)


def squat(addr: bytes) -> Callable[[Callable[[str], None]], None]:
    """Bind the bell's address first and keep every ring it gets."""
    def body(say: Callable[[str], None]) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(addr)
        except OSError as exc:
            say(f"refused {exc.errno}")
            return
        say("bound")
        while True:
            sock.recv(64)
    return body


def flood(addr: bytes) -> Callable[[Callable[[str], None]], None]:
    """Ring as fast as the bell takes rings, until killed; say how the first thousand went."""
    def body(say: Callable[[str], None]) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.settimeout(0.05)  # a full queue blocks the sender briefly: it never spins
        sent = refused = 0
        said = False
        while True:
            try:
                sock.sendto(b"!", addr)
                sent += 1
            except TimeoutError:
                pass
            except OSError:
                refused += 1
                time.sleep(0.001)
            if not said and sent + refused >= 1000:
                say(f"flooding sent={sent} refused={refused}")
                said = True
    return body


@pytest.fixture
def reachable_home() -> Iterator[Home]:
    """A home whose directory (not its state/) another user may enter: tmp_path's own parents
    are private to root, which would hide the bell for a reason other than the one tested."""
    base = Path(tempfile.mkdtemp(prefix="fm-bell-", dir="/tmp"))
    base.chmod(0o755)
    home = Home(base / "home").ensure()
    try:
        yield home
    finally:
        with contextlib.suppress(Exception):
            stop_watcher(home)
        shutil.rmtree(base, ignore_errors=True)


@attrs.define(eq=False)
class Arm:
    popen: subprocess.Popen[bytes]
    watcher: int
    buf: bytearray = attrs.Factory(bytearray)

    def line(self, deadline: float) -> str:
        return read_line(self.popen, deadline, pending=self.buf)


@contextlib.contextmanager
def armed(home: Home) -> Iterator[tuple[dict[str, str], Arm]]:
    """An arm whose watcher polls once in ten minutes: only the doorbell wakes it in time."""
    env = base_env(home.root, FM_POLL="600", FM_GUARD_GRACE="1800")
    popen = subprocess.Popen(fm_argv("arm"), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, env=env)
    try:
        arm = Arm(popen, 0)
        first = arm.line(60.0)
        assert first.startswith("watcher: started pid="), first
        arm.watcher = int(first.split("pid=", 1)[1].split()[0])
        yield env, arm
    finally:
        popen.kill()
        popen.wait(timeout=60)
        assert popen.stdout is not None
        popen.stdout.close()


def rung(env: dict[str, str], arm: Arm, key: str) -> float:
    """Append a row and return how long its reason line took to come from the arm."""
    started = time.monotonic()
    done = run_fm(env, "wake", "append", "check", key, f"check: {key}")
    assert done.returncode == 0, done.stderr
    assert arm.line(RUNG) == f"check: {key}"
    return time.monotonic() - started


def address(home: Home) -> bytes:
    addr = bell.address(home)
    return addr if isinstance(addr, bytes) else os.fsencode(addr)


def cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


@needs_root
def test_another_user_can_neither_take_the_bell_first_nor_ring_it(
        reachable_home: Home) -> None:
    squatter = as_user(unused_uid(), squat(address(reachable_home)))
    try:
        said = squatter.line()
        assert said.startswith("refused"), f"another user bound the doorbell: {said}"
        with armed(reachable_home) as (env, arm):
            rung(env, arm, "after-the-squat")
    finally:
        squatter.stop()


@needs_root
def test_another_users_flood_never_reaches_the_watcher(reachable_home: Home) -> None:
    with armed(reachable_home) as (env, arm):
        flooder = as_user(unused_uid(), flood(address(reachable_home)))
        try:
            said = flooder.line()
            assert "sent=0 " in said, f"another user rang the doorbell: {said}"
            before = cpu(arm.watcher)
            time.sleep(FLOOD_SECONDS)  # pacing: the flood runs this long
            spent = cpu(arm.watcher) - before
            assert spent < FLOOD_CPU, f"the flood cost the watcher {spent:.2f} CPU-s"
            rung(env, arm, "during-the-flood")
        finally:
            flooder.stop()


def test_the_owners_own_flood_costs_the_watcher_a_bounded_amount(reachable_home: Home) -> None:
    """The owner's runaway writer may ring (only the owner can): the bell answers a bounded
    number of rings a second, and a real row among the flood still wakes the watcher at once."""
    with armed(reachable_home) as (env, arm):
        target = address(reachable_home)
        flooder = as_user(None, flood(target))
        try:
            said = flooder.line()
            assert " sent=" in said and "sent=0 " not in said, said
            before = cpu(arm.watcher)
            time.sleep(FLOOD_SECONDS)  # pacing: the flood runs this long
            spent = cpu(arm.watcher) - before
            assert spent < FLOOD_CPU, f"the flood cost the watcher {spent:.2f} CPU-s"
            assert rung(env, arm, "among-the-flood") < RUNG
        finally:
            flooder.stop()


def test_a_home_too_deep_for_a_socket_address_still_has_a_doorbell(tmp_path: Path) -> None:
    """A state path longer than a socket address holds is reached through its directory."""
    root = tmp_path / ("d" * 60) / ("e" * 60) / "home"
    home = Home(root).ensure()
    assert len(os.fsencode(str(home.state / "watcher.bell"))) > 108
    try:
        with armed(home) as (env, arm):
            # (Looked at while the watcher waits: once rung, it closes and removes its bell.)
            assert (home.state / "watcher.bell").is_socket()
            assert (home.state / "watcher.bell").stat().st_mode & 0o077 == 0  # the owner's alone
            assert rung(env, arm, "deep") < RUNG
    finally:
        stop_watcher(home)
