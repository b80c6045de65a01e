"""``fm crew spawn``: start a harness as a crew in a new tmux window, registered and briefed.

The harness's plugin says how its program starts (``firstmate_crew_launch``); this module does the
rest, in an order that never leaves a crew reporting into nothing:

1. the crew's directory (``--worktree BRANCH`` makes a git worktree at ``<home>/worktrees/NAME``);
2. the plugin's answer, and its crew-mode files written into the crew's private launch
   directory (``state/crew-launch/NAME/``), never into the project;
3. a new window running a small launcher that waits on a FIFO there;
4. the crew registered with the new pane and its harness recorded;
5. the crew's environment (the spawner's, without its tmux, terminal and harness-session
   variables, plus ``FM_CREW``, ``FM_HOME`` and the plugin's) handed through the FIFO, so it
   never rests on disk; the launcher then becomes the harness (``exec``).

A failure after the window opened ends the window and undoes the registration.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from firstmate.base.errors import ConflictError, FirstmateError, UsageError
from firstmate.base.exitcodes import ExitCode
from firstmate.plugin.crewlaunch import PROMPT_TYPE, CrewLaunch, CrewLaunchRequest
from firstmate.store import crew as crewmod
from firstmate.store.home import Home, atomic_write, make_private_dir, refuse_symlink
from firstmate.watch.backends.tmux import TmuxBackend

#: The tmux session crews' windows open in when neither ``--session`` nor this is given.
SESSION_ENV = "FM_CREW_SESSION"
DEFAULT_SESSION = "firstmate"
#: Seconds the launcher waits for its environment, and the spawner for the launcher.
LAUNCH_TIMEOUT = 60
HANDOFF_TIMEOUT = 30.0
#: Seconds a typed first prompt waits for the harness to show it takes input.
READY_TIMEOUT_ENV = "FM_CREW_READY_TIMEOUT"
READY_TIMEOUT = 60.0
GIT_TIMEOUT = 120.0
#: What the crew never inherits from the spawner: the pane and the terminal belong to the
#: spawner (tmux sets the crew's own, which the launcher keeps).
SPAWNER_ONLY = ("TMUX", "TMUX_PANE", "TERM")

#: The pane's program: read the environment from the FIFO (bounded by an alarm), then become
#: the harness. Standard library only, run isolated (``-I``): it must start whatever the
#: spawner's ``PYTHONPATH`` holds.
LAUNCHER = """\
import json, os, signal, sys
fifo, limit = sys.argv[1], int(sys.argv[2])
signal.alarm(limit)
with open(fifo, "rb") as fh:
    spec = json.loads(fh.read() or b"null")
signal.alarm(0)
if not isinstance(spec, dict):
    sys.exit("fm: the crew launch was cancelled")
env = spec["env"]
for name in ("TMUX", "TMUX_PANE", "TERM"):
    if name in os.environ:
        env[name] = os.environ[name]
os.chdir(spec["cwd"])
try:
    os.execvpe(spec["argv"][0], spec["argv"], env)
except OSError as exc:
    sys.exit("fm: cannot start %s: %s" % (spec["argv"][0], exc.strerror))
