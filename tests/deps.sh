#!/bin/sh
# Install the Debian packages ckpt needs to build, test and benchmark,
# only those missing.  Run as root (or with sudo available).
set -e
PKGS="build-essential pkg-config libuv1-dev liburing-dev libssl-dev libjansson-dev
libopenmpi-dev openmpi-bin fio python3 python3-torch python3-pytest python3-numpy
gnuplot-nox e2fsprogs util-linux strace procps clang systemd valgrind"
# one dpkg-query for all: a machine that has everything is done at once
installed=" $(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' $PKGS 2>/dev/null |
	awk '$2 == "ii" { printf "%s ", $1 }')"
missing=""
for p in $PKGS; do
	case "$installed" in
	*" $p "*) ;;
	*) missing="$missing $p" ;;
	esac
done
[ -z "$missing" ] && exit 0
echo "deps: installing:$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
