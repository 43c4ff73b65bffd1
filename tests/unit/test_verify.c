/* test_verify.c - verify_checkpoint on real small checkpoints built with
 * the format modules in a private temp directory, then damaged. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testhelp.h"
#include "csum.h"
#include "layout.h"
#include "mfst.h"
#include "safet.h"
#include "digest.h"
#include "verify.h"

#define WORLD 2
#define MAXF  16
#define MAXT  32

struct opts {
	const char *status;      /* default "committed" */
	int omit_last;           /* leave model rank 0's last tensor out */
	int wrong_dtype;         /* manifest says I32 where the header says F32 */
	uint64_t chunk;          /* chunk CRC32Cs of this many bytes (0: none) */
};

struct ck {
	char root[64];
	char dir[128];
	int  dfd;
};

static const int64_t sh_w[] = { 8, 16 }, sh_b[] = { 16 }, sh_e[] = { 0, 3 };

static int write_at(int dfd, const char *path, const void *a, size_t alen,
		    const void *b, size_t blen)
{
	int fd = openat(dfd, path, O_WRONLY | O_CREAT | O_EXCL, 0600);

	if (fd < 0)
		return -1;
	if ((alen && write(fd, a, alen) != (ssize_t)alen) ||
	    (blen && write(fd, b, blen) != (ssize_t)blen)) {
		close(fd);
		return -1;
	}
	return close(fd);
}

/* One shard of group g for rank r: header + deterministic data; records
 * its file and tensors in the manifest arrays. */
static int add_shard(struct ck *c, const char *g, int r, const struct opts *o,
		     struct mfst_file *f, size_t *nf,
		     struct mfst_tensor *t, size_t *nt)
{
	const struct safet_entry e[] = {
		{ "layer.weight", "F32", 2, sh_w, 8 * 16 * 4 },
		{ "layer.bias", "BF16", 1, sh_b, 32 },
		{ "empty", "I64", 2, sh_e, 0 },
		{ "scale", "F64", 0, NULL, 8 },
	};
	const size_t n = sizeof(e) / sizeof(e[0]);
	const char *const md[] = { "format", "pt", NULL };
	uint64_t offs[8];
	uint8_t *hdr, data[1024];
	char path[LAYOUT_PATH_MAX];
	size_t hlen, keep;

	if (layout_shard_path(g, r, 0, path, sizeof(path)) < 0 ||
	    safet_header_build(e, n, md, 64, &hdr, &hlen, offs) < 0)
		return -1;
	for (size_t i = 0; i < offs[n]; i++)
		data[i] = (uint8_t)(i * 7 + r * 13 + g[0]);
	if (write_at(c->dfd, path, hdr, hlen, data, offs[n]) < 0) {
		free(hdr);
		return -1;
	}
	free(hdr);
	f[*nf].path = strdup(path);
	f[*nf].size = hlen + offs[n];
	if (digest_file(c->dfd, path, DIGEST_SHA256, &f[*nf].digest, &f[*nf].size) < 0)
		return -1;
	keep = (o->omit_last && r == 0 && strcmp(g, "model") == 0) ? n - 1 : n;
	for (size_t i = 0; i < keep; i++) {
		struct mfst_tensor *x = &t[(*nt)++];

		x->group = strdup(g);
		x->rank = r;
		x->name = strdup(e[i].name);
		x->file = *nf;
		strcpy(x->dtype, o->wrong_dtype && i == 0 ? "I32" : e[i].dtype);
		x->ndim = e[i].ndim;
		for (int d = 0; d < e[i].ndim; d++)
			x->shape[d] = e[i].shape[d];
		x->begin = hlen + offs[i];
		x->end = hlen + offs[i] + e[i].nbytes;
	}
	(*nf)++;
	return 0;
}

static int add_blob(struct ck *c, const char *name, int r,
		    struct mfst_file *f, size_t *nf, struct mfst_blob *b,
		    size_t *nb)
{
	char path[LAYOUT_PATH_MAX], rd[32], blob[40];

	if (layout_rank_dir(r, rd, sizeof(rd)) < 0 ||
	    layout_blob_path(name, r, path, sizeof(path)) < 0)
		return -1;
	snprintf(blob, sizeof(blob), LAYOUT_EXTRA "/%s", rd);
	mkdirat(c->dfd, blob, 0700);
	snprintf(blob, sizeof(blob), "rng state of rank %d", r);
	if (write_at(c->dfd, path, blob, strlen(blob), NULL, 0) < 0)
		return -1;
	f[*nf].path = strdup(path);
	if (digest_file(c->dfd, path, DIGEST_SHA256, &f[*nf].digest, &f[*nf].size) < 0)
		return -1;
	b[*nb].rank = r;
	b[*nb].name = strdup(name);
	b[*nb].file = (*nf)++;
	(*nb)++;
	return 0;
}

