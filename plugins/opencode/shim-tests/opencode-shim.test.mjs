// The OpenCode shim against a fake OpenCode (input/ctx with a promptAsync recorder, events fed
// to the hooks) and a fake bridge client. Run: node --test plugins/opencode/shim-tests/
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import shim from "../src/firstmate_plugin_opencode/shim/firstmate.js";

// The real client module, with its createClient and getClient replaced per test.
const realClient = await import("../../../core/firstmate/shims/bridge-client.mjs");
/** A client module whose getClient always makes a fresh client with `createClient`. */
const clientModule = (createClient) => ({
  ...realClient,
  createClient,
  getClient: (_harness, make) => make(),
});

const TUI_ARGV = ["/usr/local/bin/opencode"];

function fakeClient() {
  const calls = [];
  const client = {
    calls,
    deliver: null,
    notify: null,
    closed: false,
    setDeliver(fn) { client.deliver = fn; },
    setNotify(fn) { client.notify = fn; },
    async sessionStart(reason, session) {
      calls.push(["sessionStart", reason, session]);
      return { ok: true, state: "started" };
    },
    async sessionShutdown(reason) {
      calls.push(["sessionShutdown", reason]);
      return { ok: true, state: "quit" };
    },
    idle(session) { calls.push(["idle", session]); },
    busy(session) { calls.push(["busy", session]); },
    close() { client.closed = true; calls.push(["close"]); },
  };
  return client;
}

/** A shim runtime with a fake bridge client; `made` lists every client it made. */
function harness({ argv = TUI_ARGV, env = {} } = {}) {
  const made = [];
  const proc = new EventEmitter();
  const runtime = shim.forTesting({
    argv,
    env,
    process: proc,
    moduleUrl: new URL("file:///nonexistent/.opencode/plugins/"),
    loadClient: async () => clientModule((options) => {
      const client = fakeClient();
      client.options = options;
      made.push(client);
      return client;
    }),
  });
  return { runtime, made, proc };
}

function promptRecorder({ throws, flat = false, result } = {}) {
  const sent = [];
  const session = flat
    ? { async promptAsync(parameters, _options) { sent.push(parameters); return result; } }
    : {
        async promptAsync(options) {
          sent.push(options);
          if (throws) throw throws;
          return result;
        },
      };
  return { sent, session };
}

async function v1(h, session = promptRecorder().session) {
  const hooks = await h.runtime.server({ client: { session }, directory: "/p" });
  const client = h.made.at(-1);
  const feed = (event) => hooks.event({ event });
  return { hooks, client, feed };
}

const status = (sessionID, type) => ({ type: "session.status", properties: { sessionID, status: { type } } });
const idleEvent = (sessionID) => ({ type: "session.idle", properties: { sessionID } });
const forwarded = (client) => client.calls.filter(([kind]) => kind === "idle" || kind === "busy");

test("the module has exactly one export, the default {id, server, setup}", async () => {
  const mod = await import("../src/firstmate_plugin_opencode/shim/firstmate.js");
  assert.deepEqual(Object.keys(mod), ["default"]);
  assert.deepEqual(Object.keys(mod.default).sort(), ["id", "server", "setup"]);
  assert.equal(mod.default.id, "firstmate");
  assert.equal(typeof mod.default.server, "function");
});

test("plugin load starts one bridge client and one startup session_start", async () => {
  const h = harness();
  const { client } = await v1(h);
  assert.equal(h.made.length, 1);
  assert.deepEqual(client.calls, [["sessionStart", "startup", ""]]);
  assert.equal(client.options.harness, "opencode");
  assert.deepEqual(client.options.launch, ["fm", "bridge", "opencode"]);
  assert.equal(typeof client.deliver, "function");
});

test("the launch argv comes from FIRSTMATE_BRIDGE_ARGV without a launch.json", async () => {
  const argv = ["/venv/bin/python", "-m", "firstmate", "bridge", "opencode"];
  const h = harness({ env: { FIRSTMATE_BRIDGE_ARGV: JSON.stringify(argv) } });
  const { client } = await v1(h);
  assert.deepEqual(client.options.launch, argv);
});

