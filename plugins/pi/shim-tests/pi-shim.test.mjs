// The Pi shim driven by a fake Pi API: what it forwards, how it delivers, its tool, its launch.
// The tests it shares with the omp shim are in tests/shims/pi-family.mjs.
import assert from "node:assert/strict";
import { test } from "node:test";

import { clearClient, fakeCtx, fakePi, installFakeClient } from "../../../tests/shims/fakes.mjs";
import { eventually } from "../../../tests/shims/helpers.mjs";
import {
  realBridgeTest, sharedTests, shimUnderTest, withFakeBridge,
} from "../../../tests/shims/pi-family.mjs";

const under = shimUnderTest("pi");
const { shim } = under;

sharedTests("pi", under);

test("session_start forwards Pi's reason and session id, startup when it has none", async () => {
  const client = installFakeClient("pi");
  const { pi, emit } = fakePi();
  shim().default(pi);
  await emit("session_start", { reason: "reload" }, fakeCtx("s-a"));
  await emit("session_start", {}, fakeCtx("s-b"));
  await emit("session_start", { reason: "something-new" }, fakeCtx("s-c"));
  await emit("session_start", undefined, {});
  assert.deepEqual(client.calls.filter((c) => c[0] === "sessionStart"), [
    ["sessionStart", "reload", "s-a"],
    ["sessionStart", "startup", "s-b"],
    ["sessionStart", "unknown", "s-c"],
    ["sessionStart", "startup", ""],
  ]);
});

test("session_shutdown forwards the reason; quit (or none) also closes the client", async () => {
  const client = installFakeClient("pi");
  const { pi, emit } = fakePi();
  shim().default(pi);
  await emit("session_shutdown", { reason: "new" }, fakeCtx());
  assert.deepEqual(client.calls.slice(-1), [["sessionShutdown", "new"]]);
  await emit("session_shutdown", {}, fakeCtx());
  assert.deepEqual(client.calls.slice(-2), [["sessionShutdown", "quit"], ["close"]]);
});

test("deliver uses a follow-up, or a plain prompt when the bridge says prompt", async () => {
  const client = installFakeClient("pi", { welcome: { delivery: "followUp" } });
  const { pi, sent } = fakePi();
  shim().default(pi);
  assert.deepEqual(await client.deliver("WAKE 1", "s1"), { ok: true, detail: "queued as follow-up" });
  client.welcome = { delivery: "prompt" };
  assert.deepEqual(await client.deliver("WAKE 2", "s1"), { ok: true, detail: "prompted" });
  assert.deepEqual(sent, [["WAKE 1", { deliverAs: "followUp" }], ["WAKE 2"]]);
});

test("end to end: the shim, the real client and a bridge process", async () => {
  clearClient("pi");
  let stale = false;
  const sendUserMessage = () => {
    if (stale) throw new Error("This extension ctx is stale after session replacement or reload");
  };
  await withFakeBridge(under.load, { apiOptions: { sendUserMessage } }, async ({ sent, tools, emit, lines }) => {
    await emit("session_start", { reason: "startup" }, fakeCtx("s-live"));
    await eventually(() => lines().some((l) => l.type === "session_start"));
    const [spawned, hello, start] = lines();
    assert.equal(spawned.holder, String(process.pid));
    assert.deepEqual([hello.type, hello.harness, hello.restart], ["hello", "pi", false]);
    assert.deepEqual([start.generation, start.reason, start.session], [1, "startup", "s-live"]);
    const armed = await tools[0].execute("c1", {});
    assert.deepEqual(JSON.parse(armed.content[0].text).ok, true);
    assert.deepEqual(sent, [["WAKE", { deliverAs: "followUp" }]]);
    stale = true;
    const refused = JSON.parse((await tools[0].execute("c2", {})).content[0].text);
    assert.equal(refused.ok, false);
    assert.match(refused.detail, /ctx is stale/);
    await emit("session_shutdown", {}, fakeCtx("s-live"));
    await eventually(() => lines().some((l) => l.type === "_eof"));
    assert.equal(lines().find((l) => l.type === "session_shutdown").reason, "quit");
  });
});

realBridgeTest("pi", {
  delivery: "followUp",
  // Pi says quit: the shim itself ends the bridge's stdin.
  afterShutdown: (client) => eventually(() => client.closed, 15000, "the client to close"),
});
