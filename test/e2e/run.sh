#!/usr/bin/env bash
# End-to-end suite: the spec's scenarios with a real SBCL under SLIME (and SLY when SLY_DIR names a
# SLY checkout), the real bundled server and the mock LLM; then the package installed from its
# archive. Ends with one line: e2e: N passed, N failed[, N skipped].
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
emacs="${EMACS:-emacs}"
cd "$root" || exit 2

passed=0 failed=0 skipped=0
run_ert() { # LABEL FILE [ENV...]
  local label=$1 file=$2; shift 2
  local out rc summary e u s
  out="$(env "$@" "$emacs" -Q --batch -L "$root/lisp-elisp" -L "$root/test/elisp" -l "$file" -f ert-run-tests-batch-and-exit 2>&1)"
  rc=$?
  summary="$(printf '%s\n' "$out" | grep -E '^Ran [0-9]+ tests?, ' | tail -n 1)"
  if [ -z "$summary" ]; then
    printf '%s\n' "$out" | tail -n 40
    echo "$label: did not run to the end (exit $rc)"
    failed=$((failed + 1))
    return
  fi
  e="$(sed -E 's/.* ([0-9]+) results? as expected.*/\1/' <<<"$summary")"
  u="$(sed -E 's/.* ([0-9]+) unexpected.*/\1/' <<<"$summary")"
  s=0
  grep -qE '[0-9]+ skipped' <<<"$summary" && s="$(sed -E 's/.* ([0-9]+) skipped.*/\1/' <<<"$summary")"
  if [ "$u" != 0 ] || [ "$rc" != 0 ]; then
    printf '%s\n' "$out" | grep -E -A 14 '^Test .* condition:' | head -n 120
  fi
  printf '%s\n' "$out" | grep -E '^ +(passed|FAILED|skipped) '
  echo "$label: ${summary%% (*}"
  passed=$((passed + e)) failed=$((failed + u)) skipped=$((skipped + s))
  if [ "$u" = 0 ] && [ "$rc" != 0 ]; then failed=$((failed + 1)); fi
}

run_ert "e2e slime" "$here/sly-agent-q-e2e-test.el" SLY_AGENT_Q_E2E_LISP=slime
if [ -n "${SLY_DIR:-}" ] && [ -d "${SLY_DIR}" ]; then
  run_ert "e2e sly" "$here/sly-agent-q-e2e-test.el" SLY_AGENT_Q_E2E_LISP=sly
else
  echo "SKIP e2e with SLY: SLY's source is not available (set SLY_DIR to a SLY checkout)"
fi

# The package archive, installed with package-install-file into an empty package-user-dir.
if "$emacs" -Q --batch -l scripts/make-package.el -f sly-agent-q-make-package >/dev/null 2>&1; then
  run_ert "e2e package" "$here/sly-agent-q-package-test.el"
else
  echo "e2e package: building the archive failed"
  "$emacs" -Q --batch -l scripts/make-package.el -f sly-agent-q-make-package
  failed=$((failed + 1))
fi

echo "e2e: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
