"""``fm doctor``'s look at each harness set up in the project: its installed config, the command
its hooks run, and its program.

Each install is checked with the options it was made with (an authenticated install record,
:mod:`firstmate.plugin.installrecord`) and gets one verdict: current, not current, or installed
but unable to run (its environment was deleted or moved). A record that is not this home's (the
home was moved or copied, or the record edited) is never run or proposed; the fix is then an
install with this installation's defaults, which fm's entries are updated by in place. A config
file fm cannot read is named with the command that moves it aside, since fm never writes one.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from firstmate.app.doctorfinding import Action, fm_action, one_line

if TYPE_CHECKING:
    from firstmate.app.doctor import Doctor
    from firstmate.plugin.installrecord import InstallRecord, Loaded

CHECK = "harness-config"


def check_configs(doc: Doctor) -> None:
    """Each harness the project has config for, checked with the options it was installed
    with; the others are listed in one line."""
    if not doc.harnesses:
        return
    if not doc.project.is_dir():
        doc.add(CHECK, "warn", f"project directory {doc.project} does not exist",
                "cd into the project directory and run fm doctor again")
        return
    from firstmate.plugin import manager as plugins

    unset: list[str] = []
    for name in doc.harnesses:
        try:
            host = plugins.load_harness(name, doc.env)
            if _check_harness(doc, host, name):
                doc.setup.append(host.harness(name))
            else:
                unset.append(name)
        except Exception as exc:
            doc.add(CHECK, "fail", f"{name}: the check failed: {one_line(exc)}")
    if unset:
        doc.add(CHECK, "ok", f"not set up in this project: {', '.join(unset)} "
                "(fm install <harness> sets one up)")


def _install_action(doc: Doctor, record: InstallRecord) -> Action:
    return fm_action(shlex.split(record.command())[1:], doc.project, doc.env)


def _check_harness(doc: Doctor, host: Any, name: str) -> bool:
    """Report *name*'s install in the project; whether it is set up there."""
    from firstmate.plugin import installrecord
    from firstmate.plugin.configfiles import ConfigFileError
    from firstmate.plugin.harness import InstallOptions

    # Only entries fm install wrote for this home are used: one from anywhere else (a moved or
    # cloned home's) is named, and nothing in it is run or proposed.
    loaded = installrecord.load(doc.home, name, doc.env)
    records = loaded.for_project(doc.project)
    if records:
        checked: dict[str, tuple[str, str] | None] = {}
        for record in records:
            _check_record(doc, host, name, record, checked)
        if loaded.complaint():
            doc.add(CHECK, "warn", f"{name}: {loaded.complaint()}",
                    records[0].command(), _install_action(doc, records[0]))
        return True
    try:
        probe = host.uninstall(doc.home, InstallOptions(name, doc.project, dry_run=True))
    except ConfigFileError as exc:
        _unreadable(doc, name, exc, None)
        return True
    if probe is None or not probe.changed:
        if loaded.complaint():
            _ignored_elsewhere(doc, name, loaded)
        return False
    _unrecorded(doc, host, name, loaded)
    return True


def _ignored_elsewhere(doc: Doctor, name: str, loaded: Loaded) -> None:
    """Unusable entries in the record file, none of them for an install in this project."""
    if loaded.records:
        newest = max(loaded.records.values(), key=lambda r: r.at)
        doc.add(CHECK, "warn", f"{name}: {loaded.complaint()}", newest.command(),
                fm_action(shlex.split(newest.command())[1:], doc.project, doc.env))
        return
    file = loaded.file

    def remove() -> str:
        os.unlink(file)
        return f"removed {file}"

    # Nothing in it verifies, so nothing in it is of use: the file itself is the fix.
    doc.add(CHECK, "warn", f"{name}: {loaded.complaint()}", loaded.fix(name), remove)


