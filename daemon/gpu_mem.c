/* gpu_mem.c - bookkeeping of the CUDA source: the allocation cache and the
 * copy entry points.  Backend-neutral: every CUDA call goes through
 * gpu_ops(). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu.h"
#include "hex.h"

#define MSG(...) snprintf(msg, msglen, __VA_ARGS__)

const struct gpu_ops *gpu_need_ops(char *msg, size_t msglen)
{
	const struct gpu_ops *o = gpu_ops();
	if (!o)
		MSG("no GPU in ckptd (%s)", gpu_reason());
	return o;
}

void gpu_unknown_msg(const uint8_t uuid[GPU_UUID_BYTES], char *msg, size_t msglen)
{
	int failed = gpu_failed_devices();
	char us[41];

	hex_gpu_uuid_str(uuid, us);
	MSG("GPU %s is not usable by ckptd: it is not visible to ckptd (check "
	    "CUDA_VISIBLE_DEVICES of the ckptd service)%s", us, failed ?
	    ", or it is one that failed ckptd's start-up probe (its log names them)" : "");
}

/* --- allocation cache (loop thread) --------------------------------------- */

static struct gpu_mem *cache;

size_t gpu_cache_count(void)
{
	size_t n = 0;
	for (struct gpu_mem *m = cache; m; m = m->next)
		n++;
	return n;
}

static void cache_unlink(struct gpu_mem *m)
{
	for (struct gpu_mem **pp = &cache; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			m->next = NULL;
			m->cached = 0;
			return;
		}
}

/* After a reset of a faulted context (gpu.c) every mapping made in the
 * old one is gone: a cudaMalloc allocation is opened again from its IPC
 * handle on first use, so the trainer's next save works; VMM chunks came
 * as fds that are closed, so those tensors must be registered again.
 * Under live_lock: stagers and restores share entries. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

static int mem_live(const struct gpu_mem *cm, uint8_t **p, char *msg, size_t msglen)
{
	struct gpu_mem *m = (struct gpu_mem *)cm;
	const struct gpu_ops *o = gpu_ops();
	unsigned gen;
	void *np;
	int r = 0;

	if (!o || !o->dev_gen) {
		*p = m->dptr;
		return 0;
	}
	pthread_mutex_lock(&live_lock);
	gen = o->dev_gen(m->dev);
	if (m->gen != gen && m->kind == GPU_MEM_VMM) {
		MSG("the VMM mapping of this tensor on CUDA device %d went with its faulted "
		    "context (reset since): register the tensor again", m->dev);
		r = -ENXIO;
	} else if (m->gen != gen && (r = o->ipc_open(m->dev, m->key, &np, msg, msglen)) == 0) {
		m->dptr = np;      /* the old mapping went with the old context */
		m->gen = gen;
	}
	if (r == 0)
		*p = m->dptr;
	pthread_mutex_unlock(&live_lock);
	return r;
}

/* 1 if m's mapping is still of its device's current context */
static int mem_current(const struct gpu_mem *m)
{
	const struct gpu_ops *o = gpu_ops();
	int cur;

	pthread_mutex_lock(&live_lock);
	cur = !o || !o->dev_gen || m->gen == o->dev_gen(m->dev);
	pthread_mutex_unlock(&live_lock);
	return cur;
}