test("the double idle of one turn is forwarded once", async () => {
  const { client, feed } = await v1(harness());
  await feed(status("s1", "busy"));
  await feed(status("s1", "idle"));
  await feed(idleEvent("s1"));
  assert.deepEqual(forwarded(client), [["busy", "s1"], ["idle", "s1"]]);
  // The first event of a session names it in a session_start, before it is forwarded.
  assert.deepEqual(client.calls.slice(0, 2), [["sessionStart", "startup", ""], ["sessionStart", "startup", "s1"]]);
});

test("busy, idle, idle forwards one idle; the next turn forwards again", async () => {
  const { client, feed } = await v1(harness());
  for (const e of [status("s1", "busy"), status("s1", "busy"), idleEvent("s1"), status("s1", "idle"),
    status("s1", "busy"), status("s1", "idle"), idleEvent("s1")]) await feed(e);
  assert.deepEqual(forwarded(client), [["busy", "s1"], ["idle", "s1"], ["busy", "s1"], ["idle", "s1"]]);
});

test("a first idle with no busy seen counts once", async () => {
  const { client, feed } = await v1(harness());
  await feed(idleEvent("s1"));
  await feed(status("s1", "idle"));
  assert.deepEqual(forwarded(client), [["idle", "s1"]]);
});

test("two sessions are deduped independently and each gets one session_start", async () => {
  const { client, feed } = await v1(harness());
  for (const e of [status("a", "busy"), status("b", "busy"), status("a", "idle"), idleEvent("b"),
    idleEvent("a"), status("b", "idle")]) await feed(e);
  assert.deepEqual(forwarded(client), [["busy", "a"], ["busy", "b"], ["idle", "a"], ["idle", "b"]]);
  const starts = client.calls.filter(([kind]) => kind === "sessionStart").map((c) => c[2]);
  assert.deepEqual(starts, ["", "a", "b"]);
});

test("delivery uses the v1 SDK shape for the bridge's session", async () => {
  const rec = promptRecorder();
  const { client, feed } = await v1(harness(), rec.session);
  await feed(status("s1", "idle"));
  const outcome = await client.deliver("WAKE one", "s2");
  assert.equal(outcome.ok, true);
  assert.deepEqual(rec.sent, [{ path: { id: "s2" }, body: { parts: [{ type: "text", text: "WAKE one" }] } }]);
});

test("delivery without a session goes to the last session seen", async () => {
  const rec = promptRecorder();
  const { client, feed } = await v1(harness(), rec.session);
  await feed(status("s1", "idle"));
  await feed(status("s9", "busy"));
  assert.equal((await client.deliver("WAKE", "")).ok, true);
  assert.equal(rec.sent[0].path.id, "s9");
});

test("delivery before any session is ok:false and calls nothing", async () => {
  const rec = promptRecorder();
  const { client } = await v1(harness(), rec.session);
  assert.deepEqual(await client.deliver("WAKE", ""), { ok: false, detail: "no OpenCode session seen yet" });
  assert.equal(rec.sent.length, 0);
});

test("a TypeError from the v1 shape falls back to the flat v2 shape", async () => {
  const sent = [];
  const session = {
    async promptAsync(arg) {
      sent.push(arg);
      if (arg.path) throw new TypeError("sessionID is required");
      return { data: undefined };
    },
  };
  const { client } = await v1(harness(), session);
  assert.equal((await client.deliver("WAKE", "s1")).ok, true);
  assert.deepEqual(sent[1], { sessionID: "s1", parts: [{ type: "text", text: "WAKE" }] });
});

test("a v2 signature (parameters, options) gets the flat shape directly", async () => {
  const rec = promptRecorder({ flat: true });
  const { client } = await v1(harness(), rec.session);
  assert.equal((await client.deliver("WAKE", "s1")).ok, true);
  assert.deepEqual(rec.sent, [{ sessionID: "s1", parts: [{ type: "text", text: "WAKE" }] }]);
});

test("a throwing or failing promptAsync is ok:false and never escapes", async () => {
  for (const throws of [new Error("ctx is stale"), "plain string"]) {
    const rec = promptRecorder({ throws });
    const { client } = await v1(harness(), rec.session);
    const outcome = await client.deliver("WAKE", "s1");
    assert.equal(outcome.ok, false);
    assert.match(outcome.detail, /ctx is stale|plain string/);
  }
  const sync = { promptAsync(_o) { throw new Error("sync boom"); } };
  const { client } = await v1(harness(), sync);
  assert.equal((await client.deliver("WAKE", "s1")).ok, false);
  const rejected = promptRecorder({ result: { error: { data: { message: "session not found" } } } });
  const second = await v1(harness(), rejected.session);
  const outcome = await second.client.deliver("WAKE", "s1");
  assert.equal(outcome.ok, false);
  assert.match(outcome.detail, /session not found/);
});

