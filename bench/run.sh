#!/usr/bin/env bash
# `make bench`: what the agent costs beyond the model's own time.
# Figures 4-6 need only the server and the mock LLM (bench/server.mjs); figure 7 runs emacs -nw in tmux
# with the chat on screen (bench/redisplay.mjs, bench/redisplay.el); figures 1-3 run in Emacs with
# SBCL under SLIME (bench/emacs.el), and figures 1-2 again under SLY when SLY_DIR names it (or the
# vendored copy beside the checkout is there, scripts/vendor-sly.sh); figure 8 resumes a long saved
# conversation into the chat (bench/resume.el); figure 11 searches a 10,000-file tree (bench/search.mjs); figure 12 runs a command printing 50 MB into the chat (bench/command.el). Prints one table; keeps the raw rows and a Markdown copy in bench/.work/.
# BENCH_QUICK=1 runs fewer repetitions. EMACS=... picks the Emacs binary.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
. scripts/vendor-sly.sh
mkdir -p bench/.work
results=bench/.work/results.jsonl
: >"$results"
rm -f bench/.work/scenario-*.json
export BENCH_RESULTS="$PWD/$results"
status=0
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

machine() {
  echo "machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)," \
    "$(awk '/MemTotal/ {printf "%.1f GB RAM", $2 / 1048576}' /proc/meminfo)"
  echo "versions: node $(node --version), $(${EMACS:-emacs} --version | head -n 1)," \
    "$(sbcl --version 2>/dev/null || echo 'no sbcl')," \
    "SLIME $(${EMACS:-emacs} -Q --batch -l bench/emacs.el --eval '(princ (if (sly-agent-q-dev-require-slime) slime-version "none"))' 2>/dev/null || echo '?')"
  # Other work on the machine moves every figure: say how busy it was.
  echo "load average (1/5/15 min): $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
}

# The Emacs Lisp byte-compiled, as a package manager installs it (package.el compiles every file;
# SLIME from Debian is compiled too): interpreted code conses several times more, and the garbage
# collections that follow are what a user waits for. The package is compiled in a copy beside the
# bundle and the helpers (bench/.work/compiled/, so the source tree never holds .elc files), and SLY's
# source the same way when it is used.
compiled=bench/.work/compiled
rm -rf "$compiled" && mkdir -p "$compiled/lisp-elisp"
cp lisp-elisp/*.el "$compiled/lisp-elisp/"
ln -s ../../../dist "$compiled/dist" && ln -s ../../../lisp-cl "$compiled/lisp-cl"
${EMACS:-emacs} -Q --batch -L "$compiled/lisp-elisp" -f batch-byte-compile "$compiled"/lisp-elisp/*.el 2>&1 |
  grep -E '(Error|Warning)' && { echo "lisp-elisp does not byte-compile cleanly"; status=1; }
export BENCH_ELISP_DIR="$PWD/$compiled/lisp-elisp"
if [ -n "${SLY_DIR:-}" ] && [ -f "$SLY_DIR/sly.el" ]; then
  cp -r "$SLY_DIR" "$compiled/sly"
  ${EMACS:-emacs} -Q --batch -L "$compiled/sly" -L "$compiled/sly/lib" -L "$compiled/sly/contrib" \
    --eval '(setq byte-compile-warnings nil)' -f batch-byte-compile \
    "$compiled"/sly/sly.el "$compiled"/sly/lib/*.el "$compiled"/sly/contrib/*.el >/dev/null 2>&1
  export SLY_DIR="$PWD/$compiled/sly"
fi

echo "=== figures 4-6: server and mock LLM"
node --expose-gc bench/server.mjs || { echo "bench/server.mjs failed"; status=1; }
echo
echo "=== figure 11: search_project over 10,000 files, with and without rg"
node bench/search.mjs || { echo "bench/search.mjs failed"; status=1; }
echo
echo "=== figures 1-3: Emacs, SBCL and SLIME"
# As the package ships (jsonrpc's events log off), then with the log on (what the default was, and what
# a user debugging turns on); each in a fresh Emacs and SBCL.
for log in off on; do
  BENCH_EVENTS_LOG=$log ${EMACS:-emacs} -Q --batch -l bench/emacs.el 2>&1 | grep -E '^(emacs bench|  stream|Debugger|error|Error)'
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench/emacs.el (BENCH_EVENTS_LOG=$log) failed"; status=1; }
done
# The same round trip and throughput under SLY, beside SLIME's rows (SLY from SLY_DIR).
if [ -n "${SLY_DIR:-}" ] && [ -f "$SLY_DIR/sly.el" ]; then
  echo "=== figures 1-2 under SLY"
  BENCH_LISP=sly ${EMACS:-emacs} -Q --batch -l bench/emacs.el 2>&1 | grep -E '^(emacs bench|Debugger|error|Error)'
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench/emacs.el (BENCH_LISP=sly) failed"; status=1; }
else
  echo "no sly-eval rows: SLY's source is not available (set SLY_DIR to a SLY checkout)"
fi

echo "=== figure 8: resuming a saved conversation"
${EMACS:-emacs} -Q --batch -l bench/resume.el 2>&1 | grep -E '^(Debugger|error|Error)'
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench/resume.el failed"; status=1; }

echo "=== figure 12: run_command printing 50 MB into the chat"
${EMACS:-emacs} -Q --batch -l bench/command.el 2>&1 | grep -E '^(  gap|Debugger|error|Error)'
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench/command.el failed"; status=1; }

echo
echo "=== figure 7: the chat with redisplay, emacs -nw in tmux (200x50)"
node bench/redisplay.mjs || { echo "bench/redisplay.mjs failed"; status=1; }

# Figure 6 per scenario: the requests the mock received while bench/emacs.el ran the three scenarios.
if ls bench/.work/scenario-*.json >/dev/null 2>&1; then
  node bench/tokens.mjs bench/.work/scenario-*.json || { echo "bench/tokens.mjs failed"; status=1; }
else
  echo "no scenario requests recorded (bench/emacs.el did not reach figure 6)"; status=1
fi

echo
BENCH_NO_MAIN=1 machine | tee bench/.work/machine.txt
echo
node bench/report.mjs "$results"
{ cat bench/.work/machine.txt; echo; node bench/report.mjs "$results" --markdown; } >bench/.work/table.md
exit $status
