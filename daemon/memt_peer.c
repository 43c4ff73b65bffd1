/* memt_peer.c - the memory tier's side of partner nodes: a capture's
 * description and bytes for sending, a partner's copy received into the
 * tier, one held file served to a peer's restore, and every held file of a
 * step written out when the world ends (memflush.c).  The wire is
 * coord_repl.c's; see memt.h. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "memt.h"
#include "memt_int.h"

int memt_cap_ready(struct memt_cap *c, char *why, size_t whylen)
{
	if (!c) {
		snprintf(why, whylen, "it is not kept in memory");
		return -ENODATA;
	}
	if (c->failed || !c->map) {
		snprintf(why, whylen, "%s", c->failed ? c->why : "its memory was not made");
		return -ENODATA;
	}
	for (size_t i = 0; i < c->nfiles; i++)
		if (!c->files[i].done) {
			snprintf(why, whylen, "%s was not captured whole", c->files[i].path);
			return -ENODATA;
		}
	return 0;
}

json_t *memt_cap_describe(const struct memt_cap *c)
{
	return memt__describe(c->e->job, c->e->step, c->e->txid, c);
}

uint8_t *memt_cap_bytes(const struct memt_cap *c)
{
	return c->map;
}

uint64_t memt_cap_next_run(const struct memt_cap *c, uint64_t off, uint64_t *run)
{
	uint64_t start = c->len, end = c->len;

	/* the rooms are in file order, a room with spliced chunks in pieces of
	 * a chunk; a hole, a spliced chunk or a file without room ends a run
	 * (a hole is never read: that would allocate it) */
	for (size_t i = 0; i < c->nfiles; i++) {
		const struct mt_file *f = &c->files[i];
		uint64_t pieces = (f->src || f->gone) && !f->shared ? f->nsums : 1;
		for (uint64_t k = 0; k < pieces; k++) {
			int own = !f->shared && !(f->src && f->src[k].on) && !(f->gone && f->gone[k]);
			uint64_t a = f->off + k * c->chunk_bytes;
			uint64_t b = k + 1 < pieces ? a + c->chunk_bytes : f->off + ROOM(f->size);
			if (!own || b <= off || a == b) {
				if (!own && start < c->len)
					goto out;
				continue;
			}
			if (start == c->len) {
				start = a > off ? a : off;
				end = b;
			} else if (a == end) {
				end = b;
			} else {
				goto out;
			}
		}
	}
out:
	*run = end - start;
	return start;
}

int memt_cap_shares(const struct memt_cap *c)
{
	for (size_t i = 0; c && i < c->nfiles; i++)
		if (c->files[i].shared || memt__not_held(c, &c->files[i]))
			return 1;
	return 0;
}

struct memt_cap *memt_copy_start(struct memt *t, const json_t *desc, int committed,
				 char *why, size_t whylen)
{
	struct memt_cap *c = NULL;
	char job[65], txid[33];
	uint64_t step;
	int r;

	if (!t || !t->budget) {
		snprintf(why, whylen, "the memory tier is off (memory_tier_bytes 0)");
		return NULL;
	}
	if (memt__cap_parse(desc, &c, job, &step, txid, why, whylen) < 0)
		return NULL;
	for (size_t i = 0; i < c->nfiles; i++) {
		if (c->files[i].gone) {            /* an older step's remains */
			snprintf(why, whylen, "%s is not whole", c->files[i].path);
			memt__cap_free(c);
			return NULL;
		}
		c->files[i].done = 0;              /* until every byte is here */
	}
	if ((r = memt__cap_insert(t, job, step, txid, c, committed, why, whylen)) < 0) {
		memt__cap_free(c);
		return NULL;
	}
	/* not populated here: the MPI thread receiving it allocates each
	 * piece before it lands (memt_copy_prepare), never all at once */
	if ((r = memt__cap_alloc(c, t)) < 0 || (r = memt__splice_map(c)) < 0) {
		snprintf(why, whylen, "%s", c->why[0] ? c->why : "cannot map the chunks it "
			 "shares with an older step");
		memt__cap_end(c, 0);
		return NULL;
	}
	return c;
}

int memt_copy_prepare(struct memt_cap *c, uint64_t off, uint64_t len)
{
	return memt__cap_populate(c, off, len);
}

void memt_copy_end(struct memt_cap *c, int ok)
{
	for (size_t i = 0; ok && i < c->nfiles; i++)
		c->files[i].done = 1;
	if (ok)
		memt__lock_bytes(c->e->t, c);
	memt__cap_end(c, ok);
}

/* The held whole file at path, or NULL. */
static struct memt_cap *file_by_path(struct mt_entry *e, const char *path,
				     struct mt_file **out)
{
	for (struct memt_cap *c = e->caps; c; c = c->next)
		for (size_t i = 0; !c->failed && i < c->nfiles; i++)
			if (c->files[i].done && !strcmp(c->files[i].path, path) &&
			    memt__file_bytes(c, &c->files[i])) {
				*out = &c->files[i];
				return c;
			}
	return NULL;
}

int memt_file_describe(struct memt_step *s, const char *path, json_t **desc,
		       const uint8_t **data, uint64_t *len)
{
	struct mt_entry *e = (struct mt_entry *)s;
	struct mt_file *f = NULL, one;
	struct memt_cap *c = file_by_path(e, path, &f), tmp;

	if (!c)
		return -ENOENT;
	one = *f;
	one.off = 0;
	one.shared = one.hole = 0;    /* described whole, its bytes sent */
	one.src = NULL;
	tmp = (struct memt_cap){ .rank = c->rank, .chunk_bytes = c->chunk_bytes,
				 .files = &one, .nfiles = 1,
				 .len = ROOM(f->size) };
	if (!(*desc = memt__describe(e->job, e->step, e->txid, &tmp)))
		return -ENOMEM;
	*data = memt__file_bytes(c, f);
	*len = tmp.len;
	return 0;
}

/* Does every block of f (mapped at base) match its checksum? */
static int file_intact(const struct memt_cap *c, const struct mt_file *f)
{
	const uint8_t *base = memt__file_bytes(c, f);

	for (uint64_t k = 0; k < f->nsums; k++) {
		uint64_t b = k * c->chunk_bytes;
		uint64_t n = f->size - b < c->chunk_bytes ? f->size - b : c->chunk_bytes;
		if (memt__block_sum(base + b, n) != f->sums[k])
			return 0;
	}
	return 1;
}

int memt_each_file(struct memt_step *s, memt_file_fn fn, void *arg)
{
	struct mt_entry *e = (struct mt_entry *)s;
	int r = 0;

	for (struct memt_cap *c = e->caps; c && r == 0; c = c->next)
		for (size_t i = 0; !c->failed && i < c->nfiles && r == 0; i++) {
			struct mt_file *f = &c->files[i], *first = NULL;
			if (!f->done || !memt__file_bytes(c, f) ||
			    file_by_path(e, f->path, &first) != c || first != f)
				continue;        /* held twice: written once */
			if (!file_intact(c, f)) {    /* another node may hold it whole */
				log_warnx("job %s: the memory copy of iter_%09llu's %s changed "
					  "(it does not match its checksums): not written", e->job,
					  (unsigned long long)e->step, f->path);
				continue;
			}
			r = fn(arg, f->path, memt__file_bytes(c, f), f->size, &f->digest);
		}
	return r;
}
