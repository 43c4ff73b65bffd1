/* memt_lend.c - what the memory tier's captures share with older steps:
 * a capture's files found unchanged or linked (and partners' and stored
 * copies' shared files and chunks) are borrowed from the job's committed
 * step that holds them, and an older step that lends (an orphan, once
 * replaced) keeps only what it lends.  Everything here is under t->lock;
 * chunks are memt_splice.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "memt.h"
#include "memt_int.h"

/* Under t->lock: orphan c keeps of file f what newer steps share: all of
 * it while one shares it whole, else the chunks spliced from it.  What
 * it lends no more goes (a hole; no longer readable), and so do the chunks
 * it borrowed.  The bytes given back (the caller says so in the fd store:
 * memt_fd_redescribe).  Not while the tier closes: the memfds stay in the
 * store as they are. */
uint64_t memt__orphan_give_back(struct memt *t, struct memt_cap *c, struct mt_file *f)
{
	uint64_t given;

	if (t->closing || f->shared || (uint64_t)f->lent > f->klent_sum)
		return 0;
	if (f->lent)
		return memt__trim_chunks(t, c, f);
	if (memt__room_punch(c, f) < 0)
		return 0;
	given = memt__room_counted(c, f);
	if (f->src && !f->gone)
		f->gone = calloc(f->nsums, 1);
	memt__splice_drop(t, c, f);
	f->shared = f->hole = 1;
	f->done = 0;
	c->bytes -= given;
	log_debug("job %s: iter_%09llu's %s is shared by no newer step: its memory is freed",
		  c->job, (unsigned long long)c->step, f->path);
	return given;
}

/* An orphan keeps only what it lends, and goes when it lends nothing
 * more. */
