/* trainer.c - a stand-in trainer process for tests, the demo and benchmarks.
 *
 *   trainer save    -s SOCK -j JOB -r RANK -w WORLD [--mib N] --steps A[:B[:K]]
 *                   [--wait staged|durable|committed|none] [--die-after-staged]
 *                   [--die-mid-stage] [--groups model,optim] [--keep-going]
 *                   [--train-ms N]  (steps between saves change the tensors,
 *                                    N ms each: a training loop)
 *   trainer restore -s SOCK -j JOB -r RANK -w WORLD [--mib N] [--step S]
 *                   [--expect S] [--partial] [--extra NAME] [--drop NAME]
 *   Benchmarks: --json prints one JSON object per save / restore instead of
 *   the text line; --ddp registers the tensors as global tensors replicated
 *   on every rank (ckpt_register_global, DDP: the same contents on every
 *   rank, written once); --barrier DIR makes every rank of the world start each
 *   save (and a restore) together (rendezvous through files in DIR);
 *   --copy-floor times a plain memcpy of all the tensors, by all ranks at
 *   once, right before each save (the stall's floor, measured in the same
 *   conditions) and reports it as floor_s; --tensors N splits the bytes
 *   into N tensors (default one per dtype, cycling the dtypes), packed
 *   64-byte aligned, and --json reports the registration time (register_s);
 *   --gate FILE waits (up to two minutes) for FILE to exist before the first
 *   save: the benchmark opens it once ckptd says every rank is prepared
 *   (`ckptctl status --json`, ranks_ready), as after a real job's first steps;
 *   --linger FILE keeps the connection, after the last save, until FILE exists;
 *   --hold FILE waits, before each save but the first, for FILE.<step> (a
 *   test changes the files of the step before meanwhile); --content-step S
 *   gives the tensors step S's contents whatever the step saved (or
 *   restored): a save that changes nothing.
 *   --frozen G1[,G2] keeps the tensors of those groups as they were at step 0
 *   (a fine-tune's frozen weights: training never writes them); a group
 *   named more than once in --groups gets that many shares of the tensors
 *   ("--groups base,base,base,lora": 3/4 of the bytes in base);
 *   --frozen-every N keeps N-1 of every N tensors as at step 0, whatever
 *   their group; --flag-frozen registers the kept ones with CKPT_FROZEN.
 *
 * Tensor contents are a pure function of (rank, tensor, step) (step 0 for
 * a frozen group), so a restore checks every byte against the step it got.  One tensor of each safetensors
 * dtype, spread over the groups.  Prints one line per event with timings.
 * Exit status: 0 ok, 1 failure (message on stderr), 3 data mismatch.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"

static const struct { ckpt_dtype dt; size_t size; const char *name; } dtypes[] = {
	{CKPT_F32, 4, "f32"}, {CKPT_BF16, 2, "bf16"}, {CKPT_F16, 2, "f16"},
	{CKPT_F64, 8, "f64"}, {CKPT_I64, 8, "i64"}, {CKPT_I32, 4, "i32"},
	{CKPT_I16, 2, "i16"}, {CKPT_I8, 1, "i8"}, {CKPT_U8, 1, "u8"},
	{CKPT_BOOL, 1, "bool"},
};
#define NDT (sizeof(dtypes) / sizeof(dtypes[0]))

struct tensor {
	char      group[32], name[64];
	ckpt_dtype dt;
	size_t    esize, count;
	uint8_t  *ptr;
	int64_t   shape[2];
	int       frozen;     /* --frozen: its contents are step 0's */
};

static struct {
	const char *sock, *job, *groups, *extra, *drop, *frozen;
	int frozen_every, flag_frozen;
	int rank, world, partial, die_after_staged, die_mid_stage, keep_going, quiet;
	double mib;
	uint64_t first, last, every;
	int64_t step, expect;
	ckpt_phase wait;
	int nowait;
	int train_ms;
	int json, copy_floor, ddp;
	size_t tensors;
	const char *barrier, *gate, *linger, *hold;
	uint64_t content_step;
} o = { .groups = "model,optim", .world = 1, .mib = 4, .first = 1, .last = 1, .every = 1,
	.step = CKPT_LATEST, .expect = -1, .wait = CKPT_COMMITTED };

