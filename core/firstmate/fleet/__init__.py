"""Fleets across hosts: crews on other machines report to the primary through NATS JetStream.

A layer above the store: on a joined (remote) home the forwarder publishes the crews' status
logs and turn ends; on the primary the relay commits them into the home exactly once and rings
the watcher's doorbell. Only :mod:`firstmate.fleet.natsconn` and the two processes that use it
(:mod:`~firstmate.fleet.forwarder`, :mod:`~firstmate.fleet.relay`) import ``nats``: everything a
hot path or the watcher reads from here is standard library and attrs.
"""
