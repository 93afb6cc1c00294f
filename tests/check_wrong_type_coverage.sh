#!/bin/sh
# No handle argument of a public function can be left out of the misuse
# test's wrong-type table.
#
#   check_wrong_type_coverage.sh TABLE_SOURCE HEADER...
#   check_wrong_type_coverage.sh --selftest TABLE_SOURCE HEADER...
#
# Lists, from each HEADER with its comments removed, the handle arguments of
# every declared function: its parameters of type cpool_device *,
# cpool_stream *, cpool_event *, cpool_pool *, cpool_graph * or cpool_param *
# (const or not; an out-pointer, type **, is none), as "function TYPE". Then reads the rows of TABLE_SOURCE
# (tests/test_misuse.c) between the lines "wrong-type-table-begin" and
# "wrong-type-table-end", {"function", "argument", T_TYPE, call}, as
# "function TYPE". Fails, listing them, when a function has fewer rows of a
# type than arguments of that type.
#
# --selftest checks the checker: a copy of the first HEADER with one more
# declaration taking a pool and a stream must fail and name both arguments.
set -eu

if [ "${1:-}" = "--selftest" ]; then
    shift
    table=${1:?usage: check_wrong_type_coverage.sh --selftest TABLE_SOURCE HEADER...}
    header=${2:?usage: check_wrong_type_coverage.sh --selftest TABLE_SOURCE HEADER...}
    shift 2
    tmp=${TMPDIR:-/tmp}/cpool_wrong_type_coverage.$$
    mkdir -p "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    sed 's|^#endif /\* CAPTUREPOOL_H \*/|cpool_status cpool_selftest_new_function(const cpool_pool *pool, int flags, cpool_stream *s);\n&|' \
        "$header" >"$tmp/capturepool.h"
    if ! grep -q cpool_selftest_new_function "$tmp/capturepool.h"; then
        echo "selftest: could not add a declaration to a copy of $header"
        exit 1
    fi
    if sh "$0" "$table" "$tmp/capturepool.h" "$@" >"$tmp/out" 2>&1; then
        cat "$tmp/out"
        echo "selftest FAILED: a header with an extra function passed the check"
        exit 1
    fi
    if ! grep -q '^  cpool_selftest_new_function POOL$' "$tmp/out" ||
        ! grep -q '^  cpool_selftest_new_function STREAM$' "$tmp/out"; then
        cat "$tmp/out"
        echo "selftest FAILED: the new function's handle arguments were not listed"
        exit 1
    fi
    echo "selftest passed: the check fails and names both arguments of cpool_selftest_new_function"
    exit 0
fi

table=${1:?usage: check_wrong_type_coverage.sh TABLE_SOURCE HEADER...}
shift
[ $# -gt 0 ] || { echo "usage: check_wrong_type_coverage.sh TABLE_SOURCE HEADER..."; exit 2; }
for f in "$table" "$@"; do
    if [ ! -r "$f" ]; then
        echo "cannot read $f"
        exit 2
    fi
done

tmp=${TMPDIR:-/tmp}/cpool_wrong_type_coverage_run.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

# Each header: drop /* */ comments (across lines, \001 standing for a newline
# meanwhile) and // comments, one declaration per line (split at ';'), then
# "name params" for each function (a name followed by '(' but not by '(*',
# which declares a function-pointer type), then one line per handle
# parameter.
for header in "$@"; do
    tr '\n' '\001' <"$header" |
        sed -e 's|/\*[^*]*\*\{1,\}\([^/*][^*]*\*\{1,\}\)*/| |g' | tr '\001' '\n' | sed -e 's|//.*$||' |
        tr '\n' ' ' | tr ';' '\n' |
        sed -n 's/.*[^a-z_]\(cpool_[a-z_]*\)[[:space:]]*(\([^*].*\)).*/\1 \2/p' |
        awk '{
            fn = $1
            $1 = ""
            n = split($0, params, ",")
            for (i = 1; i <= n; i++)
                if (match(params[i], /(^|[^a-z_])cpool_(device|stream|event|pool|graph|param)[[:space:]]*\*[[:space:]]*[a-z_]/)) {
                    t = substr(params[i], RSTART, RLENGTH)
                    sub(/^[^c]*cpool_/, "", t)
                    sub(/[[:space:]]*\*[[:space:]]*[a-z_]$/, "", t)
                    print fn, toupper(t)
                }
        }'
done | sort >"$tmp/declared"
if [ ! -s "$tmp/declared" ]; then
    echo "no handle argument found in $*: the extraction is broken"
    exit 2
fi

if ! grep -q 'wrong-type-table-begin' "$table" || ! grep -q 'wrong-type-table-end' "$table"; then
    echo "$table has no wrong-type-table-begin / wrong-type-table-end markers"
    exit 2
fi
sed -n '/wrong-type-table-begin/,/wrong-type-table-end/p' "$table" |
    sed -n 's/^[[:space:]]*{[[:space:]]*"\(cpool_[a-z_]*\)",[^,]*,[[:space:]]*T_\([A-Z]*\),.*/\1 \2/p' |
    sort >"$tmp/covered"

missing=$(comm -23 "$tmp/declared" "$tmp/covered")
if [ -n "$missing" ]; then
    echo "FAIL: handle arguments declared in $* with no row in the wrong-type table of $table:"
    printf '%s\n' "$missing" | sed 's/^/  /'
    exit 1
fi
echo "ok: all $(wc -l <"$tmp/declared" | tr -d ' ') handle arguments have wrong-type rows"
