"""Values that describe a harness plugin and cross the hook boundary."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs

#: How a harness gets re-armed after every close (SPEC §9).
REARM_OWNERS = ("hook", "extension", "checkpoint", "model-task", "host")


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return read_only(mapping)  # (defined below; resolved when a value is built)


@attrs.frozen
class SessionAnchor:
    """Environment a harness gives the commands it runs that vouches for its session: the
    variable naming the harness's own pid, and the one carrying its session id. The session
    lock trusts the id only while that pid is this harness's process above the caller."""

    pid_env: str
    session_env: str


@attrs.frozen
class GuardProfile:
    """How the turn-end guard treats a harness (docs/guards.md): its plugin declares it."""

    #: ``block`` (exit 2 with the banner) or ``follow-up`` (one continuation message).
    style: str = attrs.field(default="block", validator=attrs.validators.in_(("block",
                                                                             "follow-up")))
    #: Payload fields saying a stop already follows a forced continuation, in order of
    #: precedence: the first boolean found decides; an integer counts continuations.
    loop_flags: tuple[str, ...] = ("stop_hook_active", "loop_count")
    #: The harness's turn-end hook keeps a claim ledger the guard cooperates with (the
    #: ``ClaimLedgerPark`` strategy, firstmate.continuity.claimledger): the guard ignores the
    #: loop flags, charges a re-block budget and hands failures over once.
    claim_ledger: bool = False
    #: Re-blocks the cooperation table charges before it fails open once (ledger harnesses).
    block_budget: int = 3
    #: The environment variable overriding :attr:`block_budget` ("" = none).
    block_budget_env: str = ""
    #: Milliseconds an unhealthy verdict waits for positive proof (a healthy watcher, an open
    #: claim, a fresh wake) before it stands (ledger harnesses).
    sync_wait_ms: int = 800
    #: The environment variable overriding :attr:`sync_wait_ms` ("" = none).
    sync_wait_env: str = ""
    #: Seconds a claim's wake (or failure) counts as fresh (ledger harnesses), and the
    #: environment variable overriding it ("" = none).
    claim_fresh: float = 15.0
    claim_fresh_env: str = ""


#: What every harness's project-directory variable is called: ``<SOMETHING>_PROJECT_DIR``. A
#: command that does not know its harness (``fm guard``) loads the plugins for their names only
#: when such a variable is set at all.
PROJECT_ENV_SUFFIX = "_PROJECT_DIR"


def _project_env_names(instance: object, attribute: object, value: tuple[str, ...]) -> None:
    for name in value:
        if not name.endswith(PROJECT_ENV_SUFFIX):
            raise ValueError(f"project_env name {name!r} must end in {PROJECT_ENV_SUFFIX}")


#: The options ``fm install`` / ``fm uninstall`` take themselves: no harness flag may be named so.
CORE_INSTALL_OPTIONS = ("project", "home", "dry-run", "json", "fm-command", "help")


def _flag_name(instance: object, attribute: object, value: str) -> None:
    import re

    if not re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", value) or value in CORE_INSTALL_OPTIONS:
        raise ValueError(f"install flag name {value!r} must be lower-case words joined by '-' "
                         f"and none of {', '.join(CORE_INSTALL_OPTIONS)}")


@attrs.frozen
class InstallFlag:
    """A harness flag ``fm install <harness>`` (and ``fm uninstall``) accepts: the plugin lists
    each in :attr:`HarnessInfo.install_flags`; ``fm install`` refuses any other flag before the
    plugin runs."""

    #: Without the dashes: ``local`` for ``--local``.
    name: str = attrs.field(validator=_flag_name)
    #: One line for ``fm install <harness> --help``.
    help: str
    #: "" for a switch (``--local``: ``InstallOptions.flags["local"] == "true"``); otherwise the
    #: flag takes a value (``--npm-package=DIR`` or ``--npm-package DIR``) and this names it in
    #: the help (``DIR``).
    metavar: str = ""

    @property
    def usage(self) -> str:
        return f"--{self.name}" + (f"={self.metavar}" if self.metavar else "")


def _install_flags(instance: object, attribute: object, value: tuple[InstallFlag, ...]) -> None:
    names = [flag.name for flag in value]
    if len(set(names)) != len(names):
        raise ValueError(f"install flags declared twice: {names}")


