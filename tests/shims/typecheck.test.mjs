// The TypeScript shims type-check under --strict. Pi and omp types are not installed, so the
// harness API is typed structurally inside each shim; Node's few globals are declared here.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { REPO } from "./helpers.mjs";

const AMBIENT = `
declare module "*.mjs" {
  export const createClient: any, getClient: any, dirOf: any, resolveLaunch: any, within: any;
  export const listen: any;
  export const sessionOf: any, notifyCtx: any, sendUserMessage: any, registerArmTool: any;
}
interface ImportMeta { url: string }
declare const process: { env: Record<string, string | undefined>; argv: string[] };
`;

test("the Pi and omp shims type-check under --strict", () => {
  const dir = mkdtempSync(join(tmpdir(), "fm-tsc-"));
  try {
    writeFileSync(join(dir, "ambient.d.ts"), AMBIENT);
    const tsc = join(REPO, ".node-cache", "node_modules", "typescript", "bin", "tsc");
    const shims = ["pi", "omp"].map((h) =>
      join(REPO, "plugins", h, "src", `firstmate_plugin_${h}`, "shim", "index.ts"));
    const out = spawnSync(process.execPath, [tsc, "--noEmit", "--strict", "--target", "ES2022",
      "--module", "ESNext", "--moduleResolution", "bundler", "--lib", "ES2022",
      join(dir, "ambient.d.ts"), ...shims], { encoding: "utf8" });
    assert.equal(out.status, 0, out.stdout + out.stderr);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
