/* shm_pool.c - ckptd's staging pool: fixed-size chunks carved out of one
 * pre-faulted, huge-page advised, (when permitted) locked mapping. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm_pool.h"

#define POOL_PAGE   4096u
#define POOL_HUGE   (2u << 20)   /* x86-64/arm64 PMD size: THP granule */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Map `len` bytes aligned to the huge-page size so the kernel can back the
 * whole pool with transparent huge pages: over-map, then trim both ends. */
static void *map_aligned(size_t len)
{
	size_t span = len + POOL_HUGE;
	uint8_t *raw, *base;
	size_t head, tail;

	if (span < len)
		return MAP_FAILED;
	raw = mmap(NULL, span, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		return MAP_FAILED;
	base = (uint8_t *)(((uintptr_t)raw + POOL_HUGE - 1) &
			   ~(uintptr_t)(POOL_HUGE - 1));
	head = (size_t)(base - raw);
	tail = span - head - len;
	if (head)
		munmap(raw, head);
	if (tail)
		munmap(base + len, tail);
	return base;
}

/* Fault every page in now: the first save must not pay first-touch cost.
 * The huge-page advice comes first so the faults get huge pages; the
 * populate call does it without a fault per page where the kernel can
 * (5.14+), and touching is the portable fallback. */
static void prefault(uint8_t *base, size_t len)
{
	(void)madvise(base, len, MADV_HUGEPAGE);
	if (madvise(base, len, MADV_POPULATE_WRITE) == 0)
		return;
	for (size_t off = 0; off < len; off += POOL_PAGE)
		((volatile uint8_t *)base)[off] = 0;
}

int shm_pool_init(struct shm_pool *p, size_t bytes, size_t chunk_bytes, int lock)
{
	size_t n, total;
	int ret;

	if (!p)
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	if (chunk_bytes == 0 || chunk_bytes % POOL_PAGE)
		return -EINVAL;
	n = bytes / chunk_bytes;
	if (n == 0)
		n = 1;
	/* Chunk indices travel as int (take's return value). */
	if (n > INT_MAX || n > SIZE_MAX / chunk_bytes)
		return -ENOMEM;
	total = n * chunk_bytes;

	p->free_stack = malloc(n * sizeof(*p->free_stack));
	if (!p->free_stack)
		return -ENOMEM;
	p->base = map_aligned(total);
	if (p->base == MAP_FAILED) {
		p->base = NULL;
		ret = -ENOMEM;
		goto out_free_stack;
	}
	ret = -pthread_mutex_init(&p->lock, NULL);
	if (ret)
		goto out_unmap;
	ret = -pthread_cond_init(&p->cond, NULL);
	if (ret)
		goto out_destroy_lock;

	prefault(p->base, total);
	/* Locked memory keeps staging off swap; without CAP_IPC_LOCK or a
	 * large enough RLIMIT_MEMLOCK we run unlocked and say so via `locked`. */
	p->locked = lock && mlock(p->base, total) == 0;

	p->bytes = total;
	p->chunk_bytes = chunk_bytes;
	p->nchunks = (unsigned)n;
	/* Stack top is index 0 so chunks are handed out in address order. */
	for (unsigned i = 0; i < p->nchunks; i++)
		p->free_stack[i] = p->nchunks - 1 - i;
	p->nfree = p->nchunks;
	return 0;

out_destroy_lock:
	pthread_mutex_destroy(&p->lock);
out_unmap:
	munmap(p->base, total);
out_free_stack:
	free(p->free_stack);
	memset(p, 0, sizeof(*p));
	return ret;
}

/* Accepts a zeroed pool (the state a failed init leaves). */
void shm_pool_release(struct shm_pool *p)
{
	if (!p || !p->base)
		return;
	munmap(p->base, p->bytes);
	free(p->free_stack);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	memset(p, 0, sizeof(*p));
}

static int pop_locked(struct shm_pool *p)
{
	return (int)p->free_stack[--p->nfree];
}

int shm_pool_take(struct shm_pool *p, const atomic_int *cancel)
{
	int waited = 0, idx;

	pthread_mutex_lock(&p->lock);
	/* A free chunk is always handed out; cancel only ends a wait.  Callers
	 * set *cancel and then call shm_pool_kick, which takes the lock, so
	 * the check below cannot miss the wake-up. */
	while (p->nfree <= p->reserved) {
		if (cancel && *cancel) {
			if (waited)
				p->waits++;
			pthread_mutex_unlock(&p->lock);
			return -ECANCELED;
		}
		waited = 1;
		pthread_cond_wait(&p->cond, &p->lock);
	}
	if (waited)
		p->waits++;
	idx = pop_locked(p);
	pthread_mutex_unlock(&p->lock);
	return idx;
}

int shm_pool_try_take(struct shm_pool *p)
{
	int idx = -EAGAIN;

	pthread_mutex_lock(&p->lock);
	if (p->nfree > p->reserved)
		idx = pop_locked(p);
	pthread_mutex_unlock(&p->lock);
	return idx;
}

int shm_pool_reserve(struct shm_pool *p, unsigned n)
{
	int ret = -EAGAIN;

	pthread_mutex_lock(&p->lock);
	if (n <= p->nfree - p->reserved) {
		p->reserved += n;
		ret = 0;
	}
	pthread_mutex_unlock(&p->lock);
	return ret;
}

int shm_pool_take_reserved(struct shm_pool *p)
{
	int idx = -EINVAL;

	pthread_mutex_lock(&p->lock);
	/* nfree >= reserved always holds: a promised chunk is there */
	if (p->reserved > 0) {
		p->reserved--;
		idx = pop_locked(p);
	}
	pthread_mutex_unlock(&p->lock);
	return idx;
}

void shm_pool_unreserve(struct shm_pool *p, unsigned n)
{
	pthread_mutex_lock(&p->lock);
	p->reserved -= n < p->reserved ? n : p->reserved;
	/* the chunks are free for ordinary takers again */
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

void shm_pool_give(struct shm_pool *p, unsigned idx)
{
	pthread_mutex_lock(&p->lock);
	/* A bad index or a double give is a caller bug; refuse it rather than
	 * corrupt the free stack. */
	if (idx < p->nchunks && p->nfree < p->nchunks) {
		p->free_stack[p->nfree++] = idx;
		/* Broadcast: the same condvar carries cancel kicks, and with
		 * a handful of stager threads waking all is cheap and never
		 * leaves a taker asleep beside a free chunk. */
		pthread_cond_broadcast(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
}

void shm_pool_kick(struct shm_pool *p)
{
	pthread_mutex_lock(&p->lock);
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

#if defined(__x86_64__)
#include <emmintrin.h>

#define POOL_STREAM_MIN (4u << 10)   /* below this the stores stay cached */

void shm_pool_copy_part(void *dst, const void *src, size_t n)
{
	uint8_t *d = dst;
	const uint8_t *s = src;
	size_t head;

	if (n < POOL_STREAM_MIN) {
		memcpy(d, s, n);
		return;
	}
	/* whole 64-byte lines: a tensor's bytes start anywhere in a chunk,
	 * and 16-byte stores across two lines streamed at half the speed */
	head = (64 - ((uintptr_t)d & 63)) & 63;
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 64; n -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, n);
}

void shm_pool_copied(void)
{
	_mm_sfence();      /* the stores are visible before the chunk is handed on */
}
#else
void shm_pool_copy_part(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}

void shm_pool_copied(void)
{
}
#endif

void shm_pool_copy(void *dst, const void *src, size_t n)
{
	shm_pool_copy_part(dst, src, n);
	shm_pool_copied();
}

void shm_pool_usage(struct shm_pool *p, unsigned *used, unsigned *total,
		    uint64_t *waits)
{
	pthread_mutex_lock(&p->lock);
	if (used)
		*used = p->nchunks - p->nfree;
	if (total)
		*total = p->nchunks;
	if (waits)
		*waits = p->waits;
	pthread_mutex_unlock(&p->lock);
}
