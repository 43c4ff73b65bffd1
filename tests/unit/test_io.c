/* test_io.c - the I/O table: both back-ends, selection and fallback, and
 * the fault layer (every fault kind, on both back-ends). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <liburing.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io.h"
#include "testhelp.h"

#define BLK 4096

/* --- helpers ------------------------------------------------------------ */

struct tdir {
	char path[64];
	int  fd;
};

/* A fresh directory under `parent`, and no fault rules left over from an
 * earlier (maybe failed) test. */
static int tdir_make(struct tdir *d, const char *parent)
{
	snprintf(d->path, sizeof(d->path), "%s/ckpt_io_XXXXXX", parent);
	if (!mkdtemp(d->path))
		return -1;
	d->fd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->fd < 0)
		return -1;
	return io_fault_setup("");
}

static void tdir_remove(struct tdir *d)
{
	DIR *dir = opendir(d->path);
	struct dirent *e;

	if (dir) {
		while ((e = readdir(dir)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				unlinkat(d->fd, e->d_name, 0);
		closedir(dir);
	}
	close(d->fd);
	rmdir(d->path);
}

static uint8_t *abuf(size_t len, int fill)
{
	void *p = NULL;

	if (posix_memalign(&p, BLK, len))
		return NULL;
	memset(p, fill, len);
	return p;
}

/* Whether `dir` takes O_DIRECT at all, asked of the kernel directly. */
static int probe_direct(int dirfd)
{
	int fd = openat(dirfd, "probe", O_WRONLY | O_CREAT | O_EXCL | O_DIRECT, 0600);

	if (fd < 0) {
		unlinkat(dirfd, "probe", 0);
		return 0;
	}
	close(fd);
	unlinkat(dirfd, "probe", 0);
	return 1;
}

static int open_read(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECT | O_CLOEXEC);

	if (fd < 0 && errno == EINVAL)
		fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	return fd;
}

/* 0, or 77 when io_uring cannot be had here. */
static int ctx_open(struct io_ctx *c, const char *be, unsigned depth)
{
	int ret = io_ctx_init(c, be, depth, NULL);

	if (ret < 0 && !strcmp(be, "io_uring")) {
		fprintf(stderr, "    skip: io_uring unavailable: %s\n", strerror(-ret));
		return 77;
	}
	if (ret < 0) {
		fprintf(stderr, "    io_ctx_init(%s): %s\n", be, strerror(-ret));
		return 1;
	}
	if (strcmp(c->be->name, be)) {
		fprintf(stderr, "    got back-end %s, wanted %s\n", c->be->name, be);
		return 1;
	}
	return 0;
}

/* One transfer, submitted and reaped; returns its result. */
static ssize_t io_one(struct io_ctx *c, enum io_op op, int fd, void *buf,
		      size_t len, off_t off)
{
	struct io_cqe cqe = { 0 };
	int tag, ret;

	ret = io_submit(c, op, fd, buf, len, off, &tag);
	if (ret < 0)
		return 1000000 + ret;         /* distinguishable from any res */
	if (io_reap(c, &cqe, 1, 1) != 1 || cqe.tag != &tag)
		return 2000000;
	return cqe.res;
}

/* --- round trips -------------------------------------------------------- */

static int roundtrip(const char *be)
{
	enum { N = 3, LEN = 65536 };
	struct io_cqe cqe[N];
	struct io_ctx c;
	struct tdir d;
	struct stat st;
	uint8_t *w, *r;
	int tags[N], seen[N] = { 0 };
	int fd, rfd, isd, ret, got;

	if ((ret = ctx_open(&c, be, 4)))
		return ret;
	CHECK_EQ(tdir_make(&d, "/tmp"), 0);
	w = abuf(N * LEN, 0);
	r = abuf(N * LEN, 0);
	CHECK(w && r);
	for (int i = 0; i < N * LEN; i++)
		w[i] = (uint8_t)(i * 7 + i / LEN);

	fd = io_open_write(d.fd, "data", 1, &isd);
	CHECK(fd >= 0);
	CHECK_EQ(isd, probe_direct(d.fd));
	CHECK_EQ(!!(fcntl(fd, F_GETFL) & O_DIRECT), isd);
	for (int i = 0; i < N; i++)
		CHECK_EQ(io_submit(&c, IO_WRITE, fd, w + i * LEN, LEN,
				   (off_t)i * LEN, &tags[i]), 0);
	CHECK_EQ(c.inflight, N);
	for (got = 0; got < N; ) {
		ret = io_reap(&c, cqe, N, 1);
		CHECK(ret > 0);
		for (int k = 0; k < ret; k++) {
			int i = (int)((int *)cqe[k].tag - tags);
			CHECK(i >= 0 && i < N && !seen[i]);
			seen[i] = 1;
			CHECK_EQ(cqe[k].res, LEN);
		}
		got += ret;
	}
	CHECK_EQ(c.inflight, 0);
	CHECK_EQ(io_reap(&c, cqe, N, 1), 0);   /* nothing pending: no block */
	CHECK_EQ(io_fsync(fd), 0);
	CHECK_EQ(fstat(fd, &st), 0);
	CHECK_EQ(st.st_size, N * LEN);
	close(fd);

	rfd = open_read(d.fd, "data");
	CHECK(rfd >= 0);
	for (int i = N - 1; i >= 0; i--)
		CHECK_EQ(io_submit(&c, IO_READ, rfd, r + i * LEN, LEN,
				   (off_t)i * LEN, &tags[i]), 0);
	for (got = 0; got < N; got += ret) {
		ret = io_reap(&c, cqe, 1, 1);
		CHECK_EQ(ret, 1);
		CHECK_EQ(cqe[0].res, LEN);
	}
	CHECK(memcmp(w, r, N * LEN) == 0);
	/* A read across end of file comes back short, then empty. */
	CHECK_EQ(io_one(&c, IO_READ, rfd, r, 2 * BLK, N * LEN - BLK), BLK);
	CHECK_EQ(io_one(&c, IO_READ, rfd, r, BLK, N * LEN), 0);
	/* Errors from the kernel come through as -errno results. */
	CHECK_EQ(io_one(&c, IO_WRITE, rfd, w, BLK, 0), -EBADF);
	close(rfd);

	io_ctx_release(&c);
	free(w);
	free(r);
	tdir_remove(&d);
	return 0;
}

static int test_roundtrip_uring(void) { return roundtrip("io_uring"); }
static int test_roundtrip_pwrite(void) { return roundtrip("pwrite"); }

/* The queue holds depth requests; the next is refused until one is reaped. */
static int busy(const char *be)
{
	struct io_cqe cqe[4];
	struct io_ctx c;
	struct tdir d;
	uint8_t *w;
	int fd, isd, ret, tag;

	if ((ret = ctx_open(&c, be, 2)))
		return ret;
	CHECK_EQ(tdir_make(&d, "/tmp"), 0);
	CHECK((w = abuf(3 * BLK, 1)));
	fd = io_open_write(d.fd, "busy", 1, &isd);
	CHECK(fd >= 0);
	CHECK_EQ(io_fault_setup("write:3:-5"), 0);
	CHECK_EQ(io_submit(&c, IO_WRITE, fd, w, BLK, 0, &tag), 0);
	CHECK_EQ(io_submit(&c, IO_WRITE, fd, w + BLK, BLK, BLK, &tag), 0);
	CHECK_EQ(io_submit(&c, IO_WRITE, fd, w + 2 * BLK, BLK, 2 * BLK, &tag), -EBUSY);
	CHECK_EQ(c.inflight, 2);
	ret = io_reap(&c, cqe, 4, 1);
	CHECK(ret >= 1);
	if (ret == 1)
		CHECK_EQ(io_reap(&c, cqe + 1, 3, 1), 1);
	CHECK_EQ(c.inflight, 0);
	/* The refused submit was not counted: this is the 3rd write. */
	CHECK_EQ(io_one(&c, IO_WRITE, fd, w + 2 * BLK, BLK, 2 * BLK), -EIO);
	CHECK_EQ(io_fault_fired(), 1);
	CHECK_EQ(io_submit(&c, 7, fd, w, BLK, 0, &tag), -EINVAL);
	CHECK_EQ(io_submit(&c, IO_WRITE, fd, w, BLK, -1, &tag), -EINVAL);
	close(fd);
	io_ctx_release(&c);
	free(w);
	tdir_remove(&d);
	return 0;
}

static int test_busy_uring(void) { return busy("io_uring"); }
static int test_busy_pwrite(void) { return busy("pwrite"); }

/* --- selection ---------------------------------------------------------- */

static int uring_works(void)
{
	struct io_uring ring;

	if (io_uring_queue_init(2, &ring, 0) < 0)
		return 0;
	io_uring_queue_exit(&ring);
	return 1;
}

static int test_select(void)
{
	struct io_ctx c, z;
	int fb = 42;

	CHECK_EQ(io_ctx_init(&c, "pwrite", 8, &fb), 0);
	CHECK(!strcmp(c.be->name, "pwrite"));
	CHECK_EQ(fb, 0);
	CHECK_EQ(c.depth, 8);
	CHECK_EQ(c.inflight, 0);
	io_ctx_release(&c);
	CHECK(c.be == NULL && c.priv == NULL);
	io_ctx_release(&c);               /* released twice: harmless */

	fb = 42;
	CHECK_EQ(io_ctx_init(&c, "auto", 8, &fb), 0);
	if (uring_works()) {
		CHECK(!strcmp(c.be->name, "io_uring"));
		CHECK_EQ(fb, 0);
	} else {
		CHECK(!strcmp(c.be->name, "pwrite"));
		CHECK_EQ(fb, 1);
	}
	io_ctx_release(&c);
	CHECK_EQ(io_ctx_init(&c, "auto", 8, NULL), 0);
	io_ctx_release(&c);

	fb = 42;
	CHECK_EQ(io_ctx_init(&c, "libaio", 8, &fb), -EINVAL);
	CHECK_EQ(io_ctx_init(&c, "", 8, &fb), -EINVAL);
	CHECK_EQ(io_ctx_init(&c, "pwrite", 0, &fb), -EINVAL);
	CHECK_EQ(io_ctx_init(&c, NULL, 8, &fb), -EINVAL);
	CHECK_EQ(fb, 42);

	memset(&z, 0, sizeof(z));
	io_ctx_release(&z);
	io_ctx_release(NULL);
	CHECK_EQ(io_reap(&z, NULL, 1, 0), -EINVAL);
	return 0;
}

/* Run fn in a child whose syscalls are filtered as a container's seccomp
 * profile would; the child's exit status is fn's result. */
static int in_filtered_child(struct sock_filter *f, unsigned short n,
			     int (*fn)(void *), void *arg)
{
	struct sock_fprog prog = { .len = n, .filter = f };
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
			_exit(77);
		_exit(fn(arg));
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

static int child_no_uring(void *arg)
{
	int want = *(int *)arg, fb = 0;
	struct io_ctx c;
	struct tdir d;
	uint8_t *w;
	int fd, isd;

	CHECK_EQ(io_ctx_init(&c, "io_uring", 8, &fb), want);
	CHECK_EQ(io_ctx_init(&c, "auto", 8, &fb), 0);
	CHECK_EQ(fb, 1);
	CHECK(!strcmp(c.be->name, "pwrite"));
	CHECK_EQ(tdir_make(&d, "/tmp"), 0);
	CHECK((w = abuf(BLK, 3)));
	fd = io_open_write(d.fd, "f", 1, &isd);
	CHECK(fd >= 0);
	CHECK_EQ(io_one(&c, IO_WRITE, fd, w, BLK, 0), BLK);
	close(fd);
	io_ctx_release(&c);
	free(w);
	tdir_remove(&d);
	return 0;
}

/* io_uring_setup refused with ENOSYS, then EPERM (Docker's default
 * profile): "auto" falls back, "io_uring" fails. */
static int test_fallback_seccomp(void)
{
	static const int errs[] = { ENOSYS, EPERM };

	for (size_t i = 0; i < 2; i++) {
		struct sock_filter f[] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned)errs[i]),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		};
		int want = -errs[i];
		int ret = in_filtered_child(f, 4, child_no_uring, &want);
		if (ret == 77)
			SKIP("cannot install a seccomp filter");
		CHECK_EQ(ret, 0);
	}
	return 0;
}

