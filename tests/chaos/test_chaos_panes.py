"""Crew panes that close and renumber under fm's feet, and names and texts built to make tmux
run or split something: nothing is ever typed into another crew's pane, every closed pane of a
crew the watcher saw wakes the primary exactly once, and tmux takes every name and text as it
is. Real tmux on a private socket, real ``fm`` processes and watchers; the only sleeps are the
chaos's pacing (when a pane is killed)."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from chaos_support import DEADLINE, base_env, one_line_error, run_fm
from firstmate.store import crew
from firstmate.store.home import Home
from firstmate.testing.procs import eventually, spawn_arm
from firstmate.testing.sites import declare
from firstmate.watch.backends.tmux import literal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.skipif(shutil.which("tmux") is None,
                                 reason="the tmux binary is not installed: crews run in tmux")]

FAKECREW = Path(__file__).resolve().parents[1] / "core" / "fakecrew"
EXITED = re.compile(r"signal: (\S+)\.exited(?: \(with (.*)\))?$")


@attrs.define
class Panes:
    """A home and a private tmux server whose panes record what is typed into them."""

    tmp: Path
    home: Home
    socket: str
    env: dict[str, str]

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=DEADLINE, check=False)

    def fm(self, *args: str | bytes, **extra: str) -> subprocess.CompletedProcess[bytes]:
        return run_fm({**self.env, **extra}, *args)

    def recorder(self, name: str) -> list[str]:
        return ["sh", "-c", f"exec cat > {self.tmp / (name + '.typed')}"]

    def typed(self, name: str) -> list[str]:
        path = self.tmp / f"{name}.typed"
        return path.read_text().splitlines() if path.exists() else []

    def window(self, names: list[str]) -> list[str]:
        """One window split into a pane per name, each recording; their ids in order."""
        first = self.tmux("new-session", "-d", "-s", "fleet", "-x", "200", "-y", "60", "-P", "-F",
                          "#{pane_id}", *self.recorder(names[0]))
        assert first.returncode == 0, first.stderr
        ids = [first.stdout.strip()]
        for name in names[1:]:
            made = self.tmux("split-window", "-d", "-t", "fleet:0", "-P", "-F", "#{pane_id}",
                             *self.recorder(name))
            assert made.returncode == 0, made.stderr
            self.tmux("select-layout", "-t", "fleet:0", "tiled")
            ids.append(made.stdout.strip())
        return ids


@pytest.fixture
def panes(tmp_path: Path) -> Iterator[Panes]:
    home = Home(tmp_path / "home").ensure()
    socket = f"fm-chaos-{os.getpid()}-{tmp_path.name}"[:60]
    env = base_env(home.root, FM_TMUX=shutil.which("tmux") or "tmux", FM_TMUX_SOCKET=socket)
    site = tmp_path / "fakecrew-site"  # (its entry point: fm finds plugins by nothing else)
    declare(site, "fakecrew", "firstmate_plugin_fakecrew")
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(FAKECREW), str(site)])
    made = Panes(tmp_path, home, socket, env)
    try:
        yield made
    finally:
        made.tmux("kill-server")


def test_steering_while_panes_close_and_renumber_never_types_into_another_crew(
        panes: Panes) -> None:
    names = [f"d{i}" for i in range(5)]
    ids = panes.window(names)
    for name, pane in zip(names, ids, strict=True):
        # By position: every close renumbers the panes after it.
        index = panes.tmux("display-message", "-p", "-t", pane, "#{pane_index}").stdout.strip()
        assert panes.fm("crew", "add", name, "--pane", f"fleet:0.{index}").returncode == 0
    doomed = ["d0", "d2", "d3"]
    rng = random.Random(7)

    def kill() -> None:
        for name in doomed:
            time.sleep(rng.uniform(0.05, 0.4))  # pacing: a close lands between steers
            panes.tmux("kill-pane", "-t", ids[names.index(name)])

    killer = threading.Thread(target=kill)
    killer.start()
    sent: dict[str, list[str]] = {name: [] for name in names}
    try:
        for n in range(60):
            name = rng.choice(names)
            text = f"to {name} #{n};"
            done = panes.fm("crew", "steer", name, text)
            assert done.returncode in (0, 1), done.stderr
            if done.returncode:
                line = one_line_error(done)
                assert name in line and "nothing was typed" in line, line
            else:
                sent[name].append(text)
    finally:
        killer.join()
    for name in names:
        typed = panes.typed(name)
        assert all(line.startswith(f"to {name} #") for line in typed), (name, typed)
    for name in set(names) - set(doomed):  # the survivors got every line, exactly
        eventually(f"{name}'s lines", lambda name=name: panes.typed(name) == sent[name])
    listed = json.loads(panes.fm("crew", "list", "--json").stdout)["crews"]
    assert {c["name"]: c["pane_state"] for c in listed} == {
        name: "gone" if name in doomed else "live" for name in names}


def _drain_and_ack(panes: Panes) -> None:
    drained = panes.fm("wake", "drain", "--json")
    assert drained.returncode == 0, drained.stderr
    result = json.loads(drained.stdout)
    if result.get("ack_through") is not None:
        acked = panes.fm("wake", "drain", "--ack-through", str(result["ack_through"]),
                         "--recovery-generation", result["generation"])
        assert acked.returncode == 0, acked.stderr


def test_panes_closing_while_the_watcher_reads_them_wake_once_each(panes: Panes) -> None:
    names = [f"d{i}" for i in range(6)]
    ids = panes.window(names)
    for name, pane in zip(names, ids, strict=True):
        assert panes.fm("crew", "add", name, "--pane", pane).returncode == 0
    env = {**panes.env, "FM_POLL": "1", "FM_STALE_SLICE_MS": "1"}
    doomed = ["d1", "d2", "d4", "d5"]
    rng = random.Random(11)

    def kill() -> None:
        for name in doomed:
            time.sleep(rng.uniform(0.0, 1.5))  # pacing: while a watcher lists and reads panes
            panes.tmux("kill-pane", "-t", ids[names.index(name)])

    killer = threading.Thread(target=kill)
    reported: list[str] = []
    reasons: list[str] = []
    killer.start()
    try:
        # Every doomed pane is closed, or will be, so each arm has an exit to wake for until
        # all are reported (the blank panes that stay are not stale this soon after their add).
        while not set(doomed) <= set(reported):
            assert len(reasons) < 30, reasons
            arm = spawn_arm(panes.home, panes.tmp, env=env)
            try:
                reason = arm.wait_reason(DEADLINE)
                assert arm.wait() == 0
                assert "Traceback" not in arm.stderr(), arm.stderr()
            finally:
                arm.stop()
            reasons.append(reason)
            found = EXITED.match(reason)
            if found:
                reported += [found.group(1), *(found.group(2) or "").split(", ")]
                reported = [name for name in reported if name]
            _drain_and_ack(panes)
    finally:
        killer.join()
    assert sorted(reported) == sorted(doomed), reasons  # each closed pane once, no other
    for name in doomed:
        state = (panes.home.crew_dir / f"{name}.pane-state").read_text().split()
        assert state[-1] == ids[names.index(name)]


TMUX_TEXT = st.text(alphabet=st.sampled_from(list("ab ;#{}()$`'\"\\-%!~|&<>*?=,.:@^é€")),
                    min_size=1, max_size=40).filter(lambda text: text.strip() != "")


@settings(max_examples=max(10, settings.default.max_examples // 2), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=TMUX_TEXT)
def test_hostile_texts_reach_the_pane_as_they_are(panes: Panes, text: str) -> None:
    if not crew.exists(panes.home, "d0"):
        panes.window(["d0"])
        assert panes.fm("crew", "add", "d0", "--pane", "fleet:0.0").returncode == 0
    before = len(panes.typed("d0"))
    done = panes.fm("crew", "steer", "d0", "--", text)
    assert done.returncode == 0, done.stderr
    line = eventually("the typed line", lambda: panes.typed("d0")[before:])
    assert line == [text.strip()]


def _record(path: Path) -> dict[str, object] | None:
    """The fake crew's start record, once it is written whole."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


