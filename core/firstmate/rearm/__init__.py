"""Re-arm strategies: the declared values core runs for a harness plugin's turn-end hook.

A hook harness declares one strategy and supplies only what is its own (its payload's keys, the
shape of its hook's answer, its knobs' names); core runs the policy:

- :class:`~firstmate.rearm.parkedstop.ParkedStop`: a synchronous stop hook that parks on the
  watcher and returns the wake as its continuation;
- :class:`~firstmate.rearm.guarded.CheckpointGuard`: the model re-arms by its protocol (a
  foreground checkpoint, a background task) and the stop hook is the turn-end guard;
- :class:`~firstmate.rearm.claimpark.ClaimLedgerPark`: a background stop hook whose exit wakes
  the idle session, admitted once per turn end by a generation claim in the store;
- an in-process harness's :class:`~firstmate.plugin.harness.BridgeProfile` (run by ``fm bridge``).

:class:`~firstmate.rearm.reply.HookReply` says how a hook answers in its harness's terms and
:class:`~firstmate.rearm.chain.StopChain` bounds a chain of continuations for a harness that has
no cap of its own.
"""
