// Shared helpers for the shim tests (Node's built-in runner).
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const CLIENT_PATH = join(REPO, "core", "firstmate", "shims", "bridge-client.mjs");
export const FAKE_BRIDGE = join(REPO, "tests", "shims", "fake-bridge.mjs");

/** Resolve once `predicate()` is truthy; fail after `timeoutMs` (generous: loaded machines). */
export async function eventually(predicate, timeoutMs = 15000, what = "condition") {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * The bridge client unrefs its child and timers so it never keeps a harness alive; a test has
 * nothing else holding its event loop open, so it holds one ref'd timer while it runs.
 */
export function keepAlive() {
  const timer = setInterval(() => {}, 60000);
  return () => clearInterval(timer);
}
