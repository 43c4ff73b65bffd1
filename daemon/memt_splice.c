/* memt_splice.c - chunks of a changed file held once: a chunk the same as
 * in the job's newest committed step is not copied into a capture; that
 * step's pages are mapped over the chunk's room (mmap MAP_FIXED of its
 * memfd, read-only), so every reader still sees one contiguous file, and
 * the room in the capture's own memfd stays a hole, not counted.  The
 * capture that holds the bytes lends them (mt_file.lent) while they are
 * mapped here, and an older step keeps only the chunks lent.  Described
 * chunks (after a restart, from a partner) are found again in the step
 * they came from and mapped the same way.  As each lender is a memfd and
 * each run of spliced chunks a mapping, a capture splices from at most
 * ORIGINS_MAX steps and at most RUNS_MAX runs; the rest is copied. */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "log.h"
#include "memt_int.h"

uint64_t memt__cap_step(const struct memt_cap *c)
{
	return c->e ? c->e->step : c->step;
}

/* Chunk k of f: bytes [*off, + *room) of c's memfd, len of them data. */
static uint64_t chunk_room(const struct memt_cap *c, const struct mt_file *f, uint64_t k,
			   uint64_t *off)
{
	uint64_t at = k * c->chunk_bytes;
	uint64_t len = f->size - at < c->chunk_bytes ? f->size - at : c->chunk_bytes;

	*off = f->off + at;
	return ROOM(len);
}

static int spliced(const struct mt_file *f, uint64_t k)
{
	return f->src && f->src[k].on;
}

static int gone(const struct mt_file *f, uint64_t k)
{
	return f->gone && f->gone[k];
}

uint64_t memt__not_held(const struct memt_cap *c, const struct mt_file *f)
{
	uint64_t n = 0, off;

	for (uint64_t k = 0; (f->src || f->gone) && k < f->nsums; k++)
		if (spliced(f, k) || gone(f, k))
			n += chunk_room(c, f, k, &off);
	return n;
}

/* Under t->lock: where chunk k of file of (of capture oc) really is: the
 * capture whose memfd has its pages.  0, or -1 when it is nowhere. */
static int origin(struct memt_cap *oc, struct mt_file *of, uint64_t k, struct mt_src *out)
{
	if (of->shared) {                 /* its bytes are another file's */
		if (!of->from)
			return -1;
		oc = of->from;
		of = of->from_file;
	}
	if (spliced(of, k)) {
		if (!of->src[k].c)
			return -1;
		*out = of->src[k];
		return 0;
	}
	if (!oc->map || oc->fd < 0 || of->hole || gone(of, k))
		return -1;
	*out = (struct mt_src){ oc, of, memt__cap_step(oc), 1 };
	return 0;
}

/* Under t->lock: chunk k held by s is spliced once more.  0, or -1 (out of
 * memory). */
static int lend(const struct mt_src *s, uint64_t k)
{
	if (!s->f->klent && !(s->f->klent = calloc(s->f->nsums, sizeof(*s->f->klent))))
		return -1;
	s->f->klent[k]++;
	s->f->klent_sum++;
	s->c->lent++;
	s->f->lent++;
	return 0;
}

uint64_t memt__own_piece(const struct memt_cap *c, const struct mt_file *f, uint64_t k,
			 uint64_t *off)
{
	uint64_t len;

	if (!f->src && !f->gone) {
		*off = f->off;
		return k ? UINT64_MAX : f->shared ? 0 : ROOM(f->size);
	}
	if (k >= f->nsums)
		return UINT64_MAX;
	len = chunk_room(c, f, k, off);
	return f->shared || spliced(f, k) || gone(f, k) ? 0 : len;
}

/* Under t->lock: n chunks spliced from of (of capture o) let go. */
static void unlend(struct memt *t, struct memt_cap *o, struct mt_file *of, uint64_t k, int n)
{
	for (uint64_t j = k; j < k + (uint64_t)n; j++)
		of->klent[j]--;
	of->klent_sum -= (uint64_t)n;
	memt__lend_release(t, o, of, n);
}

/* Map chunk k of f, held by s, over c's memory; its room in c's memfd
 * gives back what pages it has (a spare's). */
static int map_chunk(struct memt_cap *c, struct mt_file *f, uint64_t k, const struct mt_src *s)
{
	uint64_t off, src_off, room = chunk_room(c, f, k, &off);

	(void)chunk_room(s->c, s->f, k, &src_off);
	if (mmap(c->map + off, room, PROT_READ, MAP_SHARED | MAP_FIXED, s->c->fd,
		 (off_t)src_off) == MAP_FAILED)
		return -errno;
	if (fallocate(c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
		      (off_t)room) < 0)
		log_warn("memory tier: cannot free a spliced chunk of %s", f->path);
	return 0;
}

