#!/usr/bin/env bash
# Runs every test/elisp/*-test.el in its own `emacs -Q --batch` and sums the ERT results.
# Usage: test/elisp/run.sh [FILE-test.el ...]   (EMACS=... to pick the binary)
# Prints each file's ERT summary, then one line: elisp: N passed, N failed, N skipped.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/../.." || exit 2
. test/ert-run.sh

if [ "$#" -gt 0 ]; then files=("$@"); else files=("$here"/*-test.el); fi
for f in "${files[@]}"; do
  ert_run "$(basename "$f")" "$f"
done
ert_summary elisp
