#!/usr/bin/env bash
# The Emacs suites again on Emacs 30.1 (scripts/ensure-emacs30.sh unpacks it beside the system's
# Emacs 28): the Elisp suite (byte-compilation with warnings as errors, checkdoc, package-lint among
# it), the end-to-end suite on SBCL (SLIME and the pinned SLY, faults, run command, package) and the
# security suite's ERT files. Each prints
# its own closing line; scripts/test-all.sh adds them up as the suite "emacs30".
set -u
cd "$(dirname "$0")/.."

codename="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
if [ "$codename" != bookworm ] && [ -z "${EMACS30:-}" ]; then
  # Elsewhere, name an Emacs 30 with EMACS30 to run these suites on it.
  echo "SKIP: emacs30: Emacs 30.1 is installed from Debian 12's backports, and this is not Debian 12 (set EMACS30)"
  echo "emacs30: 0 passed, 0 failed, 1 skipped"
  exit 0
fi
emacs30="${EMACS30:-}"
if [ -z "$emacs30" ]; then
  emacs30="$(scripts/ensure-emacs30.sh | tail -n 1)" || { echo "emacs30: 0 passed, 1 failed"; exit 1; }
fi
echo "Emacs: $("$emacs30" -Q --batch --eval '(princ emacs-version)')"

# As make test runs them: the pinned SLY, the current package-lint (both exported when
# scripts/test-all.sh already set them up).
. scripts/vendor-sly.sh
if [ -z "${SAQ_PACKAGE_LINT_DIR:-}" ] && lint_dir="$(scripts/ensure-package-lint.sh | tail -n 1)"; then
  export SAQ_PACKAGE_LINT_DIR="$lint_dir"
fi

# Every Emacs the suites start (make run's, the package builds', a test's own child) is this one.
export EMACS="$emacs30" PATH="$(dirname "$emacs30"):$PATH"
# The end-to-end groups on CLISP and ECL run under Emacs 28 only: what they test beyond SBCL's group
# is the Lisp's side (the helpers, SWANK's backend for that Lisp), which is the same under either
# Emacs; the Emacs side, the same code with every Lisp, runs here on SBCL under SLIME and SLY.
export SAQ_E2E_OTHER_LISPS=""
status=0
test/elisp/run.sh || status=1
test/e2e/run.sh || status=1
SAQ_SECURITY_ERT_ONLY=1 test/security/run.sh || status=1
exit $status
