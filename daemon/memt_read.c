/* memt_read.c - see memt.h: reading a held step of the memory tier back,
 * every block checked against its checksum (the manifest's chunk CRC32Cs,
 * or the tier's own XXH3 sums, recorded here at capture). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "csum.h"
#include "gpu.h"
#include "memt.h"
#include "memt_int.h"
#include "mfst.h"
#include "shard_read.h"
#include "shm_pool.h"

#define READ_PIECE (256u << 10)    /* hashed, then copied while cached */

/* The fast checksum of a block (XXH3-64), recorded when it is captured
 * and checked when it is read back: the tier's only checksum calls, a
 * block at once or in pieces (the same value). */
uint64_t memt__block_sum(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

static void block_sum_start(XXH3_state_t *st)
{
	XXH3_64bits_reset(st);
}

static void block_sum_add(XXH3_state_t *st, const void *p, size_t n)
{
	XXH3_64bits_update(st, p, n);
}

static uint64_t block_sum_end(XXH3_state_t *st)
{
	return XXH3_64bits_digest(st);
}

struct memt_cap *memt__file_find(struct mt_entry *e, const struct mfst_file *mf,
				 struct mt_file **out)
{
	for (struct memt_cap *c = e->caps; c; c = c->next)
		for (size_t i = 0; i < c->nfiles; i++)
			if (!strcmp(c->files[i].path, mf->path) && c->files[i].done &&
			    c->files[i].size == mf->size &&
			    digest_eq(&c->files[i].digest, &mf->digest) &&
			    memt__file_bytes(c, &c->files[i])) {
				*out = &c->files[i];
				return c;
			}
	return NULL;
}

/* Deliver the wanted bytes of [lo, hi) of file f (mapped at base); with
 * gpu_only, only those to CUDA memory (the host ones were copied). */
static int give(const struct mt_file *f, const uint8_t *base, uint64_t lo, uint64_t hi,
		const struct shard_seg *segs, size_t first, size_t nsegs, int gpu_only,
		char *msg, size_t msglen)
{
	char why[200];

	for (size_t j = first; j < nsegs && segs[j].begin < hi; j++) {
		const struct shard_seg *sg = &segs[j];
		uint64_t a = sg->begin > lo ? sg->begin : lo, b = sg->end < hi ? sg->end : hi;
		if (b <= a || (gpu_only && sg->dst))
			continue;
		if (sg->dst) {
			shm_pool_copy(sg->dst + (a - sg->begin), base + a, b - a);
		} else if (gpu_copy_h2d(sg->gm, sg->goff + (a - sg->begin), base + a, b - a,
					why, sizeof(why)) < 0) {
			snprintf(msg, msglen, "%s: cannot copy to the GPU: %s", f->path, why);
			return -EIO;
		}
	}
	return 0;
}

/* The CRC32C of bytes [lo, hi) of a file mapped at base, the parts that
 * host segments want copied to them in the same pass (csum.h). */
static uint32_t crc_copy(const uint8_t *base, uint64_t lo, uint64_t hi,
			 const struct shard_seg *segs, size_t first, size_t nsegs)
{
	uint32_t crc = 0;
	uint64_t p = lo;

	for (size_t j = first; j < nsegs && segs[j].begin < hi; j++) {
		const struct shard_seg *sg = &segs[j];
		uint64_t a = sg->begin > p ? sg->begin : p, b = sg->end < hi ? sg->end : hi;
		if (b <= a || !sg->dst)
			continue;
		if (a > p)
			crc = csum_crc32c(crc, base + p, a - p);
		crc = csum_crc32c_copy(crc, sg->dst + (a - sg->begin), base + a, b - a);
		p = b;
	}
	if (p < hi)
		crc = csum_crc32c(crc, base + p, hi - p);
	return crc;
}

/* memt_read when the manifest has chunk CRC32Cs (every step this ckptd
 * writes): each chunk the segments touch is checked whole against the
 * manifest's CRC32C, its host bytes copied while it is checked (memory is
 * read once, and what is checked is what was copied), its CUDA bytes
 * copied once it matched.  The tier's own block sums are not needed. */
static int read_crc(const struct mt_file *f, const struct mfst_file *mf, const uint8_t *base,
		    const struct shard_seg *segs, size_t nsegs, char *msg, size_t msglen)
{
	uint64_t cs = mf->chunk_size, done = 0;   /* chunks before `done`: read */
	size_t si = 0;
	int r = 0;

	while (si < nsegs && r == 0) {
		uint64_t k, bbeg, bend;

		if (segs[si].begin >= segs[si].end || segs[si].end <= done) {
			si++;
			continue;
		}
		k = (segs[si].begin > done ? segs[si].begin : done) / cs;
		bbeg = k * cs;
		bend = bbeg + cs < f->size ? bbeg + cs : f->size;
		if (crc_copy(base, bbeg, bend, segs, si, nsegs) != mf->crc32c[k]) {
			snprintf(msg, msglen, "the memory copy of %s changed (bytes %llu..%llu do "
				 "not match their CRC32C in the manifest)", mf->path,
				 (unsigned long long)bbeg, (unsigned long long)bend);
			r = -EBADMSG;
		}
		if (r == 0)
			r = give(f, base, bbeg, bend, segs, si, nsegs, 1, msg, msglen);
		done = bend;
	}
	return r;
}

int memt_read(struct memt_step *s, const struct mfst_file *mf,
	      const struct shard_seg *segs, size_t nsegs, char *msg, size_t msglen)
{
	struct mt_entry *e = (struct mt_entry *)s;
	struct mt_file *f = NULL;
	struct memt_cap *c = memt__file_find(e, mf, &f);
	const uint8_t *base;
	uint64_t piece = READ_PIECE, done = 0;   /* blocks before `done`: read */
	XXH3_state_t *st;
	size_t si = 0;
	int r = 0;

	if (!c) {
		snprintf(msg, msglen, "%s is not in memory", mf->path);
		return -ENOENT;
	}
	base = memt__file_bytes(c, f);
	if (mf->chunk_size && mf->crc32c)
		return read_crc(f, mf, base, segs, nsegs, msg, msglen);
	if (!(st = XXH3_createState())) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	for (size_t j = 0; j < nsegs; j++)    /* GPU copies: whole ranges at once */
		if (!segs[j].dst)
			piece = c->chunk_bytes;
	/* Each block touched is checked as a whole; host bytes are copied
	 * piece by piece right after the piece is hashed, while it is in the
	 * cache, so memory is read once. */
	while (si < nsegs && r == 0) {
		uint64_t k, bbeg, bend;

		if (segs[si].begin >= segs[si].end || segs[si].end <= done) {
			si++;
			continue;
		}
		k = (segs[si].begin > done ? segs[si].begin : done) / c->chunk_bytes;
		bbeg = k * c->chunk_bytes;
		bend = bbeg + c->chunk_bytes < f->size ? bbeg + c->chunk_bytes : f->size;
		block_sum_start(st);
		for (uint64_t p = bbeg; p < bend && r == 0; p += piece) {
			uint64_t pend = p + piece < bend ? p + piece : bend;
			block_sum_add(st, base + p, pend - p);
			if (piece != c->chunk_bytes)
				r = give(f, base, p, pend, segs, si, nsegs, 0, msg, msglen);
		}
		if (r == 0 && block_sum_end(st) != f->sums[k]) {
			snprintf(msg, msglen, "the memory copy of %s changed (bytes %llu..%llu do "
				 "not match their checksum)", mf->path, (unsigned long long)bbeg,
				 (unsigned long long)bend);
			r = -EBADMSG;
		}
		if (r == 0 && piece == c->chunk_bytes)     /* checked first, then copied */
			r = give(f, base, bbeg, bend, segs, si, nsegs, 0, msg, msglen);
		done = bend;
	}
	XXH3_freeState(st);
	return r;
}
