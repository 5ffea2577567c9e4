#!/usr/bin/env bash
# Run the Common Lisp tests of lisp-cl/ in a batch Lisp: once with SWANK
# (SLIME) loaded and once with SLYNK (SLY) loaded.
#
#   test/cl/run.sh [LISP...]     LISP: sbcl, ecl, clisp or abcl; without one,
#                                SBCL and the Lisps of SAQ_CL_OTHER_LISPS
#
# Environment:
#   SWANK_LOADER  path of SLIME's swank-loader.lisp; when unset it is
#                 derived from Emacs (where (require 'slime) finds SLIME).
#   SLY_DIR       root of a SLY checkout (with slynk/slynk-loader.lisp);
#                 when unset the SLYNK run is skipped.
#   SBCL, ECL, CLISP, ABCL  the Lisp to run (default: its name on PATH).
#   EMACS         the emacs to ask for SLIME's location (default: emacs).
#   SAQ_ONLY      "TEST ...": run only these tests (to try one on a Lisp).
#   SAQ_CL_WORK   where each Lisp's logs, fasls and cache go (test/.work/cl);
#                 ECL's cache is test/.work/ecl/xdg-cache/, the one the
#                 end-to-end ECL group uses too (test/ecl-cache.sh).
#   SAQ_CL_OTHER_LISPS  "clisp ecl": the Lisps run after SBCL when none
#                 is named (make test sets it: scripts/test-all.sh).
#   SAQ_CL_SLYNK_EVERYWHERE  set: run SLYNK on the other Lisps too (by
#                 default only SBCL runs with both backends).
#
# Prints, per Lisp and backend, a last line "cl-swank: N passed, N failed"
# (resp. "cl-slynk: ...", and "cl-swank-ecl: ..." for another Lisp than
# SBCL), with ", N skipped" when tests this Lisp cannot do were skipped,
# each named on a line "SKIP: SUITE: TEST: REASON"; a backend that cannot
# run prints "SKIP: cl-slynk: REASON" and "cl-slynk: 0 passed, 0 failed,
# 1 skipped".  Each run has a watchdog: a Lisp that hangs is killed and
# its run counted failed, naming the test it was in.  Exits non-zero if
# anything failed.

set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
emacs="${EMACS:-emacs}"
status=0
lisps=("$@")
# shellcheck disable=SC2206
[ ${#lisps[@]} -gt 0 ] || lisps=(sbcl ${SAQ_CL_OTHER_LISPS:-})

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

# lisp_command LISP FILE: the command that runs FILE in LISP, batch, no init files.
lisp_command() {
    case "$1" in
        sbcl) echo "${SBCL:-sbcl}" --noinform --non-interactive --no-userinit --no-sysinit --load "$2" ;;
        ecl) echo "${ECL:-ecl}" --norc --shell "$2" ;;
        clisp) echo "${CLISP:-clisp}" -norc -q -q "$2" ;;
        abcl) echo "${ABCL:-abcl}" --noinform --noinit --nosystem --batch --load "$2" ;;
        *) return 1 ;;
    esac
}

# crash_signal STATUS: "N (SIGNAME)" when STATUS is that of a process ended by a signal that
# means a crash (never sent by the watchdog, which sends TERM then KILL); nothing otherwise.
crash_signal() {
    case "$1" in
        132) echo "4 (SIGILL)" ;; 134) echo "6 (SIGABRT)" ;; 135) echo "7 (SIGBUS)" ;;
        136) echo "8 (SIGFPE)" ;; 139) echo "11 (SIGSEGV)" ;; 159) echo "31 (SIGSYS)" ;;
    esac
}

