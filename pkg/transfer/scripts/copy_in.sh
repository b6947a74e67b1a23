# shellcheck shell=bash
# Copy into a sandbox (transfer.go, Copier.In), run as: bash -c SCRIPT sbx-cp DST DSTDIR BASE KIND MODE
# OWNER ID PREFIX RAW. DST is the sandbox path and DSTDIR 1 when it was written with a trailing
# slash; BASE the name the item lands under in an existing directory; KIND f (file), d
# (directory), c (a directory's contents, given MODE in octal) or s (a tar stream); OWNER 1 keeps
# the tar's owners; ID and PREFIX name the staging directory PREFIX+ID; RAW 1 when stdin is the
# tar itself (through the agent), else frames "LEN\n" and LEN bytes ended by "0\n".
# Stdout: "sbx-cp ready" once the destination is checked and staging exists, "sbx-cp done" when
# the item is in place, "sbx-cp error KIND [ARG]" (exit 3) otherwise; tar's messages, at most
# 8 KiB, go to stderr. Placement follows docker cp. The item is extracted as the sandbox user
# into the staging directory, made in the directory the final rename goes into so the rename
# stays inside one file system, and renamed only after a complete stream. The staging directory
# is flock'ed for its whole life; one nobody holds is a leftover of a killed copy and is removed.
# GNU tar and find are used as they are; busybox's (the toolbox's) get the options they know.
export LC_ALL=C
shopt -s dotglob nullglob
dst=$1 dstdir=$2 base=$3 kind=$4 mode=$5 owner=$6 id=$7 prefix=$8 raw=$9
S='' P='' t='' dest='' merge=0
declare -A kept
say() { printf 'sbx-cp %s\n' "$*"; }
clean() { rm -rf -- "$1" 2>/dev/null || { chmod -R u+rwx -- "$1" 2>/dev/null; rm -rf -- "$1"; }; }
fail() { [ -n "$S" ] && clean "$S"; say error "$@"; exit 3; }
isdir() { [ -d "$1" ] && [ ! -L "$1" ]; }
exists() { [ -e "$1" ] || [ -L "$1" ]; }
parent() { local p=${1%/*}; printf '%s' "${p:-/}"; }
# mountOf prints the mount point holding directory $1, from the mount table: not stat -c %m,
# which fails under gVisor 20221219 (coreutils passes statx AT_NO_AUTOMOUNT).
mountOf() {
	local p m best=/
	p=$(cd -P -- "$1" 2>/dev/null && pwd) || p=$1
	while read -r _ _ _ _ m _; do
		case $p/ in "${m%/}"/*) [ ${#m} -gt ${#best} ] && best=$m ;; esac
	done </proc/self/mountinfo
	printf '%s' "$best"
}
d=${dst%/}
if [ -d "$dst" ]; then
	if [ "$kind" = c ] || [ "$kind" = s ]; then P=$dst merge=1
	elif isdir "$d/$base"; then
		[ "$kind" = d ] || fail isdir "$d/$base"
		P=$d/$base merge=1
	else
		P=$dst t=$d/$base
		[ "$kind" = d ] && exists "$t" && fail notdir "$t"
	fi
elif exists "$dst"; then
	# shellcheck disable=SC2015 # fail unless both hold
	[ "$dstdir" = 0 ] && [ "$kind" = f ] || fail notdir "$dst"
	P=$(parent "$dst") t=$dst
else
	[ "$kind" = s ] && fail nodir "$dst"
	[ "$dstdir" = 1 ] && [ "$kind" = f ] && fail nodir "$dst"
	P=$(parent "$dst") t=$dst
	[ -d "$P" ] || fail nodir "$P"
fi
if ! err=$(mkdir -m 700 -- "${P%/}/$prefix$id" 2>&1); then
	case $err in
	*"Read-only file system"*) fail rofs "$(mountOf "$P")";;
	*"Permission denied"*) fail denied "$P";;
	*"No space left"*|*"quota exceeded"*) fail nospace "$P";;
	*) fail mkdir "${err//$'\n'/ }";;
	esac
fi
S=${P%/}/$prefix$id
{ exec 9<"$S" && flock -n 9; } 2>/dev/null || fail busy "$P"
trap 'clean "$S"; exit 143' TERM INT HUP
for old in "${P%/}/$prefix"*; do
	# shellcheck disable=SC2015 # skip unless both hold
	[ "$old" != "$S" ] && isdir "$old" || continue
	( exec 8<"$old" && flock -n 8 && clean "$old" ) 2>/dev/null
done
I=$S/item root=$S
if [ "$kind" = c ] || [ "$kind" = s ]; then mkdir -- "$I" || fail mkdir "$I"; root=$I; fi
gnu=0; case $(tar --version 2>/dev/null) in *GNU*) gnu=1 ;; esac
if [ "$gnu" = 1 ]; then
	own=(--no-same-owner --same-permissions)
	[ "$owner" = 1 ] && own=(--same-owner --same-permissions)
else
	own=(-o)
	[ "$owner" = 1 ] && own=()
fi
say ready
# take N copies N bytes of stdin and reads no further: GNU head does, busybox's reads ahead
# (stdio), its dd counting bytes does not.
case $(head --version 2>/dev/null) in
*GNU*) take() { head -c "$1"; } ;;
*) take() { dd bs=65536 iflag=count_bytes count="$1" 2>/dev/null; } ;;
esac
recv() {
	local n
	while IFS= read -r n; do
		case $n in
		0) return 0;;
		''|*[!0-9]*) return 1;;
		esac
		take "$n"
	done
	return 1
}
if [ "$raw" = 1 ]; then
	tar -x -f - -C "$root" "${own[@]}" 2>&1 >/dev/null | { head -c 8192; cat >/dev/null; } >&2
	st=(0 "${PIPESTATUS[0]}")
else
	recv | tar -x -f - -C "$root" "${own[@]}" 2>&1 >/dev/null | { head -c 8192; cat >/dev/null; } >&2
	st=("${PIPESTATUS[@]}")
fi
[ "${st[0]}" = 0 ] || fail incomplete
[ "${st[1]}" = 0 ] || fail tar "${st[1]}"
exists "$I" || fail empty
case $kind in
d) isdir "$I" || fail kind;;
f) [ -d "$I" ] && fail kind;;
c) chmod -- "$mode" "$I" || fail mode;;
esac
find "$I" ! -type l \( -perm -4000 -o -perm -2000 \) -exec chmod ug-s -- {} + || fail strip
ro=()
if [ "$gnu" = 1 ]; then
	while IFS= read -r -d '' l; do ro+=("$l"); done < <(find "$I" -type d ! -perm -u+w -printf '%m %P\0')
else
	while IFS= read -r -d '' l; do
		m=$(stat -c %a -- "$l") || fail mode
		r=${l#"$I"}; ro+=("$m ${r#/}")
	done < <(find "$I" -type d ! -perm -u+w -print0)
fi
if [ ${#ro[@]} -gt 0 ]; then find "$I" -type d ! -perm -u+w -exec chmod u+w -- {} + || fail mode; fi
conflicts() {
	local e n t
	kept[/$3]=1
	for e in "$1"/*; do
		n=${e##*/} t=${2%/}/$n
		exists "$t" || continue
		if isdir "$e"; then
			isdir "$t" || fail notdir "$t"
			conflicts "$e" "$t" "${3:+$3/}$n"
		elif isdir "$t"; then fail isdir "$t"
		fi
	done
}
merge() {
	local e n t batch=()
	for e in "$1"/*; do
		n=${e##*/} t=${2%/}/$n
		if isdir "$e" && isdir "$t"; then merge "$e" "$t" || return
		else batch+=("$e")
		fi
	done
	[ ${#batch[@]} -eq 0 ] || printf '%s\0' "${batch[@]}" | xargs -0 mv -f -t "$2" --
}
if [ "$merge" = 1 ]; then
	conflicts "$I" "$P" ""
	merge "$I" "$P" || fail move "$P"
	dest=${P%/}
else
	isdir "$t" && fail isdir "$t"
	mv -f -T -- "$I" "$t" || fail move "$t"
	dest=$t
fi
[ -n "$dest" ] || fail move "$P"
for l in "${ro[@]}"; do
	r=${l#* }
	[ -n "${kept[/$r]}" ] || chmod -- "${l%% *}" "$dest${r:+/$r}" 2>/dev/null
done
trap - TERM INT HUP
clean "$S"
say 'done'
