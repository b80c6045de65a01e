"""The trust boundary, attacked for real: a home another user controls, a cloned home and a
world-writable home never run a command as you. Two real unprivileged uids (``setpriv``); root
ignores permissions, so the attacks are only meaningful between ordinary users."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from firstmate.base import keyring, trust
from firstmate.base.errors import StateError
from firstmate.base.homeroot import find_root
from firstmate.testing import read_line

ALICE, BOB = 64011, 64012
DEADLINE = 60.0


def _setpriv(uid: int, caps: bool) -> list[str]:
    argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    if caps:
        # Lets the user reach this test environment's interpreter when it lives below a
        # directory only root may enter; ownership and write permission are still the uid's.
        argv += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    return argv


def _probe() -> tuple[list[str] | None, bool, str]:
    if os.geteuid() != 0:
        return None, False, "needs root to run commands as two other users"
    if shutil.which("setpriv") is None:
        return None, False, "needs setpriv (util-linux) to run as two other users"
    why = ""
    for caps in (False, True):
        # fm starts children with this interpreter too: the probe does the same.
        probe = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
                 "'import firstmate'], check=True)")
        done = subprocess.run([*_setpriv(ALICE, caps), sys.executable, "-c", probe],
                              capture_output=True, text=True, timeout=60, check=False,
                              cwd="/", env={**os.environ, "HOME": "/"})
        if done.returncode == 0:
            return _setpriv(ALICE, caps), caps, ""
        why = done.stderr.strip().splitlines()[-1:] and done.stderr.strip().splitlines()[-1]
    return None, False, f"an unprivileged user cannot run this environment's interpreter: {why}"


_PROBE = _probe()
pytestmark = pytest.mark.skipif(_PROBE[0] is None, reason=_PROBE[2])


class User:
    """A real unprivileged user with a home directory of their own."""

    def __init__(self, uid: int, root: Path) -> None:
        self.uid = uid
        self.home = root / f"user-{uid}"
        self.home.mkdir(mode=0o700)
        os.chown(self.home, uid, uid)

    def env(self, **extra: str) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items()
                if k in ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "TMPDIR")}
        return {**keep, "HOME": str(self.home), "FM_TMUX": "/nonexistent-tmux",
                "FIRSTMATE_PLUGINS": "none", "FM_SIGNAL_GRACE": "0", "FM_CHECK_INTERVAL": "1",
                "PYTHONDONTWRITEBYTECODE": "1", **extra}

    def argv(self, *args: str) -> list[str]:
        return [*_setpriv(self.uid, _PROBE[1]), sys.executable, "-m", "firstmate", *args]

    def fm(self, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, cwd=cwd,
                              env=self.env(**env), timeout=DEADLINE, check=False)

    def sh(self, script: str, cwd: Path) -> None:
        subprocess.run([*_setpriv(self.uid, _PROBE[1]), "sh", "-c", script], cwd=cwd,
                       env=self.env(), timeout=DEADLINE, check=True)

    def drain_and_ack(self, cwd: Path) -> None:
        drained = self.fm("wake", "drain", "--json", cwd=cwd)
        assert drained.returncode == 0, drained.stderr
        result = json.loads(drained.stdout)
        acked = self.fm("wake", "drain", "--ack-through", str(result["ack_through"]),
                        "--recovery-generation", result["generation"], cwd=cwd)
        assert acked.returncode == 0, acked.stderr

    def arm_until_reason(self, cwd: Path, wake_home: str | None = None, **env: str) -> list[str]:
        """Run ``fm arm`` as this user; once started, optionally append a wake to *wake_home*
        so the cycle closes; every stdout line up to the reason."""
        arm = subprocess.Popen(self.argv("arm"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               cwd=cwd, env=self.env(**env))
        try:
            lines = [read_line(arm, DEADLINE)]
            assert lines[0].startswith("watcher: started"), lines
            if wake_home is not None:
                done = self.fm("wake", "append", "check", "done", "check: done", cwd=cwd,
                               FM_HOME=wake_home)
                assert done.returncode == 0, done.stderr
            lines.append(read_line(arm, DEADLINE))
            assert arm.wait(timeout=DEADLINE) == 0
            return lines
        finally:
            if arm.poll() is None:
                arm.kill()
                arm.wait()
            subprocess.run(self.argv("arm", "--stop"), cwd=cwd, env=self.env(**env),
                           capture_output=True, timeout=DEADLINE, check=False)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A shared sticky directory like /tmp, that both users can reach."""
    root = Path(tempfile.mkdtemp(prefix="fm-trust-", dir="/tmp"))
    os.chmod(root, 0o1777)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def users(shared: Path) -> tuple[User, User]:
    private = shared / "homes"
    private.mkdir(mode=0o755)
    return User(ALICE, private), User(BOB, private)


