// The shared bridge client against a real fake bridge process (tests/shims/fake-bridge.mjs).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { EventEmitter } from "node:events";
import {
  chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { PassThrough } from "node:stream";
import { after, before, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import { CLIENT_PATH, eventually, keepAlive } from "./helpers.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const FAKE = join(HERE, "fake-bridge.mjs");
const { createClient, getClient, restartDelay, PROTOCOL, dirOf, findFm, resolveLaunch, within } =
  await import(pathToFileURL(CLIENT_PATH).href);

const FAST = { baseMs: 10, maxMs: 40, maxRestarts: 3, windowMs: 600000, stableMs: 600000 };

let stopKeepAlive;
let scratch;
before(() => {
  stopKeepAlive = keepAlive();
  scratch = mkdtempSync(join(tmpdir(), "fm-client-"));
});
after(() => {
  stopKeepAlive();
  rmSync(scratch, { recursive: true, force: true });
});

let counter = 0;
function rig({ mode = "", backoff = FAST, deliver, spawnImpl, launch, requestTimeoutMs } = {}) {
  const log = join(scratch, `log-${++counter}.jsonl`);
  const notices = [];
  const spawns = [];
  const client = createClient({
    harness: "pi",
    launch: launch || [process.execPath, FAKE],
    shimVersion: "test-1",
    notify: (level, text) => notices.push({ level, text }),
    deliver,
    backoff,
    requestTimeoutMs,
    env: { ...process.env, FAKE_BRIDGE_LOG: log, FAKE_BRIDGE_MODE: mode },
    spawnImpl: (cmd, args, opts) => {
      spawns.push({ cmd, args, opts });
      return (spawnImpl || spawn)(cmd, args, opts);
    },
  });
  const lines = () =>
    existsSync(log)
      ? readFileSync(log, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l))
      : [];
  return { client, notices, spawns, lines };
}

test("hello is the first line, with the protocol fields and the holder pid", async () => {
  const { client, lines, spawns } = rig();
  const reply = await client.status();
  assert.equal(reply.ok, true);
  assert.equal(reply.state, "empty");
  const got = lines();
  assert.equal(got[0].type, "_spawn");
  assert.equal(got[0].holder, String(process.pid));
  const hello = got[1];
  assert.equal(hello.type, "hello");
  assert.equal(hello.protocol, PROTOCOL);
  assert.equal(hello.harness, "pi");
  assert.equal(hello.shim, "test-1");
  assert.equal(hello.pid, process.pid);
  assert.equal(hello.cwd, process.cwd());
  assert.deepEqual(hello.argv, process.argv);
  assert.equal(hello.restart, false);
  // Spawned without a shell, argv split as given.
  assert.equal(spawns.length, 1);
  assert.equal(spawns[0].cmd, process.execPath);
  assert.deepEqual(spawns[0].args, [FAKE]);
  assert.deepEqual(spawns[0].opts.stdio, ["pipe", "pipe", "pipe"]);
  assert.equal(spawns[0].opts.shell, undefined);
  assert.equal(client.welcome.delivery, "followUp");
  client.close();
});

test("requests carry distinct string ids and resolve on their own reply", async () => {
  const { client, lines } = rig();
  const [a, b] = await Promise.all([client.sessionStart("startup", "s1"), client.status()]);
  assert.equal(a.text, "session_start 1");
  assert.equal(b.state, "empty");
  const second = await client.sessionStart("new", "s2");
  assert.equal(second.text, "session_start 2");
  assert.equal(client.generation, 2);
  client.busy("s2");
  client.idle("s2");
  const shut = await client.sessionShutdown("quit");
  assert.equal(shut.text, "session_shutdown 2");
  const sent = lines().filter((l) => !l.type.startsWith("_"));
  const ids = sent.filter((l) => "id" in l).map((l) => l.id);
  assert.ok(ids.every((id) => typeof id === "string" && id.length <= 64));
  assert.equal(new Set(ids).size, ids.length);
  const starts = sent.filter((l) => l.type === "session_start");
  assert.deepEqual(starts.map((s) => [s.generation, s.reason, s.session]),
    [[1, "startup", "s1"], [2, "new", "s2"]]);
  assert.deepEqual(sent.filter((l) => l.type === "busy" || l.type === "idle")
    .map((l) => [l.type, l.generation, l.session, "id" in l]),
    [["busy", 2, "s2", false], ["idle", 2, "s2", false]]);
  assert.deepEqual(sent.find((l) => l.type === "session_shutdown"),
    { type: "session_shutdown", generation: 2, reason: "quit", id: sent.at(-1).id });
  client.close();
});

test("deliver calls the current handler and answers delivered ok", async () => {
  const calls = [];
  const { client, lines } = rig({
    deliver: async (text, session) => {
      calls.push([text, session]);
      return { ok: true, detail: "accepted" };
    },
  });
  await client.sessionStart("startup", "s1");
  const reply = await client.arm();
  assert.deepEqual(JSON.parse(reply.text), { ok: true, detail: "accepted", id: `d${reply.id}` });
  assert.deepEqual(calls, [["WAKE", "s-bridge"]]);
  // A swapped handler (a rebound module) takes the next delivery.
  const later = [];
  client.setDeliver((text) => {
    later.push(text);
    return { ok: true, detail: "second" };
  });
  const again = await client.arm();
  assert.equal(JSON.parse(again.text).detail, "second");
  assert.deepEqual(later, ["WAKE"]);
  assert.equal(calls.length, 1);
  const delivered = lines().filter((l) => l.type === "delivered");
  assert.equal(delivered.length, 2);
  client.close();
});

test("a delivery that throws synchronously or rejects is answered ok:false", async () => {
  const { client } = rig({
    deliver: () => {
      throw new Error("This extension ctx is stale after session replacement");
    },
  });
  const sync = JSON.parse((await client.arm()).text);
  assert.equal(sync.ok, false);
  assert.match(sync.detail, /ctx is stale/);
  client.setDeliver(async () => {
    throw new Error("rejected later");
  });
  const rejected = JSON.parse((await client.arm()).text);
  assert.deepEqual([rejected.ok, rejected.detail], [false, "rejected later"]);
  client.setDeliver(() => Promise.reject("a bare string"));
  const bare = JSON.parse((await client.arm()).text);
  assert.deepEqual([bare.ok, bare.detail], [false, "a bare string"]);
  // A handler returning nothing counts as accepted.
  client.setDeliver(() => undefined);
  assert.equal(JSON.parse((await client.arm()).text).ok, true);
  client.close();
});

test("non-JSON lines and over-long lines are skipped; split messages are joined", async () => {
  const { client, notices } = rig({ mode: "garbage" });
  const reply = await client.status();
  assert.equal(reply.ok, true);
  await eventually(() => notices.length === 1);
  assert.deepEqual(notices, [{ level: "info", text: "after garbage" }]);
  client.close();
});

test("a notice is shown through the current notify", async () => {
  const { client, notices } = rig({ mode: "notice" });
  const swapped = [];
  client.setNotify((level, text) => swapped.push([level, text]));
  await client.status();
  await eventually(() => swapped.length === 1);
  assert.deepEqual(swapped, [["warn", "hello from the bridge"]]);
  assert.equal(notices.length, 0);
  client.close();
});

test("a request the bridge cannot answer in time resolves failed", async () => {
  const { client } = rig({ mode: "silent", requestTimeoutMs: 300 });
  const reply = await client.status();
  assert.equal(reply.ok, false);
  assert.equal(reply.state, "failed");
  assert.match(reply.text, /did not answer/);
  client.close();
});

test("a dead bridge is restarted once, re-greeted and given the last session_start", async () => {
  const marker = join(scratch, "crashed-once");
  const { client, notices, lines } = rig({ mode: `crash-after-start:${marker}` });
  const first = await client.sessionStart("startup", "s1");
  assert.equal(first.ok, false);
  assert.equal(first.state, "failed");
  await eventually(() => lines().filter((l) => l.type === "hello").length === 2);
  await eventually(() => lines().filter((l) => l.type === "session_start").length === 2);
  const hellos = lines().filter((l) => l.type === "hello");
  assert.deepEqual(hellos.map((h) => h.restart), [false, true]);
  const starts = lines().filter((l) => l.type === "session_start");
  assert.deepEqual(starts.map((s) => [s.generation, s.reason, s.session]),
    [[1, "startup", "s1"], [1, "startup", "s1"]]);
  assert.notEqual(starts[0].id, starts[1].id);
  const status = await client.status();
  assert.equal(status.ok, true);
  assert.equal(client.generation, 1);
  assert.equal(notices.length, 1);
  assert.equal(notices[0].level, "warn");
  assert.match(notices[0].text, /fm bridge pi stopped \(exit 3: fake bridge: crashing on purpose\)/);
  client.close();
});

test("a bridge that keeps dying is announced once and given up on once", async () => {
  const { client, notices, spawns, lines } = rig({ mode: "crash-always" });
  const reply = await client.sessionStart("startup", "s1");
  assert.equal(reply.state, "failed");
  await eventually(() => notices.some((n) => n.level === "error"));
  // One spawn plus maxRestarts (3) restarts, then nothing more.
  assert.equal(spawns.length, 4);
  assert.deepEqual(notices.map((n) => n.level), ["warn", "error"]);
  assert.match(notices[1].text, /supervision is off; run fm doctor$/);
  assert.equal(client.alive, false);
  const after = await client.arm();
  assert.equal(after.state, "failed");
  assert.match(after.text, /gave up/);
  client.idle("s1");
  assert.equal(spawns.length, 4);
  assert.equal(lines().filter((l) => l.type === "_spawn").length, 4);
  assert.equal(notices.length, 2);
  client.close();
});

test("a bridge program that is not there says once what to install, and is never restarted", async () => {
  const program = join(scratch, "no-such-fm");
  const { client, notices, spawns } = rig({ launch: [program, "bridge", "pi"] });
  const reply = await client.status();
  assert.equal(reply.state, "failed");
  await eventually(() => notices.length > 0);
  assert.deepEqual(notices, [{
    level: "error",
    text: `firstmate: ${program} not found, so fm bridge pi cannot start and supervision is off; ` +
      "install the Python side with: pipx install --include-deps firstmate-plugin-pi " +
      "(or pip install firstmate-plugin-pi), then restart pi",
  }]);
  // Given up at once: later calls start nothing and say nothing more.
  const again = await client.sessionStart("startup", "s1");
  assert.equal(again.state, "failed");
  client.idle("s1");
  assert.equal(spawns.length, 1);
  assert.equal(notices.length, 1);
  assert.equal(client.alive, false);
  client.close();
});

test("a spawnImpl that throws ENOENT is the same missing program", async () => {
  const { client, notices, spawns } = rig({
    launch: ["fm", "bridge", "pi"],
    spawnImpl: () => {
      throw Object.assign(new Error("spawn fm ENOENT"), { code: "ENOENT" });
    },
  });
  assert.equal((await client.status()).state, "failed");
  assert.equal(notices.length, 1);
  assert.match(notices[0].text, /^firstmate: fm not found, .* pipx install --include-deps firstmate-plugin-pi /);
  await client.status();
  assert.equal(spawns.length, 1);
  client.close();
});

test("fm without the harness's plugin says the bridge's reason once, and is never restarted", async () => {
  const { client, notices, spawns } = rig({ mode: "no-plugin" });
  const reply = await client.sessionStart("startup", "s1");
  assert.equal(reply.state, "failed");
  await eventually(() => notices.length > 0);
  assert.deepEqual(notices, [{
    level: "error",
    text: "firstmate: fm bridge pi cannot start (fm: no installed plugin gives 'pi' a bridge; " +
      "install it with pip install firstmate-plugin-pi); supervision is off",
  }]);
  assert.equal((await client.arm()).state, "failed");
  assert.equal(spawns.length, 1);
  assert.equal(notices.length, 1);
  client.close();
});

test("exit 5 from a bridge that had welcomed us is an ordinary crash: it is restarted", async () => {
  const marker = join(scratch, `crashed-5-${++counter}`);
  const { client, notices, lines } = rig({ mode: `crash-after-start:${marker},exit-code:5` });
  await client.sessionStart("startup", "s1");
  await eventually(() => lines().filter((l) => l.type === "hello").length === 2);
  assert.equal((await client.status()).ok, true);
  assert.deepEqual(notices.map((n) => n.level), ["warn"]);
  assert.match(notices[0].text, /stopped \(exit 5: fake bridge: crashing on purpose\); restarting it/);
  client.close();
});

test("a spawnImpl that throws never throws into the caller", async () => {
  const { client, notices } = rig({
    spawnImpl: () => {
      throw new Error("spawn refused");
    },
  });
  const reply = await client.sessionStart("startup", "");
  assert.equal(reply.state, "failed");
  await eventually(() => notices.some((n) => n.level === "error"));
  assert.match(notices[0].text, /spawn refused/);
  client.close();
});

test("the restart delay doubles from 0.5 s and stops at 8 s", () => {
  const delays = [1, 2, 3, 4, 5, 6, 50, 5000].map((n) => restartDelay(n));
  assert.deepEqual(delays, [500, 1000, 2000, 4000, 8000, 8000, 8000, 8000]);
  assert.deepEqual([1, 2, 3, 4].map((n) => restartDelay(n, FAST)), [10, 20, 40, 40]);
});

test("close ends the bridge's stdin and stops restarts", async () => {
  const { client, lines, notices, spawns } = rig();
  await client.sessionStart("startup", "s1");
  assert.equal(client.alive, true);
  client.close();
  assert.equal(client.alive, false);
  await eventually(() => lines().some((l) => l.type === "_eof"));
  const reply = await client.status();
  assert.equal(reply.state, "failed");
  assert.equal(spawns.length, 1);
  assert.equal(notices.length, 0);
});

test("getClient returns the live client across a module re-evaluation", async () => {
  // Two copies of the file are two module instances on every runtime (Bun ignores a ?query).
  const copies = [1, 2].map((n) => {
    const path = join(scratch, `bridge-client-${n}.mjs`);
    copyFileSync(CLIENT_PATH, path);
    return pathToFileURL(path).href;
  });
  const first = await import(copies[0]);
  const second = await import(copies[1]);
  assert.notEqual(first, second);
  let made = 0;
  const factory = () => {
    made += 1;
    return first.createClient({ harness: "reeval", launch: [process.execPath, FAKE] });
  };
  const a = first.getClient("reeval", factory);
  const b = second.getClient("reeval", factory);
  assert.equal(a, b);
  assert.equal(made, 1);
  assert.equal(globalThis[Symbol.for("firstmate.bridge.reeval")], a);
  // A closed client (the harness quit) is replaced, not reused.
  a.close();
  const c = second.getClient("reeval", factory);
  assert.notEqual(c, a);
  assert.equal(made, 2);
  c.close();
});

// --- a scripted in-memory bridge (spawnImpl), for byte-exact framing and timeouts -------------

function memoryBridge() {
  const child = new EventEmitter();
  child.stdin = new PassThrough();
  child.stdout = new PassThrough();
  child.stderr = new PassThrough();
  const received = [];
  let buffered = "";
  child.stdin.on("data", (data) => {
    buffered += data;
    let nl;
    while ((nl = buffered.indexOf("\n")) !== -1) {
      received.push(JSON.parse(buffered.slice(0, nl)));
      buffered = buffered.slice(nl + 1);
    }
  });
  return { child, received, send: (bytes) => child.stdout.write(bytes) };
}

test("framing is by bytes: a character split across chunks and a line at the cap", async () => {
  const bridge = memoryBridge();
  const notices = [];
  const client = createClient({
    harness: "pi", launch: ["fm", "bridge", "pi"], notify: (l, t) => notices.push(t),
    spawnImpl: () => bridge.child,
  });
  client.status(); // starts the (in-memory) bridge
  const line = Buffer.from(JSON.stringify({ type: "notice", level: "info", text: "Grüße ✓" }) + "\n");
  const cut = line.indexOf(Buffer.from("✓")) + 1; // inside the 3-byte character
  bridge.send(line.subarray(0, cut));
  bridge.send(line.subarray(cut));
  await eventually(() => notices.length === 1);
  assert.deepEqual(notices, ["Grüße ✓"]);
  // A line of exactly 1 MiB (without its newline) is read; one byte more is dropped.
  const pad = (n) => {
    const head = '{"type":"notice","level":"info","text":"';
    const tail = '"}';
    return head + "y".repeat(n - head.length - tail.length) + tail;
  };
  bridge.send(pad(1024 * 1024 + 1) + "\n");
  bridge.send(pad(1024 * 1024) + "\n");
  await eventually(() => notices.length === 2);
  assert.equal(notices[1].length, 1024 * 1024 - '{"type":"notice","level":"info","text":""}'.length);
  client.close();
});

test("a delivery that never settles is answered exactly once, ok:false", async () => {
  const bridge = memoryBridge();
  const client = createClient({
    harness: "pi", launch: ["fm"], requestTimeoutMs: 200, spawnImpl: () => bridge.child,
    deliver: () => new Promise(() => {}),
  });
  client.idle("s"); // starts the bridge
  bridge.send(JSON.stringify({ type: "deliver", id: "d1", generation: 0, text: "W", session: "s" }) + "\n");
  await eventually(() => bridge.received.some((m) => m.type === "delivered"));
  const answers = bridge.received.filter((m) => m.type === "delivered");
  assert.deepEqual(answers.map((m) => [m.id, m.ok]), [["d1", false]]);
  assert.match(answers[0].detail, /did not accept the delivery within 200 ms/);
  client.close();
});

test("an error answer to a request resolves it as failed with the bridge's message", async () => {
  const bridge = memoryBridge();
  const client = createClient({ harness: "pi", launch: ["fm"], spawnImpl: () => bridge.child });
  const pending = client.arm();
  await eventually(() => bridge.received.some((m) => m.type === "arm"));
  const { id } = bridge.received.find((m) => m.type === "arm");
  bridge.send(JSON.stringify({ type: "error", id: null, message: "bad line" }) + "\n");
  bridge.send(JSON.stringify({ type: "error", id, message: "wrong protocol" }) + "\n");
  assert.deepEqual(await pending, { ok: false, state: "failed", text: "wrong protocol" });
  client.close();
});

test("a missing launch argv is a failed bridge, never an exception", async () => {
  const notices = [];
  const client = createClient({
    harness: "pi", launch: undefined, notify: (level) => notices.push(level),
    backoff: { ...FAST, maxRestarts: 1 },
  });
  assert.equal((await client.status()).state, "failed");
  await eventually(() => notices.includes("error"));
  assert.deepEqual(notices, ["warn", "error"]);
  client.close();
});

test("a dead bridge's late lines are ignored; its replacement gets hello restart:true", async () => {
  const bridges = [memoryBridge(), memoryBridge()];
  let spawned = 0;
  const calls = [];
  const client = createClient({
    harness: "pi", launch: ["fm"], backoff: FAST, spawnImpl: () => bridges[spawned++].child,
    deliver: (text) => calls.push(text),
  });
  await Promise.race([client.sessionStart("startup", "s"), Promise.resolve()]);
  bridges[0].child.emit("exit", 1, null);
  await eventually(() => spawned === 2 && bridges[1].received.length >= 2);
  bridges[0].send(JSON.stringify({ type: "deliver", id: "old", generation: 1, text: "late", session: "" }) + "\n");
  bridges[1].send(JSON.stringify({ type: "deliver", id: "new", generation: 1, text: "fresh", session: "" }) + "\n");
  await eventually(() => bridges[1].received.some((m) => m.type === "delivered"));
  assert.deepEqual(calls, ["fresh"]);
  assert.deepEqual(bridges[1].received.map((m) => [m.type, m.restart ?? m.generation ?? m.id]),
    [["hello", true], ["session_start", 1], ["delivered", "new"]]);
  assert.equal(bridges[0].received.filter((m) => m.type === "delivered").length, 0);
  client.close();
});

// --- the helpers the shims share ------------------------------------------------------------

test("resolveLaunch: launch.json in the directory, else FIRSTMATE_BRIDGE_ARGV, else fm", () => {
  const dir = mkdtempSync(join(scratch, "launch-"));
  const env = { FIRSTMATE_BRIDGE_ARGV: '["/opt/fm", "bridge", "opencode"]' };
  assert.deepEqual(resolveLaunch(dir, env, "opencode"), ["/opt/fm", "bridge", "opencode"]);
  writeFileSync(join(dir, "launch.json"), '{"argv": ["/py", "-m", "firstmate", "bridge", "opencode"]}');
  assert.deepEqual(resolveLaunch(dir, env, "opencode"), ["/py", "-m", "firstmate", "bridge", "opencode"]);
  // A directory of null (an npm package) never reads a launch.json.
  assert.deepEqual(resolveLaunch(null, env, "opencode"), ["/opt/fm", "bridge", "opencode"]);
  writeFileSync(join(dir, "launch.json"), '{"argv": ["fm", ""]}');
  assert.deepEqual(resolveLaunch(dir, { FIRSTMATE_BRIDGE_ARGV: '["fm", 3]' }, "opencode"),
    ["fm", "bridge", "opencode"]);
  assert.deepEqual(resolveLaunch(dir, undefined, "opencode"), ["fm", "bridge", "opencode"]);
});

test("findFm: FIRSTMATE_FM, fm on PATH, pipx's bin and venvs, then the plugin's app", () => {
  const home = mkdtempSync(join(scratch, "home-"));
  const make = (path, mode = 0o755) => {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, "#!/bin/sh\n");
    chmodSync(path, mode);
    return path;
  };
  const venv = "venvs/firstmate-plugin-pi/bin/fm";
  const app = make(join(home, "apps", "firstmate-pi"));
  const old = make(join(home, ".local", "pipx", venv));
  const env = { HOME: home, PATH: `${join(home, "nothing")}:${join(home, "apps")}` };
  assert.equal(findFm(env, "pi"), old);
  assert.equal(findFm(env, "omp"), null);
  rmSync(old);
  assert.equal(findFm(env, "pi"), app);
  make(old);
  const fresh = make(join(home, ".local", "share", "pipx", venv));
  assert.equal(findFm(env, "pi"), fresh);
  const custom = make(join(home, "pipx-home", venv));
  assert.equal(findFm({ ...env, PIPX_HOME: join(home, "pipx-home") }, "pi"), custom);
  const bin = make(join(home, ".local", "bin", "fm"));
  assert.equal(findFm(env, "pi"), bin);
  const onPath = make(join(home, "path-bin", "fm"));
  make(join(home, "not-runnable", "fm"), 0o644);
  mkdirSync(join(home, "a-dir", "fm"), { recursive: true });
  const path = [join(home, "not-runnable"), join(home, "a-dir"), join(home, "path-bin")].join(":");
  assert.equal(findFm({ ...env, PATH: path }, "pi"), onPath);
  const pinned = make(join(home, "pinned", "fm"));
  assert.equal(findFm({ ...env, PATH: path, FIRSTMATE_FM: pinned }, "pi"), pinned);
  // A FIRSTMATE_FM that cannot run is passed over, not trusted.
  assert.equal(findFm({ ...env, PATH: path, FIRSTMATE_FM: join(home, "gone") }, "pi"), onPath);
  assert.equal(findFm({}, "pi"), null);
  // resolveLaunch uses it after launch.json and FIRSTMATE_BRIDGE_ARGV.
  assert.deepEqual(resolveLaunch(null, { ...env, PATH: path }, "pi"), [onPath, "bridge", "pi"]);
});

