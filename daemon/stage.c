/* stage.c - stager threads: copy trainer memory into staging-pool chunks.
 * This copy is the trainer's whole stall, so several threads fill
 * different chunks at once. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fail.h"
#include "gpu.h"
#include "pipe.h"
#include "shm_region.h"

/* Holes are looked for in steps of this many bytes: a step whose first
 * page the trainer wrote is copied whole. */
#define HOLE_STEP (1ull << 20)

/* What SEEK_DATA said about one memfd during one chunk's copy: [hole_lo,
 * hole_hi) has no data, [copy_lo, copy_hi) is copied.  A chunk holds
 * many small tensors of one region: asking once per tensor cost ~1 us of
 * syscall each (20,000 tensors: 10-20 ms of a 256 MiB save's stall). */
struct hole_map {
	const struct shm_region *shm;
	uint64_t hole_lo, hole_hi, copy_lo, copy_hi;
};

/* Copy n bytes at skip in host segment s into dst.  Ranges of the
 * trainer's memfd it never wrote (holes) are zeros without being read:
 * reading them would allocate pages, charged to ckptd, that the trainer
 * never paid for (a never-written 3 GiB region made ckptd 3 GiB larger). */
static void copy_host(const struct seg *s, uint64_t skip, uint8_t *dst, uint64_t n,
		      struct hole_map *m)
{
	uint64_t at, end;

	if (!s->shm) {
		shm_pool_copy_part(dst, s->src + skip, n);
		return;
	}
	if (m->shm != s->shm)
		*m = (struct hole_map){ .shm = s->shm };
	at = s->goff + skip;
	end = at + n;
	while (at < end) {
		uint8_t *to = dst + (at - s->goff - skip);
		const uint8_t *from = s->src + (at - s->goff);
		off_t d;
		uint64_t data;

		if (at >= m->copy_lo && at < m->copy_hi) {
			uint64_t stop = m->copy_hi < end ? m->copy_hi : end;
			shm_pool_copy_part(to, from, stop - at);
			at = stop;
			continue;
		}
		if (at >= m->hole_lo && at < m->hole_hi) {
			uint64_t stop = m->hole_hi < end ? m->hole_hi : end;
			memset(to, 0, stop - at);
			at = stop;
			continue;
		}
		d = lseek(s->shm->fd, (off_t)at, SEEK_DATA);
		if (d < 0 && errno != ENXIO) {          /* no SEEK_DATA: copy it all */
			m->copy_lo = at;
			m->copy_hi = UINT64_MAX;
			continue;
		}
		data = d >= 0 ? (uint64_t)d : UINT64_MAX;   /* ENXIO: no data after at */
		if (data < at)                  /* never: it would not move on */
			data = at;
		m->hole_lo = at;
		m->hole_hi = data;
		if (data >= end)
			continue;
		/* one copy over every following step that starts with data,
		 * so that dense memory is copied in large pieces; a step whose
		 * first page holds data is copied whole */
		m->copy_lo = data;
		m->copy_hi = (data & ~(HOLE_STEP - 1)) + HOLE_STEP;
		while (m->copy_hi < end &&
		       lseek(s->shm->fd, (off_t)m->copy_hi, SEEK_DATA) == (off_t)m->copy_hi)
			m->copy_hi += HOLE_STEP;
	}
}

/* Copy bytes [off, off+len) of file f's stream into dst: host segments
 * with memcpy, CUDA segments as one batch of device-to-host copies (merged
 * where adjacent, one completion wait) that first waits for the trainer's
 * "ready" event (sync, may be NULL).  0, or -errno with msg. */
static __thread struct gpu_batch batch;    /* 70 KiB: not on the stack */

static int fill_range(const struct wfile *f, uint64_t off, uint64_t len,
		      uint8_t *dst, struct gpu_sync *sync, const atomic_int *cancel,
		      char *msg, size_t msglen)
{
	struct hole_map holes = { 0 };   /* this chunk's: the trainer may change it */
	size_t lo = 0, hi = f->nsegs;
	int r = 0;

	batch.sync = sync;
	batch.cancel = cancel;
	gpu_batch_drop(&batch);
	/* first segment that ends after off */
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (f->segs[mid].off + f->segs[mid].len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < f->nsegs && len > 0 && r == 0; i++) {
		const struct seg *s = &f->segs[i];
		uint64_t skip = off > s->off ? off - s->off : 0;
		uint64_t n = s->len - skip;
		if (n > len)
			n = len;
		if (s->gm)    /* host bytes never share dst with a GPU piece */
			r = gpu_batch_add(&batch, s->gm, s->goff + skip, dst, n, msg, msglen);
		else
			copy_host(s, skip, dst, n, &holes);
		dst += n;
		off += n;
		len -= n;
	}
	shm_pool_copied();
	if (r == 0)
		return gpu_batch_run(&batch, msg, msglen);
	gpu_batch_drop(&batch);
	return r;
}

