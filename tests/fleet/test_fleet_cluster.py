"""A 3-node JetStream cluster on loopback ports, a stream of three copies, and three hosts
streaming 1,000 status lines while a node is killed (kill -9): the one leading the stream, or the
one the primary's relay is connected to (so deliveries in flight to it are lost with it). Every
line reaches the primary once, in each crew's order."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.fleet import names
from firstmate.testing.procs import eventually
from remote_support import FLEET, LocalFleet, reporter

LINES = 1000


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalFleet]:
    monkeypatch.setenv("FIRSTMATE_KEYS_DIR", str(tmp_path / "keys"))
    fleet = LocalFleet(tmp_path, ("h1", "h2", "h3"), nodes=3)
    try:
        fleet.setup(replicas=3)
        yield fleet
    finally:
        fleet.close()


async def _leader(fleet: LocalFleet) -> str:
    import nats

    nc = await nats.connect(fleet.urls.split(","), **fleet.relay_auth.connect_kwargs())
    try:
        info = await nc.jetstream().stream_info(names.stream(FLEET))
        assert info.config.num_replicas == 3
        assert info.cluster is not None and info.cluster.leader
        return str(info.cluster.leader)
    finally:
        await nc.close()


def stream_with_a_node_killed(cluster: LocalFleet, which: str) -> None:
    crews = ["c0", "c1", "c2", "c3"]
    for host in cluster.hosts:
        cluster.add_crews(host, crews)
    per_host = [LINES // 3 + (1 if i < LINES % 3 else 0) for i in range(3)]
    plan = {h: [(crews[n % 4], f"working: {h} line {n}") for n in range(count)]
            for h, count in zip(cluster.hosts, per_host, strict=True)}
    expected = {(h, c): [t for name, t in plan[h] if name == c] for h in cluster.hosts
                for c in crews}
    assert sum(len(v) for v in expected.values()) == LINES
    if which == "leader":
        leader = asyncio.run(_leader(cluster))
        node = next(n for i, n in enumerate(cluster.nodes) if f"n{i}" == leader)
    else:
        node = next(n for n in cluster.nodes if "fm-relay" in n.connections())
    running = [reporter(cluster, h, plan[h], 0.004) for h in cluster.hosts]
    eventually("lines to flow", lambda: sum(len(cluster.lines(*k)) for k in expected) > 100)
    node.stop(signal.SIGKILL)
    for proc in running:
        assert proc.wait(120) == 0
    cluster.wait_lines(expected, deadline=120)
    assert sum(len(cluster.lines(*k)) for k in expected) == LINES


def test_the_stream_leader_killed_mid_stream_loses_and_repeats_nothing(
        cluster: LocalFleet) -> None:
    stream_with_a_node_killed(cluster, "leader")


def test_the_relays_node_killed_mid_stream_loses_and_repeats_nothing(
        cluster: LocalFleet) -> None:
    stream_with_a_node_killed(cluster, "relay")
