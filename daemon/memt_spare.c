/* memt_spare.c - the memory tier's spare memory: what a dropped copy
 * leaves for the next capture of its size, and what is made ahead of a
 * job's first save (memt_reserve), so that no capture waits while the
 * kernel allocates and zeroes its pages.  A spare remembers the job and
 * rank it was made or last used for: their captures take it first, a
 * reservation counts it, and it goes when the job's last rank leaves. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "layout.h"
#include "log.h"
#include "memt.h"
#include "memt_int.h"
#include "rsave.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Under t->lock: push sp on the spare list, counted again. */
static void spare_push(struct memt *t, struct mt_spare *sp)
{
	sp->next = t->spares;
	t->spares = sp;
	t->spare_bytes += sp->bytes;
	t->used += sp->bytes;
}

/* Under t->lock: unlink *pp, no longer counted. */
static struct mt_spare *spare_unlink(struct memt *t, struct mt_spare **pp)
{
	struct mt_spare *sp = *pp;

	*pp = sp->next;
	sp->next = NULL;
	t->spare_bytes -= sp->bytes;
	t->used -= sp->bytes;
	return sp;
}

void memt__to_spare(struct memt *t, struct memt_cap *c)
{
	struct mt_spare *sp;

	/* what it claimed and never used goes back as it was */
	if (c->claimed)
		spare_push(t, c->claimed);
	while ((sp = c->gone)) {
		c->gone = sp->next;
		spare_push(t, sp);
	}
	c->claimed = NULL;
	/* (its own memory mapped back where chunks were spliced, else it
	 * is freed: memt__cap_free unmaps it) */
	if (!c->map || !c->len || memt__unsplice(c) < 0 || !(sp = malloc(sizeof(*sp))))
		return;
	*sp = (struct mt_spare){ NULL, c->fd, c->map, c->len, c->bytes, "", c->rank };
	snprintf(sp->job, sizeof(sp->job), "%s", c->e ? c->e->job : c->job);
	spare_push(t, sp);
	c->map = NULL;
	c->fd = -1;
}

void memt__spares_free(struct mt_spare *sp)
{
	while (sp) {
		struct mt_spare *next = sp->next;
		munmap(sp->map, sp->len);
		close(sp->fd);
		free(sp);
		sp = next;
	}
}

/* How far a spare's size may be from a capture's to serve it: a blob put
 * after the memory was reserved, a header that grew by a page. */
static uint64_t spare_slack(uint64_t len)
{
	return len / 16 + (1u << 20);
}

static int near(uint64_t size, uint64_t len)
{
	return (size > len ? size - len : len - size) <= spare_slack(len);
}

static int spare_mine(const struct mt_spare *sp, const char *job, int rank)
{
	return sp->rank == rank && !strcmp(sp->job, job);
}

/* sp resized to len bytes (page-aligned): its tail freed, or new pages
 * added and allocated now.  0 or -errno (sp is then unchanged). */
static int spare_fit(struct memt *t, struct mt_spare *sp, uint64_t len)
{
	void *m;

	if (sp->len == len)
		return 0;
	if (len < sp->len) {
		if (ftruncate(sp->fd, (off_t)len) < 0)
			return -errno;
		munmap(sp->map + len, sp->len - len);
		sp->len = len;
		sp->bytes = sp->bytes < len ? sp->bytes : len;
		return 0;
	}
	if (ftruncate(sp->fd, (off_t)len) < 0)
		return -errno;
	m = mremap(sp->map, sp->len, len, MREMAP_MAYMOVE);
	if (m == MAP_FAILED)
		return -errno;
	sp->map = m;
	if (madvise(sp->map + sp->len, len - sp->len, MADV_POPULATE_WRITE) < 0 &&
	    errno != EINVAL)
		return -errno;     /* (its pages would fault in when written) */
	memt__mem_lock(t, sp->map + sp->len, len - sp->len);
	sp->bytes += len - sp->len;
	sp->len = len;
	return 0;
}

