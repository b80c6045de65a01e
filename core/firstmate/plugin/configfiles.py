"""Merge Firstmate's entries into a harness's own config files, and take exactly them out again.

The rules every installer follows through these helpers:

- A file we cannot parse is never overwritten: :class:`ConfigFileError` names the file and the fix.
- Our entries are recognised by their content (a hook command running ``fm hook <harness> …``,
  or a text block between ``<!-- firstmate:begin -->`` / ``<!-- firstmate:end -->`` lines), never
  by position, so the user may reorder or edit around them.
- A file whose content does not change is not rewritten (install twice = the same bytes, the
  user's formatting intact). A changed file is replaced atomically, keeping its mode; inside a
  :func:`firstmate.plugin.filestage.transaction` (every install and uninstall) all the files
  change together or none does.
- What an install changes is kept in the home, never beside the file in the project
  (:mod:`firstmate.plugin.installkeep`): whether the file existed, its original bytes, the
  directories made for it, and, in a git project, the ``info/exclude`` line that keeps fm's
  file out of git. A file whose entries name this machine's paths (*personal*) is never merged
  into a file git tracks.
- Uninstall puts a file fm left untouched back byte for byte (or removes it, and the directories
  made for it, when fm created it); otherwise (the user changed it, also between two installs)
  it removes only our entries, and a file left holding nothing but the empty skeleton is
  deleted unless the user had a file there first.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shlex
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from firstmate.base.errors import FirstmateError
from firstmate.base.exitcodes import ExitCode
from firstmate.plugin import filestage, installkeep
from firstmate.plugin.harness import FileChange, InstallOptions, InstallResult
from firstmate.plugin.textblocks import (
    BLOCK_NAME,
    ShapeError,
    block_markers,
    remove_block,
    upsert_block,
)

#: Where older fm versions kept an original beside the file (now kept in the home; an install
#: moves such a file there).
BACKUP_SUFFIX = installkeep.LEGACY_BACKUP_SUFFIX

JsonDoc = dict[str, Any]
Handler = Mapping[str, Any]


class ConfigFileError(FirstmateError):
    """A harness config file cannot be read, parsed or merged safely; nothing was written.

    :attr:`aside` names the file when moving it aside (or fixing it by hand) is the fix: one fm
    cannot read, so fm never writes it (``fm doctor`` proposes the move)."""

    exit_code = ExitCode.FAILED

    def __init__(self, message: str, *, exit_code: int | None = None,
                 aside: Path | None = None) -> None:
        super().__init__(message, exit_code=exit_code)
        self.aside = aside


# --- which entries are ours ------------------------------------------------------------------


def hook_command(options: InstallOptions, event: str, *, project: Path | None = None) -> str:
    """The shell command a harness runs for *event*: ``fm hook <harness> <event> [--home DIR]
    [--project DIR]`` (*project*: a user-level hook that answers only for that project)."""
    words = [*shlex.split(options.fm_command), "hook", options.harness, event]
    if options.home is not None:
        words += ["--home", str(options.home)]
    if project is not None:
        words += ["--project", str(project)]
    return " ".join(shlex.quote(word) for word in words)


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")


_EVENT = re.compile(r"[a-z][a-z0-9-]{0,63}")
_OPERATOR = re.compile(r"[();<>|&]+")


def _hook_words(command: object, harness: str) -> list[str] | None:
    """The options after ``fm hook <harness> <event>`` when *command* is exactly an entry fm
    writes (see :func:`is_ours`), else None."""
    if not isinstance(command, str) or "hook" not in command:
        return None
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return None
    if any(_OPERATOR.fullmatch(word) for word in words):
        return None
    while words and (_ASSIGNMENT.fullmatch(words[0]) or words[0] in ("exec", "env", "command")):
        words = words[1:]
    if words and os.path.basename(words[0]) == "fm":
        words = words[1:]
    elif words and os.path.basename(words[0]).startswith("python"):
        words = words[2:] if words[1:2] == ["-P"] else words[1:]
        if words[:2] != ["-m", "firstmate"]:
            return None
        words = words[2:]
    else:
        return None
    if words[:2] != ["hook", harness] or len(words) < 3 or not _EVENT.fullmatch(words[2]):
        return None
    extra = words[3:]
    if len(extra) % 2 or len(extra) > 4:
        return None
    names = extra[0::2]
    if not set(names) <= {"--home", "--project"} or len(set(names)) != len(names):
        return None
    return extra


def is_ours(command: object, harness: str, project: Path | None = None) -> bool:
    """Whether the shell command *command* is exactly an entry fm writes: ``fm hook <harness>
    <event> [--home DIR] [--project DIR]`` (``fm`` by any path, or ``python [-P] -m
    firstmate``), possibly after ``VAR=value`` assignments or ``exec``. A compound command
    (``fm hook claude stop; notify-send done``) or one with words of the user's is the user's:
    never replaced or removed. With *project*, only an entry for that project (a user-level
    hook's ``--project``) is ours; without, only one that names no project."""
    extra = _hook_words(command, harness)
    if extra is None:
        return False
    named = dict(zip(extra[0::2], extra[1::2], strict=True)).get("--project")
    return named == (None if project is None else str(project))


def command_words(command: str) -> tuple[dict[str, str], list[str]]:
    """A hook command line as the harness's shell runs it, without a shell: the leading
    ``VAR=value`` assignments (and an ``exec``) apart, then the argv. Raises ValueError when it
    is not a command line (unbalanced quotes)."""
    words = shlex.split(command)
    assigned: dict[str, str] = {}
    while words and (_ASSIGNMENT.fullmatch(words[0]) or words[0] == "exec"):
        word = words.pop(0)
        if word != "exec":
            name, _, value = word.partition("=")
            assigned[name] = value
    return assigned, words


def command_owner(harness: str, project: Path | None = None) -> Callable[[Any], bool]:
    """A predicate for handler objects whose ``command`` is ours for *harness* (and, with
    *project*, for that project: see :func:`is_ours`)."""
    return lambda handler: isinstance(handler, Mapping) and \
        is_ours(handler.get("command"), harness, project)


# --- JSON documents --------------------------------------------------------------------------


def parse_json(data: bytes, path: Path) -> JsonDoc:
    """Decode a config file's bytes; a JSON object or :class:`ConfigFileError`."""
    fix = "fix it or move it aside, then rerun"
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{path} is not UTF-8 text (byte {exc.start}); {fix}", aside=path) from exc
    if not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigFileError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f"Firstmate never overwrites a file it cannot parse: {fix}", aside=path
        ) from exc
    except RecursionError as exc:
        raise ConfigFileError(f"{path} is nested too deeply to parse; {fix}", aside=path) from exc
    if not isinstance(doc, dict):
        raise ConfigFileError(f"{path} holds a JSON {type(doc).__name__}, not an object; {fix}",
                              aside=path)
    return doc