"""


@attrs.frozen
class SpawnRequest:
    """What ``fm crew spawn`` was asked for."""

    name: str
    harness: str
    task: str = ""
    #: The crew's directory (default: the current one); with :attr:`worktree`, the repository.
    cwd: Path | None = None
    #: A branch: make a git worktree for it at ``<home>/worktrees/NAME`` and work there.
    worktree: str | None = None
    window_name: str | None = None
    session: str | None = None
    #: ``fm`` as argv words for the crew's hooks and brief (default: this installation's own).
    fm_argv: tuple[str, ...] = ()
    harness_args: tuple[str, ...] = ()


@attrs.frozen
class Spawned:
    name: str
    harness: str
    pane: str
    cwd: Path
    session: str
    window: str
    launch_dir: Path
    worktree: bool = False
    notes: tuple[str, ...] = ()


def launch_root(home: Home) -> Path:
    return home.state / "crew-launch"


def launch_dir(home: Home, name: str) -> Path:
    return launch_root(home) / name


def worktree_path(home: Home, name: str, repo: Path | None = None) -> Path:
    """``<home>/worktrees/NAME`` in the project's own home; a home shared by several projects
    (``~/.firstmate``) keeps each project's crews apart: ``<home>/worktrees/<project>-<id>/NAME``."""
    from firstmate.base.gitroot import project_root

    main = None if repo is None else project_root(str(repo))
    if main is None or Path(main) == home.root.parent:
        return home.root / "worktrees" / name
    from firstmate.base.fasthash import sha256_hex

    key = sha256_hex(main.encode("utf-8", "surrogateescape"))[:8]
    return home.root / "worktrees" / f"{os.path.basename(main)}-{key}" / name


# --- the crew's directory ------------------------------------------------------------------------


def _directory(given: Path | None) -> Path:
    path = Path(os.path.abspath(given if given is not None else os.getcwd()))
    if not path.is_dir():
        raise UsageError(f"crew directory {path} does not exist or is not a directory; pass "
                         "--cwd an existing directory")
    return path


def _git(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=GIT_TIMEOUT, check=False)
    except FileNotFoundError as exc:
        raise UsageError("git is not installed; --worktree needs it (or pass --cwd a "
                         "directory)") from exc
    except subprocess.TimeoutExpired as exc:
        raise FirstmateError(f"git {args[0]} took longer than {GIT_TIMEOUT:g}s in {cwd}; "
                             "check the repository and retry") from exc


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


@attrs.frozen
class Worktree:
    """The git worktree a ``--worktree`` crew works in, and what making it made."""

    path: Path
    #: The repository's top level (where git is asked to undo it).
    root: Path
    branch: str
    #: The branch was created for it (from HEAD).
    made_branch: bool = False
    #: It was there already: a worktree of that repository on that branch, left by an earlier
    #: spawn of this crew that did not finish (or by a stopped crew of that name).
    adopted: bool = False


def _resolved(text: str, base: Path) -> Path:
    return (base / text.strip()).resolve()


def _adoptable(target: Path, root: Path, branch: str) -> bool:
    """Whether *target* is a worktree of the repository at *root*, checked out on *branch*."""
    if os.path.islink(target) or not target.is_dir():
        return False
    top = _git(["rev-parse", "--show-toplevel"], target)
    mine = _git(["rev-parse", "--git-common-dir"], target)
    theirs = _git(["rev-parse", "--git-common-dir"], root)
    head = _git(["branch", "--show-current"], target)
    return (all(done.returncode == 0 for done in (top, mine, theirs, head))
            and _resolved(top.stdout, target) == target.resolve()
            and _resolved(mine.stdout, target) == _resolved(theirs.stdout, root)
            and head.stdout.strip() == branch)


