/* test_shm.c - sealed memfd regions and the staging pool. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shm_pool.h"
#include "shm_region.h"
#include "testhelp.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

static int fd_is_closed(int fd)
{
	return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}

/* A memfd of `size` bytes with `seals` added (0: none, unsealed). */
static int make_memfd(size_t size, unsigned flags, int seals)
{
	int fd = memfd_create("test", MFD_CLOEXEC | flags);

	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)size) < 0 ||
	    (seals && fcntl(fd, F_ADD_SEALS, seals) < 0)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Adopt must fail with `want`, close the fd, leave *out alone, say why. */
static int expect_refused(int fd, size_t size, int want)
{
	struct shm_region r = { .fd = 1234, .base = (void *)0x1, .size = 77 };
	char why[96] = "";

	CHECK(fd >= 0);
	CHECK_EQ(shm_region_adopt(fd, size, &r, why, sizeof(why)), want);
	CHECK(*why);
	CHECK(fd_is_closed(fd));
	CHECK_EQ(r.fd, 1234);
	CHECK(r.base == (void *)0x1);
	CHECK_EQ(r.size, 77);
	return 0;
}

static int test_region_roundtrip(void)
{
	struct shm_region a = { .fd = -1 }, b = { .fd = -1 };
	char why[96] = "untouched";
	long ps = sysconf(_SC_PAGESIZE);
	int seals;

	CHECK_EQ(shm_region_create("test", 10000, &a), 0);
	CHECK(a.fd >= 0 && a.base != NULL);
	CHECK_EQ(a.size, ((10000 + ps - 1) / ps) * ps);
	seals = fcntl(a.fd, F_GET_SEALS);
	CHECK((seals & SHM_REQUIRED_SEALS) == SHM_REQUIRED_SEALS);
	/* The seals hold: the client cannot shrink or grow it either. */
	CHECK(ftruncate(a.fd, 4096) < 0 && errno == EPERM);
	CHECK(ftruncate(a.fd, (off_t)a.size * 2) < 0 && errno == EPERM);

	CHECK_EQ(shm_region_adopt(dup(a.fd), a.size, &b, why, sizeof(why)), 0);
	CHECK(strcmp(why, "untouched") == 0);
	CHECK(b.base != a.base);
	CHECK_EQ(b.size, a.size);

	memset(a.base, 0xa5, a.size);
	CHECK(((uint8_t *)b.base)[0] == 0xa5);
	CHECK(((uint8_t *)b.base)[a.size - 1] == 0xa5);
	((uint8_t *)b.base)[123] = 0x5a;
	CHECK(((uint8_t *)a.base)[123] == 0x5a);

	shm_region_release(&b);
	CHECK(b.base == NULL && b.fd == -1);
	shm_region_release(&b);           /* twice is harmless */
	shm_region_release(&a);
	return 0;
}

/* ckpt_alloc's memory is allocated when created, by the trainer: every
 * page is resident before ckptd maps it (it then only maps pages). */
static int test_region_create_populates(void)
{
	struct shm_region a = { .fd = -1 };
	size_t ps = (size_t)sysconf(_SC_PAGESIZE), n;
	unsigned char *vec;

	CHECK_EQ(shm_region_create("test", 64 * ps, &a), 0);
	n = a.size / ps;
	vec = calloc(n, 1);
	CHECK(vec != NULL);
	CHECK_EQ(mincore(a.base, a.size, vec), 0);
	for (size_t i = 0; i < n; i++)
		CHECK(vec[i] & 1);
	CHECK(((uint8_t *)a.base)[0] == 0 && ((uint8_t *)a.base)[a.size - 1] == 0);
	free(vec);
	shm_region_release(&a);
	return 0;
}

/* The daemon's view says whether all the trainer's memory was mapped when
 * adopted (a restore then does not walk it again): yes for ckpt_alloc's
 * memory, and writes to it take no page faults; no for a memfd with a
 * page never written (a hole), which is not mapped. */
