# `make install DESTDIR=... PREFIX=/usr` puts everything in its place; a
# tiny C client builds against the installed ckpt.pc (pkg-config with a
# sysroot), shared and static, and saves through the installed ckptd;
# `make uninstall` removes it all again.
. "$(dirname "$0")/lib.sh"
command -v pkg-config > /dev/null || skip "pkg-config is not installed"
D=$T/dest
make -C "$TOP" -s install DESTDIR="$D" PREFIX=/usr > "$T/install.out" 2>&1 ||
	fail "make install: $(tail -5 "$T/install.out")"

for f in usr/bin/ckptd usr/bin/ckptctl usr/lib/libckpt.so.0.1.0 usr/lib/libckpt.a \
	 usr/include/ckpt.h usr/lib/pkgconfig/ckpt.pc \
	 usr/lib/systemd/system/ckptd.service usr/lib/systemd/system/ckptd@.service \
	 usr/lib/sysusers.d/ckpt.conf usr/lib/tmpfiles.d/ckpt.conf etc/ckpt/ckptd.json \
	 usr/share/man/man8/ckptd.8 usr/share/man/man5/ckptd.json.5 usr/share/man/man1/ckptctl.1 usr/share/man/man3/ckpt_register_global.3 \
	 usr/share/doc/ckpt/examples/single-node.json usr/share/doc/ckpt/examples/small-machine.json \
	 usr/share/doc/ckpt/examples/multi-node-mpi.json usr/share/doc/ckpt/examples/gpu-node.json; do
	[ -f "$D/$f" ] || fail "not installed: /$f"
done
[ "$(readlink "$D/usr/lib/libckpt.so")" = libckpt.so.0 ] || fail "libckpt.so link"
[ "$(readlink "$D/usr/lib/libckpt.so.0")" = libckpt.so.0.1.0 ] || fail "libckpt.so.0 link"
[ -x "$D/usr/bin/ckptd" ] && [ -x "$D/usr/bin/ckptctl" ] || fail "binaries not executable"
grep -qx 'prefix=/usr' "$D/usr/lib/pkgconfig/ckpt.pc" || fail "ckpt.pc prefix: $(head -3 "$D/usr/lib/pkgconfig/ckpt.pc")"
grep -q '^ExecStart=/usr/bin/ckptd -c /etc/ckpt/ckptd.json$' "$D/usr/lib/systemd/system/ckptd.service" ||
	fail "unit ExecStart: $(grep ExecStart "$D/usr/lib/systemd/system/ckptd.service")"
"$D/usr/bin/ckptd" -n -c "$D/etc/ckpt/ckptd.json" > /dev/null || fail "installed config invalid"
man -l "$D/usr/share/man/man1/ckptctl.1" > /dev/null 2>&1 || fail "man page does not render"
man -l "$D/usr/share/man/man3/ckpt_register_global.3" > /dev/null 2>&1 || fail "ckpt_register_global(3) does not render"

# a second install keeps an edited configuration
echo '{"keep_last": 9}' > "$D/etc/ckpt/ckptd.json"
make -C "$TOP" -s install DESTDIR="$D" PREFIX=/usr > "$T/install2.out" 2>&1 || fail "second install"
grep -q '"keep_last": 9' "$D/etc/ckpt/ckptd.json" || fail "install overwrote an edited config"
[ -f "$D/etc/ckpt/ckptd.json.dist" ] || fail "no ckptd.json.dist next to an edited config"

