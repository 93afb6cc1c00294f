#!/bin/sh
# The layers of src/ call only downwards (docs/ARCHITECTURE.md): a file may
# include headers of its own folder and of the folders below it, never above.
#   objects -> memory -> backend -> support
# (memory reaches the backend only through backend.h's table.)
# A backend's folder (backend/cuda, backend/host) is of the backend layer: its
# files may include headers of backend/, support/ and their own folder; its
# headers are private to it, so no file outside that folder includes them.
# Inside a folder, files call each other without a circle: the calls
# between object files (the symbols one leaves undefined that another
# defines, as nm lists them) must sort in an order.
#   check_layers.sh SRC_DIR
#   check_layers.sh --calls OBJECT...    (the library's object files)
#   check_layers.sh --selftest SRC_DIR   (bad includes and a circle of calls must fail)
set -eu
if [ "${1:-}" = "--calls" ]; then
    shift
    status=0
    tmp=${TMPDIR:-/tmp}/cpool_calls.$$
    mkdir -p "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    # Each object's folder and name (src/memory/alloc.c.o -> memory alloc.c),
    # what it defines and what it needs.
    for obj in "$@"; do
        if [ ! -f "$obj" ]; then
            echo "check_layers: no object file $obj"
            exit 1
        fi
        folder=$(basename "$(dirname "$obj")")
        name=$(basename "$obj" .o)
        nm --defined-only "$obj" | awk -v f="$name" '$2 ~ /^[TDBRC]$/ {print $3, f}' >>"$tmp/defs.$folder"
        nm -u "$obj" | awk -v f="$name" '{print $NF, f}' >>"$tmp/uses.$folder"
    done
    for defs in "$tmp"/defs.*; do
        folder=${defs#"$tmp/defs."}
        # caller callee, one line per pair of files of the folder
        awk 'NR == FNR { home[$1] = $2; next } ($1 in home) && home[$1] != $2 { print $2, home[$1] }' \
            "$defs" "$tmp/uses.$folder" | sort -u >"$tmp/calls.$folder"
        if ! tsort "$tmp/calls.$folder" >/dev/null 2>"$tmp/loop.$folder"; then
            echo "check_layers: files of $folder/ call each other in a circle:"
            sed -n 's/^tsort: //p' "$tmp/loop.$folder" | grep -v 'input contains a loop' | sed 's/^/  /'
            status=1
        fi
    done
    [ $status -eq 0 ] && echo "check_layers: no two files of a folder call each other, directly or around a circle"
    exit $status
fi
if [ "${1:-}" = "--selftest" ]; then
    src=${2:?usage: check_layers.sh --selftest SRC_DIR}
    tmp=${TMPDIR:-/tmp}/cpool_layers.$$
    mkdir -p "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    # caught NAME FILE HEADER MESSAGE: a copy of SRC_DIR where FILE includes
    # HEADER must fail with MESSAGE.
    caught() {
        rm -rf "$tmp/src"
        mkdir -p "$tmp/src"
        cp -R "$src/." "$tmp/src/"
        printf '#include "%s"\n' "$3" >>"$tmp/src/$2"
        if sh "$0" "$tmp/src" >"$tmp/out" 2>&1; then
            echo "selftest: $1 was not caught"
            exit 1
        fi
        grep -q "$4" "$tmp/out" || { cat "$tmp/out"; exit 1; }
        echo "selftest: $1 was caught"
    }
    caught "an include of objects/ from memory/" memory/alloc.c internal.h \
        "alloc.c (memory) includes objects/internal.h: a call upwards"
    caught "an include of a backend's private header from objects/" objects/device.c host_backend.h \
        "device.c (objects) includes backend/host/host_backend.h: a header private to backend/host"
    caught "an include of one backend's header from another's folder" backend/cuda/peer.c host_memory.h \
        "peer.c (backend/cuda) includes backend/host/host_memory.h: a header private to backend/host"
    # Three files of one folder calling around a circle, and a folder
    # whose calls only go one way.
    mkdir -p "$tmp/calls/circle" "$tmp/calls/line"
    printf 'void b(void);\nvoid a(void) { b(); }\n' >"$tmp/a.c"
    printf 'void c(void);\nvoid b(void) { c(); }\n' >"$tmp/b.c"
    printf 'void a(void);\nvoid c(void) { a(); }\n' >"$tmp/c.c"
    printf 'void d(void) {}\n' >"$tmp/d.c"
    for f in a b c; do cc -c "$tmp/$f.c" -o "$tmp/calls/circle/$f.c.o"; done
    cc -c "$tmp/a.c" -o "$tmp/calls/line/a.c.o"
    cc -c "$tmp/d.c" -o "$tmp/calls/line/d.c.o"
    if sh "$0" --calls "$tmp"/calls/*/*.o >"$tmp/out" 2>&1; then
        echo "selftest: a circle of calls was not caught"
        exit 1
    fi
    grep -q "files of circle/ call each other in a circle" "$tmp/out" || { cat "$tmp/out"; exit 1; }
    if grep -q "line/" "$tmp/out"; then
        cat "$tmp/out"
        exit 1
    fi
    echo "selftest: the circle of calls was caught"
    exit 0
fi
src=${1:?usage: check_layers.sh SRC_DIR}
status=0
backends=""
for d in "$src"/backend/*/; do
    [ -d "$d" ] && backends="$backends backend/$(basename "$d")"
done
folders="objects memory backend$backends support"
# below FOLDER: the folders a file of FOLDER may include from, besides its own
below() {
    case $1 in
    objects) echo "memory backend support" ;;
    memory) echo "backend support" ;;
    backend) echo "support" ;;
    backend/*) echo "backend support" ;;
    support) echo "" ;;
    esac
}
for layer in $folders; do
    allowed="$layer $(below "$layer")"
    for file in "$src/$layer"/*.[ch]; do
        for header in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file"); do
            case $header in capturepool.h | capturepool_nccl.h) continue ;; esac
            home=""
            for d in $folders; do
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
                case $home in
                backend/*) echo "check_layers: $file ($layer) includes $home/$header: a header private to $home" ;;
                *) echo "check_layers: $file ($layer) includes $home/$header: a call upwards" ;;
                esac
                status=1
                ;;
            esac
        done
    done
done
[ $status -eq 0 ] && echo "check_layers: every include of src/ points down or sideways"
exit $status