def _owner_lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_another_users_home_above_your_project_is_never_adopted(
    shared: Path, users: tuple[User, User],
) -> None:
    alice, bob = users
    pwned = shared / "pwned"
    alice.sh("mkdir .firstmate", cwd=shared)
    added = alice.fm("check", "add", "evil", "--", "sh", "-c", f"id -u >> {pwned}; echo ran",
                     cwd=shared)
    assert added.returncode == 0, added.stderr
    alice.sh("chmod -R a+rwX .firstmate", cwd=shared)
    alice.sh(f"touch {pwned}; chmod 666 {pwned}", cwd=shared)
    # The check does run for its owner (so the refusal below is the boundary, not a dud).
    alice.sh("chmod -R go-w .firstmate", cwd=shared)
    assert alice.arm_until_reason(shared)[-1] == "check: evil: ran"
    assert _owner_lines(pwned) == [str(ALICE)]
    alice.drain_and_ack(shared)
    alice.sh("chmod -R a+rwX .firstmate", cwd=shared)
    project = shared / "project"
    bob.sh(f"mkdir {project}", cwd=shared)
    status = bob.fm("status", cwd=project)
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0].startswith(f"home: {bob.home / '.firstmate'} (default")
    lines = bob.arm_until_reason(project, wake_home=str(bob.home / ".firstmate"))
    assert lines[-1] == "check: done"
    assert _owner_lines(pwned) == [str(ALICE)]  # never ran as bob


def _legacy_cloned_home(repo: Path) -> None:
    """A repository committing a home with a check and its old in-home secret: under the old
    scheme the definition authenticates."""
    checks = repo / ".firstmate" / "state" / "checks"
    checks.mkdir(parents=True)
    key = secrets.token_bytes(32)
    (repo / ".firstmate" / "state" / "checks.key").write_text(key.hex() + "\n")
    body = {"version": 1, "name": "lint", "argv": ["sh", "-c", "id -u >> cloned-ran; echo ran"],
            "cwd": str(repo), "added_at": 1.0}
    record = {**body, "mac": keyring.mac(key, body)}
    (checks / "lint.json").write_text(json.dumps(record))


def test_a_cloned_home_runs_none_of_its_checks(shared: Path, users: tuple[User, User]) -> None:
    _, bob = users
    upstream = shared / "upstream"
    upstream.mkdir()
    _legacy_cloned_home(upstream)
    for path in [upstream, *upstream.rglob("*")]:
        os.chown(path, ALICE, ALICE)
    clone = shared / "clone"
    bob.sh(f"cp -r {upstream} {clone}", cwd=shared)  # the clone is bob's, files and all
    # Found by walking up, the clone's state is not one bob's fm made: fm will not act on it.
    for args in (("arm",), ("status",), ("crew", "list")):
        refused = bob.fm(*args, cwd=clone)
        assert refused.returncode == 4, (args, refused.stderr)
        assert refused.stderr.count("\n") == 1 and "will not act on it" in refused.stderr
        assert f"FM_HOME={clone / '.firstmate'} fm status" in refused.stderr
    assert not (clone / "cloned-ran").exists()
    # Adopted by name, the home counts, but a check it carries is still not bob's.
    adopted = bob.fm("status", cwd=clone, FM_HOME=str(clone / ".firstmate"))
    assert adopted.returncode == 0, adopted.stderr
    lines = bob.arm_until_reason(clone)
    assert lines[-1] == "check: rejected unauthenticated state checks: lint"
    assert not (clone / "cloned-ran").exists() and not (upstream / "cloned-ran").exists()
    bob.drain_and_ack(clone)
    # Registering it again in this place makes it bob's: then it runs.
    again = bob.fm("check", "add", "lint", "--replace", "--", "sh", "-c",
                   "id -u >> cloned-ran; echo ran", cwd=clone)
    assert again.returncode == 0, again.stderr
    assert bob.arm_until_reason(clone)[-1] == "check: lint: ran"
    assert _owner_lines(clone / "cloned-ran") == [str(BOB)]