static int child_no_direct(void *arg)
{
	struct tdir d;
	int fd, isd = 42;

	CHECK_EQ(tdir_make(&d, "/tmp"), 0);
	fd = io_open_write(d.fd, "f", 1, &isd);
	CHECK(fd >= 0);
	CHECK_EQ(isd, 0);
	CHECK_EQ(fcntl(fd, F_GETFL) & O_DIRECT, 0);
	CHECK_EQ(write(fd, "x", 1), 1);
	close(fd);
	tdir_remove(&d);
	return 0;
}

/* A file system that refuses O_DIRECT (openat fails EINVAL): buffered. */
static int test_open_direct_refused(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, O_DIRECT, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	int ret = in_filtered_child(f, 6, child_no_direct, NULL);

	if (ret == 77)
		SKIP("cannot install a seccomp filter");
	CHECK_EQ(ret, 0);
	return 0;
}

/* tmpfs (/dev/shm): O_DIRECT where the kernel has it (6.6+), else the
 * buffered fallback; either way a usable, exclusive, new file. */
static int test_open_tmpfs(void)
{
	struct tdir d;
	int fd, fd2, isd = 42, want;

	if (access("/dev/shm", W_OK))
		SKIP("no writable /dev/shm");
	CHECK_EQ(tdir_make(&d, "/dev/shm"), 0);
	want = probe_direct(d.fd);
	fd = io_open_write(d.fd, "a", 1, &isd);
	CHECK(fd >= 0);
	CHECK_EQ(isd, want);
	CHECK_EQ(!!(fcntl(fd, F_GETFL) & O_DIRECT), want);
	CHECK_EQ(io_open_write(d.fd, "a", 1, &isd), -EEXIST);
	CHECK_EQ(io_open_write(d.fd, "a", 0, &isd), -EEXIST);
	CHECK_EQ(symlinkat("/etc/passwd", d.fd, "link"), 0);
	CHECK_EQ(io_open_write(d.fd, "link", 0, &isd), -EEXIST);
	CHECK_EQ(io_open_write(d.fd, "", 0, &isd), -EINVAL);

	isd = 42;
	fd2 = io_open_write(d.fd, "b", 0, &isd);
	CHECK(fd2 >= 0);
	CHECK_EQ(isd, 0);
	struct stat st;
	mode_t mask = umask(0);
	umask(mask);
	CHECK_EQ(fstat(fd2, &st), 0);
	CHECK_EQ(st.st_mode & 0777, 0640 & ~mask);
	close(fd);
	close(fd2);
	tdir_remove(&d);
	return 0;
}

