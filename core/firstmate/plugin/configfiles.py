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
- The first time we change a file that holds anything of the user's, the original is kept as
  ``<file>.fm-backup`` (never overwritten afterwards).
- Uninstall removes only our entries; a file left holding nothing but the empty skeleton we
  would have created is deleted, unless a backup says the user had a file there first.
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
from firstmate.plugin import filestage
from firstmate.plugin.harness import FileChange, InstallOptions, InstallResult

BACKUP_SUFFIX = ".fm-backup"
#: Default name in text-block markers: ``<!-- firstmate:begin -->`` … ``<!-- firstmate:end -->``.
BLOCK_NAME = "firstmate"

JsonDoc = dict[str, Any]
Handler = Mapping[str, Any]


class ConfigFileError(FirstmateError):
    """A harness config file cannot be read, parsed or merged safely; nothing was written."""

    exit_code = ExitCode.FAILED


class ShapeError(ValueError):
    """A config document does not have the shape a merge expects (reported with its path)."""


# --- which entries are ours ------------------------------------------------------------------


def hook_command(options: InstallOptions, event: str) -> str:
    """The shell command a harness runs for *event*: ``fm hook <harness> <event> [--home DIR]``."""
    words = [*shlex.split(options.fm_command), "hook", options.harness, event]
    if options.home is not None:
        words += ["--home", str(options.home)]
    return " ".join(shlex.quote(word) for word in words)


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")


_EVENT = re.compile(r"[a-z][a-z0-9-]{0,63}")
_OPERATOR = re.compile(r"[();<>|&]+")


def is_ours(command: object, harness: str) -> bool:
    """Whether the shell command *command* is exactly an entry fm writes: ``fm hook <harness>
    <event> [--home DIR]`` (``fm`` by any path, or ``python [-P] -m firstmate``), possibly after
    ``VAR=value`` assignments or ``exec``. A compound command (``fm hook claude stop;
    notify-send done``) or one with words of the user's is the user's: never replaced or
    removed."""
    if not isinstance(command, str) or "hook" not in command:
        return False
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return False
    if any(_OPERATOR.fullmatch(word) for word in words):
        return False
    while words and (_ASSIGNMENT.fullmatch(words[0]) or words[0] in ("exec", "env", "command")):
        words = words[1:]
    if words and os.path.basename(words[0]) == "fm":
        words = words[1:]
    elif words and os.path.basename(words[0]).startswith("python"):
        words = words[2:] if words[1:2] == ["-P"] else words[1:]
        if words[:2] != ["-m", "firstmate"]:
            return False
        words = words[2:]
    else:
        return False
    if words[:2] != ["hook", harness] or len(words) < 3 or not _EVENT.fullmatch(words[2]):
        return False
    extra = words[3:]
    return not extra or (len(extra) == 2 and extra[0] == "--home")


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


def command_owner(harness: str) -> Callable[[Any], bool]:
    """A predicate for handler objects whose ``command`` is ours for *harness*."""
    return lambda handler: isinstance(handler, Mapping) and is_ours(handler.get("command"), harness)


# --- JSON documents --------------------------------------------------------------------------


def parse_json(data: bytes, path: Path) -> JsonDoc:
    """Decode a config file's bytes; a JSON object or :class:`ConfigFileError`."""
    fix = "fix it or move it aside, then rerun"
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{path} is not UTF-8 text (byte {exc.start}); {fix}") from exc
    if not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigFileError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f"Firstmate never overwrites a file it cannot parse: {fix}"
        ) from exc
    except RecursionError as exc:
        raise ConfigFileError(f"{path} is nested too deeply to parse; {fix}") from exc
    if not isinstance(doc, dict):
        raise ConfigFileError(f"{path} holds a JSON {type(doc).__name__}, not an object; {fix}")
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


# --- text blocks -----------------------------------------------------------------------------


def block_markers(name: str = BLOCK_NAME) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def _find_block(text: str, name: str) -> tuple[int, int] | None:
    """Character span of the marked block, end line included; None when absent."""
    begin, end = block_markers(name)
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == begin]
    ends = [i for i, line in enumerate(lines) if line.strip() == end]
    if not starts and not ends:
        return None
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ShapeError(
            f"the {begin} … {end} block is damaged ({len(starts)} begin and {len(ends)} end "
            "markers); delete the stray marker lines"
        )
    offset = [0]
    for line in lines:
        offset.append(offset[-1] + len(line))
    return offset[starts[0]], offset[ends[0] + 1]


def upsert_block(text: str, body: str, name: str = BLOCK_NAME) -> str:
    """*text* with our marked block holding *body*: replaced in place, or appended after a blank
    line. Idempotent."""
    begin, end = block_markers(name)
    block = f"{begin}\n{body.strip(chr(10))}\n{end}\n"
    span = _find_block(text, name)
    if span is not None:
        return text[:span[0]] + block + text[span[1]:]
    if not text.strip():
        return block
    return text.rstrip("\n") + "\n\n" + block


def remove_block(text: str, name: str = BLOCK_NAME) -> str:
    """*text* without our marked block (and the blank line that separated it)."""
    span = _find_block(text, name)
    if span is None:
        return text
    before, after = text[:span[0]], text[span[1]:]
    if before.endswith("\n\n") and (not after or after.startswith("\n")):
        before = before[:-1]  # the blank line that separated our block
    elif not before and after.startswith("\n"):
        after = after[1:]
    return before + after


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
        raise ConfigFileError(f"{path} is a directory, expected a file; move it aside and rerun") from exc
    except OSError as exc:
        raise ConfigFileError(f"cannot read {path}: {exc.strerror}; check its permissions") from exc
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ConfigFileError(f"{path} is a directory, expected a file; move it aside and rerun")
        if not stat.S_ISREG(st.st_mode):
            raise ConfigFileError(f"{path} is not a regular file (a FIFO, device or socket); "
                                  "move it aside and rerun")
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
                                      "too large for a config file; move it aside and rerun")
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
    return path.with_name(path.name + BACKUP_SUFFIX)


