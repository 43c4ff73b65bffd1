/* ctl_export.c - `ckptctl export`: the global tensors of a checkpoint's
 * group written whole in the Hugging Face layout (model-0000K-of-0000N
 * .safetensors + model.safetensors.index.json), streamed in bounded slabs
 * through the same checked chunk reads as a restore (daemon/reshard.c). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "mfst.h"
#include "reshard.h"
#include "safet.h"
#include "tiling.h"
#include "verify.h"

#define EXPORT_SLAB_BYTES (64u << 20)     /* memory for one slab of a tensor */
#define EXPORT_DEFAULT_MAX (5ull * 1000 * 1000 * 1000)   /* "5GB", as HF */

struct shard {
	size_t first, n;            /* in the sorted globals */
	uint64_t bytes;
	char name[64];
	bool created;               /* this export made the file: removed on failure */
};

struct export {
	int dirfd, outfd;
	const struct mfst *m;
	const struct mfst_global **g;  /* the group's globals, by name */
	size_t ng;
	struct shard *shards;
	size_t nshards;
	uint64_t total, done;
	uint8_t *slab;
	bool bar;
	bool index_created;         /* as shard.created */
};

/* "5GB", "500MB", "2GiB", "1000000": bytes; 0 on a bad size. */
static uint64_t parse_size(const char *s)
{
	static const struct { const char *sfx; uint64_t mul; } u[] = {
		{ "KiB", 1ull << 10 }, { "MiB", 1ull << 20 }, { "GiB", 1ull << 30 },
		{ "TiB", 1ull << 40 }, { "KB", 1000ull }, { "MB", 1000000ull },
		{ "GB", 1000000000ull }, { "TB", 1000000000000ull }, { "B", 1 }, { "", 1 },
	};
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !(v > 0))
		return 0;
	for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++)
		if (!strcasecmp(end, u[i].sfx))
			return v * u[i].mul >= 1 && v * u[i].mul < 1e18 ?
			       (uint64_t)(v * u[i].mul) : 0;
	return 0;
}

static uint64_t tensor_bytes(const struct mfst_global *g)
{
	return (uint64_t)tiling_volume(g->ndim, g->shape) * safet_dtype_size(g->dtype);
}

static int cmp_global(const void *a, const void *b)
{
	return strcmp((*(const struct mfst_global *const *)a)->name,
		      (*(const struct mfst_global *const *)b)->name);
}

static void progress(struct export *x, bool last)
{
	char bar[48], a[32], b[32];

	if (!x->bar)
		return;
	fprintf(stderr, "\rexport %s %3.0f%% %s of %s%s", fmt_bar(x->total ?
		(double)x->done / (double)x->total : 1, 30, bar, sizeof(bar)),
		x->total ? 100.0 * (double)x->done / (double)x->total : 100.0,
		fmt_bytes(x->done, a, sizeof(a)), fmt_bytes(x->total, b, sizeof(b)),
		last ? "\n" : "");
	fflush(stderr);
}

static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Tensor g whole into fd, slab by slab along its first dimension. */
static int write_tensor(struct export *x, const struct mfst_global *g, int fd,
			char *msg, size_t msglen)
{
	size_t esize = safet_dtype_size(g->dtype);
	uint64_t row = esize;
	int64_t step;

	for (int d = 1; d < g->ndim; d++)
		row *= (uint64_t)g->shape[d];
	if (g->ndim == 0 || tiling_volume(g->ndim, g->shape) == 0)
		step = 1;
	else
		step = row >= EXPORT_SLAB_BYTES ? 1 : (int64_t)(EXPORT_SLAB_BYTES / row);
	for (int64_t r0 = 0; r0 < (g->ndim ? g->shape[0] : 1); r0 += step) {
		struct reshard_want w = { .group = g->group, .name = g->name, .ndim = g->ndim };
		struct reshard_stats st = { 0 };
		json_t *done = json_array(), *missing = json_array();
		uint64_t len;
		uint8_t *buf = x->slab;
		int r;

		memcpy(w.dtype, g->dtype, sizeof(w.dtype));
		memcpy(w.gshape, g->shape, sizeof(w.gshape));
		memcpy(w.shape, g->shape, sizeof(w.shape));
		if (g->ndim) {
			w.offset[0] = r0;
			w.shape[0] = r0 + step > g->shape[0] ? g->shape[0] - r0 : step;
		}
		len = (uint64_t)tiling_volume(g->ndim, w.shape) * esize;
		if (len > EXPORT_SLAB_BYTES && !(buf = malloc(len))) {   /* one huge row */
			snprintf(msg, msglen, "out of memory for a row of %s", g->name);
			r = -ENOMEM;
		} else {
			w.dst = buf;
			r = done && missing ? reshard_restore(x->dirfd, x->m, NULL, &w, 1, 0, NULL, done,
							      missing, &st, msg, msglen) : -ENOMEM;
		}
		json_decref(done);
		json_decref(missing);
		if (r == 0 && (r = write_all(fd, buf, (size_t)len)) < 0)
			snprintf(msg, msglen, "write: %s", strerror(-r));
		if (buf != x->slab)
			free(buf);
		if (r < 0)
			return r;
		x->done += len;
		progress(x, false);
		if (!len)
			break;
	}
	return 0;
}

