"""Values that describe a harness plugin and cross the hook boundary."""

from __future__ import annotations

import attrs

#: How a harness gets re-armed after every close (SPEC §9).
REARM_OWNERS = ("hook", "extension", "checkpoint", "model-task", "host")


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
    #: Config files (relative to the project directory) this plugin writes or merges on install.
    config_files: tuple[str, ...] = ()
    #: Hook events this harness calls, in kebab case (``fm hook <harness> <event>``).
    hook_events: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.rearm_owner not in REARM_OWNERS:
            raise ValueError(f"unknown re-arm owner {self.rearm_owner!r} for {self.name}")
        if self.family not in ("hook", "in-process", "protocol"):
            raise ValueError(f"unknown harness family {self.family!r} for {self.name}")


@attrs.frozen
class PluginFailure:
    """A plugin that could not be loaded; the others load regardless."""

    name: str
    error: str
