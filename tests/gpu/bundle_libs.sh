#!/bin/bash
# tests/gpu/bundle_libs.sh DIR - make the GPU bundle (`make gpu-bundle`)
# self-contained: every shared library its programs and libckpt.so load
# (ldd, transitively) that a bare Linux box may lack is copied into DIR,
# where the bundle's rpath ($ORIGIN) finds it.  Left out, as every
# glibc-based system has them: glibc's own libraries and the GCC runtime;
# and the NVIDIA driver, which is the GPU box's.  Writes DIR/MANIFEST (what
# is in it, the newest glibc symbol version it needs, where it was built),
# which tests/gpu/run.sh prints.  Fails if a library is not found here.
set -eu
DIR=$1
BASE='^(linux-vdso\.so\.1|ld-linux[-a-z0-9_.]*\.so\.[0-9]+|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1|libgcc_s\.so\.1|libstdc\+\+\.so\.6|libcuda\.so.*|libnvidia-.*)$'
is_elf() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }

for f in "$DIR"/*; do
	[ -f "$f" ] && ! [ -L "$f" ] && is_elf "$f" || continue
	out=$(ldd "$f" 2>&1) || { case "$out" in *"not a dynamic"*) continue ;; esac; }
	if echo "$out" | grep -q 'not found'; then
		echo "bundle: $f: $(echo "$out" | grep 'not found' | tr -s ' \t' ' ')" >&2
		exit 1
	fi
	echo "$out" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' |
	while read -r name path; do
		[[ $name =~ $BASE ]] && continue
		[ -e "$DIR/$name" ] && continue
		cp -L "$path" "$DIR/$name"
		echo "  BUNDLE  $name (from $path, needed by $(basename "$f"))"
	done
done

# What glibc the bundle needs: the newest GLIBC_x.y any of its files asks.
need=$(for f in "$DIR"/*; do
	[ -f "$f" ] && is_elf "$f" && objdump -T "$f" 2>/dev/null
done | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V -u | tail -1)
{
	echo "ckpt GPU bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on" \
		"$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")," \
		"glibc $(getconf GNU_LIBC_VERSION | awk '{print $2}')"
	echo "needs: glibc >= ${need:-?}, the NVIDIA driver (libcuda.so.1); nothing else"
	for f in "$DIR"/*; do
		[ "$(basename "$f")" = MANIFEST ] && continue
		printf '%-16s %9s bytes\n' "$(basename "$f")" "$(stat -c %s "$f")"
	done
} > "$DIR/MANIFEST"
