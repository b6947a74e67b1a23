# shellcheck shell=bash
# The background processes under directory $1 (see proc.go), or only process $3, exiting 3
# when there is none: one tab-separated line each with the ID, pid, start, exit code, end,
# timed out, alive, the current chunk of stdout and of stderr, the chunk size, and the
# metadata line. The sandbox can write anything there, so only directories named as sbx names
# them count, and each field is read from a regular file, as one line of at most 64 bytes
# (the metadata line: at most $2 bytes, so a longer one arrives cut and does not parse).
export LC_ALL=C
dir=$1 max=$2 only=$3 found=
# get FILE N VAR...: the first line of regular file FILE, at most N bytes, split into VARs
# (a last _ takes the rest of the line, so the field before it is one word).
get() { local f=$1 n=$2; shift 2; [ -f "$f" ] && read -r -n "$n" "$@" <"$f"; } 2>/dev/null
for p in "$dir"/*/; do
	p=${p%/} id=${p##*/}
	case $id in '' | *[!A-Za-z0-9_-]*) continue ;; esac
	[ "${#id}" -le 64 ] || continue
	[ -f "$p/meta" ] || continue
	[ -n "$only" ] && [ "$id" != "$only" ] && continue
	pid='' start='' spid='' rc='' end='' no='' ne='' chunk='' meta='' alive=0 t=0
	get "$p/pid" 64 pid start spid _
	get "$p/exit" 64 rc end _
	get "$p/stdout.n" 64 no _
	get "$p/stderr.n" 64 ne _
	get "$p/chunk" 64 chunk _
	IFS= get "$p/meta" "$max" meta
	if [ -n "$pid" ] && [ -d "/proc/$pid" ]; then alive=1; elif [ -n "$spid" ] && [ -d "/proc/$spid" ]; then alive=1; fi
	[ -e "$p/timedout" ] && t=1
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$pid" "$start" "$rc" "$end" "$t" "$alive" "${no:-0}" "${ne:-0}" "$chunk" "$meta"
	found=1
done
[ -n "$only" ] && [ -z "$found" ] && exit 3
exit 0
