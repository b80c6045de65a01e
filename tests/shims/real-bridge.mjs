// Run `fm install <harness>` for real and load the installed shim, so a test can drive it against
// the real `fm bridge <harness>` that the installed launch.json starts.
import { spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";

import { REPO } from "./helpers.mjs";
import { loadTs } from "./load-ts.mjs";

export const python = process.env.PYTHON ?? "python3";

export function pythonPath(harness) {
  return [join(REPO, "core"), join(REPO, "plugins", harness, "src"), process.env.PYTHONPATH]
    .filter(Boolean).join(delimiter);
}

/** Why the real bridge cannot run here (a skip reason), or false. */
export function cannotRun(harness) {
  const probe = spawnSync(python, ["-c", "import firstmate.cli.bridge"], {
    env: { ...process.env, PYTHONPATH: pythonPath(harness) }, encoding: "utf8",
  });
  return probe.status === 0 ? false : `${python} cannot import firstmate.cli.bridge`;
}

/** Install into a fresh project with its own home; load the installed index.ts. */
export async function installAndLoad(harness, extensionDir) {
  const root = mkdtempSync(join(tmpdir(), `fm-${harness}-real-`));
  const env = { ...process.env, PYTHONPATH: pythonPath(harness) };
  const done = spawnSync(python, ["-m", "firstmate", "install", harness, "--project", root,
    "--home", join(root, "home")], { env, encoding: "utf8" });
  if (done.status !== 0) throw new Error(`fm install ${harness} failed: ${done.stderr}`);
  const dir = join(root, extensionDir);
  const { module } = await loadTs(join(dir, "index.ts"), { into: dir });
  return { root, dir, module };
}

export function processGone(pid) {
  try {
    process.kill(pid, 0);
    return false;
  } catch (error) {
    return error.code === "ESRCH";
  }
}