/* The chunk CRC32Cs of file f, as ckptd records them while writing. */
static int add_chunks(struct ck *c, struct mfst_file *f, uint64_t chunk)
{
	struct csum_stream cs;
	uint8_t buf[4096];
	int fd = openat(c->dfd, f->path, O_RDONLY);
	ssize_t n;

	if (fd < 0 || csum_stream_init(&cs, chunk, f->size) < 0)
		return -1;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		csum_stream_update(&cs, buf, (size_t)n);
	close(fd);
	f->chunk_size = chunk;
	return csum_stream_finish(&cs, &f->crc32c);
}

/* root/iter_000000500/ with model (2 ranks), optim (rank 0), rng blobs. */
static int build(struct ck *c, const struct opts *o)
{
	struct mfst *m = calloc(1, sizeof(*m));
	char it[LAYOUT_ITER_LEN + 1];
	int ret = -1;

	strcpy(c->root, "/tmp/ckpt_verify_XXXXXX");
	c->dfd = -1;
	if (!m || !mkdtemp(c->root) || layout_iter_name(500, it, sizeof(it)) < 0)
		goto out;
	snprintf(c->dir, sizeof(c->dir), "%s/%s", c->root, it);
	if (mkdir(c->dir, 0700) < 0)
		goto out;
	c->dfd = open(c->dir, O_RDONLY | O_DIRECTORY);
	if (c->dfd < 0 || mkdirat(c->dfd, "model", 0700) < 0 ||
	    mkdirat(c->dfd, "optim", 0700) < 0 ||
	    mkdirat(c->dfd, LAYOUT_EXTRA, 0700) < 0)
		goto out;
	m->files = calloc(MAXF, sizeof(*m->files));
	m->tensors = calloc(MAXT, sizeof(*m->tensors));
	m->blobs = calloc(MAXF, sizeof(*m->blobs));
	if (!m->files || !m->tensors || !m->blobs)
		goto out;
	for (int r = 0; r < WORLD; r++)
		if (add_shard(c, "model", r, o, m->files, &m->nfiles,
			      m->tensors, &m->ntensors) < 0)
			goto out;
	if (add_shard(c, "optim", 0, o, m->files, &m->nfiles, m->tensors,
		      &m->ntensors) < 0)
		goto out;
	for (int r = 0; r < WORLD; r++)
		if (add_blob(c, "rng", r, m->files, &m->nfiles, m->blobs,
			     &m->nblobs) < 0)
			goto out;
	m->format_version = MFST_VERSION;
	strcpy(m->status, o && o->status ? o->status : "committed");
	m->job = strdup("demo");
	strcpy(m->run_id, "0123456789abcdef0123456789abcdef");
	strcpy(m->txid, "00000000000000000000000000000001");
	m->step = 500;
	m->world_size = WORLD;
	m->created_unix = 1790000000;
	for (size_t i = 0; o && o->chunk && i < m->nfiles; i++)
		if (add_chunks(c, &m->files[i], o->chunk) < 0)
			goto out;
	if (mfst_write(c->dfd, m) < 0)
		goto out;
	ret = 0;
out:
	mfst_free(m);
	return ret;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	return remove(p);
}

static void destroy(struct ck *c)
{
	if (c->dfd >= 0)
		close(c->dfd);
	nftw(c->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static const struct opts plain = { NULL, 0, 0, 0 };

static int truncate_at(int dfd, const char *path, off_t len)
{
	int fd = openat(dfd, path, O_WRONLY);
	int r = fd < 0 ? -1 : ftruncate(fd, len);

	if (fd >= 0)
		close(fd);
	return r;
}
static const struct opts chunked = { NULL, 0, 0, 256 };

static int test_good(void)
{
	struct mfst *m = NULL;
	struct ck c;
	char err[256] = "";

	CHECK_EQ(build(&c, &plain), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_STRUCTURE, 1, NULL, err, sizeof(err)), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_FULL, 1, NULL, err, sizeof(err)), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_FULL, 0, NULL, err, sizeof(err)), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_FULL, 64, &m, err, sizeof(err)), 0);
	CHECK(m != NULL);
	CHECK_EQ(m->nfiles, 5);
	CHECK_EQ(m->ntensors, 12);
	CHECK_EQ(m->step, 500);
	mfst_free(m);
	CHECK_EQ(verify_checkpoint(c.dfd, 7, 1, NULL, err, sizeof(err)), -EINVAL);
	destroy(&c);
	return 0;
}

