// Firstmate's crew extension for a harness with a Pi-style extension API (`on(event, handler)`
// with `agent_end`, and `agent_settled` where the build has it): Pi and omp ship this one file.
// `fm crew spawn` writes it into the crew's own launch directory and the crew's session alone
// loads it (`<harness> -e <this file>`). It records every turn end of the crew with
// `fm crew turn-ended NAME` (the argv below is filled in at spawn), so the captain's watcher
// hears of it. It never arms a watcher: a crew reports, the captain is woken.

// @ts-ignore -- Node's own module; the harness loads this file itself (jiti, Bun), no type
// declarations needed.
import { spawn } from "node:child_process";

const TURN_ENDED: string[] = __FM_TURN_ENDED_ARGV__;

type ExtensionApi = { on(event: string, handler: (event: unknown) => unknown): void };

function record(): void {
  try {
    const child = spawn(TURN_ENDED[0], TURN_ENDED.slice(1), { stdio: "ignore" });
    child.on("error", () => {}); // a report that cannot run must never end the crew's session
    child.unref();
  } catch {
    // the same: nothing here may throw into the harness
  }
}

export default function firstmateCrew(api: ExtensionApi): void {
  // agent_settled (newer builds) fires once a turn is truly done; agent_end also before each
  // automatic retry, so it counts only until agent_settled has been seen.
  let settled = false;
  api.on("agent_settled", () => {
    settled = true;
    record();
  });
  api.on("agent_end", () => {
    if (!settled) record();
  });
}
