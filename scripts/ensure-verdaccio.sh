#!/usr/bin/env bash
# Installs verdaccio (an npm registry) from the npm registry into the ignored .deps/verdaccio/, for
# the test that publishes the server's package to a registry on loopback and installs it the way a
# user does (M-x sly-agent-q-install-server). Prints the path of its bin. Safe to run again.
# node-fetch is pinned: verdaccio-audit asks for its dist-tag "cjs" (2.x), which not every registry
# mirror carries.
set -euo pipefail
cd "$(dirname "$0")/.."
version=6.1.6
dest="$PWD/.deps/verdaccio"
bin="$dest/node_modules/.bin/verdaccio"
if [ -x "$bin" ] && [ "$(cat "$dest/.version" 2>/dev/null)" = "$version" ]; then echo "$bin"; exit 0; fi
rm -rf "$dest" && mkdir -p "$dest"
(cd "$dest" && echo '{"private":true,"overrides":{"node-fetch":"2.7.0"}}' >package.json &&
   npm install --no-audit --no-fund --loglevel=error --no-save "verdaccio@$version" >/dev/null)
echo "$version" >"$dest/.version"
echo "$bin"
