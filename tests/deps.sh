#!/bin/sh
# Install what ckpt needs to build, test and benchmark, only what is missing:
# Debian packages, then the Python virtual environment build/venv (PyTorch 2,
# safetensors, moto) from tests/requirements.txt.  Run as root (or with sudo).
set -e
cd "$(dirname "$0")/.."
PKGS="build-essential pkg-config libuv1-dev liburing-dev libssl-dev libjansson-dev libxxhash-dev
libcurl4-openssl-dev libxml2-dev libopenmpi-dev openmpi-bin fio python3 python3-torch python3-pytest python3-numpy
gnuplot-nox e2fsprogs xfsprogs util-linux strace procps clang systemd valgrind python3-venv"
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
if [ -n "$missing" ]; then
	echo "deps: installing:$missing"
	SUDO=""
	[ "$(id -u)" = 0 ] || SUDO="sudo"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# The venv is made once per machine (PyTorch's wheels are several GB) and
# redone only when tests/requirements.txt changes; the stamp is written last,
# so an interrupted install is finished by the next run.
VENV=build/venv
STAMP=$VENV/.requirements
cmp -s tests/requirements.txt "$STAMP" 2>/dev/null && exit 0
echo "deps: installing the Python environment $VENV (tests/requirements.txt)"
[ -x $VENV/bin/python ] || /usr/bin/python3 -m venv $VENV
$VENV/bin/python -m pip install -q --disable-pip-version-check -r tests/requirements.txt
cp tests/requirements.txt "$STAMP"
