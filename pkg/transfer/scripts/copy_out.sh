# shellcheck shell=bash
# Copy out of a sandbox (transfer.go, Copier.Out), run as: bash -c SCRIPT sbx-cp SRC SRCDIR FOLLOW RAW
# MEASURE. Writes the sandbox path SRC as a tar stream on stdout. A symlink named as SRC is
# followed only with FOLLOW=1 or SRCDIR=1 (a trailing slash; SRC must then be a directory);
# otherwise it is refused before any data, unless RAW=1 (the raw stream is wanted). MEASURE=1
# first reports the tree's size. Hardlinks are stored as files. Stderr: "sbx-cp total BYTES
# FILES", and "sbx-cp error KIND [ARG]" with exit 3 when refused; else tar's exit status.
# Busybox's tar and find (the toolbox's) get the options they know; its tar stores a hardlink
# as a link, which sbx refuses on the host.
export LC_ALL=C
src=$1 srcdir=$2 follow=$3 raw=$4 measure=$5
say() { printf 'sbx-cp %s\n' "$*" >&2; }
fail() { say error "$@"; exit 3; }
dir=${src%/*} name=${src##*/}
member=$name opts=()
if [ -L "$src" ]; then
	if [ "$follow" = 1 ] || [ "$srcdir" = 1 ]; then
		[ -e "$src" ] || fail missing "$src"
		if [ -d "$src" ]; then member=$name/.; else opts=(--dereference); fi
	elif [ "$raw" != 1 ]; then
		fail symlink "$(readlink -- "$src")"
	fi
elif [ ! -e "$src" ]; then
	fail missing "$src"
fi
[ "$srcdir" = 1 ] && [ ! -d "$src" ] && fail notdir "$src"
gnu=0; case $(tar --version 2>/dev/null) in *GNU*) gnu=1 ;; esac
if [ "$measure" = 1 ]; then
	if find / -maxdepth 0 -printf '' 2>/dev/null; then sizes() { find -H "$src" -type f -printf '%s\n'; }
	else sizes() { find -H "$src" -type f -exec stat -c %s -- {} +; }; fi
	say total "$(sizes 2>/dev/null | awk '{ b += $1; n++ } END { printf "%.0f %.0f", b, n }')"
fi
if [ "$gnu" = 1 ]; then opts+=(--hard-dereference); elif [ "${opts[0]}" = --dereference ]; then opts=(-h); fi
exec tar -c -f - --numeric-owner "${opts[@]}" -C "${dir:-/}" -- "$member"
