/* gtrainer.c - a stand-in trainer for global tensors (ckpt_register_global):
 * every rank of a world registers its piece of five global tensors, laid
 * out by the world size, and saves; or registers its piece under a layout
 * for another world size and restores, checking each element against the
 * global reference.
 *
 *   gtrainer save    -s SOCK -j JOB -r RANK -w WORLD --step S [--bad gap|overlap|shape]
 *                    [--local] [--rep-only] [--tail]
 *   gtrainer restore -s SOCK -j JOB -r RANK -w WORLD [--step S] [--alt]
 *                    [--partial] [--absent] [--bad shape] [--tail]
 *
 * The tensors (group "model"): rep0..rep3, replicated on every rank (DDP);
 * "row" split by rows, "col" by columns, "blk" in a 2-D grid of blocks
 * (2x2 for 4 ranks), "uneven" by rows 3,3,2,2 for 4 ranks (an even split
 * otherwise).  --alt restores with other layouts: row by columns, col by
 * rows, blk by rows, rep0 split by rows.  --absent also registers a
 * global tensor the checkpoint lacks; --local also saves a rank-local
 * tensor "model/local" (ckpt_register); --rep-only registers rep0..rep3
 * only (with more than 4 ranks, some ranks then write nothing at all);
 * --tail also registers "tail", 2 rows split as torch.chunk does (rows
 * of ceil(2 / world) each: ranks past them hold an empty piece at [2]).  Element i of tensor t is a pure
 * function of (t, i, step).  Exit: 0 ok, 1 failure (message on stderr),
 * 3 data mismatch.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

enum split { SPLIT_NONE, SPLIT_ROWS, SPLIT_COLS, SPLIT_GRID, SPLIT_UNEVEN, SPLIT_CHUNK };

struct gt {
	const char *name;
	int64_t rows, cols;
	ckpt_dtype dt;
	size_t esize;
	enum split save, alt;     /* layout when saving / with --alt */
	int replicated;           /* saved replicated on every rank */
};

static const struct gt tensors[] = {
	{ "rep0", 256, 1024, CKPT_F32, 4, SPLIT_NONE, SPLIT_ROWS, 1 },
	{ "rep1", 256, 1024, CKPT_F32, 4, SPLIT_NONE, SPLIT_NONE, 1 },
	{ "rep2", 128, 1024, CKPT_F32, 4, SPLIT_NONE, SPLIT_NONE, 1 },
	{ "rep3", 128, 1024, CKPT_F32, 4, SPLIT_NONE, SPLIT_NONE, 1 },
	{ "row", 1024, 2048, CKPT_F32, 4, SPLIT_ROWS, SPLIT_COLS, 0 },
	{ "col", 2048, 1024, CKPT_F32, 4, SPLIT_COLS, SPLIT_ROWS, 0 },
	{ "blk", 1024, 1024, CKPT_F32, 4, SPLIT_GRID, SPLIT_ROWS, 0 },
	{ "uneven", 10, 1000, CKPT_I32, 4, SPLIT_UNEVEN, SPLIT_UNEVEN, 0 },
	{ "tail", 2, 64, CKPT_I32, 4, SPLIT_CHUNK, SPLIT_CHUNK, 0 },    /* --tail */
};
#define NT (sizeof(tensors) / sizeof(tensors[0]))

static struct {
	const char *sock, *job, *bad;
	int rank, world, alt, partial, absent, local, rep_only, tail;
	int64_t step;
} o = { .step = -1 };

/* part i of n parts of len: [*off, *off + *cnt) */
static void split_even(int64_t len, int n, int i, int64_t *off, int64_t *cnt)
{
	int64_t q = len / n, r = len % n;

	*off = i * q + (i < r ? i : r);
	*cnt = q + (i < r);
}