/* --- faults ------------------------------------------------------------- */

/* Five writes one at a time, then five in one batch: the 3rd fails both
 * times, whatever order the batch completes in. */
static int fault_write_eio(const char *be)
{
	enum { N = 5 };
	struct io_cqe cqe[N];
	struct io_ctx c;
	struct tdir d;
	uint8_t *w;
	int fd, isd, ret, tags[N], got;

	if ((ret = ctx_open(&c, be, 8)))
		return ret;
	CHECK_EQ(tdir_make(&d, "/tmp"), 0);
	CHECK((w = abuf(N * 8192, 9)));
	fd = io_open_write(d.fd, "f", 1, &isd);
	CHECK(fd >= 0);

	CHECK_EQ(io_fault_setup("write:3:-5"), 0);
	for (int i = 0; i < N; i++)
		CHECK_EQ(io_one(&c, IO_WRITE, fd, w + i * 8192, 8192, i * 8192),
			 i == 2 ? -EIO : 8192);
	CHECK_EQ(io_fault_fired(), 1);

	CHECK_EQ(io_fault_setup("write:3:-5"), 0);
	CHECK_EQ(io_fault_fired(), 0);
	for (int i = 0; i < N; i++)
		CHECK_EQ(io_submit(&c, IO_WRITE, fd, w + i * 8192, 8192,
				   i * 8192, &tags[i]), 0);
	for (got = 0; got < N; got += ret) {
		ret = io_reap(&c, cqe, N, 1);
		CHECK(ret > 0);
		for (int k = 0; k < ret; k++) {
			int i = (int)((int *)cqe[k].tag - tags);
			CHECK(i >= 0 && i < N);
			CHECK_EQ(cqe[k].res, i == 2 ? -EIO : 8192);
		}
	}
	CHECK_EQ(io_fault_fired(), 1);

	/* A rule fires once: later writes are fine. */
	CHECK_EQ(io_one(&c, IO_WRITE, fd, w, 8192, 0), 8192);
	close(fd);
	io_ctx_release(&c);
	free(w);
	tdir_remove(&d);
	return 0;
}