static int test_region_adopt_mapped(void)
{
	struct shm_region a = { .fd = -1 }, b = { .fd = -1 };
	size_t ps = (size_t)sysconf(_SC_PAGESIZE), n = 256 * ps;
	struct rusage u0, u1;
	char why[96];
	int fd;

	CHECK_EQ(shm_region_create("test", n, &a), 0);
	CHECK_EQ(shm_region_adopt(dup(a.fd), a.size, &b, why, sizeof(why)), 0);
	CHECK_EQ(b.mapped, 1);
	getrusage(RUSAGE_SELF, &u0);
	memset(b.base, 7, b.size);
	getrusage(RUSAGE_SELF, &u1);
	CHECK(u1.ru_minflt - u0.ru_minflt < 16);      /* not one per page */
	shm_region_release(&b);
	shm_region_release(&a);

	fd = memfd_create("holes", MFD_ALLOW_SEALING);
	CHECK(fd >= 0 && ftruncate(fd, (off_t)n) == 0);
	CHECK(pwrite(fd, "x", 1, 0) == 1 && pwrite(fd, "x", 1, (off_t)(n - 1)) == 1);
	CHECK_EQ(fcntl(fd, F_ADD_SEALS, SHM_REQUIRED_SEALS), 0);
	CHECK_EQ(shm_region_adopt(fd, n, &b, why, sizeof(why)), 0);
	CHECK_EQ(b.mapped, 0);
	shm_region_release(&b);
	return 0;
}

static int test_region_create_args(void)
{
	struct shm_region r = { .fd = 99, .base = NULL, .size = 5 };
	char longname[400];

	CHECK_EQ(shm_region_create("x", 0, &r), -EINVAL);
	CHECK_EQ(r.fd, 99);
	CHECK_EQ(r.size, 5);
	CHECK_EQ(shm_region_create("x", 1, NULL), -EINVAL);
	/* An over-long label is truncated, not an error. */
	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	CHECK_EQ(shm_region_create(longname, 1, &r), 0);
	CHECK_EQ(r.size, (size_t)sysconf(_SC_PAGESIZE));
	shm_region_release(&r);
	CHECK_EQ(shm_region_create(NULL, 1, &r), 0);
	shm_region_release(&r);

	/* A zeroed region owns nothing: fd 0 is left as it was. */
	struct shm_region z;
	int open0 = !fd_is_closed(0);
	memset(&z, 0, sizeof(z));
	shm_region_release(&z);
	shm_region_release(NULL);
	CHECK_EQ(!fd_is_closed(0), open0);
	return 0;
}

static int test_region_refuse_unsealed(void)
{
	/* Sealing allowed but never sealed. */
	if (expect_refused(make_memfd(8192, MFD_ALLOW_SEALING, 0), 8192, -EPERM))
		return 1;
	/* Sealing not allowed: the memfd carries only F_SEAL_SEAL. */
	if (expect_refused(make_memfd(8192, 0, 0), 8192, -EPERM))
		return 1;
	/* Shrink sealed but it may still grow: still refused. */
	if (expect_refused(make_memfd(8192, MFD_ALLOW_SEALING, F_SEAL_SHRINK),
			   8192, -EPERM))
		return 1;
	return 0;
}

static int test_region_refuse_regular_file(void)
{
	int fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	CHECK(fd >= 0);
	CHECK_EQ(ftruncate(fd, 8192), 0);
	if (expect_refused(fd, 8192, -EBADF))
		return 1;
	/* The same through stdio's tmpfile(). */
	FILE *f = tmpfile();
	CHECK(f != NULL);
	CHECK_EQ(ftruncate(fileno(f), 4096), 0);
	if (expect_refused(dup(fileno(f)), 4096, -EBADF))
		return 1;
	fclose(f);
	/* A directory is not a regular file. */
	if (expect_refused(open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC),
			   4096, -EBADF))
		return 1;
	return 0;
}

static int test_region_refuse_pipe_socket(void)
{
	int p[2], s[2];

	CHECK_EQ(pipe(p), 0);
	if (expect_refused(p[0], 4096, -EBADF) || expect_refused(p[1], 4096, -EBADF))
		return 1;
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s), 0);
	if (expect_refused(s[0], 4096, -EBADF))
		return 1;
	close(s[1]);

	struct shm_region r = { .fd = 5 };
	char why[96] = "";
	CHECK_EQ(shm_region_adopt(-1, 4096, &r, why, sizeof(why)), -EBADF);
	CHECK(*why);
	CHECK_EQ(r.fd, 5);
	return 0;
}

static int test_region_refuse_wrong_size(void)
{
	struct shm_region a;

	CHECK_EQ(shm_region_create("t", 8192, &a), 0);
	if (expect_refused(dup(a.fd), a.size + 4096, -EINVAL) ||
	    expect_refused(dup(a.fd), a.size - 4096, -EINVAL) ||
	    expect_refused(dup(a.fd), 0, -EINVAL))
		return 1;
	shm_region_release(&a);
	/* Sealed, right seals, but empty. */
	if (expect_refused(make_memfd(0, MFD_ALLOW_SEALING, SHM_REQUIRED_SEALS),
			   0, -EINVAL))
		return 1;
	return 0;
}

