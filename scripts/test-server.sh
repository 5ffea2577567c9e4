#!/usr/bin/env bash
# The server suite: type check, then vitest on test/server (which builds the bundle first; test/security
# has its own suite). Ends with a summary line.
set -uo pipefail
cd "$(dirname "$0")/.."
npx tsc --noEmit -p . || { echo "server: 0 passed, 1 failed (type errors)"; exit 1; }
report=$(mktemp)
npx vitest run test/server --reporter=default --reporter=json --outputFile="$report"
rc=$?
node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  for (const f of r.testResults)
    for (const t of f.assertionResults)
      if (["pending", "skipped", "todo"].includes(t.status))
        console.log(`SKIP: server: ${t.fullName}: marked ${t.status === "todo" ? "todo" : "skip"} in ${require("path").relative(process.cwd(), f.name)}`);
  console.log(`server: ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${r.numPendingTests + r.numTodoTests} skipped`);
' "$report" 2>/dev/null || echo "server: 0 passed, 1 failed (no report)"
rm -f "$report"
exit $rc