static int flip(int dfd, const char *path, off_t off)
{
	int fd = openat(dfd, path, O_RDWR);
	uint8_t b;

	if (fd < 0 || pread(fd, &b, 1, off) != 1)
		return -1;
	b ^= 0x01;
	if (pwrite(fd, &b, 1, off) != 1)
		return -1;
	return close(fd);
}

static int test_flipped_byte(void)
{
	struct mfst *m = (struct mfst *)0x1;
	struct ck c;
	char err[256] = "";
	struct stat st;

	CHECK_EQ(build(&c, &plain), 0);
	CHECK_EQ(fstatat(c.dfd, "model/rank_00001.safetensors", &st, 0), 0);
	CHECK_EQ(flip(c.dfd, "model/rank_00001.safetensors", st.st_size - 100), 0);
	/* Structure cannot see it; FULL must, on any thread count. */
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_STRUCTURE, 1, NULL, err, sizeof(err)), 0);
	for (unsigned nt = 1; nt <= 8; nt *= 2) {
		err[0] = '\0';
		CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_FULL, nt, &m, err, sizeof(err)),
			 -EBADMSG);
		CHECK(strstr(err, "model/rank_00001.safetensors: sha256 mismatch (expected "));
		CHECK(m == (struct mfst *)0x1);           /* untouched on failure */
	}
	destroy(&c);
	return 0;
}

/* What a restore checks (VERIFY_BYTES_FAST): the chunk CRC32Cs where the
 * manifest has them, catching a flipped bit in any chunk and naming it;
 * SHA-256 for a checkpoint without them (format 1).  The audit
 * (VERIFY_BYTES_AUDIT, ckptctl verify) checks both. */
static int test_fast_check(void)
{
	struct mfst *m = NULL;
	struct ck c;
	char err[256] = "";

	CHECK_EQ(build(&c, &chunked), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_STRUCTURE, 1, &m, err, sizeof(err)), 0);
	CHECK(m->files[1].chunk_size == 256 && m->files[1].size > 512);
	for (size_t i = 0; i < m->nfiles; i++) {
		CHECK_EQ(verify_file(c.dfd, m, i, VERIFY_BYTES_FAST, err, sizeof(err)), 0);
		CHECK_EQ(verify_file(c.dfd, m, i, VERIFY_BYTES_AUDIT, err, sizeof(err)), 0);
	}
	CHECK_EQ(flip(c.dfd, "model/rank_00001.safetensors", 2 * 256 + 17), 0);
	CHECK_EQ(verify_file(c.dfd, m, 1, VERIFY_BYTES_NONE, err, sizeof(err)), 0);
	CHECK_EQ(verify_file(c.dfd, m, 1, VERIFY_BYTES_FAST, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "model/rank_00001.safetensors: crc32c of chunk 2 (bytes 512..767) "
		     "does not match the manifest"));
	CHECK_EQ(verify_file(c.dfd, m, 1, VERIFY_BYTES_AUDIT, err, sizeof(err)), -EBADMSG);
	CHECK_EQ(flip(c.dfd, "extra/rank_00001/rng", 0), 0);
	CHECK_EQ(verify_file(c.dfd, m, 4, VERIFY_BYTES_FAST, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "extra/rank_00001/rng: crc32c of chunk 0 (bytes 0.."));
	mfst_free(m);
	destroy(&c);

	CHECK_EQ(build(&c, &plain), 0);                 /* no chunk checksums */
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_STRUCTURE, 1, &m, err, sizeof(err)), 0);
	CHECK_EQ(verify_file(c.dfd, m, 1, VERIFY_BYTES_FAST, err, sizeof(err)), 0);
	CHECK_EQ(flip(c.dfd, "model/rank_00001.safetensors", 2 * 256 + 17), 0);
	CHECK_EQ(verify_file(c.dfd, m, 1, VERIFY_BYTES_FAST, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "model/rank_00001.safetensors: sha256 mismatch"));
	mfst_free(m);
	destroy(&c);
	return 0;
}

static int test_flipped_blob(void)
{
	struct ck c;
	char err[256] = "";

	CHECK_EQ(build(&c, &plain), 0);
	CHECK_EQ(flip(c.dfd, "extra/rank_00001/rng", 0), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_FULL, 3, NULL, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "extra/rank_00001/rng: sha256 mismatch"));
	destroy(&c);
	return 0;
}