def test_a_world_writable_home_is_refused_before_another_user_can_swap_its_state(
    shared: Path, users: tuple[User, User],
) -> None:
    alice, bob = users
    home = shared / "bobs-home"
    bob.sh(f"mkdir {home}", cwd=shared)
    made = bob.fm("crew", "add", "c1", "--pane", "%1", cwd=shared, FM_HOME=str(home))
    assert made.returncode == 0, made.stderr
    bob.sh(f"chmod 777 {home}", cwd=shared)
    # Alice swaps state/ for her own, with a check of hers.
    alice.sh(f"mv {home}/state {home}/bobs-state && mkdir -p {home}/state/checks", cwd=shared)
    for args in (("status",), ("arm",), ("wake", "append", "check", "k", "check: x"),
                 ("crew", "status", "c1", "done: x")):
        done = bob.fm(*args, cwd=shared, FM_HOME=str(home))
        assert done.returncode == 4, (args, done.stdout, done.stderr)
        assert done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and "writable by other users" in lines[0], done.stderr
        assert f"chmod go-w {home}" in lines[0]
    # Fixed by its owner, the home works again (Alice's state directory is now refused).
    bob.sh(f"chmod 755 {home}", cwd=shared)
    done = bob.fm("status", cwd=shared, FM_HOME=str(home))
    assert done.returncode == 4 and "is owned by uid 64011" in done.stderr


def test_a_home_below_a_world_writable_directory_is_refused(
    shared: Path, users: tuple[User, User],
) -> None:
    _, bob = users
    open_dir = shared / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)  # no sticky bit: anyone may rename what is inside
    done = bob.fm("status", cwd=shared, FM_HOME=str(open_dir / "home"))
    assert done.returncode == 4
    assert "world-writable without the sticky bit" in done.stderr
    assert len(done.stderr.splitlines()) == 1


# --- the rules, in-process (as root: ownership of a file chowned to another uid) ------------


def test_discovery_passes_over_a_foreign_marker(tmp_path: Path) -> None:
    project = tmp_path / "outer" / "project"
    project.mkdir(parents=True)
    foreign = tmp_path / "outer" / ".firstmate"
    foreign.mkdir()
    mine = tmp_path / ".firstmate"
    mine.mkdir()
    env: Mapping[str, str] = {"HOME": str(tmp_path / "nohome")}
    if os.geteuid() == 0:
        os.chown(foreign, ALICE, ALICE)
        assert find_root(env, str(project)) == str(mine)
    os.chown(foreign, os.geteuid(), os.getegid())
    assert find_root(env, str(project)) == str(foreign)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_foreign_or_shared_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("x")
    assert trust.verify_file(str(path), "thing")
    os.chmod(path, 0o666)
    with pytest.raises(StateError, match="chmod go-w"):
        trust.verify_file(str(path), "thing")
    os.chmod(path, 0o644)
    os.chown(path, ALICE, ALICE)
    with pytest.raises(StateError, match="owned by uid 64011"):
        trust.verify_file(str(path), "thing")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
