#!/usr/bin/env bash
# The trust-boundary suite: the server's vitest files test/security/*.test.ts, then each
# test/security/*-test.el in its own `emacs -Q --batch` (under SLIME, and again under SLY when SLY_DIR
# names a SLY checkout, for the tests that drive a real image).
# Ends with one line: security: N passed, N failed, N skipped.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/../.." || exit 2
. test/ert-run.sh

# vitest's own counts, added to the ERT ones; SAQ_SECURITY_ERT_ONLY runs the ERT files alone
# (scripts/test-emacs30.sh: the server's half does not depend on the Emacs).
if [ -z "${SAQ_SECURITY_ERT_ONLY:-}" ]; then
  out="$(NO_COLOR=1 FORCE_COLOR=0 npx vitest run test/security --passWithNoTests 2>&1)"
  rc=$?
  out="$(printf '%s\n' "$out" | sed -E 's/\x1b\[[0-9;]*m//g')"
  line="$(printf '%s\n' "$out" | grep -E '^ +Tests +' | tail -n 1)"
  if [ "$rc" != 0 ]; then
    printf '%s\n' "$out" | tail -n 60
    failed=$((failed + 1))
  fi
  if [ -n "$line" ]; then
    echo "security vitest: $(sed -E 's/^ +//' <<<"$line")"
    v_p="$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || echo 0)"
    v_f="$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' || echo 0)"
    v_s="$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+' || echo 0)"
    passed=$((passed + v_p)) failed=$((failed + v_f)) skipped=$((skipped + v_s))
  else
    echo "security vitest: no test files"
  fi
fi

for f in "$here"/*-test.el; do
  [ -e "$f" ] || continue
  ert_run "$(basename "$f") slime" "$f" SLY_AGENT_Q_E2E_LISP=slime
  if grep -q 'SLY_AGENT_Q_E2E_LISP' "$f"; then
    if [ -n "${SLY_DIR:-}" ] && [ -d "${SLY_DIR}" ]; then
      ert_run "$(basename "$f") sly" "$f" SLY_AGENT_Q_E2E_LISP=sly
    else
      echo "SKIP: $(basename "$f") with SLY: SLY's source is not available (set SLY_DIR to a SLY checkout)"
      skipped=$((skipped + 1))
    fi
  fi
done
ert_summary security