def render_json(doc: Mapping[str, Any], indent: str = "  ") -> bytes:
    return (json.dumps(doc, indent=indent, ensure_ascii=False) + "\n").encode()


def _indent_of(data: bytes | None) -> str:
    # Keep the user's indentation when we rewrite their file.
    if data:
        found = re.match(rb"\s*\{\s*?\n([ \t]+)\S", data)
        if found:
            return found.group(1).decode()
    return "  "


def _object(parent: JsonDoc, key: str, what: str) -> JsonDoc:
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise ShapeError(f"{what} is a JSON {type(value).__name__}, expected an object")
    return value


def _list(parent: JsonDoc, key: str, what: str) -> list[Any]:
    value = parent.setdefault(key, [])
    if not isinstance(value, list):
        raise ShapeError(f"{what} is a JSON {type(value).__name__}, expected a list")
    return value


def _upsert(items: list[Any], wanted: Any, owned: Callable[[Any], bool]) -> bool:
    """Replace the first owned item with *wanted* and drop other owned items; True if found."""
    hits = [i for i, item in enumerate(items) if owned(item)]
    if not hits:
        return False
    items[hits[0]] = copy.deepcopy(wanted)
    for i in reversed(hits[1:]):
        del items[i]
    return True


def upsert_grouped_hook(doc: JsonDoc, event: str, handler: Handler, owned: Callable[[Any], bool],
                        matcher: str | None = None) -> JsonDoc:
    """Claude/Codex/Grok shape ``{"hooks": {Event: [{"matcher"?, "hooks": [handler…]}]}}``:
    make *handler* our only handler for *event*, in place if we already had one."""
    groups = _list(_object(doc, "hooks", '"hooks"'), event, f'"hooks"."{event}"')
    found = False
    emptied: list[int] = []
    for index, group in enumerate(groups):
        if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
            continue
        handlers: list[Any] = group["hooks"]
        if found:
            if any(owned(h) for h in handlers):
                handlers[:] = [h for h in handlers if not owned(h)]
                if not handlers:
                    emptied.append(index)  # it held nothing but duplicates of ours
        elif _upsert(handlers, handler, owned):
            found = True
            if all(owned(h) for h in handlers):
                # A group holding only our handler is ours too: keep its matcher as asked.
                group.pop("matcher", None)
                if matcher is not None:
                    group["matcher"] = matcher
    for index in reversed(emptied):
        del groups[index]
    if not found:
        group_new: JsonDoc = {"matcher": matcher} if matcher is not None else {}
        group_new["hooks"] = [copy.deepcopy(handler)]
        groups.append(group_new)
    return doc


