// Load a TypeScript shim on Node 20 (no native TS): transpile it with the `typescript` package
// from /work/main/.node-cache (installed by tests/shims/run.sh), write it into a fresh temp
// directory next to the sibling files it imports, and import it from there.
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { pathToFileURL } from "node:url";

import { CLIENT_PATH, REPO } from "./helpers.mjs";

const require = createRequire(join(REPO, ".node-cache", "package.json"));

let ts;
function typescript() {
  ts ??= require("typescript");
  return ts;
}

/**
 * Transpile `tsPath` to `<tmp>/index.mjs`, copy `bridge-client.mjs` beside it (as the installer
 * does), write any extra `files` ({name: text}), and import the module. With `into` (an
 * installed extension directory), write `index.mjs` there instead and copy nothing: the shim
 * then reads that directory's own `launch.json` and `bridge-client.mjs`.
 * Returns {module, dir}.
 */
export async function loadTs(tsPath, { files = {}, client = true, into = null } = {}) {
  const source = readFileSync(tsPath, "utf8");
  const out = typescript().transpileModule(source, {
    compilerOptions: {
      module: typescript().ModuleKind.ESNext,
      target: typescript().ScriptTarget.ES2022,
    },
    fileName: basename(tsPath),
    reportDiagnostics: true,
  });
  if (out.diagnostics?.length) {
    const text = out.diagnostics.map((d) => typescript().flattenDiagnosticMessageText(d.messageText, "\n"));
    throw new Error(`${tsPath} does not transpile: ${text.join("; ")}`);
  }
  const dir = into ?? mkdtempSync(join(tmpdir(), "fm-shim-"));
  if (client && !into) copyFileSync(CLIENT_PATH, join(dir, "bridge-client.mjs"));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  const target = join(dir, "index.mjs");
  writeFileSync(target, out.outputText);
  const module = await import(pathToFileURL(target).href);
  return { module, dir };
}