static int test_fault_write_eio_uring(void) { return fault_write_eio("io_uring"); }
static int test_fault_write_eio_pwrite(void) { return fault_write_eio("pwrite"); }

/* The short write really is short on disk. */
static int fault_short(const char *be)
{
	struct io_ctx c;
	struct tdir d;
	struct stat st;
	uint8_t *w, *r;
	int fd, rfd, isd, ret;

	if ((ret = ctx_open(&c, be, 4)))
		return ret;
	CHECK_EQ(tdir_make(&d, "/tmp"), 0);
	CHECK((w = abuf(4 * 16384, 0x11)));
	CHECK((r = abuf(16384, 0)));
	fd = io_open_write(d.fd, "f", 1, &isd);
	CHECK(fd >= 0);
	CHECK_EQ(io_fault_setup("write:2:short,read:2:short"), 0);
	CHECK_EQ(io_one(&c, IO_WRITE, fd, w, 16384, 0), 16384);
	CHECK_EQ(io_one(&c, IO_WRITE, fd, w, 16384, 16384), 8192);
	CHECK_EQ(fstat(fd, &st), 0);
	CHECK_EQ(st.st_size, 16384 + 8192);
	/* The caller resubmits the rest, as it would for a real short write. */
	CHECK_EQ(io_one(&c, IO_WRITE, fd, w, 8192, 16384 + 8192), 8192);
	CHECK_EQ(io_fault_fired(), 1);
	close(fd);

	rfd = open_read(d.fd, "f");
	CHECK(rfd >= 0);
	CHECK_EQ(io_one(&c, IO_READ, rfd, r, 16384, 0), 16384);
	CHECK_EQ(io_one(&c, IO_READ, rfd, r, 16384, 0), 8192);
	CHECK_EQ(io_one(&c, IO_READ, rfd, r, 16384, 0), 16384);
	CHECK_EQ(io_fault_fired(), 2);
	close(rfd);
	io_ctx_release(&c);
	free(w);
	free(r);
	tdir_remove(&d);
	return 0;
}

