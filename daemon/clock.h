/* clock.h - the daemon's one clock: monotonic nanoseconds, for durations
 * and deadlines (never for wall-clock time). */
#ifndef CKPT_CLOCK_H
#define CKPT_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
