#!/bin/sh
# A new public function cannot be left out of the misuse table.
#
#   check_api_coverage.sh HEADER TABLE_SOURCE
#   check_api_coverage.sh --selftest HEADER TABLE_SOURCE
#
# Lists every function declared in HEADER (include/capturepool.h): with the
# comments removed, every name matching cpool_[a-z_]+ that is followed by
# '(' (a declaration or a function-pointer parameter's name never is: those
# are followed by ')'). Then reads the rows of the table in TABLE_SOURCE
# (tests/test_misuse.c), between the lines "misuse-table-begin" and
# "misuse-table-end", whose first field is the function's name as a string
# literal. Fails, listing them, if a declared function is named by no row,
# or if a row names a function the header does not declare.
#
# --selftest checks the checker: a copy of HEADER with one more declaration
# must fail and name it. Used as its own ctest test.
set -eu

if [ "${1:-}" = "--selftest" ]; then
    shift
    header=${1:?usage: check_api_coverage.sh --selftest HEADER TABLE_SOURCE}
    table=${2:?usage: check_api_coverage.sh --selftest HEADER TABLE_SOURCE}
    tmp=${TMPDIR:-/tmp}/cpool_api_coverage.$$
    mkdir -p "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    sed 's|^#endif /\* CAPTUREPOOL_H \*/|cpool_status cpool_selftest_new_function(cpool_pool *pool, int flags);\n&|' \
        "$header" >"$tmp/capturepool.h"
    if ! grep -q cpool_selftest_new_function "$tmp/capturepool.h"; then
        echo "selftest: could not add a declaration to a copy of $header"
        exit 1
    fi
    if sh "$0" "$tmp/capturepool.h" "$table" >"$tmp/out" 2>&1; then
        cat "$tmp/out"
        echo "selftest FAILED: a header with an extra function passed the coverage check"
        exit 1
    fi
    if ! grep -q '^  cpool_selftest_new_function$' "$tmp/out"; then
        cat "$tmp/out"
        echo "selftest FAILED: the missing function was not listed"
        exit 1
    fi
    echo "selftest passed: the check fails and names cpool_selftest_new_function"
    exit 0
fi

header=${1:?usage: check_api_coverage.sh HEADER TABLE_SOURCE}
table=${2:?usage: check_api_coverage.sh HEADER TABLE_SOURCE}
for f in "$header" "$table"; do
    if [ ! -r "$f" ]; then
        echo "cannot read $f"
        exit 2
    fi
done

# Declared functions: drop /* */ comments (across lines, \001 standing for
# a newline meanwhile) and // comments, join the lines (a declaration may
# break after its '('), then take each name followed by '(' but not by '(*'
# (`typedef cpool_status (*cpool_capture_fn)(...)` declares a type).
declared=$(tr '\n' '\001' <"$header" |
    sed -e 's|/\*[^*]*\*\{1,\}\([^/*][^*]*\*\{1,\}\)*/| |g' | tr '\001' '\n' | sed -e 's|//.*$||' | tr '\n' ' ' |
    grep -o 'cpool_[a-z_]*[[:space:]]*([^*]' | sed 's/[[:space:]]*(.$//' | sort -u)
if [ -z "$declared" ]; then
    echo "no function found in $header: the extraction is broken"
    exit 2
fi

# Functions named by the table's rows.
if ! grep -q 'misuse-table-begin' "$table" || ! grep -q 'misuse-table-end' "$table"; then
    echo "$table has no misuse-table-begin / misuse-table-end markers"
    exit 2
fi
covered=$(sed -n '/misuse-table-begin/,/misuse-table-end/p' "$table" |
    grep -o '^[[:space:]]*{[[:space:]]*"cpool_[a-z_]*"' | grep -o 'cpool_[a-z_]*' | sort -u)

missing=$(printf '%s\n' "$declared" | while read -r fn; do
    printf '%s\n' "$covered" | grep -qx "$fn" || printf '%s\n' "$fn"
done)
unknown=$(printf '%s\n' "$covered" | while read -r fn; do
    [ -z "$fn" ] || printf '%s\n' "$declared" | grep -qx "$fn" || printf '%s\n' "$fn"
done)

n_declared=$(printf '%s\n' "$declared" | wc -l | tr -d ' ')
status=0
if [ -n "$missing" ]; then
    echo "FAIL: functions declared in $header with no row in the misuse table of $table:"
    printf '%s\n' "$missing" | sed 's/^/  /'
    status=1
fi
if [ -n "$unknown" ]; then
    echo "FAIL: rows of $table name functions that $header does not declare:"
    printf '%s\n' "$unknown" | sed 's/^/  /'
    status=1
fi
if [ $status -eq 0 ]; then
    echo "ok: all $n_declared functions declared in $(basename "$header") have misuse rows"
fi
exit $status
