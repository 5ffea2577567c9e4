#!/usr/bin/env bash
# End-to-end suite: the spec's scenarios with a real SBCL under SLIME (and SLY when SLY_DIR names a
# SLY checkout), the real bundled server and the mock LLM, and with SLIME on each Lisp of
# SAQ_E2E_OTHER_LISPS (ecl, clisp); then the package installed from its archive. Each group
# prints its time ("time: LABEL: N s", collected by make test's time table). Ends with one line: e2e: N passed, N failed[, N skipped].
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
emacs="${EMACS:-emacs}"
cd "$here/../.." || exit 2
. test/ert-run.sh

# SAQ_E2E_ONLY=REGEXP: only the tests of the SLIME group on SBCL whose names match (make check runs
# one scenario so).
if [ -n "${SAQ_E2E_ONLY:-}" ]; then
  ERT_SELECTOR="$SAQ_E2E_ONLY" ert_run "e2e slime ($SAQ_E2E_ONLY)" "$here/sly-agent-q-e2e-test.el" SLY_AGENT_Q_E2E_LISP=slime
  ert_summary e2e
  exit
fi

# The default group on the other Lisps of SAQ_E2E_OTHER_LISPS (make test sets it:
# scripts/test-all.sh), under SLIME, each run timed. First: ECL's cache (test/ecl-cache.sh) is the CL
# suite's too, whose ECL run comes after SBCL's and CLISP's, so that when make test runs both
# suites at once, this group has built the cache by the time the CL suite's ECL run needs it.
. test/ecl-cache.sh
for lisp in ${SAQ_E2E_OTHER_LISPS:-}; do
  [ "$lisp" = ecl ] && ecl_cache_lock
  ert_run "e2e slime $lisp" "$here/sly-agent-q-e2e-test.el" SLY_AGENT_Q_E2E_LISP=slime SLY_AGENT_Q_TEST_PROGRAM="$lisp"
  [ "$lisp" = ecl ] && ecl_cache_unlock
done

ert_run "e2e slime" "$here/sly-agent-q-e2e-test.el" SLY_AGENT_Q_E2E_LISP=slime
# Two chats on two projects, each with its own SBCL image.
ert_run "e2e chats slime" "$here/sly-agent-q-chats-test.el" SLY_AGENT_Q_E2E_LISP=slime
ERT_SELECTOR=chats-zz ert_run "e2e chats closed slime" "$here/sly-agent-q-chats-closed-test.el" SLY_AGENT_Q_E2E_LISP=slime
ERT_SELECTOR=chats-zz-killed ert_run "e2e chats killed slime" "$here/sly-agent-q-chats-killed-test.el" SLY_AGENT_Q_E2E_LISP=slime
if [ -n "${SLY_DIR:-}" ] && [ -d "${SLY_DIR}" ]; then
  ert_run "e2e sly" "$here/sly-agent-q-e2e-test.el" SLY_AGENT_Q_E2E_LISP=sly
  ert_run "e2e chats sly" "$here/sly-agent-q-chats-test.el" SLY_AGENT_Q_E2E_LISP=sly
  ERT_SELECTOR=chats-zz ert_run "e2e chats closed sly" "$here/sly-agent-q-chats-closed-test.el" SLY_AGENT_Q_E2E_LISP=sly
  ERT_SELECTOR=chats-zz-killed ert_run "e2e chats killed sly" "$here/sly-agent-q-chats-killed-test.el" SLY_AGENT_Q_E2E_LISP=sly
else
  ert_skip "e2e sly" "SLY's source is not available (set SLY_DIR to a SLY checkout)"
fi

# The helpers' load when a Lisp connects, said in the chat, a call waiting for it: each test needs a
# Lisp that connects while it watches, so a group of its own (a fresh Emacs) per Lisp mode; and on
# ECL, whose first load compiles through gcc (the cache is warm by now: the ECL group above built
# it). Not on CLISP: without threads, nothing can be asked of the image while the load runs.
ert_run "e2e helpers load slime" "$here/sly-agent-q-helpers-load-test.el" SLY_AGENT_Q_E2E_LISP=slime
if [ -n "${SLY_DIR:-}" ] && [ -d "${SLY_DIR}" ]; then
  ert_run "e2e helpers load sly" "$here/sly-agent-q-helpers-load-test.el" SLY_AGENT_Q_E2E_LISP=sly
else
  ert_skip "e2e helpers load sly" "SLY's source is not available (set SLY_DIR to a SLY checkout)"
fi
case " ${SAQ_E2E_OTHER_LISPS:-} " in
  *" ecl "*)
    ecl_cache_lock
    ert_run "e2e helpers load slime ecl" "$here/sly-agent-q-helpers-load-test.el" SLY_AGENT_Q_E2E_LISP=slime SLY_AGENT_Q_TEST_PROGRAM=ecl
    ecl_cache_unlock ;;
esac

# The fault-injection suite: the server killed after each protocol message of a scripted
# conversation (the image and the Emacs side at a sample); every conversation must go on and lose
# nothing the user saw. About two minutes; it prints its table.
faults_table="$(mktemp "${TMPDIR:-/tmp}/saq-faults-XXXXXX")"
ert_run "e2e faults" "$here/sly-agent-q-faults-test.el" SLY_AGENT_Q_FAULTS_TABLE="$faults_table"
cat "$faults_table"
rm -f "$faults_table"

# The README's run command, in a real terminal.
ert_run "e2e run command" "$here/sly-agent-q-run-command-test.el"

# The package archive (make package, with the server inside), installed with package-install-file
# into an empty package-user-dir; and the recipe's package built from a clean git archive of HEAD,
# whose server is installed from an npm pack tarball through sly-agent-q-install-server, and
# also published to a real npm registry on loopback (verdaccio) and installed from there.
if verdaccio="$(scripts/ensure-verdaccio.sh | tail -n 1)"; then
  export SAQ_VERDACCIO="$verdaccio"
else
  echo "e2e package: installing verdaccio from the npm registry failed; the registry test skips"
fi
if "$emacs" -Q --batch -l scripts/make-package.el -f sly-agent-q-make-package >/dev/null 2>&1; then
  ert_run "e2e package" "$here/sly-agent-q-package-test.el"
else
  echo "e2e package: building the archive failed"
  "$emacs" -Q --batch -l scripts/make-package.el -f sly-agent-q-make-package
  failed=$((failed + 1))
fi

ert_summary e2e
