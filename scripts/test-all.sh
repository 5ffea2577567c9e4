#!/usr/bin/env bash
# Runs test suites, prints one summary line per suite, a time table and a total.
#   scripts/test-all.sh                    every suite (make test, .ci/run)
#   scripts/test-all.sh NAME:COMMAND ...   these suites (make check: scripts/check.sh)
# SAQ_JOBS=N runs up to N suites at once, each one's output printed whole when it ends; 1 runs them
# one after the other, the output as it comes. Every suite (make test) runs in two lanes by default,
# each lane's suites one after the other, chosen so that the lanes end together and so that the two
# end-to-end passes (Emacs 28's, Emacs 30's) never run at once; suites named here run up to
# SAQ_JOBS at once (default 1), the next starting when one ends.
# Each suite's runner ends its output with a line "NAME: N passed, N failed[, N skipped]" and names
# every skip it counts in a line "SKIP: WHAT: REASON"; a suite whose named skips and counted skips
# disagree fails here. Each group of a suite prints "time: LABEL: N s" for the time table. Adding a
# suite is one entry in `suites` and its name in one of the `lanes`.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/vendor-sly.sh
# The current package-lint for the lint test (Debian 12's is older than Emacs 30).
if lint_dir="$(scripts/ensure-package-lint.sh | tail -n 1)"; then
  export SAQ_PACKAGE_LINT_DIR="$lint_dir"
  echo "package-lint: $(basename "$lint_dir"), unpacked into .deps/package-lint/"
fi

# The Lisps besides SBCL on which the CL suite (test/cl/run.sh) and the end-to-end default group
# (test/e2e/run.sh: the SLIME run of sly-agent-q-e2e-test.el) also run, under SLIME's SWANK from
# Debian. Each costs its own run (the README's support table gives the time of each). ECL last in the
# CL suite and first in the end-to-end one: the two share ECL's cache (test/ecl-cache.sh), which the
# first to run builds through gcc; run at once, the end-to-end group has built it by then.
export SAQ_CL_OTHER_LISPS="${SAQ_CL_OTHER_LISPS-clisp ecl}"
export SAQ_E2E_OTHER_LISPS="${SAQ_E2E_OTHER_LISPS-ecl clisp}"

suites=("server:scripts/test-server.sh" "cl:test/cl/run.sh" "elisp:test/elisp/run.sh" "e2e:test/e2e/run.sh"
        "security:test/security/run.sh" "tui:test/tui/run.sh" "emacs30:scripts/test-emacs30.sh"
        "gui:test/gui/run.sh")
# The two lanes (suites by name) of a run of every suite: e2e, emacs30, security and gui (about 9, 8, 1
# and 1 minutes alone on a quiet machine) beside cl, tui, elisp and server (8, 7, 3 and 2).
lanes=("e2e emacs30 security gui" "cl tui elisp server")
if [ "$#" -gt 0 ]; then
  suites=("$@") lanes=()
  jobs_max="${SAQ_JOBS:-1}"
else
  jobs_max="${SAQ_JOBS:-2}"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
run_started=$(date +%s)

# run_suite I COMMAND: run suite number I, its output into $work/I.log (and to the screen as it
# comes when suites run one at a time), its exit status and seconds into $work/I.rc and I.time.
run_suite() {
  local i=$1 command=$2 started rc
  started=$(date +%s)
  if [ "$jobs_max" -le 1 ]; then
    bash -c "$command" 2>&1 | tee "$work/$i.log"
    rc=${PIPESTATUS[0]}
  else
    bash -c "$command" >"$work/$i.log" 2>&1 </dev/null
    rc=$?
  fi
  echo "$rc" >"$work/$i.rc"
  echo $(( $(date +%s) - started )) >"$work/$i.time"
  # Suites run at once: each one's output whole as it ends, never interleaved with another's.
  if [ "$jobs_max" -gt 1 ]; then
    (flock 9; echo "=== suite ${suites[$i]%%:*} (${suites[$i]#*:})"; cat "$work/$i.log") 9>"$work/print.lock"
  fi
}