test("the plugin's own app is found on PATH when pipx exposed only it", () => {
  const home = mkdtempSync(join(scratch, "home-"));
  mkdirSync(join(home, "apps"));
  const app = join(home, "apps", "firstmate-omp");
  writeFileSync(app, "#!/bin/sh\n");
  chmodSync(app, 0o755);
  assert.equal(findFm({ HOME: home, PATH: join(home, "apps") }, "omp"), app);
  assert.equal(findFm({ HOME: home, PATH: join(home, "apps") }, "pi"), null);
});

test("dirOf gives a module's directory, or the fallback when it has no URL", () => {
  assert.equal(dirOf(() => pathToFileURL(CLIENT_PATH).href), dirname(CLIENT_PATH));
  assert.equal(dirOf(() => undefined, "/from/cjs"), "/from/cjs");
  assert.equal(dirOf(() => { throw new Error("no import.meta"); }), null);
});

test("within: the outcome, else the timeout value; an isolated timer when one is offered", async () => {
  assert.equal(await within(Promise.resolve("done"), 60000, "late"), "done");
  await assert.rejects(within(Promise.reject(new Error("refused")), 60000, "late"), /refused/);
  assert.equal(await within(new Promise(() => {}), 10, "late"), "late");
  const set = [];
  const cleared = [];
  const timers = {
    setTimeout: (fn, ms) => (set.push(ms), setTimeout(fn, ms)),
    clearTimer: (handle) => { cleared.push(handle); clearTimeout(handle); },
  };
  assert.equal(await within(new Promise(() => {}), 10, "late", timers), "late");
  assert.equal(await within(Promise.resolve(1), 60000, "late", timers), 1);
  assert.deepEqual([set, cleared.length], [[10, 60000], 1]);
  // A ctx whose timer gives no handle, or throws, falls back to a raw timer.
  assert.equal(await within(new Promise(() => {}), 10, "late", { setTimeout: () => undefined }), "late");
  const broken = { setTimeout: () => { throw new Error("stale ctx"); } };
  assert.equal(await within(new Promise(() => {}), 10, "late", broken), "late");
});
