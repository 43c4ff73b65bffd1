/* io.c - ckptd's file I/O table: io_uring or pread/pwrite behind one
 * interface, with a fault-injection layer in front for tests.
 *
 * The fault layer wraps each request: io_submit takes a slot, records the
 * caller's tag and the fault decided for this operation, and hands the slot
 * to the back-end as its tag; io_reap maps the slot back to the caller's tag
 * and, for an injected error, replaces the result.  The real transfer still
 * happens, as it may when a device reports an error. */
#include <errno.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "fail.h"
#include "io.h"

/* Largest single transfer, as the kernel caps read/write (MAX_RW_COUNT);
 * io_uring results are 32-bit.  Longer requests complete short. */
#define IO_MAX_RW    0x7ffff000UL
#define IO_DEPTH_MAX 32768u       /* io_uring's IORING_MAX_ENTRIES */

/* --- fault layer ------------------------------------------------------- */

enum fault_op { F_WRITE, F_READ, F_FSYNC, F_FTRUNCATE, F_OPEN, F_LINK, F_CLONE, F_NOPS };

static const char *const fault_op_name[F_NOPS] = {
	[F_WRITE] = "write", [F_READ] = "read", [F_FSYNC] = "fsync",
	[F_FTRUNCATE] = "ftruncate", [F_OPEN] = "open", [F_LINK] = "link",
	[F_CLONE] = "clone",
};

#define FAULT_SHORT  1            /* action: transfer about half */
#define FAULT_RULES  16

struct fault_rule {
	enum fault_op op;
	unsigned long nth;        /* 1-based ordinal of the op that fails */
	int action;               /* -errno or FAULT_SHORT */
};

static struct fault_rule fault_rules[FAULT_RULES];
static atomic_int        fault_nrules;
static atomic_ulong      fault_count[F_NOPS];
static atomic_uint       fault_fired;
static pthread_once_t    fault_once = PTHREAD_ONCE_INIT;

/* Parse a decimal without sign; at least one digit, no overflow. */
static int parse_ulong(const char **pp, unsigned long *out)
{
	const char *p = *pp;
	unsigned long v = 0;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (~0UL - 9) / 10)
			return -EINVAL;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	*pp = p;
	*out = v;
	return 0;
}

/* "op:N:action[,op:N:action...]"; "" or NULL means no rules. */
static int fault_parse(const char *spec, struct fault_rule *rules, int *nrules)
{
	const char *p = spec;
	int n = 0;

	if (!spec || !*spec) {
		*nrules = 0;
		return 0;
	}
	for (;;) {
		struct fault_rule r;
		unsigned long v;
		size_t len;
		int op;

		if (n == FAULT_RULES)
			return -EINVAL;
		for (op = 0; op < F_NOPS; op++) {
			len = strlen(fault_op_name[op]);
			if (!strncmp(p, fault_op_name[op], len) && p[len] == ':')
				break;
		}
		if (op == F_NOPS)
			return -EINVAL;
		r.op = (enum fault_op)op;
		p += len + 1;
		if (parse_ulong(&p, &r.nth) < 0 || r.nth == 0 || *p != ':')
			return -EINVAL;
		p++;
		if (!strncmp(p, "short", 5)) {
			if (r.op != F_WRITE && r.op != F_READ)
				return -EINVAL;
			r.action = FAULT_SHORT;
			p += 5;
		} else {
			if (*p++ != '-' || parse_ulong(&p, &v) < 0 ||
			    v == 0 || v > 4095)
				return -EINVAL;
			r.action = -(int)v;
		}
		rules[n++] = r;
		if (*p == '\0')
			break;
		if (*p++ != ',')
			return -EINVAL;
	}
	*nrules = n;
	return 0;
}

static void fault_install(const struct fault_rule *rules, int n)
{
	atomic_store(&fault_nrules, 0);
	memcpy(fault_rules, rules, (size_t)n * sizeof(*rules));
	for (int i = 0; i < F_NOPS; i++)
		atomic_store(&fault_count[i], 0);
	atomic_store(&fault_fired, 0);
	atomic_store(&fault_nrules, n);   /* publishes the rules */
}

/* CKPT_FAULT is read lazily, on the first I/O operation or io_fault_setup
 * call, so a test can set it in the daemon's environment without the daemon
 * doing anything.  An invalid value is reported once and ignored (this
 * module does not link the daemon's logger, so tests need only io.o). */
static void fault_load_env(void)
{
	struct fault_rule rules[FAULT_RULES];
	const char *spec = getenv("CKPT_FAULT");
	int n;

	if (!spec || !*spec)
		return;
	if (fault_parse(spec, rules, &n) < 0) {
		fprintf(stderr, "ckpt: ignoring invalid CKPT_FAULT '%s'\n", spec);
		return;
	}
	fault_install(rules, n);
}