def remove_grouped_hooks(doc: JsonDoc, owned: Callable[[Any], bool]) -> JsonDoc:
    """Take every owned handler out of a grouped ``hooks`` object; drop the groups, event lists
    and ``hooks`` object that this empties (never ones the user left empty)."""
    hooks = doc.get("hooks")
    if not isinstance(hooks, dict):
        return doc
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        emptied = False
        kept = []
        for group in groups:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            if isinstance(handlers, list) and any(owned(h) for h in handlers):
                handlers[:] = [h for h in handlers if not owned(h)]
                if not handlers:
                    emptied = True
                    continue
            kept.append(group)
        if emptied:
            groups[:] = kept
            if not groups:
                del hooks[event]
                if not hooks:
                    del doc["hooks"]
    return doc


def upsert_flat_hook(doc: JsonDoc, event: str, handler: Handler,
                     owned: Callable[[Any], bool]) -> JsonDoc:
    """Cursor shape ``{"hooks": {event: [handler…]}}``: make *handler* our only one for *event*."""
    handlers = _list(_object(doc, "hooks", '"hooks"'), event, f'"hooks"."{event}"')
    if not _upsert(handlers, handler, owned):
        handlers.append(copy.deepcopy(handler))
    return doc


def remove_flat_hooks(doc: JsonDoc, owned: Callable[[Any], bool]) -> JsonDoc:
    """Take every owned handler out of a flat ``hooks`` object; drop the event lists and
    ``hooks`` object that this empties."""
    hooks = doc.get("hooks")
    if not isinstance(hooks, dict):
        return doc
    for event in list(hooks):
        handlers = hooks[event]
        if isinstance(handlers, list) and any(owned(h) for h in handlers):
            handlers[:] = [h for h in handlers if not owned(h)]
            if not handlers:
                del hooks[event]
                if not hooks:
                    del doc["hooks"]
    return doc


def vacant(doc: Any, skeleton: Mapping[str, Any]) -> bool:
    """Whether *doc* holds nothing beyond empty containers and the *skeleton*'s own values."""
    if isinstance(doc, dict):
        return all(
            (key in skeleton and value == skeleton[key]) or vacant(value, {})
            for key, value in doc.items()
        )
    if isinstance(doc, list):
        return all(vacant(item, {}) for item in doc)
    return False


# --- reading and writing files ---------------------------------------------------------------


#: The largest config file fm reads (harness settings are kilobytes; a device or a runaway
#: file must not eat memory).
READ_LIMIT = 8 * 1024 * 1024