# suite_index NAME: the index in suites of the suite named NAME.
suite_index() {
  local i
  for i in "${!suites[@]}"; do [ "${suites[$i]%%:*}" = "$1" ] && echo "$i" && return; done
  echo "test-all.sh: no suite $1 for a lane" >&2
  exit 2
}

if [ "$jobs_max" -gt 1 ] && [ "${#lanes[@]}" -gt 0 ]; then
  for lane in "${lanes[@]}"; do
    indices=()
    for name in $lane; do indices+=("$(suite_index "$name")") || exit 2; done
    ( for i in "${indices[@]}"; do run_suite "$i" "${suites[$i]#*:}"; done ) &
  done
  wait
fi
for i in "${!suites[@]}"; do
  entry=${suites[$i]}
  [ -e "$work/$i.rc" ] && continue
  if [ "$jobs_max" -le 1 ]; then
    echo "=== suite ${entry%%:*} (${entry#*:})"
    run_suite "$i" "${entry#*:}"
  else
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    run_suite "$i" "${entry#*:}" &
  fi
done
wait

summary=()
times=()
total_pass=0 total_fail=0 total_skip=0 status=0
for i in "${!suites[@]}"; do
  entry=${suites[$i]}
  name=${entry%%:*} log="$work/$i.log"
  rc=$(cat "$work/$i.rc") seconds=$(cat "$work/$i.time")
  # Sum every "x: N passed, N failed[, N skipped]" line the suite printed (one per backend or file group).
  read -r p f s < <(grep -aE '^[A-Za-z0-9_-]+: [0-9]+ passed, [0-9]+ failed' "$log" |
    sed -E 's/^[^:]+: ([0-9]+) passed, ([0-9]+) failed(, ([0-9]+) skipped)?.*/\1 \2 \4/' |
    awk '{p+=$1; f+=$2; s+=($3==""?0:$3)} END {print p+0, f+0, s+0}')
  skips=$(grep -aE '^SKIP: ' "$log" | sed -E 's/^SKIP: /  skipped: /' || true)
  # What failed, named again here: a CI log may show only its end. A Lisp implementation's crash too.
  fails=$(grep -aE '^ +FAILED +[^0-9 ]|^ ?FAIL |did not run to the end|killed after|the Lisp implementation crashed' "$log" |
            awk '!seen[$0]++' | sed -E -e 's/^ *(FAILED|FAIL) +//' -e 's/^/  failed: /' || true)
  named=$(grep -acE '^SKIP: ' "$log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  [ "$rc" -ne 0 ] && status=1
  total_pass=$((total_pass + p)) total_fail=$((total_fail + f)) total_skip=$((total_skip + s))
  summary+=("$name: $p passed, $f failed, $s skipped (exit $rc)")
  [ -n "$fails" ] && summary+=("$fails")
  [ -n "$skips" ] && summary+=("$skips")
  if [ "$named" -ne "$s" ]; then
    summary+=("  $name counted $s skipped but named $named: every skip must be named with its reason")
    status=1
  fi
  # The time table: the suite's time, then each group's ("time: LABEL: N s" lines), longest first.
  times+=("$(printf '%-44s %5d s' "$name" "$seconds")")
  while IFS= read -r group; do times+=("$group"); done < <(
    grep -aE '^time: .+: [0-9]+ s$' "$log" | sed -E 's/^time: (.+): ([0-9]+) s$/\2\t\1/' | sort -rn -k1,1 |
      awk -F '\t' '{ printf "  %-42s %5d s\n", $2, $1 }')
done

run_seconds=$(( $(date +%s) - run_started ))
echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
echo
echo "=== time table (wall time; each suite's groups, longest first$([ "$jobs_max" -gt 1 ] && echo "; $jobs_max suites at once"))"
printf '%s\n' "${times[@]}"
printf '%-44s %5d s (%d min %02d s)\n' "total" "$run_seconds" $((run_seconds / 60)) $((run_seconds % 60))
echo
echo "total: $total_pass passed, $total_fail failed, $total_skip skipped"
echo "$total_pass passed, $total_fail failed"
exit $status
