/* sim_stream.c - cudasim's execution model: each context's streams are
 * spread over CUDA_DEVICE_MAX_CONNECTIONS hardware queues, each a FIFO run
 * by its own thread, so a blocked operation blocks whatever was queued
 * behind it; stream memory operations with cuda.h's exact comparisons,
 * events (interprocess ones in shared memory), the legacy default stream's
 * implicit synchronisation, and asynchronous copies that really land
 * later; what is stuck, for the watchdog (sim_watchdog.c).  A TEST DOUBLE,
 * not a driver. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"


enum opkind { OP_COPY = 1, OP_MEMSET32, OP_WAITVAL, OP_WRITEVAL, OP_RECORD,
	      OP_WAITEVENT, OP_WAITSTREAM, OP_HOSTFN };

struct sim_op {
	struct sim_op *next;
	enum opkind kind;
	struct CUstream_st *s;
	uint64_t seq;
	void *dst; const void *src; size_t n;
	uint32_t *word; uint32_t value; unsigned flags;
	struct CUevent_st *ev; uint64_t gen;
	struct CUstream_st *other;
	CUhostFn fn; void *arg;
	char desc[160];
};

static pthread_mutex_t ctxs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st *ctxs[SIM_MAX_GPUS];
static int nctxs;

static void pause_backoff(unsigned *us)
{
	struct timespec ts = { 0, (long)*us * 1000 };
	nanosleep(&ts, NULL);
	if (*us < 1000)
		*us *= 2;
}

static void op_describe(const struct sim_op *op, char *out, size_t n)
{
	snprintf(out, n, "stream %u: %s", op->s->id, op->desc);
}

/* --- what the watchdog sees (sim_watchdog.c) -------------------------------- */

uint64_t sim_queue_stuck(uint64_t now, uint64_t limit, char *who, size_t n)
{
	uint64_t found = 0;

	pthread_mutex_lock(&ctxs_lock);
	for (int i = 0; i < nctxs && !found; i++) {
		struct CUctx_st *c = ctxs[i];
		pthread_mutex_lock(&c->lock);      /* q->running */
		for (int k = 0; k < c->nq && !found; k++) {
			struct sim_queue *q = &c->q[k];
			uint64_t since = atomic_load(&q->blocked_since_ms);
			if (since && now - since > limit && q->running) {
				snprintf(who, n, "device %d hardware queue %d, %s (stream %u)",
					 c->ordinal, k, q->running->desc, q->running->s->id);
				found = now - since;
			}
		}
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&ctxs_lock);
	return found;
}

void sim_queues_log(void)
{
	char line[256];

	pthread_mutex_lock(&ctxs_lock);
	for (int i = 0; i < nctxs; i++) {
		struct CUctx_st *c = ctxs[i];
		pthread_mutex_lock(&c->lock);
		for (int k = 0; k < c->nq; k++) {
			struct sim_queue *q = &c->q[k];
			int shown = 0;
			for (struct sim_op *op = q->head; op && shown < 6; op = op->next, shown++) {
				op_describe(op, line, sizeof(line));
				sim_log("  device %d hardware queue %d/%d %s %s", c->ordinal, k,
					c->nq, shown ? "then" : "runs", line);
			}
		}
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&ctxs_lock);
}

/* --- queues ------------------------------------------------------------------ */

static int op_ready(struct sim_op *op)
{
	switch (op->kind) {
	case OP_WAITVAL: {
		uint32_t w, v = op->value;
		SIM_DMA_BEGIN();
		w = atomic_load((_Atomic uint32_t *)op->word);
		SIM_DMA_END();
		switch (op->flags & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH) {
		case CU_STREAM_WAIT_VALUE_GEQ: return (int32_t)(w - v) >= 0;
		case CU_STREAM_WAIT_VALUE_EQ:  return w == v;
		case CU_STREAM_WAIT_VALUE_AND: return (w & v) != 0;
		default:                       return ~(w | v) != 0;   /* NOR */
		}
	}
	case OP_WAITEVENT:
		return atomic_load(&op->ev->st->completed) >= op->gen;
	case OP_WAITSTREAM: {
		int r;
		pthread_mutex_lock(&op->s->ctx->lock);
		r = op->other->completed >= op->gen;
		pthread_mutex_unlock(&op->s->ctx->lock);
		return r;
	}
	default:
		return 1;
	}
}