/* This rank's box of tensor t under split s. */
static void layout(const struct gt *t, enum split s, int rank, int world,
		   int64_t off[2], int64_t shape[2], int *ri, int *rc)
{
	off[0] = off[1] = 0;
	shape[0] = t->rows;
	shape[1] = t->cols;
	*ri = 0;
	*rc = 1;
	switch (s) {
	case SPLIT_NONE:
		*ri = rank;
		*rc = world;
		break;
	case SPLIT_ROWS:
		split_even(t->rows, world, rank, &off[0], &shape[0]);
		break;
	case SPLIT_COLS:
		split_even(t->cols, world, rank, &off[1], &shape[1]);
		break;
	case SPLIT_GRID: {
		int gr = 1;
		for (int k = 1; k * k <= world; k++)
			if (world % k == 0)
				gr = k;
		split_even(t->rows, gr, rank / (world / gr), &off[0], &shape[0]);
		split_even(t->cols, world / gr, rank % (world / gr), &off[1], &shape[1]);
		break;
	}
	case SPLIT_UNEVEN:
		if (world == 4 && t->rows == 10) {
			static const int64_t o4[4] = { 0, 3, 6, 8 }, n4[4] = { 3, 3, 2, 2 };
			off[0] = o4[rank];
			shape[0] = n4[rank];
		} else {
			split_even(t->rows, world, rank, &off[0], &shape[0]);
		}
		break;
	case SPLIT_CHUNK: {
		int64_t q = (t->rows + world - 1) / world;
		off[0] = rank * q < t->rows ? rank * q : t->rows;
		shape[0] = t->rows - off[0] < q ? t->rows - off[0] : q;
		break;
	}
	}
}

static uint32_t value(size_t t, uint64_t gidx, int64_t step)
{
	uint64_t x = (gidx + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)t << 56) ^ (uint64_t)step * 0x51ed27;
	x ^= x >> 29;
	return (uint32_t)(x * 0xbf58476d1ce4e5b9ull >> 32);
}

static int die(ckpt_client *c, const char *what, int r)
{
	fprintf(stderr, "gtrainer[%d]: %s: %s%s%s\n", o.rank, what, ckpt_strerror(r),
		c && *ckpt_last_error(c) ? ": " : "", c ? ckpt_last_error(c) : "");
	return 1;
}

struct piece {
	uint32_t *p;
	int64_t off[2], shape[2];
};

