#!/usr/bin/env bash
# Runs every test suite, prints one summary line per suite and a total.
# Each suite's runner ends its output with a line "NAME: N passed, N failed[, N skipped]" and names
# every skip it counts in a line "SKIP: WHAT: REASON"; a suite whose named skips and counted skips
# disagree fails here. Adding a suite is one entry in `suites`.
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
# Debian. Each costs its own run (the README's support table gives the time of each).
export SAQ_CL_OTHER_LISPS="${SAQ_CL_OTHER_LISPS-clisp ecl}"
export SAQ_E2E_OTHER_LISPS="${SAQ_E2E_OTHER_LISPS-clisp ecl}"

suites=("server:scripts/test-server.sh" "cl:test/cl/run.sh" "elisp:test/elisp/run.sh" "e2e:test/e2e/run.sh"
        "security:test/security/run.sh" "tui:test/tui/run.sh" "emacs30:scripts/test-emacs30.sh")
summary=()
times=()
run_started=$(date +%s)
total_pass=0 total_fail=0 total_skip=0 status=0

for entry in "${suites[@]}"; do
  name=${entry%%:*} script=${entry#*:}
  if [ ! -x "$script" ]; then
    summary+=("$name: skipped (no $script yet)")
    continue
  fi
  echo "=== suite $name ($script)"
  log=$(mktemp)
  suite_started=$(date +%s)
  "$script" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  suite_seconds=$(( $(date +%s) - suite_started ))
  # The time table: the suite's time, then each group's ("time: LABEL: N s" lines), longest first.
  times+=("$(printf '%-28s %5d s' "$name" "$suite_seconds")")
  while IFS= read -r group; do times+=("$group"); done < <(
    grep -E '^time: .+: [0-9]+ s$' "$log" | sed -E 's/^time: (.+): ([0-9]+) s$/\2\t\1/' | sort -rn -k1,1 |
      awk -F '\t' '{ printf "  %-26s %5d s\n", $2, $1 }')
  # Sum every "x: N passed, N failed[, N skipped]" line the suite printed (one per backend or file group).
  read -r p f s < <(grep -E '^[A-Za-z0-9_-]+: [0-9]+ passed, [0-9]+ failed' "$log" |
    sed -E 's/^[^:]+: ([0-9]+) passed, ([0-9]+) failed(, ([0-9]+) skipped)?.*/\1 \2 \4/' |
    awk '{p+=$1; f+=$2; s+=($3==""?0:$3)} END {print p+0, f+0, s+0}')
  skips=$(grep -E '^SKIP: ' "$log" | sed -E 's/^SKIP: /  skipped: /' || true)
  # What failed, named again here: a CI log may show only its end.
  fails=$(grep -E '^ +FAILED +[^0-9 ]|^ ?FAIL |did not run to the end|killed after' "$log" |
            awk '!seen[$0]++' | sed -E -e 's/^ *(FAILED|FAIL) +//' -e 's/^/  failed: /' || true)
  named=$(grep -cE '^SKIP: ' "$log")
  rm -f "$log"
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
done

echo
echo "=== summary"
printf '%s\n' "${summary[@]}"
run_seconds=$(( $(date +%s) - run_started ))
echo
echo "=== time table (seconds of wall time; groups within each suite, longest first)"
printf '%s\n' "${times[@]}"
printf '%-28s %5d s (%d min %02d s)\n' "total" "$run_seconds" $((run_seconds / 60)) $((run_seconds % 60))
echo
echo "total: $total_pass passed, $total_fail failed, $total_skip skipped"
echo "$total_pass passed, $total_fail failed"
exit $status
