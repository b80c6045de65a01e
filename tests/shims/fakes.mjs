// Fake harness API objects and a fake bridge client for the shim tests.

/** A Pi/omp-style extension API that records what the shim registers and sends. */
export function fakePi({ sendUserMessage, registerTool, typebox } = {}) {
  const handlers = {};
  const sent = [];
  const tools = [];
  const pi = {
    on(event, handler) {
      (handlers[event] ||= []).push(handler);
    },
    sendUserMessage(...args) {
      sent.push(args);
      return sendUserMessage ? sendUserMessage(...args) : undefined;
    },
    registerTool(tool) {
      if (registerTool) registerTool(tool);
      tools.push(tool);
    },
  };
  if (typebox) pi.typebox = typebox;
  /** Fire `event` the way the harness does: every handler in order, awaited. */
  async function emit(event, payload, ctx) {
    for (const handler of handlers[event] || []) await handler(payload, ctx);
  }
  return { pi, handlers, sent, tools, emit };
}

/** A harness ctx with a session id and a UI whose notifications are recorded. */
export function fakeCtx(session = "sess-1", extra = {}) {
  const notes = [];
  return {
    notes,
    hasUI: true,
    ui: { notify: (message, type) => notes.push([type, message]) },
    sessionManager: { getSessionId: () => session },
    ...extra,
  };
}

/** A bridge client that records calls; installed where getClient(harness) will find it. */
export function installFakeClient(harness, { welcome = null, armReply } = {}) {
  const calls = [];
  let generation = 0;
  const client = {
    calls,
    deliver: null,
    notify: null,
    welcome,
    closed: false,
    get generation() {
      return generation;
    },
    setDeliver(fn) {
      calls.push(["setDeliver"]);
      client.deliver = fn;
    },
    setNotify(fn) {
      calls.push(["setNotify"]);
      client.notify = fn;
    },
    async sessionStart(reason, session) {
      generation += 1;
      calls.push(["sessionStart", reason, session]);
      return { ok: true, state: "started", text: "" };
    },
    async sessionShutdown(reason) {
      calls.push(["sessionShutdown", reason]);
      return { ok: true, state: "handoff", text: "" };
    },
    idle(session) {
      calls.push(["idle", session]);
    },
    busy(session) {
      calls.push(["busy", session]);
    },
    async arm() {
      calls.push(["arm"]);
      return armReply || { ok: true, state: "started", text: "watcher: armed" };
    },
    async status() {
      return { ok: true, state: "empty" };
    },
    close() {
      calls.push(["close"]);
      client.closed = true;
    },
  };
  globalThis[Symbol.for(`firstmate.bridge.${harness}`)] = client;
  return client;
}

export function clearClient(harness) {
  const key = Symbol.for(`firstmate.bridge.${harness}`);
  const client = globalThis[key];
  if (client && typeof client.close === "function") client.close();
  delete globalThis[key];
}