/* Replaces the rules (from CKPT_FAULT or an earlier call) and restarts the
 * per-op counts at zero and io_fault_fired() at zero.  Call it before I/O
 * threads start; the rules are not locked. */
int io_fault_setup(const char *spec)
{
	struct fault_rule rules[FAULT_RULES];
	int n, ret;

	pthread_once(&fault_once, fault_load_env);
	ret = fault_parse(spec, rules, &n);
	if (ret < 0)
		return ret;
	fault_install(rules, n);
	return 0;
}

unsigned io_fault_fired(void)
{
	return atomic_load(&fault_fired);
}

/* Count one operation of this kind; returns 0 (no fault), -errno or
 * FAULT_SHORT.  Counts are process-wide: any thread's op advances them. */
static int fault_next(enum fault_op op)
{
	unsigned long nth;
	int n;

	pthread_once(&fault_once, fault_load_env);
	n = atomic_load_explicit(&fault_nrules, memory_order_acquire);
	if (n == 0)
		return 0;
	nth = atomic_fetch_add(&fault_count[op], 1) + 1;
	for (int i = 0; i < n; i++) {
		if (fault_rules[i].op == op && fault_rules[i].nth == nth) {
			atomic_fetch_add(&fault_fired, 1);
			/* one line per injected fault: tests count them */
			fprintf(stderr, "ckpt: injected fault: %s #%lu -> %s\n",
				fault_op_name[op], nth, fault_rules[i].action == FAULT_SHORT ?
				"short" : strerror(-fault_rules[i].action));
			return fault_rules[i].action;
		}
	}
	return 0;
}

/* Half the length, kept 4096- (else 512-) aligned so an O_DIRECT transfer
 * is still valid and really comes back short rather than with EINVAL. */
static size_t short_len(size_t len)
{
	size_t half = len / 2;

	if (half >= 4096)
		return half & ~(size_t)4095;
	if (half >= 512)
		return half & ~(size_t)511;
	return half;
}

/* --- the request wrapper that io_submit/io_reap hang on c->priv --------- */

struct io__req {
	void *tag;                /* the caller's */
	int   err;                /* injected -errno for the completion, or 0 */
	unsigned slot;
};

struct io__ctx {
	void          *be;        /* back-end state */
	unsigned       nfree;
	unsigned      *free;      /* free slot indices */
	struct io__req req[];     /* depth of them */
};

static struct io__ctx *ctx_priv(struct io_ctx *c)
{
	return c->priv;
}

static size_t cap_len(size_t len)
{
	return len > IO_MAX_RW ? IO_MAX_RW : len;
}

/* --- io_uring back-end ------------------------------------------------- */

static int uring_init(struct io_ctx *c, unsigned depth)
{
	struct io_uring_probe *probe;
	struct io_uring *ring;
	int ret;

	ring = calloc(1, sizeof(*ring));
	if (!ring)
		return -ENOMEM;
	ret = io_uring_queue_init(depth, ring, 0);
	if (ret < 0)
		goto out_free_ring;
	/* IORING_OP_READ/WRITE need 5.6; older kernels lack the probe too. */
	probe = io_uring_get_probe_ring(ring);
	if (!probe || !io_uring_opcode_supported(probe, IORING_OP_WRITE) ||
	    !io_uring_opcode_supported(probe, IORING_OP_READ)) {
		ret = -EOPNOTSUPP;
		if (probe)
			io_uring_free_probe(probe);
		goto out_exit_ring;
	}
	io_uring_free_probe(probe);
	ctx_priv(c)->be = ring;
	return 0;

out_exit_ring:
	io_uring_queue_exit(ring);
out_free_ring:
	free(ring);
	return ret;
}

static int uring_submit(struct io_ctx *c, enum io_op op, int fd, void *buf,
			size_t len, off_t off, void *tag)
{
	struct io_uring *ring = ctx_priv(c)->be;
	struct io_uring_sqe *sqe;

	if (c->inflight >= c->depth)
		return -EBUSY;
	sqe = io_uring_get_sqe(ring);
	if (!sqe)
		return -EBUSY;
	len = cap_len(len);
	if (op == IO_WRITE)
		io_uring_prep_write(sqe, fd, buf, (unsigned)len, (__u64)off);
	else
		io_uring_prep_read(sqe, fd, buf, (unsigned)len, (__u64)off);
	io_uring_sqe_set_data(sqe, tag);
	/* Once prepared the SQE cannot be withdrawn: if the enter fails
	 * (EAGAIN/EBUSY/EINTR) it stays queued and reap submits it again,
	 * so the request counts as accepted either way. */
	(void)io_uring_submit(ring);
	c->inflight++;
	return 0;
}

