// Firstmate's crew extension for omp, written by `fm crew spawn` into this crew's own launch
// directory and loaded only by the crew's session (`omp -e <this file>`). It records every turn
// end of the crew with `fm crew turn-ended NAME` (the argv below is filled in at spawn), so the
// captain's watcher hears of it. It never arms a watcher: a crew reports, the captain is woken.

// @ts-ignore -- Node's own module; omp loads this file with Bun, no type declarations needed.
import { spawn } from "node:child_process";

const TURN_ENDED: string[] = __FM_TURN_ENDED_ARGV__;

type OmpApi = { on(event: string, handler: (event: unknown) => unknown): void };

function record(): void {
  try {
    const child = spawn(TURN_ENDED[0], TURN_ENDED.slice(1), { stdio: "ignore" });
    child.on("error", () => {}); // a report that cannot run must never end the crew's session
    child.unref();
  } catch {
    // the same: nothing here may throw into omp
  }
}

export default function firstmateCrew(pi: OmpApi): void {
  // agent_settled (if omp ever sends it) fires once a turn is truly done; agent_end also before each
  // automatic retry, so it counts only until agent_settled has been seen.
  let settled = false;
  pi.on("agent_settled", () => {
    settled = true;
    record();
  });
  pi.on("agent_end", () => {
    if (!settled) record();
  });
}