static struct tensor *T;
static size_t NT;
static double register_s;      /* every ckpt_register call of setup() */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* splitmix64: cheap, deterministic, fills at memory speed */
static inline uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* DDP: every rank holds the same values */
static uint64_t seed_of(size_t idx, uint64_t step)
{
	return mix(((uint64_t)(o.ddp ? 0 : o.rank) << 40) ^ ((uint64_t)idx << 20) ^ step);
}

/* The seed of tensor idx's contents at step: step 0's when frozen. */
static uint64_t contents(const struct tensor *t, size_t idx, uint64_t step)
{
	return seed_of(idx, t->frozen ? 0 : o.content_step ? o.content_step : step);
}

static void fill(struct tensor *t, size_t idx, uint64_t step)
{
	uint64_t seed = contents(t, idx, step);
	size_t n = t->count * t->esize, i;
	uint64_t *w = (uint64_t *)t->ptr;
	for (i = 0; i < n / 8; i++)
		w[i] = mix(seed + i);
	for (i = i * 8; i < n; i++)
		t->ptr[i] = (uint8_t)mix(seed ^ i);
	if (t->dt == CKPT_BOOL)
		for (i = 0; i < n; i++)
			t->ptr[i] &= 1;
}

static int check(struct tensor *t, size_t idx, uint64_t step)
{
	uint64_t seed = contents(t, idx, step);
	size_t n = t->count * t->esize, i;
	const uint64_t *w = (const uint64_t *)t->ptr;
	if (t->dt == CKPT_BOOL) {
		for (i = 0; i < n; i++) {
			uint8_t want = i / 8 < n / 8 ? (uint8_t)(mix(seed + i / 8) >> (8 * (i % 8))) :
				       (uint8_t)mix(seed ^ i);
			if (t->ptr[i] != (want & 1))
				return -1;
		}
		return 0;
	}
	for (i = 0; i < n / 8; i++)
		if (w[i] != mix(seed + i))
			return -1;
	for (i = i * 8; i < n; i++)
		if (t->ptr[i] != (uint8_t)mix(seed ^ i))
			return -1;
	return 0;
}

/* Wait until every rank of the world reached rendezvous `tag` (files
 * DIR/TAG.RANK), so their saves start together; a rank that never comes
 * (it failed to connect) ends the wait after a minute. */
static void barrier(const char *tag)
{
	char path[4096];
	double give_up = now_s() + 60;
	FILE *f;

	if (!o.barrier)
		return;
	snprintf(path, sizeof(path), "%s/%s.%d", o.barrier, tag, o.rank);
	if ((f = fopen(path, "w")))
		fclose(f);
	for (int r = 0; r < o.world; r++) {
		snprintf(path, sizeof(path), "%s/%s.%d", o.barrier, tag, r);
		while (access(path, F_OK) != 0 && now_s() < give_up)
			usleep(200);
	}
}

/* Copy every tensor into a pre-faulted buffer of the same size; seconds. */
static double copy_floor(void)
{
	static uint8_t *scratch;
	static size_t len;
	size_t off = 0;
	double t0;

	if (!scratch) {
		for (size_t i = 0; i < NT; i++)
			len += T[i].count * T[i].esize;
		/* like ckptd's staging pool: huge-page advised, pre-faulted */
		scratch = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (scratch == MAP_FAILED) {
			scratch = NULL;
			return 0;
		}
		(void)madvise(scratch, len, MADV_HUGEPAGE);
		memset(scratch, 1, len);
	}
	t0 = now_s();
	for (size_t i = 0; i < NT; i++) {
		memcpy(scratch + off, T[i].ptr, T[i].count * T[i].esize);
		off += T[i].count * T[i].esize;
	}
	return now_s() - t0;
}

static int die(ckpt_client *c, const char *what, int r)
{
	/* ckpt_last_error(NULL) holds ckpt_connect()'s message */
	fprintf(stderr, "trainer[%d]: %s: %s%s%s\n", o.rank, what, ckpt_strerror(r),
		*ckpt_last_error(c) ? ": " : "", ckpt_last_error(c));
	return 1;
}

/* Is name one of list's comma-separated names? */
static int in_list(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : "")
		if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == 0))
			return 1;
	return 0;
}

/* Allocate one tensor per dtype, round-robin over the groups, totalling
 * about o.mib MiB in one shared region. */
