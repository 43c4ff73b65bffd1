/* stage.c - stager threads: copy trainer memory into staging-pool chunks.
 * This copy is the trainer's whole stall, so several threads fill
 * different chunks at once. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "pipe.h"

/* Copy bytes [off, off+len) of file f's stream into dst. */
static void fill_range(const struct wfile *f, uint64_t off, uint64_t len,
		       uint8_t *dst)
{
	size_t lo = 0, hi = f->nsegs;

	/* first segment that ends after off */
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (f->segs[mid].off + f->segs[mid].len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < f->nsegs && len > 0; i++) {
		const struct seg *s = &f->segs[i];
		uint64_t skip = off > s->off ? off - s->off : 0;
		uint64_t n = s->len - skip;
		if (n > len)
			n = len;
		memcpy(dst, s->src + skip, n);
		dst += n;
		off += n;
		len -= n;
	}
}

/* Mark every unclaimed chunk skipped and drop rs from the queue head. */
static void skip_rest(struct pipe *p, struct rsave *rs)
{
	pthread_mutex_lock(&p->lock);
	for (uint64_t c = rs->next_claim; c < rs->nchunks; c++)
		rs->chunks[c].state = CHUNK_SKIPPED;
	rs->next_claim = rs->nchunks;
	if (p->sq_len && p->sq[p->sq_head] == rs) {
		p->sq_head = (p->sq_head + 1) % p->sq_cap;
		p->sq_len--;
	}
	pthread_cond_broadcast(&p->write_cond);
	pthread_mutex_unlock(&p->lock);
}

void *stage_thread(void *arg)
{
	struct pipe *p = arg;

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
		rs = p->sq[p->sq_head];
		pthread_mutex_unlock(&p->lock);

		idx = rs->cancel ? -ECANCELED : shm_pool_take(p->pool, &rs->cancel);
		if (idx < 0) {
			skip_rest(p, rs);
			pthread_mutex_unlock(&p->claim_lock);
			continue;
		}
		c = rs->next_claim++;
		if (rs->next_claim == rs->nchunks) {
			pthread_mutex_lock(&p->lock);
			p->sq_head = (p->sq_head + 1) % p->sq_cap;
			p->sq_len--;
			pthread_mutex_unlock(&p->lock);
		}
		pthread_mutex_unlock(&p->claim_lock);

		ch = &rs->chunks[c];
		f = &rs->files[ch->file];
		off = (c - f->first_chunk) * rs->chunk_bytes;
		{
			uint8_t *dst = shm_pool_chunk(p->pool, (unsigned)idx);
			uint64_t len = f->size - off < rs->chunk_bytes ?
				       f->size - off : rs->chunk_bytes;
			uint64_t padded = (len + 4095) & ~(uint64_t)4095;
			fill_range(f, off, len, dst);
			/* O_DIRECT writes whole blocks; the tail is cut by ftruncate */
			memset(dst + len, 0, padded - len);
			ch->len = (uint32_t)len;
			atomic_fetch_add(&rs->bytes_staged, len);
			atomic_fetch_add(&p->bytes_staged, len);
		}
		/* STAGED goes out before the last chunk is handed over, so the
		 * loop always sees STAGED before DONE. */
		if (atomic_fetch_add(&rs->filled, 1) + 1 == rs->nchunks) {
			/* stamped here, as DURABLE is stamped by its writer:
			 * the loop may see the notice late */
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			rs->t_staged_ns = (uint64_t)ts.tv_sec * 1000000000ull +
					  (uint64_t)ts.tv_nsec;
			p->notify(p->notify_arg, PIPE_STAGED, rs);
		}
		pthread_mutex_lock(&p->lock);
		ch->pool_idx = idx;
		ch->state = CHUNK_READY;
		pthread_cond_broadcast(&p->write_cond);
		pthread_mutex_unlock(&p->lock);
	}
	return NULL;
}
