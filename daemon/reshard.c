/* reshard.c - global tensors restored into any layout (see reshard.h).
 * Shared by ckptd's restore and `ckptctl export` (no daemon state). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "csum.h"
#include "layout.h"
#include "reshard.h"
#include "tiling.h"

/* Bytes [src, src+len) of file `file` go to byte dst of want `w`; no op
 * crosses a chunk boundary of its file. */
struct op {
	size_t   file, w;
	uint64_t src, dst, len;
};

struct ops {
	struct op *v;
	size_t     n, cap;
	/* while collecting the runs of one saved piece */
	const struct mfst *m;
	const struct mfst_piece *piece;
	size_t     w;
};

static int push(struct ops *o, struct op op)
{
	if (o->n == o->cap) {
		size_t c = o->cap ? o->cap * 2 : 256;
		struct op *v = realloc(o->v, c * sizeof(*v));
		if (!v)
			return -ENOMEM;
		o->v = v;
		o->cap = c;
	}
	o->v[o->n++] = op;
	return 0;
}

/* tiling_runs callback: one run, cut at the file's chunk boundaries */
static int add_run(void *arg, uint64_t s, uint64_t d, uint64_t len)
{
	struct ops *o = arg;
	const struct mfst_piece *p = o->piece;
	uint64_t cs = o->m->files[p->t.file].chunk_size, at = p->t.begin + s;

	while (len) {
		uint64_t take = cs - at % cs;
		int r;
		if (take > len)
			take = len;
		if ((r = push(o, (struct op){ p->t.file, o->w, at, d, take })) < 0)
			return r;
		at += take;
		d += take;
		len -= take;
	}
	return 0;
}

static int cmp_op(const void *a, const void *b)
{
	const struct op *x = a, *y = b;

	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->src < y->src ? -1 : x->src > y->src;
}

static const struct mfst_global *find(const struct mfst *m, const char *group,
				      const char *name)
{
	for (size_t g = 0; g < m->nglobals; g++)
		if (!strcmp(m->globals[g].group, group) && !strcmp(m->globals[g].name, name))
			return &m->globals[g];
	return NULL;
}