@attrs.frozen
class HarnessInfo:
    """What a harness plugin declares about itself."""

    #: Entry-point name and the ``<harness>`` in ``fm hook <harness> <event>``.
    name: str
    display_name: str
    #: ``hook`` (woken through a command hook), ``in-process`` (a shim inside the harness talks to
    #: ``fm bridge``) or ``protocol`` (the model follows a documented protocol, backed by guards).
    family: str
    #: Who owns re-arm; one of :data:`REARM_OWNERS`.
    rearm_owner: str
    #: How a wake reaches the model, in the harness's own terms.
    wake_channel: str
    #: Config files (relative to the project directory) this plugin merges its entries into on
    #: install, keeping the user's own.
    config_files: tuple[str, ...] = ()
    #: Files (relative to the project directory) this plugin writes whole, first the one that
    #: proves it ours (an in-process shim): a foreign file there is refused, never overwritten.
    owned_files: tuple[str, ...] = ()
    #: Hook events this harness calls, in kebab case (``fm hook <harness> <event>``).
    hook_events: tuple[str, ...] = ()
    #: Program basenames that are this harness's process (``acme``, ``acme-agent``): how
    #: the session lock finds the harness above an ``fm`` process (firstmate.store.identity).
    process_names: tuple[str, ...] = ()
    #: Consecutive path components that mark a script as this harness's own code when an
    #: interpreter runs it (``("@acme", "agent")`` for ``node …/@acme/agent/cli.js``).
    package_markers: tuple[tuple[str, ...], ...] = ()
    #: ``python -m <module>`` modules that are this harness.
    python_modules: tuple[str, ...] = ()
    #: The hook event whose hook keeps the watcher armed: for ``rearm_owner="hook"`` it parks
    #: on the watcher and returns the wake; for a protocol harness it is the turn-end guard.
    rearm_event: str = ""
    #: For ``checkpoint`` and ``model-task`` owners: the ``fm`` arguments the model runs to
    #: re-arm and wait (its stdout carries the wake), as the harness's protocol tells it to.
    rearm_command: tuple[str, ...] = ()
    #: How the turn-end guard treats this harness.
    guard: GuardProfile = attrs.field(factory=GuardProfile)
    #: The session-vouching environment this harness sets for its hooks, if any.
    session_anchor: SessionAnchor | None = None
    #: A realistic hook payload and environment of this harness, for the contract kit and the
    #: fuzzers (firstmate.testing.sample_call): a string value ``{Event}`` becomes the event in
    #: PascalCase (``StopFailure``), ``{event}`` in camelCase (``stopFailure``).
    sample_payload: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen, hash=False)
    sample_env: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen, hash=False)
    #: Pre-existing user content of each config file, keyed like :attr:`config_files`, for the
    #: contract kit's keep-the-user's-entries checks (firstmate.testing.user_file_bytes): JSON
    #: values are written as JSON, strings as they are. A file not named gets a generic one.
    sample_user_files: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen,
                                                       hash=False)
    #: Environment variables this harness sets to the project directory it runs in, read
    #: after ``FM_PROJECT_DIR`` when a hook payload names no ``cwd`` (firstmate.store.scope).
    project_env: tuple[str, ...] = attrs.field(default=(), validator=_project_env_names)
    #: A headless one-turn command line of this harness (the prompt is appended as its last
    #: argument) the supervision host may run as its default engine (firstmate.host.supervision).
    host_engine: tuple[str, ...] = ()
    #: Regular-expression fragments this harness's TUI shows only while a turn runs; the tmux
    #: crew backend's default busy marker is the union over the installed plugins.
    busy_markers: tuple[str, ...] = ()
    #: Older names of core knobs this harness's users may have set: core knob → this
    #: harness's name for it, honoured after the core name (``FM_CHECKPOINT_SECONDS``).
    env_aliases: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen, hash=False)
    #: The harness flags ``fm install`` / ``fm uninstall`` accept for this harness (``--local``,
    #: ``--npm-package=DIR``); every other flag is refused with the list of these.
    install_flags: tuple[InstallFlag, ...] = attrs.field(default=(), validator=_install_flags)

    def __attrs_post_init__(self) -> None:
        if self.rearm_owner not in REARM_OWNERS:
            raise ValueError(f"unknown re-arm owner {self.rearm_owner!r} for {self.name}")
        if self.family not in ("hook", "in-process", "protocol"):
            raise ValueError(f"unknown harness family {self.family!r} for {self.name}")


#: How a bridge shim hands a wake to the model (docs/bridge.md, ``welcome.delivery``).
BRIDGE_DELIVERIES = ("followUp", "prompt", "promptAsync")


@attrs.frozen
class BridgeProfile:
    """How ``fm bridge <harness>`` runs for an in-process harness (docs/bridge.md)."""

    harness: str
    #: The harness call the shim delivers a wake with; one of :data:`BRIDGE_DELIVERIES`.
    delivery: str = attrs.field(validator=attrs.validators.in_(BRIDGE_DELIVERIES))
    #: Stop the arm at a non-terminal shutdown instead of keeping it across the handoff until
    #: the replacement session starts.
    retire_on_shutdown: bool = False
    #: While the harness is idle, read the queue on a tick and deliver one wake for owed rows.
    idle_queue_read: bool = False
    #: Milliseconds between those idle queue reads, and the environment variable overriding
    #: them ("" = none).
    idle_queue_tick_ms: int = 15000
    idle_queue_tick_env: str = ""
    #: Seconds a successor arm has to report readiness (``FM_WATCH_READINESS_TIMEOUT_MS`` wins).
    readiness_timeout: float = 12.0