def _keep_backup(path: Path, data: bytes, mode: int) -> Path | None:
    """Copy the original to ``<file>.fm-backup`` unless one exists; the backup's path or None."""
    backup = backup_path(path)
    return backup if filestage.write(backup, data, mode=mode, exclusive=True) else None


def commit(path: Path, old: bytes | None, new: bytes | None, *, user_content: bool,
           dry_run: bool, prune_upto: Path | None = None) -> FileChange:
    """Bring *path* from *old* to *new* (None = absent) and say what happened.

    *user_content*: the old file holds something that is not ours, so it gets a backup before
    the first change. *prune_upto*: after removing the file, remove the directories that held
    it while they are empty, up to (not including) this one.
    """
    if new == old:
        return FileChange(path, "unchanged")
    if new is None:
        if not dry_run:
            try:
                filestage.remove(path, prune_upto=prune_upto)
            except OSError as exc:
                raise ConfigFileError(f"cannot remove {path}: {exc.strerror}; remove it by hand; "
                                      "nothing was changed") from exc
        return FileChange(path, "removed")
    action = "created" if old is None else "merged"
    if dry_run:
        with contextlib.suppress(OSError):
            if old is not None and not os.stat(path).st_mode & stat.S_IWUSR:
                raise ConfigFileError(f"{path} is read-only, so fm would leave it alone; make it "
                                      f"writable (chmod u+w {path}) and rerun")
        backup = backup_path(path) if old is not None and user_content else None
        if backup is not None and filestage.exists(backup):
            backup = None
        return FileChange(path, action, backup)
    try:
        mode = None
        backup = None
        if old is not None:
            mode = os.stat(path).st_mode & 0o7777
            if not mode & stat.S_IWUSR:
                raise ConfigFileError(f"{path} is read-only (mode {mode:04o}), so fm leaves it "
                                      f"alone; make it writable (chmod u+w {path}) and rerun, or "
                                      "edit it by hand")
            if user_content:
                backup = _keep_backup(path, old, mode)
        filestage.write(path, new, mode=mode)
    except OSError as exc:
        raise ConfigFileError(
            f"cannot write {path}: {exc.strerror}; free space on its filesystem or check that "
            "its directory is writable, then rerun (nothing was changed)"
        ) from exc
    return FileChange(path, action, backup)


def update_json(path: Path, transform: Callable[[JsonDoc], JsonDoc], *,
                remove_ours: Callable[[JsonDoc], JsonDoc], skeleton: Mapping[str, Any] | None = None,
                dry_run: bool = False, delete_if_vacant: bool = False,
                prune_upto: Path | None = None) -> FileChange:
    """Apply *transform* to the JSON object in *path* (or to a copy of *skeleton* when absent).

    *remove_ours* strips our entries from a document: it tells the user's content apart from
    ours (for the backup rule and for deleting a file that would hold nothing of the user's).
    With *delete_if_vacant* (uninstall), a result holding nothing but the skeleton deletes the
    file, unless a backup shows the user had a file there first; then the directories that held
    it are removed while empty, up to *prune_upto*.
    """
    path = _target(path)
    skeleton = dict(skeleton or {})
    old = read_config(path)
    doc = parse_json(old, path) if old is not None else copy.deepcopy(skeleton)
    try:
        user_content = old is not None and not vacant(remove_ours(copy.deepcopy(doc)), skeleton)
        result = transform(copy.deepcopy(doc))
    except ShapeError as exc:
        raise ConfigFileError(f"cannot merge into {path}: {exc}; fix it or move it aside, then rerun") from exc
    if old is None and (delete_if_vacant or vacant(result, skeleton)):
        return FileChange(path, "unchanged")
    new: bytes | None
    if old is not None and result == doc:
        new = old  # same meaning: leave the user's bytes exactly as they are
    elif delete_if_vacant and vacant(result, skeleton) and not filestage.exists(backup_path(path)):
        new = None
    else:
        new = render_json(result, _indent_of(old))
    return commit(path, old, new, user_content=user_content, dry_run=dry_run,
                  prune_upto=prune_upto)


def update_text(path: Path, transform: Callable[[str], str], *, remove_ours: Callable[[str], str],
                dry_run: bool = False, delete_if_vacant: bool = False,
                prune_upto: Path | None = None) -> FileChange:
    """The text-file twin of :func:`update_json` (Markdown, rules files)."""
    path = _target(path)
    old = read_config(path)
    try:
        text = old.decode("utf-8") if old is not None else ""
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{path} is not UTF-8 text (byte {exc.start}); fix it or move it aside") from exc
    try:
        user_content = bool(remove_ours(text).strip())
        result = transform(text)
    except ShapeError as exc:
        raise ConfigFileError(f"cannot update {path}: {exc}") from exc
    if old is None and not result.strip():
        return FileChange(path, "unchanged")
    new: bytes | None = result.encode()
    if delete_if_vacant and not result.strip() and not filestage.exists(backup_path(path)):
        new = None
    return commit(path, old, new, user_content=user_content, dry_run=dry_run,
                  prune_upto=prune_upto)


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
