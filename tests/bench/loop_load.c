/* loop_load.c - the two clients of the bench's loop-latency figure: one
 * that times the SAVE round trip of a small trainer again and again, and
 * one that registers a large region (ckptd maps and populates it).
 *
 *   loop_load rtt   SOCKET JOB SECONDS   a 1 MiB tensor, saved every ~10 ms
 *                                        until SECONDS pass; one JSON line
 *                                        per save: {"t": s, "rtt_s": s}
 *                                        (t: CLOCK_MONOTONIC at the call)
 *   loop_load alloc SOCKET JOB BYTES     ckpt_alloc(BYTES), then exit; one
 *                                        JSON line {"t": s, "alloc_s": s}
 *
 * The round trip is ckpt_save() to STAGED: the request, the loop thread's
 * handling of it, a copy of 1 MiB and the STAGED notice back through the
 * loop.  Nothing else waits (not DURABLE or COMMITTED, which have disk in
 * them), so a loop thread busy with something else shows in the next save
 * at once.  Exit 0, or 1 with a message.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(ckpt_client *c, const char *what, int r)
{
	/* r == 0: the library's message says it all (ckpt_alloc) */
	fprintf(stderr, "loop_load: %s: %s%s%s\n", what, r ? ckpt_strerror(r) : "",
		r && *ckpt_last_error(c) ? ": " : "", ckpt_last_error(c));
	return 1;
}

static int rtt(ckpt_client *c, double seconds)
{
	const int64_t shape[1] = { 1 << 18 };   /* 1 MiB of f32 */
	double end = now_s() + seconds;
	uint8_t *buf = ckpt_alloc(c, 1 << 20);
	int r;

	if (!buf)
		return fail(c, "ckpt_alloc", 0);
	if ((r = ckpt_register(c, "model", "w", buf, CKPT_F32, 1, shape)) < 0)
		return fail(c, "ckpt_register", r);
	for (uint64_t step = 1; now_s() < end; step++) {
		uint64_t ticket;
		double t0;

		memset(buf, (int)step, 1 << 20);
		t0 = now_s();
		if ((r = ckpt_save(c, step, &ticket)) < 0)
			return fail(c, "ckpt_save", r);
		if ((r = ckpt_wait(c, ticket, CKPT_STAGED, -1)) < 0)
			return fail(c, "save", r);
		printf("{\"t\": %.6f, \"rtt_s\": %.6f}\n", t0, now_s() - t0);
		fflush(stdout);
		usleep(10000);
	}
	return 0;
}

int main(int argc, char **argv)
{
	ckpt_client *c = NULL;
	int r, ret;

	if (argc != 5 || (strcmp(argv[1], "rtt") && strcmp(argv[1], "alloc"))) {
		fprintf(stderr, "usage: loop_load rtt SOCKET JOB SECONDS\n"
				"       loop_load alloc SOCKET JOB BYTES\n");
		return 1;
	}
	if ((r = ckpt_connect(argv[2], argv[3], 0, 1, &c)) < 0)
		return fail(NULL, "ckpt_connect", r);
	if (!strcmp(argv[1], "rtt")) {
		ret = rtt(c, atof(argv[4]));
	} else {
		double t0 = now_s();
		ret = ckpt_alloc(c, strtoull(argv[4], NULL, 10)) ? 0 :
		      fail(c, "ckpt_alloc", 0);
		if (!ret)
			printf("{\"t\": %.6f, \"alloc_s\": %.6f}\n", t0, now_s() - t0);
	}
	ckpt_close(c);
	return ret;
}