test("server.instance.disposed sends a quit shutdown, then closes the client", async () => {
  const { client, feed } = await v1(harness());
  await feed({ type: "server.instance.disposed", properties: { directory: "/p" } });
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(client.calls.slice(-2), [["sessionShutdown", "quit"], ["close"]]);
  await feed(status("s1", "idle")); // after shutdown: nothing more is forwarded
  assert.deepEqual(forwarded(client), []);
});

test("process exit shuts the bridge down once", async () => {
  const h = harness();
  const { client } = await v1(h);
  h.proc.emit("exit", 0);
  h.proc.emit("exit", 0);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(client.calls.filter(([kind]) => kind === "sessionShutdown").length, 1);
  assert.equal(client.closed, true);
});

test("unknown and malformed events are ignored", async () => {
  const { client, feed } = await v1(harness());
  await feed({ type: "message.updated", properties: {} });
  await feed(null);
  await feed({ type: "session.status" });
  assert.deepEqual(forwarded(client), []);
});

async function captureStderr(fn) {
  const lines = [];
  const write = process.stderr.write;
  process.stderr.write = (chunk) => { lines.push(String(chunk)); return true; };
  try {
    await fn();
  } finally {
    process.stderr.write = write;
  }
  return lines;
}

test("`opencode run` creates no client and says so once", async () => {
  for (const argv of [
    ["/usr/bin/opencode", "run", "say hi"],
    ["/usr/bin/bun", "/$bunfs/root/opencode", "--log-level", "DEBUG", "run", "hi"],
  ]) {
    const h = harness({ argv });
    const lines = await captureStderr(async () => {
      assert.deepEqual(await h.runtime.server({ client: {} }), {});
      assert.deepEqual(await h.runtime.server({ client: {} }), {});
      assert.equal(await h.runtime.setup({ event: { subscribe() {} }, session: { promptAsync() {} } }), undefined);
    });
    assert.equal(h.made.length, 0);
    assert.equal(lines.length, 1);
    assert.match(lines[0], /opencode run.*TUI.*opencode serve/);
  }
});

test("argv detection: the TUI, serve and a prompt saying run are not headless", () => {
  assert.equal(shim.isHeadlessRun(["opencode"]), false);
  assert.equal(shim.isHeadlessRun(["opencode", "serve", "--port", "4096"]), false);
  assert.equal(shim.isHeadlessRun(["opencode", "--prompt", "run"]), false);
  assert.equal(shim.isHeadlessRun(["/usr/bin/opencode", "run"]), true);
});

test("a notice from the bridge goes to the TUI toast when OpenCode has one", async () => {
  const toasts = [];
  const logged = [];
  const h = harness();
  await h.runtime.server({
    client: {
      session: {},
      tui: { async showToast(req) { toasts.push(req.body); } },
      app: { async log(req) { logged.push(req.body); } },
    },
  });
  h.made[0].notify("warn", "bridge restarted");
  assert.deepEqual(toasts, [{ message: "bridge restarted", variant: "warning" }]);
  assert.deepEqual(logged, [{ service: "firstmate", level: "warn", message: "bridge restarted" }]);
  // A toast that throws falls back to stderr instead of escaping.
  const broken = harness();
  await broken.runtime.server({ client: { session: {}, tui: { showToast() { throw new Error("x"); } } } });
  const lines = await captureStderr(async () => broken.made[0].notify("error", "gave up"));
  assert.deepEqual(lines, ["gave up\n"]);
});

