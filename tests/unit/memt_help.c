/* memt_help.c - see memt_help.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memt_help.h"
#include "mfst.h"
#include "shard_read.h"
#include "testhelp.h"

uint8_t content[FSIZE];

/* One rank's save of one file of FSIZE bytes, planned as plan.c does. */
void rsave_fake(struct rsave *rs, struct wfile *f, int rank)
{
	memset(rs, 0, sizeof(*rs));
	memset(f, 0, sizeof(*f));
	snprintf(f->path, sizeof(f->path), "model/rank_%05d.safetensors", rank);
	f->size = FSIZE;
	f->nchunks = (FSIZE + CHUNK - 1) / CHUNK;
	rs->files = f;
	rs->nfiles = 1;
	rs->rank = rank;
	rs->chunk_bytes = CHUNK;
	rs->memt_whole = 1;
}

/* ... with these bytes. */
static void fill_bytes(struct memt_cap *c, size_t fi, uint64_t skip, const uint8_t *bytes)
{
	for (uint64_t k = 0; k * CHUNK < FSIZE; k++) {
		size_t len = FSIZE - k * CHUNK < CHUNK ? FSIZE - k * CHUNK : CHUNK;
		if (k != skip)
			memt_cap_chunk(c, fi, k, bytes + k * CHUNK, len);
	}
	memt_cap_file_done(c, fi, &(struct digest){ DIGEST_SHA256, SHA });
}

void fill_file(struct memt_cap *c, size_t fi, uint64_t skip)
{
	fill_bytes(c, fi, skip, content);
}

void version(uint8_t *out, unsigned changed, uint8_t by)
{
	memcpy(out, content, FSIZE);
	for (uint64_t k = 0; k * CHUNK < FSIZE; k++)
		if (changed >> k & 1)
			out[k * CHUNK + 5] ^= by;
}

struct memt_cap *capture_bytes(struct memt *t, uint64_t step, int rank, const uint8_t *bytes)
{
	struct rsave rs;
	struct wfile f;
	char why[256];
	struct memt_cap *c;

	rsave_fake(&rs, &f, rank);
	rs.memt_whole = 0;
	if ((c = memt_cap_start(t, "j", step, TXID, &rs, why, sizeof(why))))
		fill_bytes(c, 0, UINT64_MAX, bytes);
	return c;
}

int save_bytes(struct memt *t, uint64_t step, const uint8_t *bytes)
{
	struct memt_cap *c = capture_bytes(t, step, 0, bytes);

	CHECK(c != NULL);
	memt_step_committed(t, "j", step);
	memt_cap_put(c);
	return 0;
}

struct memt_cap *capture(struct memt *t, const char *job, uint64_t step, int rank,
				uint64_t skip)
{
	struct rsave rs;
	struct wfile f;
	char why[256];
	struct memt_cap *c;

	rsave_fake(&rs, &f, rank);
	c = memt_cap_start(t, job, step, TXID, &rs, why, sizeof(why));
	if (c)
		fill_file(c, 0, skip);
	return c;
}

/* Step of job whose file is linked unstaged (a frozen shard): shared with
 * the job's committed step held, never filled. */
struct memt_cap *capture_shared(struct memt *t, const char *job, uint64_t step,
				       int rank, char *why, size_t whylen)
{
	struct rsave rs;
	struct wfile f;

	rsave_fake(&rs, &f, rank);
	f.linked = 1;
	f.nchunks = 0;                  /* (plan_drop_chunks) */
	f.digest = (struct digest){ DIGEST_SHA256, SHA };
	return memt_cap_start(t, job, step, TXID, &rs, why, whylen);
}

/* Step of job whose file turned out, as it was written, the same as in
 * the job's committed step held (memt_cap_same): laid out with its room,
 * shared, never filled.  NULL with why when the tier holds no such file. */
struct memt_cap *capture_same(struct memt *t, const char *job, uint64_t step,
				     int rank, char *why, size_t whylen)
{
	struct digest d = { DIGEST_SHA256, SHA };
	struct rsave rs;
	struct wfile f;
	struct memt_cap *c;

	rsave_fake(&rs, &f, rank);
	if (!(c = memt_cap_start(t, job, step, TXID, &rs, why, whylen)))
		return NULL;
	if (!memt_cap_may_share(c, 0, &d) || memt_cap_same(c, 0, &d) < 0) {
		snprintf(why, whylen, "not held");
		memt_step_failed(t, job, step);
		memt_cap_put(c);
		return NULL;
	}
	memt_cap_file_done(c, 0, &d);        /* (the writer's: nothing to do) */
	return c;
}

