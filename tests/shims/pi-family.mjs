// What the Pi and omp shim tests share: loading the shim, the tests whose assertions hold for both
// shims alike (parametrized by harness), and the frames of the two end-to-end tests.
import assert from "node:assert/strict";
import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { after, afterEach, before, test } from "node:test";

import { clearClient, fakeCtx, fakePi, installFakeClient } from "./fakes.mjs";
import { eventually, FAKE_BRIDGE, keepAlive, REPO } from "./helpers.mjs";
import { loadTs } from "./load-ts.mjs";
import { cannotRun, installAndLoad, processGone, python, pythonPath } from "./real-bridge.mjs";

/**
 * Set up a test file for the `harness` shim (pi or omp): transpile and load it before the tests,
 * clear the fake client after each, remove the temp directories at the end.
 * Returns `{shim, load}`: `shim()` is the module loaded first; `load(files)` loads a fresh copy
 * with extra `files` beside it and returns `{module, dir}`.
 */
export function shimUnderTest(harness) {
  const path = join(REPO, "plugins", harness, "src", `firstmate_plugin_${harness}`, "shim", "index.ts");
  const dirs = [];
  let module;
  let stopKeepAlive;
  async function load(files) {
    const loaded = await loadTs(path, { files });
    dirs.push(loaded.dir);
    return loaded;
  }
  before(async () => {
    stopKeepAlive = keepAlive();
    module = (await load()).module;
  });
  afterEach(() => clearClient(harness));
  after(() => {
    stopKeepAlive();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });
  return { shim: () => module, load };
}