static int setup(ckpt_client *c)
{
	char groups[256], *save = NULL, *g;
	const char *gl[16];
	size_t ng = 0, total = (size_t)(o.mib * 1048576.0), off = 0;
	uint8_t *base;

	snprintf(groups, sizeof(groups), "%s", o.groups);
	for (g = strtok_r(groups, ",", &save); g && ng < 16; g = strtok_r(NULL, ",", &save))
		gl[ng++] = g;
	/* many small tensors are packed as a framework's would be */
	size_t align = o.tensors ? 64 : 4096;
	NT = (o.tensors ? o.tensors : NDT) + (o.extra ? 1 : 0);
	T = calloc(NT, sizeof(*T));
	base = T ? ckpt_alloc(c, total + NT * align + 4096) : NULL;
	if (!base)
		return die(c, "ckpt_alloc", -ENOMEM);
	for (size_t i = 0; i < NT; i++) {
		struct tensor *t = &T[i];
		size_t di = i % NDT;
		size_t bytes = total / (NT - (o.extra ? 1 : 0));
		t->dt = dtypes[di].dt;
		t->esize = dtypes[di].size;
		t->count = bytes / t->esize;
		t->shape[1] = 64;
		t->shape[0] = (int64_t)(t->count / 64);
		t->count = (size_t)t->shape[0] * 64;
		snprintf(t->group, sizeof(t->group), "%s", gl[i % ng]);
		t->frozen = in_list(o.frozen, t->group) ||
			    (o.frozen_every > 1 && i % (size_t)o.frozen_every != 0);
		if (i < NT - (o.extra ? 1 : 0))
			snprintf(t->name, sizeof(t->name), "layer%zu.%s", i, dtypes[di].name);
		else
			snprintf(t->name, sizeof(t->name), "%s", o.extra);
		t->ptr = base + off;
		off += (t->count * t->esize + align - 1) & ~(align - 1);
		if (o.drop && !strcmp(o.drop, t->name))
			continue;
		double t0 = now_s();
		struct ckpt_layout l = { { t->shape[0], t->shape[1] }, { 0, 0 }, o.rank, o.world };
		int r = ckpt_register_flags(c, t->group, t->name, t->ptr, t->dt, 2, t->shape,
					    o.ddp ? &l : NULL,
					    o.flag_frozen && t->frozen ? CKPT_FROZEN : 0);
		register_s += now_s() - t0;
		if (r < 0)
			return die(c, "ckpt_register", r);
	}
	return 0;
}

/* Wait (up to two minutes) until path exists. */
static void wait_for_file(const char *path)
{
	double give_up = now_s() + 120;

	while (path && access(path, F_OK) != 0 && now_s() < give_up)
		usleep(1000);
}

static int cmd_save(ckpt_client *c)
{
	int failures = 0;

	wait_for_file(o.gate);
	for (uint64_t step = o.first; step <= o.last; step += o.every) {
		uint64_t ticket;
		struct ckpt_times tm;
		char blob[64], tag[32];
		double t0, floor_s = 0;
		int r;

		if (o.hold && step != o.first) {
			char held[4096];
			snprintf(held, sizeof(held), "%s.%" PRIu64, o.hold, step);
			wait_for_file(held);
		}
		for (size_t i = 0; i < NT; i++)
			fill(&T[i], i, step);
		snprintf(blob, sizeof(blob), "rng-state rank=%d step=%" PRIu64, o.rank, step);
		if ((r = ckpt_put_blob(c, "rng", blob, strlen(blob))) < 0)
			return die(c, "ckpt_put_blob", r);
		if (o.copy_floor) {
			snprintf(tag, sizeof(tag), "floor-%" PRIu64, step);
			barrier(tag);
			floor_s = copy_floor();
		}
		snprintf(tag, sizeof(tag), "save-%" PRIu64, step);
		barrier(tag);
		t0 = now_s();
		if ((r = ckpt_save(c, step, &ticket)) < 0) {
			die(c, "ckpt_save", r);
			if (!o.keep_going)
				return 1;
			failures++;
			continue;
		}
		if (o.die_mid_stage)
			_exit(0);       /* gone before the daemon could stage everything */
		r = ckpt_wait(c, ticket, CKPT_STAGED, -1);
		double stall = now_s() - t0;
		if (r == 0 && o.die_after_staged) {
			printf("rank %d step %" PRIu64 " staged; dying now\n", o.rank, step);
			fflush(stdout);
			_exit(0);
		}
		/* training goes on: scribble over the tensors at once */
		if (r == 0)
			for (size_t i = 0; i < NT; i++)
				if (!T[i].frozen)
					memset(T[i].ptr, 0xa5, T[i].count * T[i].esize);
		/* --train-ms: the steps between saves change every tensor */
		for (uint64_t k = step + 1; r == 0 && o.train_ms && k < step + o.every; k++) {
			for (size_t i = 0; i < NT; i++)
				fill(&T[i], i, k);
			usleep((useconds_t)o.train_ms * 1000);
		}
		if (r == 0 && !o.nowait)
			r = ckpt_wait(c, ticket, o.wait, -1);
		if (r < 0) {
			die(c, "save", r);
			if (!o.keep_going)
				return 1;
			failures++;
			continue;
		}
		ckpt_times(c, ticket, &tm);
		if (o.json)
			printf("{\"rank\": %d, \"step\": %" PRIu64 ", \"bytes\": %" PRIu64
			       ", \"t0\": %.6f, \"stall_s\": %.6f, \"staged_s\": %.6f, "
			       "\"durable_s\": %.6f, \"committed_s\": %.6f, \"floor_s\": %.6f, "
			       "\"tensors\": %zu, \"register_s\": %.6f}\n",
			       o.rank, step, tm.bytes, t0, stall, tm.staged_us / 1e6,
			       tm.durable_us / 1e6, tm.committed_us / 1e6, floor_s, NT, register_s);
		else if (!o.quiet)
			printf("rank %d step %" PRIu64 " ok: %.1f MiB stall %.1f ms staged %.1f ms "
			       "durable %.1f ms committed %.1f ms\n", o.rank, step,
			       (double)tm.bytes / 1048576.0, stall * 1e3, tm.staged_us / 1e3,
			       tm.durable_us / 1e3, tm.committed_us / 1e3);
	}
	wait_for_file(o.linger);
	return failures ? 1 : 0;
}

