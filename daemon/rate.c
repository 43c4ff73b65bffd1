/* rate.c - one send-rate budget shared by threads (see rate.h). */
#include "rate.h"

uint64_t rate_reserve(struct rate *r, uint64_t now_ns, uint64_t n, uint64_t bps)
{
	uint64_t at;

	pthread_mutex_lock(&r->lock);
	if (r->next_ns < now_ns)
		r->next_ns = now_ns;
	at = r->next_ns;
	r->next_ns += (uint64_t)((double)n * 1e9 / (double)bps);
	pthread_mutex_unlock(&r->lock);
	return at;
}
