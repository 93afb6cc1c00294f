#!/bin/sh
# The layers of src/ call only downwards (docs/ARCHITECTURE.md): a file may
# include headers of its own folder and of the folders below it, never above.
#   objects -> memory -> backend -> support
# (memory reaches the backend only through backend.h's table.)
#   check_layers.sh SRC_DIR
#   check_layers.sh --selftest SRC_DIR   (a copy with one include upwards must fail)
set -eu
if [ "${1:-}" = "--selftest" ]; then
    src=${2:?usage: check_layers.sh --selftest SRC_DIR}
    tmp=${TMPDIR:-/tmp}/cpool_layers.$$
    mkdir -p "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    cp -R "$src/." "$tmp/"
    printf '#include "internal.h"\n' >>"$tmp/memory/alloc.c"
    if sh "$0" "$tmp" >"$tmp/out" 2>&1; then
        echo "selftest: an include of objects/ from memory/ was not caught"
        exit 1
    fi
    grep -q "alloc.c (memory) includes objects/internal.h" "$tmp/out" || { cat "$tmp/out"; exit 1; }
    echo "selftest: the upward include was caught"
    exit 0
fi
src=${1:?usage: check_layers.sh SRC_DIR}
status=0
# below LAYER: the folders a file of LAYER may include from, besides its own
below() {
    case $1 in
    objects) echo "memory backend support" ;;
    memory) echo "backend support" ;;
    backend) echo "support" ;;
    support) echo "" ;;
    esac
}
for layer in objects memory backend support; do
    allowed="$layer $(below "$layer")"
    for file in "$src/$layer"/*.[ch]; do
        for header in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file"); do
            case $header in capturepool.h | capturepool_nccl.h) continue ;; esac
            home=""
            for d in objects memory backend support; do
                [ -f "$src/$d/$header" ] && home=$d
            done
            if [ -z "$home" ]; then
                echo "check_layers: $file includes $header, which is in no layer"
                status=1
                continue
            fi
            case " $allowed " in
            *" $home "*) ;;
            *)
                echo "check_layers: $file ($layer) includes $home/$header: a call upwards"
                status=1
                ;;
            esac
        done
    done
done
[ $status -eq 0 ] && echo "check_layers: every include of src/ points down or sideways"
exit $status
