# shellcheck shell=bash
# The read_file tool (files.go), run as the sandbox's user: bash -c SCRIPT sbx-script FILE
# OFFSET LIMIT. Prints FILE's size, a newline, then up to LIMIT bytes from OFFSET. Exits 3 when
# FILE does not exist, 4 when it is not a regular file, 5 when it cannot be read (the reason on
# stderr), 1 on any other failure.
f=$1 off=$2 lim=$3
[ -e "$f" ] || { echo "no such file: $f" >&2; exit 3; }
[ -f "$f" ] || { echo "not a regular file: $f" >&2; exit 4; }
[ -r "$f" ] || { echo "permission denied: $f" >&2; exit 5; }
# wc, not stat: coreutils' stat passes statx AT_NO_AUTOMOUNT, which gVisor 20221219 refuses;
# wc -c takes a regular file's size without reading it.
sz=$(wc -c <"$f") || exit 1
echo "$((sz))"
tail -c "+$((off + 1))" -- "$f" | head -c "$lim"
