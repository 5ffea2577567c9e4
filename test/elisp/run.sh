#!/usr/bin/env bash
# Runs every test/elisp/*-test.el in its own `emacs -Q --batch` and sums the ERT results.
# Usage: test/elisp/run.sh [FILE-test.el ...]   (EMACS=... to pick the binary)
# Prints each file's ERT summary, then one line: elisp: N passed, N failed[, N skipped].
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
emacs="${EMACS:-emacs}"
cd "$root" || exit 2

if [ "$#" -gt 0 ]; then files=("$@"); else files=("$here"/*-test.el); fi

passed=0 failed=0 skipped=0
for f in "${files[@]}"; do
  name="$(basename "$f")"
  out="$("$emacs" -Q --batch -L "$root/lisp-elisp" -L "$here" -l "$f" -f ert-run-tests-batch-and-exit 2>&1)"
  rc=$?
  summary="$(printf '%s\n' "$out" | grep -E '^Ran [0-9]+ tests?, ' | tail -n 1)"
  if [ -z "$summary" ]; then
    printf '%s\n' "$out" | tail -n 30
    echo "$name: did not run to the end (exit $rc)"
    failed=$((failed + 1))
    continue
  fi
  e="$(sed -E 's/.* ([0-9]+) results? as expected.*/\1/' <<<"$summary")"
  u="$(sed -E 's/.* ([0-9]+) unexpected.*/\1/' <<<"$summary")"
  s=0
  if grep -qE '[0-9]+ skipped' <<<"$summary"; then s="$(sed -E 's/.* ([0-9]+) skipped.*/\1/' <<<"$summary")"; fi
  if [ "$u" != 0 ] || [ "$rc" != 0 ]; then
    # Show what failed.
    printf '%s\n' "$out" | grep -E -A 12 '^Test .* condition:' | head -n 80
    printf '%s\n' "$out" | grep -E '^ +(FAILED|skipped) '
  fi
  printf '%s\n' "$out" | grep -E '^SKIP: ' | sed "s/^/$name: /"
  echo "$name: ${summary%% (*}"
  passed=$((passed + e)); failed=$((failed + u)); skipped=$((skipped + s))
  if [ "$u" = 0 ] && [ "$rc" != 0 ]; then failed=$((failed + 1)); fi
done

if [ "$skipped" -gt 0 ]; then
  echo "elisp: $passed passed, $failed failed, $skipped skipped"
else
  echo "elisp: $passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