static int test_truncated(void)
{
	struct ck c;
	char err[256] = "";
	struct stat st;

	CHECK_EQ(build(&c, &plain), 0);
	CHECK_EQ(fstatat(c.dfd, "optim/rank_00000.safetensors", &st, 0), 0);
	{
		int fd = openat(c.dfd, "optim/rank_00000.safetensors", O_WRONLY);
		CHECK(fd >= 0);
		CHECK_EQ(ftruncate(fd, st.st_size - 1), 0);
		close(fd);
	}
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_STRUCTURE, 1, NULL, err, sizeof(err)),
		 -EBADMSG);
	CHECK(strstr(err, "optim/rank_00000.safetensors: size mismatch"));
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_FULL, 2, NULL, err, sizeof(err)), -EBADMSG);
	destroy(&c);
	return 0;
}

static int test_missing(void)
{
	struct ck c;
	char err[256] = "";

	CHECK_EQ(build(&c, &plain), 0);
	CHECK_EQ(unlinkat(c.dfd, "model/rank_00000.safetensors", 0), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_STRUCTURE, 1, NULL, err, sizeof(err)),
		 -ENOENT);
	CHECK(strstr(err, "model/rank_00000.safetensors: missing"));
	CHECK_EQ(unlinkat(c.dfd, MFST_NAME, 0), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_FULL, 1, NULL, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, MFST_NAME));
	destroy(&c);
	return 0;
}

static int test_not_committed(void)
{
	const struct opts o = { "writing", 0, 0, 0 };
	struct ck c;
	char err[256] = "";

	CHECK_EQ(build(&c, &o), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_STRUCTURE, 1, NULL, err, sizeof(err)),
		 -EINVAL);
	CHECK(strstr(err, "status is 'writing', not 'committed'"));
	destroy(&c);
	return 0;
}

/* A symlink to an identical copy still must not be followed: the
 * checkpoint must be self-contained. */
static int test_symlink_shard(void)
{
	char copy[256], link[256], err[256] = "";
	struct ck c;

	CHECK_EQ(build(&c, &plain), 0);
	snprintf(copy, sizeof(copy), "%s/elsewhere.safetensors", c.root);
	snprintf(link, sizeof(link), "%s/model/rank_00001.safetensors", c.dir);
	CHECK_EQ(rename(link, copy), 0);
	CHECK_EQ(symlink(copy, link), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_STRUCTURE, 1, NULL, err, sizeof(err)),
		 -ELOOP);
	CHECK(strstr(err, "model/rank_00001.safetensors: is a symbolic link"));
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_FULL, 4, NULL, err, sizeof(err)), -ELOOP);
	destroy(&c);
	return 0;
}

/* Nor a symlinked directory on the way (plain O_NOFOLLOW misses this). */
static int test_symlink_dir(void)
{
	char from[256], to[256], err[256] = "";
	struct ck c;

	CHECK_EQ(build(&c, &plain), 0);
	snprintf(from, sizeof(from), "%s/optim", c.dir);
	snprintf(to, sizeof(to), "%s/optim_elsewhere", c.root);
	CHECK_EQ(rename(from, to), 0);
	CHECK_EQ(symlink(to, from), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_STRUCTURE, 1, NULL, err, sizeof(err)),
		 -ELOOP);
	CHECK(strstr(err, "optim/rank_00000.safetensors"));
	destroy(&c);
	return 0;
}

static int test_fifo_blob(void)
{
	struct ck c;
	char err[256] = "";

	CHECK_EQ(build(&c, &plain), 0);
	CHECK_EQ(unlinkat(c.dfd, "extra/rank_00000/rng", 0), 0);
	CHECK_EQ(mkfifoat(c.dfd, "extra/rank_00000/rng", 0600), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_FULL, 1, NULL, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "extra/rank_00000/rng: not a regular file"));
	destroy(&c);
	return 0;
}

static int test_extra_tensor(void)
{
	const struct opts o = { NULL, 1, 0, 0 };
	struct ck c;
	char err[256] = "";

	CHECK_EQ(build(&c, &o), 0);
	/* Sizes and hashes are right: only the header comparison sees it. */
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_STRUCTURE, 1, NULL, err, sizeof(err)), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_FULL, 2, NULL, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "model/rank_00000.safetensors: tensor 'scale' is in the header "
		     "but not in the manifest"));
	destroy(&c);
	return 0;
}

static int test_dtype_disagrees(void)
{
	const struct opts o = { NULL, 0, 1, 0 };
	struct ck c;
	char err[256] = "";

	CHECK_EQ(build(&c, &o), 0);
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_FULL, 1, NULL, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "tensor 'layer.weight' is F32 in the header, I32 in the manifest"));
	destroy(&c);
	return 0;
}