/* The k-th chunk of rs to claim.  A reserved rsave (no chunk waits for
 * pool space, and its writers wait until it is STAGED) is copied in the
 * order of its trainer memory: groups registered interleaved (a tensor of
 * one, then of the other) read every other tensor of a file's range in
 * file order, 1.8x slower than reading the range once. */
static uint64_t claim_index(const struct rsave *rs, uint64_t k)
{
	return rs->reserved && rs->claim_order ? rs->claim_order[k] : k;
}

/* Drop rs from the stage queue, wherever it is (lock held). */
static void dequeue_locked(struct pipe *p, struct rsave *rs)
{
	for (size_t i = 0; i < p->sq_len; i++) {
		if (p->sq[(p->sq_head + i) % p->sq_cap] != rs)
			continue;
		for (size_t k = i; k > 0; k--)   /* close the gap from the head side */
			p->sq[(p->sq_head + k) % p->sq_cap] =
				p->sq[(p->sq_head + k - 1) % p->sq_cap];
		p->sq_head = (p->sq_head + 1) % p->sq_cap;
		p->sq_len--;
		return;
	}
}

/* Mark every unclaimed chunk skipped, hand back the promised pool chunks
 * and drop rs from the queue (claim lock held). */
static void skip_rest(struct pipe *p, struct rsave *rs)
{
	if (rs->resv_left) {
		shm_pool_unreserve(p->pool, (unsigned)rs->resv_left);
		rs->resv_left = 0;
	}
	pthread_mutex_lock(&p->lock);
	for (uint64_t k = rs->next_claim; k < rs->nchunks; k++)
		rs->chunks[claim_index(rs, k)].state = CHUNK_SKIPPED;
	rs->next_claim = rs->nchunks;
	dequeue_locked(p, rs);
	pthread_cond_broadcast(&p->write_cond);
	pthread_mutex_unlock(&p->lock);
}

#define STAGE_SCAN 64     /* queued rsaves looked at for reservation */

/* May rs's bytes be copied now?  Its trainer's "ready" event has passed (or
 * it has none); an event that failed counts as yes: the copy reports it. */
int rsave_may_copy(struct rsave *rs)
{
	char why[8];
	return gpu_sync_ready(rs->gsync, why, sizeof(why)) != 0;
}

/* Choose the rsave to claim a chunk of (claim lock held, queue not empty).
 *
 * Rank saves that arrive together (the ranks of one step) are staged side
 * by side, so they all become STAGED at about the same time instead of one
 * after another: the step's stall is its slowest rank's.  Interleaving is
 * only safe for rsaves that never wait for pool space, so the queue's head
 * run gets all its chunks promised at once when they fit; an rsave that
 * does not fit (larger than the free pool) is staged alone, in order, and
 * streams through the pool as before. */
static struct rsave *pick(struct pipe *p)
{
	struct rsave *q[STAGE_SCAN], *best = NULL;
	size_t n;

	pthread_mutex_lock(&p->lock);
	n = p->sq_len < STAGE_SCAN ? p->sq_len : STAGE_SCAN;
	for (size_t i = 0; i < n; i++)
		q[i] = p->sq[(p->sq_head + i) % p->sq_cap];
	pthread_mutex_unlock(&p->lock);