static int test_region_refuse_write_sealed(void)
{
	if (expect_refused(make_memfd(8192, MFD_ALLOW_SEALING,
				      SHM_REQUIRED_SEALS | F_SEAL_WRITE),
			   8192, -EPERM))
		return 1;
	int fd = make_memfd(8192, MFD_ALLOW_SEALING,
			    SHM_REQUIRED_SEALS | F_SEAL_FUTURE_WRITE);
	if (fd < 0 && errno == EINVAL)
		return 0;                 /* kernel without FUTURE_WRITE */
	if (expect_refused(fd, 8192, -EPERM))
		return 1;
	return 0;
}

static int test_region_refuse_readonly_fd(void)
{
	struct shm_region a;
	char path[64];
	int ro;

	/* A read-only reopen of a good memfd cannot be mapped read-write. */
	CHECK_EQ(shm_region_create("t", 4096, &a), 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", a.fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(ro >= 0);
	if (expect_refused(ro, a.size, -EACCES))
		return 1;
	shm_region_release(&a);
	return 0;
}

/* --- pool --------------------------------------------------------------- */

static int test_pool_take_give(void)
{
	struct shm_pool p;
	unsigned used, total;
	uint64_t waits;
	int got[4], seen = 0;

	CHECK_EQ(shm_pool_init(&p, 4 * 65536 + 1000, 65536, 1), 0);
	CHECK_EQ(p.nchunks, 4);
	CHECK_EQ(p.bytes, 4 * 65536);
	for (int i = 0; i < 4; i++) {
		got[i] = shm_pool_take(&p, NULL);
		CHECK(got[i] >= 0 && got[i] < 4);
		CHECK(!(seen & (1 << got[i])));
		seen |= 1 << got[i];
	}
	shm_pool_usage(&p, &used, &total, &waits);
	CHECK_EQ(used, 4);
	CHECK_EQ(total, 4);
	CHECK_EQ(waits, 0);
	CHECK_EQ(shm_pool_try_take(&p), -EAGAIN);
	shm_pool_give(&p, (unsigned)got[2]);
	CHECK_EQ(shm_pool_try_take(&p), got[2]);
	CHECK_EQ(shm_pool_try_take(&p), -EAGAIN);
	/* Bogus gives are ignored, never corrupt the free stack. */
	shm_pool_give(&p, 4);
	CHECK_EQ(shm_pool_try_take(&p), -EAGAIN);
	for (int i = 0; i < 4; i++)
		shm_pool_give(&p, (unsigned)got[i]);
	shm_pool_give(&p, 0);             /* double give */
	shm_pool_usage(&p, &used, NULL, NULL);
	CHECK_EQ(used, 0);
	CHECK_EQ(p.nfree, 4);
	shm_pool_release(&p);
	CHECK(p.base == NULL);
	shm_pool_release(&p);
	return 0;
}

static int test_pool_sizes(void)
{
	struct shm_pool p;

	CHECK_EQ(shm_pool_init(&p, 1 << 20, 4095, 1), -EINVAL);
	CHECK_EQ(shm_pool_init(&p, 1 << 20, 0, 1), -EINVAL);
	CHECK(p.base == NULL);
	shm_pool_release(&p);             /* after a failed init */
	/* Smaller than a chunk: still one chunk. */
	CHECK_EQ(shm_pool_init(&p, 100, 8192, 1), 0);
	CHECK_EQ(p.nchunks, 1);
	CHECK_EQ(p.bytes, 8192);
	shm_pool_release(&p);
	return 0;
}

static int test_pool_alignment(void)
{
	struct shm_pool p;

	CHECK_EQ(shm_pool_init(&p, 6 * 12288, 12288, 1), 0);
	CHECK_EQ(p.nchunks, 6);
	for (unsigned i = 0; i < p.nchunks; i++) {
		uint8_t *c = shm_pool_chunk(&p, i);
		CHECK((uintptr_t)c % 4096 == 0);
		CHECK(c == p.base + (size_t)i * 12288);
		/* Pre-faulted memory reads as zero and is writable. */
		CHECK(c[0] == 0 && c[12287] == 0);
		memset(c, (int)i + 1, 12288);
	}
	for (unsigned i = 0; i < p.nchunks; i++) {
		uint8_t *c = shm_pool_chunk(&p, i);
		CHECK(c[0] == i + 1 && c[12287] == i + 1);
	}
	CHECK(p.locked == 0 || p.locked == 1);
	shm_pool_release(&p);
	/* lock_pool false: never locked */
	CHECK_EQ(shm_pool_init(&p, 6 * 12288, 12288, 0), 0);
	CHECK_EQ(p.locked, 0);
	shm_pool_release(&p);
	return 0;
}

struct taker {
	struct shm_pool *p;
	atomic_int cancel;
	atomic_int done;
	int result;
};

static void *taker_main(void *arg)
{
	struct taker *t = arg;

	t->result = shm_pool_take(t->p, &t->cancel);
	atomic_store(&t->done, 1);
	return NULL;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static int test_pool_take_blocks(void)
{
	struct shm_pool p;
	struct taker t = { .p = &p };
	pthread_t th;
	uint64_t waits;
	int a, b;

	CHECK_EQ(shm_pool_init(&p, 2 * 4096, 4096, 1), 0);
	a = shm_pool_take(&p, NULL);
	b = shm_pool_take(&p, NULL);
	CHECK(a >= 0 && b >= 0 && a != b);
	CHECK_EQ(pthread_create(&th, NULL, taker_main, &t), 0);
	sleep_ms(100);
	CHECK_EQ(atomic_load(&t.done), 0);   /* still waiting */
	shm_pool_give(&p, (unsigned)b);
	CHECK_EQ(pthread_join(th, NULL), 0);
	CHECK_EQ(t.result, b);
	shm_pool_usage(&p, NULL, NULL, &waits);
	CHECK_EQ(waits, 1);
	shm_pool_give(&p, (unsigned)a);
	shm_pool_give(&p, (unsigned)b);
	shm_pool_release(&p);
	return 0;
}

static int test_pool_cancel(void)
{
	struct shm_pool p;
	struct taker t = { .p = &p };
	pthread_t th;
	unsigned used;
	int a;

	CHECK_EQ(shm_pool_init(&p, 4096, 4096, 1), 0);
	a = shm_pool_take(&p, NULL);
	CHECK_EQ(a, 0);
	CHECK_EQ(pthread_create(&th, NULL, taker_main, &t), 0);
	sleep_ms(50);
	CHECK_EQ(atomic_load(&t.done), 0);
	/* A kick without cancel is a spurious wake: it keeps waiting. */
	shm_pool_kick(&p);
	sleep_ms(50);
	CHECK_EQ(atomic_load(&t.done), 0);
	t.cancel = 1;
	shm_pool_kick(&p);
	CHECK_EQ(pthread_join(th, NULL), 0);
	CHECK_EQ(t.result, -ECANCELED);
	shm_pool_usage(&p, &used, NULL, NULL);
	CHECK_EQ(used, 1);
	/* Already cancelled and full: returns at once. */
	CHECK_EQ(shm_pool_take(&p, &t.cancel), -ECANCELED);
	/* Cancel only ends a wait: a free chunk is still handed out. */
	shm_pool_give(&p, 0);
	CHECK_EQ(shm_pool_take(&p, &t.cancel), 0);
	shm_pool_give(&p, 0);
	shm_pool_release(&p);
	return 0;
}

/* Many threads hammering take/give: every chunk is held by one at a time. */
#define HAMMER_THREADS 8
#define HAMMER_ROUNDS  2000
static struct shm_pool hp;
static atomic_int hp_owner[4];
static atomic_int hp_bad;

static void *hammer_main(void *arg)
{
	int me = (int)(intptr_t)arg + 1;

	for (int i = 0; i < HAMMER_ROUNDS; i++) {
		int idx = shm_pool_take(&hp, NULL), zero = 0;
		if (idx < 0 || !atomic_compare_exchange_strong(&hp_owner[idx], &zero, me)) {
			atomic_fetch_add(&hp_bad, 1);
			continue;
		}
		atomic_store(&hp_owner[idx], 0);
		shm_pool_give(&hp, (unsigned)idx);
	}
	return NULL;
}

static int test_pool_threads(void)
{
	pthread_t th[HAMMER_THREADS];
	unsigned used;

	CHECK_EQ(shm_pool_init(&hp, 4 * 4096, 4096, 1), 0);
	for (int i = 0; i < HAMMER_THREADS; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, hammer_main, (void *)(intptr_t)i), 0);
	for (int i = 0; i < HAMMER_THREADS; i++)
		CHECK_EQ(pthread_join(th[i], NULL), 0);
	CHECK_EQ(atomic_load(&hp_bad), 0);
	shm_pool_usage(&hp, &used, NULL, NULL);
	CHECK_EQ(used, 0);
	shm_pool_release(&hp);
	return 0;
}

/* Promised chunks: all or nothing, invisible to ordinary takers, handed
 * back whole (the stager's side-by-side staging relies on this). */
static int test_pool_reserve(void)
{
	struct shm_pool p;
	int a, b, c;

	CHECK_EQ(shm_pool_init(&p, 4 * 4096, 4096, 1), 0);
	CHECK_EQ(shm_pool_reserve(&p, 5), -EAGAIN);      /* more than the pool */
	CHECK_EQ(shm_pool_reserve(&p, 3), 0);
	CHECK_EQ(shm_pool_reserve(&p, 2), -EAGAIN);      /* only 1 unpromised */
	a = shm_pool_try_take(&p);                       /* the unpromised one */
	CHECK(a >= 0);
	CHECK_EQ(shm_pool_try_take(&p), -EAGAIN);        /* the rest are promised */
	b = shm_pool_take_reserved(&p);
	c = shm_pool_take_reserved(&p);
	CHECK(b >= 0 && c >= 0 && b != c && a != b && a != c);
	shm_pool_unreserve(&p, 1);                       /* third one not needed */
	CHECK(shm_pool_try_take(&p) >= 0);
	CHECK_EQ(shm_pool_take_reserved(&p), -EINVAL);   /* nothing promised */
	shm_pool_unreserve(&p, 7);                       /* too many: harmless */
	shm_pool_release(&p);
	return 0;
}

/* shm_pool_copy gives memcpy's bytes at any alignment and size, around
 * the size where it switches to streaming stores (4 KiB), the 64-byte
 * line it aligns to and the 64-byte tail; shm_pool_copy_part as well, many
 * pieces back to back into one destination as the stagers fill a chunk. */
static int test_pool_copy(void)
{
	const size_t big = (256u << 10) + 200;
	static const size_t sizes[] = { 0, 1, 63, 4095, 4096, 4097, 4096 + 63, 13415,
					(256u << 10) - 1, 256u << 10, (256u << 10) + 63,
					(1u << 20) + 17 };
	uint8_t *src = malloc(big + (1u << 20) + 128), *dst = malloc(big + (1u << 20) + 128);
	size_t at = 0;

	CHECK(src && dst);
	for (size_t i = 0; i < big + (1u << 20) + 128; i++)
		src[i] = (uint8_t)(i * 131 + (i >> 9));
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		for (size_t da = 0; da < 70; da += 5)
			for (size_t sa = 0; sa < 18; sa += 7) {
				size_t n = sizes[k];
				memset(dst, 0xee, n + da + 32);
				shm_pool_copy(dst + da, src + sa, n);
				CHECK(memcmp(dst + da, src + sa, n) == 0);
				for (size_t i = 0; i < da; i++)          /* nothing before */
					CHECK(dst[i] == 0xee);
				for (size_t i = 0; i < 32; i++)          /* nor after */
					CHECK(dst[da + n + i] == 0xee);
			}
	/* pieces of every size above from sources 64 bytes apart, packed */
	memset(dst, 0xee, big + (1u << 20) + 128);
	for (size_t k = 0; k < 9; k++) {
		shm_pool_copy_part(dst + at, src + 64 * k + at, sizes[k]);
		at += sizes[k];
	}
	shm_pool_copied();
	at = 0;
	for (size_t k = 0; k < 9; k++) {
		CHECK(memcmp(dst + at, src + 64 * k + at, sizes[k]) == 0);
		at += sizes[k];
	}
	CHECK(dst[at] == 0xee);
	free(src);
	free(dst);
	return 0;
}

static const struct test tests[] = {
	{ "region_roundtrip", test_region_roundtrip },
	{ "region_create_populates", test_region_create_populates },
	{ "region_adopt_mapped", test_region_adopt_mapped },
	{ "region_create_args", test_region_create_args },
	{ "region_refuse_unsealed", test_region_refuse_unsealed },
	{ "region_refuse_regular_file", test_region_refuse_regular_file },
	{ "region_refuse_pipe_socket", test_region_refuse_pipe_socket },
	{ "region_refuse_wrong_size", test_region_refuse_wrong_size },
	{ "region_refuse_write_sealed", test_region_refuse_write_sealed },
	{ "region_refuse_readonly_fd", test_region_refuse_readonly_fd },
	{ "pool_take_give", test_pool_take_give },
	{ "pool_sizes", test_pool_sizes },
	{ "pool_alignment", test_pool_alignment },
	{ "pool_take_blocks", test_pool_take_blocks },
	{ "pool_cancel", test_pool_cancel },
	{ "pool_threads", test_pool_threads },
	{ "pool_reserve", test_pool_reserve },
	{ "pool_copy", test_pool_copy },
};

TEST_MAIN(tests)