/* Map c's own memory back over chunk k of f (a failed MAP_FIXED may
 * leave the range unmapped). */
static int map_own(struct memt_cap *c, const struct mt_file *f, uint64_t k)
{
	uint64_t off, room = chunk_room(c, f, k, &off);

	if (mmap(c->map + off, room, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, c->fd,
		 (off_t)off) == MAP_FAILED)
		return -errno;
	return 0;
}

static int by_value(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static int by_count(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;      /* {step, chunks}, most chunks first */

	return (x[1] < y[1]) - (x[1] > y[1]);
}

/* Under t->lock: the steps capture c should not splice from, in c->avoid:
 * where the chunks of oc (the step held, c's rank) come from more than
 * ORIGINS_MAX - 1 steps, those that hold the fewest of them.  Each such
 * step lives while it lends a chunk (a memfd, its mappings, a place in
 * systemd's fd store): a change that moves through the files would
 * otherwise keep one step per chunk.  Their chunks are copied again,
 * once. */
static void avoid_scattered(struct memt_cap *oc, struct memt_cap *c)
{
	uint64_t n = 0, nruns = 0, all = 0;
	uint64_t *steps, (*runs)[2];
	struct mt_src s;

	for (size_t i = 0; i < oc->nfiles; i++)
		all += oc->files[i].nsums;
	steps = malloc((all + 1) * sizeof(*steps));
	runs = malloc((all + 1) * sizeof(*runs));
	if (!steps || !runs)
		goto out;
	for (size_t i = 0; i < oc->nfiles; i++)
		for (uint64_t k = 0; k < oc->files[i].nsums; k++)
			if (origin(oc, &oc->files[i], k, &s) == 0)
				steps[n++] = s.step;
	qsort(steps, n, sizeof(*steps), by_value);
	for (uint64_t i = 0; i < n; i++) {
		if (!nruns || runs[nruns - 1][0] != steps[i]) {
			runs[nruns][0] = steps[i];
			runs[nruns++][1] = 0;
		}
		runs[nruns - 1][1]++;
	}
	if (nruns < ORIGINS_MAX || !(c->avoid = malloc(nruns * sizeof(*c->avoid))))
		goto out;
	qsort(runs, nruns, sizeof(*runs), by_count);
	for (uint64_t i = ORIGINS_MAX - 1; i < nruns; i++)
		c->avoid[c->navoid++] = runs[i][0];
	qsort(c->avoid, c->navoid, sizeof(*c->avoid), by_value);
out:
	free(steps);
	free(runs);
}

void memt__splice_look(struct memt_cap *c, struct mt_file *f)
{
	struct memt *t = c->e->t;
	struct memt_cap *oc;
	struct mt_file *of;

	f->looked = 1;
	if (c->whole || f->shared || c->chunk_bytes % PAGE)
		return;
	pthread_mutex_lock(&t->lock);
	if (!c->e->dropped && (oc = memt__held_file(t, c->e->job, f->path, f->size, NULL,
						    c->chunk_bytes, &of)) &&
	    (f->prev = malloc(f->nsums * sizeof(*f->prev)))) {
		memcpy(f->prev, of->sums, f->nsums * sizeof(*f->prev));
		if (!c->looked)
			avoid_scattered(oc, c);
		c->looked = 1;
	}
	pthread_mutex_unlock(&t->lock);
}

/* Under t->lock: may chunk k of f (of c) be spliced from s?  Not from a
 * step c avoids, nor as a new run once c has RUNS_MAX (each run is a
 * mapping of its own); *run: it starts one. */
static int may_splice(const struct memt_cap *c, const struct mt_file *f, uint64_t k,
		      const struct mt_src *s, int *run)
{
	*run = !(k && f->src[k - 1].on && f->src[k - 1].c == s->c && f->src[k - 1].f == s->f);
	if (*run && c->runs >= RUNS_MAX)
		return 0;
	return !c->navoid || !bsearch(&s->step, c->avoid, c->navoid, sizeof(*c->avoid), by_value);
}

int memt__splice_chunk(struct memt_cap *c, struct mt_file *f, uint64_t k, const void *buf,
		       size_t len)
{
	struct memt *t = c->e->t;
	struct memt_cap *oc;
	struct mt_file *of;
	struct mt_src s;
	uint64_t off, room = chunk_room(c, f, k, &off);
	const uint8_t *there;
	int r = 0, run;

	if (!f->prev || f->prev[k] != f->sums[k] ||
	    (!f->src && !(f->src = calloc(f->nsums, sizeof(*f->src)))))
		return -1;
	pthread_mutex_lock(&t->lock);
	if (c->e->dropped ||
	    !(oc = memt__held_file(t, c->e->job, f->path, f->size, NULL, c->chunk_bytes, &of)) ||
	    of->sums[k] != f->sums[k] || origin(oc, of, k, &s) < 0 ||
	    !may_splice(c, f, k, &s, &run) || lend(&s, k) < 0) {
		pthread_mutex_unlock(&t->lock);
		return -1;
	}
	pthread_mutex_unlock(&t->lock);
	/* the sums matched: the bytes decide */
	(void)chunk_room(s.c, s.f, k, &off);
	there = s.c->map + off;
	if (memcmp(buf, there, len) || (r = map_chunk(c, f, k, &s)) < 0) {
		if (r < 0 && map_own(c, f, k) < 0)
			r = -EFAULT;                  /* its room is not mapped */
		else
			r = -1;
		pthread_mutex_lock(&t->lock);
		unlend(t, s.c, s.f, k, 1);
		pthread_mutex_unlock(&t->lock);
		return r;
	}
	pthread_mutex_lock(&t->lock);
	f->src[k] = s;
	c->runs += (unsigned)run;
	c->bytes -= room;
	c->e->bytes -= room;
	t->used -= room;
	pthread_mutex_unlock(&t->lock);
	return 0;
}

int memt__splice_borrow(struct memt *t, struct memt_cap *c, struct mt_file *f,
			const char *job)
{
	struct memt_cap *oc;
	struct mt_file *of;
	struct mt_src s;

	for (uint64_t k = 0; k < f->nsums; k++) {
		if (!spliced(f, k) || f->src[k].c)
			continue;
		/* the same bytes as when they were spliced: the step they
		 * came from holds them still, as its own */
		oc = memt__step_file(t, job, f->src[k].step, f->path, f->size, c->chunk_bytes, &of);
		if (!oc || of->sums[k] != f->sums[k] || origin(oc, of, k, &s) < 0 ||
		    s.c != oc || (c->map && map_chunk(c, f, k, &s) < 0) || lend(&s, k) < 0) {
			memt__splice_release(t, f);
			f->done = 0;
			return -ENOENT;
		}
		f->src[k].c = s.c;
		f->src[k].f = s.f;
	}
	return 0;
}

int memt__splice_map(struct memt_cap *c)
{
	int r;

	for (size_t i = 0; i < c->nfiles; i++)
		for (uint64_t k = 0; c->files[i].src && k < c->files[i].nsums; k++)
			if (c->files[i].src[k].on && c->files[i].src[k].c &&
			    (r = map_chunk(c, &c->files[i], k, &c->files[i].src[k])) < 0)
				return r;
	return 0;
}

void memt__splice_release(struct memt *t, struct mt_file *f)
{
	uint64_t k, j;

	/* a run of chunks from one file at a time: what its capture gives
	 * back is done once a run */
	for (k = 0; f->src && k < f->nsums; k = j) {
		struct mt_src s = f->src[k];
		for (j = k + 1; j < f->nsums && s.c && f->src[j].c == s.c && f->src[j].f == s.f; j++)
			;
		if (!s.c)
			continue;
		for (uint64_t i = k; i < j; i++) {
			f->src[i].c = NULL;
			f->src[i].f = NULL;
		}
		f->done = 0;
		unlend(t, s.c, s.f, k, (int)(j - k));
	}
}

void memt__splice_drop(struct memt *t, struct memt_cap *c, struct mt_file *f)
{
	memt__splice_release(t, f);
	for (uint64_t k = 0; f->src && f->gone && k < f->nsums; k++)
		if (spliced(f, k) && map_own(c, f, k) == 0) {
			f->src[k].on = 0;
			f->gone[k] = 1;
		}
}

uint64_t memt__trim_chunks(struct memt *t, struct memt_cap *c, struct mt_file *f)
{
	uint64_t given = 0, off, room;

	if (!f->gone && !(f->gone = calloc(f->nsums, 1)))
		return 0;
	memt__splice_drop(t, c, f);   /* (its own chunks are the ones lent) */
	for (uint64_t k = 0; k < f->nsums; k++) {
		if (spliced(f, k) || gone(f, k) || (f->klent && f->klent[k]))
			continue;
		room = chunk_room(c, f, k, &off);
		if (fallocate(c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
			      (off_t)room) < 0)
			continue;
		f->gone[k] = 1;
		given += room;
	}
	f->done = 0;
	c->bytes -= given;
	return given;
}

int memt__unsplice(struct memt_cap *c)
{
	for (size_t i = 0; c->map && i < c->nfiles; i++)
		for (uint64_t k = 0; c->files[i].src && k < c->files[i].nsums; k++)
			if (c->files[i].src[k].on && map_own(c, &c->files[i], k) < 0)
				return -1;
	return 0;
}
