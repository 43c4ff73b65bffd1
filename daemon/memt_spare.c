/* memt_spare.c - the memory tier's spare memory: what a dropped copy
 * leaves for the next capture of the same size, and what is made ahead
 * of a job's first save (memt_reserve), so that no capture waits while
 * the kernel allocates and zeroes its pages. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "memt.h"
#include "memt_int.h"
#include "rsave.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Under t->lock: c's memory becomes a spare (still counted in t->used);
 * the caller frees c. */
void memt__to_spare(struct memt *t, struct memt_cap *c)
{
	struct mt_spare *sp;

	if (!c->map || !c->len || !(sp = malloc(sizeof(*sp))))
		return;        /* (out of memory: memt__cap_free unmaps it) */
	*sp = (struct mt_spare){ t->spares, c->fd, c->map, c->len };
	t->spares = sp;
	t->spare_bytes += c->len;
	t->used += c->len;
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
	if (t->lock_mem)
		(void)mlock(sp->map + sp->len, len - sp->len);
	sp->len = len;
	return 0;
}

/* Writer thread: a spare for a capture of len bytes (page-aligned), or
 * NULL: one of exactly that size, else the nearest within spare_slack(),
 * resized.  Without one, spares are freed (here, off the loop thread)
 * until what the tier holds is within its budget. */
struct mt_spare *memt__spare_take(struct memt *t, uint64_t len)
{
	struct mt_spare **pp, **best = NULL, *sp = NULL, *gone = NULL;
	uint64_t best_d = spare_slack(len) + 1;

	if (!len)
		return NULL;
	pthread_mutex_lock(&t->lock);
	for (pp = &t->spares; *pp && best_d; pp = &(*pp)->next) {
		uint64_t d = (*pp)->len > len ? (*pp)->len - len : len - (*pp)->len;
		if (d < best_d) {
			best = pp;
			best_d = d;
		}
	}
	if (best) {
		sp = *best;
		*best = sp->next;
		t->spare_bytes -= sp->len;
		t->used -= sp->len;
	}
	while (!sp && t->spares && t->used > t->budget) {
		struct mt_spare *x = t->spares;
		t->spares = x->next;
		t->spare_bytes -= x->len;
		t->used -= x->len;
		x->next = gone;
		gone = x;
	}
	pthread_mutex_unlock(&t->lock);
	memt__spares_free(gone);
	if (sp && spare_fit(t, sp, len) < 0) {
		sp->next = NULL;
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

uint64_t memt_cap_len(const struct rsave *rs)
{
	uint64_t len = 0;

	for (size_t i = 0; i < rs->nfiles; i++)
		len += (rs->files[i].size + PAGE - 1) & ~(uint64_t)(PAGE - 1);
	return len;
}

/* One spare of len bytes, every page allocated and locked now.  0 or
 * -errno. */
static int spare_new(struct memt *t, uint64_t len, struct mt_spare **out)
{
	struct mt_spare *sp = calloc(1, sizeof(*sp));
	int r;

	if (!sp)
		return -ENOMEM;
	sp->len = len;
	if ((r = memt__mem_new(len, &sp->fd, &sp->map)) < 0) {
		free(sp);
		return r;
	}
	if (madvise(sp->map, len, MADV_POPULATE_WRITE) < 0 && errno != EINVAL) {
		r = -errno;
		memt__spares_free(sp);
		return r;
	}
	if (t->lock_mem && mlock(sp->map, len) < 0) {
		pthread_mutex_lock(&t->lock);
		if (!t->lock_warned++)
			log_warnx("memory tier: cannot lock its memory (%s): it may be "
				  "swapped out; raise LimitMEMLOCK", strerror(errno));
		pthread_mutex_unlock(&t->lock);
	}
	*out = sp;
	return 0;
}

int memt_reserve(struct memt *t, uint64_t len, unsigned count)
{
	unsigned made = 0;
	int r = 0;

	if (!t || !t->budget || !len)
		return 0;
	while (made < count) {
		struct mt_spare *sp = NULL;

		pthread_mutex_lock(&t->lock);
		if (t->used + t->reserving + len > t->budget) {
			pthread_mutex_unlock(&t->lock);
			break;
		}
		t->reserving += len;
		pthread_mutex_unlock(&t->lock);

		r = spare_new(t, len, &sp);

		pthread_mutex_lock(&t->lock);
		t->reserving -= len;
		/* a capture that started meanwhile has the room first */
		if (r == 0 && t->used + len <= t->budget) {
			sp->next = t->spares;
			t->spares = sp;
			t->spare_bytes += len;
			t->used += len;
			sp = NULL;
			made++;
		}
		pthread_mutex_unlock(&t->lock);
		if (sp || r < 0) {
			memt__spares_free(sp);
			break;
		}
	}
	return made ? (int)made : r;
}


void memt_unreserve(struct memt *t, uint64_t len, unsigned count)
{
	struct mt_spare **pp, *gone = NULL;

	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	for (pp = &t->spares; *pp && count; ) {
		struct mt_spare *sp = *pp;
		if (sp->len != len) {
			pp = &sp->next;
			continue;
		}
		*pp = sp->next;
		t->spare_bytes -= len;
		t->used -= len;
		sp->next = gone;
		gone = sp;
		count--;
	}
	pthread_mutex_unlock(&t->lock);
	memt__spares_free(gone);
}