static int test_python_reads_shard(void)
{
	char cmd[512];
	const char *py = getenv("CKPT_PYTHON") ? getenv("CKPT_PYTHON") : "python3";
	struct ck c;
	int rc;

	snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", py);
	if (system(cmd) != 0 || access("tests/unit/check_safetensors.py", R_OK))
		SKIP("python3 or tests/unit/check_safetensors.py not available");
	CHECK_EQ(build(&c, &plain), 0);
	snprintf(cmd, sizeof(cmd), "%s tests/unit/check_safetensors.py "
		 "%s/model/rank_00000.safetensors %s/optim/rank_00000.safetensors "
		 ">/dev/null 2>&1", py, c.dir, c.dir);
	rc = system(cmd);
	destroy(&c);
	CHECK_EQ(rc, 0);
	return 0;
}

/* verify_structure_known: a manifest checked once is not parsed again while
 * its file is the same, but its files are still opened and sized every
 * time; a manifest written anew (or noted by the publish) is the new one. */
static int test_structure_known(void)
{
	struct mfst *m = NULL;
	struct ck c;
	char err[256] = "", rid[33] = "";
	uint64_t step = 0;
	unsigned long hits;
	struct stat st;

	CHECK_EQ(build(&c, &plain), 0);
	hits = verify_structure_hits();
	CHECK_EQ(verify_structure_known(c.dfd, &step, rid, err, sizeof(err)), 0);
	CHECK_EQ(step, 500);
	CHECK(strcmp(rid, "0123456789abcdef0123456789abcdef") == 0);
	CHECK_EQ(verify_structure_hits(), hits);          /* parsed */
	step = 0;
	CHECK_EQ(verify_structure_known(c.dfd, &step, rid, err, sizeof(err)), 0);
	CHECK_EQ(step, 500);
	CHECK_EQ(verify_structure_hits(), hits + 1);      /* remembered */

	/* a shard cut short is seen on a remembered manifest too */
	CHECK_EQ(fstatat(c.dfd, "optim/rank_00000.safetensors", &st, 0), 0);
	CHECK_EQ(truncate_at(c.dfd, "optim/rank_00000.safetensors", st.st_size - 1), 0);
	CHECK_EQ(verify_structure_known(c.dfd, &step, rid, err, sizeof(err)), -EBADMSG);
	CHECK(strstr(err, "optim/rank_00000.safetensors"));
	CHECK_EQ(verify_structure_hits(), hits + 2);
	CHECK_EQ(truncate_at(c.dfd, "optim/rank_00000.safetensors", st.st_size), 0);

	/* a manifest rewritten in place (same size) is read again */
	CHECK_EQ(verify_checkpoint(c.dfd, VERIFY_STRUCTURE, 1, &m, err, sizeof(err)), 0);
	strcpy(m->status, "prepared");
	CHECK_EQ(unlinkat(c.dfd, MFST_NAME, 0), 0);
	CHECK_EQ(mfst_write(c.dfd, m), 0);
	CHECK_EQ(verify_structure_known(c.dfd, &step, rid, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "not 'committed'"));
	CHECK_EQ(verify_structure_hits(), hits + 2);

	/* the publish notes what it wrote: the next check needs no parse */
	strcpy(m->status, "committed");
	m->step = 500;
	CHECK_EQ(unlinkat(c.dfd, MFST_NAME, 0), 0);
	CHECK_EQ(mfst_write(c.dfd, m), 0);
	verify_structure_note(c.dfd, m);
	CHECK_EQ(verify_structure_known(c.dfd, &step, rid, err, sizeof(err)), 0);
	CHECK_EQ(verify_structure_hits(), hits + 3);
	mfst_free(m);
	destroy(&c);
	return 0;
}

static const struct test tests[] = {
	{ "good", test_good },
	{ "flipped_byte", test_flipped_byte },
	{ "fast_check", test_fast_check },
	{ "flipped_blob", test_flipped_blob },
	{ "truncated", test_truncated },
	{ "missing", test_missing },
	{ "not_committed", test_not_committed },
	{ "symlink_shard", test_symlink_shard },
	{ "symlink_dir", test_symlink_dir },
	{ "fifo_blob", test_fifo_blob },
	{ "extra_tensor", test_extra_tensor },
	{ "dtype_disagrees", test_dtype_disagrees },
	{ "python_reads_shard", test_python_reads_shard },
	{ "structure_known", test_structure_known },
};

TEST_MAIN(tests)