# run_backend LISP NAME LOADER: run the tests in LISP with backend NAME
# (swank or slynk) loaded from LOADER.
run_backend() {
    local lisp="$1" name="$2" loader="$3" suite="cl-$2" last watchdog
    [ "$lisp" = sbcl ] || suite="cl-$name-$lisp"
    local work="${SAQ_CL_WORK:-$root/test/.work/cl}/$lisp"
    local log="$work/$name.log"
    mkdir -p "$work"
    # The Lisps that compile slowly (ECL through its C compiler, ABCL on
    # the JVM) get longer.
    case "$lisp" in sbcl) watchdog=300 ;; abcl) watchdog=1800 ;; *) watchdog=900 ;; esac
    echo "== $suite (loader: $loader)"
    local started attempt rc crash cache="$work/xdg-cache"
    started="$(date +%s)"
    # ECL compiles SWANK, the helpers and FiveAM through gcc: one cache for this suite and the
    # end-to-end ECL group, used by one ECL run at a time.
    if [ "$lisp" = ecl ]; then
        . "$root/test/ecl-cache.sh"
        cache="$ecl_cache"
        ecl_cache_lock
    fi
    for attempt in 1 2; do
        # Appended to: a process the Lisp started that writes after the log was cut would leave a
        # run of NUL bytes at its old offset otherwise.
        : >"$log"
        # shellcheck disable=SC2046
        SAQ_BACKEND="$name" SAQ_BACKEND_LOADER="$loader" SAQ_WORK="$work" SAQ_SUITE="$suite" \
            XDG_CACHE_HOME="$cache" \
            timeout -k 10 "$watchdog" $(lisp_command "$lisp" "$here/run-tests.lisp") </dev/null >>"$log" 2>&1
        rc=$?
        # A Lisp implementation that crashed (ended by SIGSEGV and the like: timeout passes the
        # signal on as 128+N) is not a failure of ours: said in one line, its last output shown
        # apart, and the run made once more; a second crash fails. Nothing else is run again.
        crash="$(crash_signal "$rc")"
        [ -n "$crash" ] || break
        tail -n 15 "$log" | sed 's/^/  | /'
        if [ "$attempt" = 1 ]; then
            echo "$suite: the Lisp implementation crashed ($lisp ended by signal $crash), not a test: running it once more"
        else
            echo "$suite: the Lisp implementation crashed again ($lisp ended by signal $crash): the run fails"
            echo "$suite: 0 passed, 1 failed"
            status=1
            [ "$lisp" = ecl ] && ecl_cache_unlock
            echo "time: $suite: $(( $(date +%s) - started )) s"
            return
        fi
    done
    [ "$lisp" = ecl ] && ecl_cache_unlock
    cat "$log"
    echo "time: $suite: $(( $(date +%s) - started )) s"
    last="$(tail -n 1 "$log")"
    if ! [[ "$last" =~ ^$suite:\ [0-9]+\ passed,\ [0-9]+\ failed(,\ [0-9]+\ skipped)?$ ]]; then
        # The run died before reporting (or the watchdog killed it): report it ourselves.
        [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] &&
            echo "$suite: killed after ${watchdog} s in $(grep -E '^(start|ok  |FAIL) ' "$log" | tail -n 1)"
        echo "$suite: 0 passed, 1 failed"
        status=1
    elif [ "$rc" -ne 0 ] || ! [[ "$last" =~ \ 0\ failed ]]; then
        status=1
    fi
}

swank_loader="${SWANK_LOADER:-}"
if [ -z "$swank_loader" ]; then
    swank_loader="$(swank_loader_from_emacs)"
fi

for lisp in "${lisps[@]}"; do
    suffix=""
    [ "$lisp" = sbcl ] || suffix="-$lisp"
    if ! lisp_command "$lisp" x >/dev/null; then
        echo "Unknown Lisp $lisp (sbcl, ecl, clisp or abcl)"
        echo "cl-$lisp: 0 passed, 1 failed"
        status=1
        continue
    fi
    if [ -n "$swank_loader" ] && [ -f "$swank_loader" ]; then
        run_backend "$lisp" swank "$swank_loader"
    else
        echo "SLIME's swank-loader.lisp not found (set SWANK_LOADER, or install SLIME for Emacs)"
        echo "cl-swank$suffix: 0 passed, 1 failed"
        status=1
    fi

    if [ "$lisp" != sbcl ] && [ -z "${SAQ_CL_SLYNK_EVERYWHERE:-}" ]; then
        # The other Lisps run with SLIME's SWANK from Debian. CLISP's SLYNK run still fails 2
        # tests (xref, compile-and-load); SAQ_CL_SLYNK_EVERYWHERE=1 runs it.
        echo "SKIP: cl-slynk$suffix: SLYNK runs on SBCL only here (other Lisps use Debian's SWANK; SAQ_CL_SLYNK_EVERYWHERE=1 runs it)"
        echo "cl-slynk$suffix: 0 passed, 0 failed, 1 skipped"
    elif [ -n "${SLY_DIR:-}" ] && [ -f "$SLY_DIR/slynk/slynk-loader.lisp" ]; then
        run_backend "$lisp" slynk "$SLY_DIR/slynk/slynk-loader.lisp"
    elif [ -n "${SLY_DIR:-}" ]; then
        echo "SLY_DIR=$SLY_DIR has no slynk/slynk-loader.lisp"
        echo "cl-slynk$suffix: 0 passed, 1 failed"
        status=1
    else
        # A whole backend that cannot run here counts as one skip, named with its reason.
        echo "SKIP: cl-slynk$suffix: SLY's source is not available (set SLY_DIR to a SLY checkout)"
        echo "cl-slynk$suffix: 0 passed, 0 failed, 1 skipped"
    fi
done

exit "$status"
