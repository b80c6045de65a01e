// The client half of the bridge protocol (docs/bridge.md), shared by the Pi, omp and OpenCode
// shims. It has no policy: it starts `fm bridge <harness>`, forwards what the shim reports,
// performs the deliveries the bridge asks for, and restarts a dead bridge with bounded backoff.
// Plain ES module with no dependencies, so it runs on Node 20 and on Bun without a build step.
//
// Nothing here ever throws into the harness: requests resolve (never reject) and every harness
// callback is called inside try/catch. The end of the file holds the policy-free helpers the
// shims share (the launch argv, timeouts, and calls into Pi and omp's extension API).

import { spawn as nodeSpawn } from "node:child_process";
import { accessSync, constants as fsConstants, readFileSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const PROTOCOL = 1;

/** Longest line accepted from the bridge, in bytes (docs/bridge.md: at most 1 MiB). */
export const MAX_LINE_BYTES = 1024 * 1024;

const DEFAULT_BACKOFF = Object.freeze({
  baseMs: 500,
  maxMs: 8000,
  maxRestarts: 5,
  windowMs: 600000,
  // A restarted bridge that has welcomed us and stayed up this long ends the failure episode,
  // so a later death is announced again and the backoff starts small again.
  stableMs: 30000,
});

const REQUEST_TIMEOUT_MS = 30000;

/** `fm`'s exit status when no installed plugin gives the harness a bridge (docs/cli.md). */
const EXIT_PLUGIN = 5;

/** How to install the Python side of `harness` (the Claude plugin's launcher says the same). */
export function installCommand(harness) {
  const dist = `firstmate-plugin-${harness}`;
  return `pipx install --include-deps ${dist} (or pip install ${dist})`;
}

/**
 * The delay before the `attempt`-th restart (1-based) of one failure episode: `baseMs` doubling
 * up to `maxMs`.
 */
export function restartDelay(attempt, backoff = DEFAULT_BACKOFF) {
  const opts = { ...DEFAULT_BACKOFF, ...backoff };
  const n = Math.max(1, Math.floor(attempt));
  // Cap the exponent so a long episode cannot overflow into Infinity before the min().
  return Math.min(opts.maxMs, opts.baseMs * 2 ** Math.min(n - 1, 30));
}

/** The client living on globalThis for `harness`, made by `factory` when none is alive. */
export function getClient(harness, factory) {
  // A module re-evaluation (Pi /reload) sees a fresh module scope but the same globalThis, so
  // the live bridge and its generation counter survive it.
  const key = Symbol.for(`firstmate.bridge.${harness}`);
  const existing = globalThis[key];
  if (existing && !existing.closed) return existing;
  const client = factory();
  globalThis[key] = client;
  return client;
}

function unref(handle) {
  try {
    if (handle && typeof handle.unref === "function") handle.unref();
  } catch {
    // Bun and Node differ in which handles can be unref'd; a missing one only costs liveness.
  }
  return handle;
}

/** Run `fn` once `proc`'s stderr has been read to its end (at most a second from now). */
function afterStderr(proc, fn) {
  let done = false;
  const once = () => {
    if (done) return;
    done = true;
    fn();
  };
  const stream = proc.stderr;
  if (!stream || stream.readableEnded || stream.destroyed) return once();
  stream.once("end", once);
  stream.once("close", once);
  unref(setTimeout(once, 1000));
}

function failed(text) {
  return { ok: false, state: "failed", text };
}

function describe(err) {
  if (err && typeof err === "object" && "message" in err) return String(err.message);
  return String(err);
}

export function createClient(options = {}) {
  const {
    harness,
    shimVersion = "0",
    spawnImpl = nodeSpawn,
    env = process.env,
    requestTimeoutMs = REQUEST_TIMEOUT_MS,
  } = options;
  const launch = Array.isArray(options.launch) ? options.launch.map(String) : [];
  const program = launch[0] ?? "(no bridge command)";
  const backoff = { ...DEFAULT_BACKOFF, ...(options.backoff || {}) };
  let notify = options.notify || (() => {});
  let deliver = options.deliver || (async () => ({ ok: false, detail: "no delivery handler" }));

  let child = null; // the running bridge process, or null
  let closed = false;
  let gaveUp = false;
  let restarting = false; // a failure episode is open
  let episodeRestarts = 0;
  let announced = false; // the current episode's restart notice was shown
  let restartTimer = null;
  let stableTimer = null;
  const restartTimes = [];
  let generation = 0;
  let lastStart = null; // the last session_start, re-sent to a restarted bridge
  let welcome = null;
  let nextId = 0;
  const pending = new Map(); // id -> {resolve, timer}
  let lastStderr = "";

  function safeNotify(level, text) {
    try {
      const result = notify(level, text);
      if (result && typeof result.catch === "function") result.catch(() => {});
    } catch {
      // A stale UI handle must not break supervision.
    }
  }

  function write(message) {
    if (!child || !child.stdin || child.stdin.destroyed) return false;
    try {
      child.stdin.write(JSON.stringify(message) + "\n");
      return true;
    } catch {
      return false;
    }
  }

  function settle(id, reply) {
    const entry = pending.get(id);
    if (!entry) return;
    pending.delete(id);
    clearTimeout(entry.timer);
    entry.resolve(reply);
  }

  function failPending(text) {
    for (const id of [...pending.keys()]) settle(id, failed(text));
  }

  function request(message) {
    return new Promise((resolve) => {
      const gone = () => failed(`fm bridge ${harness} gave up; supervision is off; run fm doctor`);
      if (closed) return resolve(failed("the bridge client is closed"));
      if (gaveUp) return resolve(gone());
      ensureRunning();
      if (!child) return resolve(gaveUp ? gone() : failed(`fm bridge ${harness} is restarting`));
      const id = `r${++nextId}`;
      const timer = unref(setTimeout(() => {
        settle(id, failed(`fm bridge ${harness} did not answer within ${requestTimeoutMs} ms`));
      }, requestTimeoutMs));
      pending.set(id, { resolve, timer });
      if (!write({ ...message, id })) settle(id, failed(`fm bridge ${harness} is not running`));
    });
  }

  function event(message) {
    if (closed || gaveUp) return;
    ensureRunning();
    write(message);
  }

  async function performDeliver(message, proc) {
    const id = message.id;
    let answered = false;
    const answer = (ok, detail) => {
      if (answered) return;
      answered = true;
      clearTimeout(timer);
      // Only the bridge that asked knows this id; a restarted one resurfaces the row itself.
      if (child === proc) write({ type: "delivered", id, ok, detail });
    };
    // A harness call that never settles still gets exactly one answer.
    const timer = unref(setTimeout(() => {
      answer(false, `the harness did not accept the delivery within ${requestTimeoutMs} ms`);
    }, requestTimeoutMs));
    try {
      // The async wrapper turns a synchronous throw into a rejection caught below.
      const result = await (async () => deliver(String(message.text ?? ""), message.session ?? ""))();
      if (result && typeof result === "object" && typeof result.ok === "boolean") {
        answer(result.ok, String(result.detail ?? ""));
      } else {
        answer(true, "");
      }
    } catch (err) {
      answer(false, describe(err));
    }
  }

  function onMessage(message, proc) {
    if (!message || typeof message !== "object" || Array.isArray(message)) return;
    switch (message.type) {
      case "welcome":
        welcome = message;
        if (restarting) {
          clearTimeout(stableTimer);
          stableTimer = unref(setTimeout(endEpisode, backoff.stableMs));
        }
        return;
      case "reply":
        settle(message.id, message);
        return;
      case "error":
        if (message.id != null) {
          settle(message.id, failed(String(message.message ?? "the bridge refused the request")));
        }
        return;
      case "deliver":
        // performDeliver catches everything; the extra catch keeps a bug here off the harness.
        performDeliver(message, proc).catch(() => {});
        return;
      case "notice":
        safeNotify(String(message.level ?? "info"), String(message.text ?? ""));
        return;
      default:
        return;
    }
  }

  function lineReader(proc, stream) {
    let chunks = [];
    let size = 0;
    let skipping = false; // inside an over-long line: drop bytes up to its newline
    const take = (buf) => {
      if (skipping) return;
      if (size + buf.length > MAX_LINE_BYTES) {
        chunks = [];
        size = 0;
        skipping = true;
        return;
      }
      chunks.push(buf);
      size += buf.length;
    };
    stream.on("data", (data) => {
      let buf = typeof data === "string" ? Buffer.from(data) : data;
      let nl;
      while ((nl = buf.indexOf(10)) !== -1) {
        take(buf.subarray(0, nl));
        const line = skipping ? null : Buffer.concat(chunks, size).toString("utf8");
        chunks = [];
        size = 0;
        skipping = false;
        buf = buf.subarray(nl + 1);
        if (line === null) continue;
        let message;
        try {
          message = JSON.parse(line);
        } catch {
          continue; // not JSON: the protocol ignores it
        }
        // A dead bridge's late lines must not reach the one that replaced it.
        if (child !== proc) continue;
        try {
          onMessage(message, proc);
        } catch {
          // Never let one bad message end the reader.
        }
      }
      if (buf.length) take(buf);
    });
    stream.on("error", () => {});
  }

  /** A program that is not there: the Python side is missing, and no restart can help. */
  function missing() {
    giveUp();
    safeNotify(
      "error",
      `firstmate: ${program} not found, so fm bridge ${harness} cannot start and supervision ` +
        `is off; install the Python side with: ${installCommand(harness)}, then restart ${harness}`,
    );
  }

  function spawnBridge(restart) {
    let proc;
    try {
      proc = spawnImpl(launch[0], launch.slice(1), {
        stdio: ["pipe", "pipe", "pipe"],
        env: { ...env, FM_SESSION_HOLDER_PID: String(process.pid) },
      });
    } catch (err) {
      if (err?.code === "ENOENT") missing();
      else onExit(null, `could not start ${program}: ${describe(err)}`);
      return;
    }
    child = proc;
    let ended = false;
    let said = ""; // this process's last stderr line
    const end = (detail) => {
      if (ended) return;
      ended = true;
      if (child === proc) onExit(proc, detail);
    };
    proc.on("error", (err) => {
      if (err?.code === "ENOENT" && !ended && child === proc) {
        ended = true;
        missing();
        return;
      }
      end(`could not run ${program}: ${describe(err)}`);
    });
    proc.on("exit", (code, signal) => {
      // fm runs but will not bridge this harness before it ever welcomed us (its plugin is not
      // installed, or is disabled): a restart cannot help, so say its reason once and stop. The
      // reason is its last stderr line, which may still be in flight when it exits.
      if (code === EXIT_PLUGIN && welcome === null && child === proc && !ended) {
        ended = true;
        giveUp();
        afterStderr(proc, () => safeNotify(
          "error",
          `firstmate: fm bridge ${harness} cannot start (${said || `exit ${code}`}); ` +
            "supervision is off",
        ));
        return;
      }
      end(signal ? `killed by ${signal}` : `exit ${code}`);
    });
    if (proc.stdin) proc.stdin.on("error", () => {}); // EPIPE from a dying bridge
    if (proc.stdout) lineReader(proc, proc.stdout);
    if (proc.stderr) {
      // The bridge's stderr is for humans; keep its last line for the restart notice.
      proc.stderr.on("data", (data) => {
        const lines = String(data).split("\n").map((l) => l.trim()).filter(Boolean);
        if (lines.length) said = lastStderr = lines[lines.length - 1].slice(0, 300);
      });
      proc.stderr.on("error", () => {});
    }
    // The bridge must never keep a harness alive that is otherwise done.
    unref(proc);
    for (const stream of [proc.stdin, proc.stdout, proc.stderr]) unref(stream);
    write({
      type: "hello",
      protocol: PROTOCOL,
      harness,
      shim: shimVersion,
      pid: process.pid,
      cwd: process.cwd(),
      argv: process.argv,
      restart,
    });
    if (restart && lastStart) write({ ...lastStart, id: `r${++nextId}` });
  }

  function ensureRunning() {
    if (child || closed || gaveUp || restartTimer) return;
    spawnBridge(false);
  }

  /** Stop for good: no restarts, every waiting request answered. The caller says why. */
  function giveUp() {
    gaveUp = true;
    child = null;
    welcome = null;
    clearTimeout(stableTimer);
    clearTimeout(restartTimer);
    stableTimer = null;
    restartTimer = null;
    failPending(`fm bridge ${harness} cannot start; supervision is off`);
  }

  function endEpisode() {
    restarting = false;
    episodeRestarts = 0;
    announced = false;
  }

  function onExit(proc, detail) {
    child = null;
    welcome = null;
    clearTimeout(stableTimer);
    stableTimer = null;
    failPending(`fm bridge ${harness} ended (${detail})`);
    if (closed || gaveUp) return;
    // The bridge's last stderr line explains a failed exit ("fm: no installed plugin …"); after a
    // signal it is only whatever the bridge last logged, so it is not quoted as the cause.
    const why = lastStderr && /^exit [1-9]/.test(detail) ? `${detail}: ${lastStderr}` : detail;
    lastStderr = "";
    const now = Date.now();
    while (restartTimes.length && now - restartTimes[0] > backoff.windowMs) restartTimes.shift();
    if (restartTimes.length >= backoff.maxRestarts) {
      gaveUp = true;
      safeNotify(
        "error",
        `firstmate: fm bridge ${harness} keeps failing (${why}); ` +
          "supervision is off; run fm doctor",
      );
      return;
    }
    restarting = true;
    episodeRestarts += 1;
    if (!announced) {
      announced = true;
      safeNotify("warn", `firstmate: fm bridge ${harness} stopped (${why}); restarting it`);
    }
    restartTimes.push(now);
    restartTimer = unref(setTimeout(() => {
      restartTimer = null;
      if (!closed && !gaveUp) spawnBridge(true);
    }, restartDelay(episodeRestarts, backoff)));
  }

  const client = {
    setDeliver(fn) {
      if (typeof fn === "function") deliver = fn;
    },
    setNotify(fn) {
      if (typeof fn === "function") notify = fn;
    },
    sessionStart(reason, session) {
      generation += 1;
      lastStart = {
        type: "session_start",
        generation,
        reason: String(reason || "unknown"),
        session: String(session ?? ""),
      };
      return request(lastStart);
    },
    sessionShutdown(reason) {
      // A restarted bridge must not revive a session that already ended.
      lastStart = null;
      return request({ type: "session_shutdown", generation, reason: String(reason || "unknown") });
    },
    idle(session) {
      event({ type: "idle", generation, session: String(session ?? "") });
    },
    busy(session) {
      event({ type: "busy", generation, session: String(session ?? "") });
    },
    arm() {
      return request({ type: "arm", generation });
    },
    status() {
      return request({ type: "status" });
    },
    close() {
      if (closed) return;
      closed = true;
      clearTimeout(restartTimer);
      clearTimeout(stableTimer);
      restartTimer = null;
      failPending("the bridge client is closed");
      const proc = child;
      child = null;
      // End of stdin tells the bridge the harness is gone; it stops its arms and exits.
      try {
        if (proc && proc.stdin) proc.stdin.end();
      } catch {
        // Already gone.
      }
    },
    get generation() {
      return generation;
    },
    get alive() {
      return child !== null;
    },
    get closed() {
      return closed;
    },
    /** The bridge's last `welcome` (null before one arrives): `delivery` names the harness call. */
    get welcome() {
      return welcome;
    },
  };
  return client;
}

// --- Helpers the shims share ----------------------------------------------------------------
// Policy-free plumbing: finding the bridge command, timing a harness call, and (for Pi and omp,
// whose extension APIs match) talking to the harness without ever throwing into it.

/** How long a Pi-family delivery may take to be refused before it counts as accepted. */
export const ACCEPT_MS = 2000;

const UI_LEVEL = Object.freeze({ info: "info", warn: "warning", error: "error" });

function argvOf(value) {
  if (!Array.isArray(value) || value.length === 0) return null;
  return value.every((word) => typeof word === "string" && word !== "") ? value : null;
}

/**
 * The directory of the module whose `import.meta.url` the thunk `url` reads, or `fallback` when
 * there is none (a loader such as jiti may run the module as CommonJS without one).
 */
export function dirOf(url, fallback = null) {
  try {
    return dirname(fileURLToPath(url()));
  } catch {
    return fallback;
  }
}

function runnable(path) {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The first `fm` that can run, or null. A harness started from a desktop launcher may not have
 * pipx's bin directory on its PATH, so after `env.FIRSTMATE_FM` and `fm` on `env.PATH` come
 * pipx's default places: its bin directory, then the `firstmate-plugin-<harness>` venv (new and
 * old layouts; it holds `fm` even when pipx exposed only the plugin's app), then that app,
 * `firstmate-<harness>`, on PATH. The Claude plugin's launcher looks in the same places.
 */
export function findFm(env, harness) {
  const path = String(env?.PATH ?? "").split(":").filter(Boolean);
  const home = env?.HOME || "";
  const venv = join("venvs", `firstmate-plugin-${harness}`, "bin", "fm");
  const pipxHome = env?.PIPX_HOME || (home && join(home, ".local", "share", "pipx"));
  const candidates = [
    env?.FIRSTMATE_FM,
    ...path.map((dir) => join(dir, "fm")),
    home && join(home, ".local", "bin", "fm"),
    pipxHome && join(pipxHome, venv),
    home && join(home, ".local", "pipx", venv),
    ...path.map((dir) => join(dir, `firstmate-${harness}`)),
  ];
  return candidates.find((candidate) => candidate && runnable(candidate)) ?? null;
}

/**
 * The bridge command: the argv in `dir`/launch.json (written by `fm install`; `dir` null skips
 * it), else the JSON argv in `env.FIRSTMATE_BRIDGE_ARGV`, else `<fm> bridge <harness>` with the
 * `fm` findFm finds (plain `fm` when it finds none: starting it then says what to install).
 */
export function resolveLaunch(dir, env, harness) {
  if (dir) {
    try {
      const argv = argvOf(JSON.parse(readFileSync(join(dir, "launch.json"), "utf8"))?.argv);
      if (argv) return argv;
    } catch {
      // Absent (an npm package install) or unreadable: fall through.
    }
  }
  try {
    const argv = argvOf(JSON.parse(env?.FIRSTMATE_BRIDGE_ARGV ?? ""));
    if (argv) return argv;
  } catch {
    // Not JSON: fall through.
  }
  return [findFm(env, harness) ?? "fm", "bridge", String(harness)];
}

/**
 * Resolve with `promise`'s outcome, or with `onTimeout` once `ms` pass. `timers` (omp's ctx)
 * may offer an isolated `setTimeout`/`clearTimer`, used when it has one: omp ends the session on
 * an exception in a raw timer callback. Otherwise the timer is a plain unref'd one.
 */
export function within(promise, ms, onTimeout, timers) {
  return new Promise((resolve, reject) => {
    let timer;
    let cancel = () => {};
    try {
      if (typeof timers?.setTimeout === "function") {
        timer = timers.setTimeout(() => resolve(onTimeout), ms);
        cancel = () => {
          try {
            timers.clearTimer?.(timer);
          } catch {
            // Already cleared.
          }
        };
      }
    } catch {
      timer = undefined;
    }
    if (timer === undefined) {
      timer = unref(setTimeout(() => resolve(onTimeout), ms));
      cancel = () => clearTimeout(timer);
    }
    promise.then(
      (value) => { cancel(); resolve(value); },
      (err) => { cancel(); reject(err); },
    );
  });
}

/** `api.on(event, handler)`; a build that rejects an event name it does not know stops nothing. */
export function listen(api, event, handler) {
  try {
    api.on(event, handler);
  } catch {
    // Not an event of this build.
  }
}

/** A tool schema with no parameters: the harness's TypeBox when offered, else JSON Schema. */
export function noParameters(api) {
  try {
    const Type = api?.typebox?.Type ?? api?.typebox;
    if (typeof Type?.Object === "function") return Type.Object({});
  } catch {
    // Fall back to the plain schema.
  }
  // TypeBox 0.3x recognises its schemas by this symbol; JSON Schema validators never see it.
  return { type: "object", properties: {}, [Symbol.for("TypeBox.Kind")]: "Object" };
}

/** The session id a Pi-family ctx names, or "" (a stale ctx may throw). */
export function sessionOf(ctx) {
  try {
    const id = ctx?.sessionManager?.getSessionId?.();
    return typeof id === "string" ? id : "";
  } catch {
    return "";
  }
}

/** Show one line through a Pi-family ctx's UI when it has one, else on stderr. */
export function notifyCtx(ctx, level, text) {
  try {
    if (ctx?.hasUI !== false && typeof ctx?.ui?.notify === "function") {
      ctx.ui.notify(text, UI_LEVEL[level] ?? "info");
      return;
    }
  } catch {
    // A stale ctx: say it on stderr instead.
  }
  console.error(text);
}

/**
 * Hand `text` to a Pi-family model with `api.sendUserMessage`, as a follow-up or as a plain
 * prompt. A synchronous throw (a stale ctx) or a refusal within ACCEPT_MS rejects, which the
 * client answers ok:false; a call still open after ACCEPT_MS counts as accepted. `timers` as
 * for within().
 */
export async function sendUserMessage(api, text, followUp, timers) {
  const result = followUp
    ? api.sendUserMessage(text, { deliverAs: "followUp" })
    : api.sendUserMessage(text);
  if (result && typeof result.then === "function") {
    const accepted = Promise.resolve(result).then(() => true);
    accepted.catch(() => {}); // a refusal after we answered must not become unhandled
    await within(accepted, ACCEPT_MS, true, timers);
  }
  return { ok: true, detail: followUp ? "queued as follow-up" : "prompted" };
}

/**
 * Register the `fm_watch_arm_<harness>` tool (explicit repair: an `arm` request) on a
 * Pi-family `api`. Returns "" or, when the harness refused it, a notice for the next session.
 */
export function registerArmTool(api, client, harness) {
  const name = `fm_watch_arm_${harness}`;
  try {
    api.registerTool?.({
      name,
      label: "Firstmate: re-arm",
      description:
        "Re-arm Firstmate's watcher when supervision reports it missing or failed. " +
        "Returns one line saying what happened.",
      parameters: noParameters(api),
      async execute() {
        const reply = await client.arm();
        const text = reply.text || `fm bridge ${harness}: ${reply.state}`;
        return { content: [{ type: "text", text }], details: { ok: reply.ok, state: reply.state } };
      },
    });
    return "";
  } catch (err) {
    return `firstmate: could not register ${name} (${String(err?.message ?? err)})`;
  }
}