	for (size_t i = 0; i < n; i++) {
		struct rsave *rs = q[i];
		if (!rs->reserved) {
			/* only a prefix of the queue is reserved (FIFO fairness);
			 * an rsave already streaming in order stays so */
			if (rs->next_claim > 0 || rs->cancel ||
			    rs->nchunks > UINT32_MAX ||
			    shm_pool_reserve(p->pool, (unsigned)rs->nchunks) < 0)
				break;
			rs->resv_left = rs->nchunks;
			pthread_mutex_lock(&p->lock);    /* writers read it */
			rs->reserved = 1;
			pthread_mutex_unlock(&p->lock);
		}
		if (rs->cancel)
			return rs;               /* skip it at once */
		/* a stream save whose trainer's stream has not reached it yet
		 * waits without holding a stager: that stream may first be
		 * waiting for an rsave behind it (overlapping saves) */
		if (!rsave_may_copy(rs))
			continue;
		/* least advanced first: rsaves of any size finish together */
		if (!best || rs->next_claim * best->nchunks < best->next_claim * rs->nchunks)
			best = rs;
	}
	if (best)
		return best;
	return rsave_may_copy(q[0]) || q[0]->cancel ? q[0] : NULL;
}

void *stage_thread(void *arg)
{
	struct pipe *p = arg;
	long idle_ns = 50000;

	for (;;) {
		struct rsave *rs;
		struct chunk *ch;
		struct wfile *f;
		uint64_t c, off;
		int idx;

		pthread_mutex_lock(&p->claim_lock);
		pthread_mutex_lock(&p->lock);
		while (!p->stopping && p->sq_len == 0)
			pthread_cond_wait(&p->stage_cond, &p->lock);
		if (p->sq_len == 0) {         /* stopping and drained */
			pthread_mutex_unlock(&p->lock);
			pthread_mutex_unlock(&p->claim_lock);
			break;
		}
		pthread_mutex_unlock(&p->lock);
		if (!(rs = pick(p))) {
			/* every queued save waits for its trainer's stream: poll,
			 * backing off from 50 us to 2 ms */
			struct timespec ts = { 0, idle_ns };
			pthread_mutex_unlock(&p->claim_lock);
			nanosleep(&ts, NULL);
			if (idle_ns < 2000000)
				idle_ns *= 2;
			continue;
		}
		idle_ns = 50000;

		if (rs->cancel)
			idx = -ECANCELED;
		else if (rs->reserved)
			idx = shm_pool_take_reserved(p->pool);
		else
			idx = shm_pool_take(p->pool, &rs->cancel);
		if (idx < 0) {
			skip_rest(p, rs);
			pthread_mutex_unlock(&p->claim_lock);
			continue;
		}
		if (rs->reserved)
			rs->resv_left--;
		c = claim_index(rs, rs->next_claim++);
		if (rs->next_claim == rs->nchunks) {
			pthread_mutex_lock(&p->lock);
			dequeue_locked(p, rs);
			pthread_mutex_unlock(&p->lock);
		}
		pthread_mutex_unlock(&p->claim_lock);

		/* tests hold a stager here, before it copies (what the trainer
		 * runs meanwhile) */
		FAILPOINT("stage.chunk");
		ch = &rs->chunks[c];
		f = &rs->files[ch->file];
		off = (c - f->first_chunk) * rs->chunk_bytes;
		{
			uint8_t *dst = shm_pool_chunk(p->pool, (unsigned)idx);
			uint64_t len = f->size - off < rs->chunk_bytes ?
				       f->size - off : rs->chunk_bytes;
			uint64_t padded = (len + 4095) & ~(uint64_t)4095;
			char why[200];
			int r = fill_range(f, off, len, dst, rs->gsync, &rs->cancel, why,
					   sizeof(why));
			if (r < 0)
				pipe_fail(p, rs, r, "%s: cannot copy from the GPU: %s",
					  f->path, why);
			/* O_DIRECT writes whole blocks; the tail is cut by ftruncate */
			memset(dst + len, 0, padded - len);
			ch->len = (uint32_t)len;
			atomic_fetch_add(&rs->bytes_staged, len);
		}
		/* STAGED goes out before the last chunk is handed over, so the
		 * loop always sees STAGED before DONE. */
		if (atomic_fetch_add(&rs->filled, 1) + 1 == rs->nchunks) {
			/* stamped here, as DURABLE is stamped by its writer:
			 * the loop may see the notice late */
			rs->t_staged_ns = now_ns();
			gpu_sync_release(rs->gsync);   /* the trainer's stream goes on */
			p->notify(p->notify_arg, PIPE_STAGED, rs);
		}
		pthread_mutex_lock(&p->lock);
		ch->pool_idx = idx;
		ch->state = CHUNK_READY;
		pthread_cond_broadcast(&p->write_cond);
		pthread_mutex_unlock(&p->lock);
	}
	gpu_batch_release(&batch);
	return NULL;
}
