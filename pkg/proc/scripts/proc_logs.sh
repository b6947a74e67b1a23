# shellcheck shell=bash
# The output of a background process (proc.go, Logs), run as: bash -c SCRIPT sbx-logs DIR
# FOLLOW TAIL. Writes what the process in DIR kept of its stdout and stderr to its own stdout
# and stderr: the last TAIL lines of each when TAIL >= 0, and with FOLLOW=1 it then follows both
# until the process has exited and all its output is shown; output dropped from the ring while
# it follows is skipped. Exits 3 when there is no such process, else 0.
p=$1 follow=$2 tail=$3
[ -e "$p/meta" ] || exit 3
read -r chunk 2>/dev/null <"$p/chunk"
declare -A pos=([stdout]=0 [stderr]=0)
total() { local n='' sz; read -r n 2>/dev/null <"$p/$1.n"; tot=0
	[ -n "$n" ] || return 0
	sz=$(wc -c <"$p/$1.$((n % 4))" 2>/dev/null) || sz=0 # not stat: see proc_launch.sh
	tot=$((n * chunk + sz)); }
emit() { local g=${pos[$1]} n='' k off e
	read -r n 2>/dev/null <"$p/$1.n"; [ -n "$n" ] || return 0
	[ "$n" -gt 3 ] && [ "$g" -lt $(( (n - 3) * chunk )) ] && g=$(( (n - 3) * chunk ))
	while [ "$g" -lt "$3" ]; do
		k=$((g / chunk)) off=$((g % chunk))
		e=$(( $3 - k * chunk )); [ "$e" -gt "$chunk" ] && e=$chunk
		tail -c "+$((off + 1))" -- "$p/$1.$((k % 4))" | head -c "$((e - off))" >&"$2"
		g=$((k * chunk + e))
	done
	pos[$1]=$g; }
fin=0; [ -e "$p/exit" ] && fin=1
total stdout; lo=$tot; total stderr; le=$tot
if [ "$tail" -ge 0 ]; then
	emit stdout 1 "$lo" | tail -n "$tail"
	emit stderr 1 "$le" | tail -n "$tail" >&2
else
	emit stdout 1 "$lo"; emit stderr 2 "$le"
fi
pos[stdout]=$lo pos[stderr]=$le
[ "$follow" = 1 ] || exit 0
while [ "$fin" = 0 ]; do
	sleep 0.25
	[ -e "$p/exit" ] && fin=1
	total stdout; emit stdout 1 "$tot"
	total stderr; emit stderr 2 "$tot"
done
exit 0