def _unrecorded(doc: Doctor, host: Any, name: str, loaded: Loaded) -> None:
    """*name* is installed in the project, but no authenticated record says how: say why, and
    the install that records it (this installation's defaults, or a moved project's options)."""
    moved = _moved_from(loaded, doc.project)
    if moved is not None:
        record = attrs.evolve(moved, project=doc.project)
        doc.add(CHECK, "warn",
                f"{name}: installed in {doc.project}, but recorded for {moved.project}, which "
                "no longer exists (the project was moved here), so the install cannot be "
                "checked", record.command(), _install_action(doc, record))
        return
    if loaded.rejected or loaded.problem:
        why = (f"the install records in {loaded.file} are not this home's (the home was moved "
               "or copied here, or they were edited), so nothing in them is used and the "
               "install cannot be checked")
    else:
        why = ("fm has no record of how (an older fm installed it, or it was written by "
               "hand), so the install cannot be checked")
    words = ["install", name, "--project", str(doc.project), *_matching_flags(doc, host, name)]
    doc.add(CHECK, "warn", f"{name}: installed in {doc.project}, but {why}",
            shlex.join(["fm", *words]), fm_action(words, doc.project, doc.env))


def _moved_from(loaded: Loaded, project: Path) -> InstallRecord | None:
    """An authenticated record of an install into a project directory that no longer exists:
    the project that was moved to *project* (the newest, when several)."""
    gone = [r for r in loaded.records.values() if r.project != project and not r.project.exists()]
    return max(gone, key=lambda r: r.at) if gone else None


def _matching_flags(doc: Doctor, host: Any, name: str) -> list[str]:
    """The harness switches an install made with finds nothing to change (``--local``, …): a
    fix that keeps them. One dry run per switch, the defaults first."""
    from firstmate.plugin.fmcommand import own_command
    from firstmate.plugin.harness import InstallOptions

    info = host.harness(name)
    switches = [flag.name for flag in (info.install_flags if info is not None else ())
                if not flag.metavar]
    command = own_command()  # (what the proposed install writes)
    for flags in ([], *([flag] for flag in switches)):
        options = InstallOptions(name, doc.project, dry_run=True, fm_command=command,
                                 flags={flag: "true" for flag in flags})
        try:
            result = host.install(doc.home, options)
        except Exception:
            return []
        if result is not None and not result.stale:
            return [f"--{flag}" for flag in flags]
    return []


def _unreadable(doc: Doctor, name: str, exc: Exception, record: InstallRecord | None) -> None:
    """A config file the install cannot read: fm never writes one, so the fix is to repair it
    by hand or move it aside (then the install that puts fm's entries back)."""
    aside = getattr(exc, "aside", None)
    fix = ""
    if aside is not None:
        fix = f"mv -- {shlex.quote(str(aside))} {shlex.quote(str(aside) + '.broken')}"
        if record is not None:
            fix += f" && {record.command()}"
    doc.add(CHECK, "fail", f"{name}: {one_line(exc)}", fix)


def _check_record(doc: Doctor, host: Any, name: str, record: InstallRecord,
                  checked: dict[str, tuple[str, str] | None]) -> None:
    """One install's verdict, in one line, then what its plugin knows beyond a dry run."""
    from firstmate.plugin.configfiles import ConfigFileError

    try:
        result = host.install(doc.home, record.options(dry_run=True))
    except ConfigFileError as exc:
        _unreadable(doc, name, exc, record)
        return
    if result is None:
        doc.add(CHECK, "warn", f"{name}: the plugin does not implement fm install",
                f"fm plugin remove {name} && fm plugin add {name}")
        return
    problems = list(host.install_problems(doc.home, record.options()))
    explained = {path for problem in problems for path in problem.paths}
    stale = [change for change in result.stale if change.path not in explained]
    if record.fm_command not in checked:
        checked[record.fm_command] = _command_problem(record, doc.env)
    broken = checked[record.fm_command]
    where = f" in {doc.project}"
    files = ", ".join(_shown(doc, change.path) for change in stale)
    if broken is not None and broken[0] == "fail":
        # The install this installation makes writes its own entry point: --fm-command (the
        # user's, now gone) is what broke, so it is not repeated.
        again = attrs.evolve(record, fm_command_given=False)
        doc.add(CHECK, "fail", f"{name}: installed{where}, but its hooks cannot run: "
                f"{broken[1]}" + (f"; also not current: {files}" if files else ""),
                again.command(), _install_action(doc, again))
    elif stale:
        doc.add(CHECK, "warn", f"{name}: not current{where} ({files})", record.command(),
                _install_action(doc, record))
    elif broken is not None:
        again = attrs.evolve(record, fm_command_given=False)
        doc.add(CHECK, "warn", f"{name}: installed and current, but {broken[1]}",
                again.command(), _install_action(doc, again))
    elif len(stale) < len(result.stale):
        pass  # the plugin's problem line below is this install's verdict
    elif result.changes:
        doc.add(CHECK, "ok", f"{name}: installed and current")
    else:
        doc.add(CHECK, "ok", f"{name}: no project config files to install")
    seen: set[str] = set()
    for problem in problems:
        if problem.detail in seen:  # two records may see one problem from both ends
            continue
        seen.add(problem.detail)
        action = _install_action(doc, record) if problem.fix == record.command() else None
        doc.add(CHECK, problem.status, f"{name}: {problem.detail}", problem.fix, action)