def read_config(path: Path) -> bytes | None:
    """A config file's bytes, None when absent. Only a regular file is read, and at most
    :data:`READ_LIMIT` bytes: a FIFO, a device, a socket or a directory there is refused
    with one line instead of hanging fm or filling memory. Inside a transaction, a file it
    already changed reads as changed."""
    staged, data = filestage.pending(path)
    if staged:
        return data
    try:
        # Non-blocking: opening a FIFO must not wait for a writer (it is refused below).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except IsADirectoryError as exc:
        raise ConfigFileError(f"{path} is a directory, expected a file; move it aside and rerun",
                              aside=path) from exc
    except OSError as exc:
        raise ConfigFileError(f"cannot read {path}: {exc.strerror}; check its permissions") from exc
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ConfigFileError(f"{path} is a directory, expected a file; move it aside and "
                                  "rerun", aside=path)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigFileError(f"{path} is not a regular file (a FIFO, device or socket); "
                                  "move it aside and rerun", aside=path)
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > READ_LIMIT:
                raise ConfigFileError(f"{path} is larger than {READ_LIMIT // (1024 * 1024)} MiB, "
                                      "too large for a config file; move it aside and rerun",
                                      aside=path)
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigFileError(f"cannot read {path}: {exc.strerror}; check its permissions") from exc
    finally:
        os.close(fd)



def _target(path: Path) -> Path:
    """Where a config change lands. A symlinked config (a dotfiles repo) is edited where it
    points, so the link survives; a link to nothing is refused (fm would otherwise create
    directories wherever it points)."""
    if not path.is_symlink():
        return path
    target = Path(os.path.realpath(path))
    if not os.path.lexists(target):
        raise ConfigFileError(f"{path} is a symlink to {target}, which does not exist; create "
                              "the target or remove the link, then rerun")
    return target


def backup_path(path: Path) -> Path:
    """Where an older fm kept *path*'s original (``<file>.fm-backup``)."""
    return path.with_name(path.name + BACKUP_SUFFIX)


def _refuse_read_only(path: Path, mode: int) -> None:
    if not mode & stat.S_IWUSR:
        raise ConfigFileError(f"{path} is read-only (mode {mode:04o}), so fm leaves it alone; "
                              f"make it writable (chmod u+w {path}) and rerun, or edit it by "
                              "hand")


def _keep(path: Path, old: bytes | None, personal: bool) -> Path | None:
    """Tell the install's keeper (if any) that *path* changes now; where its original is kept."""
    keeper = installkeep.current()
    if keeper is None:
        return None
    try:
        return keeper.changing(path, old, personal=personal)
    except installkeep.TrackedPersonalFile:
        raise ConfigFileError(
            f"{path} is tracked by git, and Firstmate's entries in it would name this "
            "machine's paths for everyone who clones the project; untrack it (git rm --cached "
            f"{path}) or keep your own copy elsewhere, then rerun") from None


def commit(path: Path, old: bytes | None, new: bytes | None, *, user_content: bool,
           dry_run: bool, prune_upto: Path | None = None, personal: bool = False,
           prune_dirs: Sequence[str] | None = None) -> FileChange:
    """Bring *path* from *old* to *new* (None = absent) and say what happened.

    *user_content*: the old file holds something that is not ours. *personal*: the new bytes
    name this machine's paths (never written into a file git tracks). After removing the file,
    *prune_dirs* (the directories the install made for it) are removed while empty, else the
    directories that held it up to (not including) *prune_upto*.
    """
    del user_content  # (the original is kept whatever it holds: installkeep)
    keeper = installkeep.current()
    if new == old:
        if keeper is not None and old is not None:
            keeper.adopt_legacy(path, old)  # an older fm's backup beside it moves to the home
        return FileChange(path, "unchanged")
    if new is None:
        if not dry_run:
            try:
                filestage.remove(path, prune_upto=None if prune_dirs is not None else prune_upto,
                                 prune_dirs=prune_dirs or ())
            except OSError as exc:
                raise ConfigFileError(f"cannot remove {path}: {exc.strerror}; remove it by hand; "
                                      "nothing was changed") from exc
        if keeper is not None:
            keeper.forget(path)
        return FileChange(path, "removed")
    action = "created" if old is None else "merged"
    if dry_run:
        with contextlib.suppress(OSError):
            if old is not None and not filestage.mode(path) & stat.S_IWUSR:
                raise ConfigFileError(f"{path} is read-only, so fm would leave it alone; make it "
                                      f"writable (chmod u+w {path}) and rerun")
        return FileChange(path, action, _keep(path, old, personal))
    try:
        mode = None
        if old is not None:
            mode = filestage.mode(path)
            _refuse_read_only(path, mode)
        backup = _keep(path, old, personal)
        filestage.write(path, new, mode=mode)
        if keeper is not None:
            keeper.wrote(path, new)
    except OSError as exc:
        raise ConfigFileError(
            f"cannot write {path}: {exc.strerror}; free space on its filesystem or check that "
            "its directory is writable, then rerun (nothing was changed)"
        ) from exc
    return FileChange(path, action, backup)