int gpu_mem_get(pid_t owner, const uint8_t uuid[GPU_UUID_BYTES], uint64_t base,
		uint64_t size, enum gpu_mem_kind kind,
		const uint8_t key[GPU_HANDLE_BYTES], struct gpu_mem **out, int *hit,
		char *msg, size_t msglen)
{
	const struct gpu_ops *o = gpu_need_ops(msg, msglen);
	struct gpu_mem *m;
	void *p = NULL;
	int dev, r;

	if (!o)
		return -EOPNOTSUPP;
	if (!size || (kind != GPU_MEM_IPC && kind != GPU_MEM_VMM)) {
		MSG("bad CUDA allocation (size %llu, kind %d)", (unsigned long long)size, kind);
		return -EINVAL;
	}
	if ((dev = o->device_of(uuid)) < 0) {
		gpu_unknown_msg(uuid, msg, msglen);
		return -ENODEV;
	}
	for (m = cache; m; m = m->next) {
		if (m->owner != owner || m->base != base)
			continue;
		if (m->kind == kind && m->size == size && m->dev == dev &&
		    !memcmp(m->key, key, GPU_HANDLE_BYTES) && gpu_mem_ready(m)) {
			m->refs++;
			*out = m;
			*hit = 1;
			return 0;
		}
		/* the address came back for a new allocation: forget the old
		 * one (holders keep their reference until they let go) */
		cache_unlink(m);
		break;
	}
	if (kind == GPU_MEM_IPC)
		r = o->ipc_open(dev, key, &p, msg, msglen);
	else
		r = o->vmm_reserve(dev, (size_t)size, &p, msg, msglen);
	if (r < 0)
		return r;
	if (!(m = calloc(1, sizeof(*m)))) {
		if (kind == GPU_MEM_IPC)
			o->ipc_close(dev, p);
		else
			o->vmm_free(dev, p, 0, (size_t)size);
		return -ENOMEM;
	}
	m->refs = 1;             /* the cache holds no reference: an entry
	                            lives while a region or a save uses it */
	m->cached = 1;
	m->owner = owner;
	m->base = base;
	m->size = size;
	m->kind = kind;
	memcpy(m->key, key, GPU_HANDLE_BYTES);
	m->dev = dev;
	m->dptr = p;
	m->gen = o->dev_gen ? o->dev_gen(dev) : 0;
	m->next = cache;
	cache = m;
	*out = m;
	*hit = 0;
	return 0;
}

int gpu_mem_vmm_add(struct gpu_mem *m, uint64_t at, uint64_t len, int fd,
		    char *msg, size_t msglen)
{
	const struct gpu_ops *o = gpu_need_ops(msg, msglen);
	int r;

	if (!o || m->kind != GPU_MEM_VMM || at != m->mapped || !len ||
	    len > m->size - m->mapped) {
		close(fd);
		if (o)
			MSG("VMM chunk at %llu (+%llu) does not continue the %llu mapped "
			    "bytes of a %llu-byte range", (unsigned long long)at,
			    (unsigned long long)len, (unsigned long long)m->mapped,
			    (unsigned long long)m->size);
		return o ? -EINVAL : -EOPNOTSUPP;
	}
	r = o->vmm_map(m->dev, m->dptr, (size_t)at, (size_t)len, fd, msg, msglen);
	if (r < 0)
		return r;
	m->mapped += len;
	return 0;
}

void gpu_mem_unref(struct gpu_mem *m)
{
	const struct gpu_ops *o;

	if (!m || --m->refs > 0)
		return;
	if (m->cached)
		cache_unlink(m);
	if ((o = gpu_ops()) && m->dptr && mem_current(m)) {
		if (m->kind == GPU_MEM_IPC)
			o->ipc_close(m->dev, m->dptr);
		else
			o->vmm_free(m->dev, m->dptr, (size_t)m->mapped, (size_t)m->size);
	}
	free(m);
}

/* --- copies ---------------------------------------------------------------- */


int gpu_copy_d2h(const struct gpu_mem *m, uint64_t off, void *dst, size_t n,
		 struct gpu_sync *sync, const atomic_int *cancel,
		 char *msg, size_t msglen)
{
	const struct gpu_ops *o = gpu_need_ops(msg, msglen);
	uint8_t *p;
	int r;

	if (!o)
		return -EOPNOTSUPP;
	if (off > m->size || n > m->size - off || !gpu_mem_ready(m)) {
		MSG("copy outside the CUDA allocation");
		return -ERANGE;
	}
	if ((r = gpu_sync_wait(sync, cancel, msg, msglen)) < 0 ||
	    (r = mem_live(m, &p, msg, msglen)) < 0)
		return r;
	return o->copy(m->dev, dst, p + off, n, 2, NULL, msg, msglen);
}

int gpu_copy_h2d(const struct gpu_mem *m, uint64_t off, const void *src, size_t n,
		 char *msg, size_t msglen)
{
	const struct gpu_ops *o = gpu_need_ops(msg, msglen);
	uint8_t *p;
	int r;

	if (!o)
		return -EOPNOTSUPP;
	if (off > m->size || n > m->size - off || !gpu_mem_ready(m)) {
		MSG("copy outside the CUDA allocation");
		return -ERANGE;
	}
	if ((r = mem_live(m, &p, msg, msglen)) < 0)
		return r;
	return o->copy(m->dev, p + off, src, n, 1, NULL, msg, msglen);
}

