/* test_memt.c - the memory tier (daemon/memt.c, memt_fd.c): a captured
 * step reads back exactly the wanted byte ranges once committed; one copy
 * per job (the newest), within the budget, older ones making room; failed,
 * refused and incomplete captures are not kept; a changed byte is caught by
 * the checksum (the manifest's chunk CRC32Cs where it has them, the tier's
 * own block sums otherwise); a reader keeps a dropped copy alive until it lets go; the
 * copies go to systemd's fd store and come back from it; a partner node's
 * copy (memt_peer.c) is described, filled and kept like a capture; memory
 * made ahead of a job's saves (memt_spare.c) serves its captures. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "csum.h"
#include "memt.h"
#include "mfst.h"
#include "rsave.h"
#include "shard_read.h"
#include "testhelp.h"

#define CHUNK   (64u << 10)
#define FSIZE   (3 * CHUNK + 777)        /* a partial last chunk */
#define TXID    "0123456789abcdef0123456789abcdef"
#define SHA     "aa00000000000000000000000000000000000000000000000000000000000000"

static uint8_t content[FSIZE];

/* One rank's save of one file of FSIZE bytes, planned as plan.c does. */
static void rsave_fake(struct rsave *rs, struct wfile *f, int rank)
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
}

/* Capture every chunk as the writer does; skip: leave chunk `skip` out. */
static void fill(struct memt_cap *c, uint64_t skip)
{
	for (uint64_t k = 0; k * CHUNK < FSIZE; k++) {
		size_t len = FSIZE - k * CHUNK < CHUNK ? FSIZE - k * CHUNK : CHUNK;
		if (k != skip)
			memt_cap_chunk(c, 0, k, content + k * CHUNK, len);
	}
	memt_cap_file_done(c, 0, &(struct digest){ DIGEST_SHA256, SHA });
}

static struct memt_cap *capture(struct memt *t, const char *job, uint64_t step, int rank,
				uint64_t skip)
{
	struct rsave rs;
	struct wfile f;
	char why[256];
	struct memt_cap *c;

	rsave_fake(&rs, &f, rank);
	c = memt_cap_start(t, job, step, TXID, &rs, why, sizeof(why));
	if (c)
		fill(c, skip);
	return c;
}

/* Step of job whose file is linked unstaged (a frozen shard): shared with
 * the job's committed step held, never filled. */
