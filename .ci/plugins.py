"""tox's helper for the harness-plugin environments: a plugin env is named ``plugin-<harness>``
and needs nothing else, so adding a harness is its folder under plugins/ plus its name in
tox.ini's env_list.

    python .ci/plugins.py install plugin-<harness>   core and that one plugin, in one pip call
    python .ci/plugins.py install-all                core and every plugin under plugins/
    python .ci/plugins.py test plugin-<harness> [ARGS]  its own tests and the contract, for it alone
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ROOT / "plugins"


def harness(env_name: str) -> str:
    name = env_name.removeprefix("plugin-")
    if name == env_name or not (PLUGINS / name / "pyproject.toml").is_file():
        sys.exit(f"{env_name}: no plugins/{name}/pyproject.toml; name the env plugin-<harness> "
                 "after a folder under plugins/")
    return name


def pip_install(*paths: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", str(ROOT), *map(str, paths)],
                   check=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["install"] and len(argv) == 2:
        pip_install(PLUGINS / harness(argv[1]))
        return 0
    if argv == ["install-all"]:
        pip_install(*sorted(p.parent for p in PLUGINS.glob("*/pyproject.toml")))
        return 0
    if argv[:1] == ["test"] and len(argv) >= 2:
        name = harness(argv[1])
        args = argv[2:] or [f"plugins/{name}/tests", "tests/contract"]
        env = {**os.environ, "FIRSTMATE_CONTRACT_PLUGINS": name}
        return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=ROOT, env=env,
                              check=False).returncode
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
