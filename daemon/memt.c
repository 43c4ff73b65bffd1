/* memt.c - see memt.h: the memory tier's steps and captures, from start
 * to commit or drop and read under a reference, within the budget (what
 * they share with older steps: memt_lend.c, memt_splice.c; reads:
 * memt_read.c). */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "memt.h"
#include "memt_int.h"
#include "mfst.h"
#include "rsave.h"
#include "shm_pool.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int memt_new(uint64_t budget, int lock, struct memt **out)
{
	struct memt *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	if (pthread_mutex_init(&t->lock, NULL)) {
		free(t);
		return -ENOMEM;
	}
	t->budget = budget;
	t->lock_mem = lock;
	*out = t;
	return 0;
}

static void cap_unmap(struct memt_cap *c)
{
	if (c->map)
		munmap(c->map, MAP_LEN(c));
	if (c->fd >= 0)
		close(c->fd);
	c->map = NULL;
	c->fd = -1;
}

void memt__cap_free(struct memt_cap *c)
{
	memt_fd_forget(c);
	cap_unmap(c);
	memt__spares_free(c->claimed);    /* (memt__to_spare gave them back) */
	memt__spares_free(c->gone);
	for (size_t i = 0; i < c->nfiles; i++) {
		free(c->files[i].path);
		free(c->files[i].sums);
		free(c->files[i].src);
		free(c->files[i].prev);
		free(c->files[i].klent);
		free(c->files[i].gone);
	}
	free(c->avoid);
	free(c->files);
	pthread_mutex_destroy(&c->alloc_lock);
	free(c);
}

const uint8_t *memt__file_bytes(const struct memt_cap *c, const struct mt_file *f)
{
	if (f->shared)
		return f->from && f->from->map ? f->from->map + f->from_file->off : NULL;
	return c->map ? c->map + f->off : NULL;
}

int memt__room_punch(struct memt_cap *c, const struct mt_file *f)
{
	if (c->fd < 0 || !ROOM(f->size) ||
	    fallocate(c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)f->off,
		      (off_t)ROOM(f->size)) == 0)
		return 0;
	log_warn("memory tier: cannot free the room of %s", f->path);
	return -1;
}

uint64_t memt__room_counted(const struct memt_cap *c, const struct mt_file *f)
{
	return ROOM(f->size) - memt__not_held(c, f);
}

/* Under t->lock: c, taken out of its step (its bytes no longer counted
 * there), goes: its memory to the spares, or, while newer captures share
 * its bytes, among the orphans (counted again, less the files it does
 * not lend; its own shared files are of no more use). */
static void cap_let_go(struct memt *t, struct memt_cap *c)
{
	uint64_t given = 0;

	memt__unlend(t, c);
	if (c->lent) {
		snprintf(c->job, sizeof(c->job), "%s", c->e->job);
		snprintf(c->txid, sizeof(c->txid), "%s", c->e->txid);
		c->step = c->e->step;
		for (size_t i = 0; i < c->nfiles; i++)
			given += memt__orphan_give_back(t, c, &c->files[i]);
		if (given)
			memt_fd_redescribe(c);
		c->orphan = 1;
		c->e = NULL;
		c->next = t->orphans;
		t->orphans = c;
		t->used += c->bytes;
		return;
	}
	memt_fd_forget(c);
	memt__to_spare(t, c);
	memt__cap_free(c);
}

