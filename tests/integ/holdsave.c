/* holdsave.c - a trainer rank whose save starts when the test says so, for
 * the operations tests (drain, flush progress): the test holds one rank of
 * a two-rank step back, so the step stays in flight as long as it likes.
 *
 *   holdsave -s SOCK -j JOB -r RANK -w WORLD [-m MIB] -t STEP [-g GOFILE]
 *
 * Connects, registers MIB MiB (one F32 tensor in group "model"), prints
 * "connected", waits until GOFILE exists (at once without -g), saves STEP,
 * prints "accepted", waits for COMMITTED and prints "committed".
 * Exit status: 0 committed, 1 a failure (the reason on stderr), 2 usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"

static int die(ckpt_client *c, const char *what, int r)
{
	fprintf(stderr, "holdsave: %s: %s%s%s\n", what, ckpt_strerror(r),
		c && *ckpt_last_error(c) ? ": " : "", c ? ckpt_last_error(c) : "");
	return 1;
}

int main(int argc, char **argv)
{
	const char *sock = NULL, *job = NULL, *go = NULL;
	int rank = 0, world = 1, ch, r;
	double mib = 4;
	uint64_t step = 1, ticket;
	ckpt_client *c = NULL;
	int64_t shape[2];
	float *p;
	size_t n;

	while ((ch = getopt(argc, argv, "s:j:r:w:m:t:g:")) != -1) {
		switch (ch) {
		case 's': sock = optarg; break;
		case 'j': job = optarg; break;
		case 'r': rank = atoi(optarg); break;
		case 'w': world = atoi(optarg); break;
		case 'm': mib = atof(optarg); break;
		case 't': step = strtoull(optarg, NULL, 10); break;
		case 'g': go = optarg; break;
		default:
			fprintf(stderr, "usage: holdsave -s SOCK -j JOB -r RANK -w WORLD "
				"[-m MIB] -t STEP [-g GOFILE]\n");
			return 2;
		}
	}
	if (!job)
		return 2;
	if ((r = ckpt_connect(sock, job, rank, world, &c)) < 0)
		return die(NULL, "ckpt_connect", r);
	n = (size_t)(mib * 1048576.0) / 4 / 256 * 256;
	if (!(p = ckpt_alloc(c, n * 4)))
		return die(c, "ckpt_alloc", -ENOMEM);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(i % 1000) + (float)rank;
	shape[0] = (int64_t)(n / 256);
	shape[1] = 256;
	if ((r = ckpt_register(c, "model", "w", p, CKPT_F32, 2, shape)) < 0)
		return die(c, "ckpt_register", r);
	printf("connected\n");
	fflush(stdout);
	for (int i = 0; go && access(go, F_OK) != 0; i++) {
		if (i > 6000) {
			fprintf(stderr, "holdsave: %s never appeared\n", go);
			return 1;
		}
		usleep(10000);
	}
	if ((r = ckpt_save(c, step, &ticket)) < 0)
		return die(c, "ckpt_save", r);
	printf("accepted\n");
	fflush(stdout);
	if ((r = ckpt_wait(c, ticket, CKPT_COMMITTED, 60000)) < 0)
		return die(c, "save", r);
	printf("committed\n");
	ckpt_close(c);
	return 0;
}
