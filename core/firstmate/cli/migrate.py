"""``fm migrate --from-legacy DIR [--json]``: import an original firstmate home's queue state."""

from __future__ import annotations

import os
import sys

USAGE = "usage: fm migrate --from-legacy DIR [--json]"


def main(argv: list[str]) -> int:
    from firstmate.base.errors import UsageError

    source: str | None = None
    as_json = False
    it = iter(argv)
    for arg in it:
        name, eq, value = arg.partition("=")
        if name == "--from-legacy":
            if source is not None:
                raise UsageError(f"--from-legacy given twice; {USAGE}")
            source = value if eq else next(it, None)
            if not source:
                raise UsageError(f"--from-legacy needs a directory; {USAGE}")
        elif arg == "--json":
            as_json = True
        else:
            raise UsageError(USAGE)
    if source is None:
        raise UsageError(USAGE)

    from firstmate.store.database import open_store
    from firstmate.store.home import open_home
    from firstmate.store.migrate import import_legacy

    report = import_legacy(open_store(open_home(os.environ)), os.path.expanduser(source))
    if as_json:
        import json

        sys.stdout.write(json.dumps(report.to_json(), sort_keys=True) + "\n")
    else:
        sys.stdout.write("".join(line + "\n" for line in report.lines()))
    return 0
