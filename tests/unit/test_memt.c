/* test_memt.c - the memory tier within one ckptd (daemon/memt.c,
 * memt_read.c, memt_spare.c): a captured step reads back exactly the
 * wanted byte ranges once committed; one copy per job (the newest), within
 * the budget, older ones making room; failed, refused and incomplete
 * captures are not kept; a changed byte is caught by the checksum (the
 * manifest's chunk CRC32Cs where it has them, the tier's own block sums
 * otherwise); a reader keeps a dropped copy alive until it lets go; memory
 * made ahead of a job's saves serves its captures; a file shared with the
 * step held (frozen shard, or found unchanged) is held once and goes with
 * the last step that shares it (test_memt_keep.c: the fd store, partners). */
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
#include "memt_help.h"
#include "mfst.h"
#include "rsave.h"
#include "shard_read.h"
#include "testhelp.h"

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


/* Capture step 1 of job j (rank 0), commit it and read it back whole:
 * the memory it took (a spare or new) really holds the bytes. */
static int capture_reads_back(struct memt *t, const char *job)
{
	struct memt_cap *c;

	content_fill();
	if (!(c = capture(t, job, 1, 0, UINT64_MAX)))
		return 0;
	memt_step_committed(t, job, 1);
	memt_cap_put(c);
	return reads_back(t, job, 1, 0) == 0;
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

/* Chunks of a changed file that are the same as in the step held are held
 * once: spliced from it (memt_splice.c), counted once, read back as the
 * file.  An older step keeps the chunks it lends (all of a file shared
 * whole); once nothing is spliced from it, it is a spare, which serves
 * later captures (its own memory mapped back where chunks were spliced). */
static int test_splice(void)
{
	static uint8_t v[4][FSIZE];
	struct memt_usage u;
	struct memt *t;
	struct memt_cap *c;
	char why[256];

	content_fill();
	version(v[0], 0, 0);
	version(v[1], 1u << 1, 1);             /* chunk 1 changed */
	version(v[2], 1u << 1 | 1u << 2, 1);   /* ... and chunk 2 */
	version(v[3], 0xf, 2);                 /* every chunk, the partial last too */
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	CHECK_EQ(save_bytes(t, 1, v[0]), 0);
	CHECK_EQ(held_bytes(t), CAPLEN);
	CHECK_EQ(save_bytes(t, 2, v[1]), 0);
	CHECK_EQ(held_bytes(t), CAPLEN);       /* 1 keeps chunks 0, 2, 3, 2 has 1 */
	CHECK_EQ(reads_as(t, 2, 0, v[1]), 0);
	CHECK_EQ(save_bytes(t, 3, v[2]), 0);
	CHECK_EQ(held_bytes(t), CAPLEN);       /* 1 keeps 0 and 3, 2 keeps 1, 3 has 2 */
	CHECK_EQ(reads_as(t, 3, 0, v[2]), 0);
	/* a file shared whole with step 3's: read through its splices */
	CHECK((c = capture_same(t, "j", 4, 0, why, sizeof(why))) != NULL);
	memt_step_committed(t, "j", 4);
	memt_cap_put(c);
	CHECK_EQ(held_bytes(t), CAPLEN);
	CHECK_EQ(reads_as(t, 4, 0, v[2]), 0);
	CHECK_EQ(save_bytes(t, 5, v[3]), 0);
	memt_usage(t, &u);
	CHECK_EQ(u.held - u.spare, CAPLEN);
	CHECK(u.spare > 0);
	CHECK_EQ(reads_as(t, 5, 0, v[3]), 0);
	/* every spare serves a capture, each changing every chunk */
	for (uint64_t step = 6; step <= 10; step++) {
		CHECK_EQ(save_bytes(t, step, v[step % 2 ? 0 : 3]), 0);
		CHECK_EQ(reads_as(t, step, 0, v[step % 2 ? 0 : 3]), 0);
		CHECK_EQ(held_bytes(t), CAPLEN);
	}
	memt_free(t);
	return 0;
}

/* A chunk whose sum is the same as the step held has, but whose bytes
 * there changed after they were captured, is copied: the bytes decide. */
static int test_splice_bytes_decide(void)
{
	struct memt *t;
	uint8_t *map;

	content_fill();
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	CHECK_EQ(save_bytes(t, 1, content), 0);
	CHECK((map = memt_mapping()) != NULL);
	map[CHUNK + 9] ^= 1;                   /* step 1's chunk 1, its sum kept */
	CHECK_EQ(save_bytes(t, 2, content), 0);
	CHECK_EQ(held_bytes(t), CAPLEN);       /* 1 keeps 0, 2, 3; 2 has 1 */
	CHECK_EQ(reads_as(t, 2, 0, content), 0);  /* (spliced, it would not verify) */
	memt_free(t);
	return 0;
}

/* The memfds the process has open (the tier's captures, orphans, spares). */
static int memfds(void)
{
	char link[64], target[128];
	int n = 0;
	ssize_t len;

	for (int fd = 0; fd < 4096; fd++) {
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		if ((len = readlink(link, target, sizeof(target) - 1)) > 0) {
			target[len] = '\0';
			n += strstr(target, "memfd:ckpt-memt") != NULL;
		}
	}
	return n;
}

/* Capture step of job "j" rank 0: nf files g0.. of nch chunks each, their
 * bytes one after the other in bytes, chunks spliced where they can be;
 * committed, and read back.  0, or 1. */
static int save_spliced(struct memt *t, uint64_t step, const uint8_t *bytes, size_t nf,
			uint64_t nch)
{
	static uint8_t back[1024 * CHUNK];
	struct wfile f[8];
	struct rsave rs;
	struct memt_cap *c;
	struct memt_step *st;
	char why[256];

	rsave_fake(&rs, &f[0], 0);
	rs.memt_whole = 0;
	rs.files = f;
	rs.nfiles = nf;
	for (size_t i = 0; i < nf; i++) {
		f[i] = f[0];
		snprintf(f[i].path, sizeof(f[i].path), "g%zu/rank_00000.safetensors", i);
		f[i].size = nch * CHUNK;
		f[i].nchunks = nch;
	}
	CHECK((c = memt_cap_start(t, "j", step, TXID, &rs, why, sizeof(why))) != NULL);
	for (size_t i = 0; i < nf; i++) {
		for (uint64_t k = 0; k < nch; k++)
			memt_cap_chunk(c, i, k, bytes + (i * nch + k) * CHUNK, CHUNK);
		memt_cap_file_done(c, i, &(struct digest){ DIGEST_SHA256, SHA });
	}
	memt_step_committed(t, "j", step);
	memt_cap_put(c);
	CHECK((st = memt_get(t, "j", step, TXID, why, sizeof(why))) != NULL);
	for (size_t i = 0; i < nf; i++) {
		struct mfst_file mf = { f[i].path, nch * CHUNK, { DIGEST_SHA256, SHA }, 0, NULL, NULL };
		struct shard_seg all = { 0, nch * CHUNK, back, NULL, 0 };
		CHECK_EQ(memt_read(st, &mf, &all, 1, why, sizeof(why)), 0);
		CHECK(!memcmp(back, bytes + i * nch * CHUNK, nch * CHUNK));
	}
	memt_put(st);
	return 0;
}

/* A change that moves through a rank's files, a chunk a step: their
 * chunks come from at most ORIGINS_MAX steps (those holding the fewest
 * copied again), not one step per chunk; every step reads back. */
static int test_splice_scattered(void)
{
	enum { NF = 4, NCH = 10, STEPS = 90 };
	static uint8_t bytes[NF * NCH * CHUNK];
	struct memt *t;

	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (uint8_t)(i * 2654435761u >> 9);
	CHECK_EQ(memt_new(8 * sizeof(bytes), 0, &t), 0);
	for (uint64_t step = 1; step <= STEPS; step++) {
		bytes[(step % (NF * NCH)) * CHUNK] ^= (uint8_t)step;     /* one chunk changes */
		CHECK_EQ(save_spliced(t, step, bytes, NF, NCH), 0);
	}
	CHECK(held_bytes(t) <= 2 * sizeof(bytes));
	CHECK(memfds() <= 2 * 16);        /* held (at most ORIGINS_MAX) and spares */
	memt_free(t);
	return 0;
}

/* The mappings of ckptd's memory tier (lines of /proc/self/maps). */
static int memt_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, "ckpt-memt") != NULL;
	if (f)
		fclose(f);
	return n;
}