static int cmd_restore(ckpt_client *c)
{
	uint64_t got = 0;
	char blob[128], want[64];
	size_t len = 0;
	double t0, t1;
	int r, bad = 0;

	for (size_t i = 0; i < NT; i++)
		memset(T[i].ptr, 0, T[i].count * T[i].esize);
	barrier("restore");
	t0 = now_s();
	r = ckpt_restore(c, o.step, o.partial ? CKPT_PARTIAL : 0, &got);
	t1 = now_s();
	if (r < 0)
		return die(c, "ckpt_restore", r);
	if (o.expect >= 0 && got != (uint64_t)o.expect) {
		fprintf(stderr, "trainer[%d]: restored step %" PRIu64 ", expected %" PRId64 "\n",
			o.rank, got, o.expect);
		return 3;
	}
	for (size_t i = 0; i < NT; i++) {
		if ((o.extra && !strcmp(T[i].name, o.extra)) || (o.drop && !strcmp(T[i].name, o.drop)))
			continue;      /* not in the checkpoint / not registered */
		if (check(&T[i], i, got) < 0) {
			fprintf(stderr, "trainer[%d]: %s/%s differs from step %" PRIu64 "\n",
				o.rank, T[i].group, T[i].name, got);
			bad = 1;
		}
	}
	r = ckpt_get_blob(c, "rng", blob, sizeof(blob) - 1, &len);
	snprintf(want, sizeof(want), "rng-state rank=%d step=%" PRIu64, o.rank, got);
	if (r < 0 || len != strlen(want) || memcmp(blob, want, len)) {
		fprintf(stderr, "trainer[%d]: blob 'rng' wrong or missing (%s)\n", o.rank,
			r < 0 ? ckpt_strerror(r) : "content");
		bad = 1;
	}
	if (bad)
		return 3;
	static const char *const from[] = { "?", "disk", "memory", "peer", "remote" };
	struct ckpt_restore_info ri = { 0 };
	ckpt_restore_info(c, &ri);
	if (ri.source < 0 || ri.source > CKPT_FROM_REMOTE)
		ri.source = 0;
	if (o.json) {
		printf("{\"rank\": %d, \"step\": %" PRIu64 ", \"t0\": %.6f, "
		       "\"restore_s\": %.6f, \"bit_exact\": true, \"source\": \"%s\", "
		       "\"daemon_s\": %.6f}\n", o.rank, got, t0, t1 - t0, from[ri.source],
		       ri.micros / 1e6);
		return 0;
	}
	printf("rank %d restored step %" PRIu64 " bit-exact from %s%s%s\n", o.rank, got,
	       from[ri.source], *ckpt_last_error(c) ? "; " : "", ckpt_last_error(c));
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"socket", 1, NULL, 's'}, {"job", 1, NULL, 'j'}, {"rank", 1, NULL, 'r'},
		{"world", 1, NULL, 'w'}, {"mib", 1, NULL, 'm'}, {"steps", 1, NULL, 'S'},
		{"wait", 1, NULL, 'W'}, {"die-after-staged", 0, NULL, 'D'},
		{"die-mid-stage", 0, NULL, 'M'}, {"groups", 1, NULL, 'g'},
		{"keep-going", 0, NULL, 'k'}, {"step", 1, NULL, 't'}, {"expect", 1, NULL, 'e'},
		{"partial", 0, NULL, 'p'}, {"extra", 1, NULL, 'x'}, {"drop", 1, NULL, 'd'},
		{"quiet", 0, NULL, 'q'}, {"train-ms", 1, NULL, 'T'},
		{"json", 0, NULL, 'J'}, {"barrier", 1, NULL, 'B'},
		{"copy-floor", 0, NULL, 'F'}, {"ddp", 0, NULL, 'P'}, {"tensors", 1, NULL, 'N'},
		{"gate", 1, NULL, 'G'}, {"linger", 1, NULL, 'L'}, {"frozen", 1, NULL, 'Z'},
		{"frozen-every", 1, NULL, 'E'}, {"flag-frozen", 0, NULL, 'K'},
		{"hold", 1, NULL, 'H'}, {"content-step", 1, NULL, 'C'}, {NULL, 0, NULL, 0},
	};
	const char *cmd;
	ckpt_client *c = NULL;
	int ch, r;

	if (argc < 2) {
		fprintf(stderr, "usage: trainer save|restore [options] (see the source)\n");
		return 2;
	}
	cmd = argv[1];
	optind = 2;
	while ((ch = getopt_long(argc, argv, "s:j:r:w:m:S:W:g:kt:e:px:d:qT:", lo, NULL)) != -1) {
		switch (ch) {
		case 's': o.sock = optarg; break;
		case 'j': o.job = optarg; break;
		case 'r': o.rank = atoi(optarg); break;
		case 'w': o.world = atoi(optarg); break;
		case 'm': o.mib = atof(optarg); break;
		case 'S': {
			unsigned long long a = 0, b = 0, k = 1;
			int n = sscanf(optarg, "%llu:%llu:%llu", &a, &b, &k);
			o.first = a;
			o.last = n >= 2 ? b : a;
			o.every = n >= 3 && k ? k : 1;
			break;
		}
		case 'W':
			if (!strcmp(optarg, "none")) o.nowait = 1;
			else if (!strcmp(optarg, "staged")) o.wait = CKPT_STAGED;
			else if (!strcmp(optarg, "durable")) o.wait = CKPT_DURABLE;
			else o.wait = CKPT_COMMITTED;
			break;
		case 'D': o.die_after_staged = 1; break;
		case 'M': o.die_mid_stage = 1; break;
		case 'g': o.groups = optarg; break;
		case 'k': o.keep_going = 1; break;
		case 't': o.step = atoll(optarg); break;
		case 'e': o.expect = atoll(optarg); break;
		case 'p': o.partial = 1; break;
		case 'x': o.extra = optarg; break;
		case 'd': o.drop = optarg; break;
		case 'q': o.quiet = 1; break;
		case 'T': o.train_ms = atoi(optarg); break;
		case 'J': o.json = 1; break;
		case 'F': o.copy_floor = 1; break;
		case 'P': o.ddp = 1; break;
		case 'N': o.tensors = strtoull(optarg, NULL, 10); break;
		case 'B': o.barrier = optarg; break;
		case 'G': o.gate = optarg; break;
		case 'L': o.linger = optarg; break;
		case 'Z': o.frozen = optarg; break;
		case 'E': o.frozen_every = atoi(optarg); break;
		case 'K': o.flag_frozen = 1; break;
		case 'H': o.hold = optarg; break;
		case 'C': o.content_step = strtoull(optarg, NULL, 10); break;
		default: return 2;
		}
	}
	if (!o.job) {
		fprintf(stderr, "trainer: --job is required\n");
		return 2;
	}
	r = ckpt_connect(o.sock, o.job, o.rank, o.world, &c);
	if (r < 0)
		return die(NULL, "ckpt_connect", r);
	r = setup(c);
	if (r == 0)
		r = !strcmp(cmd, "save") ? cmd_save(c) : !strcmp(cmd, "restore") ? cmd_restore(c) : 2;
	ckpt_close(c);
	return r;
}
