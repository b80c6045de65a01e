"""A crew backend for a fleet host's panes: the local backend's tmux calls, run on the host
through its one persistent SSH connection (:mod:`firstmate.fleet.sshhosts`).

:class:`SshTmuxBackend` is a :class:`~firstmate.watch.backends.tmux.TmuxBackend` whose every
call (listing, capture, send, resolve, kill) becomes one ``ssh`` through the host's control
master: the same tmux arguments, each made literal for tmux as locally
(:func:`~firstmate.watch.backends.tmux.literal`) and then quoted for the host's shell, so a name
or a text reaches tmux there exactly as it is.

**Pane identity.** A crew is bound to its pane's id and its program's pid and start time, all on
the host. The call runs in a small fixed ``sh`` script (:data:`SCRIPT`, its words passed as
arguments, never spliced in) that, after tmux answered, reads ``/proc/PID/stat`` on the host for
the pids tmux named — every pane's in a listing, the last line's in a pane's description — and
prints their start times after a marker no pane text can guess (a fresh random one per call).
:meth:`SshTmuxBackend.start_of` answers from them, so a pane is judged by the host's own clock.

**Reaching the host.** ssh's own failure (exit 255: no connection, authentication refused, a host
key that does not match) and a host without tmux make a call that *could not be asked*
(:attr:`~firstmate.watch.backends.tmux.TmuxBackend.last_exit` None, :attr:`unreachable` says
why), never a pane that is gone.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from firstmate.fleet import sshhosts
from firstmate.fleet.sshhosts import SshHost
from firstmate.store.home import Home
from firstmate.watch.backends.tmux import (
    LISTING_FORMAT,
    NO_SERVER,
    Listing,
    PaneListing,
    TmuxBackend,
    literal,
    parse_listing,
    run_held,
)

if TYPE_CHECKING:
    from firstmate.watch.backends.panebatch import CaptureBatch

__all__ = ["SCRIPT", "HostListing", "SshListing", "SshTmuxBackend", "parse_starts", "split"]

#: Runs tmux (``$3…``), then prints the marker ``$1`` and ``PID START`` for the pids tmux named:
#: field 2 of every line (``$2`` = ``list``), or the field before the last of the last line
#: (``last``). tmux's output is kept whole, trailing line breaks included (the ``x``).
SCRIPT = r"""n=$1 m=$2; shift 2
out=$("$@" </dev/null && echo x) || exit $?
out=${out%x}
printf '%s%s\n' "$out" "$n"
t=$(printf '\t')
case $m in
list) printf '%s\n' "$out" | while IFS= read -r l; do r=${l#*"$t"}; printf '%s\n' "${r%%"$t"*}"; done ;;
last) l=$(printf '%s' "$out" | tail -n 1); r=${l%"$t"*}; printf '%s\n' "${r##*"$t"}" ;;
esac | while IFS= read -r p; do
  case $p in ''|*[!0-9]*) continue ;; esac
  { read -r s < "/proc/$p/stat"; } 2>/dev/null || continue
  printf '%s %s\n' "$p" "${s##*) }"
done
exit 0"""
#: What a shell says when the program it was asked for is missing or cannot run.
_NO_PROGRAM = (126, 127)


def parse_starts(text: str) -> dict[int, int]:
    """``PID <stat fields after the name>`` lines as {pid: start time in clock ticks}."""
    found: dict[int, int] = {}
    for line in text.splitlines():
        pid, _, rest = line.partition(" ")
        fields = rest.split()
        if pid.isascii() and pid.isdigit() and len(fields) > 19 and fields[19].isascii() \
                and fields[19].isdigit():
            found[int(pid)] = int(fields[19])
    return found


def split(out: str, marker: str) -> tuple[str, dict[int, int]] | None:
    """What tmux printed, and the start times after *marker*; None when the marker is missing
    (the script did not finish)."""
    at = out.rfind(marker)
    if at < 0:
        return None
    return out[:at], parse_starts(out[at + len(marker):])


class HostListing(PaneListing):
    """A host's :class:`PaneListing`, with its panes' programs' start times (:attr:`starts`,
    by pid) read on the host in the same call."""

    def __init__(self) -> None:
        super().__init__()
        self.starts: dict[int, int] = {}


def host_listing(text: str, starts: dict[int, int]) -> HostListing:
    found = HostListing()
    parsed = parse_listing(text)
    found.update(parsed)
    found.facts, found.ids, found.starts = parsed.facts, parsed.ids, starts
    return found


@attrs.define(eq=False)
class SshListing(Listing):
    """A host's ``list-panes`` under way, over ssh (see :class:`Listing`)."""

    marker: str = attrs.field(default="", kw_only=True)
    #: Why the host could not be asked (ssh failed, no tmux there), or "".
    unreachable: str = attrs.field(default="", init=False)

    def result(self) -> PaneListing | None:
        if not self.over:
            return None
        code = self.code
        if code == 0:
            parts = split(self.output.decode("utf-8", "replace"), self.marker)
            if parts is not None:
                return host_listing(parts[0], parts[1])
            self.unreachable = "the host's answer was cut short"
            return None
        no_server = any(text in self.said for text in NO_SERVER)
        if no_server and code not in (sshhosts.SSH_FAILED, *_NO_PROGRAM):
            return PaneListing()  # (no tmux server runs there: no pane exists)
        if code is None or code < 0:
            self.unreachable = "no answer within the time allowed (FM_SSH_TIMEOUT)"
        else:
            self.unreachable = sshhosts.summary(self.said) or f"ssh exited {code}"
        return None