test("2.x setup(ctx) subscribes to events and delivers through ctx.session", async () => {
  let listener = null;
  const rec = promptRecorder();
  const h = harness();
  await h.runtime.setup({ event: { subscribe(fn) { listener = fn; } }, session: rec.session });
  const client = h.made[0];
  assert.deepEqual(client.calls, [["sessionStart", "startup", ""]]);
  listener(status("s1", "busy"));
  listener(status("s1", "idle"));
  listener(idleEvent("s1"));
  listener({ type: "session.execution.started", data: { sessionID: "s2" } });
  listener({ type: "session.execution.succeeded", data: { sessionID: "s2" } });
  assert.deepEqual(forwarded(client), [["busy", "s1"], ["idle", "s1"], ["busy", "s2"], ["idle", "s2"]]);
  assert.equal((await client.deliver("WAKE", "s1")).ok, true);
  assert.deepEqual(rec.sent, [{ path: { id: "s1" }, body: { parts: [{ type: "text", text: "WAKE" }] } }]);
});

test("2.x setup(ctx) falls back to ctx.client.session", async () => {
  const rec = promptRecorder({ flat: true });
  const h = harness();
  await h.runtime.setup({ event: { subscribe() {} }, client: { session: rec.session } });
  assert.equal((await h.made[0].deliver("WAKE", "s1")).ok, true);
  assert.deepEqual(rec.sent, [{ sessionID: "s1", parts: [{ type: "text", text: "WAKE" }] }]);
});

test("an unsupported 2.x ctx gets one notice and nothing else", async () => {
  const h = harness();
  const lines = await captureStderr(async () => {
    await h.runtime.setup({});
    await h.runtime.setup({ event: { subscribe() {} } });
    await h.runtime.setup({ session: { promptAsync() {} } });
    await h.runtime.setup(undefined);
  });
  assert.equal(h.made.length, 0);
  assert.equal(lines.length, 1);
  assert.match(lines[0], /not supported|supervision is off/);
});

test("a failing client module load fails open with one notice", async () => {
  const runtime = shim.forTesting({
    argv: TUI_ARGV,
    env: {},
    process: new EventEmitter(),
    loadClient() { throw new Error("cannot find bridge-client.mjs"); },
  });
  const lines = await captureStderr(async () => {
    assert.deepEqual(await runtime.server({ client: {} }), {});
    assert.deepEqual(await runtime.server({ client: {} }), {});
  });
  assert.equal(lines.length, 1);
  assert.match(lines[0], /could not start the bridge: cannot find bridge-client/);
});

// A stand-in `fm bridge opencode`: answers requests, and answers the first idle with a deliver;
// the `delivered` outcome comes back as a notice so the test can wait for it.
const FAKE_BRIDGE = `
import { createInterface } from "node:readline";
const send = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
let delivered = false;
for await (const line of createInterface({ input: process.stdin })) {
  const m = JSON.parse(line);
  if (m.type === "hello") send({ type: "welcome", protocol: 1, bridge_pid: process.pid, harness: m.harness, delivery: "promptAsync" });
  else if (m.id && m.type !== "delivered") send({ type: "reply", id: m.id, ok: true, state: "unchanged", text: m.type + ":" + (m.session ?? "") });
  if (m.type === "idle" && !delivered) { delivered = true; send({ type: "deliver", id: "d1", generation: m.generation, text: "WAKE-OC", session: m.session }); }
  if (m.type === "delivered") send({ type: "notice", level: "info", text: "delivered " + m.ok + " " + m.detail });
}
`;

