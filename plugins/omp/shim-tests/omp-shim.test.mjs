// The omp shim driven by a fake omp API: what it forwards, how it delivers, its tool, its launch.
// The tests it shares with the Pi shim are in tests/shims/pi-family.mjs.
import assert from "node:assert/strict";
import { test } from "node:test";

import { clearClient, fakeCtx, fakePi, installFakeClient } from "../../../tests/shims/fakes.mjs";
import { eventually } from "../../../tests/shims/helpers.mjs";
import {
  realBridgeTest, sharedTests, shimUnderTest, withFakeBridge,
} from "../../../tests/shims/pi-family.mjs";

const under = shimUnderTest("omp");
const { shim } = under;

sharedTests("omp", under);

test("the first session's reason comes from omp's argv; later ones are unknown", () => {
  const omp = ["/usr/bin/bun", "/x/omp"];
  assert.equal(shim().startReason([...omp], false), "startup");
  assert.equal(shim().startReason([...omp, "--model", "m", "say hi"], false), "startup");
  for (const flag of ["--resume", "-r", "--continue", "-c"]) {
    assert.equal(shim().startReason([...omp, flag], false), "resume");
  }
  assert.equal(shim().startReason([...omp, "--resume"], true), "unknown");
  assert.equal(shim().startReason([...omp], true), "unknown");
});

test("session_start sends the derived reason and the session id; event reasons are not read", async () => {
  const client = installFakeClient("omp");
  const { pi, emit } = fakePi();
  shim().default(pi);
  await emit("session_start", { reason: "fork" }, fakeCtx("s-a"));
  await emit("session_start", {}, fakeCtx("s-b"));
  const starts = client.calls.filter((c) => c[0] === "sessionStart");
  const first = process.argv.slice(2).some((w) => ["--resume", "-r", "--continue", "-c"].includes(w))
    ? "resume" : "startup";
  assert.deepEqual(starts, [["sessionStart", first, "s-a"], ["sessionStart", "unknown", "s-b"]]);
});

test("session_shutdown is always unknown and never closes the client", async () => {
  const client = installFakeClient("omp");
  const { pi, emit } = fakePi();
  shim().default(pi);
  await emit("session_shutdown", { reason: "quit" }, fakeCtx());
  await emit("session_shutdown", undefined, fakeCtx());
  assert.deepEqual(client.calls.filter((c) => c[0] === "sessionShutdown" || c[0] === "close"),
    [["sessionShutdown", "unknown"], ["sessionShutdown", "unknown"]]);
});

test("an in-place session switch is a handoff: shutdown, then start, with omp's reason", async () => {
  const client = installFakeClient("omp");
  const { pi, emit } = fakePi();
  shim().default(pi);
  await emit("session_start", {}, fakeCtx("s-a"));
  for (const reason of ["new", "resume", "fork", "sideways"]) {
    const answer = await emit("session_before_switch", { reason }, fakeCtx("s-a"));
    assert.equal(answer, undefined); // the switch is never cancelled
    await emit("session_switch", { reason, previousSessionFile: "/x" }, fakeCtx(`s-${reason}`));
  }
  const calls = client.calls.filter((c) => c[0] === "sessionShutdown" || c[0] === "sessionStart");
  assert.deepEqual(calls.slice(1), [
    ["sessionShutdown", "new"], ["sessionStart", "new", "s-new"],
    ["sessionShutdown", "resume"], ["sessionStart", "resume", "s-resume"],
    ["sessionShutdown", "fork"], ["sessionStart", "fork", "s-fork"],
    ["sessionShutdown", "unknown"], ["sessionStart", "unknown", "s-sideways"],
  ]);
});

test("a subagent's events are not the session's", async () => {
  const client = installFakeClient("omp");
  const { pi, emit } = fakePi();
  shim().default(pi);
  const sub = fakeCtx("sub-1", { agent: { kind: "sub" } });
  for (const event of ["session_start", "agent_start", "agent_end", "agent_settled", "session_shutdown"]) {
    await emit(event, {}, sub);
  }
  assert.deepEqual(client.calls.filter((c) => !c[0].startsWith("set")), []);
  const main = fakeCtx("main-1", { agent: { kind: "main" } });
  await emit("agent_start", {}, main);
  await emit("agent_end", {}, main);
  assert.deepEqual(client.calls.filter((c) => !c[0].startsWith("set")),
    [["busy", "main-1"], ["idle", "main-1"]]);
});

test("deliver prompts without deliverAs (which would only queue), unless told followUp", async () => {
  const client = installFakeClient("omp");
  const { pi, sent } = fakePi();
  shim().default(pi);
  assert.deepEqual(await client.deliver("WAKE 1", "s1"), { ok: true, detail: "prompted" });
  client.welcome = { delivery: "prompt" };
  await client.deliver("WAKE 2", "s1");
  client.welcome = { delivery: "followUp" };
  await client.deliver("WAKE 3", "s1");
  assert.deepEqual(sent, [["WAKE 1"], ["WAKE 2"], ["WAKE 3", { deliverAs: "followUp" }]]);
});

test("a slow delivery is timed with omp's isolated ctx timer", async () => {
  const client = installFakeClient("omp");
  const { pi, emit } = fakePi({ sendUserMessage: () => new Promise(() => {}) });
  shim().default(pi);
  const timers = [];
  const cleared = [];
  const ctx = fakeCtx("s1", {
    setTimeout: (fn, ms) => {
      timers.push(ms);
      const handle = setTimeout(fn, ms);
      return handle;
    },
    clearTimer: (handle) => cleared.push(handle),
  });
  await emit("agent_start", {}, ctx);
  assert.equal((await client.deliver("W", "")).ok, true);
  assert.deepEqual(timers, [2000]);
  // Refused at once: the ctx timer is cleared.
  const refusing = fakePi({ sendUserMessage: () => Promise.reject(new Error("no")) });
  shim().default(refusing.pi);
  await refusing.emit("agent_start", {}, ctx);
  await assert.rejects(client.deliver("W", ""), /no/);
  assert.equal(cleared.length, 1);
});

test("a stale ctx's throw reaches the client as a refusal", async () => {
  const client = installFakeClient("omp");
  const { pi } = fakePi({ sendUserMessage: () => { throw new Error("ctx is stale"); } });
  shim().default(pi);
  await assert.rejects(client.deliver("W", ""), /ctx is stale/);
});

test("end to end: the shim, the real client and a bridge process", async () => {
  clearClient("omp");
  await withFakeBridge(under.load, { env: { FAKE_DELIVERY: "prompt" } }, async ({ sent, tools, emit, lines }) => {
    await emit("session_start", {}, fakeCtx("s-live"));
    await eventually(() => lines().some((l) => l.type === "session_start"));
    const hello = lines().find((l) => l.type === "hello");
    assert.deepEqual([hello.harness, hello.restart], ["omp", false]);
    const armed = JSON.parse((await tools[0].execute("c1", {})).content[0].text);
    assert.equal(armed.ok, true);
    assert.deepEqual(sent, [["WAKE"]]);
    await emit("session_shutdown", {}, fakeCtx("s-live"));
    assert.equal(lines().find((l) => l.type === "session_shutdown").reason, "unknown");
    // omp exiting is the quit: the harness's end closes the bridge's stdin.
    globalThis[Symbol.for("firstmate.bridge.omp")].close();
    await eventually(() => lines().some((l) => l.type === "_eof"));
  });
});

realBridgeTest("omp", {
  delivery: "prompt",
  // omp exiting closes the bridge's stdin; here the test closes it.
  afterShutdown: (client) => client.close(),
});