static struct memt_cap *capture_shared(struct memt *t, const char *job, uint64_t step,
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
static struct memt_cap *capture_same(struct memt *t, const char *job, uint64_t step,
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

/* Which way the tests that run both share a file: linked unstaged
 * (capture_shared), or found unchanged as written (capture_same). */
static int found_same;

static struct memt_cap *capture_sharing(struct memt *t, const char *job, uint64_t step,
					int rank, char *why, size_t whylen)
{
	return (found_same ? capture_same : capture_shared)(t, job, step, rank, why, whylen);
}

static int held(struct memt *t)
{
	struct memt_usage u;

	memt_usage(t, &u);
	return (int)u.steps;
}

/* Read job's step's file at path whole: 0 when it is content. */
static int path_reads_back(struct memt *t, const char *job, uint64_t step, const char *path)
{
	struct mfst_file mf = { (char *)path, FSIZE, { DIGEST_SHA256, SHA }, 0, NULL, NULL };
	char why[256];
	uint8_t *a = calloc(1, FSIZE);
	struct shard_seg all = { 0, FSIZE, a, NULL, 0 };
	struct memt_step *s = memt_get(t, job, step, TXID, why, sizeof(why));
	int r = -ENOENT;

	if (s && a)
		r = memt_read(s, &mf, &all, 1, why, sizeof(why));
	if (r == 0 && memcmp(a, content, FSIZE))
		r = -EBADMSG;
	memt_put(s);
	free(a);
	return r;
}

/* ... its rank's file. */
static int reads_back(struct memt *t, const char *job, uint64_t step, int rank)
{
	char path[64];

	snprintf(path, sizeof(path), "model/rank_%05d.safetensors", rank);
	return path_reads_back(t, job, step, path);
}

/* What the tier holds apart from its spares. */
static uint64_t held_bytes(struct memt *t)
{
	struct memt_usage u;

	memt_usage(t, &u);
	return u.held - u.spare;
}

static int test_roundtrip(void)
{
	struct memt *t;
	struct memt_cap *c;
	struct memt_step *s;
	struct mfst_file mf = { "model/rank_00000.safetensors", FSIZE, { DIGEST_SHA256, SHA }, 0, NULL, NULL };
	uint8_t *a = calloc(1, FSIZE), *b = calloc(1, FSIZE);
	/* two ranges: inside the first chunk, and across chunks 1..3 */
	struct shard_seg segs[2] = { { 10, 1000, a, NULL, 0 },
				     { CHUNK - 5, FSIZE, b, NULL, 0 } };
	char why[256], msg[256];

	for (size_t i = 0; i < FSIZE; i++)
		content[i] = (uint8_t)(i * 2654435761u >> 11);
	CHECK_EQ(memt_new(1 << 20, 0, &t), 0);
	CHECK((c = capture(t, "j", 5, 0, UINT64_MAX)) != NULL);
	CHECK(memt_get(t, "j", 5, TXID, why, sizeof(why)) == NULL);   /* not committed */
	memt_step_committed(t, "j", 5);
	memt_cap_put(c);
	CHECK_EQ(held(t), 1);
	CHECK(memt_get(t, "j", 5, "ffffffffffffffffffffffffffffffff", why, sizeof(why)) == NULL);
	CHECK(strstr(why, "another save") != NULL);
	CHECK((s = memt_get(t, "j", 5, TXID, why, sizeof(why))) != NULL);
	CHECK_EQ(memt_read(s, &mf, segs, 2, msg, sizeof(msg)), 0);
	CHECK(!memcmp(a, content + 10, 990));
	CHECK(!memcmp(b, content + CHUNK - 5, FSIZE - (CHUNK - 5)));
	/* another file, or the same path with other contents: not held */
	mf.path = "model/rank_00001.safetensors";
	CHECK_EQ(memt_read(s, &mf, segs, 1, msg, sizeof(msg)), -ENOENT);
	mf.path = "model/rank_00000.safetensors";
	mf.digest.hex[0] = 'b';
	CHECK_EQ(memt_read(s, &mf, segs, 1, msg, sizeof(msg)), -ENOENT);
	memt_put(s);
	memt_free(t);
	free(a);
	free(b);
	return 0;
}

static int test_budget(void)
{
	struct memt *t;
	struct memt_cap *c, *d;
	struct memt_step *s;
	char why[256];
	struct memt_usage u;

	/* room for two captures, not three */
	CHECK_EQ(memt_new(2 * (FSIZE + 4096), 0, &t), 0);
	CHECK((c = capture(t, "j", 1, 0, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 1);
	memt_cap_put(c);
	CHECK((c = capture(t, "k", 1, 0, UINT64_MAX)) != NULL);   /* another job */
	memt_step_committed(t, "k", 1);
	memt_cap_put(c);
	CHECK_EQ(held(t), 2);
	/* j's step 2 fits only by dropping j's step 1, never k's; a reader of
	 * j's step 1 keeps its memory (counted) until it lets go */
	CHECK((s = memt_get(t, "j", 1, TXID, why, sizeof(why))) != NULL);
	CHECK(capture(t, "j", 2, 0, UINT64_MAX) == NULL);
	memt_put(s);
	CHECK((c = capture(t, "j", 3, 0, UINT64_MAX)) != NULL);
	CHECK(memt_get(t, "j", 1, TXID, why, sizeof(why)) == NULL);
	CHECK((s = memt_get(t, "k", 1, TXID, why, sizeof(why))) != NULL);
	memt_put(s);
	/* the refusal of step 2 is what a restore of it is told */
	CHECK(memt_get(t, "j", 2, TXID, why, sizeof(why)) == NULL);
	CHECK(strstr(why, "do not fit memory_tier_bytes") != NULL);
	/* a second rank of step 3 does not fit: step 3 keeps the first rank */
	CHECK((d = capture(t, "j", 3, 1, UINT64_MAX)) == NULL);
	memt_step_committed(t, "j", 3);
	memt_cap_put(c);
	CHECK((s = memt_get(t, "j", 3, TXID, why, sizeof(why))) != NULL);
	memt_put(s);
	memt_usage(t, &u);
	CHECK_EQ(u.steps, 2);
	CHECK_EQ(u.held, 2 * ((FSIZE + 4095) & ~4095ull));
	memt_free(t);
	return 0;
}

#define CAPLEN ((FSIZE + 4095) & ~4095ull)   /* one capture's memory */

/* Capture step 1 of job j (rank 0), commit it and read it back whole:
 * the memory it took (a spare or new) really holds the bytes. */
static int capture_reads_back(struct memt *t, const char *job)
{
	struct mfst_file mf = { "model/rank_00000.safetensors", FSIZE, { DIGEST_SHA256, SHA }, 0, NULL, NULL };
	uint8_t *a = calloc(1, FSIZE);
	struct shard_seg all = { 0, FSIZE, a, NULL, 0 };
	struct memt_cap *c;
	struct memt_step *s;
	char why[256];
	int ok;

	for (size_t i = 0; i < FSIZE; i++)
		content[i] = (uint8_t)(i * 2246822519u >> 7);
	if (!a || !(c = capture(t, job, 1, 0, UINT64_MAX))) {
		free(a);
		return 0;
	}
	memt_step_committed(t, job, 1);
	memt_cap_put(c);
	s = memt_get(t, job, 1, TXID, why, sizeof(why));
	ok = s && memt_read(s, &mf, &all, 1, why, sizeof(why)) == 0 && !memcmp(a, content, FSIZE);
	memt_put(s);
	free(a);
	return ok;
}

static int test_reserve(void)
{
	struct memt *t;
	struct memt_cap *c;
	struct memt_usage u;

	/* memory for a rank's two captures made ahead; asked again (a
	 * restarted trainer) it already has them; another rank gets what
	 * the budget still allows */
	CHECK_EQ(memt_new(3 * CAPLEN + 4096, 0, &t), 0);
	CHECK_EQ(memt_reserve(t, "j", 0, CAPLEN, 2), 2);
	memt_usage(t, &u);
	CHECK_EQ(u.spare, 2 * CAPLEN);
	CHECK_EQ(u.held, 2 * CAPLEN);
	CHECK_EQ(u.reserving, 0);
	CHECK_EQ(memt_reserve(t, "j", 0, CAPLEN, 2), 0);
	CHECK_EQ(memt_reserve(t, "j", 1, CAPLEN, 2), 1);
	CHECK_EQ(memt_reserve(t, "k", 0, CAPLEN, 1), -ENOSPC);     /* full */
	memt_usage(t, &u);
	CHECK_EQ(u.spare, 3 * CAPLEN);
	/* a layout that changed gives its memory back */
	memt_unreserve(t, "j", 1, CAPLEN, 2);
	memt_usage(t, &u);
	CHECK_EQ(u.spare, 2 * CAPLEN);
	/* a capture takes one: the same memory, counted once from the
	 * start (what the tier holds never passes its budget); dropped, it
	 * gives it back */
	{
		struct rsave rs;
		struct wfile f;
		char why[256];
		rsave_fake(&rs, &f, 0);
		CHECK((c = memt_cap_start(t, "j", 1, TXID, &rs, why, sizeof(why))) != NULL);
		memt_usage(t, &u);
		CHECK_EQ(u.held, 2 * CAPLEN);
		CHECK_EQ(u.spare, CAPLEN);
		memt_step_failed(t, "j", 1);
		memt_cap_put(c);
		memt_usage(t, &u);
		CHECK_EQ(u.held, 2 * CAPLEN);
		CHECK_EQ(u.spare, 2 * CAPLEN);
	}
	CHECK(capture_reads_back(t, "j"));
	memt_usage(t, &u);
	CHECK_EQ(u.spare, CAPLEN);
	CHECK_EQ(u.held, 2 * CAPLEN);
	/* the committed copy and the spare are rank 0's two: none made */
	CHECK_EQ(memt_reserve(t, "j", 0, CAPLEN, 2), 0);
	/* the job's last rank left: its spare goes, its copy stays */
	memt_release_job(t, "j");
	memt_usage(t, &u);
	CHECK_EQ(u.spare, 0);
	CHECK_EQ(u.held, CAPLEN);
	CHECK_EQ(u.steps, 1);
	memt_free(t);

	/* a spare a page larger or smaller (a blob put after it was made)
	 * serves, resized; one far larger is left for its own size */
	for (int d = -1; d <= 1; d += 2) {
		CHECK_EQ(memt_new(16 * CAPLEN, 0, &t), 0);
		CHECK_EQ(memt_reserve(t, "j", 0, CAPLEN + (uint64_t)((int64_t)d * 4096), 1), 1);
		CHECK(capture_reads_back(t, "j"));
		memt_usage(t, &u);
		CHECK_EQ(u.spare, 0);
		CHECK_EQ(u.held, CAPLEN);
		memt_free(t);
	}
	CHECK_EQ(memt_new(32 * CAPLEN, 0, &t), 0);
	CHECK_EQ(memt_reserve(t, "k", 0, 8 * CAPLEN, 1), 1);
	CHECK(capture_reads_back(t, "j"));
	memt_usage(t, &u);
	CHECK_EQ(u.spare, 8 * CAPLEN);
	CHECK_EQ(u.held, 9 * CAPLEN);
	memt_free(t);
	/* the rank's own spares of another size stay at its capture (a save
	 * that shares its frozen shards and one that copies them alternate),
	 * until its layout changes (prep.c: memt_unreserve) */
	CHECK_EQ(memt_new(32 * CAPLEN, 0, &t), 0);
	CHECK_EQ(memt_reserve(t, "j", 0, 8 * CAPLEN, 2), 2);
	CHECK_EQ(memt_reserve(t, "k", 0, 8 * CAPLEN, 1), 1);
	CHECK(capture_reads_back(t, "j"));
	memt_usage(t, &u);
	CHECK_EQ(u.spare, 24 * CAPLEN);
	CHECK_EQ(u.held, 25 * CAPLEN);
	memt_unreserve(t, "j", 0, 8 * CAPLEN, 2);
	memt_usage(t, &u);
	CHECK_EQ(u.spare, 8 * CAPLEN);             /* k's */
	CHECK_EQ(u.held, 9 * CAPLEN);
	memt_free(t);

	/* spares of another size over the budget stop counting when a
	 * capture needs the room (freed by its writer), not after */
	CHECK_EQ(memt_new(8 * CAPLEN + CAPLEN / 2, 0, &t), 0);
	CHECK_EQ(memt_reserve(t, "k", 0, 8 * CAPLEN, 1), 1);
	CHECK((c = capture(t, "j", 1, 0, UINT64_MAX)) != NULL);
	memt_usage(t, &u);
	CHECK_EQ(u.held, CAPLEN);
	CHECK_EQ(u.spare, 0);
	memt_step_committed(t, "j", 1);
	memt_cap_put(c);
	memt_usage(t, &u);
	CHECK_EQ(u.held, CAPLEN);
	CHECK_EQ(u.steps, 1);
	memt_free(t);
	/* the tier off: nothing made */
	CHECK_EQ(memt_new(0, 0, &t), 0);
	CHECK_EQ(memt_reserve(t, "j", 0, CAPLEN, 2), 0);
	memt_free(t);
	return 0;
}

static int test_not_kept(void)
{
	struct memt *t;
	struct memt_cap *c, *d;
	struct memt_step *s;
	char why[256];
	struct memt_usage u;

	CHECK_EQ(memt_new(1 << 20, 0, &t), 0);
	/* a failed step */
	CHECK((c = capture(t, "j", 1, 0, UINT64_MAX)) != NULL);
	memt_step_failed(t, "j", 1);
	memt_cap_put(c);
	/* a capture that missed a chunk: the step commits, memory is not kept */
	CHECK((c = capture(t, "j", 2, 0, 1)) != NULL);
	memt_step_committed(t, "j", 2);
	memt_cap_put(c);
	CHECK(memt_get(t, "j", 2, TXID, why, sizeof(why)) == NULL);
	CHECK(strstr(why, "was not captured whole") != NULL);
	/* a rank save refused before its step ended gives its capture back */
	CHECK((c = capture(t, "j", 3, 0, UINT64_MAX)) != NULL);
	CHECK((d = capture(t, "j", 3, 1, UINT64_MAX)) != NULL);
	memt_cap_put(d);
	memt_step_committed(t, "j", 3);
	memt_cap_put(c);
	memt_usage(t, &u);
	CHECK_EQ(u.steps, 1);
	/* held: the copy, and the refused rank's memory kept for the next save */
	CHECK_EQ(u.held, 2 * ((FSIZE + 4095) & ~4095ull));
	/* an older step committing late does not replace the newer copy */
	CHECK((c = capture(t, "j", 2, 0, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 2);
	memt_cap_put(c);
	CHECK((s = memt_get(t, "j", 3, TXID, why, sizeof(why))) != NULL);
	memt_put(s);
	CHECK(memt_get(t, "j", 2, TXID, why, sizeof(why)) == NULL);
	memt_usage(t, &u);
	CHECK_EQ(u.held, 2 * ((FSIZE + 4095) & ~4095ull));
	memt_free(t);
	/* off: nothing is captured, and a restore is told so */
	CHECK_EQ(memt_new(0, 0, &t), 0);
	CHECK(capture(t, "j", 1, 0, UINT64_MAX) == NULL);
	CHECK(memt_get(t, "j", 1, TXID, why, sizeof(why)) == NULL);
	CHECK(strstr(why, "off") != NULL);
	memt_free(t);
	return 0;
}

/* The capture's memory in this process (its mapping is named). */
static uint8_t *memt_mapping(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	unsigned long lo = 0;

	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "ckpt-memt") && sscanf(line, "%lx-", &lo) == 1)
			break;
	if (f)
		fclose(f);
	return (uint8_t *)lo;
}

/* A byte changed in memory after the capture: the checksum of its block
 * catches it; blocks not read are not checked. */
static int test_changed(void)
{
	struct memt *t;
	struct memt_cap *c;
	struct memt_step *s;
	struct mfst_file mf = { "model/rank_00000.safetensors", FSIZE, { DIGEST_SHA256, SHA }, 0, NULL, NULL };
	uint8_t *a = calloc(1, FSIZE), *map;
	struct shard_seg first = { 0, 100, a, NULL, 0 }, last = { 2 * CHUNK + 1, FSIZE, a, NULL, 0 };
	char why[256], msg[256];

	CHECK_EQ(memt_new(1 << 20, 0, &t), 0);
	CHECK((c = capture(t, "j", 1, 0, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 1);
	memt_cap_put(c);
	CHECK((map = memt_mapping()) != NULL);
	CHECK_EQ(map[2 * CHUNK + 9], content[2 * CHUNK + 9]);
	map[2 * CHUNK + 9] ^= 1;
	CHECK((s = memt_get(t, "j", 1, TXID, why, sizeof(why))) != NULL);
	CHECK_EQ(memt_read(s, &mf, &first, 1, msg, sizeof(msg)), 0);
	CHECK(!memcmp(a, content, 100));
	CHECK_EQ(memt_read(s, &mf, &last, 1, msg, sizeof(msg)), -EBADMSG);
	CHECK(strstr(msg, "the memory copy of model/rank_00000.safetensors changed") != NULL);
	memt_put(s);
	memt_free(t);
	CHECK(memt_mapping() == NULL);           /* freed: unmapped */
	free(a);
	return 0;
}

/* With the manifest's chunk CRC32Cs (chunks of 16 KiB, not the tier's 64
 * KiB blocks): ranges with gaps read exactly, nothing outside them
 * written; a byte changed in a gap of a chunk a range touches is caught,
 * one in a chunk nothing touches is not read. */
static int test_manifest_crc(void)
{
	const uint64_t cs = 16u << 10;
	struct mfst_file mf = { "model/rank_00000.safetensors", FSIZE, { DIGEST_SHA256, SHA }, cs, NULL, NULL };
	struct shard_seg segs[3];
	struct csum_stream st;
	struct memt *t;
	struct memt_cap *c;
	struct memt_step *s;
	uint8_t *a = malloc(FSIZE), *map;
	char why[256], msg[256];

	CHECK(a);
	memset(a, 0xee, FSIZE);
	CHECK_EQ(csum_stream_init(&st, cs, FSIZE), 0);
	csum_stream_update(&st, content, FSIZE);
	CHECK_EQ(csum_stream_finish(&st, &mf.crc32c), 0);
	/* chunk 0 partly, chunks 1..4 with a gap in chunk 2, the last byte */
	segs[0] = (struct shard_seg){ 100, 200, a + 100, NULL, 0 };
	segs[1] = (struct shard_seg){ cs - 3, 2 * cs + 50, a + cs - 3, NULL, 0 };
	segs[2] = (struct shard_seg){ 2 * cs + 9000, FSIZE, a + 2 * cs + 9000, NULL, 0 };
	CHECK_EQ(memt_new(1 << 20, 0, &t), 0);
	CHECK((c = capture(t, "j", 3, 0, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 3);
	memt_cap_put(c);
	CHECK((s = memt_get(t, "j", 3, TXID, why, sizeof(why))) != NULL);
	CHECK_EQ(memt_read(s, &mf, segs, 3, msg, sizeof(msg)), 0);
	for (size_t i = 0; i < FSIZE; i++) {
		int wanted = (i >= 100 && i < 200) || (i >= cs - 3 && i < 2 * cs + 50) ||
			     i >= 2 * cs + 9000;
		CHECK_EQ(a[i], wanted ? content[i] : 0xee);
	}
	CHECK((map = memt_mapping()) != NULL);
	map[2 * cs + 5000] ^= 4;                /* in the gap of chunk 2 */
	CHECK_EQ(memt_read(s, &mf, segs, 3, msg, sizeof(msg)), -EBADMSG);
	CHECK(strstr(msg, "the memory copy of model/rank_00000.safetensors changed (bytes "
		     "32768..49152 do not match their CRC32C in the manifest)") != NULL);
	map[2 * cs + 5000] ^= 4;
	map[5 * cs + 1] ^= 4;                   /* chunk 5: no range touches it */
	CHECK_EQ(memt_read(s, &mf, segs, 2, msg, sizeof(msg)), 0);
	memt_put(s);
	memt_free(t);
	free(mf.crc32c);
	free(a);
	return 0;
}

/* The fd store (memt_fd.c): a committed copy is handed over with its
 * description (FDSTORE=1 + SCM_RIGHTS), and a new tier takes it back from
 * $LISTEN_FDS and reads it; a memfd without a description and an fd not
 * named by ckptd are closed and taken out of the store. */
static int recv_notice(int s, char *buf, size_t len, int *fd)
{
	union { char b[CMSG_SPACE(sizeof(int))]; struct cmsghdr a; } u;
	struct iovec iov = { buf, len - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			     .msg_controllen = sizeof(u.b) };
	struct cmsghdr *cm;
	ssize_t n = recvmsg(s, &mh, MSG_DONTWAIT);

	*fd = -1;
	if (n < 0)
		return -1;
	buf[n] = '\0';
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(cm), sizeof(int));
	return 0;
}

/* A socket standing in for systemd's notify socket ($NOTIFY_SOCKET set),
 * at an fd clear of 3..5 (given back fds go there). */
static int store_open(struct sockaddr_un *sa)
{
	int ns;

	snprintf(sa->sun_path, sizeof(sa->sun_path), "/tmp/test_memt.%d.sock", (int)getpid());
	unlink(sa->sun_path);
	ns = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (ns < 0 || bind(ns, (struct sockaddr *)sa, sizeof(*sa)) < 0)
		return -1;
	setenv("NOTIFY_SOCKET", sa->sun_path, 1);
	return fcntl(ns, F_DUPFD_CLOEXEC, 100);
}

static void store_close(int ns, const struct sockaddr_un *sa)
{
	unsetenv("NOTIFY_SOCKET");
	close(ns);
	unlink(sa->sun_path);
}

static int test_fd_store(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	struct memt_cap *c;
	struct memt_step *s;
	struct mfst_file mf = { "model/rank_00003.safetensors", FSIZE, { DIGEST_SHA256, SHA }, 0, NULL, NULL };
	struct shard_seg all;
	uint8_t *a = calloc(1, FSIZE);
	char buf[512], why[256], env[32];
	int ns, fd, junk;
	struct memt_usage u;

	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(memt_new(1 << 20, 0, &t), 0);
	CHECK((c = capture(t, "j", 7, 3, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 7);
	memt_cap_put(c);
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &fd), 0);
	CHECK(!strcmp(buf, "FDSTORE=1\nFDNAME=memt.j.7.3"));
	CHECK(fd >= 0 && (fd = fcntl(fd, F_DUPFD_CLOEXEC, 100)) >= 100);
	memt_free(t);                     /* exit: the store keeps it */
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);

	/* the next start: ours at 3, a bare memfd at 4, a stranger at 5 */
	junk = memfd_create("junk", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	CHECK(junk >= 0 && ftruncate(junk, 8192) == 0);
	CHECK(dup2(fd, 3) == 3 && dup2(junk, 4) == 4 && dup2(junk, 5) == 5);
	close(fd);
	close(junk);
	snprintf(env, sizeof(env), "%d", (int)getpid());
	setenv("LISTEN_PID", env, 1);
	setenv("LISTEN_FDS", "3", 1);
	setenv("LISTEN_FDNAMES", "memt.j.7.3:memt.x.1.0:other", 1);
	CHECK_EQ(memt_new(1 << 20, 0, &t), 0);
	memt_fd_take_back(t);
	CHECK(getenv("LISTEN_FDS") == NULL);
	CHECK_EQ(fcntl(4, F_GETFD), -1);        /* closed */
	CHECK_EQ(fcntl(5, F_GETFD), -1);
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &junk), 0);
	CHECK(!strcmp(buf, "FDSTOREREMOVE=1\nFDNAME=memt.x.1.0"));
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &junk), 0);
	CHECK(!strcmp(buf, "FDSTOREREMOVE=1\nFDNAME=other"));
	memt_usage(t, &u);
	CHECK_EQ(u.steps, 1);
	CHECK((s = memt_get(t, "j", 7, TXID, why, sizeof(why))) != NULL);
	all = (struct shard_seg){ 0, FSIZE, a, NULL, 0 };
	CHECK_EQ(memt_read(s, &mf, &all, 1, why, sizeof(why)), 0);
	CHECK(!memcmp(a, content, FSIZE));
	memt_put(s);
	/* a newer step of the job replaces it, in the store too */
	CHECK((c = capture(t, "j", 8, 3, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 8);
	memt_cap_put(c);
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &junk), 0);
	CHECK(!strcmp(buf, "FDSTOREREMOVE=1\nFDNAME=memt.j.7.3"));
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &fd), 0);
	CHECK(!strcmp(buf, "FDSTORE=1\nFDNAME=memt.j.8.3"));
	close(fd);
	memt_free(t);
	store_close(ns, &sa);
	free(a);
	return 0;
}

/* The next start of ckptd under systemd: fds[] (n of them, named) given
 * back at 3.. */
static void start_with(const int *fds, int n, const char *names)
{
	char env[32];

	for (int i = 0; i < n; i++)
		if (dup2(fds[i], 3 + i) == 3 + i)
			close(fds[i]);
	snprintf(env, sizeof(env), "%d", (int)getpid());
	setenv("LISTEN_PID", env, 1);
	snprintf(env, sizeof(env), "%d", n);
	setenv("LISTEN_FDS", env, 1);
	setenv("LISTEN_FDNAMES", names, 1);
}

/* Job j's step 1 (rank 0) captured and committed in a new tier *t: the
 * memfd it handed to the store (ns) in *fd.  0, or 1 (a check failed). */
static int stored_step1(int ns, struct memt **t, int *fd)
{
	struct memt_cap *c;
	char buf[512];

	CHECK_EQ(memt_new(4 << 20, 0, t), 0);
	CHECK((c = capture(*t, "j", 1, 0, UINT64_MAX)) != NULL);
	memt_step_committed(*t, "j", 1);
	memt_cap_put(c);
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), fd), 0);
	CHECK(!strcmp(buf, "FDSTORE=1\nFDNAME=memt.j.1.0"));
	return 0;
}