static int test_fault_short_uring(void) { return fault_short("io_uring"); }
static int test_fault_short_pwrite(void) { return fault_short("pwrite"); }

static int fault_read_eio(const char *be)
{
	struct io_ctx c;
	struct tdir d;
	uint8_t *w;
	int fd, rfd, isd, ret;

	if ((ret = ctx_open(&c, be, 4)))
		return ret;
	CHECK_EQ(tdir_make(&d, "/tmp"), 0);
	CHECK((w = abuf(BLK, 0x22)));
	fd = io_open_write(d.fd, "f", 1, &isd);
	CHECK(fd >= 0);
	CHECK_EQ(io_one(&c, IO_WRITE, fd, w, BLK, 0), BLK);
	close(fd);
	rfd = open_read(d.fd, "f");
	CHECK(rfd >= 0);
	/* Writes do not advance the read count. */
	CHECK_EQ(io_fault_setup("read:4:-5"), 0);
	CHECK_EQ(io_one(&c, IO_WRITE, rfd, w, BLK, 0), -EBADF);
	for (int i = 1; i <= 5; i++)
		CHECK_EQ(io_one(&c, IO_READ, rfd, w, BLK, 0), i == 4 ? -EIO : BLK);
	CHECK_EQ(io_fault_fired(), 1);
	close(rfd);
	io_ctx_release(&c);
	free(w);
	tdir_remove(&d);
	return 0;
}

static int test_fault_read_eio_uring(void) { return fault_read_eio("io_uring"); }
static int test_fault_read_eio_pwrite(void) { return fault_read_eio("pwrite"); }

/* fsync, ftruncate and open do not depend on the back-end. */
static int test_fault_fsync_ftruncate(void)
{
	struct tdir d;
	struct stat st;
	int fd, isd;

	CHECK_EQ(tdir_make(&d, "/tmp"), 0);
	fd = io_open_write(d.fd, "f", 0, &isd);
	CHECK(fd >= 0);
	CHECK_EQ(io_fault_setup("fsync:1:-5,ftruncate:2:-28"), 0);
	CHECK_EQ(io_fsync(fd), -EIO);
	CHECK_EQ(io_fsync(fd), 0);
	CHECK_EQ(io_ftruncate(fd, 8192), 0);
	CHECK_EQ(io_ftruncate(fd, 16384), -ENOSPC);
	CHECK_EQ(fstat(fd, &st), 0);
	CHECK_EQ(st.st_size, 8192);       /* the failed one did nothing */
	CHECK_EQ(io_ftruncate(fd, 16384), 0);
	CHECK_EQ(io_fault_fired(), 2);
	close(fd);
	CHECK_EQ(io_fsync(fd), -EBADF);
	CHECK_EQ(io_ftruncate(fd, 0), -EBADF);
	tdir_remove(&d);
	return 0;
}