void memt__lend_release(struct memt *t, struct memt_cap *o, struct mt_file *of, int n)
{
	struct memt_cap **pp;
	uint64_t given;

	of->lent -= n;
	if ((o->lent -= n) > 0) {
		if (o->orphan && (given = memt__orphan_give_back(t, o, of))) {
			t->used -= given;
			memt_fd_redescribe(o);
		}
		return;
	}
	if (!o->orphan)
		return;
	for (pp = &t->orphans; *pp && *pp != o; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = o->next;
	memt__unlend(t, o);       /* the chunks it kept for files it lent */
	t->used -= o->bytes;
	memt_fd_forget(o);
	memt__to_spare(t, o);
	memt__cap_free(o);
}

void memt__unlend(struct memt *t, struct memt_cap *c)
{
	for (size_t i = 0; i < c->nfiles; i++) {
		struct mt_file *f = &c->files[i];
		if (f->from) {
			memt__lend_release(t, f->from, f->from_file, 1);
			f->from = NULL;
			f->from_file = NULL;
			f->done = 0;
		}
		/* newer steps sharing f whole read its chunks through c's
		 * mapping: those stay borrowed while f is lent */
		if (!f->lent)
			memt__splice_release(t, f);
	}
}

/* Under t->lock: job's newest committed step held older than step before
 * (at start-up, other ranks' copies of a step may be taken back before
 * one that shares their older step's files), or NULL. */
struct mt_entry *memt__newest_committed(struct memt *t, const char *job, uint64_t before)
{
	struct mt_entry *held = NULL;

	for (struct mt_entry *e = t->entries; e; e = e->next)
		if (!e->dropped && e->committed && !strcmp(e->job, job) && e->step < before &&
		    (!held || e->step > held->step))
			held = e;
	return held;
}

/* Under t->lock: the file of e at path, whole, with this size, digest
 * (any when d is NULL) and chunk size, and its bytes mapped; NULL when
 * there is none. */
static struct memt_cap *same_file(struct mt_entry *e, const char *path, uint64_t size,
				  const struct digest *d, uint64_t chunk_bytes,
				  struct mt_file **out)
{
	for (struct memt_cap *c = e ? e->caps : NULL; c; c = c->next)
		for (size_t i = 0; !c->failed && c->chunk_bytes == chunk_bytes &&
				   i < c->nfiles; i++) {
			struct mt_file *f = &c->files[i];
			if (f->done && f->size == size && !strcmp(f->path, path) &&
			    (!d || digest_eq(&f->digest, d)) && memt__file_bytes(c, f)) {
				*out = f;
				return c;
			}
		}
	return NULL;
}

struct memt_cap *memt__held_file(struct memt *t, const char *job, const char *path,
				 uint64_t size, const struct digest *d,
				 uint64_t chunk_bytes, struct mt_file **out)
{
	return same_file(memt__newest_committed(t, job, UINT64_MAX), path, size, d, chunk_bytes, out);
}

/* Under t->lock: shared file f of c found in held, job's newest committed
 * step here (same path, size, digest and chunk size): the capture that
 * has its bytes lends them.  0, or -ENOENT. */
int memt__borrow_file(struct mt_entry *held, struct memt_cap *c, struct mt_file *f)
{
	struct mt_file *of;
	struct memt_cap *oc = same_file(held, f->path, f->size, &f->digest,
					c->chunk_bytes, &of);

	if (!oc)
		return -ENOENT;
	/* from the capture that has the bytes: no chains */
	f->from = of->shared ? of->from : oc;
	f->from_file = of->shared ? of->from_file : of;
	f->from->lent++;
	f->from_file->lent++;
	memcpy(f->sums, of->sums, f->nsums * sizeof(*f->sums));
	f->filled = f->size;
	f->done = 1;
	return 0;
}

/* The file of c at path, with this size and chunk size, or NULL. */
static struct mt_file *cap_path(struct memt_cap *c, const char *path, uint64_t size,
				uint64_t chunk_bytes)
{
	for (size_t i = 0; !c->failed && c->chunk_bytes == chunk_bytes && i < c->nfiles; i++)
		if (c->files[i].size == size && !strcmp(c->files[i].path, path))
			return &c->files[i];
	return NULL;
}

struct memt_cap *memt__step_file(struct memt *t, const char *job, uint64_t step,
				 const char *path, uint64_t size, uint64_t chunk_bytes,
				 struct mt_file **out)
{
	for (struct mt_entry *e = t->entries; e; e = e->next)
		for (struct memt_cap *c = e->caps; !e->dropped && e->step == step &&
						    !strcmp(e->job, job) && c; c = c->next)
			if ((*out = cap_path(c, path, size, chunk_bytes)))
				return c;
	for (struct memt_cap *c = t->orphans; c; c = c->next)
		if (c->step == step && !strcmp(c->job, job) &&
		    (*out = cap_path(c, path, size, chunk_bytes)))
			return c;
	return NULL;
}

/* Under t->lock: every shared file and spliced chunk of c (of job's step)
 * not yet found, borrowed from job's newest committed step held here
 * before it (lender: a file not held is left out, not readable:
 * memt__adopt).  0, or -ENOENT with why (what was found is let go). */
int memt__borrow(struct memt *t, struct memt_cap *c, const char *job, uint64_t step,
		  int lender, char *why, size_t whylen)
{
	struct mt_entry *held = memt__newest_committed(t, job, step);

	for (size_t i = 0; i < c->nfiles; i++) {
		struct mt_file *f = &c->files[i];

		if (!f->shared && f->src) {
			if (memt__splice_borrow(t, c, f, job) == 0 || lender)
				continue;
			snprintf(why, whylen, "chunks of %s, shared with an older step, are no "
				 "longer in memory", f->path);
			memt__unlend(t, c);
			return -ENOENT;
		}
		if (!f->shared || f->from || memt__borrow_file(held, c, f) == 0 || lender)
			continue;
		snprintf(why, whylen, "%s, shared with an older step, is no longer in "
			 "memory", f->path);
		memt__unlend(t, c);
		return -ENOENT;
	}
	return 0;
}

int memt_can_share(struct memt *t, const char *job, const char *path, uint64_t size,
		   const struct digest *d, uint64_t chunk_bytes)
{
	struct mt_file *f;
	int r;

	if (!t || !t->budget)
		return 1;
	pthread_mutex_lock(&t->lock);
	r = memt__held_file(t, job, path, size, d, chunk_bytes, &f) != NULL;
	pthread_mutex_unlock(&t->lock);
	return r;
}