test("installed layout: launch.json, the real bridge client and a bridge process", async () => {
  const root = mkdtempSync(join(tmpdir(), "fm-opencode-shim-"));
  let deadline;
  try {
    const plugins = join(root, ".opencode", "plugins");
    const support = join(root, ".opencode", "firstmate");
    mkdirSync(plugins, { recursive: true });
    mkdirSync(support, { recursive: true });
    const here = fileURLToPath(new URL(".", import.meta.url));
    copyFileSync(join(here, "../src/firstmate_plugin_opencode/shim/firstmate.js"), join(plugins, "firstmate.js"));
    copyFileSync(join(here, "../../../core/firstmate/shims/bridge-client.mjs"), join(support, "bridge-client.mjs"));
    const argv = [process.execPath, "--input-type=module", "-e", FAKE_BRIDGE];
    writeFileSync(join(support, "launch.json"), JSON.stringify({ argv }));
    const mod = await import(pathToFileURL(join(plugins, "firstmate.js")).href);

    const sent = [];
    let sawNotice;
    const noticed = new Promise((resolve) => { sawNotice = resolve; });
    // The client unrefs the bridge (it must never keep OpenCode alive), so this ref'd deadline
    // keeps the test's event loop running, and fails the test instead of hanging.
    deadline = setTimeout(() => sawNotice("no delivered notice within 20 s"), 20000);
    const input = {
      directory: root,
      client: {
        session: { async promptAsync(options) { sent.push(options); return { data: undefined }; } },
        tui: { async showToast({ body }) { if (body.message.startsWith("delivered")) sawNotice(body.message); } },
      },
    };
    const hooks = await mod.default.server(input);
    await hooks.event({ event: status("ses_1", "busy") });
    await hooks.event({ event: status("ses_1", "idle") });
    await hooks.event({ event: idleEvent("ses_1") });
    assert.match(await noticed, /^delivered true promptAsync accepted for session ses_1/);
    assert.deepEqual(sent, [{ path: { id: "ses_1" }, body: { parts: [{ type: "text", text: "WAKE-OC" }] } }]);
    const bridge = globalThis[Symbol.for("firstmate.bridge.opencode")];
    assert.equal(bridge.generation, 2); // the load's session_start and ses_1's
    await hooks.event({ event: { type: "server.instance.disposed", properties: {} } });
    // Deadline-free wait: the client marks itself closed once the shutdown reply settles.
    while (!bridge.closed) await new Promise((resolve) => setImmediate(resolve));
  } finally {
    clearTimeout(deadline);
    rmSync(root, { recursive: true, force: true });
  }
});

test("npm package layout: the client beside the shim, the argv from FIRSTMATE_BRIDGE_ARGV", async () => {
  const root = mkdtempSync(join(tmpdir(), "fm-opencode-npm-"));
  const saved = process.env.FIRSTMATE_BRIDGE_ARGV;
  let deadline;
  try {
    const pkg = join(root, "node_modules", "firstmate-opencode");
    mkdirSync(pkg, { recursive: true });
    // A decoy where a project install keeps launch.json: a package must not read it.
    mkdirSync(join(root, "node_modules", "firstmate"));
    writeFileSync(join(root, "node_modules", "firstmate", "launch.json"),
      JSON.stringify({ argv: ["/nonexistent/fm"] }));
    const here = fileURLToPath(new URL(".", import.meta.url));
    copyFileSync(join(here, "../src/firstmate_plugin_opencode/shim/firstmate.js"), join(pkg, "firstmate.js"));
    copyFileSync(join(here, "../../../core/firstmate/shims/bridge-client.mjs"), join(pkg, "bridge-client.mjs"));
    process.env.FIRSTMATE_BRIDGE_ARGV = JSON.stringify([process.execPath, "--input-type=module", "-e", FAKE_BRIDGE]);
    const mod = await import(pathToFileURL(join(pkg, "firstmate.js")).href);
    let sawNotice;
    const noticed = new Promise((resolve) => { sawNotice = resolve; });
    deadline = setTimeout(() => sawNotice("no delivered notice within 20 s"), 20000);
    const sent = [];
    const hooks = await mod.default.server({
      client: {
        session: { async promptAsync(options) { sent.push(options); return {}; } },
        tui: { async showToast({ body }) { if (body.message.startsWith("delivered")) sawNotice(body.message); } },
      },
    });
    await hooks.event({ event: idleEvent("ses_n") });
    assert.match(await noticed, /^delivered true/);
    assert.equal(sent[0].path.id, "ses_n");
    const bridge = globalThis[Symbol.for("firstmate.bridge.opencode")];
    await hooks.event({ event: { type: "server.instance.disposed", properties: {} } });
    assert.equal(bridge.closed, true);
  } finally {
    clearTimeout(deadline);
    if (saved === undefined) delete process.env.FIRSTMATE_BRIDGE_ARGV;
    else process.env.FIRSTMATE_BRIDGE_ARGV = saved;
    rmSync(root, { recursive: true, force: true });
  }
});