/** The tests both shims pass word for word (`harness` names the tool and the default argv). */
export function sharedTests(harness, { shim, load }) {
  const key = Symbol.for(`firstmate.bridge.${harness}`);
  const tool = `fm_watch_arm_${harness}`;

  test("agent_start is busy; agent_end is idle until agent_settled shows up", async () => {
    const client = installFakeClient(harness);
    const { pi, emit } = fakePi();
    shim().default(pi);
    const ctx = fakeCtx("s1");
    await emit("agent_start", {}, ctx);
    await emit("agent_end", {}, ctx);
    await emit("agent_start", {}, ctx);
    await emit("agent_settled", {}, ctx);
    await emit("agent_start", {}, ctx);
    await emit("agent_end", {}, ctx); // ignored from now on: settled is the turn end
    await emit("agent_settled", {}, ctx);
    const turns = client.calls.filter((c) => c[0] === "busy" || c[0] === "idle").map((c) => c[0]);
    assert.deepEqual(turns, ["busy", "idle", "busy", "idle", "busy", "idle"]);
  });

  test("a build that refuses to register agent_settled still gets every other handler", async () => {
    const client = installFakeClient(harness);
    const { pi, emit, handlers } = fakePi();
    const on = pi.on;
    pi.on = (event, handler) => {
      if (event === "agent_settled") throw new Error(`unknown event ${event}`);
      on(event, handler);
    };
    assert.doesNotThrow(() => shim().default(pi));
    const expected = ["agent_end", "agent_start", "session_shutdown", "session_start"];
    if (harness === "omp") expected.push("session_before_switch", "session_switch");
    assert.deepEqual(Object.keys(handlers).sort(), expected.sort());
    await emit("agent_end", {}, fakeCtx("s1"));
    assert.deepEqual(client.calls.filter((c) => c[0] === "idle"), [["idle", "s1"]]);
  });

  test("a refused delivery fails; a slow one counts as accepted", async () => {
    const client = installFakeClient(harness);
    let behaviour;
    const { pi } = fakePi({ sendUserMessage: () => behaviour() });
    shim().default(pi);
    behaviour = () => {
      throw new Error("This extension ctx is stale after session replacement or reload");
    };
    await assert.rejects(client.deliver("W", ""), /ctx is stale/);
    behaviour = () => Promise.reject(new Error("agent is busy"));
    await assert.rejects(client.deliver("W", ""), /agent is busy/);
    // The harness may keep the promise open for the whole turn: accepted is delivered.
    let rejectLater;
    behaviour = () => new Promise((_, reject) => { rejectLater = reject; });
    assert.equal((await client.deliver("W", "")).ok, true);
    rejectLater(new Error("late")); // must not surface as an unhandled rejection
  });

  test(`the tool ${tool} asks the bridge to arm and returns its line`, async () => {
    const client = installFakeClient(harness);
    const { pi, tools } = fakePi();
    shim().default(pi);
    assert.equal(tools.length, 1);
    assert.equal(tools[0].name, tool);
    assert.equal(tools[0].parameters.type, "object");
    assert.deepEqual(tools[0].parameters.properties, {});
    const result = await tools[0].execute("call-1", {}, undefined, undefined, fakeCtx());
    assert.deepEqual(result.content, [{ type: "text", text: "watcher: armed" }]);
    assert.deepEqual(result.details, { ok: true, state: "started" });
    assert.deepEqual(client.calls.filter((c) => c[0] === "arm"), [["arm"]]);
  });

  test(`the tool's line falls back to the state; its schema comes from the harness's typebox`, async () => {
    const client = installFakeClient(harness, { armReply: { ok: false, state: "read-only", text: "" } });
    const made = [];
    const typebox = { Type: { Object: (props) => (made.push(props), { kind: "tb", props }) } };
    const { pi, tools } = fakePi({ typebox });
    shim().default(pi);
    assert.equal(tools[0].name, tool);
    assert.deepEqual(tools[0].parameters, { kind: "tb", props: {} });
    assert.equal(made.length, 1);
    const result = await tools[0].execute("c1", {});
    assert.deepEqual(result.content, [{ type: "text", text: `fm bridge ${harness}: read-only` }]);
    assert.deepEqual(result.details, { ok: false, state: "read-only" });
    assert.deepEqual(client.calls.filter((c) => c[0] === "arm"), [["arm"]]);
  });

  test("a tool registration that throws is reported at the next session start", async () => {
    installFakeClient(harness);
    const { pi, emit } = fakePi({ registerTool: () => { throw new Error("duplicate tool"); } });
    assert.doesNotThrow(() => shim().default(pi));
    const ctx = fakeCtx();
    await emit("session_start", {}, ctx);
    assert.deepEqual(ctx.notes, [["warning", `firstmate: could not register ${tool} (duplicate tool)`]]);
  });

  test("notices go to ctx.ui.notify, else to stderr", async () => {
    const client = installFakeClient(harness);
    const { pi, emit } = fakePi();
    shim().default(pi);
    const errors = [];
    const original = console.error;
    console.error = (text) => errors.push(text);
    try {
      client.notify("warn", "before any session");
      const ctx = fakeCtx();
      await emit("agent_start", {}, ctx);
      client.notify("error", "supervision is off");
      client.notify("info", "fyi");
      assert.deepEqual(ctx.notes, [["error", "supervision is off"], ["info", "fyi"]]);
      // A stale ctx whose notify throws falls back to stderr.
      await emit("agent_start", {}, { ui: { notify: () => { throw new Error("stale"); } } });
      client.notify("warn", "after stale");
      await emit("agent_start", {}, { hasUI: false, ui: { notify: () => assert.fail("no UI") } });
      client.notify("info", "print mode");
    } finally {
      console.error = original;
    }
    assert.deepEqual(errors, ["before any session", "after stale", "print mode"]);
  });

  test("installed as a package with no fm anywhere, the shim says once what to install", async () => {
    // A package install has no launch.json: the shim looks for fm itself and finds none.
    const { module, dir } = await load();
    const saved = { ...process.env };
    for (const name of ["FIRSTMATE_FM", "FIRSTMATE_BRIDGE_ARGV", "PIPX_HOME"]) delete process.env[name];
    process.env.PATH = join(dir, "empty-bin");
    process.env.HOME = join(dir, "empty-home");
    try {
      const { pi, emit } = fakePi();
      module.default(pi);
      const ctx = fakeCtx("s1");
      await emit("session_start", {}, ctx);
      await eventually(() => ctx.notes.length > 0, 15000, "the missing-fm notice");
      await emit("agent_end", {}, ctx);
      await emit("session_start", {}, ctx);
      assert.deepEqual(ctx.notes, [["error",
        `firstmate: fm not found, so fm bridge ${harness} cannot start and supervision is off; ` +
        `install the Python side with: pipx install --include-deps firstmate-plugin-${harness} ` +
        `(or pip install firstmate-plugin-${harness}), then restart ${harness}`]]);
    } finally {
      for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name];
      Object.assign(process.env, saved);
    }
  });

  test("a launch.json naming a Python that is gone says the same, naming it", async () => {
    const gone = "/nonexistent/venv/bin/python";
    const { module } = await load({
      "launch.json": JSON.stringify({ argv: [gone, "-m", "firstmate", "bridge", harness] }),
    });
    const { pi, emit } = fakePi();
    module.default(pi);
    const ctx = fakeCtx("s1");
    await emit("session_start", {}, ctx);
    await eventually(() => ctx.notes.length > 0, 15000, "the missing-Python notice");
    assert.equal(ctx.notes.length, 1);
    assert.match(ctx.notes[0][1], new RegExp(`^firstmate: ${gone} not found, .*` +
      `pipx install --include-deps firstmate-plugin-${harness} `));
  });

  test("fm that will not bridge this harness is quoted once, not restarted", { skip: cannotRun(harness) },
    async () => {
      const argv = [python, "-m", "firstmate", "bridge", harness];
      const { module } = await load({ "launch.json": JSON.stringify({ argv }) });
      const saved = process.env.FIRSTMATE_DISABLE_PLUGINS;
      const savedPath = process.env.PYTHONPATH;
      process.env.FIRSTMATE_DISABLE_PLUGINS = harness;
      process.env.PYTHONPATH = pythonPath(harness);
      try {
        const { pi, emit } = fakePi();
        module.default(pi);
        const ctx = fakeCtx("s1");
        await emit("session_start", {}, ctx);
        await eventually(() => ctx.notes.length > 0, 30000, "the bridge's refusal");
        const client = globalThis[key];
        assert.equal((await client.status()).state, "failed");
        assert.deepEqual(ctx.notes, [["error",
          `firstmate: fm bridge ${harness} cannot start (fm: the ${harness} plugin is disabled by ` +
          "FIRSTMATE_DISABLE_PLUGINS; remove it from that list); supervision is off"]]);
      } finally {
        if (saved === undefined) delete process.env.FIRSTMATE_DISABLE_PLUGINS;
        else process.env.FIRSTMATE_DISABLE_PLUGINS = saved;
        if (savedPath === undefined) delete process.env.PYTHONPATH;
        else process.env.PYTHONPATH = savedPath;
      }
    });

  test("a re-evaluated module (/reload) rebinds the live client to the new api", async () => {
    const client = installFakeClient(harness, { welcome: { delivery: "followUp" } });
    const first = fakePi();
    shim().default(first.pi);
    const again = (await load()).module;
    const second = fakePi();
    again.default(second.pi);
    assert.equal(globalThis[key], client);
    await client.deliver("WAKE", "");
    assert.equal(first.sent.length, 0);
    assert.deepEqual(second.sent, [["WAKE", { deliverAs: "followUp" }]]);
  });

  test("the launch argv comes from launch.json, else FIRSTMATE_BRIDGE_ARGV, else fm", async () => {
    const installed = ["/venv/bin/python", "-m", "firstmate", "bridge", harness];
    const { module, dir } = await load({ "launch.json": JSON.stringify({ argv: installed }) });
    const override = ["/opt/fm", "bridge", harness, "--home", "/h"];
    const env = { FIRSTMATE_BRIDGE_ARGV: JSON.stringify(override) };
    assert.deepEqual(module.resolveLaunch(dir, env), installed);
    assert.deepEqual(module.resolveLaunch(dir, {}), installed);
    const { dir: bare } = await load({ "launch.json": '{"argv": []}' });
    assert.deepEqual(module.resolveLaunch(bare, env), override);
    assert.deepEqual(module.resolveLaunch(null, env), override);
    assert.deepEqual(module.resolveLaunch(bare, { FIRSTMATE_BRIDGE_ARGV: "not json" }), ["fm", "bridge", harness]);
    assert.deepEqual(module.resolveLaunch(null, {}), ["fm", "bridge", harness]);
  });
}

