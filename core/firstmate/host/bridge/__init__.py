"""``fm bridge <harness>``: the long-lived Python side of an in-process harness shim.

The shim inside Pi, omp or OpenCode forwards lifecycle events as JSON lines; the bridge runs the
continuity engine for that harness process and asks the shim to deliver wakes (docs/bridge.md).

- :mod:`firstmate.host.bridge.protocol`: message shapes, parsing and encoding (no policy).
- :mod:`firstmate.host.bridge.channel`: the shim connection: writes, request ids, delivery round trips.
- :mod:`firstmate.host.bridge.owner`: generations, the session lock, the engine's lifecycle.
- :mod:`firstmate.host.bridge.idlequeue`: the idle queue tick (``BridgeProfile.idle_queue_read``).
- :mod:`firstmate.host.bridge.record`: ``state/bridge-<harness>.json`` read back for status, doctor
  and the pull guard.
"""