static int test_fault_open(void)
{
	struct tdir d;
	int fd1, fd3, isd;

	CHECK_EQ(tdir_make(&d, "/tmp"), 0);
	CHECK_EQ(io_fault_setup("open:2:-28"), 0);
	fd1 = io_open_write(d.fd, "one", 1, &isd);
	CHECK(fd1 >= 0);
	isd = 42;
	CHECK_EQ(io_open_write(d.fd, "two", 1, &isd), -ENOSPC);
	CHECK_EQ(isd, 42);
	CHECK(faccessat(d.fd, "two", F_OK, 0) < 0 && errno == ENOENT);
	fd3 = io_open_write(d.fd, "two", 1, &isd);
	CHECK(fd3 >= 0);
	CHECK_EQ(io_fault_fired(), 1);
	close(fd1);
	close(fd3);
	tdir_remove(&d);
	return 0;
}

static int test_fault_spec(void)
{
	static const char *const bad[] = {
		"write", "write:", "write:1", "write:1:", "write:0:-5",
		"write:1:5", "write:1:-0", "write:1:-5000", "write:-1:-5",
		"write:x:-5", "write:1:-5:", "write:1:-5,", ",write:1:-5",
		"write:1:-5,,read:1:-5", "bogus:1:-5", "Write:1:-5",
		"fsync:1:short", "open:1:short", "ftruncate:1:short",
		"write:1:shorter", "write:1:-5 ", " write:1:-5", "write:1:+5",
		"write:99999999999999999999999:-5", "write:1:-EIO",
		"write:1:-5,write:2:-5,write:3:-5,write:4:-5,write:5:-5,"
		"write:6:-5,write:7:-5,write:8:-5,write:9:-5,write:10:-5,"
		"write:11:-5,write:12:-5,write:13:-5,write:14:-5,"
		"write:15:-5,write:16:-5,write:17:-5",
	};
	static const char *const good[] = {
		"", "write:3:-5", "write:2:short", "read:2:short", "fsync:1:-5",
		"read:4:-5", "open:1:-28", "ftruncate:7:-4095",
		"write:1:-28,fsync:2:-5,open:3:-13",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (io_fault_setup(bad[i]) != -EINVAL) {
			fprintf(stderr, "    accepted bad spec '%s'\n", bad[i]);
			return 1;
		}
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		if (io_fault_setup(good[i]) != 0) {
			fprintf(stderr, "    refused good spec '%s'\n", good[i]);
			return 1;
		}
	}
	CHECK_EQ(io_fault_setup(NULL), 0);
	/* A refused spec leaves the rules in force as they were. */
	struct tdir d;
	CHECK_EQ(tdir_make(&d, "/tmp"), 0);
	CHECK_EQ(io_fault_setup("fsync:1:-5"), 0);
	CHECK_EQ(io_fault_setup("fsync:1"), -EINVAL);
	CHECK_EQ(io_fsync(d.fd), -EIO);
	CHECK_EQ(io_fault_setup(""), 0);
	CHECK_EQ(io_fsync(d.fd), 0);
	CHECK_EQ(io_fault_fired(), 0);
	tdir_remove(&d);
	return 0;
}

/* The counts are process-wide: four threads with their own contexts share
 * them, and exactly one of their writes is the 7th. */
struct wthread {
	int fd, fails, err;
	uint8_t *buf;
};

static void *writer_main(void *arg)
{
	struct wthread *t = arg;
	struct io_ctx c;

	if (io_ctx_init(&c, "auto", 4, NULL) < 0) {
		t->err = 1;
		return NULL;
	}
	for (int i = 0; i < 10; i++) {
		ssize_t r = io_one(&c, IO_WRITE, t->fd, t->buf, BLK, i * BLK);
		if (r == -EIO)
			t->fails++;
		else if (r != BLK)
			t->err = 1;
	}
	io_ctx_release(&c);
	return NULL;
}