@attrs.frozen
class PluginFailure:
    """A plugin that could not be loaded; the others load regardless."""

    name: str
    error: str


# --- install and hook entry -------------------------------------------------------------------


def read_only(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only copy: the converter that keeps a frozen value's mapping field frozen too."""
    return MappingProxyType(dict(mapping))


@attrs.frozen
class InstallOptions:
    """What ``fm install <harness>`` / ``fm uninstall <harness>`` was asked to do."""

    #: The harness whose plugin should answer; every other plugin returns None.
    harness: str
    #: The project directory the harness config files live under (must exist).
    project: Path
    #: The ``--home`` the user named, pinned into installed hook commands; None = let ``fm``
    #: resolve the home at run time (``FM_HOME``, the nearest ``.firstmate/``, ``~/.firstmate``).
    home: Path | None = None
    #: Compute and report the changes, write nothing.
    dry_run: bool = False
    #: The command written into hook commands. ``fm install`` passes this installation's own
    #: entry point by absolute path (firstmate.plugin.fmcommand) or the user's ``--fm-command``;
    #: the plain default ``fm`` relies on the harness's PATH.
    fm_command: str = "fm"
    #: Harness-specific flags, each one the harness declares in ``HarnessInfo.install_flags``:
    #: a switch ``--name`` → ``"true"``, ``--name=value`` / ``--name value`` → value.
    flags: Mapping[str, str] = attrs.field(factory=dict, converter=read_only, hash=False)

    def flag(self, name: str) -> bool:
        """Whether the boolean harness flag ``--name`` was given."""
        return self.flags.get(name, "false").lower() not in ("", "0", "false", "no")


#: What happened to one file (``FileChange.action``).
FILE_ACTIONS = ("created", "merged", "restored", "removed", "unchanged")


@attrs.frozen
class FileChange:
    """One config file an install or uninstall wrote, merged, removed or left alone."""

    path: Path
    action: str
    #: Where the user's original is kept (in the home: firstmate.plugin.installkeep), from the
    #: first time Firstmate changed the file; an uninstall puts it back.
    backup: Path | None = None

    def __attrs_post_init__(self) -> None:
        if self.action not in FILE_ACTIONS:
            raise ValueError(f"unknown file action {self.action!r} for {self.path}")


@attrs.frozen
class InstallResult:
    """The answer of ``firstmate_install`` / ``firstmate_uninstall``: every file touched, in order."""

    harness: str
    changes: tuple[FileChange, ...] = ()
    #: Lines for the user: what to do next, what is not done yet.
    notes: tuple[str, ...] = ()
    dry_run: bool = False
    #: Whether the install registers ``fm mcp`` where the harness reads MCP servers
    #: (firstmate.plugin.mcpinstall): the wake text then names its tools.
    mcp: bool = False

    def paths(self, action: str) -> tuple[Path, ...]:
        return tuple(change.path for change in self.changes if change.action == action)

    @property
    def written(self) -> tuple[Path, ...]:
        """Files created from nothing."""
        return self.paths("created")

    @property
    def merged(self) -> tuple[Path, ...]:
        """Existing files changed with the user's own content kept."""
        return self.paths("merged")

    @property
    def removed(self) -> tuple[Path, ...]:
        return self.paths("removed")

    @property
    def changed(self) -> bool:
        return any(change.action != "unchanged" for change in self.changes)

    @property
    def stale(self) -> tuple[FileChange, ...]:
        """The changes that are not ``unchanged``: of a dry run, the files not yet current."""
        return tuple(change for change in self.changes if change.action != "unchanged")


@attrs.frozen
class InstallProblem:
    """Something wrong with a harness's install that a dry run cannot see (``fm doctor``): the
    hooks registered twice, installed both as a harness plugin and in its settings, …"""

    detail: str
    #: The exact command that fixes it.
    fix: str
    status: str = attrs.field(default="warn", validator=attrs.validators.in_(("warn", "fail")))
    #: The config files this problem accounts for: a dry run that finds them not current is
    #: this problem, said once (not a second, generic "not current" line).
    paths: tuple[Path, ...] = attrs.field(default=(), converter=tuple)


@attrs.frozen
class HookOutcome:
    """What ``fm hook <harness> <event>`` writes and how it exits, in the harness's own terms."""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""

    @classmethod
    def silent(cls) -> HookOutcome:
        """Nothing to do: exit 0 and print nothing (every harness reads this as "carry on")."""
        return cls()
