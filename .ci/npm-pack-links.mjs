// npm leaves symlinks out of a package, and each shim's bridge-client.mjs is a link to the one
// copy in core/firstmate/shims/. The Pi, omp and OpenCode package.json files run this around
// `npm pack` / `npm publish`:
//
//   node ../../.ci/npm-pack-links.mjs copy   (prepack)  each linked file in "files" becomes a copy
//   node ../../.ci/npm-pack-links.mjs link   (postpack) the links come back
//
// It runs in the package directory (npm's cwd for scripts) and remembers what it replaced in
// .npm-pack-links.json there, so `link` after a failed pack still restores them.
import {
  existsSync, lstatSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync,
} from "node:fs";
import { dirname, resolve } from "node:path";

const RECORD = ".npm-pack-links.json";
const [command] = process.argv.slice(2);

if (command === "copy") {
  const manifest = JSON.parse(readFileSync("package.json", "utf8"));
  const links = {};
  for (const file of manifest.files ?? []) {
    if (!existsSync(file) || !lstatSync(file).isSymbolicLink()) continue;
    links[file] = readlinkSync(file);
    const text = readFileSync(resolve(dirname(file), links[file]));
    rmSync(file);
    writeFileSync(file, text);
  }
  const earlier = existsSync(RECORD) ? JSON.parse(readFileSync(RECORD, "utf8")) : {};
  writeFileSync(RECORD, JSON.stringify({ ...earlier, ...links }, null, 2) + "\n");
} else if (command === "link") {
  if (existsSync(RECORD)) {
    for (const [file, target] of Object.entries(JSON.parse(readFileSync(RECORD, "utf8")))) {
      rmSync(file, { force: true });
      symlinkSync(target, file);
    }
    rmSync(RECORD);
  }
} else {
  console.error("usage: node npm-pack-links.mjs copy|link   (run by npm around npm pack)");
  process.exit(2);
}
