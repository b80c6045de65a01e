// Firstmate OpenCode shim (written by `fm install opencode`; edits are overwritten).
//
// It forwards what OpenCode reports to `fm bridge opencode` and performs the deliveries the
// bridge asks for. It holds no policy: the bridge decides everything (docs/bridge.md).
//
// Export shape: ONE default export `{ id, server, setup }` and no named exports.
// - OpenCode >= 1.4 (1.18.x included) sees a default object with `id`/`server`, loads it as a
//   v1 PluginModule and calls `server` once; it never looks at named exports on that path.
// - Loaders that fall back to "call every export" would call a named export AND the default's
//   `server`, registering us twice. With no named exports there is nothing to call twice.
// - OpenCode 2.x (`Plugin.define({ id, setup })`) calls `setup(ctx)`.
// Whatever happens, a throw here must never break OpenCode: every failure is a notice.

import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const HARNESS = "opencode";
const SHIM_VERSION = "1";
const ID = "firstmate";

const NO_SESSION = "no OpenCode session seen yet";
const HEADLESS_NOTE =
  "Firstmate: `opencode run` ends after its first turn, so supervision is off here; " +
  "use the OpenCode TUI or `opencode serve`.";
const UNSUPPORTED_NOTE =
  "Firstmate: this OpenCode build is not supported (its plugins get no event.subscribe " +
  "and session.promptAsync); supervision is off (see docs/harnesses/opencode.md).";

// Options of `opencode` that take a value, so `opencode --log-level DEBUG run` finds `run`.
const VALUE_OPTIONS = new Set([
  "--log-level", "--model", "-m", "--agent", "--port", "--hostname", "--prompt", "--session",
  "-s", "--print-logs-level",
]);

/** Whether the harness argv is a headless `opencode run` (disposed after its first idle). */
function isHeadlessRun(argv) {
  const words = Array.isArray(argv) ? argv.slice(1) : [];
  for (let i = 0; i < words.length; i++) {
    const word = String(words[i]);
    if (VALUE_OPTIONS.has(word)) {
      i++;
      continue;
    }
    if (word.startsWith("-")) continue;
    // The script or binary path(s) a runtime puts in front (bun, node, a compiled binary).
    if (word.includes("/") || word.includes("\\")) continue;
    return word === "run";
  }
  return false;
}

// Project install: .opencode/plugins/firstmate.js with .opencode/firstmate/{bridge-client.mjs,
// launch.json}. npm package: the client sits next to this file and there is no launch.json.
function packaged(dir) {
  return existsSync(new URL("./bridge-client.mjs", dir));
}

/** Where the client and launch.json are: `{client, launchDir}` (launchDir null: none to read). */
function layout(dir) {
  if (packaged(dir)) return { client: new URL("./bridge-client.mjs", dir), launchDir: null };
  const support = new URL("../firstmate/", dir);
  return {
    client: new URL("bridge-client.mjs", support),
    launchDir: support.protocol === "file:" ? fileURLToPath(support) : null,
  };
}

function message(error) {
  return String(error?.message ?? error).split("\n", 1)[0].slice(0, 500);
}

function fieldsOf(event) {
  return event?.properties ?? event?.data ?? event?.payload ?? {};
}

