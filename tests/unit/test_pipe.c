/* test_pipe.c - the save pipeline (pipe.h) with its real stager and writer
 * threads, a tiny pool and a temp directory: the deadlock-freedom argument
 * of pipe.h exercised.  Many rank saves at once, most larger than the whole
 * pool, some small enough to be reserved and staged side by side, several
 * files each: every one must finish (a hang detector fails the test after
 * a generous bound instead of hanging the suite; no timing is asserted),
 * with every byte and SHA-256 right, and the pool whole again.  A save
 * cancelled in the middle must not hold up the others. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testhelp.h"
#include "config.h"
#include "csum.h"
#include "pipe.h"
#include "prior.h"
#include "digest.h"
#include "io.h"
#include "shm_pool.h"

/* plan.c's references to the sessions' regions (not built here): the
 * saves of this test hold no regions. */
void region_ref(struct region_ref *rg)   { (void)rg; }
void region_unref(struct region_ref *rg) { (void)rg; }

#define CHUNK      (64u << 10)
#define POOL_CHUNKS 4
/* the chunk size of the saves and pools the tests make (the clone test's
 * is a whole csum chunk) */
static uint32_t chunk = CHUNK;
#define HANG_S     120      /* far above any run: only a deadlock reaches it */

struct tsave {
	struct rsave rs;
	uint8_t     *data;       /* every file's bytes back to back */
	int          staged, done;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  cv = PTHREAD_COND_INITIALIZER;

static void on_notice(void *arg, enum pipe_notice what, struct rsave *rs)
{
	struct tsave *t = (struct tsave *)rs;     /* rs is the first member */

	pthread_mutex_lock(&mu);
	if (what == PIPE_STAGED)
		t->staged = 1;
	else
		t->done = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* Save k: nfiles files of the given sizes, host memory, in dirfd. */
static int tsave_init(struct tsave *t, int k, int dirfd, const uint64_t *sizes, size_t nfiles)
{
	uint64_t total = 0, c = 0, at = 0;
	struct rsave *rs = &t->rs;

	memset(t, 0, sizeof(*t));
	for (size_t i = 0; i < nfiles; i++)
		total += sizes[i];
	t->data = malloc(total + 1);
	rs->files = calloc(nfiles, sizeof(*rs->files));
	if (!t->data || !rs->files)
		return -1;
	for (uint64_t i = 0; i < total; i++)
		t->data[i] = (uint8_t)(i * 131 + (uint64_t)k * 7 + (i >> 12));
	rs->rank = k;
	rs->staging_fd = dirfd;
	rs->chunk_bytes = chunk;
	rs->nfiles = nfiles;
	for (size_t i = 0; i < nfiles; i++) {
		struct wfile *f = &rs->files[i];
		snprintf(f->path, sizeof(f->path), "s%02d_f%zu", k, i);
		f->size = sizes[i];
		f->segs = calloc(1, sizeof(*f->segs));
		if (!f->segs)
			return -1;
		if (f->size)
			f->segs[f->nsegs++] = (struct seg){ 0, f->size, t->data + at, NULL, 0, NULL };
		f->first_chunk = c;
		f->nchunks = (f->size + chunk - 1) / chunk;
		c += f->nchunks;
		at += f->size;
	}
	rs->bytes_total = total;
	rs->nchunks = c;
	rs->chunks = calloc(c + 1, sizeof(*rs->chunks));
	if (!rs->chunks)
		return -1;
	for (size_t i = 0; i < nfiles; i++)
		for (uint64_t n = 0; n < rs->files[i].nchunks; n++) {
			rs->chunks[rs->files[i].first_chunk + n].pool_idx = -1;
			rs->chunks[rs->files[i].first_chunk + n].file = (uint32_t)i;
		}
	return 0;
}

static void tsave_free(struct tsave *t)
{
	for (size_t i = 0; i < t->rs.nfiles; i++) {
		free(t->rs.files[i].segs);
		free(t->rs.files[i].crcs);
		free(t->rs.files[i].ranges);
	}
	free(t->rs.files);
	free(t->rs.chunks);
	free(t->data);
}

/* Every file on disk equals its bytes, and its recorded SHA-256 too. */
static int tsave_check(struct tsave *t, int dirfd)
{
	uint64_t at = 0;

	for (size_t i = 0; i < t->rs.nfiles; i++) {
		struct wfile *f = &t->rs.files[i];
		char hex[SHA_HEX_LEN + 1];
		struct digest d;
		uint64_t size = 0;
		struct sha_ctx h;
		uint8_t *buf = malloc(f->size + 1);
		int fd = openat(dirfd, f->path, O_RDONLY);
		if (!buf || fd < 0 || read(fd, buf, f->size + 1) != (ssize_t)f->size) {
			fprintf(stderr, "    %s: missing or wrong size\n", f->path);
			return 1;
		}
		close(fd);
		if (memcmp(buf, t->data + at, f->size)) {
			fprintf(stderr, "    %s: bytes differ\n", f->path);
			return 1;
		}
		CHECK_EQ(sha_init(&h), 0);
		sha_update(&h, buf, f->size);
		sha_final_hex(&h, hex);
		CHECK(strcmp(hex, f->digest.hex) == 0);
		CHECK_EQ(digest_file(dirfd, f->path, DIGEST_SHA256, &d, &size), 0);
		CHECK(strcmp(d.hex, f->digest.hex) == 0);
		CHECK_EQ(size, f->size);
		free(buf);
		at += f->size;
	}
	return 0;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

/* Wait until every save is done; 0, or the count still running after
 * HANG_S (a deadlock). */
static int wait_all(struct tsave *t, int n)
{
	struct timespec end;
	int left = n;

	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += HANG_S;
	pthread_mutex_lock(&mu);
	for (;;) {
		left = 0;
		for (int k = 0; k < n; k++)
			left += !t[k].done;
		if (!left || pthread_cond_timedwait(&cv, &mu, &end) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&mu);
	return left;
}

static int run(int cancel_one, unsigned stagers, unsigned writers)
{
	/* sizes in chunks: 0, under a chunk, whole pool, many times the pool */
	static const uint64_t big[] = { 9 * CHUNK + 17, 3, 4 * CHUNK, 0, 5 * CHUNK };
	static const uint64_t small[] = { CHUNK / 2, 100 };
	enum { N = 12 };
	struct tsave t[N];
	struct shm_pool pool;
	struct pipe p;
	struct config cfg;
	char dir[] = "/tmp/ckpt_pipe_XXXXXX";
	unsigned used, total;
	uint64_t waits;
	int dirfd, left;

	CHECK(mkdtemp(dir));
	dirfd = open(dir, O_RDONLY | O_DIRECTORY);
	CHECK(dirfd >= 0);
	CHECK_EQ(shm_pool_init(&pool, POOL_CHUNKS * CHUNK, CHUNK, 1), 0);
	config_defaults(&cfg);
	cfg.stage_threads = stagers;
	cfg.write_threads = writers;
	cfg.direct_io = 0;
	CHECK_EQ(pipe_start(&p, &pool, &cfg, on_notice, NULL), 0);
	for (int k = 0; k < N; k++) {
		/* alternate: big streaming saves and small reservable ones */
		if (k % 3 == 2)
			CHECK_EQ(tsave_init(&t[k], k, dirfd, small, 2), 0);
		else
			CHECK_EQ(tsave_init(&t[k], k, dirfd, big, 5), 0);
	}
	for (int k = 0; k < N; k++)
		CHECK_EQ(pipe_submit(&p, &t[k].rs), 0);
	if (cancel_one)
		pipe_cancel(&p, &t[4].rs, -ECANCELED, "cancelled by the test");
	left = wait_all(t, N);
	if (left) {
		fprintf(stderr, "    deadlock: %d of %d saves never finished\n", left, N);
		return 1;           /* threads are stuck: do not stop them */
	}
	for (int k = 0; k < N; k++) {
		if (cancel_one && k == 4) {
			CHECK_EQ(t[k].rs.err, -ECANCELED);
			continue;
		}
		if (t[k].rs.err) {
			fprintf(stderr, "    save %d: %s\n", k, t[k].rs.errmsg);
			return 1;
		}
		CHECK(t[k].staged);
		CHECK_EQ(atomic_load(&t[k].rs.bytes_written), t[k].rs.bytes_total);
		if (tsave_check(&t[k], dirfd))
			return 1;
	}
	pipe_stop(&p);
	shm_pool_usage(&pool, &used, &total, &waits);
	CHECK_EQ(used, 0);                /* every chunk given back */
	CHECK_EQ(total, POOL_CHUNKS);
	CHECK(waits > 0);                 /* the pool really was too small */
	for (int k = 0; k < N; k++)
		tsave_free(&t[k]);
	shm_pool_release(&pool);
	close(dirfd);
	nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
	return 0;
}

/* --- incremental saves (wr.c) -------------------------------------------- */

struct link_env {
	struct shm_pool pool;
	struct pipe     p;
	char            dir[32];
	int             dirfd;
};

/* A temp directory and a pipeline with a tiny pool, its own threads. */
static int env_start(struct link_env *e)
{
	struct config cfg;

	CHECK(mkdtemp(e->dir));
	CHECK((e->dirfd = open(e->dir, O_RDONLY | O_DIRECTORY)) >= 0);
	CHECK_EQ(shm_pool_init(&e->pool, POOL_CHUNKS * chunk, chunk, 1), 0);
	config_defaults(&cfg);
	cfg.direct_io = 0;
	CHECK_EQ(pipe_start(&e->p, &e->pool, &cfg, on_notice, NULL), 0);
	return 0;
}

/* The saves of the incremental tests: the same two files (a big one and
 * a small one) into directory "dN", with prior (and its directory "dP"). */
static const uint64_t two_files[] = { 2 * CHUNK + 5, 100 };

static int sized_setup(struct link_env *e, struct tsave *t, int n, struct prior *prior,
		       int prior_n, const uint64_t *sizes)
{
	char name[16];
	int dfd;

	snprintf(name, sizeof(name), "d%d", n);
	CHECK_EQ(mkdirat(e->dirfd, name, 0700), 0);
	CHECK((dfd = openat(e->dirfd, name, O_RDONLY | O_DIRECTORY)) >= 0);
	CHECK_EQ(tsave_init(t, 0, dfd, sizes, 2), 0);
	t->rs.prior = prior;
	t->rs.prior_dirfd = -1;
	if (prior) {
		snprintf(name, sizeof(name), "d%d", prior_n);
		CHECK((t->rs.prior_dirfd = openat(e->dirfd, name, O_RDONLY | O_DIRECTORY)) >= 0);
	}
	return 0;
}

static int save_setup(struct link_env *e, struct tsave *t, int n, struct prior *prior,
		      int prior_n)
{
	return sized_setup(e, t, n, prior, prior_n, two_files);
}

/* Submit t, wait for it: 0 when it finished without an error. */
static int save_run(struct link_env *e, struct tsave *t)
{
	CHECK_EQ(pipe_submit(&e->p, &t->rs), 0);
	CHECK_EQ(wait_all(t, 1), 0);
	if (t->rs.err) {
		fprintf(stderr, "    save: %s\n", t->rs.errmsg);
		return 1;
	}
	if (t->rs.prior_dirfd >= 0)
		close(t->rs.prior_dirfd);
	return 0;
}

/* One save with files under link_min bytes written, the first file's last
 * byte changed when mutate is set.  0 when it finished, with every byte
 * and digest right. */
static int link_save(struct link_env *e, struct tsave *t, int n, struct prior *prior,
		     int prior_n, unsigned max_shared, uint64_t link_min, int mutate)
{
	CHECK_EQ(save_setup(e, t, n, prior, prior_n), 0);
	if (mutate)
		t->data[two_files[0] - 1] ^= 1;
	t->rs.max_shared = max_shared;
	t->rs.link_min = link_min;
	CHECK_EQ(save_run(e, t), 0);
	CHECK(t->rs.reserved);            /* fits the pool: may look ahead */
	return tsave_check(t, t->rs.staging_fd);
}

static ino_t ino_of(int dirfd, int n, const char *file)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "d%d/%s", n, file);
	return fstatat(dirfd, path, &st, 0) == 0 ? st.st_ino : 0;
}

static nlink_t nlink_of(int dirfd, int n, const char *file)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "d%d/%s", n, file);
	return fstatat(dirfd, path, &st, 0) == 0 ? st.st_nlink : 0;
}

