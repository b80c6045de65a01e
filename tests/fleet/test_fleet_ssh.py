"""Remote panes over SSH, for real: an sshd on 127.0.0.1 (ssh_support), a host's home with its
own private tmux server reached through it, the primary's commands and watcher reading and
typing into that host's panes through one control connection, and the faults: the connection
killed, the host unreachable and back, a host with another key, settings fm did not write, and
hostile names and texts."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.fleet import config
from firstmate.store import crew
from firstmate.testing.procs import eventually
from ssh_support import Rig, keygen, kill, reason, turns


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    try:
        yield made
    finally:
        made.close()


# --- a crew spawned on a host, and driven from the primary -------------------------------------


def test_a_crew_spawned_on_a_host_is_driven_from_the_primary(rig: Rig) -> None:
    added = rig.add_host()
    assert "host gpu is reached over SSH as" in added.stdout and "tmux 3" in added.stdout
    assert "fm 0." in added.stdout
    owned = rig.tmp / "owned"
    window = f"w $(touch {owned});#{{pane_id}}"
    done = rig.fm("crew", "spawn", "w1", "--host", "gpu", "--harness", "fakecrew",
                  "--window-name", window, "--", "train the model")
    assert "host gpu's home joined fleet" in done.stdout
    assert "crew: gpu.w1 is registered here (pane gpu:%" in done.stdout, done.stdout
    windows = rig.tmux("list-windows", "-a", "-F", "#{window_name}").stdout
    assert window in windows.splitlines()  # (taken literally there, nothing run)
    eventually("the crew's first report on the primary",
               lambda: rig.fleet.lines("gpu", "w1") == ["working: started"])
    listed = json.loads(rig.fm("crew", "list", "--json").stdout)["crews"]
    assert [(c["name"], c["host"], c["pane_state"]) for c in listed] == [("gpu.w1", "gpu",
                                                                         "live")]
    assert "fakecrew>" in rig.fm("crew", "peek", "gpu.w1").stdout
    hostile = f"say 'hi' \"there\" $(touch {owned}) `touch {owned}`; #{{pane_id}} \\; end;"
    rig.fm("crew", "steer", "gpu.w1", hostile)
    eventually("the instruction typed on the host", lambda: hostile in turns(rig, "w1"))
    rig.fleet.fm(rig.host_home, "crew", "status", "w1", "needs-decision: key=db sqlite?")
    eventually("the decision on the primary", lambda: len(rig.fleet.lines("gpu", "w1")) >= 2)
    rig.fm("crew", "answer", "gpu.w1", "--key", "db", "keep it", "--send")
    eventually("the answer typed on the host",
               lambda: "answered: key=db keep it" in turns(rig, "w1"))
    assert not owned.exists()
    stopped = rig.fm("crew", "stop", "gpu.w1")
    assert "ended pane %" in stopped.stdout and "note" not in stopped.stderr
    assert not crew.exists(rig.primary, "gpu.w1")
    assert "fakecrew>" in crew.path(rig.primary, "gpu.w1", crew.PANE_LOG).read_text()
    assert not crew.exists(rig.host_home, "w1")  # (unregistered on its host too)
    assert rig.tmux("list-windows", "-a").returncode != 0  # (its only window is gone)


def test_a_hosts_pane_added_from_the_primary_wakes_once_when_it_closes(rig: Rig) -> None:
    rig.add_host()
    owned = rig.tmp / "owned"
    odd = rig.fm("crew", "add", "w3", "--host", "gpu", "--pane", f"x;$(touch {owned})`id`")
    assert "gpu: crew: added w3" in odd.stdout and "has no pane" in odd.stderr, odd.stderr
    assert not owned.exists()
    pane = rig.pane()
    done = rig.fm("crew", "add", "w2", "--host", "gpu", "--pane", pane)
    assert f"crew: gpu.w2 is registered here (pane gpu:{pane})" in done.stdout, done.stdout
    member = crew.get(rig.primary, "gpu.w2")
    assert (member.host, member.pane) == ("gpu", pane) and member.pid and member.started
    watcher = rig.watch()
    eventually("the watcher's first look at the host",
               lambda: rig.master() is not None, gone=watcher, gone_means="the watcher ended")
    rig.tmux("kill-pane", "-t", pane)
    assert reason(watcher) == "signal: gpu.w2.exited"
    rig.handled()
    again = rig.watch()  # (the exit is not raised again)
    rig.fleet.fm(rig.host_home, "crew", "status", "w2", "done: wrapped up")
    assert reason(again) == "signal: gpu.w2.status: done: wrapped up"


# --- faults ----------------------------------------------------------------------------------------


def test_a_host_that_cannot_be_reached_wakes_once_and_is_read_again_when_back(rig: Rig) -> None:
    rig.add_host()
    panes = [rig.pane() for _ in range(3)]
    for number, pane in enumerate(panes):
        rig.fm("crew", "add", f"c{number}", "--host", "gpu", "--pane", pane)
    watcher = rig.watch()
    eventually("the control connection", lambda: rig.master(), gone=watcher,
               gone_means="the watcher ended")
    rig.sshd.stop()
    kill(rig.master())  # (the connection cut: no new one can be made)
    line = reason(watcher)
    assert line.startswith("signal: gpu.unreachable (crews: gpu.c0, gpu.c1, gpu.c2): "), line
    assert "Connection refused" in line
    states = json.loads(rig.fm("crew", "list", "--json").stdout)["crews"]
    assert {c["pane_state"] for c in states} == {"unreachable"}
    rig.handled()
    second = rig.watch()  # (it stays unreachable: nobody is woken again for it)
    eventually("the second watcher's looks", lambda: "trying again" in
               (rig.primary.state / "logs" / "triage.log").read_text(errors="replace")
               if (rig.primary.state / "logs" / "triage.log").exists() else False)
    rig.fleet.fm(rig.host_home, "crew", "status", "c0", "blocked: offline")
    assert reason(second) == "signal: gpu.c0.status: blocked: offline"
    rig.handled()
    rig.sshd.start()
    third = rig.watch()
    eventually("the host read again", lambda: not os.path.exists(
        rig.primary.state / "fleet" / "gpu.unreachable"), gone=third,
        gone_means="the watcher ended")
    rig.tmux("kill-pane", "-t", panes[1])
    assert reason(third) == "signal: gpu.c1.exited"


def test_a_killed_control_connection_is_made_again_without_a_wake(rig: Rig) -> None:
    rig.add_host()
    pane = rig.pane()
    rig.fm("crew", "add", "w", "--host", "gpu", "--pane", pane)
    watcher = rig.watch()
    first = eventually("the control connection", lambda: rig.master(), gone=watcher,
                       gone_means="the watcher ended")
    kill(first)
    eventually("a new control connection", lambda: rig.master() not in (None, first),
               gone=watcher, gone_means="the watcher ended")
    rig.tmux("kill-pane", "-t", pane)
    assert reason(watcher) == "signal: gpu.w.exited"
    assert "SSH connections" in rig.fm("fleet", "stop").stdout
    assert rig.master() is None


def test_a_host_with_another_key_is_refused(rig: Rig) -> None:
    stranger = keygen(rig.tmp / "stranger")
    done = rig.add_host(identity=stranger, check=False)
    assert done.returncode == 1 and "nothing was saved" in done.stderr, done.stderr
    assert "Permission denied" in done.stderr
    assert json.loads(rig.fm("fleet", "status", "--json").stdout)["hosts"][0]["ssh"] is None
    rig.add_host()
    pane = rig.pane(f"exec cat > {rig.tmp / 'typed'}")
    rig.fm("crew", "add", "w", "--host", "gpu", "--pane", pane)
    kill(rig.master())
    rig.sshd.stop()
    rig.sshd.rekey()  # (another machine answers at that address now)
    rig.sshd.start()
    refused = rig.fm("crew", "steer", "gpu.w", "rm -rf /", check=False)
    assert refused.returncode == 1 and "nothing was typed" in refused.stderr
    assert "a changed host key" in refused.stderr, refused.stderr
    assert "Host key verification failed" in refused.stderr
    watcher = rig.watch()
    line = reason(watcher)
    assert line.startswith("signal: gpu.unreachable (crews: gpu.w): ") and "host key" in line
    assert not (rig.tmp / "typed").read_text()


def test_ssh_settings_fm_did_not_write_are_never_run(rig: Rig) -> None:
    rig.add_host()
    env = rig.fleet.env(rig.primary)
    path = os.path.join(config.fleet_dir(str(rig.primary.root), env), config.PRIMARY)
    data = json.loads(Path(path).read_text())
    owned = rig.tmp / "owned"
    data["hosts"]["gpu"]["ssh"]["fm"] = f"touch {owned}; fm"
    config.write_private(path, data)
    done = rig.fm("crew", "spawn", "w", "--host", "gpu", "--harness", "fakecrew", check=False)
    assert done.returncode == 4, done.stderr
    assert "host gpu's SSH settings are not authenticated" in done.stderr
    assert "fm fleet host add gpu --ssh" in done.stderr
    status = json.loads(rig.fm("fleet", "status", "--json").stdout)
    assert status["hosts"][0]["ssh"].startswith("not authenticated")
    assert not owned.exists()


# --- panes read in a batch over ssh ------------------------------------------------------------

#: A pane's text that must not confuse a batch's framing nor the host's shell: a marker of the
#: right shape, tmux's separator and format characters, quotes and a command substitution.
HOSTILE = ("printf 'fm-00000000000000000000000000000000 %%1\\n;\\n#{pane_id} #(echo x) $(id) "
           "`id` \"q\" \\047s\\047\\n\\n\\tcol ; wide \\xe7\\x95\\x8c\\nlast;\\n'; exec cat")


def test_a_batch_read_over_ssh_reads_each_pane_as_a_lone_capture_does(rig: Rig) -> None:
    from firstmate.watch.backends.hosts import CrewPanes

    rig.add_host()
    ids = [rig.pane(HOSTILE), rig.pane("echo ready; exec cat"), rig.pane(HOSTILE)]
    eventually("the panes drawn", lambda: all(
        ("last;" in text or "ready" in text) for text in
        (rig.tmux("capture-pane", "-p", "-t", pane).stdout for pane in ids)))
    backend = CrewPanes.from_env(rig.primary, rig.fleet.env(rig.primary)).host("gpu")
    call = backend.start_captures(ids)
    assert call is not None
    eventually("the batch over", lambda: call.step() or None)
    found = call.result()
    assert found == {pane: backend.capture(pane) for pane in ids}
    assert "$(id) `id`" in str(found[ids[0]])  # (shown as it is, nothing run)