@pytest.mark.parametrize("hostile", ["#(touch pwned-x)", "x;", ";;", "a\\;", "$(touch pwned-y)",
                                     "#{session_name}", "-n", "`touch pwned-z`", "a b #[fg=red]",
                                     "é€ {} '\"", "%1"])
def test_hostile_names_and_directories_reach_tmux_as_they_are(panes: Panes,
                                                                hostile: str) -> None:
    project = panes.tmp / f"proj{hostile}"
    project.mkdir()
    # (a session name keeps what tmux would not change: the rest is refused, below)
    session = "s" + "".join(ch for ch in hostile if ch not in ":.$\\")
    done = panes.fm("crew", "spawn", "w1", "--harness", "fakecrew", "--cwd", str(project),
                    "--window-name", f"w{hostile}", "--session", session, "--", "t",
                    FAKECREW_DIR=str(panes.tmp))
    assert done.returncode == 0, done.stderr
    assert f"window {session}:w{hostile}\n" in done.stdout.decode()
    listed = panes.tmux("list-panes", "-a", "-F",
                        "#{pane_id}\t#{session_name}\t#{window_name}").stdout.splitlines()
    member = crew.get(panes.home, "w1")
    assert f"{member.pane}\t{session}\tw{hostile}" in listed
    assert panes.tmux("has-session", "-t", literal(f"={session}")).returncode == 0
    record = eventually("the crew's start", lambda: _record(panes.tmp / "w1.json"))
    assert record["cwd"] == str(project)
    eventually("the crew's first report", lambda: crew.last_line(panes.home, "w1"))
    assert not list(panes.tmp.rglob("pwned-*")) and not list(Path.cwd().glob("pwned-*"))
    stopped = panes.fm("crew", "stop", "w1")
    assert stopped.returncode == 0, stopped.stderr


@pytest.mark.parametrize("session", ["s:x", "s.x", "s$(touch pwned-s)", "s\\;", "s\nx"])
def test_a_session_name_tmux_would_change_is_refused_in_one_line(panes: Panes,
                                                                  session: str) -> None:
    done = panes.fm("crew", "spawn", "w1", "--harness", "fakecrew", "--session", session,
                    "--", "t", FAKECREW_DIR=str(panes.tmp))
    assert done.returncode == 2 and "invalid tmux session name" in one_line_error(done)
    assert not crew.exists(panes.home, "w1") and panes.tmux("list-sessions").returncode != 0
