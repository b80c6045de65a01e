"""``fm doctor`` as a user meets it, one scripted session: real git projects, the real harness
plugins, a real tmux server on a private socket, a throw-away environment the hooks point into
that is then deleted. Each step breaks one thing, runs the doctor, follows every fix it prints
literally (a command line runs in ``sh``, an environment change is made, "start or restart
<harness>" starts a stand-in harness that runs the installed hooks as the harness would), and
runs the doctor again to find the thing fixed. No doctor run ever reports one thing both ok
and failing."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from firstmate.testing import DEADLINE, fm_command
from firstmate.testing.procs import eventually

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or shutil.which("tmux") is None,
    reason="git and tmux are needed")

GIT_ID = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
          "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1"}

#: A stand-in Claude Code (its program name is ``claude``, as the session lock looks for): it
#: runs the project's installed SessionStart hook, then its Stop hook with a Stop payload, each
#: through ``sh`` as Claude Code runs a command hook, and stays up until stdin closes.
CLAUDE = """
import json, os, subprocess, sys
settings = json.load(open(os.path.join(sys.argv[1], ".claude", "settings.local.json")))
def run(event, payload):
    command = settings["hooks"][event][0]["hooks"][0]["command"]
    return subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
                            cwd=sys.argv[1]), payload
base = {"session_id": "s-1", "transcript_path": "/tmp/t.jsonl", "cwd": sys.argv[1],
        "permission_mode": "default"}
start, payload = run("SessionStart", {**base, "hook_event_name": "SessionStart"})
start.communicate(json.dumps(payload))
stop, payload = run("Stop", {**base, "hook_event_name": "Stop", "stop_hook_active": False,
                             "last_assistant_message": "done"})
stop.stdin.write(json.dumps(payload)); stop.stdin.close()
print("ready", flush=True)
sys.stdin.read()
stop.kill()
"""


class Session:
    """A user with a scratch home directory and a git project, running fm from a shell."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        keep = {k: v for k, v in os.environ.items()
                if not k.startswith(("FM_", "FIRSTMATE_", "CLAUDE", "CODEX_", "GIT_", "TMUX"))}
        (tmp / "user").mkdir()
        self.socket = f"fm-docs-{os.getpid()}-{tmp.name}"[:60]
        self.env = {**keep, **GIT_ID, "HOME": str(tmp / "user"),
                    "FIRSTMATE_KEYS_DIR": str(tmp / "keys"), "CODEX_HOME": str(tmp / "codex"),
                    "FM_TMUX_SOCKET": self.socket, "FM_SIGNAL_GRACE": "0"}
        self.project = tmp / "app"
        self.project.mkdir()
        for args in (("init", "-q", "-b", "main"), ("commit", "-q", "--allow-empty", "-m", "s")):
            subprocess.run(["git", *args], cwd=self.project, env=self.env, check=True,
                           capture_output=True, timeout=DEADLINE)
        self.harnesses: list[subprocess.Popen[str]] = []

    def fm(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(fm_command(*args), cwd=self.project, env=self.env, text=True,
                              capture_output=True, timeout=DEADLINE * 4, check=False)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def doctor(self) -> list[dict[str, Any]]:
        done = self.fm("doctor", "--json")
        assert done.returncode in (0, 1), done.stderr
        found: list[dict[str, Any]] = json.loads(done.stdout)["findings"]
        never_both(found)
        return found

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True,
                              text=True, timeout=DEADLINE, check=True).stdout

    def follow(self, finding: dict[str, Any]) -> None:
        """Do what the finding's fix says, as it says it."""
        fix = finding["fix"]
        assert fix, finding
        if fix.startswith("start or restart Claude Code in "):
            assert fix.startswith(f"start or restart Claude Code in {self.project}:"), fix
            self.start_claude()
            return
        words = shlex.split(fix, comments=True)
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            self.env[name] = value
            return
        if words[0] == "unset":
            self.env.pop(words[1], None)
            return
        ours = " ".join(shlex.quote(word) for word in fm_command())
        line = re.sub(r"(^|&& |=\S+ )fm ", lambda m: f"{m.group(1)}{ours} ", fix)
        done = subprocess.run(["/bin/sh", "-c", line], cwd=self.project, env=self.env,
                              capture_output=True, text=True, timeout=DEADLINE * 4, check=False)
        assert done.returncode == 0, (fix, done.stderr)

    def start_claude(self) -> None:
        proc = subprocess.Popen(["claude", "-c", CLAUDE, str(self.project)],
                                executable=sys.executable, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=self.env,
                                cwd=self.project)
        self.harnesses.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"

    def close(self) -> None:
        for proc in self.harnesses:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=DEADLINE)
        self.fm("arm", "--stop")
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True,
                       timeout=DEADLINE, check=False)


def never_both(found: list[dict[str, Any]]) -> None:
    """One thing is never both ok and failing: per check, the lines about one subject (the
    words before the first colon) are never ok and fail together."""
    seen: dict[tuple[str, str], set[str]] = {}
    for f in found:
        seen.setdefault((f["check"], f["detail"].split(":", 1)[0]), set()).add(f["status"])
    for subject, statuses in seen.items():
        assert not {"ok", "fail"} <= statuses, (subject, found)


def of(found: list[dict[str, Any]], check: str, start: str = "") -> list[dict[str, Any]]:
    return [f for f in found if f["check"] == check and f["detail"].startswith(start)]