static void event_put(struct CUevent_st *e);
static void stream_put_locked(struct CUstream_st *s);

static void op_run(struct sim_queue *q, struct sim_op *op)
{
	if (!op_ready(op)) {
		unsigned us = 20;
		atomic_store(&q->blocked_since_ms, sim_now_ms());
		while (!op_ready(op))
			pause_backoff(&us);
		atomic_store(&q->blocked_since_ms, 0);
	}
	switch (op->kind) {
	case OP_COPY:
	case OP_MEMSET32: {
		/* the data lands only after the transfer time: a host that reads
		 * the destination early sees the old bytes */
		uint64_t us = sim.op_us + (uint64_t)((double)op->n / sim.bytes_per_us);
		struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };
		nanosleep(&ts, NULL);
		SIM_DMA_BEGIN();
		if (op->kind == OP_COPY) {
			memcpy(op->dst, op->src, op->n);
		} else {
			for (size_t i = 0; i < op->n / 4; i++)
				((uint32_t *)op->dst)[i] = op->value;
		}
		SIM_DMA_END();
		break;
	}
	case OP_WRITEVAL:
		SIM_DMA_BEGIN();
		atomic_store((_Atomic uint32_t *)op->word, op->value);
		SIM_DMA_END();
		break;
	case OP_RECORD: {
		uint64_t c = atomic_load(&op->ev->st->completed);
		while (c < op->gen &&
		       !atomic_compare_exchange_weak(&op->ev->st->completed, &c, op->gen))
			;
		break;
	}
	case OP_HOSTFN:
		op->fn(op->arg);
		break;
	default:
		break;
	}
	if (op->ev)
		event_put(op->ev);
}

static void *queue_thread(void *arg)
{
	struct sim_queue *q = arg;
	struct CUctx_st *c = q->ctx;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct sim_op *op;
		while (!q->head)
			pthread_cond_wait(&c->cond, &c->lock);
		op = q->head;
		q->running = op;
		pthread_mutex_unlock(&c->lock);
		op_run(q, op);
		pthread_mutex_lock(&c->lock);
		q->head = op->next;
		if (!q->head)
			q->tail = NULL;
		q->running = NULL;
		q->completed++;
		sim_progress();
		op->s->completed = op->seq;
		if (op->kind == OP_WAITSTREAM)
			stream_put_locked(op->other);
		stream_put_locked(op->s);
		pthread_cond_broadcast(&c->cond);
		free(op);
	}
	return NULL;
}

static struct CUstream_st *stream_new_locked(struct CUctx_st *c, unsigned flags)
{
	struct CUstream_st *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->ctx = c;
	s->id = c->nstreams;
	s->q = &c->q[c->nstreams++ % (unsigned)c->nq];   /* round robin, as hardware */
	s->flags = flags;
	s->epoch = c->epoch;
	s->refs = 1;
	s->next = c->streams;
	c->streams = s;
	return s;
}

static void stream_put_locked(struct CUstream_st *s)
{
	if (--s->refs > 0)
		return;
	for (struct CUstream_st **pp = &s->ctx->streams; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	free(s);
}

int sim_ctx_start(struct CUctx_st *c)
{
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	pthread_mutex_lock(&c->lock);
	c->legacy = stream_new_locked(c, 0);
	pthread_mutex_unlock(&c->lock);
	if (!c->legacy)
		return -1;
	for (int i = 0; i < c->nq; i++) {
		pthread_attr_t a;
		c->q[i].idx = i;
		c->q[i].ctx = c;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&c->q[i].thread, &a, queue_thread, &c->q[i]))
			return -1;
		pthread_attr_destroy(&a);
	}
	pthread_mutex_lock(&ctxs_lock);
	ctxs[nctxs++] = c;
	pthread_mutex_unlock(&ctxs_lock);
	sim_watchdog_start();
	return 0;
}

/* Resolve a stream handle (NULL / CU_STREAM_LEGACY / CU_STREAM_PER_THREAD:
 * the current context's legacy default stream). */
