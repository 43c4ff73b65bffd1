#!/bin/sh
# Install the Debian packages ckpt needs to build, test and benchmark,
# only those missing.  Run as root (or with sudo available).
set -e
PKGS="build-essential pkg-config libuv1-dev liburing-dev libssl-dev libjansson-dev
libopenmpi-dev openmpi-bin fio python3 python3-torch python3-pytest python3-numpy
gnuplot-nox e2fsprogs util-linux strace procps clang systemd valgrind"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing:$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
