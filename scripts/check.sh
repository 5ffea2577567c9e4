#!/usr/bin/env bash
# make check: the loop to run after each change, about 4 minutes on two cores (252 s measured). The server suite
# (type check and vitest), the Elisp suite on the system's Emacs, the CL suite on SBCL (SWANK and,
# with SLY's source, SLYNK), and one end-to-end scenario (the README's bug fix) on SBCL under SLIME,
# two suites at a time; then the summary and time table of make test (scripts/test-all.sh).
# make test runs every suite, on every Lisp and both Emacsen.
cd "$(dirname "$0")/.." || exit 2
export SAQ_JOBS="${SAQ_JOBS:-2}"
# Longest first, so that the two lanes end together (CL about 200 s, Elisp 150 s, server 80 s).
exec scripts/test-all.sh \
  "cl:test/cl/run.sh sbcl" \
  "elisp:test/elisp/run.sh" \
  "server:scripts/test-server.sh" \
  "e2e:SAQ_E2E_ONLY=e2e-scenario-2-fix-parse-input test/e2e/run.sh"