static CUresult stream_of(CUstream h, struct CUstream_st **out)
{
	struct CUctx_st *c;

	if (!sim.initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
		if (!(c = sim_current()))
			return CUDA_ERROR_INVALID_CONTEXT;
		if (c->sticky)
			return c->sticky;
		*out = c->legacy;
		return CUDA_SUCCESS;
	}
	if (h->ctx->sticky)
		return h->ctx->sticky;
	if (h->destroyed || h->epoch != h->ctx->epoch)
		return CUDA_ERROR_INVALID_HANDLE;      /* destroyed, or by a reset */
	*out = h;
	return CUDA_SUCCESS;
}

static void enqueue_locked(struct CUstream_st *s, struct sim_op *op)
{
	struct sim_queue *q = s->q;
	op->s = s;
	op->seq = ++s->submitted;
	s->refs++;
	if (q->tail)
		q->tail->next = op;
	else
		q->head = op;
	q->tail = op;
	q->submitted++;
	pthread_cond_broadcast(&s->ctx->cond);
}

static void wait_stream_locked(struct CUstream_st *s, struct CUstream_st *other)
{
	struct sim_op *w = calloc(1, sizeof(*w));
	if (!w)
		return;
	w->kind = OP_WAITSTREAM;
	w->other = other;
	w->gen = other->submitted;
	other->refs++;    /* dropped when the wait completes */
	snprintf(w->desc, sizeof(w->desc), "implicit wait (legacy default stream) for "
		 "stream %u's operation %llu", other->id, (unsigned long long)w->gen);
	enqueue_locked(s, w);
}

/* Queue op on s, with the legacy stream's implicit synchronisation. */
static CUresult submit(struct CUstream_st *s, struct sim_op *op)
{
	struct CUctx_st *c = s->ctx;

	pthread_mutex_lock(&c->lock);
	if (s == c->legacy) {
		for (struct CUstream_st *b = c->streams; b; b = b->next)
			if (b != s && !(b->flags & CU_STREAM_NON_BLOCKING) &&
			    b->submitted > b->completed)
				wait_stream_locked(s, b);
	} else if (!(s->flags & CU_STREAM_NON_BLOCKING) &&
		   c->legacy->submitted > c->legacy->completed) {
		wait_stream_locked(s, c->legacy);
	}
	enqueue_locked(s, op);
	pthread_mutex_unlock(&c->lock);
	return CUDA_SUCCESS;
}

/* Host-side wait until stream s completed operation seq. */
static void host_wait_seq(struct CUstream_st *s, uint64_t seq, const char *what)
{
	struct CUctx_st *c = s->ctx;
	char w[200];
	snprintf(w, sizeof(w), "%s (stream %u)", what, s->id);
	sim_host_wait_begin(w);
	pthread_mutex_lock(&c->lock);
	while (s->completed < seq)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	sim_host_wait_end();
}

void sim_sync_all(const char *what)
{
	uint64_t snap[SIM_MAX_GPUS][SIM_MAX_QUEUES];
	struct CUctx_st *cs[SIM_MAX_GPUS];
	int n;

	pthread_mutex_lock(&ctxs_lock);
	n = nctxs;
	memcpy(cs, ctxs, sizeof(cs[0]) * (size_t)n);
	pthread_mutex_unlock(&ctxs_lock);
	/* CKPT_CUDASIM_STRICT_SYNC=1: an implicitly synchronising call while a
	 * stream is blocked on a wait is an error (on a GPU it stalls this
	 * thread until someone else opens the wait, or forever) */
	if (getenv("CKPT_CUDASIM_STRICT_SYNC") && *getenv("CKPT_CUDASIM_STRICT_SYNC") == '1')
		for (int i = 0; i < n; i++)
			for (int k = 0; k < cs[i]->nq; k++)
				if (atomic_load(&cs[i]->q[k].blocked_since_ms)) {
					char w[240];
					snprintf(w, sizeof(w), "%s (implicitly synchronising) while "
						 "device %d hardware queue %d is blocked", what,
						 cs[i]->ordinal, k);
					sim_hang(w, 0);
				}
	sim_host_wait_begin(what);
	for (int i = 0; i < n; i++) {
		pthread_mutex_lock(&cs[i]->lock);
		for (int k = 0; k < cs[i]->nq; k++)
			snap[i][k] = cs[i]->q[k].submitted;
		for (int k = 0; k < cs[i]->nq; k++)
			while (cs[i]->q[k].completed < snap[i][k])
				pthread_cond_wait(&cs[i]->cond, &cs[i]->lock);
		pthread_mutex_unlock(&cs[i]->lock);
	}
	sim_host_wait_end();
}

