"""A stand-in agent for the ``fm crew spawn`` tests, run in a tmux pane as a harness would be.

It records how it was started (argv, environment, directory) in ``$FAKECREW_DIR/<crew>.json``;
every prompt it gets (the brief from argv, or a line typed into the pane) is a turn: it is
appended to ``$FAKECREW_DIR/<crew>.turns``, the first one is answered by running the status
command the brief names (``working: started``), and every turn ends by running the crew-mode
config's turn-end command, as a harness's turn-end hook would. Then it shows its prompt.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

COMMAND = re.compile(r'(\S+(?: -m firstmate)?) crew status (\S+) "<verb>: <note>"')


def main() -> None:
    args = sys.argv[1:]
    with open(args[args.index("--crew-config") + 1]) as fh:
        config = json.load(fh)
    crew = os.environ.get("FM_CREW", "unknown")
    out = os.path.join(os.environ["FAKECREW_DIR"], crew)
    with open(out + ".json", "w") as fh:
        json.dump({"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd()}, fh)
    first = [True]

    def turn(text: str) -> None:
        with open(out + ".turns", "a") as fh:
            fh.write(text.replace("\n", "\\n") + "\n")
        found = COMMAND.search(text)
        if first[0] and found:
            subprocess.run([*shlex.split(found.group(1)), "crew", "status", found.group(2),
                            "working: started"], check=False)
        first[0] = False
        subprocess.run(config["turn_ended"], check=False)
        print("fakecrew> ", end="", flush=True)

    if "--" in args:
        turn(" ".join(args[args.index("--") + 1:]))
    else:
        print("fakecrew> ", end="", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            return
        turn(line.rstrip("\n"))


if __name__ == "__main__":
    main()