/* The scratch that bridged spans land in, allocated on first need and
 * pinned when the backend can (a pageable destination is a slower copy). */
static int scratch_ready(struct gpu_batch *b)
{
	if (b->scratch)
		return 1;
	if (posix_memalign((void **)&b->scratch, 4096, GPU_BRIDGE_SCRATCH)) {
		b->scratch = NULL;
		return 0;
	}
	b->scratch_pinned = gpu_host_register(b->scratch, GPU_BRIDGE_SCRATCH) == 0;
	return 1;
}

/* Room in the scratch for `more` bytes and one more piece. */
static int scratch_fits(const struct gpu_batch *b, size_t more)
{
	return b->npieces < GPU_BATCH_PIECES && more <= GPU_BRIDGE_SCRATCH - b->scratch_used;
}

static void add_piece(struct gpu_batch *b, uint8_t *dst, size_t n)
{
	b->p[b->npieces++] = (struct gpu_piece){ dst, (uint32_t)b->scratch_used, (uint32_t)n };
	b->scratch_used += n;
}

/* Extend the last entry over a gap of `gap` bytes to the next piece (dst,
 * n) of the same allocation: 1 if bridged, 0 if it does not pay or fit. */
static int bridge(struct gpu_batch *b, size_t gap, uint8_t *dst, size_t n)
{
	struct gpu_xfer *last = &b->x[b->n - 1];

	if (!b->last_bridged) {
		/* turning a long direct copy into scratch would cost more host
		 * copying than the copy call it saves */
		if (last->n > GPU_BRIDGE_GAP || !scratch_ready(b) ||
		    !scratch_fits(b, last->n + gap + n) || b->npieces + 2 > GPU_BATCH_PIECES)
			return 0;
		last->dst = b->scratch + b->scratch_used;
		add_piece(b, (uint8_t *)b->end - last->n, last->n);
		b->last_bridged = 1;
	} else if (!scratch_fits(b, gap + n)) {
		return 0;
	}
	b->scratch_used += gap;          /* the gap's bytes are copied, never laid out */
	add_piece(b, dst, n);
	last->n += gap + n;
	b->bridged++;
	return 1;
}

int gpu_batch_add(struct gpu_batch *b, const struct gpu_mem *m, uint64_t off, void *dst,
		  size_t n, char *msg, size_t msglen)
{
	struct gpu_xfer *last = b->n ? &b->x[b->n - 1] : NULL;
	const uint8_t *src;
	uint8_t *p;
	int full = b->n == GPU_BATCH_MAX || b->npieces == GPU_BATCH_PIECES, r;

	if (off > m->size || n > m->size - off || !gpu_mem_ready(m)) {
		MSG("copy outside the CUDA allocation");
		return -ERANGE;
	}
	if (!n)
		return 0;
	if ((r = mem_live(m, &p, msg, msglen)) < 0)
		return r;
	src = p + off;
	if (last && b->m[b->n - 1] == m && b->end == (uint8_t *)dst) {
		const uint8_t *src_end = (const uint8_t *)last->src + last->n;
		/* the next tensor right behind the last one, on both sides: one
		 * copy (a caching allocator packs small tensors back to back) */
		if (src == src_end && !b->last_bridged) {
			last->n += n;
			b->end += n;
			b->merged++;
			return 0;
		}
		if (src == src_end && scratch_fits(b, n)) {
			last->n += n;
			b->p[b->npieces - 1].n += (uint32_t)n;
			b->scratch_used += n;
			b->end += n;
			b->merged++;
			return 0;
		}
		/* a small gap, both ends inside the allocation m: copy across it */
		if (src > src_end && (size_t)(src - src_end) <= GPU_BRIDGE_GAP &&
		    bridge(b, (size_t)(src - src_end), dst, n)) {
			b->end += n;
			return 0;
		}
		/* a near piece that did not fit the scratch: run what is queued
		 * and bridge on into an empty one (else every piece of the rest
		 * of a chunk larger than the scratch was a copy of its own) */
		if (b->last_bridged && src >= src_end &&
		    (size_t)(src - src_end) <= GPU_BRIDGE_GAP)
			full = 1;
	}
	if (full && (r = gpu_batch_run(b, msg, msglen)) < 0)
		return r;
	b->m[b->n] = m;
	b->x[b->n++] = (struct gpu_xfer){ dst, src, n };
	b->end = (uint8_t *)dst + n;
	b->last_bridged = 0;
	return 0;
}

