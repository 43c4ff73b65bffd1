/* fcheck.c - check a file's bytes against its manifest entry as they are
 * read: chunk CRC32Cs, or the file's digest for format 1 (see fcheck.h). */
#include <errno.h>
#include <string.h>

#include "errbuf.h"
#include "fcheck.h"
#include "mfst.h"

int fcheck_init(struct fcheck *c, const struct mfst_file *mf, char *msg, size_t msglen)
{
	int r;

	memset(c, 0, sizeof(*c));
	c->mf = mf;
	c->fast = mf->chunk_size && mf->crc32c;
	r = c->fast ? csum_stream_init(&c->cs, mf->chunk_size, mf->size) :
		      digest_init(&c->dg, mf->digest.alg);
	if (r < 0)
		return errbuf_fail(msg, msglen, r, "%s: out of memory to check it", mf->path);
	return 0;
}

/* Compare the chunks completed so far with the manifest's. */
static int compare(struct fcheck *c, char *msg, size_t msglen)
{
	const struct mfst_file *mf = c->mf;
	uint64_t done = c->cs.pos / mf->chunk_size;

	if (c->cs.pos == mf->size)
		done = csum_count(mf->size, mf->chunk_size);
	for (; c->checked < done; c->checked++) {
		uint64_t k = c->checked, lo = k * mf->chunk_size;
		uint64_t hi = lo + mf->chunk_size < mf->size ? lo + mf->chunk_size : mf->size;

		if (c->cs.crcs[k] != mf->crc32c[k])
			return errbuf_fail(msg, msglen, -EBADMSG, "%s: crc32c of chunk %llu "
					   "(bytes %llu..%llu) does not match the manifest",
					   mf->path, (unsigned long long)k,
					   (unsigned long long)lo, (unsigned long long)hi - 1);
	}
	return 0;
}

int fcheck_update(struct fcheck *c, const void *buf, size_t len, char *msg, size_t msglen)
{
	c->seen += len;
	if (!c->fast) {
		digest_update(&c->dg, buf, len);
		return 0;
	}
	csum_stream_update(&c->cs, buf, len);
	return compare(c, msg, msglen);
}

int fcheck_final(struct fcheck *c, char *msg, size_t msglen)
{
	const struct mfst_file *mf = c->mf;
	struct digest got;
	int r = 0;

	if (c->seen != mf->size) {
		r = errbuf_fail(msg, msglen, -EBADMSG, "%s: %llu bytes read, the manifest "
				"says %llu", mf->path, (unsigned long long)c->seen,
				(unsigned long long)mf->size);
	} else if (c->fast) {
		r = compare(c, msg, msglen);
	} else {
		digest_final(&c->dg, &got);           /* releases the context */
		if (!digest_eq(&got, &mf->digest))
			r = errbuf_fail(msg, msglen, -EBADMSG, "%s: %s mismatch (expected "
					"%.16s..., got %.16s...)", mf->path,
					digest_key(mf->digest.alg), mf->digest.hex, got.hex);
	}
	fcheck_release(c);
	return r;
}

void fcheck_release(struct fcheck *c)
{
	if (!c)
		return;
	csum_stream_release(&c->cs);
	digest_release(&c->dg);
}