@attrs.define(eq=False)
class SshTmuxBackend(TmuxBackend):
    """The crews' tmux of fleet host :attr:`access` (one instance per host)."""

    home: Home | None = attrs.field(default=None, kw_only=True)
    env: Mapping[str, str] = attrs.field(factory=dict, kw_only=True)
    access: SshHost | None = attrs.field(default=None, kw_only=True)
    #: The start time of each pid the last call named, read on the host.
    starts: dict[int, int] = attrs.field(factory=dict, kw_only=True)
    #: Why the last call could not reach the host ("" after one that did).
    unreachable: str = attrs.field(default="", kw_only=True)

    @classmethod
    def for_host(cls, home: Home, env: Mapping[str, str], access: SshHost,
                 like: TmuxBackend | None = None) -> SshTmuxBackend:
        """The backend of *access*'s host, judging busy panes as *like* does."""
        backend = cls(tmux=access.tmux, timeout=sshhosts.timeout(env), name=f"ssh:{access.host}",
                      home=home, env=env, access=access)
        if like is not None:
            backend.busy_re = like.busy_re
        return backend

    @property
    def host(self) -> str:
        assert self.access is not None
        return self.access.host

    def start_of(self, pid: int) -> int | None:
        """When *pid* started on the host (clock ticks since its boot), as the last call read
        it; None when it did not."""
        return self.starts.get(pid)

    # --- the calls -------------------------------------------------------------------------

    def _words(self, commands: Sequence[Sequence[str]]) -> list[str]:
        assert self.access is not None
        words = self.access.tmux_argv()
        for number, command in enumerate(commands):
            words += [";"] if number else []
            words += [literal(word) for word in command]
        return words

    def _argv(self, mode: str, marker: str, commands: Sequence[Sequence[str]]) -> list[str]:
        assert self.home is not None and self.access is not None
        words = ["sh", "-c", SCRIPT, "sh", marker, mode, *self._words(commands)]
        argv = sshhosts.base_argv(self.home, self.env, self.access)
        return [*argv, "--", self.access.dest, shlex.join(words)]

    def sequence(self, *commands: Sequence[str]) -> list[str]:
        """The argv that runs *commands* on the host's tmux in this terminal (``ssh -t``):
        what ``fm crew attach`` hands the terminal to."""
        assert self.home is not None and self.access is not None
        argv = sshhosts.base_argv(self.home, self.env, self.access, tty=True)
        return [*argv, "--", self.access.dest, shlex.join(self._words(commands))]

    def run_sequence(self, *commands: Sequence[str]) -> str | None:
        return self._call("last", commands)

    def listing(self) -> PaneListing | None:
        out = self._call("list", [["list-panes", "-a", "-F", LISTING_FORMAT]])
        if out is None:
            return PaneListing() if self._no_server() else None
        return host_listing(out, dict(self.starts))

    def _call(self, mode: str, commands: Sequence[Sequence[str]]) -> str | None:
        self.last_exit = None
        marker = f"\x1e{secrets.token_hex(8)}\x1e"
        what = commands[0][0] if commands and commands[0] else "call"
        try:
            argv = self._argv(mode, marker, commands)
            done = run_held(argv, self.timeout, self.env)
        except subprocess.TimeoutExpired:
            return self._unreached(f"no answer from host {self.host} within {self.timeout:g}s "
                                   f"(tmux {what})")
        except (OSError, ValueError) as exc:
            return self._unreached(f"ssh could not run: {getattr(exc, 'strerror', None) or exc}")
        said = sshhosts.summary(done.stderr.decode("utf-8", "replace"))
        if done.returncode == sshhosts.SSH_FAILED or done.returncode in _NO_PROGRAM:
            return self._unreached(said or f"ssh exited {done.returncode}")
        self.unreachable = ""
        if done.returncode != 0:
            self.last_exit = done.returncode
            self.last_error = said or f"tmux {what} exited {done.returncode} on host {self.host}"
            return None
        parts = split(done.stdout.decode("utf-8", "replace"), marker)
        if parts is None:
            return self._unreached(f"host {self.host}'s answer was cut short")
        self.last_exit = 0
        self.last_error = None
        self.starts = parts[1]
        return parts[0]

    def _unreached(self, why: str) -> str | None:
        """Record that the host could not be asked, and why; the call's answer (None)."""
        self.unreachable = why
        self.last_error = f"cannot reach host {self.host}: {why}"
        self.last_exit = None
        return None

    def start_signatures(self) -> Listing | None:
        marker = f"\x1e{secrets.token_hex(8)}\x1e"
        try:
            argv = self._argv("list", marker, [["list-panes", "-a", "-F", LISTING_FORMAT]])
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=dict(self.env))
        except (OSError, ValueError) as exc:
            self._unreached(f"ssh could not run: {getattr(exc, 'strerror', None) or exc}")
            return None
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        return SshListing(proc, time.monotonic() + self.timeout, marker=marker)

    def start_captures(self, panes: Sequence[str]) -> CaptureBatch | None:
        """:meth:`capture` of each of *panes* in one ssh call, under way, framed as locally
        (:mod:`firstmate.watch.backends.panebatch`): the host's tmux runs the batch's commands
        as they are, quoted for its shell. ssh's own failure (exit 255) reads as a failed read
        of the first pane, as tmux's would; the host's next listing then says whether it is
        reachable."""
        from firstmate.watch.backends import panebatch

        return panebatch.start(self, panes, argv=self._batch_argv, env=self.env)

    def _batch_argv(self, *commands: Sequence[str]) -> list[str]:
        assert self.home is not None and self.access is not None
        argv = sshhosts.base_argv(self.home, self.env, self.access)
        return [*argv, "--", self.access.dest, shlex.join(self._words(commands))]

    def close(self) -> None:
        """End the host's control master (fm fleet stop)."""
        if self.home is not None and self.access is not None:
            with contextlib.suppress(Exception):
                sshhosts.close(self.home, self.env, self.access)