static int uring_reap(struct io_ctx *c, struct io_cqe *out, int max, int wait)
{
	struct io_uring *ring = ctx_priv(c)->be;
	struct io_uring_cqe *cqe;
	int n = 0, ret;

	if (c->inflight == 0)
		return 0;
	/* wait_cqe does not submit: flush anything a failed submit left. */
	if (io_uring_sq_ready(ring))
		(void)io_uring_submit(ring);
	while (n < max && c->inflight > 0) {
		ret = io_uring_peek_cqe(ring, &cqe);
		if (ret == -EAGAIN) {
			if (!wait || n > 0)
				break;
			ret = io_uring_wait_cqe(ring, &cqe);
			if (ret == -EINTR)
				continue;
		}
		if (ret < 0)
			return n ? n : ret;
		out[n].tag = io_uring_cqe_get_data(cqe);
		out[n].res = cqe->res;
		io_uring_cqe_seen(ring, cqe);
		c->inflight--;
		n++;
	}
	return n;
}

static void uring_release(struct io_ctx *c)
{
	struct io_uring *ring = ctx_priv(c)->be;
	struct io_cqe drop[16];

	if (!ring)
		return;
	/* The kernel may still be writing into caller buffers: drain first. */
	while (c->inflight > 0)
		if (uring_reap(c, drop, 16, 1) < 0)
			break;
	io_uring_queue_exit(ring);
	free(ring);
	ctx_priv(c)->be = NULL;
}

/* --- pread/pwrite back-end --------------------------------------------- */

/* Synchronous: submit does the transfer and parks the completion in a ring
 * of `depth` entries until reap collects it. */
struct pw {
	unsigned head, count;
	struct io_cqe done[];
};

static int pw_init(struct io_ctx *c, unsigned depth)
{
	struct pw *pw = calloc(1, sizeof(*pw) + depth * sizeof(pw->done[0]));

	if (!pw)
		return -ENOMEM;
	ctx_priv(c)->be = pw;
	return 0;
}

/* Whole transfer, resuming after partial transfers and EINTR.  An error
 * after some progress reports the progress (the next call sees the error);
 * a read stops at end of file. */
static ssize_t pw_transfer(enum io_op op, int fd, uint8_t *buf, size_t len,
			   off_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r = op == IO_WRITE
			? pwrite(fd, buf + done, len - done, off + (off_t)done)
			: pread(fd, buf + done, len - done, off + (off_t)done);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return done ? (ssize_t)done : -errno;
		}
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

static int pw_submit(struct io_ctx *c, enum io_op op, int fd, void *buf,
		     size_t len, off_t off, void *tag)
{
	struct pw *pw = ctx_priv(c)->be;
	struct io_cqe *e;

	if (pw->count >= c->depth)
		return -EBUSY;
	e = &pw->done[(pw->head + pw->count) % c->depth];
	e->res = pw_transfer(op, fd, buf, cap_len(len), off);
	e->tag = tag;
	pw->count++;
	c->inflight++;
	return 0;
}

static int pw_reap(struct io_ctx *c, struct io_cqe *out, int max, int wait)
{
	struct pw *pw = ctx_priv(c)->be;
	int n = 0;

	while (n < max && pw->count > 0) {
		out[n++] = pw->done[pw->head];
		pw->head = (pw->head + 1) % c->depth;
		pw->count--;
		c->inflight--;
	}
	return n;
}

static void pw_release(struct io_ctx *c)
{
	free(ctx_priv(c)->be);
	ctx_priv(c)->be = NULL;
}

/* --- the table --------------------------------------------------------- */

static const struct io_backend uring_backend = {
	.name = "io_uring", .init = uring_init, .release = uring_release,
	.submit = uring_submit, .reap = uring_reap,
};
static const struct io_backend pw_backend = {
	.name = "pwrite", .init = pw_init, .release = pw_release,
	.submit = pw_submit, .reap = pw_reap,
};
static const struct io_backend *const backends[] = {
	&uring_backend, &pw_backend,
};