def bad(found: list[dict[str, Any]], check: str, start: str = "") -> list[dict[str, Any]]:
    return [f for f in of(found, check, start) if f["status"] != "ok"]


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    made = Session(tmp_path)
    try:
        yield made
    finally:
        made.close()


def throwaway_env(tmp: Path) -> Path:
    """A real environment of its own (a venv reaching this fm's packages), to delete later."""
    venv = tmp / "throwaway"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=DEADLINE * 4)
    site = next((venv / "lib").glob("python*/site-packages"))
    ours = sysconfig.get_paths()["purelib"]
    (site / "ours.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return venv / "bin" / "python"


def test_every_printed_fix_fixes_what_it_names(session: Session) -> None:
    s = session
    # 1. The hooks point into an environment that is then deleted.
    python = throwaway_env(s.tmp)
    done = s.fm("install", "claude", "--fm-command", f"{python} -P -m firstmate")
    assert done.returncode == 0, done.stderr
    assert [f["status"] for f in of(s.doctor(), "harness-config", "claude:")] == ["ok"]
    shutil.rmtree(python.parent.parent)
    (line,) = of(s.doctor(), "harness-config", "claude:")  # one verdict, not ok and fail
    assert line["status"] == "fail" and "deleted or moved" in line["detail"]
    s.follow(line)
    assert [f["status"] for f in of(s.doctor(), "harness-config", "claude:")] == ["ok"]

    # 2. An older fm's hooks in the settings file the project commits.
    local = s.project / ".claude" / "settings.local.json"
    shared = s.project / ".claude" / "settings.json"
    # (only the hooks: an older fm wrote nothing else there)
    shared.write_text(json.dumps({"hooks": json.loads(local.read_text())["hooks"]}))
    (line,) = bad(s.doctor(), "harness-config", "claude:")
    assert "the settings file the project commits" in line["detail"]
    s.follow(line)
    assert not bad(s.doctor(), "harness-config") and not shared.exists()

    # 3. Personal settings fm cannot read (the fix is not the dry run that repeats the error).
    local.write_text('{"hooks": ')
    (line,) = bad(s.doctor(), "harness-config", "claude:")
    assert line["status"] == "fail" and "--dry-run" not in line["fix"]
    s.follow(line)
    assert not bad(s.doctor(), "harness-config")

    # 4. A crew on a tmux server FM_TMUX_SOCKET names, then a wrong FM_TMUX_SOCKET.
    s.tmux("new-session", "-d", "-s", "crews", "sleep 600")
    pane = s.tmux("list-panes", "-a", "-F", "#{pane_id}").split()[0]
    assert s.fm("crew", "add", "alpha", "--pane", pane).returncode == 0
    assert of(s.doctor(), "tmux")[0]["status"] == "ok"
    s.env["FM_TMUX_SOCKET"] = s.socket + "-typo"
    (line,) = of(s.doctor(), "tmux")
    assert line["status"] == "fail" and repr(s.socket) in line["detail"]
    s.follow(line)
    assert of(s.doctor(), "tmux")[0]["status"] == "ok"

    # 5. A session-lock record no one can read, and no watcher while a crew needs one: both
    # are fixed by starting (here, a stand-in for) Claude Code, and both say so.
    from firstmate.continuity.sessionrecord import record_path
    from firstmate.store.home import Home

    record = record_path(Home(s.project / ".firstmate"))
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("not a session record\n")
    found = s.doctor()
    (lock,) = bad(found, "session-lock")
    (line,) = bad(found, "watcher")
    assert "unreadable" in lock["detail"] and lock["fix"] == line["fix"]
    assert "fm arm" not in line["fix"]
    s.follow(lock)
    eventually("the Stop hook to start the watcher", lambda: [
        f for f in of(s.doctor(), "watcher") if f["status"] == "ok"], DEADLINE)
    (lock,) = of(s.doctor(), "session-lock")
    assert lock["status"] == "ok" and lock["detail"].startswith("held by live harness pid")

    # 6. The project moves on disk, its home with it.
    s.fm("arm", "--stop")
    for proc in s.harnesses:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=DEADLINE)
    s.harnesses.clear()
    moved = s.tmp / "moved-app"
    s.project.rename(moved)
    s.project = moved
    found = s.doctor()
    (line,) = bad(found, "home")
    assert "the home was moved" in line["detail"]
    s.follow(line)
    (line,) = bad(s.doctor(), "harness-config", "claude:")
    assert "the home was moved or copied here" in line["detail"] and "older fm" not in \
        line["detail"]
    s.follow(line)
    assert not bad(s.doctor(), "harness-config")


def test_fix_applies_every_safe_fix_at_once(session: Session) -> None:
    s = session
    python = throwaway_env(s.tmp)
    assert s.fm("install", "claude", "--fm-command", f"{python} -P -m firstmate").returncode == 0
    assert s.fm("install", "codex", "--parked").returncode == 0
    shutil.rmtree(python.parent.parent)
    (s.project / ".firstmate" / "config" / "installs" / "codex.json").unlink()
    found = s.doctor()
    (claude,) = bad(found, "harness-config", "claude:")
    (codex,) = bad(found, "harness-config", "codex:")
    assert claude["safe"] and codex["safe"]
    # The switch the install was made with is kept: a dry run finds nothing to change with it.
    assert codex["fix"] == f"fm install codex --project {s.project} --parked"
    done = s.fm("doctor", "--fix")
    applied = [line for line in done.stdout.splitlines() if line.startswith("fix ")]
    assert len(applied) == 2 and all("→ done: " in line for line in applied), done.stdout
    assert not bad(s.doctor(), "harness-config")