/* Open dir/name of the checkpoint without following links. */
static int open_file(int iterfd, const char *path)
{
	char dir[LAYOUT_PATH_MAX], *slash;
	int dfd, fd, err;

	snprintf(dir, sizeof(dir), "%s", path);
	if (!(slash = strchr(dir, '/')))
		return -EINVAL;
	*slash = '\0';
	dfd = openat(iterfd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	fd = openat(dfd, slash + 1, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	err = errno;
	close(dfd);
	return fd < 0 ? -err : fd;
}

static int pread_all(int fd, uint8_t *buf, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = pread(fd, buf + got, len - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		got += (size_t)r;
	}
	return 0;
}

/* Chunk bytes [start, start + len) of file f into buf, from mem or else
 * from the file (opened on first use, *fd), checked. */
static int read_chunk(int iterfd, const struct mfst_file *f, const struct reshard_mem *mem,
		      int *fd, uint64_t k, uint8_t *buf, size_t len, struct reshard_stats *st,
		      char *msg, size_t msglen)
{
	uint64_t start = k * f->chunk_size;
	int r = mem ? mem->read(mem->arg, f, start, buf, len, msg, msglen) : 1;

	if (r <= 0) {
		st->chunks_from_mem += r == 0;
		return r;
	}
	if (*fd < 0 && (*fd = open_file(iterfd, f->path)) < 0) {
		snprintf(msg, msglen, "%s: cannot open: %s", f->path, strerror(-*fd));
		return *fd;
	}
	if ((r = pread_all(*fd, buf, len, start)) < 0) {
		snprintf(msg, msglen, "%s: read error at %llu: %s", f->path,
			 (unsigned long long)start, strerror(-r));
		return r;
	}
	st->bytes_read += len;
	if (csum_crc32c(0, buf, len) != f->crc32c[k]) {
		snprintf(msg, msglen, "%s: chunk %llu (bytes %llu..%llu) does not match its "
			 "CRC32C", f->path, (unsigned long long)k,
			 (unsigned long long)start, (unsigned long long)(start + len));
		return -EBADMSG;
	}
	return 0;
}

/* Read, check and deliver ops[0..n) (one file, sorted by src). */
static int one_file(int iterfd, const struct mfst_file *f, const struct reshard_mem *mem,
		    const struct op *ops, size_t n, const struct reshard_want *want,
		    uint8_t *buf, const atomic_int *cancel, struct reshard_stats *st,
		    char *msg, size_t msglen)
{
	uint64_t cs = f->chunk_size;
	int fd = -1, r = 0;
	size_t i = 0;

	while (i < n && r == 0) {
		uint64_t k = ops[i].src / cs, start = k * cs;
		size_t len = (size_t)(f->size - start < cs ? f->size - start : cs);
		if (cancel && atomic_load(cancel)) {
			r = -ECANCELED;
			snprintf(msg, msglen, "the restore was cancelled");
			break;
		}
		if ((r = read_chunk(iterfd, f, mem, &fd, k, buf, len, st, msg, msglen)) < 0)
			break;
		st->chunks++;
		for (; i < n && ops[i].src / cs == k && r == 0; i++) {
			const struct op *op = &ops[i];
			const struct reshard_want *w = &want[op->w];
			const uint8_t *from = buf + (op->src - start);
			if (w->dst)
				memcpy(w->dst + op->dst, from, op->len);
			else
				r = w->copy(w->copy_arg, op->dst, from, op->len, msg, msglen);
			st->bytes_delivered += op->len;
		}
	}
	if (fd >= 0)
		close(fd);
	return r;
}

/* The checkpoint's global for want w, checked; NULL when it has none. */
static int lookup(const struct mfst *m, const struct reshard_want *w,
		  const struct mfst_global **out, char *msg, size_t msglen)
{
	const struct mfst_global *g = find(m, w->group, w->name);

	*out = g;
	if (!g)
		return 0;
	if (strcmp(g->dtype, w->dtype) || g->ndim != w->ndim ||
	    memcmp(g->shape, w->gshape, sizeof(int64_t) * (size_t)w->ndim)) {
		char saved[SAFET_MAX_NDIM * 21 + 4], asked[sizeof(saved)];
		snprintf(msg, msglen, "iter_%09llu: dtype or global shape differs for global "
			 "tensor %s/%s (checkpoint %s %s; registered %s %s)",
			 (unsigned long long)m->step, w->group, w->name, g->dtype,
			 tiling_dims_text(saved, sizeof(saved), g->shape, g->ndim), w->dtype,
			 tiling_dims_text(asked, sizeof(asked), w->gshape, w->ndim));
		return -EINVAL;
	}
	for (size_t k = 0; k < g->npieces; k++)
		if (!m->files[m->pieces[g->first_piece + k].t.file].chunk_size) {
			snprintf(msg, msglen, "iter_%09llu: %s has no chunk checksums",
				 (unsigned long long)m->step,
				 m->files[m->pieces[g->first_piece + k].t.file].path);
			return -EINVAL;
		}
	return 0;
}

int reshard_restore(int iterfd, const struct mfst *m, const struct reshard_mem *mem,
		    const struct reshard_want *want, size_t n, int partial, const atomic_int *cancel, json_t *restored,
		    json_t *missing, struct reshard_stats *st, char *msg, size_t msglen)
{
	struct ops o = { .m = m };
	uint64_t maxchunk = 0;
	uint8_t *buf = NULL;
	size_t nmissing = 0, i, j;
	int r = 0;

	for (size_t w = 0; w < n && r == 0; w++) {
		const struct reshard_want *x = &want[w];
		const struct mfst_global *g;
		int64_t io[SAFET_MAX_NDIM], is[SAFET_MAX_NDIM];
		size_t esize = safet_dtype_size(x->dtype);
		if ((r = lookup(m, x, &g, msg, msglen)) < 0)
			break;
		if (!g) {
			json_array_append_new(missing, json_sprintf("%s/%s", x->group, x->name));
			nmissing++;
			continue;
		}
		json_array_append_new(restored, json_sprintf("%s/%s", x->group, x->name));
		o.w = w;
		for (size_t k = 0; k < g->npieces && r == 0; k++) {
			const struct mfst_piece *p = &m->pieces[g->first_piece + k];
			struct tbox sb = { p->offset, p->t.shape }, db = { x->offset, x->shape };
			if (!tiling_intersect(x->ndim, sb, db, io, is))
				continue;
			o.piece = p;
			if (m->files[p->t.file].chunk_size > maxchunk)
				maxchunk = m->files[p->t.file].chunk_size;
			r = tiling_runs(x->ndim, (struct tbox){ io, is }, sb, db, esize, add_run, &o);
			if (r == -ENOMEM)
				snprintf(msg, msglen, "out of memory planning the restore");
		}
	}
	if (r == 0 && nmissing && !partial) {
		char *mi = json_dumps(missing, JSON_COMPACT);
		snprintf(msg, msglen, "iter_%09llu does not match the registered tensors: global "
			 "tensor(s) %s are not in it (CKPT_PARTIAL restores the others)",
			 (unsigned long long)m->step, mi ? mi : "?");
		free(mi);
		r = -EINVAL;          /* a mismatch, not "no checkpoint" */
	}
	if (r == 0 && o.n && !(buf = malloc(maxchunk))) {
		snprintf(msg, msglen, "out of memory for a %llu-byte chunk",
			 (unsigned long long)maxchunk);
		r = -ENOMEM;
	}
	if (r == 0)
		qsort(o.v, o.n, sizeof(*o.v), cmp_op);
	for (i = 0; r == 0 && i < o.n; i = j) {
		for (j = i + 1; j < o.n && o.v[j].file == o.v[i].file; j++)
			;
		r = one_file(iterfd, &m->files[o.v[i].file], mem, o.v + i, j - i, want, buf,
			     cancel, st, msg, msglen);
	}
	free(buf);
	free(o.v);
	return r;
}