/* Under t->lock: unlink and free e once it is dropped and nobody holds it. */
static void entry_maybe_free(struct memt *t, struct mt_entry *e)
{
	struct mt_entry **pp;

	if (!e->dropped || e->refs > 0)
		return;
	for (pp = &t->entries; *pp && *pp != e; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = e->next;
	t->used -= e->bytes;
	while (e->caps) {
		struct memt_cap *c = e->caps;
		e->caps = c->next;
		cap_let_go(t, c);
	}
	free(e);
}

static void entry_drop(struct memt *t, struct mt_entry *e)
{
	e->dropped = 1;
	entry_maybe_free(t, e);
}

void memt_free(struct memt *t)
{
	if (!t)
		return;
	/* what systemd's fd store holds stays there for the next start, as
	 * it is */
	t->closing = 1;
	for (struct mt_entry *e = t->entries; e; e = e->next)
		for (struct memt_cap *c = e->caps; c; c = c->next)
			c->fdname[0] = '\0';
	for (struct memt_cap *c = t->orphans; c; c = c->next)
		c->fdname[0] = '\0';
	while (t->entries) {
		t->entries->refs = 0;
		entry_drop(t, t->entries);
	}
	/* (the orphans went with the last files that shared them) */
	memt__spares_free(t->spares);
	memt__frees_wait();
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/* Under t->lock: remember why job's step is not kept (for memt_get). */
static void miss_note(struct memt *t, const char *job, uint64_t step, const char *why)
{
	unsigned i, n = t->nmiss < MISS_MAX ? t->nmiss : MISS_MAX;

	for (i = 0; i < n && strcmp(t->miss[i].job, job); i++)
		;
	if (i == n)
		i = t->nmiss++ % MISS_MAX;
	snprintf(t->miss[i].job, sizeof(t->miss[i].job), "%s", job);
	t->miss[i].step = step;
	snprintf(t->miss[i].why, sizeof(t->miss[i].why), "%s", why);
}

static void mib(char *buf, size_t len, uint64_t bytes)
{
	snprintf(buf, len, "%.1f MiB", (double)bytes / 1048576.0);
}

static struct memt_cap *cap_new(const struct rsave *rs, uint64_t *len)
{
	struct memt_cap *c = calloc(1, sizeof(*c));
	uint64_t off = 0;

	if (!c)
		return NULL;
	c->fd = -1;
	c->rank = rs->rank;
	c->chunk_bytes = rs->chunk_bytes;
	c->whole = rs->memt_whole;
	c->files = calloc(rs->nfiles + 1, sizeof(*c->files));
	if (!c->files || pthread_mutex_init(&c->alloc_lock, NULL)) {
		free(c->files);
		free(c);
		return NULL;
	}
	c->nfiles = rs->nfiles;
	for (size_t i = 0; i < rs->nfiles; i++) {
		struct mt_file *f = &c->files[i];
		f->path = strdup(rs->files[i].path);
		f->size = rs->files[i].size;
		/* (a file linked unstaged has no chunks planned) */
		f->nsums = (f->size + c->chunk_bytes - 1) / c->chunk_bytes;
		f->sums = calloc(f->nsums + 1, sizeof(*f->sums));
		if (!f->path || !f->sums) {
			memt__cap_free(c);
			return NULL;
		}
		/* a frozen shard linked unstaged: shared (memt_cap_start) */
		if ((f->shared = rs->files[i].linked)) {
			f->digest = rs->files[i].digest;
			continue;
		}
		f->off = off;
		off += ROOM(f->size);
	}
	c->len = c->bytes = *len = off;
	return c;
}

/* The live entry of job's step, or a new one (NULL: out of memory); under
 * t->lock.  A capture (committed 0) joins only one not yet committed, an
 * adopted copy (committed 1) any. */
static struct mt_entry *entry_get(struct memt *t, const char *job, uint64_t step,
				  const char *txid, int committed)
{
	struct mt_entry *e;

	for (e = t->entries; e; e = e->next)
		if (!e->dropped && e->step == step && !strcmp(e->job, job) &&
		    (committed || !e->committed))
			return e;
	if (!(e = calloc(1, sizeof(*e))))
		return NULL;
	e->t = t;
	snprintf(e->job, sizeof(e->job), "%s", job);
	snprintf(e->txid, sizeof(e->txid), "%s", txid);
	e->step = step;
	e->committed = committed;
	e->next = t->entries;
	t->entries = e;
	return e;
}

static int was_aborted(const struct memt *t, const char *job, uint64_t step);

int memt__cap_insert(struct memt *t, const char *job, uint64_t step, const char *txid,
		     struct memt_cap *c, int committed, char *why, size_t whylen)
{
	struct mt_entry *e, *next;
	uint64_t need = c->bytes;
	char a[32], b[32], h[32];
	int r;

	pthread_mutex_lock(&t->lock);
	/* first: making room may drop the step it shares with */
	if ((r = memt__borrow(t, c, job, step, 0, why, whylen)) < 0)
		goto out;
	/* the job's older copy makes room for its newer one; spares are
	 * memory the capture may take, or free first */
	for (e = t->entries; e && t->used - t->spare_bytes + need > t->budget; e = next) {
		next = e->next;
		if (!e->dropped && e->committed && !e->pinned && !strcmp(e->job, job) &&
		    e->step < step) {
			log_debug("job %s: memory tier drops iter_%09llu to make room for "
				  "step %llu", job, (unsigned long long)e->step,
				  (unsigned long long)step);
			entry_drop(t, e);
		}
	}
	if (t->used - t->spare_bytes + need > t->budget) {
		mib(a, sizeof(a), need);
		mib(b, sizeof(b), t->budget);
		mib(h, sizeof(h), t->used - t->spare_bytes);
		if (need > t->budget)
			snprintf(why, whylen, "rank %d's %s do not fit memory_tier_bytes (%s): "
				 "larger than the whole tier", c->rank, a, b);
		else
			snprintf(why, whylen, "rank %d's %s do not fit memory_tier_bytes (%s, "
				 "%s held by other steps)", c->rank, a, b, h);
		miss_note(t, job, step, why);
		r = -ENOSPC;
		goto out;
	}
	if (!committed && was_aborted(t, job, step)) {
		/* a partner's copy that arrives after its step's abort */
		snprintf(why, whylen, "step %llu was aborted", (unsigned long long)step);
		r = -ECANCELED;
		goto out;
	}
	e = entry_get(t, job, step, txid, committed);
	if (!e || (committed && (!e->committed || strcmp(e->txid, txid)))) {
		snprintf(why, whylen, e ? "another save of step %llu is held" : "out of memory",
			 (unsigned long long)step);
		r = e ? -EEXIST : -ENOMEM;
		goto out;
	}
	c->e = e;
	c->next = e->caps;
	e->caps = c;
	e->refs++;
	e->bytes += need;
	t->used += need;
	/* the spare it will use (the same memory: not counted twice) */
	memt__claim(t, c, job);
out:
	if (r < 0)
		memt__unlend(t, c);
	pthread_mutex_unlock(&t->lock);
	return r;
}

struct memt_cap *memt_cap_start(struct memt *t, const char *job, uint64_t step,
				const char *txid, const struct rsave *rs,
				char *why, size_t whylen)
{
	struct memt_cap *c;
	uint64_t need;

	why[0] = '\0';
	if (!t || !t->budget)
		return NULL;
	if (!(c = cap_new(rs, &need))) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	/* a capture of shared files alone still has its memfd: the fd
	 * store's description of it goes there */
	if (need == 0 && memt__mem_new(0, &c->fd, &c->map) < 0) {
		snprintf(why, whylen, "out of memory");
		memt__cap_free(c);
		return NULL;
	}
	if (memt__cap_insert(t, job, step, txid, c, 0, why, whylen) < 0) {
		memt__cap_free(c);
		return NULL;
	}
	for (size_t i = 0; i < c->nfiles; i++)       /* frozen shards linked */
		if (c->files[i].shared)
			__atomic_fetch_add(&t->shared, c->files[i].size, __ATOMIC_RELAXED);
	return c;
}

/* Writer thread: the capture's memory, made on first use (its cost is
 * proportional to the bytes, so not on the loop thread).  0 or -errno. */
int memt__cap_populate(struct memt_cap *c, uint64_t off, uint64_t len)
{
	uint64_t a = off & ~(uint64_t)(PAGE - 1), b = (off + len + PAGE - 1) & ~(uint64_t)(PAGE - 1);

	if (b > c->len)
		b = c->len;
	if (b > a && madvise(c->map + a, b - a, MADV_POPULATE_WRITE) < 0 && errno != EINVAL)
		return -errno;
	return 0;
}

/* memt__cap_alloc, under c->alloc_lock. */
static int cap_alloc_locked(struct memt_cap *c, struct memt *t)
{
	struct mt_spare *sp;
	int r;

	if (c->map || c->failed)
		return c->map ? 0 : -ENOMEM;
	if ((sp = memt__spare_take(t, c))) {    /* allocated, zeroed, locked */
		c->fd = sp->fd;
		c->map = sp->map;
		c->unmade = sp->bytes < sp->len;  /* an earlier capture's holes */
		free(sp);
		for (size_t i = 0; i < c->nfiles; i++)
			if (c->files[i].hole)
				memt__room_punch(c, &c->files[i]);
		return 0;
	}
	if ((r = memt__mem_new(c->len, &c->fd, &c->map)) == 0) {
		c->unmade = 1;
		return 0;
	}
	c->failed = 1;
	snprintf(c->why, sizeof(c->why), "cannot allocate %llu bytes: %s%s",
		 (unsigned long long)c->len, strerror(-r), r == -ENOMEM ?
		 " (the node's memory, or ckptd's memory mappings: vm.max_map_count)" : "");
	return r;
}

int memt__cap_alloc(struct memt_cap *c, struct memt *t)
{
	int r;

	pthread_mutex_lock(&c->alloc_lock);
	r = cap_alloc_locked(c, t);
	pthread_mutex_unlock(&c->alloc_lock);
	return r;
}

void memt__lock_bytes(struct memt *t, struct memt_cap *c)
{
	uint64_t off, len;

	for (size_t i = 0; t->lock_mem && c->map && i < c->nfiles; i++)
		for (uint64_t k = 0; (len = memt__own_piece(c, &c->files[i], k, &off)) != UINT64_MAX; k++)
			if (len)
				memt__mem_lock(t, c->map + off, len);
}

uint64_t memt_cap_sent(const struct memt_cap *c)
{
	uint64_t n = 0;

	for (size_t i = 0; i < c->nfiles; i++)
		n += c->files[i].shared ? 0 : memt__room_counted(c, &c->files[i]);
	return n;
}

/* File fi of c, unless it is shared already. */
static struct mt_file *cap_file(struct memt_cap *c, size_t fi)
{
	return c && fi < c->nfiles && !c->files[fi].shared ? &c->files[fi] : NULL;
}

int memt_cap_may_share(struct memt_cap *c, size_t fi, const struct digest *d)
{
	struct mt_file *f = cap_file(c, fi);

	/* (a capture exists: the tier is on) */
	return f && memt_can_share(c->e->t, c->e->job, f->path, f->size, d, c->chunk_bytes);
}

int memt_cap_same(struct memt_cap *c, size_t fi, const struct digest *d)
{
	struct mt_file *f = cap_file(c, fi);
	struct memt *t;
	int r;

	if (!f)
		return -ENOENT;
	t = c->e->t;
	pthread_mutex_lock(&c->alloc_lock);
	/* its memfd exists, even when every file is shared: the fd store's
	 * description of it goes there */
	if ((r = cap_alloc_locked(c, t)) == 0) {
		pthread_mutex_lock(&t->lock);
		f->digest = *d;
		f->shared = 1;
		if (c->e->dropped ||
		    memt__borrow_file(memt__newest_committed(t, c->e->job, c->e->step), c, f) < 0) {
			f->shared = 0;
			r = -ENOENT;
		} else {
			uint64_t room = memt__room_counted(c, f);
			__atomic_fetch_add(&t->shared, f->size, __ATOMIC_RELAXED);
			f->hole = 1;
			c->bytes -= room;
			c->e->bytes -= room;
			t->used -= room;
		}
		pthread_mutex_unlock(&t->lock);
		if (r == 0)
			memt__room_punch(c, f);
	}
	pthread_mutex_unlock(&c->alloc_lock);
	return r;
}

void memt_cap_chunk(struct memt_cap *c, size_t fi, uint64_t k, const void *buf,
		    size_t len)
{
	struct mt_file *f;
	uint64_t off;
	int r;

	if (!c || fi >= c->nfiles || memt__cap_alloc(c, c->e->t) < 0)
		return;
	f = &c->files[fi];
	off = k * c->chunk_bytes;
	if (k >= f->nsums || off + len > f->size) {   /* cannot happen: plan.c */
		f->filled = UINT64_MAX;
		return;
	}
	if (!f->looked)
		memt__splice_look(c, f);
	f->sums[k] = memt__block_sum(buf, len);
	if (f->prev && (r = memt__splice_chunk(c, f, k, buf, len)) != -1) {
		f->filled = r == 0 ? f->filled + len : UINT64_MAX;
		if (r == 0)
			__atomic_fetch_add(&c->e->t->shared, len, __ATOMIC_RELAXED);
		return;
	}
	/* the file's room, allocated in one call rather than a fault per
	 * page (ENOMEM: the node has not the memory; a write would SIGBUS);
	 * a chunk at a time when chunks may be spliced */
	if (c->unmade && (k == 0 || f->prev)) {
		uint64_t a = f->prev ? f->off + off : f->off;
		uint64_t n = f->prev ? ROOM(len) : ROOM(f->size);
		if (memt__cap_populate(c, a, n) < 0) {
			f->filled = UINT64_MAX;
			return;
		}
		memt__mem_lock(c->e->t, c->map + a, n);
	}
	shm_pool_copy(c->map + f->off + off, buf, len);
	f->filled += len;
	__atomic_fetch_add(&c->e->t->copied, len, __ATOMIC_RELAXED);
}

void memt_cap_file_done(struct memt_cap *c, size_t fi, const struct digest *d)
{
	struct mt_file *f;

	if (!c || fi >= c->nfiles || c->files[fi].shared)
		return;                 /* (shared: memt_cap_same) */
	f = &c->files[fi];
	if (f->size == 0 && memt__cap_alloc(c, c->e->t) < 0)
		return;
	f->digest = *d;
	f->done = f->filled == f->size;
}

/* Under t->lock: take capture c out of its entry and free it. */
static void cap_discard(struct memt *t, struct memt_cap *c)
{
	struct mt_entry *e = c->e;
	struct memt_cap **pp;

	for (pp = &e->caps; *pp && *pp != c; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = c->next;
	e->bytes -= c->bytes;
	t->used -= c->bytes;
	cap_let_go(t, c);
}

enum { KEEP = 0, DROP, DROP_UNCOMMITTED };

/* Let go of a capture's reference: kept, taken out and freed (DROP), or
 * that only while its step is not committed (a rank save dropped before
 * its step ended).  One being sent to a partner goes when the send lets go
 * of it. */
static void cap_unref(struct memt_cap *c, int how)
{
	struct mt_entry *e = c->e;
	struct memt *t = e->t;

	pthread_mutex_lock(&t->lock);
	if (!e->dropped && (how == DROP || (how == DROP_UNCOMMITTED && !e->committed))) {
		if (c->holds)
			c->discard = 1;
		else
			cap_discard(t, c);
	}
	e->refs--;
	if (!e->caps && !e->committed)
		e->dropped = 1;
	entry_maybe_free(t, e);
	pthread_mutex_unlock(&t->lock);
}

void memt_cap_put(struct memt_cap *c)
{
	if (c)
		cap_unref(c, DROP_UNCOMMITTED);
}

void memt__cap_end(struct memt_cap *c, int ok)
{
	cap_unref(c, ok ? KEEP : DROP);
}

void memt_cap_hold(struct memt_cap *c)
{
	pthread_mutex_lock(&c->e->t->lock);
	c->holds++;
	c->e->refs++;
	pthread_mutex_unlock(&c->e->t->lock);
}

void memt_cap_release(struct memt_cap *c)
{
	struct mt_entry *e = c->e;
	struct memt *t = e->t;

	pthread_mutex_lock(&t->lock);
	if (--c->holds == 0 && c->discard && !e->dropped)
		cap_discard(t, c);
	e->refs--;
	entry_maybe_free(t, e);
	pthread_mutex_unlock(&t->lock);
}

static struct mt_entry *entry_find(struct memt *t, const char *job, uint64_t step,
				   int committed)
{
	for (struct mt_entry *e = t->entries; e; e = e->next)
		if (!e->dropped && e->committed == committed && e->step == step &&
		    !strcmp(e->job, job))
			return e;
	return NULL;
}

void memt_step_committed(struct memt *t, const char *job, uint64_t step)
{
	struct mt_entry *e, *o, *next;
	int usable = 0;

	if (!t || !t->budget)
		return;
	pthread_mutex_lock(&t->lock);
	e = entry_find(t, job, step, 0);
	/* the job's older copies are of no more use, held here or not:
	 * committed ones (pinned too), and uncommitted ones nobody fills any
	 * more (a partner's copy of a step whose outcome never came) */
	for (o = t->entries; o; o = next) {
		next = o->next;
		if (o != e && !o->dropped && !strcmp(o->job, job) && o->step < step &&
		    (o->committed || !o->refs))
			entry_drop(t, o);
	}
	if (!e)
		goto out;
	/* a capture that is not whole is of no use: its memory goes now */
	for (struct memt_cap *c = e->caps, *cn; c; c = cn) {
		cn = c->next;
		for (size_t i = 0; i < c->nfiles && !c->failed; i++)
			if (!c->files[i].done) {
				c->failed = 1;
				snprintf(c->why, sizeof(c->why), "%s was not captured whole",
					 c->files[i].path);
			}
		if (c->failed) {
			char why[200];
			snprintf(why, sizeof(why), "rank %d: %s", c->rank, c->why);
			log_warnx("job %s: iter_%09llu is not kept in memory: %s", job,
				  (unsigned long long)step, why);
			miss_note(t, job, step, why);
			e->bytes -= c->bytes;
			t->used -= c->bytes;
			memt__unlend(t, c);
			memt__to_spare(t, c);
			cap_unmap(c);         /* (a spare now, unless out of memory) */
			c->len = c->bytes = 0;
		}
		usable += !c->failed;
	}
	e->committed = 1;
	for (o = t->entries; o; o = o->next)      /* one copy per job: the newest */
		if (o != e && !o->dropped && o->committed && o->step > step &&
		    !strcmp(o->job, job))
			break;
	if (o || !usable) {
		entry_drop(t, e);
		goto out;
	}
	for (o = t->entries; o; o = next) {        /* (older ones went above) */
		next = o->next;
		if (o != e && !o->dropped && o->committed && !strcmp(o->job, job))
			entry_drop(t, o);
	}
	for (struct memt_cap *c = e->caps; c; c = c->next)
		if (!c->failed)
			memt_fd_keep(e, c);     /* survives a restart under systemd */
	log_debug("job %s: iter_%09llu kept in memory (%llu bytes)", job,
		  (unsigned long long)step, (unsigned long long)e->bytes);
out:
	pthread_mutex_unlock(&t->lock);
}

void memt_step_pin(struct memt *t, const char *job, uint64_t step)
{
	struct mt_entry *e;

	if (!t || !t->budget)
		return;
	pthread_mutex_lock(&t->lock);
	if ((e = entry_find(t, job, step, 1)))
		e->pinned = 1;
	pthread_mutex_unlock(&t->lock);
}

void memt_step_failed(struct memt *t, const char *job, uint64_t step)
{
	struct mt_entry *e;

	if (!t || !t->budget)
		return;
	pthread_mutex_lock(&t->lock);
	if ((e = entry_find(t, job, step, 0)))
		entry_drop(t, e);
	pthread_mutex_unlock(&t->lock);
}

void memt_step_aborted(struct memt *t, const char *job, uint64_t step)
{
	unsigned k;

	if (!t || !t->budget)
		return;
	memt_step_failed(t, job, step);
	pthread_mutex_lock(&t->lock);
	k = t->naborted++ % ABORTED_MAX;
	snprintf(t->aborted[k].job, sizeof(t->aborted[k].job), "%s", job);
	t->aborted[k].step = step;
	pthread_mutex_unlock(&t->lock);
}

/* Under t->lock: was job's step aborted by the cluster (memt_step_aborted)? */
static int was_aborted(const struct memt *t, const char *job, uint64_t step)
{
	for (unsigned i = 0; i < ABORTED_MAX && i < t->naborted; i++)
		if (t->aborted[i].step == step && !strcmp(t->aborted[i].job, job))
			return 1;
	return 0;
}

struct memt_step *memt_get(struct memt *t, const char *job, uint64_t step,
			   const char *txid, char *why, size_t whylen)
{
	struct mt_entry *e;

	if (!t || !t->budget) {
		snprintf(why, whylen, "the memory tier is off (memory_tier_bytes 0)");
		return NULL;
	}
	pthread_mutex_lock(&t->lock);
	e = entry_find(t, job, step, 1);
	if (e && !strcmp(e->txid, txid)) {
		e->refs++;
		pthread_mutex_unlock(&t->lock);
		return (struct memt_step *)e;
	}
	snprintf(why, whylen, "not in memory (ckptd started after it was saved, or a "
		 "newer step replaced it)");
	if (e)
		snprintf(why, whylen, "the copy in memory is of another save of this step");
	for (unsigned i = 0; i < MISS_MAX && i < t->nmiss; i++)
		if (t->miss[i].step == step && !strcmp(t->miss[i].job, job))
			snprintf(why, whylen, "not kept in memory: %s", t->miss[i].why);
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

void memt_put(struct memt_step *s)
{
	struct mt_entry *e = (struct mt_entry *)s;
	struct memt *t;

	if (!e)
		return;
	t = e->t;
	pthread_mutex_lock(&t->lock);
	e->refs--;
	entry_maybe_free(t, e);
	pthread_mutex_unlock(&t->lock);
}

void memt_distrust(struct memt_step *s)
{
	struct mt_entry *e = (struct mt_entry *)s;

	pthread_mutex_lock(&e->t->lock);
	e->dropped = 1;        /* freed by the last memt_put */
	miss_note(e->t, e->job, e->step, "its memory copy failed its checksum");
	pthread_mutex_unlock(&e->t->lock);
}

int memt_holds(struct memt *t, const char *job, uint64_t step, const char *txid,
	       const struct mfst_file *mf)
{
	struct mt_entry *e;
	struct mt_file *f;
	int r = 0;

	if (!t || !t->budget)
		return 0;
	pthread_mutex_lock(&t->lock);
	e = entry_find(t, job, step, 1);
	r = e && !strcmp(e->txid, txid) && memt__file_find(e, mf, &f);
	pthread_mutex_unlock(&t->lock);
	return r;
}

int memt__adopt(struct memt *t, const char *job, uint64_t step, const char *txid,
		struct memt_cap *c, int lender, char *why, size_t whylen)
{
	struct mt_entry *e;
	int r = 0;

	pthread_mutex_lock(&t->lock);
	for (e = t->entries; e; e = e->next)        /* a newer copy of the job wins */
		if (!e->dropped && !strcmp(e->job, job) && (e->step > step ||
		    (e->step == step && strcmp(e->txid, txid))))
			break;
	if (e || t->used - t->spare_bytes + c->bytes > t->budget) {
		r = e ? -EEXIST : -ENOSPC;
		snprintf(why, whylen, e ? "a newer copy of the job is kept" :
			 "it does not fit memory_tier_bytes");
		goto out;
	}
	/* older steps stay until every copy of the newest is taken back
	 * (memt__drop_older): its ranks' copies may borrow from any of them */
	if ((r = memt__borrow(t, c, job, step, lender, why, whylen)) < 0)
		goto out;
	e = entry_get(t, job, step, txid, 1);
	if (!e) {
		snprintf(why, whylen, "out of memory");
		r = -ENOMEM;
		goto out;
	}
	c->e = e;
	c->next = e->caps;
	e->caps = c;
	e->bytes += c->bytes;
	t->used += c->bytes;
out:
	if (r < 0)
		memt__unlend(t, c);
	pthread_mutex_unlock(&t->lock);
	return r;
}

int memt__drop_older(struct memt *t, const char *job, uint64_t step)
{
	struct mt_entry *e, *next;
	int n = 0, held;

	pthread_mutex_lock(&t->lock);
	held = entry_find(t, job, step, 1) != NULL;
	for (e = t->entries; e; e = next) {
		next = e->next;
		if (!e->dropped && e->committed && e->step < step && !strcmp(e->job, job)) {
			entry_drop(t, e);
			n++;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return held ? 0 : n;
}

void memt_usage(struct memt *t, struct memt_usage *u)
{
	*u = (struct memt_usage){ 0 };
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	for (struct mt_entry *e = t->entries; e; e = e->next)
		u->steps += !e->dropped && e->committed;
	u->held = t->used;
	u->spare = t->spare_bytes;
	u->reserving = t->reserving;
	u->budget = t->budget;
	pthread_mutex_unlock(&t->lock);
	u->copied = __atomic_load_n(&t->copied, __ATOMIC_RELAXED);
	u->shared = __atomic_load_n(&t->shared, __ATOMIC_RELAXED);
}
