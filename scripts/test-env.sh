#!/usr/bin/env bash
# Prepares a Docker engine and the debian:bookworm-slim base image for sbx's tests and demo.
# Idempotent: every step checks first and says what it does. State lives outside the repo.
set -euo pipefail

STATE_DIR=${SBX_TEST_STATE_DIR:-/var/lib/sbx-test}
CACHE_DIR=${SBX_TEST_CACHE_DIR:-/var/cache/sbx-test}
BASE_IMAGE=debian:bookworm-slim
MIRROR=${SBX_DEBIAN_MIRROR:-http://deb.debian.org/debian}

say() { printf 'test-env: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

engine_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

ensure_engine() {
	if command -v docker >/dev/null 2>&1 && engine_up; then
		say "engine answers: $(docker version --format 'server {{.Server.Version}}, API {{.Server.APIVersion}}')"
		return
	fi
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		die "no Docker engine answers and this is not root on Debian/Ubuntu, so it cannot be installed here.
hint: start Docker yourself (or set DOCKER_HOST to a running engine) and run this again"
	fi
	if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
		say "installing docker.io and debootstrap with apt-get"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
	fi
	mkdir -p "$STATE_DIR"
	# A docker.io client may shadow the packaged one; the daemon comes from the package either way.
	if [ -f "$STATE_DIR/dockerd.pid" ] && kill -0 "$(cat "$STATE_DIR/dockerd.pid")" 2>/dev/null; then
		say "dockerd already started (pid $(cat "$STATE_DIR/dockerd.pid")), waiting for it"
	else
		say "starting dockerd in the background (log: $STATE_DIR/dockerd.log)"
		setsid nohup dockerd --pidfile "$STATE_DIR/dockerd.pid" >"$STATE_DIR/dockerd.log" 2>&1 </dev/null &
	fi
	for _ in $(seq 1 60); do
		if engine_up; then
			say "engine up: $(docker version --format 'server {{.Server.Version}}, API {{.Server.APIVersion}}')"
			return
		fi
		sleep 1
	done
	tail -n 20 "$STATE_DIR/dockerd.log" >&2 || true
	die "dockerd did not answer within 60 s; its log is $STATE_DIR/dockerd.log"
}

ensure_base_image() {
	if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
		say "base image $BASE_IMAGE present"
		return
	fi
	# No registry is reachable on the machines this project is built on, so pulling is opt-in.
	if [ "${SBX_TEST_PULL:-0}" = 1 ] && timeout 60 docker pull -q "$BASE_IMAGE" >/dev/null 2>&1; then
		say "pulled $BASE_IMAGE"
		return
	fi
	local tarball="$CACHE_DIR/bookworm-minbase.tar"
	if [ ! -s "$tarball" ]; then
		command -v debootstrap >/dev/null 2>&1 || {
			[ "$(id -u)" = 0 ] || die "debootstrap is missing and this is not root"
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
		}
		local rootfs="$CACHE_DIR/rootfs"
		rm -rf "$rootfs" && mkdir -p "$rootfs"
		say "building $BASE_IMAGE with debootstrap --variant=minbase bookworm (a few minutes)"
		debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$CACHE_DIR/debootstrap.log" 2>&1 ||
			{ tail -n 20 "$CACHE_DIR/debootstrap.log" >&2; die "debootstrap failed; log: $CACHE_DIR/debootstrap.log"; }
		# Match the slim image: no package lists or caches in the layer.
		rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
		tar -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
		rm -rf "$rootfs"
	else
		say "using cached rootfs $tarball"
	fi
	docker import --change 'CMD ["bash"]' "$tarball" "$BASE_IMAGE" >/dev/null
	say "imported $BASE_IMAGE from $tarball"
}

# ensure_tool COMMAND PACKAGE installs PACKAGE with apt-get when COMMAND is missing.
ensure_tool() {
	if command -v "$1" >/dev/null 2>&1; then
		return
	fi
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		die "$1 is missing and cannot be installed here (not root on Debian/Ubuntu)"
	fi
	say "installing $2 with apt-get"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}

# ensure_file FILE PACKAGE installs PACKAGE with apt-get when its FILE is missing, for a
# package whose command another package may also provide (busybox, busybox-static).
ensure_file() {
	if [ -e "$1" ] && dpkg -s "$2" >/dev/null 2>&1; then
		return
	fi
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		die "$2 is missing and cannot be installed here (not root on Debian/Ubuntu)"
	fi
	say "installing $2 with apt-get"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}

# ensure_gvisor installs Debian's runsc and registers it with the engine as runsc-sbx, the
# runtime sbx's isolation: gvisor asks for, with the flags sbx checks for (pkg/sandbox/gvisor.go
# GVisorRuntimeArgs). It merges the entry into /etc/docker/daemon.json, keeping everything else,
# and reloads dockerd with SIGHUP, which restarts no container; nothing changes when the
# engine already lists the runtime with those flags.
GVISOR_RUNTIME=runsc-sbx
GVISOR_ARGS='["--platform=ptrace", "--network=host", "--oci-seccomp", "--host-uds=create"]'
gvisor_registered() {
	docker info --format '{{json .Runtimes}}' 2>/dev/null | python3 -c '
import json, sys
want = json.loads(sys.argv[2])
rt = json.load(sys.stdin).get(sys.argv[1]) or {}
sys.exit(0 if all(a in (rt.get("runtimeArgs") or []) for a in want) else 1)' "$GVISOR_RUNTIME" "$GVISOR_ARGS"
}
ensure_gvisor() {
	# The engine's list outlives the binary (removing the package leaves the entry).
	ensure_tool runsc runsc
	if gvisor_registered; then
		say "gVisor runtime $GVISOR_RUNTIME registered"
		return
	fi
	if [ "$(id -u)" != 0 ]; then
		die "the engine has no $GVISOR_RUNTIME runtime with the flags sbx needs and this is not root, so it cannot be registered here.
hint: sbx doctor prints the daemon.json entry to add"
	fi
	local conf=/etc/docker/daemon.json pid
	say "registering $GVISOR_RUNTIME in $conf (other settings kept) and reloading dockerd (SIGHUP: no container restarts)"
	mkdir -p /etc/docker
	python3 - "$conf" "$GVISOR_RUNTIME" "$(command -v runsc)" "$GVISOR_ARGS" <<'PY'
import json, os, sys
conf, name, path, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
cfg = {}
if os.path.exists(conf) and os.path.getsize(conf) > 0:
    with open(conf) as f:
        cfg = json.load(f)
cfg.setdefault("runtimes", {})[name] = {"path": path, "runtimeArgs": args}
with open(conf + ".tmp", "w") as f:
    json.dump(cfg, f, indent=2)
    f.write("\n")
os.replace(conf + ".tmp", conf)
PY
	# The dockerd this script started, else the packaged one's pid file; never a guess by
	# name, which could be a private engine of a test.
	pid=
	for f in "$STATE_DIR/dockerd.pid" /var/run/docker.pid; do
		if [ -s "$f" ] && [ "$(cat "/proc/$(cat "$f")/comm" 2>/dev/null)" = dockerd ]; then
			pid=$(cat "$f")
			break
		fi
	done
	[ -n "$pid" ] || die "no dockerd pid file names a running dockerd; restart the engine to pick up $conf"
	kill -HUP "$pid"
	for _ in $(seq 1 30); do
		if gvisor_registered; then
			say "gVisor runtime $GVISOR_RUNTIME registered"
			return
		fi
		sleep 1
	done
	die "dockerd (pid $pid) did not pick up $GVISOR_RUNTIME from $conf within 30 s; is it started with another --config-file?"
}

ensure_engine
ensure_base_image
# The linter make test runs for the scripts sbx runs inside sandboxes.
ensure_tool shellcheck shellcheck
# pyflakes3 brings the host's python3, which tests that make process trees run.
ensure_tool pyflakes3 pyflakes3
# The pull tests start Debian's registry on loopback with basic auth from an htpasswd file.
ensure_tool docker-registry docker-registry
ensure_tool htpasswd apache2-utils
# After pyflakes3, which brings python3: the daemon.json merge is written in it.
ensure_gvisor
# The ssh:// engine tests run an sshd of their own on loopback.
ensure_tool sshd openssh-server
# The toolbox tests build an image FROM scratch holding only the host's static busybox.
ensure_file /bin/busybox busybox-static
