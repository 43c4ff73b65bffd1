/* pipe.c - pipeline queues, start/stop, cancellation. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "pipe.h"

static int grow(void **arr, size_t *cap, size_t elem)
{
	size_t ncap = *cap ? *cap * 2 : 64;
	void *n = realloc(*arr, ncap * elem);
	if (!n)
		return -ENOMEM;
	*arr = n;
	*cap = ncap;
	return 0;
}

/* Ring-buffer push with growth that keeps FIFO order. */
#define RING_PUSH(arr, head, len, cap, val) ({ int _r = 0; \
	if ((len) == (cap)) { \
		size_t _old = (cap); \
		_r = grow((void **)&(arr), &(cap), sizeof(*(arr))); \
		if (!_r && (head) + (len) > _old) { /* unwrap */ \
			memcpy((arr) + _old, (arr), ((head) + (len) - _old) * sizeof(*(arr))); } \
	} \
	if (!_r) { (arr)[((head) + (len)) % (cap)] = (val); (len)++; } _r; })

/* Every queued rsave has its chunks promised (lock held). */
static int all_reserved(const struct pipe *p)
{
	for (size_t i = 0; i < p->sq_len; i++)
		if (!p->sq[(p->sq_head + i) % p->sq_cap]->reserved)
			return 0;
	return 1;
}

int pipe_submit(struct pipe *p, struct rsave *rs)
{
	int r = 0;
	size_t queued = 0;

	pthread_mutex_lock(&p->lock);
	/* Promise the whole save its pool chunks now when they are free (see
	 * pipe.h), before any thread sees it: its writers then know to wait
	 * for STAGED.  Else a stager may still promise them later. */
	if (rs->nchunks > 0 && rs->nchunks <= UINT32_MAX && all_reserved(p) &&
	    shm_pool_reserve(p->pool, (unsigned)rs->nchunks) == 0) {
		rs->reserved = 1;
		rs->resv_left = rs->nchunks;
	}
	if (rs->nchunks > 0)
		r = RING_PUSH(p->sq, p->sq_head, p->sq_len, p->sq_cap, rs);
	for (size_t i = 0; !r && i < rs->nfiles; i++, queued++) {
		struct wjob j = { rs, i };
		r = RING_PUSH(p->wq, p->wq_head, p->wq_len, p->wq_cap, j);
	}
	if (r) {
		/* undo: nothing of this rsave may stay queued */
		if (rs->nchunks > 0)
			p->sq_len--;
		p->wq_len -= queued;
		if (rs->reserved) {
			shm_pool_unreserve(p->pool, (unsigned)rs->resv_left);
			rs->reserved = 0;
			rs->resv_left = 0;
		}
		pthread_mutex_unlock(&p->lock);
		return r;
	}
	/* Nothing to copy: STAGED now, while the lock keeps the writers from
	 * the files, so the loop sees it before DONE (the same order as a
	 * stager gives; DONE first would free the rsave under STAGED). */
	if (rs->nchunks == 0)
		p->notify(p->notify_arg, PIPE_STAGED, rs);
	/* Nothing to write either (every piece it holds is another replica's
	 * to write): durable at once, after STAGED. */
	if (rs->nfiles == 0) {
		rs->t_durable_ns = now_ns();
		p->notify(p->notify_arg, PIPE_DONE, rs);
	}
	pthread_cond_broadcast(&p->stage_cond);
	pthread_cond_broadcast(&p->write_cond);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

void pipe_fail(struct pipe *p, struct rsave *rs, int err, const char *fmt, ...)
{
	va_list ap;
	pthread_mutex_lock(&p->lock);
	if (!rs->err) {
		rs->err = err;
		va_start(ap, fmt);
		vsnprintf(rs->errmsg, sizeof(rs->errmsg), fmt, ap);
		va_end(ap);
	}
	rs->cancel = 1;
	pthread_cond_broadcast(&p->write_cond);
	pthread_mutex_unlock(&p->lock);
	shm_pool_kick(p->pool);
}

void pipe_cancel(struct pipe *p, struct rsave *rs, int err, const char *msg)
{
	pipe_fail(p, rs, err, "%s", msg);
}

int pipe_start(struct pipe *p, struct shm_pool *pool, const struct config *cfg,
	       pipe_notify_fn fn, void *arg)
{
	unsigned i;
	int r;

	memset(p, 0, sizeof(*p));
	p->pool = pool;
	p->notify = fn;
	p->notify_arg = arg;
	snprintf(p->io_backend, sizeof(p->io_backend), "%s", cfg->io_backend);
	p->direct_io = cfg->direct_io;
	p->io_depth = cfg->io_depth;
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->claim_lock, NULL);
	pthread_cond_init(&p->stage_cond, NULL);
	pthread_cond_init(&p->write_cond, NULL);

	/* Probe the I/O back-end once here so the choice is logged once. */
	{
		struct io_ctx probe;
		r = io_ctx_init(&probe, p->io_backend, p->io_depth, &p->fell_back);
		if (r < 0) {
			log_warnx("cannot set up I/O back-end '%s': %s", p->io_backend,
				  strerror(-r));
			return r;
		}
		snprintf(p->backend_used, sizeof(p->backend_used), "%s", probe.be->name);
		io_ctx_release(&probe);
		if (p->fell_back)
			log_warnx("io_uring is unavailable (seccomp or old kernel?): "
				  "writing with pwrite instead");
		/* later contexts must not fall back differently */
		snprintf(p->io_backend, sizeof(p->io_backend), "%s", p->backend_used);
	}

	p->stagers = calloc(cfg->stage_threads, sizeof(pthread_t));
	p->writers = calloc(cfg->write_threads, sizeof(pthread_t));
	if (!p->stagers || !p->writers)
		return -ENOMEM;
	for (i = 0; i < cfg->stage_threads; i++) {
		if ((r = pthread_create(&p->stagers[i], NULL, stage_thread, p)))
			return -r;
		p->nstagers++;
	}
	for (i = 0; i < cfg->write_threads; i++) {
		if ((r = pthread_create(&p->writers[i], NULL, wr_thread, p)))
			return -r;
		p->nwriters++;
	}
	return 0;
}

void pipe_stop(struct pipe *p)
{
	pthread_mutex_lock(&p->lock);
	p->stopping = 1;
	pthread_cond_broadcast(&p->stage_cond);
	pthread_cond_broadcast(&p->write_cond);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nstagers; i++)
		pthread_join(p->stagers[i], NULL);
	for (unsigned i = 0; i < p->nwriters; i++)
		pthread_join(p->writers[i], NULL);
	free(p->stagers);
	free(p->writers);
	free(p->sq);
	free(p->wq);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->claim_lock);
	pthread_cond_destroy(&p->stage_cond);
	pthread_cond_destroy(&p->write_cond);
}
