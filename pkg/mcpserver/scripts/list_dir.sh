# shellcheck shell=bash
# The list_files tool (files.go), run as the sandbox's user: bash -c SCRIPT sbx-script DIR
# DEPTH MAX. Lists DIR to DEPTH as NUL-terminated "TYPE<TAB>SIZE<TAB>PATH" records, at most
# MAX + 1 of them, so the caller knows when there were more. Exits 3 when DIR is not a
# directory (the reason on stderr). Without GNU find (busybox's, the toolbox's) the records are
# made here, one stat for each regular file.
[ -d "$1" ] || { echo "not a directory: $1" >&2; exit 3; }
if find / -maxdepth 0 -printf '' 2>/dev/null; then
	find "$1" -mindepth 1 -maxdepth "$2" -printf '%y\t%s\t%P\0' 2>/dev/null | head -z -n "$(($3 + 1))"
	exit 0
fi
n=0
while IFS= read -r -d '' p && [ "$n" -le "$3" ]; do
	y=o s=0
	if [ -L "$p" ]; then y=l; elif [ -d "$p" ]; then y=d; elif [ -f "$p" ]; then y=f s=$(stat -c %s -- "$p" 2>/dev/null) || s=0; fi
	r=${p#"${1%/}"/}
	printf '%s\t%s\t%s\0' "$y" "$s" "$r"
	n=$((n + 1))
done < <(find "$1" -mindepth 1 -maxdepth "$2" -print0 2>/dev/null)
exit 0