def _restore(path: Path, original: bytes, dry_run: bool) -> FileChange:
    """Put *path* back to the bytes fm found there (its mode kept)."""
    if not dry_run:
        try:
            mode = filestage.mode(path)
            _refuse_read_only(path, mode)
            filestage.write(path, original, mode=mode)
        except OSError as exc:
            raise ConfigFileError(f"cannot write {path}: {exc.strerror}; free space on its "
                                  "filesystem or check that its directory is writable, then "
                                  "rerun (nothing was changed)") from exc
    keeper = installkeep.current()
    if keeper is not None:
        keeper.forget(path)
    return FileChange(path, "restored")


def _take_out(path: Path, old: bytes, rendered: Callable[[], bytes], *, same: bool,
              vacant_after: bool, dry_run: bool, prune_upto: Path | None,
              same_meaning: Callable[[bytes], bool]) -> FileChange:
    """An uninstall's change of *path* (which holds *old*): put back what fm found when the
    file is as fm left it; else take only our entries out (*rendered*), deleting a file fm
    created that now holds nothing (*vacant_after*)."""
    keeper = installkeep.current()
    if same:  # nothing of ours in it
        if keeper is not None and not keeper.shared(path):
            keeper.settled(path)
        return FileChange(path, "unchanged")
    # A user-level file may hold other projects' entries too: it is put back only once it means
    # what it did before fm (below), never just because it is as fm last wrote it.
    shared = keeper is not None and keeper.shared(path)
    kept = keeper.untouched(path, old) if keeper is not None and not shared else None
    if kept is not None and keeper is not None:
        original = keeper.original(path) if kept.existed else None
        if not kept.existed:
            return commit(path, old, None, user_content=False, dry_run=dry_run,
                          prune_dirs=kept.dirs)
        if original is not None:
            return _restore(path, original, dry_run)
    record = keeper.load(path) if keeper is not None else None
    if record is not None and keeper is not None:
        original = keeper.original(path) if record.existed else None
        if original is not None and same_meaning(original):
            return _restore(path, original, dry_run)
        if vacant_after and not record.existed:
            return commit(path, old, None, user_content=False, dry_run=dry_run,
                          prune_dirs=record.dirs)
        change = commit(path, old, rendered(), user_content=True, dry_run=dry_run)
        if keeper is not None and not keeper.shared(path):
            keeper.settled(path)  # (a user-level file may still hold other projects' entries)
        return change
    legacy = backup_path(path)
    if filestage.exists(legacy):
        # An older fm kept the original beside the file: put it back when it means the same.
        original = read_config(legacy)
        if original is not None and same_meaning(original):
            change = _restore(path, original, dry_run)
            if not dry_run:
                filestage.remove(legacy)
            return change
        return commit(path, old, rendered(), user_content=True, dry_run=dry_run)
    if vacant_after:
        return commit(path, old, None, user_content=False, dry_run=dry_run,
                      prune_upto=prune_upto)
    return commit(path, old, rendered(), user_content=True, dry_run=dry_run)