/* Every other chunk of a file changing: at most RUNS_MAX runs of spliced
 * chunks (each a mapping of its own), the others copied; it reads back. */
static int test_splice_runs(void)
{
	enum { NCH = 3 * 256 };
	static uint8_t bytes[NCH * CHUNK];
	struct memt *t;

	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (uint8_t)(i * 2654435761u >> 9);
	CHECK_EQ(memt_new(4 * sizeof(bytes), 0, &t), 0);
	CHECK_EQ(save_spliced(t, 1, bytes, 1, NCH), 0);
	for (uint64_t k = 0; k < NCH; k += 2)
		bytes[k * CHUNK] ^= 1;
	CHECK_EQ(save_spliced(t, 2, bytes, 1, NCH), 0);
	CHECK(memt_maps() <= 2 * 256 + 8);
	memt_free(t);
	return 0;
}

static const struct test tests[] = {
	{ "roundtrip", test_roundtrip },
	{ "budget", test_budget },
	{ "reserve", test_reserve },
	{ "not_kept", test_not_kept },
	{ "changed", test_changed },
	{ "manifest_crc", test_manifest_crc },
	{ "shared", test_shared },
	{ "same", test_same },
	{ "orphan_spare", test_orphan_spare },
	{ "splice", test_splice },
	{ "splice_bytes_decide", test_splice_bytes_decide },
	{ "splice_scattered", test_splice_scattered },
	{ "splice_runs", test_splice_runs },
};
TEST_MAIN(tests)