static int write_shard(struct export *x, struct shard *s, json_t *map,
		       char *msg, size_t msglen)
{
	struct safet_entry *e = calloc(s->n + 1, sizeof(*e));
	uint64_t *offs = calloc(s->n + 2, sizeof(*offs));
	static const char *const meta[] = { "format", "pt", NULL };
	uint8_t *hdr = NULL;
	size_t hlen = 0;
	int fd = -1, r = -ENOMEM;

	if (!e || !offs)
		goto out;
	for (size_t i = 0; i < s->n; i++) {
		const struct mfst_global *g = x->g[s->first + i];
		e[i] = (struct safet_entry){ g->name, g->dtype, g->ndim, g->shape, tensor_bytes(g) };
		json_object_set_new(map, g->name, json_string(s->name));
	}
	if ((r = safet_header_build(e, s->n, meta, 8, &hdr, &hlen, offs)) < 0) {
		snprintf(msg, msglen, "%s: cannot build the safetensors header", s->name);
		goto out;
	}
	fd = openat(x->outfd, s->name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = -errno;
		snprintf(msg, msglen, "%s: %s", s->name, strerror(errno));
		goto out;
	}
	s->created = true;
	if ((r = write_all(fd, hdr, hlen)) < 0) {
		snprintf(msg, msglen, "%s: write: %s", s->name, strerror(-r));
		goto out;
	}
	for (size_t i = 0; i < s->n && r == 0; i++)
		r = write_tensor(x, x->g[s->first + i], fd, msg, msglen);
	if (r == 0 && fsync(fd) < 0) {
		r = -errno;
		snprintf(msg, msglen, "%s: fsync: %s", s->name, strerror(errno));
	}
out:
	if (fd >= 0)
		close(fd);
	free(hdr);
	free(offs);
	free(e);
	return r;
}