/**
 * Run `body` against a fresh copy of the shim whose launch.json starts tests/shims/fake-bridge.mjs
 * (with `env` added to the environment it inherits). `body` gets the module, a fake API (see
 * fakePi, built with `apiOptions`) and `lines()`, what the bridge has read so far.
 */
export async function withFakeBridge(load, { env = {}, apiOptions } = {}, body) {
  const { module, dir } = await load({ "launch.json": JSON.stringify({ argv: [process.execPath, FAKE_BRIDGE] }) });
  const log = join(dir, "bridge.jsonl");
  const added = { FAKE_BRIDGE_LOG: log, ...env };
  for (const [name, value] of Object.entries(added)) process.env[name] = value;
  try {
    const api = fakePi(apiOptions);
    module.default(api.pi);
    const lines = () => existsSync(log)
      ? readFileSync(log, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l))
      : [];
    await body({ module, ...api, lines });
  } finally {
    for (const name of Object.keys(added)) delete process.env[name];
  }
}

/**
 * `fm install <harness>` for real, then the installed shim against the real `fm bridge`: the
 * welcome names `delivery`, status answers, and after session_shutdown (and `afterShutdown`,
 * given the client) the bridge exits.
 */
export function realBridgeTest(harness, { delivery, afterShutdown }) {
  test(`fm install ${harness}, then the installed shim against the real fm bridge ${harness}`,
    { skip: cannotRun(harness) }, async () => {
      clearClient(harness);
      const saved = process.env.PYTHONPATH;
      // The bridge inherits the harness's environment.
      process.env.PYTHONPATH = pythonPath(harness);
      let root;
      try {
        const loaded = await installAndLoad(harness, `.${harness}/extensions/firstmate`);
        root = loaded.root;
        const { pi, emit } = fakePi();
        loaded.module.default(pi);
        await emit("session_start", {}, fakeCtx("s-real"));
        const client = globalThis[Symbol.for(`firstmate.bridge.${harness}`)];
        await eventually(() => client.welcome, 30000, "the bridge's welcome");
        assert.equal(client.welcome.harness, harness);
        assert.equal(client.welcome.delivery, delivery);
        const reply = await client.status();
        assert.equal(reply.ok, true, reply.text);
        const pid = client.welcome.bridge_pid;
        await emit("session_shutdown", {}, fakeCtx("s-real"));
        await afterShutdown(client);
        await eventually(() => processGone(pid), 30000, "the bridge to exit");
      } finally {
        clearClient(harness);
        if (saved === undefined) delete process.env.PYTHONPATH;
        else process.env.PYTHONPATH = saved;
        if (root) rmSync(root, { recursive: true, force: true });
      }
    });
}
