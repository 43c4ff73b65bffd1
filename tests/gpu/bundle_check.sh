#!/bin/bash
# tests/gpu/bundle_check.sh - does build/gpu-bundle run on a bare box?
# Builds a chroot that holds only a base userland (bash, coreutils, grep,
# sed, awk and the libraries those need: glibc and the like, what every
# Debian/Ubuntu install has) plus the bundle and the CUDA driver simulator,
# checks that none of the libraries the bundle carries or links statically
# (libuv, jansson, liburing, libcrypto, libxxhash) is in it, then runs
# `tests/gpu/run.sh --sim` inside it end to end.  Run as root on the build
# machine after `make gpu-bundle cudasim`; its mounts (proc, a few device
# files) live in a private mount namespace and end with it.
# Exit 0: the bundle ran there; 1: it did not; 77: cannot chroot here.
set -u
cd "$(dirname "$0")/../.." || exit 2
TOP=$PWD
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (chroot, mounts)"; exit 77; }
if [ -z "${CKPT_BUNDLE_CHECK_NS:-}" ]; then
	command -v unshare >/dev/null || { echo "SKIP: no unshare"; exit 77; }
	CKPT_BUNDLE_CHECK_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi
for f in build/gpu-bundle/ckptd build/gpu-bundle/MANIFEST build/cudasim/libcuda.so.1; do
	[ -e "$f" ] || { echo "MISSING: $f (make gpu-bundle cudasim)"; exit 2; }
done

R=$(mktemp -d /tmp/ckpt-bare.XXXXXX) || exit 2
trap 'umount -l "$R"/proc "$R"/dev/* 2>/dev/null; rm -rf "$R"' EXIT
mkdir -p "$R"/{bin,usr/bin,lib64,lib/x86_64-linux-gnu,tmp,proc,dev/shm,w/build,out}
chmod 1777 "$R/tmp"

# the base userland run.sh uses, with what it loads
TOOLS="bash sh env timeout mktemp sleep cat grep sed awk tail head seq rm mkdir cp date tee
ldd getconf nproc dirname basename touch wc sort uniq tr cut stat od paste ls kill uname id"
libs_of() { ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/lib/ { print $1 }'; }
for t in $TOOLS; do
	p=$(command -v "$t") || { echo "bundle_check: no $t here"; exit 2; }
	[ -f "$p" ] || continue               # a shell builtin
	cp -L "$p" "$R/usr/bin/$t"
	ln -sf "/usr/bin/$t" "$R/bin/$t"
	for l in $(libs_of "$p"); do
		[ -e "$R$l" ] || { mkdir -p "$R$(dirname "$l")"; cp -L "$l" "$R$l"; }
	done
done
cp -L /lib64/ld-linux-x86-64.so.2 "$R/lib64/"
# the point: the bundle's libraries are nowhere but in the bundle
bad=$(find "$R" -path "$R/w" -prune -o \( -name 'libuv.so*' -o -name 'libjansson.so*' \
	-o -name 'liburing.so*' -o -name 'libcrypto.so*' -o -name 'libssl.so*' \
	-o -name 'libxxhash.so*' -o -name 'libcuda.so*' \) -print)
[ -z "$bad" ] || { echo "bundle_check: the base has $bad: not a fair test"; exit 1; }
echo "bare root: $(find "$R" -name '*.so*' | sed "s|^$R||" | sort | tr '\n' ' ')"
for d in null zero urandom random; do
	touch "$R/dev/$d" && mount --bind "/dev/$d" "$R/dev/$d" || exit 1
done
mount -t proc proc "$R/proc" || exit 1

mkdir -p "$R/w/tests/gpu" "$R/w/build/cudasim"
cp tests/gpu/run.sh "$R/w/tests/gpu/"
cp -a build/gpu-bundle "$R/w/build/"
cp build/cudasim/libcuda.so.1 "$R/w/build/cudasim/"
echo "== ldd in the bare root"
for f in ckptd gpu_trainer libckpt.so; do
	echo "-- $f"
	"$(command -v chroot)" "$R" /usr/bin/ldd "/w/build/gpu-bundle/$f" | sed 's/^/  /'
done
echo "== tests/gpu/run.sh --sim in the bare root"
CHROOT=$(command -v chroot)
env -i PATH=/usr/bin:/bin HOME=/tmp OUT=/out "$CHROOT" "$R" /bin/bash /w/tests/gpu/run.sh --sim
rc=$?
mkdir -p build/gpu-bare
cp "$R"/out/* build/gpu-bare/ 2>/dev/null
echo "bundle_check: run.sh --sim in the bare root exited $rc (its files: build/gpu-bare)"
exit $rc
