/* restore_into.c - copies the step a RESTORE chose into the trainer's
 * tensors: matches what the trainer registered against the step's
 * manifest, then reads its shards, global pieces and blobs from the files
 * (checked as read) or from the memory tier. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fcheck.h"
#include "gpu.h"
#include "layout.h"
#include "log.h"
#include "memt.h"
#include "mfst.h"
#include "nidx.h"
#include "reshard.h"
#include "restore_int.h"
#include "shard_read.h"
#include "srv.h"
#include "tiling.h"
#include "verdict.h"
#include "verify.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* A piece of a manifest tensor for shard_read, tagged with its file. */
struct fseg {
	size_t           file;
	struct shard_seg seg;
};

static int cmp_fseg(const void *a, const void *b)
{
	const struct fseg *x = a, *y = b;

	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->seg.begin < y->seg.begin ? -1 : x->seg.begin > y->seg.begin;
}

static int read_blob(int iterfd, const struct mfst *m, const struct mfst_blob *b,
		     struct restore_blob *out, char *msg, size_t msglen)
{
	const struct mfst_file *mf = &m->files[b->file];
	struct fcheck fc = { 0 };
	char why[300];
	int dfd, fd = -1, r = 0;
	char rankdir[32];

	layout_rank_dir(b->rank, rankdir, sizeof(rankdir));
	dfd = openat(iterfd, LAYOUT_EXTRA, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd >= 0) {
		int rd = openat(dfd, rankdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(dfd);
		dfd = rd;
	}
	if (dfd >= 0)
		fd = openat(dfd, b->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	out->data = malloc(mf->size ? mf->size : 1);
	out->name = strdup(b->name);
	out->len = mf->size;
	if (fd < 0 || !out->data || !out->name) {
		r = fd < 0 ? -ENOENT : -ENOMEM;
		snprintf(msg, msglen, "blob %s: %s", mf->path, strerror(-r));
		goto out;
	}
	if (pread(fd, out->data, mf->size, 0) != (ssize_t)mf->size) {
		r = -EIO;
		snprintf(msg, msglen, "blob %s: short read", mf->path);
		goto out;
	}
	if ((r = fcheck_init(&fc, mf, msg, msglen)) < 0)
		goto out;
	if ((r = fcheck_update(&fc, out->data, mf->size, why, sizeof(why))) == 0)
		r = fcheck_final(&fc, why, sizeof(why));
	if (r < 0)
		snprintf(msg, msglen, "blob %s", why);
out:
	fcheck_release(&fc);
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	return r;
}

struct want_key {              /* what same_want() compares a candidate with */
	const struct want *want;
	const char *group, *name;
};

static int same_want(void *ctx, size_t pos)
{
	const struct want_key *k = ctx;

	return !strcmp(k->want[pos].group, k->group) && !strcmp(k->want[pos].name, k->name);
}

/* The registered rank-local tensor (group, name), or NULL. */
static struct want *find_want(struct restore_work *w, const struct nidx *idx,
			      const char *group, const char *name)
{
	struct want_key k = { w->want, group, name };
	long i = nidx_find(idx, nidx_hash(group, name), same_want, &k);

	return i < 0 ? NULL : &w->want[i];
}

struct global_key {            /* what same_global() compares a candidate with */
	const struct mfst *m;
	const char *group, *name;
};

static int same_global(void *ctx, size_t pos)
{
	const struct global_key *k = ctx;

	return !strcmp(k->m->globals[pos].group, k->group) &&
	       !strcmp(k->m->globals[pos].name, k->name);
}

/* Appends "group/name (why)" to the list of tensors registered unlike in
 * the checkpoint (cut short when it is full). */
static void unlike(char *bad, size_t len, size_t *nb, const char *group, const char *name,
		   const char *why)
{
	if (*nb < len - 64)
		*nb += (size_t)snprintf(bad + *nb, len - *nb, "%s%s/%s (%s)", *nb ? ", " : "",
					group, name, why);
}

/* Compare what the trainer registered with the checkpoint's tensors of this
 * rank; fills dst_of[t] for manifest tensor t.  Names are looked up in an
 * index: a scan per tensor made restoring 100,000 tensors take a minute.
 * A tensor registered as a global where the checkpoint has a rank-local
 * one of that name, or the other way round, is said to be so, not
 * reported as missing on one side and not registered on the other. */
static int match(struct restore_work *w, const struct mfst *m, struct want **dst_of)
{
	struct restore_result *res = &w->res;
	struct nidx idx = { 0 }, gidx = { 0 }, midx = { 0 };
	char bad[512] = "", why[160], a[SAFET_MAX_NDIM * 21 + 4], b[sizeof(a)];
	size_t nb = 0;
	int r = -ENOMEM;

	for (size_t k = 0; k < w->nwant; k++)
		if (nidx_put(w->want[k].global ? &gidx : &idx,
			     nidx_hash(w->want[k].group, w->want[k].name), k) < 0)
			goto nomem;

	/* rank-local tensors belong to the same rank of the same world */
	for (size_t i = 0; i < m->ntensors && m->world_size == w->world; i++) {
		const struct mfst_tensor *mt = &m->tensors[i];
		struct want *wt;
		if (mt->rank != w->rank)
			continue;
		if (!(wt = find_want(w, &idx, mt->group, mt->name))) {
			if (find_want(w, &gidx, mt->group, mt->name))
				unlike(bad, sizeof(bad), &nb, mt->group, mt->name,
				       "rank-local in the checkpoint, registered as a global tensor");
			else
				restore_list_add(res->unexpected, mt->group, mt->name);
			continue;
		}
		wt->matched = 1;
		if (strcmp(wt->dtype, mt->dtype) || wt->ndim != mt->ndim ||
		    memcmp(wt->shape, mt->shape, sizeof(int64_t) * (size_t)mt->ndim)) {
			snprintf(why, sizeof(why), "checkpoint %s %s, registered %s %s", mt->dtype,
				 tiling_dims_text(a, sizeof(a), mt->shape, mt->ndim), wt->dtype,
				 tiling_dims_text(b, sizeof(b), wt->shape, wt->ndim));
			unlike(bad, sizeof(bad), &nb, mt->group, mt->name, why);
			continue;
		}
		dst_of[i] = wt;
		restore_list_add(res->restored, mt->group, mt->name);
	}
	for (size_t k = 0, indexed = 0; k < w->nwant; k++) {
		const struct want *x = &w->want[k];
		struct global_key gk = { m, x->group, x->name };
		if (x->matched || x->global)
			continue;
		/* the checkpoint's globals are indexed only when a tensor is missing */
		for (; indexed < m->nglobals; indexed++)
			if (nidx_put(&midx, nidx_hash(m->globals[indexed].group,
						      m->globals[indexed].name), indexed) < 0)
				goto nomem;
		if (nidx_find(&midx, nidx_hash(x->group, x->name), same_global, &gk) >= 0)
			unlike(bad, sizeof(bad), &nb, x->group, x->name,
			       "a global tensor in the checkpoint, registered rank-local");
		else
			restore_list_add(res->missing, x->group, x->name);
	}
	r = 0;
	if (nb) {
		snprintf(w->msg, sizeof(w->msg), "iter_%09llu: tensors registered unlike in the "
			 "checkpoint: %s", (unsigned long long)m->step, bad);
		r = -EINVAL;
	}
nomem:
	nidx_release(&idx);
	nidx_release(&gidx);
	nidx_release(&midx);
	if (r == -ENOMEM)
		snprintf(w->msg, sizeof(w->msg), "out of memory indexing the registered tensors");
	if (r < 0)
		return r;
	if (!w->partial && (json_array_size(res->missing) || json_array_size(res->unexpected))) {
		char *mi = json_dumps(res->missing, JSON_COMPACT);
		char *un = json_dumps(res->unexpected, JSON_COMPACT);
		snprintf(w->msg, sizeof(w->msg), "iter_%09llu does not match the registered tensors: "
			 "missing from the checkpoint %s, not registered %s (CKPT_PARTIAL restores "
			 "the intersection)%s", (unsigned long long)m->step, mi ? mi : "?",
			 un ? un : "?", m->world_size == w->world ? "" : "; rank-local tensors "
			 "restore only into a job of the same world size");
		free(mi);
		free(un);
		return -EINVAL;     /* not -ENOENT: that says "no checkpoint" */
	}
	return 0;
}

/* A piece in CUDA memory: through pinned scratch, as shard_read does. */
static int copy_to_gpu(void *arg, uint64_t off, const void *src, size_t n,
		       char *msg, size_t msglen)
{
	const struct want *x = arg;

	return gpu_copy_h2d(x->gm, x->goff + off, src, n, msg, msglen);
}

/* Where the trainer's memory behind x was not all mapped when it was
 * registered (a region with pages it never wrote), map it now in one call
 * rather than one page fault per 4 KiB page in the middle of the copies
 * (best effort; 5.14+).  Not where it was: the call walks every page even
 * when all are mapped, ~55 ms per 512 MiB here, more than the copy. */
static void populate(const struct want *x)
{
	uintptr_t a = (uintptr_t)x->dst & ~(uintptr_t)4095;

	if (x->dst && x->nbytes && !x->mapped)
		(void)madvise((void *)a, (uintptr_t)x->dst + x->nbytes - a, MADV_POPULATE_WRITE);
}

/* reshard's chunks from the memory tier: 1 (read the file) when it does
 * not hold that file. */
static int chunk_from_memory(void *ms, const struct mfst_file *f, uint64_t off,
			     uint8_t *buf, size_t len, char *msg, size_t msglen)
{
	struct shard_seg seg = { off, off + len, buf, NULL, 0 };
	int r = memt_read(ms, f, &seg, 1, msg, msglen);

	return r == -ENOENT ? 1 : r;
}

/* The registered pieces of global tensors, from the saved pieces that
 * overlap them (reshard.c), in any world size: their chunks from the
 * memory tier when src holds the step, else from the files. */
static int restore_globals(struct restore_work *w, const struct rsource *src,
			   const struct mfst *m)
{
	struct reshard_mem mem = { chunk_from_memory, src->ms };
	struct reshard_want *rw = calloc(w->nglobal + 1, sizeof(*rw));
	struct reshard_stats st = { 0 };
	size_t n = 0;
	int r;

	if (!rw)
		return -ENOMEM;
	for (size_t k = 0; k < w->nwant; k++) {
		const struct want *x = &w->want[k];
		struct reshard_want *y;
		if (!x->global)
			continue;
		y = &rw[n++];
		y->group = x->group;
		y->name = x->name;
		memcpy(y->dtype, x->dtype, sizeof(y->dtype));
		y->ndim = x->ndim;
		memcpy(y->gshape, x->gshape, sizeof(y->gshape));
		memcpy(y->offset, x->goffset, sizeof(y->offset));
		memcpy(y->shape, x->shape, sizeof(y->shape));
		y->dst = x->dst;
		y->copy = copy_to_gpu;
		y->copy_arg = (void *)x;
		populate(x);
	}
	r = reshard_restore(src->iterfd, m, src->ms ? &mem : NULL, rw, n, w->partial, &w->cancel,
			    w->res.restored, w->res.missing, &st, w->msg, sizeof(w->msg));
	free(rw);
	if (r == 0) {
		w->res.bytes += st.bytes_delivered;
		log_info("job %s: rank %d of %d: %zu global piece(s) from iter_%09llu (%d ranks): "
			 "read %llu bytes in %llu checked chunks for %llu bytes (%llu chunks from "
			 "memory)", w->job, w->rank, w->world, n, (unsigned long long)m->step,
			 m->world_size, (unsigned long long)st.bytes_read,
			 (unsigned long long)st.chunks, (unsigned long long)st.bytes_delivered,
			 (unsigned long long)st.chunks_from_mem);
	}
	return r;
}

/* Where the wanted tensors' bytes go, by file then offset. */
static struct fseg *plan_segs(const struct mfst *m, struct want **dst_of, size_t *n)
{
	struct fseg *fs = calloc(m->ntensors + 1, sizeof(*fs));

	*n = 0;
	if (!fs)
		return NULL;
	for (size_t t = 0; t < m->ntensors; t++) {
		const struct want *wt = dst_of[t];
		if (!wt)
			continue;
		fs[(*n)++] = (struct fseg){ m->tensors[t].file, { m->tensors[t].begin,
				m->tensors[t].end, wt->dst, wt->gm, wt->goff } };
	}
	qsort(fs, *n, sizeof(*fs), cmp_fseg);
	return fs;
}


/* Deliver segs of file f of m.  0 or -errno with w->msg. */
static int read_file(struct restore_work *w, const struct rsource *src, struct mfst *m,
		     size_t f, const struct shard_seg *segs, size_t nseg)
{
	struct shard_src ss = { src->io, src->iterfd, &m->files[f], &w->S->pool, &w->cancel };
	char why[256] = "";
	int r, hr;

	w->msg[0] = '\0';
	if (src->ms)
		return memt_read(src->ms, &m->files[f], segs, nseg, w->msg, sizeof(w->msg));
	if (!src->v || !verdict_claim(src->v, f))
		return shard_read(&ss, segs, nseg, w->msg, sizeof(w->msg));
	/* With a verdict being computed, a shard this rank reads and nobody
	 * else verifies yet counts as verified by that read. */
	hr = verify_file(src->iterfd, m, f, VERIFY_BYTES_NONE, why, sizeof(why));
	if (hr < 0 && hr != -ENOMEM) {
		verdict_mark(src->v, f, hr, why);   /* header: a verdict */
		snprintf(w->msg, sizeof(w->msg), "%s", why);
		return hr;
	}
	r = hr < 0 ? hr : shard_read(&ss, segs, nseg, w->msg, sizeof(w->msg));
	/* a failed read is judged again by a plain check of the file */
	verdict_mark(src->v, f, r == 0 ? 0 : 1, "");
	return r;
}

static int read_blob_from(struct restore_work *w, const struct rsource *src,
			  const struct mfst *m, const struct mfst_blob *b,
			  struct restore_blob *out)
{
	const struct mfst_file *mf = &m->files[b->file];
	struct shard_seg all;

	if (!src->ms)
		return read_blob(src->iterfd, m, b, out, w->msg, sizeof(w->msg));
	out->data = malloc(mf->size ? mf->size : 1);
	out->name = strdup(b->name);
	out->len = mf->size;
	if (!out->data || !out->name) {
		snprintf(w->msg, sizeof(w->msg), "out of memory");
		return -ENOMEM;
	}
	all = (struct shard_seg){ 0, mf->size, out->data, NULL, 0 };
	return memt_read(src->ms, mf, &all, 1, w->msg, sizeof(w->msg));
}

int restore__into(struct restore_work *w, const struct rsource *src, struct mfst *m)
{
	struct want **dst_of = calloc(m->ntensors + 1, sizeof(*dst_of));
	struct shard_seg *segs = calloc(m->ntensors + 1, sizeof(*segs));
	struct fseg *fs = NULL;
	size_t nfs = 0, first = 0;
	int r;

	if (!dst_of || !segs) {
		r = -ENOMEM;
		goto out;
	}
	if ((r = match(w, m, dst_of)) < 0)
		goto out;
	if (w->nglobal && (r = restore_globals(w, src, m)) < 0)
		goto out;
	if (!(fs = plan_segs(m, dst_of, &nfs))) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t t = 0; t < m->ntensors; t++)
		if (dst_of[t]) {
			populate(dst_of[t]);
			w->res.bytes += dst_of[t]->nbytes;
		}
	for (size_t f = 0; f < m->nfiles && r == 0; f++) {
		size_t nseg = 0;

		while (first < nfs && fs[first].file < f)
			first++;
		while (first + nseg < nfs && fs[first + nseg].file == f) {
			segs[nseg] = fs[first + nseg].seg;
			nseg++;
		}
		if (nseg)
			r = atomic_load(&w->cancel) ? -ECANCELED : read_file(w, src, m, f, segs, nseg);
	}
	for (size_t b = 0; b < m->nblobs && r == 0; b++) {
		struct restore_blob *rb = &w->res.blobs[w->res.nblobs];
		if (m->blobs[b].rank != w->rank || m->world_size != w->world)
			continue;
		if (atomic_load(&w->cancel)) {
			r = -ECANCELED;
			break;
		}
		w->res.nblobs++;
		r = read_blob_from(w, src, m, &m->blobs[b], rb);
		w->res.bytes += rb->len;
	}
out:
	free(fs);
	free(segs);
	free(dst_of);
	return r;
}