def update_json(path: Path, transform: Callable[[JsonDoc], JsonDoc], *,
                remove_ours: Callable[[JsonDoc], JsonDoc], skeleton: Mapping[str, Any] | None = None,
                dry_run: bool = False, delete_if_vacant: bool = False,
                prune_upto: Path | None = None, personal: bool = False) -> FileChange:
    """Apply *transform* to the JSON object in *path* (or to a copy of *skeleton* when absent).

    *remove_ours* strips our entries from a document: it tells the user's content apart from
    ours. With *delete_if_vacant* (uninstall), the file is put back as fm found it when fm left
    it untouched (:mod:`firstmate.plugin.installkeep`); otherwise our entries are taken out, and
    a result holding nothing but the skeleton deletes a file fm created, then the directories
    made for it (or, for an install no record covers, those up to *prune_upto*) while empty.
    *personal*: our entries name this machine's paths.
    """
    path = _target(path)
    skeleton = dict(skeleton or {})
    old = read_config(path)
    doc = parse_json(old, path) if old is not None else copy.deepcopy(skeleton)
    try:
        user_content = old is not None and not vacant(remove_ours(copy.deepcopy(doc)), skeleton)
        result = transform(copy.deepcopy(doc))
    except ShapeError as exc:
        raise ConfigFileError(f"cannot merge into {path}: {exc}; fix it or move it aside, then "
                              "rerun", aside=path) from exc
    if old is None and (delete_if_vacant or vacant(result, skeleton)):
        return FileChange(path, "unchanged")
    if delete_if_vacant and old is not None:
        def same_meaning(original: bytes) -> bool:
            try:
                return parse_json(original, path) == result
            except ConfigFileError:
                return False

        return _take_out(path, old, lambda: render_json(result, _indent_of(old)),
                         same=result == doc, vacant_after=vacant(result, skeleton),
                         dry_run=dry_run, prune_upto=prune_upto, same_meaning=same_meaning)
    new = old if old is not None and result == doc else render_json(result, _indent_of(old))
    return commit(path, old, new, user_content=user_content, dry_run=dry_run,
                  prune_upto=prune_upto, personal=personal)


def update_text(path: Path, transform: Callable[[str], str], *, remove_ours: Callable[[str], str],
                dry_run: bool = False, delete_if_vacant: bool = False,
                prune_upto: Path | None = None, personal: bool = False) -> FileChange:
    """The text-file twin of :func:`update_json` (Markdown, rules files, shims)."""
    path = _target(path)
    old = read_config(path)
    try:
        text = old.decode("utf-8") if old is not None else ""
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{path} is not UTF-8 text (byte {exc.start}); fix it or move it "
                              "aside", aside=path) from exc
    try:
        user_content = bool(remove_ours(text).strip())
        result = transform(text)
    except ShapeError as exc:
        raise ConfigFileError(f"cannot update {path}: {exc}") from exc
    if old is None and not result.strip():
        return FileChange(path, "unchanged")
    if delete_if_vacant and old is not None:
        return _take_out(path, old, result.encode, same=result == text,
                         vacant_after=not result.strip(), dry_run=dry_run, prune_upto=prune_upto,
                         same_meaning=lambda original: original == result.encode())
    return commit(path, old, result.encode(), user_content=user_content, dry_run=dry_run,
                  prune_upto=prune_upto, personal=personal)


def require_project(options: InstallOptions) -> Path:
    """The project directory, which must already exist (we never create a project)."""
    project = options.project
    if not project.is_dir():
        what = "is not a directory" if project.exists() else "does not exist"
        raise ConfigFileError(
            f"project directory {project} {what}; pass --project with an existing directory",
            exit_code=ExitCode.USAGE,
        )
    return project


def install_result(harness: str, changes: Sequence[FileChange], notes: Sequence[str] = (),
                   dry_run: bool = False) -> InstallResult:
    """An :class:`InstallResult` listing the files that exist or changed (an absent file that
    stayed absent is not worth a line)."""
    shown = tuple(c for c in changes if c.action != "unchanged" or c.path.exists())
    return InstallResult(harness, shown, tuple(notes), dry_run)


__all__ = [
    "BACKUP_SUFFIX", "BLOCK_NAME", "READ_LIMIT", "ConfigFileError", "JsonDoc", "ShapeError",
    "backup_path", "block_markers", "command_owner", "command_words", "commit", "hook_command",
    "install_result", "is_ours", "parse_json", "read_config", "remove_block",
    "remove_flat_hooks", "remove_grouped_hooks", "render_json", "require_project",
    "update_json", "update_text", "upsert_block", "upsert_flat_hook", "upsert_grouped_hook",
    "vacant",
]
