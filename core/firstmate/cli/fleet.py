"""``fm fleet …``: crews on other hosts report to this home's primary through NATS JetStream.

Needs the optional extra (``pip install 'firstmate[fleet]'``); the commands that talk to a
server say so in one line when it is missing. Credentials are read from files (``--creds``, or
the file ``FM_FLEET_CREDS`` names), never from the command line, and never printed.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from firstmate.base.exitcodes import ExitCode
from firstmate.cli.args import Parser
from firstmate.store.home import Home

if TYPE_CHECKING:
    import argparse

    from firstmate.fleet.sshhosts import SshHost


def parser() -> Parser:
    parser = Parser("fm fleet", "Crews on other hosts report to this home's primary through "
                    "NATS JetStream (docs/fleet-remote.md). Needs pip install 'firstmate[fleet]'.")
    serve = parser.add_command("serve", "run the fleet's nats-server (JetStream, one user per "
                               "host) and the relay for this home, and print how hosts join")
    serve.add_argument("--listen", metavar="HOST:PORT",
                       help="where the server listens (default 127.0.0.1:4222, or as before)")
    serve.add_argument("--url", metavar="URL",
                       help="the address hosts connect to, if not nats://LISTEN (a name "
                            "or tunnel they reach it by)")
    serve.add_argument("--fleet", metavar="NAME", help="the fleet's name (default: generated)")
    use = parser.add_command("use", "relay this home's fleet through a NATS server of your own "
                             "(with JetStream)")
    use.add_argument("url", metavar="URL", help="nats://HOST:PORT (a cluster's nodes separated "
                     "by commas)")
    use.add_argument("--creds", metavar="FILE",
                     help='the relay\'s credentials: a 0600 JSON file {"user": …, "password": '
                          '…} or {"token": …} (default: $FM_FLEET_CREDS)')
    use.add_argument("--fleet", metavar="NAME", help="the fleet's name (default: generated)")
    use.add_argument("--replicas", type=int, default=1, metavar="N",
                     help="copies of the fleet's stream in a JetStream cluster (default 1)")
    host = parser.add_command("host", "add or remove a host of this home's fleet")
    add = host.add_command("add", "issue credentials for host NAME (a 0600 file) and print "
                           "the command that joins it")
    add.add_argument("name", metavar="NAME", help="the host's name: 1-32 of A-Z a-z 0-9 _ -")
    add.add_argument("--replace", action="store_true",
                     help="issue new credentials for a host already added (the old stop working)")
    add.add_argument("--nats-creds", metavar="FILE",
                     help="on a server of your own: the host's NATS user (a 0600 JSON file "
                          "as for fm fleet use) to bundle instead of a generated one")
    add.add_argument("--ssh", metavar="[USER@]ADDRESS",
                     help="how fm reaches the host's panes: ssh to this address (it logs in "
                          "with a key, no prompt); checked now, its host key recorded")
    add.add_argument("--port", type=int, metavar="P", help="with --ssh: the SSH port")
    add.add_argument("--identity", metavar="FILE",
                     help="with --ssh: the private key to log in with (default: ssh's own)")
    add.add_argument("--remote-dir", metavar="DIR",
                     help="with --ssh: the project directory on the host, where fm crew spawn "
                          "--host and fm crew add --host run fm (default: the login directory)")
    add.add_argument("--remote-fm", metavar="CMD",
                     help="with --ssh: the fm command on the host (default: fm)")
    add.add_argument("--remote-tmux", metavar="PATH",
                     help="with --ssh: the tmux program on the host (default: tmux)")
    add.add_argument("--remote-tmux-socket", metavar="SOCKET",
                     help="with --ssh: the tmux server the host's crews run on, as "
                          "FM_TMUX_SOCKET there (default: tmux's own)")
    remove = host.add_command("remove", "drop host NAME: its credentials stop working")
    remove.add_argument("name", metavar="NAME", help="the host's name")
    join = parser.add_command("join", "on another host: join this home to a fleet, so its "
                              "crews report to that fleet's primary")
    join.add_argument("url", nargs="?", metavar="URL",
                      help="the fleet's server as this host reaches it (default: the one in "
                           "the credentials)")
    join.add_argument("--creds", metavar="FILE",
                      help="the credentials file fm fleet host add wrote on the primary "
                           "(default: $FM_FLEET_CREDS)")
    join.add_argument("--host", metavar="NAME",
                      help="this host's name in the fleet (checked against the credentials)")
    parser.add_command("leave", "on a joined host: stop forwarding; reports stay local")
    status = parser.add_command("status", "this home's part in its fleet and its processes")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    stop = parser.add_command("stop", "stop this home's fleet processes (supervisor, relay and "
                              "server, or forwarder)")
    stop.add_argument("--forget", action="store_true",
                      help="on the primary: also drop the fleet's configuration and hosts")
    parser.add_command("run", "the primary's supervisor (fm fleet serve and use start it)")
    parser.add_command("relay", "the primary's relay (the supervisor runs it)")
    parser.add_command("forward", "a joined host's forwarder (join and crew reports start it)")
    return parser


def _home(*, create: bool = True) -> Home:
    from firstmate.store.home import open_home

    return open_home(os.environ, create=create)


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")


def main(argv: Sequence[str]) -> int:
    args = parser().parse(argv)
    env = os.environ
    verb = args.command
    if verb in ("run", "relay", "forward"):
        from firstmate.fleet import forwarder, relay, supervise

        runner = {"run": supervise.run, "relay": relay.run, "forward": forwarder.run}[verb]
        return int(runner(_home(create=False), env))
    if verb == "status":
        return _status(args.json)
    if verb == "join":
        from firstmate.fleet import membership

        member, pid = membership.join(_home(), env, url=args.url, creds=args.creds,
                                      host=args.host)
        _say(f"fleet: joined fleet {member.fleet} as host {member.host} "
             f"({', '.join(member.urls)}); forwarder pid {pid}")
        _say("fleet: crews of this home now report to the primary: fm crew status, turn ends "
             "and crews spawned here")
        return ExitCode.OK
    if verb == "leave":
        from firstmate.fleet import membership

        left = membership.leave(_home(create=False), env)
        _say("fleet: this home is in no fleet" if left is None else
             f"fleet: left fleet {left.fleet}; reports of this home stay local")
        return ExitCode.OK
    if verb == "stop":
        from firstmate.fleet import manage

        done = manage.stop(_home(create=False), env, forget=args.forget)
        _say("fleet: stopped " + ", ".join(done) if done else "fleet: nothing was running")
        return ExitCode.OK
    from firstmate.fleet import manage

    if verb == "serve":
        home = _home()
        primary = manage.serve(home, env, listen=args.listen, fleet=args.fleet, url=args.url)
        _say(f"fleet: serving fleet {primary.fleet} on nats://{primary.listen} (hosts join "
             f"{', '.join(primary.public)}); relay consuming")
        _hosts_hint(home, primary)
        return ExitCode.OK
    if verb == "use":
        home = _home()
        primary = manage.use(home, env, url=args.url, creds=args.creds, fleet=args.fleet,
                             replicas=args.replicas)
        _say(f"fleet: fleet {primary.fleet} relayed through {', '.join(primary.urls)}; relay "
             "consuming")
        _hosts_hint(home, primary)
        return ExitCode.OK
    assert verb == "host"
    home = _home(create=False)
    if args.subcommand == "remove":
        manage.host_remove(home, env, args.name)
        _say(f"fleet: removed host {args.name}; its credentials no longer work")
        return ExitCode.OK
    ssh = _ssh_settings(args)
    issued = manage.host_add(home, env, args.name, replace=args.replace,
                             nats_creds=args.nats_creds, ssh=ssh)
    if issued.ssh is not None and issued.contact is not None:
        _say(f"fleet: host {issued.entry.name} is reached over SSH as {issued.ssh.shown} "
             f"({issued.contact.tmux}; {issued.contact.fm}); its crews' panes are read from "
             "here")
        if not issued.contact.fm_ok:
            _say(f"fleet: note: fm crew spawn --host {issued.entry.name} and fm crew add --host "
                 "run fm there: give it with --remote-fm CMD (and --remote-dir DIR)")
    if issued.creds is None:
        return ExitCode.OK
    _say(f"fleet: host {issued.entry.name} may join; its credentials are in {issued.creds} "
         "(0600: copy it to that host privately, e.g. scp)")
    if issued.snippet is not None:
        _say(f"fleet: add the user in {issued.snippet} to your NATS server's authorization "
             "users (it may publish only its own subjects), then reload the server")
    if issued.ssh is not None:
        _say(f"fleet: then fm crew spawn NAME --host {issued.entry.name} … joins it for you, "
             f"or run there: fm fleet join {issued.join_url} --creds "
             f"{os.path.basename(issued.creds)} --host {issued.entry.name}")
    else:
        _say(f"fleet: then run there: fm fleet join {issued.join_url} --creds "
             f"{os.path.basename(issued.creds)} --host {issued.entry.name}")
    if "://127." in issued.join_url or "://localhost" in issued.join_url:
        _say("fleet: that address is this machine's loopback: another host reaches it through "
             "a tunnel (ssh -L), or serve with --listen 0.0.0.0:PORT --url nats://NAME:PORT")
    return ExitCode.OK


def _ssh_settings(args: argparse.Namespace) -> SshHost | None:
    """The SSH settings ``host add`` was given, checked; None without ``--ssh``."""
    from firstmate.base.errors import UsageError
    from firstmate.fleet import sshhosts

    given = [flag for flag, value in (("--port", args.port), ("--identity", args.identity),
                                      ("--remote-dir", args.remote_dir),
                                      ("--remote-fm", args.remote_fm),
                                      ("--remote-tmux", args.remote_tmux),
                                      ("--remote-tmux-socket", args.remote_tmux_socket))
             if value is not None]
    if args.ssh is None:
        if given:
            raise UsageError(f"fleet host add: {given[0]} goes with --ssh [USER@]ADDRESS; run "
                             "'fm fleet host add --help'")
        return None
    return sshhosts.settings(args.name, args.ssh, port=args.port, identity=args.identity,
                             directory=args.remote_dir, fm=args.remote_fm,
                             tmux=args.remote_tmux, socket=args.remote_tmux_socket)


def _hosts_hint(home: Home, primary: object) -> None:
    from firstmate.fleet.config import Primary

    assert isinstance(primary, Primary)
    if not primary.hosts:
        _say("fleet: add a host with: fm fleet host add NAME")
        return
    for entry in primary.hosts:
        _say(f"fleet: host {entry.name} joins with: fm fleet join {','.join(primary.public)} "
             f"--creds {entry.name}.creds --host {entry.name}")


def _status(as_json: bool) -> int:
    from firstmate.fleet import report

    data = report.status(_home(create=False), os.environ)
    if as_json:
        from firstmate.cli import jsonout

        jsonout.write(data)
        return ExitCode.OK
    role = data["role"]
    if role is None:
        _say("fleet: this home is in no fleet (fm fleet serve, or fm fleet join on a host)")
        return ExitCode.OK
    if role == "host":
        pid = data["forwarder_pid"]
        _say(f"fleet: host {data['host']} of fleet {data['fleet']} at "
             f"{', '.join(data['urls'])}; forwarder "
             + (f"pid {pid}" if pid else "not running (the next crew report starts it)")
             + ("" if data["backlog_bytes"] is None else
                f"; {data['backlog_bytes']} bytes of status not yet sent"))
        return ExitCode.OK
    relay, supervisor = data["relay_pid"], data["supervisor_pid"]
    _say(f"fleet: primary of fleet {data['fleet']} ({data['mode']}: "
         f"{', '.join(data['urls'])}); supervisor "
         + (f"pid {supervisor}" if supervisor else "not running (fm fleet serve / use starts it)")
         + "; relay " + (f"pid {relay}" if relay else "not running"))
    now = time.time()
    for host in data["hosts"]:
        seen = host["seen_at"]
        when = "never seen" if seen is None else f"seen {max(0, int(now - seen))}s ago"
        refused = f", {host['refused']} refused ({host['last_refusal']})" if host["refused"] \
            else ""
        ssh = f"; panes over ssh {host['ssh']}" if host.get("ssh") else ""
        _say(f"  host {host['name']}: {when}, {host['events']} events{refused}{ssh}")
    for host in data["unknown_hosts"]:
        _say(f"  unknown host {host['name']}: {host['refused']} refused "
             f"({host['last_refusal']})")
    return ExitCode.OK
