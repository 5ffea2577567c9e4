# Sourced by the ERT suites' runners (test/elisp/run.sh, test/e2e/run.sh).
# ert_run LABEL FILE [VAR=VALUE...] runs FILE's ERT tests in `emacs -Q --batch` with the package
# and the test helpers on the load path, prints what failed and a one-line summary, and adds the
# counts to $passed, $failed and $skipped. Every skipped test is named with its reason in a line
# "SKIP: LABEL: TEST: REASON" (test/ert-skip-reasons.el); ert_skip names a skip of a whole run.
# ert_emacs_mode and ert_run_function say how Emacs runs and which function runs the tests (it takes
# ERT_SELECTOR's regexp, or none for every test): a batch Emacs and ERT's own by default; the GUI
# suite (test/gui/run.sh) sets them for a graphic frame, whose runner prints as a batch run does.

passed=0 failed=0 skipped=0
ert_emacs_mode=(--batch)
ert_run_function=ert-run-tests-batch-and-exit
ert_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

ert_run() {
  local label=$1 file=$2; shift 2
  local out rc summary e u s crash
  local started
  started="$(date +%s)"
  ert__attempt "$file" "$@"
  # A Lisp implementation that crashed (its process ended by a signal such as SIGSEGV: the test
  # helper prints "LISP-CRASH: ..." from the Lisp's sentinel) is not a failure of ours: said in one
  # line, and the group runs once more. A second crash fails the run. Nothing else is retried.
  crash="$(ert__crash)"
  if [ -n "$crash" ]; then
    echo "$label: the Lisp implementation crashed ($crash), not a test: running the group once more"
    ert__attempt "$file" "$@"
    crash="$(ert__crash)"
    if [ -n "$crash" ]; then
      echo "$label: the Lisp implementation crashed again ($crash): the run fails"
      failed=$((failed + 1))
    fi
  fi
  summary="$(printf '%s\n' "$out" | grep -E '^Ran [0-9]+ tests?, ' | tail -n 1)"
  if [ -z "$summary" ]; then
    printf '%s\n' "$out" | tail -n 40
    echo "$label: did not run to the end (exit $rc)"
    group_time "$label" "$started"
    failed=$((failed + 1))
    return
  fi
  e="$(sed -E 's/.* ([0-9]+) results? as expected.*/\1/' <<<"$summary")"
  u="$(sed -E 's/.* ([0-9]+) unexpected.*/\1/' <<<"$summary")"
  s=0
  if grep -qE '[0-9]+ skipped' <<<"$summary"; then s="$(sed -E 's/.* ([0-9]+) skipped.*/\1/' <<<"$summary")"; fi
  if [ "$u" != 0 ] || [ "$rc" != 0 ]; then
    printf '%s\n' "$out" | grep -E -A 14 '^Test .* condition:' | head -n 120
    printf '%s\n' "$out" | grep -E '^ +(FAILED|skipped) '
  fi
  printf '%s\n' "$out" | grep -E '^SKIP: ' | sed "s/^SKIP: /SKIP: $label: /"
  echo "$label: ${summary%% (*}"
  group_time "$label" "$started"
  passed=$((passed + e)) failed=$((failed + u)) skipped=$((skipped + s))
  if [ "$u" = 0 ] && [ "$rc" != 0 ]; then failed=$((failed + 1)); fi
}

# ert__crash prints what the last attempt's "LISP-CRASH: ..." line said (the Lisp and its signal), if any.
ert__crash() {
  printf '%s\n' "$out" | grep -m 1 -aE '^LISP-CRASH: ' | sed -E 's/^LISP-CRASH: //'
}

# ert__attempt FILE [VAR=VALUE...] runs FILE's tests once, setting $out (what Emacs printed) and $rc.
# ERT_SELECTOR, when set, is the ERT selector (a regexp of test names) instead of every test.
ert__attempt() {
  local file=$1; shift
  # A bounded run: a Lisp debugger or a lost answer must not hang the suite.
  # Conversations the suites hold, and the REPLs' input histories, are saved into a directory of the
  # run's own, not the user's (a history another run half-wrote stops SLIME at a question).
  local conversations
  conversations="$(mktemp -d "${TMPDIR:-/tmp}/saq-conversations-XXXXXX")"
  local run=(-f "$ert_run_function")
  [ -n "${ERT_SELECTOR:-}" ] && run=(--eval "($ert_run_function \"$ERT_SELECTOR\")")
  # SIGPIPE ignored, as an interactive Emacs runs: a batch Emacs dies of a write to a server killed an
  # instant before (test/elisp/sly-agent-q-harness-test.el).
  out="$(trap '' PIPE; env "$@" timeout "${ERT_FILE_TIMEOUT:-900}" "${EMACS:-emacs}" -Q "${ert_emacs_mode[@]}" -L "$ert_root/lisp-elisp" -L "$ert_root/test/elisp" \
           --eval "(setq sly-agent-q-conversation-directory \"$conversations/\")" \
           --eval "(setq slime-repl-history-file \"$conversations/slime-history.eld\" sly-mrepl-history-file-name \"$conversations/sly-history.eld\")" \
           -l "$ert_root/test/ert-skip-reasons.el" -l "$file" "${run[@]}" 2>&1)"
  rc=$?
  rm -rf "$conversations"
}

# group_time LABEL STARTED prints the line "time: LABEL: N s" that make test's time table collects
# (scripts/test-all.sh); STARTED is the group's start in seconds since the epoch.
group_time() {
  echo "time: $1: $(( $(date +%s) - $2 )) s"
}

# ert_skip WHAT REASON counts one skipped run (a whole file or backend that cannot run here) and names it.
ert_skip() {
  echo "SKIP: $1: $2"
  skipped=$((skipped + 1))
}

# ert_summary NAME prints the suite's closing line and returns its status.
ert_summary() {
  echo "$1: $passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]
}