/* The next two notices take steps 1 and 2 out of the store, in any
 * order.  0, or 1. */
static int removed_1_and_2(int ns)
{
	char buf[512];
	int junk, removed = 0;

	for (int i = 0; i < 2; i++) {
		CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &junk), 0);
		removed += !strcmp(buf, "FDSTOREREMOVE=1\nFDNAME=memt.j.1.0") ||
			   !strcmp(buf, "FDSTOREREMOVE=1\nFDNAME=memt.j.2.0");
	}
	CHECK_EQ(removed, 2);
	return 0;
}

/* A step that shares a file with an older one goes to the store with it,
 * and the older step stays there while shared; both come back whatever
 * their order, the newer one readable; once nothing shares it, the older
 * one leaves the store. */
static int test_fd_store_shared(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	struct memt_cap *c;
	char buf[512], why[256];
	int ns, fd[2], junk;

	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(stored_step1(ns, &t, &fd[1]), 0);
	CHECK((c = capture_sharing(t, "j", 2, 0, why, sizeof(why))) != NULL);
	memt_step_committed(t, "j", 2);
	memt_cap_put(c);
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &fd[0]), 0);   /* 1 stays */
	CHECK(!strcmp(buf, "FDSTORE=1\nFDNAME=memt.j.2.0"));
	CHECK(fd[0] >= 0 && (fd[0] = fcntl(fd[0], F_DUPFD_CLOEXEC, 100)) >= 100);
	CHECK(fd[1] >= 0 && (fd[1] = fcntl(fd[1], F_DUPFD_CLOEXEC, 100)) >= 100);
	memt_free(t);
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);

	/* the newer one first */
	start_with(fd, 2, "memt.j.2.0:memt.j.1.0");
	CHECK_EQ(memt_new(4 << 20, 0, &t), 0);
	memt_fd_take_back(t);
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);      /* none dropped */
	CHECK_EQ(held(t), 1);
	CHECK_EQ(held_bytes(t), CAPLEN);
	CHECK_EQ(reads_back(t, "j", 2, 0), 0);
	CHECK((c = capture(t, "j", 3, 0, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 3);
	memt_cap_put(c);
	CHECK_EQ(removed_1_and_2(ns), 0);
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &junk), 0);
	CHECK(!strcmp(buf, "FDSTORE=1\nFDNAME=memt.j.3.0"));
	close(junk);
	memt_free(t);
	store_close(ns, &sa);
	return 0;
}

