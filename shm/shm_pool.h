/* shm_pool.h - ckptd's staging pool: one page-aligned mapping carved into
 * fixed-size chunks.  Pre-faulted at creation (first touch is slow), huge
 * pages advised, locked in RAM when permitted.  Thread-safe: stager threads
 * take chunks, writer threads give them back. */
#ifndef CKPT_SHM_POOL_H
#define CKPT_SHM_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct shm_pool {
	uint8_t  *base;
	size_t    bytes;        /* nchunks * chunk_bytes */
	size_t    chunk_bytes;  /* multiple of 4096 */
	unsigned  nchunks;
	unsigned  nfree;
	unsigned  reserved;     /* free chunks promised by shm_pool_reserve */
	unsigned *free_stack;   /* indices of free chunks */
	int       locked;       /* mlock succeeded */
	uint64_t  waits;        /* times a taker had to wait for space */
	pthread_mutex_t lock;
	pthread_cond_t  cond;
};

/* bytes is rounded down to a chunk multiple (at least one chunk).  lock:
 * mlock it (when RLIMIT_MEMLOCK allows; `locked` says).  Returns 0 or
 * -errno (-ENOMEM). */
int shm_pool_init(struct shm_pool *p, size_t bytes, size_t chunk_bytes, int lock);
void shm_pool_release(struct shm_pool *p);

/* Take a free chunk, waiting while none is free (chunks promised by
 * shm_pool_reserve do not count as free).  Waiting stops early when
 * *cancel becomes non-zero (checked on every wake; shm_pool_kick wakes all).
 * Returns the chunk index, or -ECANCELED. */
int shm_pool_take(struct shm_pool *p, const atomic_int *cancel);
/* Same as take, but never waits: -EAGAIN when full. */
int shm_pool_try_take(struct shm_pool *p);
void shm_pool_give(struct shm_pool *p, unsigned idx);

/* Reservations: promise n free chunks to one taker at once, or nothing
 * (-EAGAIN) when fewer than n are free and unpromised.  A taker holding a
 * promise takes with shm_pool_take_reserved (never waits) and hands back
 * what it will not take with shm_pool_unreserve.  A taker that never waits
 * for space can be served out of order without deadlock. */
int  shm_pool_reserve(struct shm_pool *p, unsigned n);
int  shm_pool_take_reserved(struct shm_pool *p);   /* index, -EINVAL if none promised */
void shm_pool_unreserve(struct shm_pool *p, unsigned n);
void shm_pool_kick(struct shm_pool *p);   /* wake waiters to re-check cancel */

static inline uint8_t *shm_pool_chunk(const struct shm_pool *p, unsigned idx)
{
	return p->base + (size_t)idx * p->chunk_bytes;
}

/* Copy n bytes into pool memory.  Copies of 4 KiB and more use
 * non-temporal stores where the CPU has them (x86-64): the destination is
 * not read for ownership first, so the copy moves 2 bytes of memory
 * traffic per byte instead of 3 (1.4x faster here than glibc's memcpy of
 * 8 MiB chunks, which streams only above 3/4 of the L3 size; 1.6x for a
 * chunk filled from 13 KiB tensors).  Any alignment. */
void shm_pool_copy(void *dst, const void *src, size_t n);
/* The same without its store fence, for a chunk filled by many copies:
 * shm_pool_copied() once after the last, before the chunk is handed on. */
void shm_pool_copy_part(void *dst, const void *src, size_t n);
void shm_pool_copied(void);

/* Snapshot of usage for status: chunks in use, total. */
void shm_pool_usage(struct shm_pool *p, unsigned *used, unsigned *total,
		    uint64_t *waits);

#endif