def make_worktree(home: Home, repo: Path, branch: str, name: str) -> Worktree:
    """A git worktree of the repository around *repo* for *branch* (made from HEAD when the
    branch does not exist) under the home (:func:`worktree_path`); one already there for that
    repository and branch is taken over (:attr:`Worktree.adopted`)."""
    top = _git(["rev-parse", "--show-toplevel"], repo)
    if top.returncode != 0 or not top.stdout.strip():
        raise UsageError(f"{repo} is not inside a git repository; --worktree needs one (run fm "
                         "crew spawn there, or pass --cwd a checkout)")
    root = Path(top.stdout.strip())
    if _git(["check-ref-format", "--branch", branch], root).returncode != 0:
        raise UsageError(f"invalid branch name {branch!r} for --worktree")
    target = worktree_path(home, name, root)
    if os.path.lexists(target):
        if _adoptable(target, root, branch):
            return Worktree(target, root, branch, adopted=True)
        raise UsageError(f"{target} already exists; start the crew there with --cwd {target}, "
                         "or remove it (git worktree remove) first")
    target.parent.mkdir(parents=True, exist_ok=True)
    known = _git(["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], root)
    args = ["worktree", "add", str(target), branch] if known.returncode == 0 else \
        ["worktree", "add", "-b", branch, str(target)]
    done = _git(args, root)
    if done.returncode != 0:
        raise FirstmateError(f"git worktree add for branch {branch!r} failed: "
                             f"{_last_line(done.stderr)}; fix that and retry")
    return Worktree(target, root, branch, made_branch=known.returncode != 0)


def undo_worktree(tree: Worktree) -> None:
    """Remove what :func:`make_worktree` made for a spawn that failed: the worktree, and the
    branch when it was made for it (nothing was committed on it: the crew never started). An
    adopted worktree stays. Best effort: what cannot be removed is adopted by the retry."""
    if tree.adopted:
        return
    with contextlib.suppress(FirstmateError):
        if _git(["worktree", "remove", "--force", str(tree.path)], tree.root).returncode == 0 \
                and tree.made_branch:
            _git(["branch", "-D", tree.branch], tree.root)


# --- the plugin's answer -----------------------------------------------------------------------


def _fresh_launch_dir(home: Home, name: str) -> Path:
    make_private_dir(home.state)
    make_private_dir(launch_root(home))
    path = launch_dir(home, name)
    refuse_symlink(path)
    if path.exists():
        shutil.rmtree(path)  # an earlier crew's files of that name (rmtree never follows links)
    make_private_dir(path)
    return path


def remove_launch_dir(home: Home, name: str) -> None:
    path = launch_dir(home, name)
    refuse_symlink(path)
    shutil.rmtree(path, ignore_errors=True)


def _write_files(request: CrewLaunchRequest, launch: CrewLaunch) -> None:
    for item in launch.files:
        target = request.file(item.path)
        parent = target.parent
        missing = []
        while parent != request.launch_dir and not parent.exists():
            missing.append(parent)
            parent = parent.parent
        for directory in reversed(missing):
            make_private_dir(directory)
        atomic_write(target, item.text.encode("utf-8"))


def _program(argv: tuple[str, ...], env: Mapping[str, str], harness: str) -> list[str]:
    program = argv[0]
    if "/" not in program:
        found = shutil.which(program, path=env.get("PATH", os.defpath))
        if found is None:
            raise UsageError(f"{program} (the {harness} program) is not on PATH; install it, or "
                             "put it on PATH, and retry")
        program = found
    elif not os.access(program, os.X_OK):
        raise UsageError(f"{program} (the {harness} program) is not an executable file")
    return [program, *argv[1:]]


def crew_environment(env: Mapping[str, str], launch: CrewLaunch, name: str, home: Home,
                     cwd: Path) -> dict[str, str]:
    """The spawner's environment as the crew gets it (see the module docstring)."""
    dropped = set(SPAWNER_ONLY) | set(launch.unset_env)
    out = {key: value for key, value in env.items() if key not in dropped}
    # PWD names the crew's directory: some harnesses take their project from it.
    out.update(FM_CREW=name, FM_HOME=str(home.root), PWD=str(cwd))
    out.update(launch.env)
    return out


# --- the window and the handoff ----------------------------------------------------------------


def _hand_over(fifo: Path, payload: bytes, timeout: float) -> bool:
    """Write *payload* into *fifo* once the launcher opens it; False when it never does."""
    done = threading.Event()

    def write() -> None:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_CLOEXEC)
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            done.set()
        except OSError:
            pass

    thread = threading.Thread(target=write, name="crew-handoff", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        # Nobody opened the other end: open it ourselves so the blocked writer returns.
        try:
            fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            fd = -1
        thread.join(5.0)
        if fd >= 0:
            os.close(fd)
        return False
    return done.is_set()


def _type_prompt(backend: TmuxBackend, member: crewmod.Crew, launch: CrewLaunch, text: str,
                 env: Mapping[str, str]) -> str | None:
    """Type the first prompt once the pane shows :attr:`CrewLaunch.ready`, into the crew's own
    pane only (:func:`firstmate.watch.backends.panes.judge`); a note when not."""
    from firstmate.base.envnum import env_float
    from firstmate.watch.backends.panes import judge
    from firstmate.watch.backends.tmux import LIVE

    pane = member.pane

    pattern = re.compile(launch.ready or r"\S", re.MULTILINE)
    deadline = time.monotonic() + env_float(env, READY_TIMEOUT_ENV, READY_TIMEOUT)
    while True:
        screen = backend.capture(pane)
        if screen is not None and pattern.search(screen):
            break
        if time.monotonic() > deadline:
            return (f"the harness did not show it was ready within the {READY_TIMEOUT_ENV} "
                    "bound; the brief was not typed: send it with fm crew steer")
        time.sleep(0.2)
    verdict = judge(member, backend.resolve(pane))
    if verdict.state != LIVE:
        return (f"crew {member.name}'s pane {pane} {verdict.why}; the brief was not typed: "
                "check the crew with fm crew list")
    flat = " ".join(text.split())
    if not backend.send(pane, flat):
        return f"typing the brief into pane {pane} failed: {backend.last_error}"
    return None


@attrs.frozen
class _Window:
    """A crew window whose launcher waits on the FIFO, and what it is to be handed."""

    harness: str
    request: CrewLaunchRequest
    launch: CrewLaunch
    argv: list[str]
    session: str
    window: str
    pane: str
    fifo: Path
    #: The pid of the pane's program (the launcher, which becomes the harness).
    pid: int


#: What tmux changes in a session name (3.3a): ``:`` and ``.`` become ``_``, ``$`` and ``\`` are
#: escaped with a backslash (as is a control character).
SESSION_CHANGED = frozenset(":.$\\")


def session_name(name: str) -> str:
    """*name* as a tmux session name tmux keeps as it is (:data:`SESSION_CHANGED`, a control
    character and a blank name are refused)."""
    if not name.strip() or any(ch in SESSION_CHANGED or not ch.isprintable() for ch in name):
        raise UsageError(f"invalid tmux session name {name!r}: use printable characters other "
                         "than : . $ \\ (pass --session or FM_CREW_SESSION another name)")
    return name


def window_name(name: str) -> str:
    """*name* as a tmux window name: printable characters only (a line break would split the
    window's line in tmux's listings)."""
    if not name.strip() or not name.isprintable():
        raise UsageError(f"invalid tmux window name {name!r}: use printable characters (pass "
                         "--window-name another name)")
    return name


def _open_window(home: Home, request: SpawnRequest, env: Mapping[str, str], cwd: Path,
                 fm_argv: tuple[str, ...], directory: Path, backend: TmuxBackend,
                 place: tuple[str, str]) -> _Window:
    """Ask the plugin, write its files and open the window whose launcher waits on the FIFO."""
    from firstmate.app.crewbrief import brief
    from firstmate.plugin.manager import load_harness

    name = request.name
    host = load_harness(request.harness, env)
    launch_request = CrewLaunchRequest(
        crew=name, cwd=cwd, home=home.root, brief=brief(name, request.task, fm_argv),
        fm_argv=fm_argv, launch_dir=directory, extra_args=tuple(request.harness_args))
    launch = host.crew_launch(request.harness, launch_request)
    if launch is None:
        raise FirstmateError(f"no installed plugin says how to start {request.harness} as a "
                             "crew; update its plugin", exit_code=ExitCode.PLUGIN)
    argv = _program(launch.argv, env, request.harness)
    _write_files(launch_request, launch)
    session, window = place
    atomic_write(directory / "launch.json", (json.dumps({
        "crew": name, "harness": request.harness, "argv": argv, "cwd": str(cwd),
        "session": session, "window": window, "prompt": launch.prompt,
        "started_at": round(time.time(), 3)}, indent=1) + "\n").encode())
    fifo = directory / "env.fifo"
    os.mkfifo(fifo, 0o600)
    made = backend.new_window(session, window, str(cwd), [
        sys.executable, "-I", "-c", LAUNCHER, str(fifo), str(LAUNCH_TIMEOUT)])
    if made is None:
        raise FirstmateError(f"cannot open a tmux window for crew {name!r}: {backend.last_error}; "
                             "check that tmux runs (FM_TMUX, FM_TMUX_SOCKET)")
    # (the names reached tmux as they are)
    return _Window(request.harness, launch_request, launch, argv, session, window, made.pane,
                   fifo, made.pid)


def _start(home: Home, opened: _Window, env: Mapping[str, str], backend: TmuxBackend) -> None:
    """Register the crew with its pane, then let its launcher become the harness; on any
    failure the window ends and the registration is undone."""
    from firstmate.watch.backends.panes import start_ticks

    name, pane = opened.request.crew, opened.pane
    registered = False
    try:
        # Bound to the new pane's id and its program (the launcher, which execs the harness).
        crewmod.add(home, name, pane, pid=opened.pid, started=start_ticks(opened.pid))
        registered = True
        crewmod.set_harness(home, name, opened.harness)
        environment = crew_environment(env, opened.launch, name, home, opened.request.cwd)
        payload = json.dumps({"argv": opened.argv, "cwd": str(opened.request.cwd),
                              "env": environment}).encode()
        if not _hand_over(opened.fifo, payload, HANDOFF_TIMEOUT):
            raise FirstmateError(f"the crew's window (pane {pane}) did not take its launch within "
                                 f"{HANDOFF_TIMEOUT:g}s; check the tmux server and retry")
    except BaseException:
        backend.kill_pane(pane)
        if registered:
            crewmod.remove(home, name)
        raise
    with contextlib.suppress(OSError):
        os.unlink(opened.fifo)


def spawn(home: Home, request: SpawnRequest, env: Mapping[str, str], *,
          backend: TmuxBackend | None = None) -> Spawned:
    """Start, register and brief the crew *request* describes (see the module docstring)."""
    from firstmate.plugin.fmcommand import own_argv

    name = crewmod.validate_name(request.name)
    if crewmod.exists(home, name):
        current = crewmod.get(home, name)
        raise ConflictError(f"crew {name!r} is already registered (pane {current.pane}); stop it "
                            f"with fm crew stop {name}, or pick another name")
    cwd = _directory(request.cwd)
    place = (session_name(request.session or env.get(SESSION_ENV, "").strip() or DEFAULT_SESSION),
             window_name(request.window_name or name))
    tree = make_worktree(home, cwd, request.worktree, name) if request.worktree else None
    try:
        if tree is not None:
            cwd = tree.path
        fm_argv = tuple(request.fm_argv) or tuple(own_argv())
        backend = backend or TmuxBackend.from_env(env)
        directory = _fresh_launch_dir(home, name)
        try:
            opened = _open_window(home, request, env, cwd, fm_argv, directory, backend, place)
            _start(home, opened, env, backend)
        except BaseException:
            remove_launch_dir(home, name)
            raise
    except BaseException:
        if tree is not None:
            undo_worktree(tree)
        raise
    notes = list(opened.launch.notes)
    if tree is not None and tree.adopted:
        notes.append(f"the worktree at {tree.path} was already there on branch {tree.branch} "
                     "(an earlier spawn of this crew); the crew works in it as it is")
    if opened.launch.prompt == PROMPT_TYPE:
        note = _type_prompt(backend, crewmod.get(home, name), opened.launch,
                            opened.request.brief, env)
        if note:
            notes.append(note)
    return Spawned(name, request.harness, opened.pane, cwd, opened.session, opened.window,
                   directory, bool(request.worktree), tuple(notes))


__all__ = ["DEFAULT_SESSION", "LAUNCHER", "SESSION_ENV", "SpawnRequest", "Spawned",
           "Worktree", "crew_environment", "launch_dir", "make_worktree", "remove_launch_dir",
           "spawn", "undo_worktree", "worktree_path"]