static int each(void *arg, const char *path, const uint8_t *data, uint64_t size,
		const struct digest *d);
struct seen { int n; int ok; };

/* A file linked unstaged (a frozen shard) is shared with the step held,
 * not copied: one copy of its bytes across steps, counted once, kept
 * while shared (its step gone: an orphan), let go with the last step or
 * reader that shares it; not shared when it is not held as it is. */
static int test_shared(void)
{
	struct memt *t;
	struct memt_cap *c;
	struct memt_step *s;
	struct seen x = { 0, 0 };
	struct digest other = { DIGEST_SHA256, SHA };
	char why[256];

	CHECK_EQ(memt_new(CAPLEN + CAPLEN / 2, 0, &t), 0);
	CHECK(capture_shared(t, "j", 1, 0, why, sizeof(why)) == NULL);   /* nothing held */
	CHECK(strstr(why, "no longer in memory") != NULL);
	CHECK_EQ(memt_can_share(t, "j", "model/rank_00000.safetensors", FSIZE, &other, CHUNK), 0);
	CHECK((c = capture(t, "j", 1, 0, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 1);
	memt_cap_put(c);
	CHECK_EQ(memt_can_share(t, "j", "model/rank_00000.safetensors", FSIZE, &other, CHUNK), 1);
	CHECK_EQ(memt_can_share(NULL, "j", "x", 1, &other, CHUNK), 1);    /* tier off */
	CHECK_EQ(memt_can_share(t, "j", "model/rank_00000.safetensors", FSIZE, &other,
				2 * CHUNK), 0);
	CHECK_EQ(memt_can_share(t, "k", "model/rank_00000.safetensors", FSIZE, &other, CHUNK), 0);
	other.hex[0] = 'b';
	CHECK_EQ(memt_can_share(t, "j", "model/rank_00000.safetensors", FSIZE, &other, CHUNK), 0);

	/* steps 2 and 3 share step 1's bytes: the budget holds 1.5 copies */
	for (uint64_t step = 2; step <= 3; step++) {
		CHECK((c = capture_shared(t, "j", step, 0, why, sizeof(why))) != NULL);
		CHECK_EQ(memt_cap_ready(c, why, sizeof(why)), 0);
		CHECK(memt_cap_shares(c));
		memt_step_committed(t, "j", step);
		memt_cap_put(c);
		CHECK_EQ(held(t), 1);
		CHECK_EQ(held_bytes(t), CAPLEN);
		CHECK_EQ(reads_back(t, "j", step, 0), 0);
		CHECK(memt_get(t, "j", step - 1, TXID, why, sizeof(why)) == NULL);
	}
	CHECK((s = memt_get(t, "j", 3, TXID, why, sizeof(why))) != NULL);
	CHECK_EQ(memt_each_file(s, each, &x), 0);
	CHECK(x.n == 1 && x.ok == 1);
	/* a reader of step 3 keeps the shared bytes while step 4 (its own
	 * copy) needs room: step 4 does not fit until it lets go */
	CHECK(capture(t, "j", 4, 0, UINT64_MAX) == NULL);
	memt_put(s);
	CHECK((c = capture(t, "j", 4, 0, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 4);
	memt_cap_put(c);
	CHECK_EQ(held_bytes(t), CAPLEN);
	CHECK_EQ(reads_back(t, "j", 4, 0), 0);
	/* a step that shares, then fails: step 4 stays, alone */
	CHECK((c = capture_shared(t, "j", 5, 0, why, sizeof(why))) != NULL);
	memt_step_failed(t, "j", 5);
	memt_cap_put(c);
	CHECK_EQ(held(t), 1);
	CHECK_EQ(held_bytes(t), CAPLEN);
	CHECK_EQ(reads_back(t, "j", 4, 0), 0);
	memt_free(t);
	return 0;
}

/* After a restart with a smaller budget: a step that shares a file with
 * an older one and does not fit goes, and so does the older one (taken
 * back for it alone: the job's newest step is the one kept). */
static int test_fd_store_shared_unfit(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	struct memt_cap *c;
	struct rsave rs;
	struct wfile f[2];
	char buf[512], why[256];
	int ns, fd[2];

	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(stored_step1(ns, &t, &fd[1]), 0);
	/* step 2: step 1's file shared, and a file of its own */
	rsave_fake(&rs, &f[0], 0);
	f[0].linked = 1;
	f[0].nchunks = 0;
	f[0].digest = (struct digest){ DIGEST_SHA256, SHA };
	f[1] = f[0];
	snprintf(f[1].path, sizeof(f[1].path), "optim/rank_00000.safetensors");
	f[1].linked = 0;
	f[1].nchunks = (FSIZE + CHUNK - 1) / CHUNK;
	rs.files = f;
	rs.nfiles = 2;
	CHECK((c = memt_cap_start(t, "j", 2, TXID, &rs, why, sizeof(why))) != NULL);
	for (uint64_t k = 0; k * CHUNK < FSIZE; k++)
		memt_cap_chunk(c, 1, k, content + k * CHUNK,
			       FSIZE - k * CHUNK < CHUNK ? FSIZE - k * CHUNK : CHUNK);
	memt_cap_file_done(c, 1, &(struct digest){ DIGEST_SHA256, SHA });
	memt_step_committed(t, "j", 2);
	memt_cap_put(c);
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &fd[0]), 0);
	CHECK(!strcmp(buf, "FDSTORE=1\nFDNAME=memt.j.2.0"));
	CHECK((fd[0] = fcntl(fd[0], F_DUPFD_CLOEXEC, 100)) >= 100);
	CHECK((fd[1] = fcntl(fd[1], F_DUPFD_CLOEXEC, 100)) >= 100);
	memt_free(t);

	/* room for one copy and a half: step 1 alone would fit */
	start_with(fd, 2, "memt.j.2.0:memt.j.1.0");
	CHECK_EQ(memt_new(CAPLEN + CAPLEN / 2, 0, &t), 0);
	memt_fd_take_back(t);
	CHECK_EQ(held(t), 0);
	CHECK_EQ(held_bytes(t), 0);
	CHECK_EQ(removed_1_and_2(ns), 0);
	memt_free(t);
	store_close(ns, &sa);
	return 0;
}

/* Copy c's bytes into r as coord_repl.c sends them: run by run, r's runs
 * the same as c's.  0 or -1. */
static int copy_runs(const struct memt_cap *c, struct memt_cap *r)
{
	const uint8_t *src = memt_cap_bytes(c);
	uint8_t *dst = memt_cap_bytes(r);
	uint64_t at = 0, run, rrun, sent = 0;

	if (memt_cap_sent(c) != memt_cap_sent(r))
		return -1;
	for (;;) {
		at = memt_cap_next_run(c, at, &run);
		if (memt_cap_next_run(r, at, &rrun) != at || rrun != run)
			return -1;
		if (!run)
			break;
		if (memt_copy_prepare(r, at, run) < 0)
			return -1;
		memcpy(dst + at, src + at, run);
		at += run;
		sent += run;
	}
	return sent == memt_cap_sent(c) ? 0 : -1;
}

/* Send capture c to tier b as coord_repl.c does: 0, or -1 with why (b
 * refused it). */
static int send_copy(struct memt_cap *c, struct memt *b, char *why, size_t whylen)
{
	json_t *desc = memt_cap_describe(c);
	struct memt_cap *r = memt_copy_start(b, desc, 0, why, whylen);
	int ok;

	json_decref(desc);
	if (!r)
		return -1;
	ok = copy_runs(c, r) == 0;
	memt_copy_end(r, ok);
	return ok ? 0 : -1;
}

/* A partner's copy of a capture that shares a file with an older step
 * carries no bytes of it: the partner shares it with its own copy of the
 * step it holds (one copy there too), or refuses the copy when it holds
 * no such file. */
static int test_partner_shared(void)
{
	struct memt *a, *b;
	struct memt_cap *c;
	char why[256];

	CHECK_EQ(memt_new(4 << 20, 0, &a), 0);
	CHECK_EQ(memt_new(4 << 20, 0, &b), 0);
	CHECK((c = capture(a, "j", 1, 1, UINT64_MAX)) != NULL);
	CHECK_EQ(send_copy(c, b, why, sizeof(why)), 0);
	memt_step_committed(a, "j", 1);
	memt_step_committed(b, "j", 1);
	memt_cap_put(c);
	for (uint64_t step = 2; step <= 3; step++) {
		CHECK((c = capture_sharing(a, "j", step, 1, why, sizeof(why))) != NULL);
		CHECK_EQ(send_copy(c, b, why, sizeof(why)), 0);
		memt_step_committed(a, "j", step);
		memt_step_committed(b, "j", step);
		memt_cap_put(c);
		CHECK_EQ(reads_back(b, "j", step, 1), 0);
		CHECK_EQ(held_bytes(b), CAPLEN);
	}
	/* a partner that holds nothing of the job (restarted) refuses it */
	memt_free(b);
	CHECK_EQ(memt_new(4 << 20, 0, &b), 0);
	CHECK((c = capture_sharing(a, "j", 4, 1, why, sizeof(why))) != NULL);
	CHECK_EQ(send_copy(c, b, why, sizeof(why)), -1);
	CHECK(strstr(why, "no longer in memory") != NULL);
	CHECK_EQ(held_bytes(b), 0);
	memt_cap_put(c);
	memt_free(a);
	memt_free(b);
	return 0;
}

/* memt_each_file: every file once, with its bytes. */
static int each(void *arg, const char *path, const uint8_t *data, uint64_t size,
		const struct digest *d)
{
	struct seen *x = arg;
	x->n++;
	x->ok += size == FSIZE && !memcmp(data, content, FSIZE) && !strcmp(d->hex, SHA) &&
		 !strncmp(path, "model/rank_0000", 15);
	return 0;
}

/* Partner nodes (memt_peer.c): a capture described and copied into a
 * second tier lands in the same step, readable once committed; a held
 * capture outlives its dropped save until released; a fetched copy joins
 * a committed step; every held file is walked once, a changed one left
 * out. */
static int test_partner_copy(void)
{
	struct memt *a, *b;
	struct memt_cap *c, *r;
	struct memt_step *s;
	struct mfst_file mf = { "model/rank_00001.safetensors", FSIZE, { DIGEST_SHA256, SHA }, 0, NULL, NULL };
	uint8_t *buf = calloc(1, FSIZE), *dst;
	struct shard_seg seg = { 0, FSIZE, buf, NULL, 0 };
	const uint8_t *src;
	uint64_t len;
	struct seen seen = { 0, 0 };
	json_t *desc;
	char why[256], msg[256];

	CHECK_EQ(memt_new(1 << 20, 0, &a), 0);
	CHECK_EQ(memt_new(1 << 20, 0, &b), 0);
	/* node a captures rank 1; node b takes its copy into step 7 */
	CHECK((c = capture(a, "j", 7, 1, UINT64_MAX)) != NULL);
	CHECK_EQ(memt_cap_ready(c, why, sizeof(why)), 0);
	CHECK((desc = memt_cap_describe(c)) != NULL);
	src = memt_cap_bytes(c);
	len = memt_cap_sent(c);
	CHECK_EQ(len, CAPLEN);
	CHECK((r = memt_copy_start(b, desc, 0, why, sizeof(why))) != NULL);
	dst = memt_cap_bytes(r);
	CHECK_EQ(memt_cap_sent(r), len);
	CHECK_EQ(memt_copy_prepare(r, 0, len / 2), 0);      /* as the MPI thread does */
	CHECK_EQ(memt_copy_prepare(r, len / 2, len - len / 2), 0);
	memcpy(dst, src, len);
	memt_copy_end(r, 1);
	json_decref(desc);
	CHECK(memt_get(b, "j", 7, TXID, why, sizeof(why)) == NULL);   /* not committed */
	memt_step_committed(b, "j", 7);
	CHECK((s = memt_get(b, "j", 7, TXID, why, sizeof(why))) != NULL);
	CHECK_EQ(memt_read(s, &mf, &seg, 1, msg, sizeof(msg)), 0);
	CHECK(!memcmp(buf, content, FSIZE));
	CHECK(memt_holds(b, "j", 7, TXID, &mf));
	CHECK_EQ(memt_each_file(s, each, &seen), 0);
	CHECK_EQ(seen.n, 1);
	CHECK_EQ(seen.ok, 1);
	/* served to a third node, fetched into a committed step there */
	const uint8_t *fdata;
	CHECK_EQ(memt_file_describe(s, "model/rank_00001.safetensors", &desc, &fdata, &len), 0);
	CHECK_EQ(memt_file_describe(s, "model/rank_00009.safetensors", &desc, &fdata, &len) < 0, 1);
	memt_put(s);
	memt_step_failed(a, "j", 7);
	memt_cap_put(c);
	memt_free(a);
	CHECK_EQ(memt_new(1 << 20, 0, &a), 0);
	CHECK(!memt_holds(a, "j", 7, TXID, &mf));
	CHECK((r = memt_copy_start(a, desc, 1, why, sizeof(why))) != NULL);
	dst = memt_cap_bytes(r);
	CHECK_EQ(memt_cap_sent(r), len);
	memcpy(dst, fdata, len);
	memt_copy_end(r, 1);
	json_decref(desc);
	CHECK(memt_holds(a, "j", 7, TXID, &mf));
	/* a copy that did not complete is not kept */
	CHECK_EQ(memt_file_describe((s = memt_get(b, "j", 7, TXID, why, sizeof(why))),
				    mf.path, &desc, &fdata, &len), 0);
	memt_put(s);
	CHECK((r = memt_copy_start(a, desc, 0, why, sizeof(why))) != NULL);  /* step 7 is committed */
	memt_copy_end(r, 0);
	json_decref(desc);
	memt_free(a);

	/* a capture held for sending survives its save's drop until released */
	CHECK_EQ(memt_new(1 << 20, 0, &a), 0);
	CHECK((c = capture(a, "j", 8, 0, UINT64_MAX)) != NULL);
	memt_cap_hold(c);
	memt_step_failed(a, "j", 8);
	memt_cap_put(c);
	src = memt_cap_bytes(c);
	CHECK(!memcmp(src, content, FSIZE));     /* still mapped */
	memt_cap_release(c);
	CHECK_EQ(held(a), 0);
	/* an incomplete capture is not ready */
	CHECK((c = capture(a, "j", 9, 0, 1)) != NULL);
	CHECK_EQ(memt_cap_ready(c, why, sizeof(why)), -ENODATA);
	CHECK(strstr(why, "not captured whole") != NULL);
	memt_cap_put(c);

	/* a changed byte: the file is left out of the walk */
	s = memt_get(b, "j", 7, TXID, why, sizeof(why));
	CHECK(s != NULL);
	CHECK_EQ(memt_file_describe(s, mf.path, &desc, &fdata, &len), 0);
	json_decref(desc);
	((uint8_t *)fdata)[100] ^= 1;
	seen = (struct seen){ 0, 0 };
	CHECK_EQ(memt_each_file(s, each, &seen), 0);
	CHECK_EQ(seen.n, 0);
	memt_put(s);
	memt_free(a);
	memt_free(b);
	free(buf);
	return 0;
}

/* Pages of [p, p + n) in memory. */
static uint64_t resident(const uint8_t *p, uint64_t n)
{
	uint64_t pages = (n + 4095) / 4096, in = 0;
	unsigned char *vec = calloc(pages, 1);

	if (vec && mincore((void *)p, n, vec) == 0)
		for (uint64_t i = 0; i < pages; i++)
			in += vec[i] & 1;
	free(vec);
	return in;
}

static void content_fill(void)
{
	for (size_t i = 0; i < FSIZE; i++)
		content[i] = (uint8_t)(i * 2246822519u >> 7);
}

/* A file found unchanged as it was written (memt_cap_same) shares the
 * committed step's copy: counted whole until then, its room is given
 * back at once (no longer counted, no page left), it reads back from the
 * older bytes, and step after step one copy is held; the memory of a
 * capture with a hole serves a later capture that fills it; nothing is
 * shared when the tier does not hold the file as it is. */
static int test_same(void)
{
	struct digest d = { DIGEST_SHA256, SHA }, other = d;
	struct memt *t;
	struct memt_cap *c;
	struct rsave rs;
	struct wfile f;
	char why[256];

	content_fill();
	other.hex[0] = 'b';
	CHECK_EQ(memt_new(3 * CAPLEN, 0, &t), 0);
	CHECK(capture_same(t, "j", 1, 0, why, sizeof(why)) == NULL);   /* nothing held */
	CHECK((c = capture(t, "j", 1, 0, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 1);
	memt_cap_put(c);
	CHECK_EQ(memt_reserve(t, "j", 0, CAPLEN, 2), 1);      /* every page made */
	for (uint64_t step = 2; step <= 3; step++) {
		rsave_fake(&rs, &f, 0);
		CHECK((c = memt_cap_start(t, "j", step, TXID, &rs, why, sizeof(why))) != NULL);
		CHECK_EQ(held_bytes(t), 2 * CAPLEN);
		CHECK_EQ(memt_cap_may_share(c, 0, &other), 0);
		CHECK_EQ(memt_cap_may_share(c, 0, &d), 1);
		CHECK_EQ(memt_cap_same(c, 0, &d), 0);
		CHECK_EQ(memt_cap_may_share(c, 0, &d), 0);          /* shared already */
		CHECK_EQ(held_bytes(t), CAPLEN);
		CHECK_EQ(resident(memt_cap_bytes(c), CAPLEN), 0);
		CHECK_EQ(memt_cap_sent(c), 0);
		CHECK(memt_cap_shares(c));
		CHECK_EQ(memt_cap_ready(c, why, sizeof(why)), 0);
		memt_step_committed(t, "j", step);
		memt_cap_put(c);
		CHECK_EQ(held(t), 1);
		CHECK_EQ(held_bytes(t), CAPLEN);
		CHECK_EQ(reads_back(t, "j", step, 0), 0);
	}
	/* changed: copied, into step 2's memory (a hole, a spare now) */
	CHECK((c = capture(t, "j", 4, 0, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 4);
	memt_cap_put(c);
	CHECK_EQ(held_bytes(t), CAPLEN);
	CHECK_EQ(reads_back(t, "j", 4, 0), 0);
	/* the held step is not the file: not shared */
	rsave_fake(&rs, &f, 0);
	CHECK((c = memt_cap_start(t, "k", 1, TXID, &rs, why, sizeof(why))) != NULL);
	CHECK_EQ(memt_cap_may_share(c, 0, &d), 0);
	CHECK_EQ(memt_cap_same(c, 0, &d), -ENOENT);
	memt_step_failed(t, "k", 1);
	memt_cap_put(c);
	memt_free(t);
	return 0;
}

/* A capture whose middle file is shared sends two runs (never the
 * hole), and a partner holding the older step fills its copy from them:
 * every file reads back there. */
static int test_runs(void)
{
	static const char *paths[3] = { "a/rank_00000.safetensors",
					"b/rank_00000.safetensors",
					"c/rank_00000.safetensors" };
	struct digest d = { DIGEST_SHA256, SHA };
	struct memt *a, *b;
	struct memt_cap *c;
	struct rsave rs;
	struct wfile f[3];
	uint64_t run;
	char why[256];

	content_fill();
	CHECK_EQ(memt_new(4 << 20, 0, &a), 0);
	CHECK_EQ(memt_new(4 << 20, 0, &b), 0);
	for (uint64_t step = 1; step <= 2; step++) {
		rsave_fake(&rs, &f[0], 0);
		f[1] = f[2] = f[0];
		for (int i = 0; i < 3; i++)
			snprintf(f[i].path, sizeof(f[i].path), "%s", paths[i]);
		rs.files = f;
		rs.nfiles = 3;
		CHECK((c = memt_cap_start(a, "j", step, TXID, &rs, why, sizeof(why))) != NULL);
		for (size_t i = 0; i < 3; i++) {
			if (step == 2 && i == 1) {
				CHECK_EQ(memt_cap_same(c, i, &d), 0);
				continue;
			}
			for (uint64_t k = 0; k * CHUNK < FSIZE; k++)
				memt_cap_chunk(c, i, k, content + k * CHUNK,
					       FSIZE - k * CHUNK < CHUNK ? FSIZE - k * CHUNK : CHUNK);
			memt_cap_file_done(c, i, &d);
		}
		if (step == 2) {
			CHECK_EQ(memt_cap_sent(c), 2 * CAPLEN);
			CHECK_EQ(memt_cap_next_run(c, 0, &run), 0);
			CHECK_EQ(run, CAPLEN);
			CHECK_EQ(memt_cap_next_run(c, 100, &run), 100);
			CHECK_EQ(run, CAPLEN - 100);
			CHECK_EQ(memt_cap_next_run(c, CAPLEN, &run), 2 * CAPLEN);
			CHECK_EQ(run, CAPLEN);
			CHECK_EQ(memt_cap_next_run(c, 3 * CAPLEN, &run), 3 * CAPLEN);
			CHECK_EQ(run, 0);
		}
		CHECK_EQ(send_copy(c, b, why, sizeof(why)), 0);
		memt_step_committed(a, "j", step);
		memt_step_committed(b, "j", step);
		memt_cap_put(c);
		for (int i = 0; i < 3; i++)
			CHECK_EQ(path_reads_back(b, "j", step, paths[i]), 0);
		/* one copy of each file: step 1's memory keeps the one it lends */
		CHECK_EQ(held_bytes(b), 3 * CAPLEN);
	}
	memt_free(a);
	memt_free(b);
	return 0;
}

/* Step of job with nfiles files gK/rank_00000.safetensors: those in
 * same (a bit mask) found unchanged as written, the others copied; then
 * committed.  0, or -1. */
static int save_files(struct memt *t, uint64_t step, size_t nfiles, unsigned same)
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
	CHECK((c = memt_cap_start(t, "j", step, TXID, &rs, why, sizeof(why))) != NULL);
	for (size_t i = 0; i < nfiles; i++) {
		if (same >> i & 1) {
			CHECK_EQ(memt_cap_same(c, i, &d), 0);
			continue;
		}
		for (uint64_t k = 0; k * CHUNK < FSIZE; k++)
			memt_cap_chunk(c, i, k, content + k * CHUNK,
				       FSIZE - k * CHUNK < CHUNK ? FSIZE - k * CHUNK : CHUNK);
		memt_cap_file_done(c, i, &d);
	}
	memt_step_committed(t, "j", step);
	memt_cap_put(c);
	return 0;
}

/* Every file of step 4 of 4 files reads back. */
static int four_read_back(struct memt *t)
{
	char path[64];

	for (int i = 0; i < 4; i++) {
		snprintf(path, sizeof(path), "g%d/rank_00000.safetensors", i);
		CHECK_EQ(path_reads_back(t, "j", 4, path), 0);
	}
	return 0;
}

/* Files frozen one more each step (4 files; step k shares files 0..k-2
 * with the steps before it): one copy of each file is held, every older
 * step keeping only the file it lends (an orphan gives back the others),
 * and so after a restart: every step is stored while it lends, each
 * describing what it kept, and all come back, step 4 readable. */
static int test_stair(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	char buf[512];
	int ns, fd[4], junk;

	content_fill();
	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	for (uint64_t step = 1; step <= 4; step++) {
		CHECK_EQ(save_files(t, step, 4, (1u << (step - 1)) - 1), 0);
		CHECK_EQ(held(t), 1);
		CHECK_EQ(held_bytes(t), 4 * CAPLEN);
		CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &fd[step - 1]), 0);
		CHECK(fd[step - 1] >= 0 &&
		      (fd[step - 1] = fcntl(fd[step - 1], F_DUPFD_CLOEXEC, 100)) >= 100);
	}
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);    /* none removed */
	CHECK_EQ(four_read_back(t), 0);
	memt_free(t);

	start_with(fd, 4, "memt.j.1.0:memt.j.2.0:memt.j.3.0:memt.j.4.0");
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	memt_fd_take_back(t);
	CHECK_EQ(held(t), 1);
	CHECK_EQ(held_bytes(t), 4 * CAPLEN);
	CHECK_EQ(four_read_back(t), 0);
	memt_free(t);
	store_close(ns, &sa);
	return 0;
}

/* A step that lends a file while what it shared itself is gone (step 2
 * shares g0 with step 1, step 3 g1 with step 2 and not g0): step 1 leaves
 * the store, and after a restart step 2 comes back without g0, for step 3
 * to share g1 with. */
static int test_fd_store_chain(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	char buf[512];
	int ns, fd[3], junk;

	content_fill();
	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	CHECK_EQ(save_files(t, 1, 2, 0), 0);
	CHECK_EQ(save_files(t, 2, 2, 1), 0);
	CHECK_EQ(save_files(t, 3, 2, 2), 0);
	CHECK_EQ(held_bytes(t), 2 * CAPLEN);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &fd[i]), 0);
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &junk), 0);
	CHECK(!strcmp(buf, "FDSTOREREMOVE=1\nFDNAME=memt.j.1.0"));
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &fd[2]), 0);
	CHECK(!strcmp(buf, "FDSTORE=1\nFDNAME=memt.j.3.0"));
	close(fd[0]);
	CHECK(fd[1] >= 0 && (fd[1] = fcntl(fd[1], F_DUPFD_CLOEXEC, 100)) >= 100);
	CHECK(fd[2] >= 0 && (fd[2] = fcntl(fd[2], F_DUPFD_CLOEXEC, 100)) >= 100);
	memt_free(t);

	start_with(fd + 1, 2, "memt.j.3.0:memt.j.2.0");
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	memt_fd_take_back(t);
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);      /* none dropped */
	CHECK_EQ(held(t), 1);
	CHECK_EQ(held_bytes(t), 2 * CAPLEN);
	CHECK_EQ(path_reads_back(t, "j", 3, "g0/rank_00000.safetensors"), 0);
	CHECK_EQ(path_reads_back(t, "j", 3, "g1/rank_00000.safetensors"), 0);
	memt_free(t);
	store_close(ns, &sa);
	return 0;
}

