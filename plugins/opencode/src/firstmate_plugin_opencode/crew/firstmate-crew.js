// Firstmate's crew plugin for OpenCode, written by `fm crew spawn` into this crew's own launch
// directory, which only the crew's session reads (OPENCODE_CONFIG_DIR names it). It records
// every turn end of the crew with `fm crew turn-ended NAME` (the argv below is filled in at
// spawn), so the captain's watcher hears of it. It never arms a watcher: a crew reports, the
// captain is woken. Nothing here may throw into OpenCode.
//
// Export shape as the Firstmate shim's: one default export `{ id, server, setup }` (OpenCode 1.x
// calls `server`, 2.x `setup`) and no named exports, so no loader registers it twice.

import { spawn } from "node:child_process";

const TURN_ENDED = __FM_TURN_ENDED_ARGV__;
const ID = "firstmate-crew";

function record() {
  try {
    const child = spawn(TURN_ENDED[0], TURN_ENDED.slice(1), { stdio: "ignore" });
    child.on("error", () => {}); // a report that cannot run must never end the crew's session
    child.unref();
  } catch {
    // the same
  }
}

function fieldsOf(event) {
  return event?.properties ?? event?.data ?? event?.payload ?? {};
}

// session id -> "busy" | "idle": OpenCode announces each idle twice (session.status and the
// deprecated session.idle), and idles a session it never saw busy at startup; one record per
// busy -> idle transition.
const sessions = new Map();

function busy(session) {
  sessions.set(session, "busy");
}

function idle(session) {
  if (sessions.get(session) !== "busy") return;
  sessions.set(session, "idle");
  record();
}

function onEvent(event) {
  try {
    const fields = fieldsOf(event);
    const session = fields.sessionID ?? fields.sessionId;
    switch (event?.type) {
      case "session.status": {
        const status = fields.status?.type ?? fields.status;
        if (status === "idle") idle(session);
        else if (status === "busy" || status === "retry") busy(session);
        break;
      }
      case "session.idle":
      case "session.execution.succeeded": // 2.x
      case "session.execution.interrupted":
      case "session.execution.failed":
        idle(session);
        break;
      case "session.execution.started":
        busy(session);
        break;
      default:
        break;
    }
  } catch {
    // an event we cannot read is not a turn end
  }
}

async function server() {
  return { event: async ({ event } = {}) => onEvent(event) };
}

async function setup(ctx) {
  try {
    ctx?.event?.subscribe?.((event) => onEvent(event));
  } catch {
    // a 2.x build without event.subscribe records nothing
  }
}

export default { id: ID, server, setup };
