# shellcheck shell=bash
# The list_files tool (files.go), run as the sandbox's user: bash -c SCRIPT sbx-script DIR
# DEPTH MAX. Lists DIR to DEPTH as NUL-terminated "TYPE<TAB>SIZE<TAB>PATH" records, at most
# MAX + 1 of them, so the caller knows when there were more. Exits 3 when DIR is not a
# directory (the reason on stderr).
[ -d "$1" ] || { echo "not a directory: $1" >&2; exit 3; }
find "$1" -mindepth 1 -maxdepth "$2" -printf '%y\t%s\t%P\0' 2>/dev/null | head -z -n "$(($3 + 1))"
