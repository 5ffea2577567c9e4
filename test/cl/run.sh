#!/usr/bin/env bash
# Run the Common Lisp tests of lisp-cl/ in a batch SBCL: once with SWANK
# (SLIME) loaded and once with SLYNK (SLY) loaded.
#
# Environment:
#   SWANK_LOADER  path of SLIME's swank-loader.lisp; when unset it is
#                 derived from Emacs (where (require 'slime) finds SLIME).
#   SLY_DIR       root of a SLY checkout (with slynk/slynk-loader.lisp);
#                 when unset the SLYNK run is skipped.
#   SBCL          the sbcl to run (default: sbcl on PATH).
#   EMACS         the emacs to ask for SLIME's location (default: emacs).
#
# Prints, per backend, a last line "cl-swank: N passed, N failed" (resp.
# "cl-slynk: ..."; a backend that cannot run prints "SKIP: cl-slynk: REASON"
# and "cl-slynk: 0 passed, 0 failed, 1 skipped"); exits non-zero if anything failed.

set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$root/test/.work/cl"
sbcl="${SBCL:-sbcl}"
emacs="${EMACS:-emacs}"
status=0

mkdir -p "$work"

# Where SLIME's swank-loader.lisp is, computed the way SLIME computes it
# (slime-backend, relative to slime-path unless absolute), with SLIME found
# the way make run and the Emacs tests find it (scripts/lisp-modes.el).
swank_loader_from_emacs() {
    command -v "$emacs" >/dev/null 2>&1 || return 0
    timeout 60 "$emacs" -Q --batch -l "$here/../../scripts/lisp-modes.el" --eval '
(when (sly-agent-q-dev-require-slime)
  (princ (expand-file-name
          (if (file-name-absolute-p slime-backend)
              slime-backend
            (concat slime-path slime-backend)))))' 2>/dev/null
}

# run_backend NAME LOADER: run the tests with backend NAME (swank or
# slynk) loaded from LOADER.
run_backend() {
    local name="$1" loader="$2" log="$work/$1.log" last
    echo "== cl-$name (loader: $loader)"
    SAQ_BACKEND="$name" SAQ_BACKEND_LOADER="$loader" SAQ_WORK="$work" \
        XDG_CACHE_HOME="$work/xdg-cache" \
        timeout 100 "$sbcl" --noinform --non-interactive --no-userinit --no-sysinit \
        --load "$here/run-tests.lisp" 2>&1 | tee "$log"
    local rc="${PIPESTATUS[0]}"
    last="$(tail -n 1 "$log")"
    if ! [[ "$last" =~ ^cl-$name:\ [0-9]+\ passed,\ [0-9]+\ failed$ ]]; then
        # The run died before reporting (or timed out): report it ourselves.
        echo "cl-$name: 0 passed, 1 failed"
        status=1
    elif [ "$rc" -ne 0 ] || ! [[ "$last" =~ \ 0\ failed$ ]]; then
        status=1
    fi
}

swank_loader="${SWANK_LOADER:-}"
if [ -z "$swank_loader" ]; then
    swank_loader="$(swank_loader_from_emacs)"
fi
if [ -n "$swank_loader" ] && [ -f "$swank_loader" ]; then
    run_backend swank "$swank_loader"
else
    echo "SLIME's swank-loader.lisp not found (set SWANK_LOADER, or install SLIME for Emacs)"
    echo "cl-swank: 0 passed, 1 failed"
    status=1
fi

if [ -n "${SLY_DIR:-}" ] && [ -f "$SLY_DIR/slynk/slynk-loader.lisp" ]; then
    run_backend slynk "$SLY_DIR/slynk/slynk-loader.lisp"
elif [ -n "${SLY_DIR:-}" ]; then
    echo "SLY_DIR=$SLY_DIR has no slynk/slynk-loader.lisp"
    echo "cl-slynk: 0 passed, 1 failed"
    status=1
else
    # A whole backend that cannot run here counts as one skip, named with its reason.
    echo "SKIP: cl-slynk: SLY's source is not available (set SLY_DIR to a SLY checkout)"
    echo "cl-slynk: 0 passed, 0 failed, 1 skipped"
fi

exit "$status"
