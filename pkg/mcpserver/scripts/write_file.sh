# shellcheck shell=bash
# The write_file tool (files.go), run as the sandbox's user: bash -c SCRIPT sbx-script FILE
# MKDIRS. Saves stdin as FILE through a temporary file in the same directory and one rename,
# so readers see the old file or the new one, never a part. MKDIRS = 1 creates missing parent
# directories. A new file gets mode 0644, a replaced one keeps its mode. Exits 3 when the
# directory is missing, 4 when FILE is a directory (the reason on stderr), 1 on any other
# failure.
f=$1 d=${1%/*}
[ -n "$d" ] || d=/
if [ "$2" = 1 ]; then mkdir -p -- "$d" || exit 1; fi
[ -d "$d" ] || { echo "no such directory: $d (set createDirs to create it)" >&2; exit 3; }
[ -d "$f" ] && { echo "is a directory: $f" >&2; exit 4; }
t=$(mktemp -- "$d/.sbx-write.XXXXXXXX") || exit 1
trap 'rm -f -- "$t"' EXIT
cat >"$t" || exit 1
# busybox's chmod (the toolbox's) has no --reference: stat gives the mode.
if [ -e "$f" ]; then chmod --reference="$f" -- "$t" 2>/dev/null || chmod "$(stat -c %a -- "$f")" -- "$t"; else chmod 0644 -- "$t"; fi
mv -fT -- "$t" "$f" || exit 1
trap - EXIT
