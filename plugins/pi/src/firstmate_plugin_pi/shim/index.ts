// Firstmate's Pi extension (installed by `fm install pi` into .pi/extensions/firstmate/).
//
// A shim with no policy: it tells `fm bridge pi` what Pi reports (session start and shutdown,
// turn start and end) and hands the model whatever the bridge asks it to deliver. The bridge
// decides everything else (docs/bridge.md). Nothing here may throw into Pi: a late call on a
// replaced session throws "ctx is stale", and an unhandled error would end Pi. The plumbing it
// shares with the other shims (the launch argv, timeouts, harness calls that never throw, the
// re-arm tool) lives in the bridge client installed beside it (./bridge-client.mjs).

// @ts-ignore -- plain ES module shipped beside this file; it has no type declarations.
import * as bridge from "./bridge-client.mjs";

const HARNESS = "pi";
const SHIM_VERSION = "firstmate-pi-shim/1";
/** How long session_shutdown waits for the bridge's answer before letting Pi go on. */
const SHUTDOWN_WAIT_MS = 3000;
const REASONS = ["startup", "reload", "new", "resume", "fork", "quit", "unknown"];

type Reply = { ok: boolean; state: string; text?: string };
type Ctx = {
  hasUI?: boolean;
  ui?: { notify?: (message: string, type?: string) => void };
  sessionManager?: { getSessionId?: () => string };
} | undefined;
type Handler = (event: any, ctx: Ctx) => unknown;
type PiApi = {
  on(event: string, handler: Handler): void;
  sendUserMessage(text: string, options?: { deliverAs?: string }): unknown;
  registerTool?(tool: unknown): void;
  typebox?: any;
};

declare const __dirname: string | undefined;

/** The directory this file was loaded from (jiti may give CommonJS `__dirname` instead). */
const here = (): string | null =>
  bridge.dirOf(() => import.meta.url, typeof __dirname === "string" ? __dirname : null);

/** The bridge command: launch.json beside this file, else FIRSTMATE_BRIDGE_ARGV, else `fm`. */
export function resolveLaunch(dir: string | null, env: Record<string, string | undefined>): string[] {
  return bridge.resolveLaunch(dir, env, HARNESS);
}

function reasonOf(value: unknown, fallback: string): string {
  if (typeof value !== "string" || value === "") return fallback;
  return REASONS.includes(value) ? value : "unknown";
}

export default function firstmate(pi: PiApi): void {
  let ctx: Ctx;
  let settled = false; // agent_settled seen: agent_end no longer means idle
  let toolError = ""; // a refused tool registration, said at the next session start

  const notify = (level: string, text: string): void => bridge.notifyCtx(ctx, level, text);
  const listen = (event: string, handler: Handler): void => bridge.listen(pi, event, handler);

  const client = bridge.getClient(HARNESS, () => bridge.createClient({
    harness: HARNESS,
    launch: resolveLaunch(here(), process.env),
    shimVersion: SHIM_VERSION,
    notify,
    deliver: async () => ({ ok: false, detail: "no session yet" }),
  }));

  // This module may be a re-evaluation (/reload): the live client now talks to this `pi`.
  client.setNotify(notify);
  client.setDeliver((text: string): Promise<{ ok: boolean; detail: string }> =>
    bridge.sendUserMessage(pi, text, client.welcome?.delivery !== "prompt"));

  listen("session_start", (event, c) => {
    ctx = c;
    if (toolError) notify("warn", toolError);
    toolError = "";
    void client.sessionStart(reasonOf(event?.reason, "startup"), bridge.sessionOf(c));
  });

  listen("session_shutdown", async (event, c) => {
    ctx = c;
    const reason = reasonOf(event?.reason, "quit");
    const failed: Reply = { ok: false, state: "failed", text: "no answer" };
    await bridge.within(client.sessionShutdown(reason), SHUTDOWN_WAIT_MS, failed);
    // Quitting: end the bridge's stdin so it stops its arms and exits.
    if (reason === "quit") client.close();
  });

  listen("agent_start", (_event, c) => {
    ctx = c;
    client.busy(bridge.sessionOf(c));
  });

  listen("agent_settled", (_event, c) => {
    ctx = c;
    settled = true;
    client.idle(bridge.sessionOf(c));
  });

  listen("agent_end", (_event, c) => {
    ctx = c;
    // agent_end fires before each automatic retry; agent_settled (newer Pi) only when done.
    if (!settled) client.idle(bridge.sessionOf(c));
  });

  toolError = bridge.registerArmTool(pi, client, HARNESS);
}
