"""Where a home's fleet runtime lives: ``state/fleet/`` (0700), beside the rest of its state.

``forward.lock``    the forwarder's singleton (a kernel lock and its owner record); its presence
                    is what makes the home a joined one for ``fm crew status``
                    (:mod:`firstmate.fast.fleetbell`)
``forward.bell``    the forwarder's doorbell (a unix datagram socket), rung by every report
``forward.spawned`` when a report last started a forwarder that was not running
``out/``            the outbox's cursors (:mod:`firstmate.fleet.outbox`)
``run.lock``        the primary's fleet supervisor (the relay and a served nats-server)
``relay.lock``      the relay's singleton
``relay.ready``     written by a relay once it consumes (its pid)
``js/``             a served fleet's JetStream storage
``*.log``           each process's bounded log (no credentials are ever written to one)
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from firstmate.fast import fleetbell
from firstmate.store.home import Home, make_private_dir
from firstmate.store.ledgers import BoundedLog

LOG_DEFAULTS = (262144, 2000)


def fleet_state(home: Home) -> str:
    return os.path.join(os.fspath(home.state), fleetbell.DIR)


def ensure(home: Home) -> str:
    make_private_dir(home.state)
    directory = fleet_state(home)
    make_private_dir(directory)
    return directory


def path(home: Home, name: str) -> str:
    return os.path.join(fleet_state(home), name)


def log(home: Home, role: str, env: Mapping[str, str] | None = None) -> BoundedLog:
    """``state/fleet/<role>.log``: one stamped line per event worth keeping."""
    from pathlib import Path

    return BoundedLog(Path(path(home, f"{role}.log")), "FM_FLEET_LOG_MAX_BYTES",
                      "FM_FLEET_LOG_KEEP_LINES", LOG_DEFAULTS,
                      env=os.environ if env is None else env, stamp=True)


FORWARD_LOCK = fleetbell.LOCK
FORWARD_BELL = fleetbell.BELL
RUN_LOCK = "run.lock"
RELAY_LOCK = "relay.lock"
RELAY_READY = "relay.ready"
JS_DIR = "js"

__all__ = ["FORWARD_BELL", "FORWARD_LOCK", "JS_DIR", "RELAY_LOCK", "RELAY_READY", "RUN_LOCK",
           "ensure", "fleet_state", "log", "path"]