/* With the step before as its prior, a file whose bytes are the same is a
 * hard link to it (nothing written); a file that differs in its last byte
 * only (every chunk CRC32C but the last matches: the digest decides) is
 * written, as is one linked into max_shared steps already (also by saves
 * that overlap), one whose
 * predecessor was rewritten after it was committed, and one smaller than
 * link_min. */
static int test_link_unchanged(void)
{
	struct link_env e = { .dir = "/tmp/ckpt_link_XXXXXX" };
	struct tsave a, b, c, d, f, g, x, y;
	struct prior *pa, *pb, *pd, *pf;
	uint64_t linked, cloned;
	int fd;

	CHECK_EQ(env_start(&e), 0);

	CHECK_EQ(link_save(&e, &a, 1, NULL, 0, 0, 0, 0), 0);
	CHECK(!a.rs.files[0].linked);
	CHECK((pa = prior_from_rsave(&a.rs, 1)) != NULL);

	CHECK_EQ(link_save(&e, &b, 2, pa, 1, 0, 0, 0), 0);    /* the same bytes */
	CHECK(b.rs.files[0].linked && b.rs.files[1].linked);
	CHECK_EQ(nlink_of(e.dirfd, 2, "s00_f0"), 2);
	CHECK_EQ(ino_of(e.dirfd, 2, "s00_f0"), ino_of(e.dirfd, 1, "s00_f0"));
	CHECK_EQ(atomic_load(&b.rs.bytes_written), 0);
	prior_shared_bytes(&b.rs, &linked, &cloned);
	CHECK_EQ(linked, b.rs.bytes_total);
	CHECK_EQ(cloned, 0);
	CHECK(digest_eq(&b.rs.files[0].digest, &a.rs.files[0].digest));
	CHECK(memcmp(b.rs.files[0].crcs, a.rs.files[0].crcs,
		     csum_count(two_files[0], CSUM_CHUNK_BYTES) * sizeof(uint32_t)) == 0);
	CHECK((pb = prior_from_rsave(&b.rs, 2)) != NULL);

	CHECK_EQ(link_save(&e, &c, 3, pb, 2, 0, 0, 1), 0);    /* last byte changed */
	CHECK(!c.rs.files[0].linked && c.rs.files[1].linked);
	CHECK(ino_of(e.dirfd, 3, "s00_f0") != ino_of(e.dirfd, 2, "s00_f0"));
	CHECK(!digest_eq(&c.rs.files[0].digest, &b.rs.files[0].digest));
	CHECK_EQ(atomic_load(&c.rs.bytes_written), c.rs.files[0].size);

	CHECK_EQ(link_save(&e, &d, 4, pb, 2, 2, 0, 0), 0);    /* shared by 2 already */
	CHECK(!d.rs.files[0].linked && !d.rs.files[1].linked);
	CHECK_EQ(nlink_of(e.dirfd, 4, "s00_f0"), 1);

	/* saves that overlap link the same committed file: the bound holds
	 * for them together (the file's names are counted, not a chain) */
	CHECK((pd = prior_from_rsave(&d.rs, 4)) != NULL);
	CHECK_EQ(link_save(&e, &x, 7, pd, 4, 2, 0, 0), 0);
	CHECK_EQ(link_save(&e, &y, 8, pd, 4, 2, 0, 0), 0);
	CHECK(x.rs.files[0].linked && !y.rs.files[0].linked);
	CHECK_EQ(nlink_of(e.dirfd, 4, "s00_f0"), 2);

	/* rewritten in place after its commit (same bytes, a new mtime) */
	CHECK((fd = openat(e.dirfd, "d2/s00_f1", O_WRONLY)) >= 0);
	CHECK_EQ(pwrite(fd, b.data + b.rs.files[0].size, 100, 0), 100);
	CHECK_EQ(futimens(fd, (struct timespec[]){ { 0, UTIME_OMIT }, { 12345, 0 } }), 0);
	close(fd);
	CHECK_EQ(link_save(&e, &f, 5, pb, 2, 0, 0, 0), 0);
	CHECK(f.rs.files[0].linked && !f.rs.files[1].linked);
	CHECK((pf = prior_from_rsave(&f.rs, 5)) != NULL);

	CHECK_EQ(link_save(&e, &g, 6, pf, 5, 0, 101, 0), 0);   /* 100 bytes: small */
	CHECK(g.rs.files[0].linked && !g.rs.files[1].linked);

	pipe_stop(&e.p);
	prior_put(pa);
	prior_put(pb);
	prior_put(pd);
	prior_put(pf);
	tsave_free(&a);
	tsave_free(&b);
	tsave_free(&c);
	tsave_free(&d);
	tsave_free(&f);
	tsave_free(&g);
	tsave_free(&x);
	tsave_free(&y);
	shm_pool_release(&e.pool);
	close(e.dirfd);
	nftw(e.dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
	return 0;
}

/* A save of a CKPT_FROZEN shard (file 0, "f0.frozen.safetensors") and a
 * small file into "dN", prior_prelink()ed against prior (in "dP") before
 * it is submitted; the frozen shard's last byte changed when mutate is
 * set (a trainer that changed a "frozen" tensor), as registration
 * generation reg_gen.  0 when it finished. */
static int frozen_save(struct link_env *e, struct tsave *t, int n, struct prior *prior,
		       int prior_n, int mutate, uint64_t reg_gen, uint64_t *prelinked)
{
	CHECK_EQ(save_setup(e, t, n, prior, prior_n), 0);
	snprintf(t->rs.files[0].path, sizeof(t->rs.files[0].path), "f0.frozen.safetensors");
	if (mutate)
		t->data[two_files[0] - 1] ^= (uint8_t)mutate;
	t->rs.link_min = 1000;            /* the small file is written */
	t->rs.reg_gen = reg_gen;
	*prelinked = prior_prelink(&t->rs, NULL);
	return save_run(e, t);
}

/* A CKPT_FROZEN shard whose prior is linkable is linked before the save is
 * staged: its chunks are neither copied nor written (the stall copies the
 * rest).  Its trainer bytes are not compared for PRIOR_FROZEN_CHECK - 1
 * saves in a row: a "frozen" tensor that changed is saved stale until the
 * next save that compares, which writes it. */
static int test_prelink_frozen(void)
{
	struct link_env e = { .dir = "/tmp/ckpt_frozen_XXXXXX" };
	struct tsave t[7];
	struct prior *p[7] = { NULL };
	uint64_t pre;

	CHECK_EQ(env_start(&e), 0);

	CHECK_EQ(frozen_save(&e, &t[0], 0, NULL, 0, 0, 0, &pre), 0);
	CHECK_EQ(pre, 0);
	CHECK(tsave_check(&t[0], t[0].rs.staging_fd) == 0);
	CHECK((p[0] = prior_from_rsave(&t[0].rs, 1)) != NULL);

	CHECK_EQ(frozen_save(&e, &t[1], 1, p[0], 0, 0, 0, &pre), 0);
	CHECK_EQ(pre, t[1].rs.files[0].size);
	CHECK_EQ(t[1].rs.nchunks, 1);                          /* file 1's */
	CHECK_EQ(atomic_load(&t[1].rs.bytes_staged), 100);
	CHECK_EQ(atomic_load(&t[1].rs.bytes_written), 100);
	CHECK_EQ(ino_of(e.dirfd, 1, "f0.frozen.safetensors"),
		 ino_of(e.dirfd, 0, "f0.frozen.safetensors"));
	CHECK(tsave_check(&t[1], t[1].rs.staging_fd) == 0);   /* bytes and digest */
	CHECK_EQ(t[1].rs.files[0].unchecked, 1);
	CHECK((p[1] = prior_from_rsave(&t[1].rs, 2)) != NULL);

	/* the trainer changed its "frozen" tensor: not seen for two saves */
	for (int k = 2; k <= 3; k++) {
		CHECK_EQ(frozen_save(&e, &t[k], k, p[k - 1], k - 1, 1, 0, &pre), 0);
		CHECK(t[k].rs.files[0].linked && pre == t[k].rs.files[0].size);
		CHECK_EQ(t[k].rs.files[0].unchecked, (unsigned)k);
		CHECK((p[k] = prior_from_rsave(&t[k].rs, (uint64_t)k + 1)) != NULL);
	}
	/* the PRIOR_FROZEN_CHECK-th compares: written, with the new bytes */
	CHECK_EQ(PRIOR_FROZEN_CHECK, 4);
	CHECK_EQ(frozen_save(&e, &t[4], 4, p[3], 3, 1, 0, &pre), 0);
	CHECK_EQ(pre, 0);
	CHECK(!t[4].rs.files[0].linked && t[4].rs.files[0].unchecked == 0);
	CHECK(tsave_check(&t[4], t[4].rs.staging_fd) == 0);
	CHECK((p[4] = prior_from_rsave(&t[4].rs, 5)) != NULL);
	/* and the next links again, after comparing nothing */
	CHECK_EQ(frozen_save(&e, &t[5], 5, p[4], 4, 1, 0, &pre), 0);
	CHECK(t[5].rs.files[0].linked && pre > 0);
	CHECK(tsave_check(&t[5], t[5].rs.staging_fd) == 0);
	CHECK((p[5] = prior_from_rsave(&t[5].rs, 6)) != NULL);
	/* registrations changed since (a tensor renamed or recast to the
	 * same size makes another header): copied and compared, then linked */
	CHECK_EQ(frozen_save(&e, &t[6], 6, p[5], 5, 1, 1, &pre), 0);
	CHECK(pre == 0 && t[6].rs.files[0].linked && t[6].rs.files[0].unchecked == 0);

	pipe_stop(&e.p);
	for (int k = 0; k < 7; k++) {
		prior_put(p[k]);
		close(t[k].rs.staging_fd);
		tsave_free(&t[k]);
	}
	shm_pool_release(&e.pool);
	close(e.dirfd);
	nftw(e.dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
	return 0;
}

/* The clone tests' saves: a 3 MiB file and a small one into "dN", 1 MiB
 * chunks, hashed by range, with prior (in "dP") when not NULL. */
static const uint64_t clone_sizes[] = { 3u << 20, 100 };

static int clone_setup(struct link_env *e, struct tsave *t, int n, struct prior *prior,
		       int prior_n)
{
	CHECK_EQ(sized_setup(e, t, n, prior, prior_n, clone_sizes), 0);
	t->rs.clone = 1;
	t->rs.link_min = 1u << 20;
	return 0;
}

/* Run t (the save of step n + 1; clone_setup): every byte and digest
 * right; p[n] its prior for the next save. */
static int clone_run(struct link_env *e, struct tsave *t, int n, struct prior **p)
{
	CHECK_EQ(save_run(e, t), 0);
	CHECK(tsave_check(t, t->rs.staging_fd) == 0);
	CHECK((p[n] = prior_from_rsave(&t->rs, (uint64_t)n + 1)) != NULL);
	return 0;
}

/* Stop e and free the n saves t and their priors p. */
static void clone_teardown(struct link_env *e, struct tsave *t, struct prior **p, int n)
{
	pipe_stop(&e->p);
	for (int k = 0; k < n; k++) {
		prior_put(p[k]);
		close(t[k].rs.staging_fd);
		tsave_free(&t[k]);
	}
	shm_pool_release(&e->pool);
	close(e->dirfd);
	nftw(e->dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
	chunk = CHUNK;
}

/* A changed file's unchanged chunks are cloned from the prior step's
 * file when the file system clones (io_can_clone of the test's /tmp),
 * written otherwise, and written when the clone fails (injected
 * EOPNOTSUPP): every byte and digest right either way, bytes_written and
 * cloned say which, and the range hashes are there for the next save. */
static int test_clone_unchanged(void)
{
	struct link_env e = { .dir = "/tmp/ckpt_clone_XXXXXX" };
	struct tsave t[3];
	struct prior *p[3];
	int can;

	chunk = 1u << 20;              /* clone_teardown puts it back */
	CHECK_EQ(env_start(&e), 0);
	can = io_can_clone(e.dirfd);
	for (int n = 0; n < 3; n++) {
		CHECK_EQ(clone_setup(&e, &t[n], n, n ? p[n - 1] : NULL, n - 1), 0);
		t[n].data[clone_sizes[0] - 1] ^= (uint8_t)n;   /* its last chunk changes */
		if (n == 2)
			CHECK_EQ(io_fault_setup("clone:1:-95"), 0);
		CHECK_EQ(clone_run(&e, &t[n], n, p), 0);
		CHECK(t[n].rs.reserved);
		CHECK(t[n].rs.files[0].ranges && !t[n].rs.files[1].ranges);   /* link_min */
	}
	CHECK_EQ(io_fault_fired(), 1);
	CHECK_EQ(io_fault_setup(""), 0);
	/* the same bytes hash the same by range: chunks 0 and 1 */
	for (int i = 0; i < (int)((2u << 20) / RANGE_HASH_BYTES); i++)
		CHECK(range_hash_eq(&t[0].rs.files[0].ranges[i].hash,
				    &t[1].rs.files[0].ranges[i].hash));
	CHECK(!range_hash_eq(&t[0].rs.files[0].ranges[11].hash, &t[1].rs.files[0].ranges[11].hash));
	CHECK(p[1]->files[0].ranges != NULL);
	CHECK_EQ(t[1].rs.files[0].cloned, can ? 2u << 20 : 0);
	CHECK_EQ(atomic_load(&t[1].rs.bytes_written), t[1].rs.bytes_total - t[1].rs.files[0].cloned);
	CHECK_EQ(t[2].rs.files[0].cloned, 0);                  /* injected */
	CHECK_EQ(atomic_load(&t[2].rs.bytes_written), t[2].rs.bytes_total);
	clone_teardown(&e, t, p, 3);
	return 0;
}

/* incremental_max_shared counts every checkpoint that has a file's blocks:
 * a file none of whose names is over the bound is not linked when some of
 * its ranges were cloned into another checkpoint already, and a link
 * (here from a prior without range hashes, as after a restart) marks its
 * ranges shared, so that the save after it neither links (names) nor
 * clones (no clone is even tried: an injected fault does not fire). */
static int test_shared_bound(void)
{
	struct link_env e = { .dir = "/tmp/ckpt_bound_XXXXXX" };
	struct tsave t[4];
	struct prior *p[4];

	chunk = 1u << 20;              /* clone_teardown puts it back */
	CHECK_EQ(env_start(&e), 0);
	for (int n = 0; n < 4; n++) {
		CHECK_EQ(clone_setup(&e, &t[n], n, n ? p[n - 1] : NULL, n - 1), 0);   /* same bytes */
		t[n].rs.max_shared = 2;
		if (n == 1)        /* as a clone of range 4 into another step leaves it */
			p[0]->files[0].ranges[4].shared = 1;
		if (n == 2) {      /* no range hashes: as prior_load makes it */
			free(p[1]->files[0].ranges);
			p[1]->files[0].ranges = NULL;
		}
		if (n == 3)
			CHECK_EQ(io_fault_setup("clone:1:-95"), 0);
		CHECK_EQ(clone_run(&e, &t[n], n, p), 0);
	}
	CHECK_EQ(io_fault_fired(), 0);
	CHECK_EQ(io_fault_setup(""), 0);
	CHECK(!t[1].rs.files[0].linked);          /* range 4 is in 2 steps already */
	CHECK(t[2].rs.files[0].linked);           /* 1 name, no ranges known */
	for (int i = 0; i < 12; i++)
		CHECK_EQ(t[2].rs.files[0].ranges[i].shared, 1);
	CHECK(!t[3].rs.files[0].linked);          /* 2 names */
	CHECK_EQ(t[3].rs.files[0].cloned, 0);
	CHECK_EQ(atomic_load(&t[3].rs.bytes_written), t[3].rs.bytes_total);
	clone_teardown(&e, t, p, 4);
	return 0;
}

/* A save in flight that clones from a file counts in its copies as soon
 * as it claims it (prior_claim), before anything is committed: another
 * save of the same bytes does not link the file (1 name + 1 claim, at
 * incremental_max_shared 2); once the claim is taken back, one does. */
static int test_clone_claims(void)
{
	struct link_env e = { .dir = "/tmp/ckpt_claim_XXXXXX" };
	struct tsave t[3];
	struct prior *p[3];

	chunk = 1u << 20;              /* clone_teardown puts it back */
	CHECK_EQ(env_start(&e), 0);
	for (int n = 0; n < 3; n++) {
		/* the same bytes; step 1's as prior, as saves that overlap */
		CHECK_EQ(clone_setup(&e, &t[n], n, n ? p[0] : NULL, 0), 0);
		t[n].rs.max_shared = 2;
		if (n == 1)
			prior_claim(&p[0]->files[0]);
		if (n == 2)
			prior_unclaim(&p[0]->files[0]);
		CHECK_EQ(clone_run(&e, &t[n], n, p), 0);
		if (n == 0)
			CHECK_EQ(prior_copies(&p[0]->files[0], 1, 0), 1);
	}
	CHECK(!t[1].rs.files[0].linked);
	CHECK(t[2].rs.files[0].linked);
	clone_teardown(&e, t, p, 3);
	return 0;
}

static int test_many_saves_tiny_pool(void) { return run(0, 2, 2); }
static int test_cancel_holds_no_one_up(void) { return run(1, 2, 2); }
/* the argument holds for any thread counts: more stagers than writers
 * (stagers hold the whole pool) and the reverse */
static int test_one_writer(void) { return run(0, 3, 1); }
static int test_one_stager(void) { return run(0, 1, 3); }

static const struct test tests[] = {
	{ "many_saves_tiny_pool", test_many_saves_tiny_pool },
	{ "cancel_holds_no_one_up", test_cancel_holds_no_one_up },
	{ "one_writer", test_one_writer },
	{ "link_unchanged", test_link_unchanged },
	{ "prelink_frozen", test_prelink_frozen },
	{ "clone_unchanged", test_clone_unchanged },
	{ "shared_bound", test_shared_bound },
	{ "clone_claims", test_clone_claims },
	{ "one_stager", test_one_stager },
};

TEST_MAIN(tests)
