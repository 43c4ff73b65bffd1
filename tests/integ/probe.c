/* probe.c - small single-purpose clients for integration tests.
 *
 *   probe phases -s SOCK -j JOB [-r RANK] [-w WORLD] [--mib N] [--step S]
 *                [--gate FILE] [--groups N]
 *       One save of one F32 tensor.  Waits for STAGED, then DURABLE, then
 *       COMMITTED and checks after each wait that the phase reached has a
 *       non-zero time and that staged_us <= durable_us <= committed_us.
 *       With --gate: after DURABLE, a COMMITTED wait with a short timeout
 *       must say -EAGAIN (the other ranks have not saved); then prints
 *       "PENDING", waits until FILE exists and waits for COMMITTED.
 *       Prints "times staged_us=A durable_us=B committed_us=C bytes=N".
 *       --groups N: N shard files and a blob instead of one file.
 *   probe idle -s SOCK -j JOB -r RANK -w WORLD [--secs N]
 *       Connects as that rank, prints "CONNECTED" and holds the
 *       connection without saving for N seconds (default 30) or until
 *       stdin reaches end of file.
 *   probe burst -s SOCK -j JOB [-r R] [-w W] [--mib N] --steps A:B [--reverse]
 *       Saves steps A..B (or B..A) back to back without waiting for any
 *       phase, then waits until every one is COMMITTED; prints
 *       "burst committed N steps".
 *   probe save -s SOCK -j JOB [-r R] [-w W] [--step S] [--mib N]
 *       One save, wait COMMITTED; exit 0, or 1 printing
 *       "error <errno name> <ckpt_strerror>: <daemon message>" on stdout.
 *
 * Exit status: 0 ok, 1 a ckpt call failed, 4 an ordering check failed.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"

static struct {
	const char *sock, *job, *gate;
	int rank, world, secs, groups, reverse;
	uint64_t first, last;
	double mib;
	uint64_t step;
} o = { .world = 1, .mib = 1, .step = 1, .secs = 30 };

static const char *errname(int r)
{
	switch (-r) {
	case EAGAIN: return "EAGAIN";
	case ETIMEDOUT: return "ETIMEDOUT";
	case ECANCELED: return "ECANCELED";
	case ECONNRESET: return "ECONNRESET";
	case EPERM: return "EPERM";
	case EACCES: return "EACCES";
	case EINVAL: return "EINVAL";
	case EIO: return "EIO";
	case ENOSPC: return "ENOSPC";
	case EEXIST: return "EEXIST";
	case ENOENT: return "ENOENT";
	case EBADMSG: return "EBADMSG";
	case ESHUTDOWN: return "ESHUTDOWN";
	default: return "E?";
	}
}

static int fail(ckpt_client *c, const char *what, int r)
{
	printf("error %s %s: %s: %s\n", errname(r), what, ckpt_strerror(r),
	       c ? ckpt_last_error(c) : "");
	fflush(stdout);
	return 1;
}

/* --groups N: N shard files (groups g0.., one tensor each) and a blob, so
 * several writers work on one save; else one tensor in "model". */
static int setup(ckpt_client *c)
{
	int ng = o.groups > 0 ? o.groups : 1;
	size_t bytes = (size_t)(o.mib * 1048576.0 / ng) & ~(size_t)255;
	int64_t shape[2] = { (int64_t)(bytes / 256), 64 };
	char group[16];
	int r;

	if (bytes < 256)
		bytes = 256, shape[0] = 1;
	for (int g = 0; g < ng; g++) {
		float *p = ckpt_alloc(c, bytes);
		if (!p)
			return fail(c, "ckpt_alloc", -ENOMEM);
		for (size_t i = 0; i < bytes / 4; i++)
			p[i] = (float)(i ^ (size_t)o.step);
		snprintf(group, sizeof(group), "g%d", g);
		if ((r = ckpt_register(c, o.groups ? group : "model", "w", p, CKPT_F32, 2,
				       shape)) < 0)
			return fail(c, "ckpt_register", r);
	}
	if (o.groups && (r = ckpt_put_blob(c, "state", "blob", 4)) < 0)
		return fail(c, "ckpt_put_blob", r);
	return 0;
}

static int check_times(ckpt_client *c, uint64_t ticket, ckpt_phase reached)
{
	struct ckpt_times t;
	int r = ckpt_times(c, ticket, &t);

	if (r < 0)
		return fail(c, "ckpt_times", r);
	if (t.staged_us == 0 || (reached >= CKPT_DURABLE && t.durable_us == 0) ||
	    (reached >= CKPT_COMMITTED && t.committed_us == 0)) {
		printf("ORDER: phase %d reached but a time is zero: staged_us=%" PRIu64
		       " durable_us=%" PRIu64 " committed_us=%" PRIu64 "\n", (int)reached,
		       t.staged_us, t.durable_us, t.committed_us);
		return 4;
	}
	if ((reached >= CKPT_DURABLE && t.durable_us < t.staged_us) ||
	    (reached >= CKPT_COMMITTED && t.committed_us < t.durable_us)) {
		printf("ORDER: times out of order: staged_us=%" PRIu64 " durable_us=%" PRIu64
		       " committed_us=%" PRIu64 "\n", t.staged_us, t.durable_us, t.committed_us);
		return 4;
	}
	if (reached == CKPT_STAGED && t.committed_us) {
		printf("ORDER: committed before durable was even waited for\n");
		return 4;
	}
	return 0;
}