/** Build a shim runtime; `deps` replace the real world in tests. */
function build(deps = {}) {
  const here = deps.moduleUrl ?? new URL(".", import.meta.url);
  const argv = deps.argv ?? process.argv;
  const env = deps.env ?? process.env;
  const state = deps.state ?? {};
  state.sessions ??= new Map(); // session id -> "busy" | "idle"
  state.started ??= new Set(); // session ids a session_start named
  state.said ??= new Set(); // one-shot notices already shown

  let sessionApi = null; // object with promptAsync (v1 SDK client.session, or a 2.x ctx)
  const toStderr = (_level, text) => {
    try {
      process.stderr.write(`${text}\n`);
    } catch {
      // nowhere to say it
    }
  };
  let show = toStderr;

  const notify = (level, text) => {
    try {
      show(level, text);
    } catch {
      // a notice must never break the harness
    }
  };
  const notifyOnce = (key, level, text) => {
    if (state.said.has(key)) return;
    state.said.add(key);
    notify(level, text);
  };

  // The TUI shows a toast; OpenCode's own log keeps the line for a headless `opencode serve`.
  // Never stderr once OpenCode gives us a client: it would draw over the TUI.
  function toastVia(client) {
    const tui = client?.tui;
    if (typeof tui?.showToast !== "function") return;
    const app = client?.app;
    const variants = { info: "info", warn: "warning", error: "error" };
    show = (level, text) => {
      try {
        Promise.resolve(
          tui.showToast({ body: { message: text, variant: variants[level] ?? "info" } }),
        ).catch(() => toStderr(level, text));
      } catch {
        toStderr(level, text);
      }
      try {
        if (typeof app?.log === "function") {
          const body = { service: "firstmate", level, message: text };
          Promise.resolve(app.log({ body })).catch(() => {});
        }
      } catch {
        // the log is a convenience
      }
    };
  }

  const quietly = (promise) => {
    Promise.resolve(promise).catch((error) => notify("warn", `Firstmate: ${message(error)}`));
  };

  async function deliver(text, session) {
    const id = session || state.lastSession;
    if (!id) return { ok: false, detail: NO_SESSION };
    const api = sessionApi;
    if (typeof api?.promptAsync !== "function") {
      return { ok: false, detail: "this OpenCode build has no session.promptAsync" };
    }
    const parts = [{ type: "text", text }];
    try {
      let result;
      // The v2 SDK flattens the request (`promptAsync(parameters, options)`); v1 takes one
      // options object with `path` and `body`.
      if (api.promptAsync.length >= 2) {
        result = await api.promptAsync({ sessionID: id, parts });
      } else {
        try {
          result = await api.promptAsync({ path: { id }, body: { parts } });
        } catch (error) {
          if (!(error instanceof TypeError)) throw error;
          result = await api.promptAsync({ sessionID: id, parts });
        }
      }
      if (result?.error) {
        const detail = result.error?.data?.message ?? result.error?.message ?? result.error;
        return { ok: false, detail: `promptAsync failed: ${message(typeof detail === "string" ? detail : JSON.stringify(detail))}` };
      }
      return { ok: true, detail: `promptAsync accepted for session ${id}` };
    } catch (error) {
      return { ok: false, detail: `promptAsync threw: ${message(error)}` };
    }
  }

  async function connect() {
    if (state.client && !state.closed) {
      state.client.setDeliver?.(deliver);
      state.client.setNotify?.(notify);
      return state.client;
    }
    state.closed = false;
    state.sessions.clear();
    state.started.clear();
    state.lastSession = undefined;
    const where = layout(here);
    // Tests hand in their own client module.
    const mod = await (deps.loadClient ?? ((url) => import(url.href)))(where.client);
    const options = {
      harness: HARNESS,
      launch: mod.resolveLaunch(where.launchDir, env, HARNESS),
      shimVersion: SHIM_VERSION,
      notify,
      deliver,
    };
    const client = mod.getClient(HARNESS, () => mod.createClient(options));
    // A client made by an earlier load of this file keeps working for this one.
    client.setDeliver?.(deliver);
    client.setNotify?.(notify);
    state.client = client;
    if (!state.exitHook) {
      state.exitHook = true;
      (deps.process ?? process).once?.("exit", () => shutdown());
    }
    quietly(client.sessionStart("startup", ""));
    return client;
  }

  function shutdown() {
    const client = state.client;
    if (!client || state.closed) return;
    state.closed = true;
    // The quit line is written before close() ends the bridge's stdin, so the bridge reads it
    // first; its reply is not waited for (nothing here acts on it, and at process exit there is
    // no later turn of the event loop to wait in).
    try {
      quietly(client.sessionShutdown("quit"));
    } catch {
      // a dead client still gets closed
    }
    try {
      client.close();
    } catch {
      // already gone
    }
  }

  function touch(session) {
    const client = state.client;
    if (!client || state.closed || !session) return null;
    state.lastSession = session;
    if (!state.started.has(session)) {
      state.started.add(session);
      quietly(client.sessionStart("startup", session));
    }
    return client;
  }

  function idle(session) {
    const client = touch(session);
    // OpenCode announces each idle twice (session.status and session.idle): forward one per
    // busy -> idle transition.
    if (!client || state.sessions.get(session) === "idle") return;
    state.sessions.set(session, "idle");
    client.idle(session);
  }

  function busy(session) {
    const client = touch(session);
    if (!client || state.sessions.get(session) === "busy") return;
    state.sessions.set(session, "busy");
    client.busy(session);
  }

  function onEvent(event) {
    try {
      const type = event?.type;
      const fields = fieldsOf(event);
      const session = fields.sessionID ?? fields.sessionId;
      switch (type) {
        case "session.status": {
          const status = fields.status?.type ?? fields.status;
          if (status === "idle") idle(session);
          else if (status === "busy" || status === "retry") busy(session);
          break;
        }
        case "session.idle": // deprecated twin of session.status idle
        case "session.execution.succeeded": // 2.x
        case "session.execution.interrupted":
        case "session.execution.failed":
          idle(session);
          break;
        case "session.execution.started":
          busy(session);
          break;
        case "server.instance.disposed":
          shutdown();
          break;
        default:
          break;
      }
    } catch (error) {
      notify("warn", `Firstmate: ignored an OpenCode event: ${message(error)}`);
    }
  }

  // OpenCode 1.x: `server(input)` returns the hooks.
  async function server(input) {
    try {
      if (isHeadlessRun(argv)) {
        notifyOnce("headless", "info", HEADLESS_NOTE);
        return {};
      }
      toastVia(input?.client);
      sessionApi = input?.client?.session ?? null;
      await connect();
      return { event: async ({ event } = {}) => onEvent(event) };
    } catch (error) {
      notifyOnce("load", "error", `Firstmate: could not start the bridge: ${message(error)}`);
      return {};
    }
  }

  // OpenCode 2.x: `setup(ctx)` subscribes to events itself.
  async function setup(ctx) {
    try {
      if (isHeadlessRun(argv)) {
        notifyOnce("headless", "info", HEADLESS_NOTE);
        return;
      }
      toastVia(ctx?.client);
      const api = [ctx?.session, ctx?.client?.session].find(
        (candidate) => typeof candidate?.promptAsync === "function",
      );
      const events = ctx?.event;
      if (!api || typeof events?.subscribe !== "function") {
        notifyOnce("unsupported", "warn", UNSUPPORTED_NOTE);
        return;
      }
      sessionApi = api;
      await connect();
      events.subscribe((event) => onEvent(event));
    } catch (error) {
      notifyOnce("load", "error", `Firstmate: could not start the bridge: ${message(error)}`);
    }
  }

  return { id: ID, server, setup };
}

// One process-wide state: if OpenCode ever called us twice (two project instances in one
// `opencode serve`), both share the bridge and the idle dedupe.
const STATE = Symbol.for("firstmate.opencode.shim");
globalThis[STATE] ??= {};

const plugin = build({ state: globalThis[STATE] });
// Tests build isolated runtimes; non-enumerable so no loader sees an extra key.
Object.defineProperty(plugin, "forTesting", { value: build, enumerable: false });
Object.defineProperty(plugin, "isHeadlessRun", { value: isHeadlessRun, enumerable: false });

export default plugin;
