#!/bin/sh
# Installs a sandbox's setup into the image sbx derives (Dockerfile.setup), as root, at build
# time: Debian packages, npm packages, pip packages, then the commands, each from a file of the
# build context in $1. The network is sbx's egress proxy, named by the engine's proxy build
# arguments. Everything it was given is removed at the end.
set -eu
dir=$1
cd "$dir"

# A caCerts bundle goes after the image's own CAs, for this build only.
if [ -s ca.pem ]; then
	for b in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/ca-bundle.pem /etc/ssl/cert.pem; do
		if [ -f "$b" ]; then
			cat "$b" >bundle.pem
			break
		fi
	done
	cat ca.pem >>bundle.pem
	SSL_CERT_FILE=$dir/bundle.pem CURL_CA_BUNDLE=$dir/bundle.pem REQUESTS_CA_BUNDLE=$dir/bundle.pem
	PIP_CERT=$dir/bundle.pem GIT_SSL_CAINFO=$dir/bundle.pem NODE_EXTRA_CA_CERTS=$dir/bundle.pem
	export SSL_CERT_FILE CURL_CA_BUNDLE REQUESTS_CA_BUNDLE PIP_CERT GIT_SSL_CAINFO NODE_EXTRA_CA_CERTS
	printf 'Acquire::https::CAInfo "%s";\n' "$dir/bundle.pem" >apt.conf
	APT_CONFIG=$dir/apt.conf
	export APT_CONFIG
fi

# The lists hold one package a line, names sbx validated (no spaces, no options); globbing
# is off so a version range such as 1.* stays as written.
set -f
if [ -s apt.txt ]; then
	command -v apt-get >/dev/null || { echo "setup.apt: this image has no apt-get" >&2; exit 1; }
	export DEBIAN_FRONTEND=noninteractive
	apt-get update
	# shellcheck disable=SC2046 # one word a package, split on purpose
	apt-get install -y --no-install-recommends $(cat apt.txt)
	apt-get clean
	rm -rf /var/lib/apt/lists/*
fi
if [ -s npm.txt ]; then
	command -v npm >/dev/null || { echo "setup.npm: this image has no npm" >&2; exit 1; }
	# shellcheck disable=SC2046 # one word a package, split on purpose
	npm install --global --no-fund --no-audit $(cat npm.txt)
	npm cache clean --force
fi
if [ -s pip.txt ]; then
	if command -v pip3 >/dev/null; then
		pip=pip3
	elif command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; then
		pip="python3 -m pip"
	else
		echo "setup.pip: this image has neither pip3 nor python3 -m pip" >&2
		exit 1
	fi
	# The image is the sandbox's own: pip may install beside the distribution's packages.
	# shellcheck disable=SC2046,SC2086 # one word a package, split on purpose
	PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore $pip install --no-cache-dir $(cat pip.txt)
fi
set +f
if [ -s run.sh ]; then
	sh -e run.sh
fi
cd /
rm -rf "$dir"