/* The memory of an older step that lent a file goes to its job's spares
 * when nothing shares it any more: freed when the job's last rank leaves
 * (memt_release_job), like the others. */
static int test_orphan_spare(void)
{
	struct memt_usage u;
	struct memt *t;

	content_fill();
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	CHECK_EQ(save_files(t, 1, 2, 0), 0);
	CHECK_EQ(save_files(t, 2, 2, 1), 0);      /* g0 lent by step 1 */
	CHECK_EQ(save_files(t, 3, 2, 0), 0);      /* both changed */
	memt_usage(t, &u);
	CHECK_EQ(u.held - u.spare, 2 * CAPLEN);
	CHECK(u.spare > 0);
	memt_release_job(t, "j");
	memt_usage(t, &u);
	CHECK_EQ(u.spare, 0);
	CHECK_EQ(u.held, 2 * CAPLEN);
	memt_free(t);
	return 0;
}

/* An older step's memory that lends two files, one of which changes
 * later, gives that one back then (step 1 lends g0 and g1 to step 2; step
 * 3 changes g0): one copy of each file is held, and after a restart step
 * 1 comes back with g1 alone, for step 3. */
static int test_orphan_later(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	char buf[512];
	int ns, fd[4], junk;

	content_fill();
	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	CHECK_EQ(save_files(t, 1, 2, 0), 0);
	CHECK_EQ(save_files(t, 2, 2, 3), 0);
	CHECK_EQ(save_files(t, 3, 2, 2), 0);
	CHECK_EQ(held_bytes(t), 2 * CAPLEN);
	for (int i = 0; i < 4; i++)           /* store 1, 2; remove 2; store 3 */
		CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &fd[i]), 0);
	CHECK(!strcmp(buf, "FDSTORE=1\nFDNAME=memt.j.3.0"));
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);
	close(fd[1]);
	CHECK((fd[1] = fcntl(fd[0], F_DUPFD_CLOEXEC, 100)) >= 100);
	CHECK((fd[2] = fcntl(fd[3], F_DUPFD_CLOEXEC, 100)) >= 100);
	close(fd[0]);
	close(fd[3]);
	memt_free(t);

	start_with(fd + 1, 2, "memt.j.1.0:memt.j.3.0");
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	memt_fd_take_back(t);
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);      /* none dropped */
	CHECK_EQ(held(t), 1);
	CHECK_EQ(held_bytes(t), 2 * CAPLEN);
	CHECK_EQ(path_reads_back(t, "j", 3, "g0/rank_00000.safetensors"), 0);
	CHECK_EQ(path_reads_back(t, "j", 3, "g1/rank_00000.safetensors"), 0);
	memt_free(t);
	store_close(ns, &sa);
	return 0;
}