test("npm package layout with no fm anywhere: one notice saying what to install", async () => {
  const root = mkdtempSync(join(tmpdir(), "fm-opencode-nofm-"));
  const saved = { ...process.env };
  try {
    const pkg = join(root, "node_modules", "firstmate-opencode");
    mkdirSync(pkg, { recursive: true });
    const here = fileURLToPath(new URL(".", import.meta.url));
    copyFileSync(join(here, "../src/firstmate_plugin_opencode/shim/firstmate.js"), join(pkg, "firstmate.js"));
    copyFileSync(join(here, "../../../core/firstmate/shims/bridge-client.mjs"), join(pkg, "bridge-client.mjs"));
    for (const name of ["FIRSTMATE_FM", "FIRSTMATE_BRIDGE_ARGV", "PIPX_HOME"]) delete process.env[name];
    process.env.PATH = join(root, "empty-bin");
    process.env.HOME = join(root, "empty-home");
    const mod = await import(pathToFileURL(join(pkg, "firstmate.js")).href);
    const toasts = [];
    let toasted;
    const first = new Promise((resolve) => { toasted = resolve; });
    const deadline = setTimeout(() => toasted(), 20000); // ref'd: holds the loop, never hangs
    const hooks = await mod.default.server({
      client: {
        session: { async promptAsync() { return {}; } },
        tui: { async showToast({ body }) { toasts.push(body); toasted(); } },
      },
    });
    await first;
    clearTimeout(deadline);
    await hooks.event({ event: status("ses_x", "busy") });
    await hooks.event({ event: status("ses_x", "idle") });
    assert.deepEqual(toasts, [{
      variant: "error",
      message: "firstmate: fm not found, so fm bridge opencode cannot start and supervision is off; " +
        "install the Python side with: pipx install --include-deps firstmate-plugin-opencode " +
        "(or pip install firstmate-plugin-opencode), then restart opencode",
    }]);
    await hooks.event({ event: { type: "server.instance.disposed", properties: {} } });
  } finally {
    for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name];
    Object.assign(process.env, saved);
    rmSync(root, { recursive: true, force: true });
  }
});

const REPO = fileURLToPath(new URL("../../../", import.meta.url));
const PYTHONPATH = [join(REPO, "core"), join(REPO, "plugins/opencode/src"), process.env.PYTHONPATH]
  .filter(Boolean).join(":");
const python = process.env.PYTHON ?? "python3";
const havePython = spawnSync(python, ["-c", "import firstmate.cli.bridge"], {
  env: { ...process.env, PYTHONPATH },
}).status === 0;

async function until(what, check, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test("fm install opencode, then the installed shim against the real fm bridge opencode",
  { skip: havePython ? false : `${python} cannot import firstmate.cli.bridge` }, async () => {
    const root = mkdtempSync(join(tmpdir(), "fm-opencode-real-"));
    const savedPath = process.env.PYTHONPATH;
    // The client unrefs everything (it never keeps OpenCode alive); keep the test's loop alive.
    const keepAlive = setInterval(() => {}, 1000);
    try {
      const env = { ...process.env, PYTHONPATH };
      const install = spawnSync(python, ["-m", "firstmate", "install", "opencode", "--project", root,
        "--home", join(root, "home")], { env, encoding: "utf8" });
      assert.equal(install.status, 0, install.stderr);
      // The bridge child inherits the harness's environment.
      process.env.PYTHONPATH = PYTHONPATH;
      const mod = await import(pathToFileURL(join(root, ".opencode/plugins/firstmate.js")).href);
      const hooks = await mod.default.server({ directory: root, client: { session: {} } });
      await hooks.event({ event: status("ses_1", "busy") });
      await hooks.event({ event: status("ses_1", "idle") });
      const bridge = globalThis[Symbol.for("firstmate.bridge.opencode")];
      const welcome = await until("the bridge's welcome", () => bridge.welcome);
      assert.equal(welcome.delivery, "promptAsync");
      assert.equal(welcome.harness, "opencode");
      const reply = await bridge.status();
      assert.equal(reply.ok, true, reply.text);
      assert.match(reply.text, /generation 2/);
      await hooks.event({ event: { type: "server.instance.disposed", properties: {} } });
      await until("the client to close", () => bridge.closed);
      // End of stdin after the quit line: the bridge exits.
      await until("the bridge to exit", () => {
        try {
          process.kill(welcome.bridge_pid, 0);
          return false;
        } catch (error) {
          return error.code === "ESRCH";
        }
      });
    } finally {
      clearInterval(keepAlive);
      if (savedPath === undefined) delete process.env.PYTHONPATH;
      else process.env.PYTHONPATH = savedPath;
      rmSync(root, { recursive: true, force: true });
    }
  });