int gpu_batch_run(struct gpu_batch *b, char *msg, size_t msglen)
{
	const struct gpu_ops *o;
	size_t i = 0;
	int r = 0;

	if (!b->n)
		return 0;
	if (!(o = gpu_need_ops(msg, msglen))) {
		r = -EOPNOTSUPP;
		goto out_clear;
	}
	if ((r = gpu_sync_wait(b->sync, b->cancel, msg, msglen)) < 0)
		goto out_clear;
	while (i < b->n && r == 0) {     /* one wait per run of the same device */
		size_t k = i + 1;
		int dev = b->m[i]->dev;
		while (k < b->n && b->m[k]->dev == dev)
			k++;
		if (o->copy_many) {
			r = o->copy_many(dev, &b->x[i], k - i, 2, msg, msglen);
		} else {
			for (size_t j = i; j < k && r == 0; j++)
				r = o->copy(dev, b->x[j].dst, b->x[j].src, b->x[j].n, 2, NULL,
					    msg, msglen);
		}
		b->copies += k - i;
		i = k;
	}
	for (size_t j = 0; j < b->npieces && r == 0; j++)   /* lay out the bridged pieces */
		memcpy(b->p[j].dst, b->scratch + b->p[j].at, b->p[j].n);
out_clear:
	gpu_batch_drop(b);
	return r;
}

void gpu_batch_drop(struct gpu_batch *b)
{
	b->n = 0;
	b->npieces = 0;
	b->scratch_used = 0;
	b->last_bridged = 0;
}

void gpu_batch_release(struct gpu_batch *b)
{
	if (!b || !b->scratch)
		return;
	if (b->scratch_pinned)
		gpu_host_unregister(b->scratch);
	free(b->scratch);
	b->scratch = NULL;
	b->scratch_pinned = 0;
}

int gpu_host_register(void *p, size_t n)
{
	const struct gpu_ops *o = gpu_ops();
	return o ? o->host_register(p, n) : -EOPNOTSUPP;
}

int gpu_pool_register(void *p, size_t n, size_t chunk)
{
	const struct gpu_ops *o = gpu_ops();
	if (!o)
		return -EOPNOTSUPP;
	return o->pool_register ? o->pool_register(p, n, chunk) : o->host_register(p, n);
}

void gpu_dev_state(int dev, struct gpu_dev_state *out)
{
	const struct gpu_ops *o = gpu_ops();

	memset(out, 0, sizeof(*out));
	if (o && o->dev_state && dev >= 0 && dev < GPU_MAX_DEVICES)
		o->dev_state(dev, out);
}

unsigned gpu_context_resets(void)
{
	struct gpu_dev_state ds;
	unsigned n = 0;

	for (int d = 0; d < GPU_MAX_DEVICES; d++) {
		gpu_dev_state(d, &ds);
		n += ds.resets;
	}
	return n;
}

void gpu_pin_info(struct gpu_pin_info *out)
{
	const struct gpu_ops *o = gpu_ops();
	memset(out, 0, sizeof(*out));
	if (o && o->pin_info)
		o->pin_info(out);
}

const char *gpu_pin_state_name(int state)
{
	switch (state) {
	case GPU_PIN_WAITING: return "waiting for the first GPU context";
	case GPU_PIN_RUNNING: return "pinning";
	case GPU_PIN_DONE:    return "pinned";
	case GPU_PIN_FAILED:  return "failed";
	default:              return "off";
	}
}

void gpu_shutdown(void *pool)
{
	const struct gpu_ops *o = gpu_ops();
	if (o && o->shutdown)
		o->shutdown(pool);
	else if (o && pool)
		o->host_unregister(pool);
}

void gpu_host_unregister(void *p)
{
	const struct gpu_ops *o = gpu_ops();
	if (o && p)
		o->host_unregister(p);
}

/* --- wire helpers ------------------------------------------------------------ */

