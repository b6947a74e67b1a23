# shellcheck shell=bash
# Background processes (proc.go, Start), in two roles. As sbx-launch, the exec's own process,
# exec_wrapper.sh starts it in detached mode as: bash -c SCRIPT sbx-launch TICKS GRACE CMD...
# It reads "DIR CHUNK" (the process's directory under ProcDir, the chunk size) and the metadata
# line from stdin, creates DIR, starts itself as the supervisor in a session of its own and exits
# 0 once the command runs: 3 when DIR exists (the ID is taken), 125 on any other failure. As
# sbx-proc DIR TICKS GRACE CHUNK CMD... it is that supervisor: it starts the command in a new
# session, feeds each output stream into the ring of chunks (head -c never reads past a chunk's
# end, and unbuffered it writes what it reads at once; without coreutils' stdbuf, busybox's dd
# counting bytes does both), enforces the timeout (TICKS of
# 0.2 s, 0: none), terminates what is left of the command's group when it ends (TERM, then KILL
# after GRACE ticks) and records the exit status. Nothing watches stdin, so the process lives on
# after the client goes.
if [ "$0" = sbx-launch ]; then
	ticks=$1 grace=$2; shift 2
	if ! { read -r p chunk && IFS= read -r meta; }; then echo "sbx: no process parameters on stdin" >&2; exit 125; fi
	r=${p%/*}
	mkdir -m 1777 "$r" 2>/dev/null
	if ! mkdir -m 0755 -- "$p"; then [ -e "$p" ] && exit 3; exit 125; fi
	printf '%s\n' "$chunk" >"$p/chunk"; printf '%s\n' "$meta" >"$p/meta"
	setsid "$BASH" -c "$BASH_EXECUTION_STRING" sbx-proc "$p" "$ticks" "$grace" "$chunk" "$@" </dev/null >/dev/null 2>"$p/supervisor.log" &
	i=0; while [ ! -s "$p/pid" ] && [ "$i" -lt 100 ]; do sleep 0.05; i=$((i+1)); done
	[ -s "$p/pid" ] && exit 0
	echo "sbx: the process did not start" >&2; exit 125
fi
p=$1 ticks=$2 grace=$3 chunk=$4; shift 4
if type -P stdbuf >/dev/null; then take() { stdbuf -o0 head -c "$chunk"; }
else take() { dd bs=65536 iflag=count_bytes count="$chunk" 2>/dev/null; }; fi
mkfifo "$p/.out" "$p/.err" "$p/.tick" || exit 1
exec 3<>"$p/.tick"
nap() { read -r -t "$1" -u 3 _; }
rot() {
	local n=0 f sz fails=0
	while :; do
		f=$p/$1.$((n % 4))
		: >"$f"; printf '%s\n' "$n" >"$p/$1.n"
		if ! take >>"$f"; then
			fails=$((fails+1)); [ "$fails" -ge 5 ] && { cat >/dev/null; return; }
			nap 1; continue
		fi
		fails=0
		# wc, not stat, which fails under gVisor 20221219 (statx AT_NO_AUTOMOUNT)
		sz=$(wc -c <"$f") || sz=0
		[ "$sz" -lt "$chunk" ] && return
		n=$((n+1))
	done
}
rot stdout <"$p/.out" & ro=$!
rot stderr <"$p/.err" & re=$!
setsid -- "$@" </dev/null >"$p/.out" 2>"$p/.err" 3<&- & c=$!
printf '%s %s %s\n' "$c" "$EPOCHREALTIME" "$$" >"$p/pid"
tm=
if [ "$ticks" -gt 0 ]; then
	( nap "$((ticks / 5)).$((ticks % 5 * 2))"; : >"$p/timedout"; kill -TERM -- "-$c" 2>/dev/null
	  nap "$((grace / 5))"; kill -KILL -- "-$c" 2>/dev/null ) & tm=$!
fi
wait "$c"; rc=$?
end=$EPOCHREALTIME
[ -n "$tm" ] && kill "$tm" 2>/dev/null
if kill -TERM -- "-$c" 2>/dev/null; then
	n=0; while [ "$n" -lt "$grace" ] && kill -0 -- "-$c" 2>/dev/null; do nap 0.2; n=$((n+1)); done
	kill -KILL -- "-$c" 2>/dev/null
fi
( nap 2; kill "$ro" "$re" 2>/dev/null ) & k=$!
wait "$ro" "$re"
kill "$k" 2>/dev/null
printf '%s %s\n' "$rc" "$end" >"$p/exit"
