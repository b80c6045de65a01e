"""An install (or an uninstall) is whole or not at all: on a full disk ``fm install`` fails in one
line and leaves every file, the user's and the home's, exactly as it was. Real small filesystems
(a tmpfs of 256 KiB, filled to leave 0, 1, 2… pages free); where mounting is not allowed, a
file-size limit (RLIMIT_FSIZE) of the child stands in for the full disk."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from firstmate.base.homemark import ensure_home
from firstmate.testing import DEADLINE, fm_command

PAGE = 4096
#: Pages an install may need at most (the Pi shim and its client are about ten).
MOST_PAGES = 16
#: The file-size limits tried where no filesystem can be mounted.
LIMITS = (0, 100, 600, 1200, 2500, 5000, 10000, 30000)

USER_FILES = {
    "claude": {".claude/settings.json": json.dumps(
        {"model": "opus", "hooks": {"Stop": [{"hooks": [
            {"type": "command", "command": "echo user-stop"}]}]}}, indent=2) + "\n"},
    "codex": {"AGENTS.md": "# My project\n\nRun the tests before committing.\n" * 20,
              ".codex/hooks.json": json.dumps({"hooks": {"Stop": [{"hooks": [
                  {"type": "command", "command": "./mine.sh"}]}]}}) + "\n"},
    "pi": {"README.md": "mine\n"},
}


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path | None]:
    """A 256 KiB tmpfs (unmounted at the end), or None where mounting is not allowed."""
    where = tmp_path / "fs"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs",
                              str(where)], capture_output=True, check=False)
    if mounted.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True,
                          check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def tree(root: Path) -> dict[str, object]:
    """Every path under *root* (but the filler) with its kind, mode and bytes."""
    out: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if rel == "filler":
            continue
        st = path.lstat()
        if stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", stat.S_IMODE(st.st_mode))
        else:
            out[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return out


def fill(root: Path, free_pages: int) -> None:
    """Fill *root*'s filesystem but *free_pages* pages."""
    filler = root / "filler"
    filler.unlink(missing_ok=True)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        size = 0
        with contextlib.suppress(OSError):
            while True:
                size += os.write(fd, b"\0" * PAGE)
        os.ftruncate(fd, max(0, size - free_pages * PAGE))
    finally:
        os.close(fd)
    assert os.statvfs(root).f_bavail == free_pages


def rig(root: Path, harness: str, tmp_path: Path,
        new_home: bool = False) -> tuple[dict[str, str], Path]:
    project, home = root / "project", root / "home"
    project.mkdir()
    for rel, text in USER_FILES[harness].items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", "CLAUDE_"))}
    env.update(FM_HOME=str(home), FIRSTMATE_KEYS_DIR=str(tmp_path / "keys"),
               CLAUDE_CONFIG_DIR=str(tmp_path / "claude-config"))
    if not new_home:
        ensure_home(str(home), env)  # (marked with the keys the child fm reads)
    return env, project


def run(env: dict[str, str], project: Path, *args: str,
        preexec: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(fm_command(*args), capture_output=True, text=True, env=env,
                          cwd=project, timeout=DEADLINE * 4, check=False, preexec_fn=preexec)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    return done


def whole(env: dict[str, str], project: Path, harness: str, installed: bool) -> None:
    """Installed and recorded (or neither), by a dry run and the record."""
    dry = json.loads(run(env, project, "install" if installed else "uninstall", harness,
                         "--dry-run", "--json").stdout)
    assert all(c["action"] == "unchanged" for c in dry["changes"]), dry
    record = Path(env["FM_HOME"]) / "config" / "installs" / f"{harness}.json"
    if installed:
        assert str(project) in record.read_text()
    else:
        assert not record.exists() or str(project) not in record.read_text()


def sweep(env: dict[str, str], project: Path, root: Path, harness: str, verb: str,
          constraints: list[tuple[Callable[[], None], Callable[[], None] | None]]) -> None:
    """Run ``fm VERB HARNESS`` under each constraint in turn until it succeeds: every failure
    is one line with exit 1 or 4 and changes nothing."""
    failures = 0
    for prepare, preexec in constraints:
        prepare()
        before = tree(root)
        done = run(env, project, verb, harness, preexec=preexec)
        if done.returncode == 0:
            (root / "filler").unlink(missing_ok=True)
            whole(env, project, harness, installed=verb == "install")
            break
        failures += 1
        assert done.returncode in (1, 4), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert tree(root) == before, f"fm {verb} {harness} left a partial change: {done.stderr}"
    else:
        pytest.fail(f"fm {verb} {harness} never succeeded")
    if verb == "install":  # (an uninstall may only delete, which a full disk allows)
        assert failures >= 2, "the constraint never bit"
    (root / "filler").unlink(missing_ok=True)


def squeezes(disk: Path | None, root: Path) -> list[
        tuple[Callable[[], None], Callable[[], None] | None]]:
    """Each constraint in turn: the disk filled to leave 0, 1, 2… pages, else file-size limits."""
    if disk is not None:
        return [((lambda n=n: fill(root, n)), None) for n in range(MOST_PAGES + 1)]
    return [((lambda: None), (lambda n=n: resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))))
            for n in LIMITS]


def test_a_failed_install_leaves_no_new_home_behind(disk: Path | None, tmp_path: Path) -> None:
    root = disk if disk is not None else tmp_path / "plain"
    root.mkdir(exist_ok=True)
    env, project = rig(root, "claude", tmp_path, new_home=True)
    assert not Path(env["FM_HOME"]).exists()
    sweep(env, project, root, "claude", "install", squeezes(disk, root))
    assert (Path(env["FM_HOME"]) / "state").is_dir()


@pytest.mark.parametrize("harness", ["claude", "codex", "pi"])
def test_an_install_on_a_full_disk_is_whole_or_changes_nothing(
        disk: Path | None, tmp_path: Path, harness: str) -> None:
    root = disk if disk is not None else tmp_path / "plain"
    root.mkdir(exist_ok=True)
    env, project = rig(root, harness, tmp_path)
    constraints = squeezes(disk, root)
    sweep(env, project, root, harness, "install", constraints)
    sweep(env, project, root, harness, "uninstall", constraints)
    for rel, text in USER_FILES[harness].items():  # the user's own, as they meant them
        after = (project / rel).read_text()
        assert (json.loads(after) == json.loads(text)) if rel.endswith(".json") else \
            after == text, rel
