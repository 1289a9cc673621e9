// Build the vendored layout bundle shipped in the Python package:
//   cd mas_orchestra/studio/frontend && npm ci && npm run build
// writes ../static/vendor/dagre.min.js and ../static/vendor/dagre.LICENSE.txt (commit both).
import { build } from "esbuild";
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const require = createRequire(import.meta.url);
const pkgDir = dirname(require.resolve("@dagrejs/dagre/package.json"));
const version = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")).version;
const out = new URL("../static/vendor/", import.meta.url).pathname;

await build({
  entryPoints: [new URL("entry.js", import.meta.url).pathname],
  bundle: true,
  minify: true,
  format: "iife",
  target: "es2019",
  legalComments: "none",
  banner: { js: `/* @dagrejs/dagre ${version} (MIT), bundled with esbuild; license: dagre.LICENSE.txt */` },
  outfile: join(out, "dagre.min.js"),
});
// The bundle contains dagre and its dependency graphlib (both MIT): ship both notices.
const graphlibDir = dirname(createRequire(join(pkgDir, "package.json")).resolve("@dagrejs/graphlib/package.json"));
const notice = [pkgDir, graphlibDir].map((dir) => {
  const meta = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  return `${meta.name} ${meta.version}\n\n${readFileSync(join(dir, "LICENSE"), "utf8").trim()}\n`;
});
writeFileSync(join(out, "dagre.LICENSE.txt"), notice.join("\n----------------------------------------\n\n"));
console.log(`wrote ${out}dagre.min.js (@dagrejs/dagre ${version})`);