static int cmd_phases(ckpt_client *c)
{
	struct ckpt_times t;
	uint64_t ticket;
	int r;

	if ((r = ckpt_save(c, o.step, &ticket)) < 0)
		return fail(c, "ckpt_save", r);
	if ((r = ckpt_wait(c, ticket, CKPT_STAGED, 20000)) < 0)
		return fail(c, "wait staged", r);
	if ((r = check_times(c, ticket, CKPT_STAGED)))
		return r;
	if ((r = ckpt_wait(c, ticket, CKPT_DURABLE, 20000)) < 0)
		return fail(c, "wait durable", r);
	if ((r = check_times(c, ticket, CKPT_DURABLE)))
		return r;
	if (o.gate) {
		r = ckpt_wait(c, ticket, CKPT_COMMITTED, 500);
		if (r != -EAGAIN) {
			printf("ORDER: COMMITTED wait before the other ranks saved returned %d (%s)\n",
			       r, r ? errname(r) : "committed");
			return 4;
		}
		ckpt_times(c, ticket, &t);
		if (t.committed_us) {
			printf("ORDER: committed_us set before the other ranks saved\n");
			return 4;
		}
		printf("PENDING\n");
		fflush(stdout);
		while (access(o.gate, F_OK) != 0)
			usleep(10000);
	}
	if ((r = ckpt_wait(c, ticket, CKPT_COMMITTED, 30000)) < 0)
		return fail(c, "wait committed", r);
	if ((r = check_times(c, ticket, CKPT_COMMITTED)))
		return r;
	ckpt_times(c, ticket, &t);
	printf("times staged_us=%" PRIu64 " durable_us=%" PRIu64 " committed_us=%" PRIu64
	       " bytes=%" PRIu64 "\n", t.staged_us, t.durable_us, t.committed_us, t.bytes);
	return 0;
}

static int cmd_save(ckpt_client *c)
{
	uint64_t ticket;
	int r;

	if ((r = ckpt_save(c, o.step, &ticket)) < 0)
		return fail(c, "ckpt_save", r);
	if ((r = ckpt_wait(c, ticket, CKPT_COMMITTED, 60000)) < 0)
		return fail(c, "save", r);
	printf("committed step %" PRIu64 "\n", o.step);
	return 0;
}

static int cmd_burst(ckpt_client *c)
{
	uint64_t n = o.last >= o.first ? o.last - o.first + 1 : 0, *tickets;
	int r;

	if (!n || !(tickets = calloc(n, sizeof(*tickets))))
		return fail(c, "--steps", -EINVAL);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t step = o.reverse ? o.last - i : o.first + i;
		if ((r = ckpt_save(c, step, &tickets[i])) < 0)
			return fail(c, "ckpt_save", r);
	}
	for (uint64_t i = 0; i < n; i++)
		if ((r = ckpt_wait(c, tickets[i], CKPT_COMMITTED, 60000)) < 0)
			return fail(c, "wait committed", r);
	printf("burst committed %" PRIu64 " steps\n", n);
	free(tickets);
	return 0;
}

static int cmd_idle(void)
{
	struct pollfd p = { .fd = 0, .events = POLLIN };
	time_t end = time(NULL) + o.secs;

	printf("CONNECTED\n");
	fflush(stdout);
	while (time(NULL) < end) {
		char b[64];
		if (poll(&p, 1, 200) > 0 && read(0, b, sizeof(b)) <= 0)
			break;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"socket", 1, NULL, 's'}, {"job", 1, NULL, 'j'}, {"rank", 1, NULL, 'r'},
		{"world", 1, NULL, 'w'}, {"mib", 1, NULL, 'm'}, {"step", 1, NULL, 't'},
		{"gate", 1, NULL, 'g'}, {"secs", 1, NULL, 'S'}, {"groups", 1, NULL, 'G'},
		{"steps", 1, NULL, 'A'}, {"reverse", 0, NULL, 'R'}, {NULL, 0, NULL, 0},
	};
	ckpt_client *c = NULL;
	const char *cmd;
	int ch, r;

	if (argc < 2) {
		fprintf(stderr, "usage: probe phases|idle|save|burst [options] (see the source)\n");
		return 2;
	}
	cmd = argv[1];
	optind = 2;
	while ((ch = getopt_long(argc, argv, "s:j:r:w:m:t:g:S:G:A:R", lo, NULL)) != -1) {
		switch (ch) {
		case 's': o.sock = optarg; break;
		case 'j': o.job = optarg; break;
		case 'r': o.rank = atoi(optarg); break;
		case 'w': o.world = atoi(optarg); break;
		case 'm': o.mib = atof(optarg); break;
		case 't': o.step = strtoull(optarg, NULL, 10); break;
		case 'g': o.gate = optarg; break;
		case 'S': o.secs = atoi(optarg); break;
		case 'G': o.groups = atoi(optarg); break;
		case 'A': {
			unsigned long long a = 0, b = 0;
			if (sscanf(optarg, "%llu:%llu", &a, &b) < 2)
				b = a;
			o.first = a;
			o.last = b;
			break;
		}
		case 'R': o.reverse = 1; break;
		default: return 2;
		}
	}
	if (!o.job) {
		fprintf(stderr, "probe: --job is required\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	r = ckpt_connect(o.sock, o.job, o.rank, o.world, &c);
	if (r < 0)
		return fail(NULL, "ckpt_connect", r);
	if (!strcmp(cmd, "idle")) {
		r = cmd_idle();
	} else if ((r = setup(c)) == 0) {
		if (!strcmp(cmd, "phases"))
			r = cmd_phases(c);
		else if (!strcmp(cmd, "save"))
			r = cmd_save(c);
		else if (!strcmp(cmd, "burst"))
			r = cmd_burst(c);
		else
			r = 2;
	}
	ckpt_close(c);
	return r;
}