void memt__claim(struct memt *t, struct memt_cap *c, const char *job)
{
	struct mt_spare **pp, **best = NULL;
	uint64_t best_d = UINT64_MAX;

	/* the nearest in size, one of this rank's first */
	for (pp = &t->spares; *pp; pp = &(*pp)->next) {
		struct mt_spare *sp = *pp;
		uint64_t d = sp->len > c->len ? sp->len - c->len : c->len - sp->len;
		if (!c->len || !near(sp->len, c->len))
			continue;
		if (!spare_mine(sp, job, c->rank))
			d += spare_slack(c->len) + 1;
		if (d < best_d) {
			best = pp;
			best_d = d;
		}
	}
	if (best)
		c->claimed = spare_unlink(t, best);
	/* what is over the budget goes: freed by the writer (this rank's
	 * spares of another size stay: a save that shares its frozen shards
	 * and one that copies them alternate; those of a layout that changed
	 * went when it changed, memt_unreserve) */
	for (pp = &t->spares; *pp; ) {
		struct mt_spare *sp = *pp;
		if (t->used > t->budget) {
			spare_unlink(t, pp)->next = c->gone;
			c->gone = sp;
		} else {
			pp = &sp->next;
		}
	}
}

static atomic_int frees_aside;    /* threads still freeing */

static void *free_thread(void *arg)
{
	memt__spares_free(arg);
	atomic_fetch_sub(&frees_aside, 1);
	return NULL;
}

void memt__frees_wait(void)
{
	while (atomic_load(&frees_aside) > 0)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
}

/* Free spares off the writer's path: giving back a GB of pages takes
 * ~0.2 s here, which the save's DURABLE would wait for. */
static void spares_free_aside(struct mt_spare *gone)
{
	pthread_attr_t at;
	pthread_t tid;

	if (!gone)
		return;
	atomic_fetch_add(&frees_aside, 1);
	if (pthread_attr_init(&at) == 0) {
		int r = pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED) ||
			pthread_create(&tid, &at, free_thread, gone);
		pthread_attr_destroy(&at);
		if (r == 0)
			return;
	}
	atomic_fetch_sub(&frees_aside, 1);
	memt__spares_free(gone);       /* (no thread: here) */
}

struct mt_spare *memt__spare_take(struct memt *t, struct memt_cap *c)
{
	struct mt_spare *sp, *gone;

	pthread_mutex_lock(&t->lock);
	sp = c->claimed;
	gone = c->gone;
	c->claimed = c->gone = NULL;
	pthread_mutex_unlock(&t->lock);
	spares_free_aside(gone);
	if (sp && spare_fit(t, sp, c->len) < 0) {
		memt__spares_free(sp);
		sp = NULL;
	}
	return sp;
}

/* New tier memory of len bytes (mapped len, or a page when 0): a memfd,
 * mapped shared.  0 or -errno, *fd and *map untouched on failure. */