static int test_fault_threads(void)
{
	struct wthread t[4];
	pthread_t th[4];
	struct tdir d;
	int isd, fails = 0;
	uint8_t *w;

	CHECK_EQ(tdir_make(&d, "/tmp"), 0);
	CHECK((w = abuf(BLK, 5)));
	CHECK_EQ(io_fault_setup("write:7:-5"), 0);
	for (int i = 0; i < 4; i++) {
		char name[8];
		snprintf(name, sizeof(name), "w%d", i);
		t[i] = (struct wthread){ .buf = w };
		t[i].fd = io_open_write(d.fd, name, 1, &isd);
		CHECK(t[i].fd >= 0);
		CHECK_EQ(pthread_create(&th[i], NULL, writer_main, &t[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(pthread_join(th[i], NULL), 0);
		CHECK_EQ(t[i].err, 0);
		fails += t[i].fails;
		close(t[i].fd);
	}
	CHECK_EQ(fails, 1);
	CHECK_EQ(io_fault_fired(), 1);
	free(w);
	tdir_remove(&d);
	return 0;
}

/* CKPT_FAULT is read on first use.  A fresh process is needed for that:
 * the test re-executes this binary, and this constructor plays the child. */
__attribute__((constructor)) static void env_child(void)
{
	const char *dir = getenv("CKPT_TEST_IO_ENV_CHILD");
	const char *spec = getenv("CKPT_FAULT");
	int dfd, fd, isd, ok;

	if (!dir)
		return;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		_exit(2);
	if (spec && !strcmp(spec, "open:1:-28,fsync:2:-5")) {
		ok = io_open_write(dfd, "x", 0, &isd) == -ENOSPC;
		fd = io_open_write(dfd, "x", 0, &isd);
		ok = ok && fd >= 0 && io_fsync(fd) == 0 &&
		     io_fsync(fd) == -EIO && io_fsync(fd) == 0 &&
		     io_fault_fired() == 2;
	} else {
		/* Invalid: ignored, nothing fires. */
		fd = io_open_write(dfd, "x", 0, &isd);
		ok = fd >= 0 && io_fsync(fd) == 0 && io_fault_fired() == 0;
	}
	_exit(ok ? 0 : 1);
}

static int run_env_child(const char *dir, const char *spec)
{
	char self[PATH_MAX];
	ssize_t n;
	int status;
	pid_t pid;

	/* readlink, not exec of /proc/self/exe: valgrind maps the former to
	 * the test binary. */
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return -1;
	self[n] = '\0';
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		setenv("CKPT_TEST_IO_ENV_CHILD", dir, 1);
		setenv("CKPT_FAULT", spec, 1);
		execl(self, self, (char *)NULL);
		_exit(3);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

static int test_fault_env(void)
{
	struct tdir d;

	CHECK_EQ(tdir_make(&d, "/tmp"), 0);
	CHECK_EQ(run_env_child(d.path, "open:1:-28,fsync:2:-5"), 0);
	unlinkat(d.fd, "x", 0);
	CHECK_EQ(run_env_child(d.path, "fsync:one:-5"), 0);
	tdir_remove(&d);
	return 0;
}

static const struct test tests[] = {
	{ "roundtrip_io_uring", test_roundtrip_uring },
	{ "roundtrip_pwrite", test_roundtrip_pwrite },
	{ "busy_io_uring", test_busy_uring },
	{ "busy_pwrite", test_busy_pwrite },
	{ "select", test_select },
	{ "fallback_seccomp", test_fallback_seccomp },
	{ "open_direct_refused", test_open_direct_refused },
	{ "open_tmpfs", test_open_tmpfs },
	{ "fault_write_eio_io_uring", test_fault_write_eio_uring },
	{ "fault_write_eio_pwrite", test_fault_write_eio_pwrite },
	{ "fault_short_io_uring", test_fault_short_uring },
	{ "fault_short_pwrite", test_fault_short_pwrite },
	{ "fault_read_eio_io_uring", test_fault_read_eio_uring },
	{ "fault_read_eio_pwrite", test_fault_read_eio_pwrite },
	{ "fault_fsync_ftruncate", test_fault_fsync_ftruncate },
	{ "fault_open", test_fault_open },
	{ "fault_spec", test_fault_spec },
	{ "fault_threads", test_fault_threads },
	{ "fault_env", test_fault_env },
};

TEST_MAIN(tests)