static int write_index(struct export *x, json_t *map, char *msg, size_t msglen)
{
	json_t *idx = json_pack("{s:{s:I}, s:O}", "metadata", "total_size",
				(json_int_t)x->total, "weight_map", map);
	char *s = idx ? json_dumps(idx, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
	int fd, r = -ENOMEM;

	json_decref(idx);
	if (!s) {
		snprintf(msg, msglen, "out of memory");
		return r;
	}
	fd = openat(x->outfd, "model.safetensors.index.json",
		    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd >= 0)
		x->index_created = true;
	if (fd < 0) {
		r = -errno;
		snprintf(msg, msglen, "model.safetensors.index.json: %s", strerror(errno));
	} else if ((r = write_all(fd, s, strlen(s))) < 0 || (r = write_all(fd, "\n", 1)) < 0 ||
		   (fsync(fd) < 0 && (r = -errno) < 0)) {
		snprintf(msg, msglen, "model.safetensors.index.json: %s", strerror(-r));
	}
	if (fd >= 0)
		close(fd);
	free(s);
	return r;
}

/* The group to export: the one asked for, else the only one with global
 * tensors. */
static const char *pick_group(const struct mfst *m, const char *want)
{
	const char *only = NULL;

	for (size_t g = 0; g < m->nglobals; g++) {
		if (want && !strcmp(m->globals[g].group, want))
			return want;
		if (!want && only && strcmp(only, m->globals[g].group))
			die(EXIT_USAGE, "export: global tensors in groups %s and %s: say which "
			    "with --group", only, m->globals[g].group);
		only = m->globals[g].group;
	}
	if (want)
		die(EXIT_FAIL, "export: the checkpoint has no global tensors in group '%s'", want);
	if (!only)
		die(EXIT_FAIL, "export: the checkpoint has no global tensors "
		    "(rank-local tensors cannot be exported)");
	return only;
}

int export_main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "group", required_argument, NULL, 'g' },
		{ "max-shard-size", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *group = NULL, *in, *out;
	uint64_t max = EXPORT_DEFAULT_MAX;
	struct export x = { .dirfd = -1, .outfd = -1 };
	struct mfst *m = NULL;
	json_t *map;
	char msg[768] = "";
	size_t skipped = 0;
	int ch, r = 0;

	optind = 0;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "hg:", lo, NULL)) != -1) {
		switch (ch) {
		case 'g': group = optarg; break;
		case 'm':
			if (!(max = parse_size(optarg)))
				die(EXIT_USAGE, "export: --max-shard-size wants a size such as "
				    "5GB or 500MiB, not '%s'", optarg);
			break;
		case 'h':
			return ctl_help("export");
		default:
			die(EXIT_USAGE, "export: unknown or incomplete option '%s' (try "
			    "'ckptctl help export')", argv[optind - 1]);
		}
	}
	if (argc - optind != 2)
		die(EXIT_USAGE, "export: ckptctl export ITER_DIR OUT_DIR [--group G] "
		    "[--max-shard-size 5GB]");
	in = argv[optind];
	out = argv[optind + 1];
	if ((x.dirfd = open(in, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		die(EXIT_FAIL, "export: %s: %s", in, strerror(errno));
	if ((r = verify_checkpoint(x.dirfd, VERIFY_STRUCTURE, 0, &m, msg, sizeof(msg))) < 0)
		die(EXIT_FAIL, "export: %s: %s", in, msg);
	x.m = m;
	group = pick_group(m, group);
	for (size_t t = 0; t < m->ntensors; t++)
		if (!strcmp(m->tensors[t].group, group)) {
			printf("skipped (rank-local, rank %d): %s/%s\n", m->tensors[t].rank,
			       group, m->tensors[t].name);
			skipped++;
		}
	x.g = calloc(m->nglobals + 1, sizeof(*x.g));
	x.shards = calloc(m->nglobals + 1, sizeof(*x.shards));
	x.slab = malloc(EXPORT_SLAB_BYTES);
	map = json_object();
	if (!x.g || !x.shards || !x.slab || !map)
		die(EXIT_FAIL, "export: out of memory");
	for (size_t g = 0; g < m->nglobals; g++)
		if (!strcmp(m->globals[g].group, group))
			x.g[x.ng++] = &m->globals[g];
	qsort(x.g, x.ng, sizeof(*x.g), cmp_global);
	/* shards of at most max bytes (a tensor larger than that alone) */
	for (size_t i = 0; i < x.ng; i++) {
		uint64_t b = tensor_bytes(x.g[i]);
		struct shard *s = x.nshards ? &x.shards[x.nshards - 1] : NULL;
		if (!s || (s->n && s->bytes + b > max)) {
			s = &x.shards[x.nshards++];
			s->first = i;
		}
		s->n++;
		s->bytes += b;
		x.total += b;
	}
	for (size_t k = 0; k < x.nshards; k++)
		snprintf(x.shards[k].name, sizeof(x.shards[k].name),
			 "model-%05zu-of-%05zu.safetensors", k + 1, x.nshards);
	if (mkdir(out, 0755) < 0 && errno != EEXIST)
		die(EXIT_FAIL, "export: %s: %s", out, strerror(errno));
	if ((x.outfd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		die(EXIT_FAIL, "export: %s: %s", out, strerror(errno));
	x.bar = isatty(STDERR_FILENO);
	for (size_t k = 0; k < x.nshards && r == 0; k++)
		r = write_shard(&x, &x.shards[k], map, msg, sizeof(msg));
	if (r == 0)
		r = write_index(&x, map, msg, sizeof(msg));
	progress(&x, true);
	if (r < 0) {
		/* a half-written export is no export: remove what this run made
		 * (created with O_EXCL, so nothing that was there before) */
		for (size_t k = 0; k < x.nshards; k++)
			if (x.shards[k].created)
				unlinkat(x.outfd, x.shards[k].name, 0);
		if (x.index_created)
			unlinkat(x.outfd, "model.safetensors.index.json", 0);
		fprintf(stderr, "ckptctl: export: %s\n", msg);
	} else {
		char b[32];
		printf("exported %zu tensors of group %s (%s) as %zu shard(s) into %s%s\n",
		       x.ng, group, fmt_bytes(x.total, b, sizeof(b)), x.nshards, out,
		       skipped ? "; rank-local tensors skipped (listed above)" : "");
	}
	json_decref(map);
	free(x.slab);
	free(x.shards);
	free(x.g);
	mfst_free(m);
	close(x.outfd);
	close(x.dirfd);
	return r < 0 ? EXIT_FAIL : 0;
}
