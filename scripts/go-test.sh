#!/usr/bin/env bash
# Runs go test with the given arguments, keeps the verbose log, and ends with one summary
# line of passed/failed/skipped tests plus the name and reason of every skip, so a CI log
# shows at a glance whether the integration tests really ran. Summary lines some packages
# print themselves ("probes from inside: N passed, N failed") are kept too.
set -euo pipefail
log=$(mktemp -t sbx-go-test.XXXXXX)
trap 'rm -f "$log"' EXIT
set +e
# A test's message that spans lines continues, indented further, under its file:line.
go test -v "$@" 2>&1 | tee "$log" | awk '
	/^(ok|FAIL|panic:)|^[ \t]*--- (FAIL|SKIP)|_test\.go:[0-9]+:|\.txtar:[0-9]+:|^[a-z ()-]+: [0-9]+ passed, [0-9]+ failed/ { print; more = /_test\.go:[0-9]+:/; fflush(); next }
	more && /^        / { print; fflush(); next }
	{ more = 0 }'
status=${PIPESTATUS[0]}
set -e
passed=$(grep -cE '^\s*--- PASS' "$log" || true)
failed=$(grep -cE '^\s*--- FAIL' "$log" || true)
skipped=$(grep -cE '^\s*--- SKIP' "$log" || true)
if [ "$skipped" -gt 0 ]; then
	echo "skipped tests:"
	grep -E '^\s*--- SKIP' "$log" | sed 's/^\s*/  /'
fi
echo "go test: $passed passed, $failed failed, $skipped skipped"
exit "$status"