# a tiny client, built only from what was installed
cat > "$T/tiny.c" <<'C'
#include <ckpt.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv)
{
	ckpt_client *c;
	uint64_t t;
	int64_t shape[1] = { 1024 };
	float *p;
	int r = ckpt_connect(argv[1], "tiny", 0, 1, &c);
	if (r < 0) { fprintf(stderr, "connect: %s\n", ckpt_strerror(r)); return 1; }
	if (!(p = ckpt_alloc(c, sizeof(float) * 1024))) return 1;
	for (int i = 0; i < 1024; i++) p[i] = (float)i;
	if ((r = ckpt_register(c, "model", "w", p, CKPT_F32, 1, shape)) < 0 ||
	    (r = ckpt_save(c, 42, &t)) < 0 || (r = ckpt_wait(c, t, CKPT_COMMITTED, 30000)) < 0) {
		fprintf(stderr, "save: %s: %s\n", ckpt_strerror(r), ckpt_last_error(c));
		return 1;
	}
	memset(p, 0, sizeof(float) * 1024);
	if ((r = ckpt_restore(c, CKPT_LATEST, 0, NULL)) < 0 || p[1000] != 1000.0f) {
		fprintf(stderr, "restore: %s\n", ckpt_strerror(r));
		return 1;
	}
	ckpt_close(c);
	printf("tiny ok\n");
	return 0;
}
C
export PKG_CONFIG_SYSROOT_DIR=$D PKG_CONFIG_PATH=$D/usr/lib/pkgconfig PKG_CONFIG_LIBDIR=$D/usr/lib/pkgconfig
pkg-config --exists ckpt || fail "pkg-config does not find ckpt"
[ "$(pkg-config --modversion ckpt)" = 0.1.0 ] || fail "version $(pkg-config --modversion ckpt)"
cflags=$(pkg-config --cflags ckpt); libs=$(pkg-config --libs ckpt)
# a tree built with SANITIZE=... installs an instrumented library
san=
nm "$D/usr/lib/libckpt.a" 2>/dev/null | grep -q __asan_init && san=address
nm "$D/usr/lib/libckpt.a" 2>/dev/null | grep -q __ubsan_handle && san=${san:+$san,}undefined
[ -n "$san" ] && cflags="$cflags -fsanitize=$san"
case "$cflags" in *"$D/usr/include"*) ;; *) fail "cflags '$cflags' miss the sysroot" ;; esac
cc -o "$T/tiny" "$T/tiny.c" $cflags $libs > "$T/cc.out" 2>&1 || fail "shared build: $(cat "$T/cc.out")"
cc -o "$T/tiny-static" "$T/tiny.c" $cflags "$D/usr/lib/libckpt.a" \
	$(pkg-config --libs-only-l --static ckpt | sed 's/-lckpt//') > "$T/cc2.out" 2>&1 ||
	fail "static build: $(cat "$T/cc2.out")"
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_PATH PKG_CONFIG_LIBDIR

# run them against the installed daemon
write_conf
"$D/usr/bin/ckptd" -c "$CONF" >> "$LOG" 2>&1 &
CKPTD_PID=$!
for _ in $(seq 100); do [ -S "$SOCK" ] && grep -q "ready:" "$LOG" && break; sleep 0.05; done
grep -q "ready:" "$LOG" || fail "installed ckptd did not start"
LD_LIBRARY_PATH=$D/usr/lib "$T/tiny" "$SOCK" > "$T/tiny.out" 2>&1 || fail "tiny: $(cat "$T/tiny.out")"
LD_LIBRARY_PATH=$D/usr/lib ldd "$T/tiny" 2>/dev/null | grep -q "$D/usr/lib/libckpt.so.0" || fail "tiny did not use the installed library: $(ldd "$T/tiny")"
"$T/tiny-static" "$SOCK" > "$T/static.out" 2>&1 && fail "step 42 saved twice"
grep -q "already committed" "$T/static.out" || fail "static client: $(cat "$T/static.out")"
[ "$(latest_of tiny)" = iter_000000042 ] || fail "latest $(latest_of tiny)"
"$D/usr/bin/ckptctl" -s "$SOCK" list --job tiny | grep -q '^tiny ' || fail "installed ckptctl list"
stop_ckptd || fail "ckptd exit"

# uninstall: nothing but directories and the edited config remain
make -C "$TOP" -s uninstall DESTDIR="$D" PREFIX=/usr > "$T/un.out" 2>&1 || fail "make uninstall: $(cat "$T/un.out")"
left=$(cd "$D" && find . ! -type d | sort)
[ "$left" = "./etc/ckpt/ckptd.json" ] || fail "left after uninstall: $left"
pass
