#!/usr/bin/env bash
# Sets up and starts sly-agent-q for a new user: installs what is missing (Debian's Emacs, SBCL,
# SLIME; npm dependencies), builds the server, then opens Emacs in the terminal with SBCL running
# under SLIME and the agent's chat open. See README.md for giving it a model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-deps.sh
node scripts/build.mjs
exec "${EMACS:-emacs}" -nw -Q -L lisp-elisp -l scripts/run.el "$@"