/* --- streams ---------------------------------------------------------------- */

API CUresult cuStreamCreate(CUstream *out, unsigned int flags)
{
	struct CUctx_st *c;
	struct CUstream_st *s;

	if (!sim.initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!(c = sim_current()))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (c->sticky)
		return c->sticky;
	if (!out || flags > CU_STREAM_NON_BLOCKING)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&c->lock);
	s = stream_new_locked(c, flags);
	pthread_mutex_unlock(&c->lock);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = s;
	return CUDA_SUCCESS;
}

/* Returns at once; the stream's work still runs (cuda.h). */
API CUresult cuStreamDestroy_v2(CUstream h)
{
	struct CUctx_st *c;
	struct CUstream_st *s;
	CUresult e;
	if ((e = stream_of(h, &s)))
		return e;
	if (s == s->ctx->legacy)
		return CUDA_ERROR_INVALID_HANDLE;
	c = s->ctx;
	pthread_mutex_lock(&c->lock);
	s->destroyed = 1;
	stream_put_locked(s);         /* may free s */
	pthread_mutex_unlock(&c->lock);
	return CUDA_SUCCESS;
}

API CUresult cuStreamGetCtx(CUstream h, CUcontext *c)
{
	struct CUstream_st *s;
	CUresult e;
	if ((e = stream_of(h, &s)))
		return e;
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	*c = s->ctx;
	return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize(CUstream h)
{
	struct CUstream_st *s;
	CUresult e;
	uint64_t seq;
	if ((e = stream_of(h, &s)))
		return e;
	pthread_mutex_lock(&s->ctx->lock);
	seq = s->submitted;
	pthread_mutex_unlock(&s->ctx->lock);
	host_wait_seq(s, seq, "cuStreamSynchronize");
	return CUDA_SUCCESS;
}

API CUresult cuStreamQuery(CUstream h)
{
	struct CUstream_st *s;
	CUresult e;
	if ((e = stream_of(h, &s)))
		return e;
	pthread_mutex_lock(&s->ctx->lock);
	e = s->completed >= s->submitted ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
	pthread_mutex_unlock(&s->ctx->lock);
	return e;
}

API CUresult cuCtxSynchronize(void)
{
	struct CUctx_st *c = sim_current();
	if (!sim.initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	sim_host_wait_begin("cuCtxSynchronize");
	pthread_mutex_lock(&c->lock);
	for (int k = 0; k < c->nq; k++) {
		uint64_t snap = c->q[k].submitted;
		while (c->q[k].completed < snap)
			pthread_cond_wait(&c->cond, &c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	sim_host_wait_end();
	return CUDA_SUCCESS;
}

static struct sim_op *op_new(enum opkind k)
{
	struct sim_op *op = calloc(1, sizeof(*op));
	if (op)
		op->kind = k;
	return op;
}

static CUresult copy(struct CUstream_st *s, void *dst, const void *src, size_t n,
		     const char *what, CUdeviceptr dev)
{
	struct sim_op *op = op_new(OP_COPY);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->dst = dst; op->src = src; op->n = n;
	snprintf(op->desc, sizeof(op->desc), "%s of %zu bytes at device 0x%llx", what, n,
		 (unsigned long long)dev);
	return submit(s, op);
}

/* A device range may span several VMM mappings: check it all, then queue
 * one copy per mapping. */
/* CKPT_CUDASIM_STICKY_COPY=N (CKPT_CUDASIM_STICKY_DEV=d: counting copies
 * on ordinal d only): the Nth device-to-host copy of this process faults
 * as a kernel's illegal access would, and the context stays faulted. */
static CUresult sticky_inject(struct CUstream_st *s)
{
	static _Atomic unsigned n;

	if (!sim.sticky_copy || (sim.sticky_dev >= 0 && s->ctx->ordinal != sim.sticky_dev) ||
	    atomic_fetch_add(&n, 1) + 1 != sim.sticky_copy)
		return CUDA_SUCCESS;
	sim_log("CKPT_CUDASIM_STICKY_COPY: copy %u on device %d faults "
		"(CUDA_ERROR_ILLEGAL_ADDRESS until the context is reset)",
		sim.sticky_copy, s->ctx->ordinal);
	atomic_store(&s->ctx->sticky, CUDA_ERROR_ILLEGAL_ADDRESS);
	return CUDA_ERROR_ILLEGAL_ADDRESS;
}

static CUresult copy_dev(struct CUstream_st *s, CUdeviceptr d, void *host, size_t n,
			 int to_dev)
{
	size_t seg, done;
	CUresult f;

	if (!to_dev && (f = sticky_inject(s)))
		return f;
	for (done = 0; done < n; done += seg)
		if (!sim_xlate_seg(d + done, n - done, &seg))
			return CUDA_ERROR_INVALID_VALUE;
	for (done = 0; done < n; done += seg) {
		uint8_t *dv = sim_xlate_seg(d + done, n - done, &seg);
		CUresult e = to_dev ?
			copy(s, dv, (uint8_t *)host + done, seg, "cuMemcpyHtoDAsync", d + done) :
			copy(s, (uint8_t *)host + done, dv, seg, "cuMemcpyDtoHAsync", d + done);
		if (e)
			return e;
	}
	return CUDA_SUCCESS;
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *src, size_t n, CUstream h)
{
	struct CUstream_st *s;
	CUresult e;
	if ((e = stream_of(h, &s)))
		return e;
	if (!src)
		return CUDA_ERROR_INVALID_VALUE;
	return copy_dev(s, d, (void *)src, n, 1);
}

API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr d, size_t n, CUstream h)
{
	struct CUstream_st *s;
	CUresult e;
	if ((e = stream_of(h, &s)))
		return e;
	if (!dst)
		return CUDA_ERROR_INVALID_VALUE;
	return copy_dev(s, d, dst, n, 0);
}

/* The synchronous copies run on the legacy stream and wait for it. */
API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *src, size_t n)
{
	struct CUstream_st *s;
	CUresult e;
	if ((e = cuMemcpyHtoDAsync_v2(d, src, n, NULL)) || (e = stream_of(NULL, &s)))
		return e;
	host_wait_seq(s, s->submitted, "cuMemcpyHtoD");
	return CUDA_SUCCESS;
}

API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr d, size_t n)
{
	struct CUstream_st *s;
	CUresult e;
	if ((e = cuMemcpyDtoHAsync_v2(dst, d, n, NULL)) || (e = stream_of(NULL, &s)))
		return e;
	host_wait_seq(s, s->submitted, "cuMemcpyDtoH");
	return CUDA_SUCCESS;
}

API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream h)
{
	struct CUstream_st *s;
	size_t seg, done;
	CUresult e;
	if ((e = stream_of(h, &s)))
		return e;
	for (done = 0; done < n * 4; done += seg)
		if (!sim_xlate_seg(d + done, n * 4 - done, &seg) || seg % 4)
			return CUDA_ERROR_INVALID_VALUE;
	for (done = 0; done < n * 4; done += seg) {
		struct sim_op *op;
		void *dst = sim_xlate_seg(d + done, n * 4 - done, &seg);
		if (!(op = op_new(OP_MEMSET32)))
			return CUDA_ERROR_OUT_OF_MEMORY;
		op->dst = dst; op->n = seg; op->value = v;
		snprintf(op->desc, sizeof(op->desc), "cuMemsetD32Async of %zu words at 0x%llx",
			 seg / 4, (unsigned long long)(d + done));
		submit(s, op);
	}
	return CUDA_SUCCESS;
}

API CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *arg)
{
	struct CUstream_st *s;
	struct sim_op *op;
	CUresult e;
	if ((e = stream_of(h, &s)))
		return e;
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(op = op_new(OP_HOSTFN)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->fn = fn; op->arg = arg;
	snprintf(op->desc, sizeof(op->desc), "cuLaunchHostFunc");
	return submit(s, op);
}

static const char *wait_name(unsigned f)
{
	switch (f & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH) {
	case CU_STREAM_WAIT_VALUE_GEQ: return "GEQ";
	case CU_STREAM_WAIT_VALUE_EQ:  return "EQ";
	case CU_STREAM_WAIT_VALUE_AND: return "AND";
	default:                       return "NOR";
	}
}

API CUresult cuStreamWaitValue32_v2(CUstream h, CUdeviceptr a, uint32_t v, unsigned int flags)
{
	struct CUstream_st *s;
	struct sim_op *op;
	CUresult e;
	uint32_t *w;
	if ((e = stream_of(h, &s)))
		return e;
	if ((flags & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH) > CU_STREAM_WAIT_VALUE_NOR ||
	    (a & 3) || !(w = sim_xlate(a, 4, &e)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!(op = op_new(OP_WAITVAL)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->word = w; op->value = v; op->flags = flags;
	snprintf(op->desc, sizeof(op->desc), "cuStreamWaitValue32 %s 0x%x on the word at "
		 "0x%llx (it holds 0x%x)", wait_name(flags), v, (unsigned long long)a,
		 (unsigned)atomic_load((_Atomic uint32_t *)w));
	return submit(s, op);
}

API CUresult cuStreamWriteValue32_v2(CUstream h, CUdeviceptr a, uint32_t v, unsigned int flags)
{
	struct CUstream_st *s;
	struct sim_op *op;
	CUresult e;
	uint32_t *w;
	if ((e = stream_of(h, &s)))
		return e;
	if (flags > 1 || (a & 3) || !(w = sim_xlate(a, 4, &e)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!(op = op_new(OP_WRITEVAL)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->word = w; op->value = v;
	snprintf(op->desc, sizeof(op->desc), "cuStreamWriteValue32 0x%x to 0x%llx", v,
		 (unsigned long long)a);
	return submit(s, op);
}

/* --- events ------------------------------------------------------------------ */

/* NULL for a handle that is not an event, or whose context was reset
 * since (cuDevicePrimaryCtxReset destroys the context's events). */
static struct CUevent_st *ev_ok(CUevent e)
{
	if (!e || e->magic != SIM_MAGIC)
		return NULL;
	return e->ctx && e->epoch != atomic_load(&e->ctx->epoch) ? NULL : e;
}

static void event_bind(struct CUevent_st *e)
{
	e->ctx = sim_current();
	e->epoch = atomic_load(&e->ctx->epoch);
}

static void event_put(struct CUevent_st *e)
{
	if (atomic_fetch_sub(&e->refs, 1) != 1)
		return;
	e->magic = 0;
	if (e->fd >= 0) {
		munmap(e->st, 4096);
		close(e->fd);
	} else {
		free(e->st);
	}
	free(e);
}

API CUresult cuEventCreate(CUevent *out, unsigned int flags)
{
	struct CUevent_st *e;

	if (!sim.initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!sim_current())
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!out || (flags & ~7u) ||
	    ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!(e = calloc(1, sizeof(*e))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->magic = SIM_MAGIC; e->flags = flags; e->fd = -1; e->refs = 1;
	e->nonce = sim_nonce();
	event_bind(e);
	if (flags & CU_EVENT_INTERPROCESS) {
		char name[64];
		snprintf(name, sizeof(name), "cudasim-event-%016llx", (unsigned long long)e->nonce);
		e->fd = memfd_create(name, MFD_CLOEXEC);
		if (e->fd < 0 || ftruncate(e->fd, 4096) < 0 ||
		    (e->st = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, e->fd, 0)) ==
		    MAP_FAILED) {
			if (e->fd >= 0)
				close(e->fd);
			free(e);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	} else if (!(e->st = calloc(1, sizeof(*e->st)))) {
		free(e);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	e->st->magic = SIM_MAGIC;
	*out = e;
	return CUDA_SUCCESS;
}

/* Returns at once; a record still queued completes later (cuda.h). */
API CUresult cuEventDestroy_v2(CUevent h)
{
	struct CUevent_st *e = ev_ok(h);
	if (!sim.initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	event_put(e);
	return CUDA_SUCCESS;
}

API CUresult cuEventRecord(CUevent h, CUstream sh)
{
	struct CUevent_st *e = ev_ok(h);
	struct CUstream_st *s;
	struct sim_op *op;
	CUresult r;
	if ((r = stream_of(sh, &s)))
		return r;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!(op = op_new(OP_RECORD)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	atomic_fetch_add(&e->refs, 1);
	op->ev = e;
	op->gen = atomic_fetch_add(&e->st->recorded, 1) + 1;
	snprintf(op->desc, sizeof(op->desc), "cuEventRecord (record %llu)",
		 (unsigned long long)op->gen);
	return submit(s, op);
}

API CUresult cuEventQuery(CUevent h)
{
	struct CUevent_st *e = ev_ok(h);
	if (!sim.initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	return atomic_load(&e->st->completed) >= atomic_load(&e->st->recorded) ?
	       CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API CUresult cuEventSynchronize(CUevent h)
{
	struct CUevent_st *e = ev_ok(h);
	uint64_t want;
	unsigned us = 20;
	if (!sim.initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	want = atomic_load(&e->st->recorded);
	sim_host_wait_begin("cuEventSynchronize");
	while (atomic_load(&e->st->completed) < want)
		pause_backoff(&us);
	sim_host_wait_end();
	return CUDA_SUCCESS;
}

/* Waits for the event's most recent record as of this call; a wait on an
 * event with no record pending passes at once (cuda.h). */
API CUresult cuStreamWaitEvent(CUstream sh, CUevent h, unsigned int flags)
{
	struct CUevent_st *e = ev_ok(h);
	struct CUstream_st *s;
	struct sim_op *op;
	CUresult r;
	if ((r = stream_of(sh, &s)))
		return r;
	if (!e || flags)
		return e ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
	if (!(op = op_new(OP_WAITEVENT)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	atomic_fetch_add(&e->refs, 1);
	op->ev = e;
	op->gen = atomic_load(&e->st->recorded);
	snprintf(op->desc, sizeof(op->desc), "cuStreamWaitEvent for record %llu of %s%s event",
		 (unsigned long long)op->gen, e->imported ? "an imported " : "a local ",
		 e->flags & CU_EVENT_INTERPROCESS ? "interprocess" : "");
	return submit(s, op);
}

API CUresult cuIpcGetEventHandle(CUipcEventHandle *h, CUevent ev)
{
	struct CUevent_st *e = ev_ok(ev);
	struct ipc_handle ih = { 0 };
	if (!sim.initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!h || !e || !(e->flags & CU_EVENT_INTERPROCESS) || e->imported)
		return CUDA_ERROR_INVALID_VALUE;
	ih.magic = SIM_MAGIC; ih.kind = 2; ih.pid = getpid(); ih.fd = e->fd;
	ih.nonce = e->nonce;
	memcpy(h->reserved, &ih, sizeof(ih));
	return CUDA_SUCCESS;
}

API CUresult cuIpcOpenEventHandle(CUevent *out, CUipcEventHandle h)
{
	struct ipc_handle ih;
	struct CUevent_st *e;
	int fd;

	if (!sim.initialised)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!sim_current())
		return CUDA_ERROR_INVALID_CONTEXT;
	memcpy(&ih, h.reserved, sizeof(ih));
	if (!out || ih.magic != SIM_MAGIC || ih.kind != 2)
		return CUDA_ERROR_INVALID_VALUE;
	if (ih.pid == getpid())
		return CUDA_ERROR_INVALID_CONTEXT;
	if ((fd = sim_open_peer(&ih, "event")) < 0)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!(e = calloc(1, sizeof(*e)))) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	e->st = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (e->st == MAP_FAILED || e->st->magic != SIM_MAGIC) {
		if (e->st != MAP_FAILED)
			munmap(e->st, 4096);
		close(fd);
		free(e);
		return CUDA_ERROR_MAP_FAILED;
	}
	e->magic = SIM_MAGIC; e->fd = fd; e->imported = 1; e->refs = 1;
	e->flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING; e->nonce = ih.nonce;
	event_bind(e);
	*out = e;
	return CUDA_SUCCESS;
}