int memt__mem_new(uint64_t len, int *fd, uint8_t **map)
{
	int f = memfd_create("ckpt-memt", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *m;
	int r;

	if (f < 0)
		return -errno;
	if (ftruncate(f, (off_t)len) < 0) {
		r = -errno;
		close(f);
		return r;
	}
	m = mmap(NULL, len ? len : PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	if (m == MAP_FAILED) {
		r = -errno;
		close(f);
		return r;
	}
	*fd = f;
	*map = m;
	return 0;
}

void memt__mem_lock(struct memt *t, void *p, uint64_t len)
{
	if (!t->lock_mem || !len || mlock(p, len) == 0)
		return;
	pthread_mutex_lock(&t->lock);
	if (!t->lock_warned++)
		log_warnx("memory tier: cannot lock its memory (%s): it may be "
			  "swapped out; raise LimitMEMLOCK (or vm.max_map_count, when "
			  "ckptd's memory mappings are at it)", strerror(errno));
	pthread_mutex_unlock(&t->lock);
}

uint64_t memt_cap_len(const struct rsave *rs, int shared)
{
	uint64_t len = 0;

	for (size_t i = 0; i < rs->nfiles; i++)
		if (!shared || !layout_frozen_shard(rs->files[i].path))
			len += (rs->files[i].size + PAGE - 1) & ~(uint64_t)(PAGE - 1);
	return len;
}

/* One spare of len bytes for job's rank, every page allocated and locked
 * now.  0 or -errno. */
static int spare_new(struct memt *t, const char *job, int rank, uint64_t len,
		     struct mt_spare **out)
{
	struct mt_spare *sp = calloc(1, sizeof(*sp));
	int r;

	if (!sp)
		return -ENOMEM;
	sp->len = sp->bytes = len;
	sp->rank = rank;
	snprintf(sp->job, sizeof(sp->job), "%s", job);
	if ((r = memt__mem_new(len, &sp->fd, &sp->map)) < 0) {
		free(sp);
		return r;
	}
	if (madvise(sp->map, len, MADV_POPULATE_WRITE) < 0 && errno != EINVAL) {
		r = -errno;
		memt__spares_free(sp);
		return r;
	}
	memt__mem_lock(t, sp->map, len);
	*out = sp;
	return 0;
}

/* Under t->lock: the memory job's rank has for captures of about len
 * bytes: its spares, and its captures in the job's live copies (the
 * newest committed step, a save in flight). */
static unsigned have(const struct memt *t, const char *job, int rank, uint64_t len)
{
	unsigned n = 0;

	for (const struct mt_spare *sp = t->spares; sp; sp = sp->next)
		n += spare_mine(sp, job, rank) && near(sp->len, len);
	for (const struct mt_entry *e = t->entries; e; e = e->next)
		for (const struct memt_cap *c = e->caps; !e->dropped && c; c = c->next)
			n += !strcmp(e->job, job) && c->rank == rank && !c->failed &&
			     near(c->len, len);
	return n;
}

int memt_reserve(struct memt *t, const char *job, int rank, uint64_t len, unsigned count)
{
	unsigned made = 0;
	int r = 0;

	if (!t || !t->budget || !len)
		return 0;
	for (;;) {
		struct mt_spare *sp = NULL;

		pthread_mutex_lock(&t->lock);
		if (have(t, job, rank, len) >= count) {
			pthread_mutex_unlock(&t->lock);
			break;
		}
		if (t->used + t->reserving + len > t->budget) {
			pthread_mutex_unlock(&t->lock);
			r = -ENOSPC;
			break;
		}
		t->reserving += len;
		pthread_mutex_unlock(&t->lock);

		r = spare_new(t, job, rank, len, &sp);

		pthread_mutex_lock(&t->lock);
		t->reserving -= len;
		/* a capture that started meanwhile has the room first */
		if (r == 0 && t->used + len <= t->budget) {
			spare_push(t, sp);
			sp = NULL;
			made++;
		}
		pthread_mutex_unlock(&t->lock);
		if (sp && r == 0)
			r = -ENOSPC;
		memt__spares_free(sp);
		if (r < 0)
			break;
	}
	return made ? (int)made : r;
}

/* Free the spares of job (rank < 0: any rank) of about len bytes (0: any
 * size), at most count (0: all). */
static void spares_drop(struct memt *t, const char *job, int rank, uint64_t len,
			unsigned count)
{
	struct mt_spare **pp, *gone = NULL;

	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	for (pp = &t->spares; *pp; ) {
		struct mt_spare *sp = *pp;
		if (strcmp(sp->job, job) || (rank >= 0 && sp->rank != rank) ||
		    (len && !near(sp->len, len))) {
			pp = &sp->next;
			continue;
		}
		spare_unlink(t, pp)->next = gone;
		gone = sp;
		if (count && !--count)
			break;
	}
	pthread_mutex_unlock(&t->lock);
	memt__spares_free(gone);
}

void memt_unreserve(struct memt *t, const char *job, int rank, uint64_t len, unsigned count)
{
	spares_drop(t, job, rank, len, count);
}

void memt_release_job(struct memt *t, const char *job)
{
	spares_drop(t, job, -1, 0, 0);
}
