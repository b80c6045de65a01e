// Firstmate's omp extension (installed by `fm install omp` into .omp/extensions/firstmate/).
//
// A shim with no policy: it tells `fm bridge omp` what omp reports (session start and shutdown,
// turn start and end) and hands the model whatever the bridge asks it to deliver. The bridge
// decides everything else (docs/bridge.md). Nothing here may throw into omp: an exception in a
// raw timer callback, or an unhandled rejection, can end the whole session. The plumbing it
// shares with the other shims (the launch argv, timeouts on omp's isolated ctx timers, harness
// calls that never throw, the re-arm tool) lives in the bridge client installed beside it
// (./bridge-client.mjs).

// @ts-ignore -- plain ES module shipped beside this file; it has no type declarations.
import * as bridge from "./bridge-client.mjs";

const HARNESS = "omp";
const SHIM_VERSION = "firstmate-omp-shim/1";
/** How long session_shutdown waits for the bridge's answer before letting omp go on. */
const SHUTDOWN_WAIT_MS = 3000;
/** Command-line flags that make omp's first session a resumed one. */
const RESUME_FLAGS = ["--resume", "-r", "--continue", "-c"];

type Reply = { ok: boolean; state: string; text?: string };
type Ctx = {
  hasUI?: boolean;
  ui?: { notify?: (message: string, type?: string) => void };
  sessionManager?: { getSessionId?: () => string };
  agent?: { kind?: string };
  setTimeout?: (fn: () => void, ms: number) => unknown;
  clearTimer?: (timer: unknown) => void;
} | undefined;
type Handler = (event: any, ctx: Ctx) => unknown;
type OmpApi = {
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

/**
 * omp's session_start has no reason: the first session of the process is a resume when omp was
 * started with a resume flag, else a startup; any later one is a replacement of unknown kind.
 */
export function startReason(argv: string[], earlier: boolean): string {
  if (earlier) return "unknown";
  return argv.slice(2).some((word) => RESUME_FLAGS.includes(word)) ? "resume" : "startup";
}

/** The reason of a session_before_switch / session_switch event: new, resume or fork. */
export function switchReason(event: any): string {
  const reason = event?.reason;
  return reason === "new" || reason === "resume" || reason === "fork" ? reason : "unknown";
}

/** A subagent's session runs this extension too; only the main agent speaks for omp. */
function isSub(ctx: Ctx): boolean {
  try {
    return ctx?.agent?.kind === "sub";
  } catch {
    return false;
  }
}

export default function firstmate(pi: OmpApi): void {
  let ctx: Ctx;
  let settled = false; // agent_settled seen: agent_end no longer means idle
  let toolError = ""; // a refused tool registration, said at the next session start

  const notify = (level: string, text: string): void => bridge.notifyCtx(ctx, level, text);
  // Only the main agent's events are heard; each one makes its ctx the current one.
  const listen = (event: string, handler: Handler): void => bridge.listen(pi, event, (e: any, c: Ctx) => {
    if (isSub(c)) return undefined;
    ctx = c;
    return handler(e, c);
  });

  const client = bridge.getClient(HARNESS, () => bridge.createClient({
    harness: HARNESS,
    launch: resolveLaunch(here(), process.env),
    shimVersion: SHIM_VERSION,
    notify,
    deliver: async () => ({ ok: false, detail: "no session yet" }),
  }));

  // This module may be a re-evaluation (/reload): the live client now talks to this `pi`.
  client.setNotify(notify);
  // omp queues an explicit deliverAs even when idle; without one it wakes an idle session. The
  // acceptance wait runs on the current ctx's isolated timer.
  client.setDeliver((text: string): Promise<{ ok: boolean; detail: string }> =>
    bridge.sendUserMessage(pi, text, client.welcome?.delivery === "followUp", ctx));

  listen("session_start", (_event, c) => {
    if (toolError) notify("warn", toolError);
    toolError = "";
    void client.sessionStart(startReason(process.argv, client.generation > 0), bridge.sessionOf(c));
  });

  listen("session_shutdown", async (_event, c) => {
    // omp says neither quit nor replacement; the bridge treats "unknown" as a handoff, and the
    // end of its stdin when omp exits as the quit.
    const failed: Reply = { ok: false, state: "failed", text: "no answer" };
    await bridge.within(client.sessionShutdown("unknown"), SHUTDOWN_WAIT_MS, failed, c);
  });

  // omp replaces a session in place (/new, /resume, /fork) with session_before_switch and
  // session_switch, never with session_shutdown and session_start: report them as a handoff.
  listen("session_before_switch", async (event, c) => {
    const failed: Reply = { ok: false, state: "failed", text: "no answer" };
    await bridge.within(client.sessionShutdown(switchReason(event)), SHUTDOWN_WAIT_MS, failed, c);
    return undefined; // never cancel the switch
  });

  listen("session_switch", (event, c) => {
    void client.sessionStart(switchReason(event), bridge.sessionOf(c));
  });

  listen("agent_start", (_event, c) => {
    client.busy(bridge.sessionOf(c));
  });

  listen("agent_settled", (_event, c) => {
    settled = true;
    client.idle(bridge.sessionOf(c));
  });

  listen("agent_end", (_event, c) => {
    // Prefer agent_settled where omp emits it: agent_end may precede a retry.
    if (!settled) client.idle(bridge.sessionOf(c));
  });

  toolError = bridge.registerArmTool(pi, client, HARNESS);
}