static int ctx_setup(struct io_ctx *c, const struct io_backend *be,
		     unsigned depth)
{
	struct io__ctx *p;
	int ret;

	p = calloc(1, sizeof(*p) + depth * sizeof(p->req[0]));
	if (!p)
		return -ENOMEM;
	p->free = malloc(depth * sizeof(*p->free));
	if (!p->free) {
		ret = -ENOMEM;
		goto out_free_priv;
	}
	for (unsigned i = 0; i < depth; i++) {
		p->req[i].slot = i;
		p->free[i] = depth - 1 - i;
	}
	p->nfree = depth;

	memset(c, 0, sizeof(*c));
	c->depth = depth;
	c->priv = p;
	ret = be->init(c, depth);
	if (ret < 0)
		goto out_free_slots;
	c->be = be;
	return 0;

out_free_slots:
	free(p->free);
out_free_priv:
	free(p);
	memset(c, 0, sizeof(*c));
	return ret;
}

int io_ctx_init(struct io_ctx *c, const char *want, unsigned depth,
		int *fell_back)
{
	const struct io_backend *be = NULL;
	int is_auto, ret;

	if (!c || !want || depth == 0 || depth > IO_DEPTH_MAX)
		return -EINVAL;
	is_auto = !strcmp(want, "auto");
	if (is_auto) {
		be = &uring_backend;
	} else {
		for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
			if (!strcmp(want, backends[i]->name))
				be = backends[i];
		if (!be)
			return -EINVAL;
	}

	ret = ctx_setup(c, be, depth);
	/* Any io_uring failure (ENOSYS or EPERM under a seccomp filter, ENOMEM
	 * from an old kernel's memlock accounting, no READ/WRITE ops) leaves
	 * plain pwrite, which always works. */
	if (ret < 0 && is_auto) {
		ret = ctx_setup(c, &pw_backend, depth);
		if (ret == 0 && fell_back)
			*fell_back = 1;
		return ret;
	}
	if (ret == 0 && fell_back)
		*fell_back = 0;
	return ret;
}

void io_ctx_release(struct io_ctx *c)
{
	struct io__ctx *p;

	if (!c || !c->priv)
		return;
	p = c->priv;
	if (c->be)
		c->be->release(c);
	free(p->free);
	free(p);
	memset(c, 0, sizeof(*c));
}

int io_submit(struct io_ctx *c, enum io_op op, int fd, void *buf, size_t len,
	      off_t off, void *tag)
{
	struct io__ctx *p;
	struct io__req *req;
	int act, ret;

	if (!c || !c->be || (op != IO_WRITE && op != IO_READ) || off < 0)
		return -EINVAL;
	p = c->priv;
	/* Full before the fault count moves: a refused request is no op. */
	if (c->inflight >= c->depth || p->nfree == 0)
		return -EBUSY;

	req = &p->req[p->free[--p->nfree]];
	act = fault_next(op == IO_WRITE ? F_WRITE : F_READ);
	/* A short transfer is really done short, so the file shows it; an
	 * error is applied to the completion in io_reap. */
	if (act == FAULT_SHORT)
		len = short_len(len);
	req->tag = tag;
	req->err = act < 0 ? act : 0;

	ret = c->be->submit(c, op, fd, buf, len, off, req);
	if (ret < 0)
		p->free[p->nfree++] = req->slot;
	return ret;
}

int io_reap(struct io_ctx *c, struct io_cqe *out, int max, int wait)
{
	struct io__ctx *p;
	int n;

	if (!c || !c->be || !out)
		return -EINVAL;
	if (max <= 0)
		return 0;
	p = c->priv;
	n = c->be->reap(c, out, max, wait);
	for (int i = 0; i < n; i++) {
		struct io__req *req = out[i].tag;

		if (req->err)
			out[i].res = req->err;
		out[i].tag = req->tag;
		p->free[p->nfree++] = req->slot;
	}
	return n;
}

/* A failed fsync is reported, never retried: after a writeback error the
 * kernel may already have dropped the dirty pages, so a second fsync can
 * succeed without the data being on disk. */
int io_fsync(int fd)
{
	int act = fault_next(F_FSYNC);

	if (act < 0) {
		char link[32], path[512];
		ssize_t n;
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = readlink(link, path, sizeof(path) - 1);
		/* names the object, so tests can check it is never fsynced again */
		fprintf(stderr, "ckpt: injected fsync fault on '%s'\n",
			n > 0 ? (path[n] = '\0', path) : "?");
		return act;
	}
	return fsync(fd) < 0 ? -errno : 0;
}

int io_link(int fromdir, const char *from, int todir, const char *to)
{
	int act = fault_next(F_LINK);

	if (act < 0)
		return act;        /* as EXDEV or EMLINK would: nothing made */
	return linkat(fromdir, from, todir, to, 0) < 0 ? -errno : 0;
}