/* Closing the tier leaves the memfds in the store as they are: step 2
 * shares both of step 1's files; when step 2 goes at close, step 1 does
 * not give its files back one by one, and both come back readable. */
static int test_close_keeps(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	char buf[512];
	int ns, fd[2], junk;

	content_fill();
	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	CHECK_EQ(save_files(t, 1, 2, 0), 0);
	CHECK_EQ(save_files(t, 2, 2, 3), 0);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &fd[i]), 0);
		CHECK((fd[i] = fcntl(fd[i], F_DUPFD_CLOEXEC, 100)) >= 100);
	}
	memt_free(t);
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);
	start_with(fd, 2, "memt.j.1.0:memt.j.2.0");
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	memt_fd_take_back(t);
	CHECK_EQ(held_bytes(t), 2 * CAPLEN);
	CHECK_EQ(path_reads_back(t, "j", 2, "g0/rank_00000.safetensors"), 0);
	CHECK_EQ(path_reads_back(t, "j", 2, "g1/rank_00000.safetensors"), 0);
	memt_free(t);
	store_close(ns, &sa);
	return 0;
}

/* The fd store and partner nodes, with files found unchanged as written. */
static int test_fd_store_same(void)
{
	int r;

	found_same = 1;
	r = test_fd_store_shared();
	found_same = 0;
	return r;
}

static int test_partner_same(void)
{
	int r;

	found_same = 1;
	r = test_partner_shared();
	found_same = 0;
	return r;
}

static const struct test tests[] = {
	{ "roundtrip", test_roundtrip },
	{ "budget", test_budget },
	{ "reserve", test_reserve },
	{ "not_kept", test_not_kept },
	{ "changed", test_changed },
	{ "manifest_crc", test_manifest_crc },
	{ "fd_store", test_fd_store },
	{ "partner_copy", test_partner_copy },
	{ "shared", test_shared },
	{ "fd_store_shared", test_fd_store_shared },
	{ "fd_store_shared_unfit", test_fd_store_shared_unfit },
	{ "partner_shared", test_partner_shared },
	{ "same", test_same },
	{ "runs", test_runs },
	{ "fd_store_same", test_fd_store_same },
	{ "partner_same", test_partner_same },
	{ "stair", test_stair },
	{ "fd_store_chain", test_fd_store_chain },
	{ "orphan_spare", test_orphan_spare },
	{ "orphan_later", test_orphan_later },
	{ "close_keeps", test_close_keeps },
};
TEST_MAIN(tests)
