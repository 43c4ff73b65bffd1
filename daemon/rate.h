/* rate.h - one send-rate budget shared by threads: each chunk reserves its
 * slot on one timeline, so N connections together send at the rate and
 * one alone gets all of it (remote_max_bytes_per_s). */
#ifndef CKPT_RATE_H
#define CKPT_RATE_H

#include <pthread.h>
#include <stdint.h>

struct rate {
	pthread_mutex_t lock;
	uint64_t        next_ns;    /* when the budget is free again */
};
#define RATE_INIT { .lock = PTHREAD_MUTEX_INITIALIZER }

/* Reserve n bytes at bps at time now_ns: the time their turn comes (now or
 * later).  An idle budget is not saved up. */
uint64_t rate_reserve(struct rate *r, uint64_t now_ns, uint64_t n, uint64_t bps);

#endif