int held(struct memt *t)
{
	struct memt_usage u;

	memt_usage(t, &u);
	return (int)u.steps;
}

/* Read job's step's file at path whole: 0 when it is bytes. */
static int path_reads_as(struct memt *t, const char *job, uint64_t step, const char *path,
			 const uint8_t *bytes)
{
	struct mfst_file mf = { (char *)path, FSIZE, { DIGEST_SHA256, SHA }, 0, NULL, NULL };
	char why[256];
	uint8_t *a = calloc(1, FSIZE);
	struct shard_seg all = { 0, FSIZE, a, NULL, 0 };
	struct memt_step *s = memt_get(t, job, step, TXID, why, sizeof(why));
	int r = -ENOENT;

	if (s && a)
		r = memt_read(s, &mf, &all, 1, why, sizeof(why));
	if (r == 0 && memcmp(a, bytes, FSIZE))
		r = -EBADMSG;
	memt_put(s);
	free(a);
	return r;
}

int path_reads_back(struct memt *t, const char *job, uint64_t step, const char *path)
{
	return path_reads_as(t, job, step, path, content);
}

int reads_as(struct memt *t, uint64_t step, int rank, const uint8_t *bytes)
{
	char path[64];

	snprintf(path, sizeof(path), "model/rank_%05d.safetensors", rank);
	return path_reads_as(t, "j", step, path, bytes);
}

/* ... its rank's file. */
int reads_back(struct memt *t, const char *job, uint64_t step, int rank)
{
	char path[64];

	snprintf(path, sizeof(path), "model/rank_%05d.safetensors", rank);
	return path_reads_back(t, job, step, path);
}

/* What the tier holds apart from its spares. */
uint64_t held_bytes(struct memt *t)
{
	struct memt_usage u;

	memt_usage(t, &u);
	return u.held - u.spare;
}

void content_fill(void)
{
	for (size_t i = 0; i < FSIZE; i++)
		content[i] = (uint8_t)(i * 2246822519u >> 7);
}


/* Step of job with nfiles files gK/rank_00000.safetensors: those in
 * same (a bit mask) found unchanged as written, the others copied; then
 * committed.  0, or -1. */
struct memt_cap *capture_files(struct memt *t, uint64_t step, size_t nfiles, unsigned same)
{
	struct digest d = { DIGEST_SHA256, SHA };
	struct wfile f[8];
	struct rsave rs;
	struct memt_cap *c;
	char why[256];

	rsave_fake(&rs, &f[0], 0);
	for (size_t i = 0; i < nfiles; i++) {
		f[i] = f[0];
		snprintf(f[i].path, sizeof(f[i].path), "g%zu/rank_00000.safetensors", i);
	}
	rs.files = f;
	rs.nfiles = nfiles;
	if (!(c = memt_cap_start(t, "j", step, TXID, &rs, why, sizeof(why))))
		return NULL;
	for (size_t i = 0; i < nfiles; i++) {
		if (!(same >> i & 1)) {
			fill_file(c, i, UINT64_MAX);
		} else if (memt_cap_same(c, i, &d) < 0) {
			memt_step_failed(t, "j", step);
			memt_cap_put(c);
			return NULL;
		}
	}
	return c;
}

int save_files(struct memt *t, uint64_t step, size_t nfiles, unsigned same)
{
	struct memt_cap *c = capture_files(t, step, nfiles, same);

	CHECK(c != NULL);
	memt_step_committed(t, "j", step);
	memt_cap_put(c);
	return 0;
}

/* memt_each_file: every file once, with its bytes. */
int each(void *arg, const char *path, const uint8_t *data, uint64_t size,
		const struct digest *d)
{
	struct seen *x = arg;
	x->n++;
	x->ok += size == FSIZE && !memcmp(data, content, FSIZE) && !strcmp(d->hex, SHA) &&
		 !strncmp(path, "model/rank_0000", 15);
	return 0;
}


int files_read_back(struct memt *t, uint64_t step, int n)
{
	char path[64];

	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "g%d/rank_00000.safetensors", i);
		CHECK_EQ(path_reads_back(t, "j", step, path), 0);
	}
	return 0;
}