int io_clone(int src, int dst, uint64_t off, uint64_t len)
{
	struct file_clone_range r = {
		.src_fd = src, .src_offset = off, .src_length = len, .dest_offset = off,
	};
	int act = fault_next(F_CLONE);

	if (act < 0)
		return act;        /* as a file system without reflinks would */
	return ioctl(dst, FICLONERANGE, &r) < 0 ? -errno : 0;
}

int io_shares_blocks(int fd)
{
	enum { N = 32 };
	uint64_t buf[(sizeof(struct fiemap) + N * sizeof(struct fiemap_extent)) / 8 + 1];
	struct fiemap *fm = (struct fiemap *)buf;
	uint64_t start = 0;

	for (;;) {
		memset(buf, 0, sizeof(buf));
		fm->fm_start = start;
		fm->fm_length = FIEMAP_MAX_OFFSET - start;
		fm->fm_extent_count = N;
		if (ioctl(fd, FS_IOC_FIEMAP, fm) < 0)
			return errno == EOPNOTSUPP || errno == ENOTTY ? 0 : 1;
		if (fm->fm_mapped_extents == 0)
			return 0;
		for (unsigned i = 0; i < fm->fm_mapped_extents; i++) {
			const struct fiemap_extent *e = &fm->fm_extents[i];
			if (e->fe_flags & FIEMAP_EXTENT_SHARED)
				return 1;
			if (e->fe_flags & FIEMAP_EXTENT_LAST)
				return 0;
			start = e->fe_logical + e->fe_length;
		}
	}
}

int io_can_clone(int dirfd)
{
	static const char block[4096];
	struct file_clone_range r = { .src_length = sizeof(block) };
	int a = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	int b = a < 0 ? -1 : openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	int ok = 0;

	if (b >= 0 && pwrite(a, block, sizeof(block), 0) == (ssize_t)sizeof(block)) {
		r.src_fd = a;
		ok = ioctl(b, FICLONERANGE, &r) == 0;
	}
	if (b >= 0)
		close(b);
	if (a >= 0)
		close(a);
	return ok;
}

int io_ftruncate(int fd, off_t len)
{
	int act = fault_next(F_FTRUNCATE);

	if (act < 0)
		return act;
	while (ftruncate(fd, len) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

int io_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	const uint8_t *p = buf;

	while (len > 0) {
		int act = fault_next(F_WRITE);
		size_t n = act == FAULT_SHORT ? short_len(len) : len;
		ssize_t w;

		if (act < 0)
			return act;
		if (n == 0)
			n = len;
		w = pwrite(fd, p, n, off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		p += w;
		off += w;
		len -= (size_t)w;
	}
	return 0;
}

int io_write_file(int dirfd, const char *name, const char *tmp, const void *data,
		  size_t len, unsigned flags, mode_t mode)
{
	int fd, r;

	if (!name || !tmp || !*name || !*tmp || !strcmp(name, tmp))
		return -EINVAL;
	if (unlinkat(dirfd, tmp, 0) < 0 && errno == EISDIR)
		(void)unlinkat(dirfd, tmp, AT_REMOVEDIR);
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	r = io_pwrite(fd, data, len, 0);
	if (r == 0)
		r = io_fsync(fd);          /* the data durable before it is visible */
	if (close(fd) < 0 && r == 0)
		r = -errno;
	FAILPOINT("atomic.before_rename");
	if (r == 0 && ((flags & IO_FILE_NOREPLACE) ?
		       renameat2(dirfd, tmp, dirfd, name, RENAME_NOREPLACE) :
		       renameat(dirfd, tmp, dirfd, name)) < 0)
		r = -errno;
	if (r < 0) {
		unlinkat(dirfd, tmp, 0);
		return r;
	}
	return (flags & IO_FILE_SYNC_DIR) ? io_fsync(dirfd) : 0;
}

int io_open_write(int dirfd, const char *name, int direct, int *is_direct)
{
	const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	int fd, act;

	if (!name || !*name)
		return -EINVAL;
	/* An injected open failure creates nothing, like ENOSPC would. */
	act = fault_next(F_OPEN);
	if (act < 0)
		return act;
	if (direct) {
		fd = openat(dirfd, name, flags | O_DIRECT, 0640);
		if (fd >= 0) {
			if (is_direct)
				*is_direct = 1;
			return fd;
		}
		if (errno != EINVAL)
			return -errno;
		/* A file system without O_DIRECT refuses it only after
		 * creating the file (O_EXCL ruled out an older one), so
		 * remove it before trying again buffered. */
		(void)unlinkat(dirfd, name, 0);
	}
	fd = openat(dirfd, name, flags, 0640);
	if (fd < 0)
		return -errno;
	if (is_direct)
		*is_direct = 0;
	return fd;
}
