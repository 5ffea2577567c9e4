#!/usr/bin/env bash
# The chat on a real terminal: `make run` (emacs -nw) under tmux, SBCL under SLIME, the mock LLM
# as the model; each test types as a user types and asserts what `tmux capture-pane` shows.
# SAQ_TUI_SNAPSHOTS=DIR keeps each test's named screens there (the README's captures come from it).
# Usage: test/tui/run.sh [FILE-test.el ...]. Ends with one line: tui: N passed, N failed, N skipped.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/../.." || exit 2
. test/ert-run.sh

if ! command -v tmux >/dev/null 2>&1; then
  ert_skip "tui" "tmux is not installed (scripts/ensure-deps.sh installs it)"
  ert_summary tui
  exit
fi
if [ "$#" -gt 0 ]; then files=("$@"); else files=("$here"/*-test.el); fi
for f in "${files[@]}"; do
  ert_run "tui $(basename "$f" .el)" "$f"
done
ert_summary tui