static int setup(ckpt_client *c, struct piece *pc, int saving, int64_t step)
{
	for (size_t k = 0; k < NT; k++) {
		const struct gt *t = &tensors[k];
		struct ckpt_layout l = { .replica_index = 0 };
		int r;
		if ((o.rep_only && !t->replicated) || (t->save == SPLIT_CHUNK && !o.tail)) {
			pc[k].shape[0] = pc[k].shape[1] = 0;   /* nothing to check */
			continue;
		}
		layout(t, saving ? t->save : (o.alt ? t->alt : t->save), o.rank, o.world,
		       pc[k].off, pc[k].shape, &l.replica_index, &l.replica_count);
		l.global_shape[0] = t->rows;
		l.global_shape[1] = t->cols;
		if (o.bad && !strcmp(t->name, "row")) {   /* restore: --bad shape */
			if (!strcmp(o.bad, "gap") && o.rank == 0)
				pc[k].shape[0]--;
			if (!strcmp(o.bad, "overlap") && o.rank == 1)
				pc[k].off[0]--;
			if (!strcmp(o.bad, "shape") && o.rank == o.world - 1)
				l.global_shape[0] += 8;
		}
		l.offset[0] = pc[k].off[0];
		l.offset[1] = pc[k].off[1];
		pc[k].p = ckpt_alloc(c, (size_t)(pc[k].shape[0] * pc[k].shape[1]) * t->esize + 1);
		if (!pc[k].p)
			return die(c, "ckpt_alloc", -ENOMEM);
		for (int64_t i = 0; saving && i < pc[k].shape[0]; i++)
			for (int64_t j = 0; j < pc[k].shape[1]; j++)
				pc[k].p[i * pc[k].shape[1] + j] =
					value(k, (uint64_t)((pc[k].off[0] + i) * t->cols + pc[k].off[1] + j), step);
		r = ckpt_register_global(c, "model", t->name, pc[k].p, t->dt, 2, pc[k].shape, &l);
		if (r < 0)
			return die(c, "ckpt_register_global", r);
	}
	if (o.local) {
		int64_t shape[1] = { 16 };
		int32_t *p = ckpt_alloc(c, 64);
		int r = p ? ckpt_register(c, "model", "local", p, CKPT_I32, 1, shape) : -ENOMEM;
		if (r < 0)
			return die(c, "ckpt_register", r);
	}
	if (o.absent) {
		static uint32_t dummy[4];
		struct ckpt_layout l = { { 4 }, { 0 }, 0, 1 };
		int64_t shape[1] = { 4 };
		void *p = ckpt_alloc(c, sizeof(dummy));
		int r = p ? ckpt_register_global(c, "model", "absent", p, CKPT_I32, 1, shape, &l) : -ENOMEM;
		if (r < 0)
			return die(c, "ckpt_register_global", r);
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"socket", 1, NULL, 's'}, {"job", 1, NULL, 'j'}, {"rank", 1, NULL, 'r'},
		{"world", 1, NULL, 'w'}, {"step", 1, NULL, 't'}, {"bad", 1, NULL, 'b'},
		{"alt", 0, NULL, 'a'}, {"partial", 0, NULL, 'p'}, {"absent", 0, NULL, 'A'},
		{"local", 0, NULL, 'l'}, {"rep-only", 0, NULL, 'R'}, {"tail", 0, NULL, 'T'},
		{NULL, 0, NULL, 0},
	};
	struct piece pc[NT];
	ckpt_client *c = NULL;
	uint64_t ticket, got = 0;
	int ch, r, saving;

	if (argc < 2)
		return 2;
	saving = !strcmp(argv[1], "save");
	optind = 2;
	while ((ch = getopt_long(argc, argv, "s:j:r:w:t:b:apAlRT", lo, NULL)) != -1) {
		switch (ch) {
		case 's': o.sock = optarg; break;
		case 'j': o.job = optarg; break;
		case 'r': o.rank = atoi(optarg); break;
		case 'w': o.world = atoi(optarg); break;
		case 't': o.step = atoll(optarg); break;
		case 'b': o.bad = optarg; break;
		case 'a': o.alt = 1; break;
		case 'p': o.partial = 1; break;
		case 'A': o.absent = 1; break;
		case 'l': o.local = 1; break;
		case 'R': o.rep_only = 1; break;
		case 'T': o.tail = 1; break;
		default: return 2;
		}
	}
	if ((r = ckpt_connect(o.sock, o.job, o.rank, o.world, &c)) < 0)
		return die(NULL, "ckpt_connect", r);
	if ((r = setup(c, pc, saving, o.step)) != 0)
		return r;
	if (saving) {
		if ((r = ckpt_save(c, (uint64_t)o.step, &ticket)) < 0)
			return die(c, "ckpt_save", r);
		if ((r = ckpt_wait(c, ticket, CKPT_COMMITTED, -1)) < 0)
			return die(c, "ckpt_wait", r);
		printf("rank %d saved step %" PRId64 "\n", o.rank, o.step);
		ckpt_close(c);
		return 0;
	}
	r = ckpt_restore(c, o.step, o.partial ? CKPT_PARTIAL : 0, &got);
	if (r < 0)
		return die(c, "ckpt_restore", r);
	for (size_t k = 0; k < NT; k++) {
		const struct gt *t = &tensors[k];
		for (int64_t i = 0; i < pc[k].shape[0]; i++)
			for (int64_t j = 0; j < pc[k].shape[1]; j++)
				if (pc[k].p[i * pc[k].shape[1] + j] !=
				    value(k, (uint64_t)((pc[k].off[0] + i) * t->cols + pc[k].off[1] + j),
					  (int64_t)got)) {
					fprintf(stderr, "gtrainer[%d]: %s differs at [%" PRId64 ", %" PRId64
						"] from step %" PRIu64 "\n", o.rank, t->name,
						pc[k].off[0] + i, pc[k].off[1] + j, got);
					return 3;
				}
	}
	{
		struct ckpt_restore_info ri;
		const char *g, *name;
		ckpt_restore_info(c, &ri);
		printf("rank %d of %d restored step %" PRIu64 " bit-exact, %" PRIu64 " bytes",
		       o.rank, o.world, got, ri.bytes);
		for (int i = 0; i < ri.n_missing; i++)
			if (ckpt_restore_missing(c, i, &g, &name) == 0)
				printf("; missing %s/%s", g, name);
		printf("\n");
	}
	ckpt_close(c);
	return 0;
}