def _command_problem(record: InstallRecord,
                     env: Mapping[str, str]) -> tuple[str, str] | None:
    """What is wrong with the command the hooks run (from an authenticated record only):
    ``("fail", why)`` when it cannot run, ``("warn", why)`` when it runs only from a PATH;
    it is run with ``--version`` as the argv the harness's shell runs, never through a shell."""
    import subprocess

    from firstmate.plugin.configfiles import command_words

    try:
        assigned, words = command_words(record.fm_command)
    except ValueError as exc:
        return "fail", f"the hook command is not a command line ({exc}): {record.fm_command}"
    if not words:
        return None
    program = words[0]
    if os.path.isabs(program) and not os.path.lexists(program):
        return "fail", (f"{program} does not exist (the environment the hooks were installed "
                        "from was deleted or moved)")
    try:
        done = subprocess.run([*words, "--version"], capture_output=True, text=True,
                              timeout=30, check=False, env={**env, **assigned},
                              stdin=subprocess.DEVNULL)
    except OSError as exc:
        return "fail", f"{record.fm_command} cannot start ({exc.strerror or exc})"
    except (ValueError, subprocess.SubprocessError) as exc:
        return "fail", f"{record.fm_command} could not be run ({exc})"
    if done.returncode != 0 or not done.stdout.startswith("fm "):
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return "fail", f"{record.fm_command} cannot start ({one_line(said, 160)})"
    if not os.path.isabs(program):
        return "warn", (f"the hooks run {program!r} from the harness's PATH; a harness started "
                        "from a desktop launcher or another environment may not find it")
    return None


def _shown(doc: Doctor, path: Path) -> str:
    try:
        return str(path.relative_to(doc.project))
    except ValueError:
        return str(path)


# --- the harnesses' programs ----------------------------------------------------------------


def check_programs(doc: Doctor) -> None:
    """Whether each harness set up here (and each one crews were spawned with) has its program
    on PATH. Looked up only, never run: a harness's program is the user's, not fm's."""
    from firstmate.plugin import manager as plugins

    infos = {info.name: info for info in doc.setup if info is not None}
    for name in _crew_harnesses(doc) - set(infos):
        try:
            info = plugins.load_harness(name, doc.env).harness(name)
        except Exception:  # (a crew's harness with no plugin here: fm crew list says so)
            continue
        if info is not None:
            infos[name] = info
    path = doc.env.get("PATH", os.defpath)
    for name, info in sorted(infos.items()):
        if not info.process_names:
            continue
        found = next((where for program in info.process_names
                      if (where := shutil.which(program, path=path))), None)
        if found is not None:
            doc.add("harness", "ok", f"{name}: {found}")
        else:
            names = " or ".join(info.process_names)
            doc.add("harness", "warn",
                    f"{name}: no program named {names} is on PATH, so {info.display_name} cannot "
                    f"start here (nor fm crew spawn --harness {name})",
                    f"install {info.display_name}, or add the directory that holds "
                    f"{info.process_names[0]} to PATH")


def _crew_harnesses(doc: Doctor) -> set[str]:
    from firstmate.store import crew as crewmod

    if not doc.home.state.is_dir():
        return set()
    found = set()
    for member in crewmod.list(doc.home):
        harness = crewmod.harness(doc.home, member.name)
        if harness:
            found.add(harness)
    return found


__all__ = ["check_configs", "check_programs"]
