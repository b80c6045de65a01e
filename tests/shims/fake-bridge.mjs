// A stand-in for `fm bridge <harness>` that speaks protocol 1 for the shim tests.
// FAKE_BRIDGE_LOG: file every received line is appended to (plus `_spawn` / `_eof` records).
// FAKE_BRIDGE_MODE: comma-separated behaviours (see the switch below; `exit-code:N` sets the
// status of the crash modes).
import { appendFileSync, existsSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";

const log = process.env.FAKE_BRIDGE_LOG;
const modes = (process.env.FAKE_BRIDGE_MODE || "").split(",").filter(Boolean);
const mode = (name) => modes.find((m) => m === name || m.startsWith(name + ":"));
const arg = (name) => mode(name)?.slice(name.length + 1);
const record = (obj) => log && appendFileSync(log, JSON.stringify(obj) + "\n");
const send = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

record({ type: "_spawn", pid: process.pid, holder: process.env.FM_SESSION_HOLDER_PID });

/** The status a crash mode exits with: 3 unless `exit-code:N` says otherwise. */
const crashCode = Number(arg("exit-code") ?? 3);

if (mode("crash-always")) {
  process.stderr.write("fake bridge: refusing to start\n");
  process.exit(crashCode);
}

if (mode("no-plugin")) {
  // What the real `fm bridge pi` says and does when no installed plugin bridges the harness.
  process.stderr.write("fm: no installed plugin gives 'pi' a bridge; install it with pip install firstmate-plugin-pi\n");
  process.exit(5);
}

let waiting = null; // the arm request waiting for its delivered answer

const rl = createInterface({ input: process.stdin });
rl.on("line", (line) => {
  const msg = JSON.parse(line);
  record(msg);
  switch (msg.type) {
    case "hello":
      if (mode("garbage")) {
        process.stdout.write("not json at all\n[1, 2]\n");
        process.stdout.write("x".repeat(1024 * 1024 + 10) + "\n");
        // A real message split across two writes must still be read whole.
        process.stdout.write('{"type":"notice","level":"info",');
        process.stdout.write('"text":"after garbage"}\n');
      }
      send({ type: "welcome", protocol: 1, bridge_pid: process.pid, harness: msg.harness,
             delivery: process.env.FAKE_DELIVERY || "followUp" });
      if (mode("notice")) send({ type: "notice", level: "warn", text: "hello from the bridge" });
      return;
    case "session_start":
      if (mode("crash-after-start") && !existsSync(arg("crash-after-start"))) {
        writeFileSync(arg("crash-after-start"), "");
        process.stderr.write("fake bridge: crashing on purpose\n");
        process.exit(crashCode);
      }
      break;
    case "arm":
      // Ask the shim to deliver, and answer the arm with what it reported.
      waiting = msg.id;
      send({ type: "deliver", id: "d" + msg.id, generation: msg.generation, text: "WAKE",
             session: "s-bridge" });
      return;
    case "delivered":
      if (waiting) {
        send({ type: "reply", id: waiting, ok: true, state: "started",
               text: JSON.stringify({ ok: msg.ok, detail: msg.detail, id: msg.id }) });
        waiting = null;
      }
      return;
    case "bogus":
      send({ type: "error", id: msg.id, message: "unknown type bogus" });
      return;
  }
  if (msg.id !== undefined && !mode("silent")) {
    send({ type: "reply", id: msg.id, ok: true, state: msg.type === "status" ? "empty" : "started",
           text: `${msg.type} ${msg.generation ?? ""}`.trim(), engine: {} });
  }
});
rl.on("close", () => {
  record({ type: "_eof" });
  process.exit(0);
});
