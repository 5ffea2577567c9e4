// Bundles the server into one file that runs with plain node and no node_modules.
import { build } from "esbuild";

await build({
  entryPoints: ["server/main.ts"],
  outfile: "dist/sly-agent-q-server.js",
  bundle: true,
  platform: "node",
  target: "node20",
  format: "esm",
  minify: true,
  sourcemap: false,
  legalComments: "none",
  // The shebang makes the bundle the npm package's `sly-agent-q-server` bin.
  // Some CommonJS dependencies call require(); give the ESM bundle one.
  banner: { js: "#!/usr/bin/env node\nimport { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
  logLevel: "warning",
});
