# shellcheck shell=bash
# The watchdog of one command (exec.go), started by exec_wrapper.sh as: bash -c SCRIPT sbx-watch
# LEADER TICKS GRACE CTL DIR ID. When LEADER (the command) ends, when TICKS of 0.2 s have passed
# (0: never) or, with CTL stdin, when its stdin ends, it sends TERM to LEADER's process group,
# then KILL after GRACE ticks. It runs in a session of its own, so that kill spares it. With
# DIR (the exec directory, "" when it could not be made) it ticks on the fifo DIR/ID.tick
# without forking, leaves DIR/ID.oom when the OOM killer fired meanwhile, and removes DIR/ID and
# the fifo. It uses only shell builtins until the command's group is dead: by
# then a fork bomb may have used up every pid, and a fork would stall it. The agent, which ends a
# command itself, may TERM it with the command's descendants: it then only tidies up.
leader=$1 ticks=$2 grace=$3 ctl=$4 d=$5 id=$6
trap '[ -n "$d" ] && rm -f "$d/$id" "$d/$id.tick"; exit 0' TERM
[ -n "$d" ] && exec 3<>"$d/$id.tick"
tick() { read -r -t 0.2 -u 3 _ 2>/dev/null; [ $? -gt 128 ] || sleep 0.2; }
oom() { o=0; local f k v; for f in /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events; do
	if [ -r "$f" ]; then while read -r k v; do [ "$k" = oom_kill ] && o=$v; done <"$f"; return; fi; done; }
oom; oom0=$o
n=0
while kill -0 "$leader" 2>/dev/null; do
	if [ "$ctl" = stdin ]; then
		read -r -t 0.2 _; rc=$?
		if [ "$rc" -ne 0 ] && [ "$rc" -le 128 ]; then break; fi
	else tick; fi
	n=$((n+1))
	if [ "$ticks" -gt 0 ] && [ "$n" -ge "$ticks" ]; then break; fi
done
kill -TERM -- "-$leader" 2>/dev/null
n=0
while [ "$n" -lt "$grace" ] && kill -0 -- "-$leader" 2>/dev/null; do tick; n=$((n+1)); done
kill -KILL -- "-$leader" 2>/dev/null
if [ -n "$d" ]; then
	oom; [ "$o" -gt "$oom0" ] && : >"$d/$id.oom"
	rm -f "$d/$id" "$d/$id.tick"
fi
