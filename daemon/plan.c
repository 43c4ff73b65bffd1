/* plan.c - one rank's save laid out: its files, the safetensors header of
 * each group, every file's segments and chunks.  See plan.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu.h"
#include "layout.h"
#include "plan.h"

static int cmp_group(const void *a, const void *b)
{
	const struct reg_tensor *x = *(struct reg_tensor *const *)a;
	const struct reg_tensor *y = *(struct reg_tensor *const *)b;
	int c = strcmp(x->group, y->group);
	/* stable within a group: registration order (pointer order) */
	return c ? c : (x < y ? -1 : x > y);
}

static int add_region(struct rsave *rs, struct region_ref *rg)
{
	for (size_t i = 0; i < rs->nregions; i++)
		if (rs->regions[i] == rg)
			return 0;
	struct region_ref **n = realloc(rs->regions, (rs->nregions + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	rs->regions = n;
	rs->regions[rs->nregions++] = rg;
	region_ref(rg);
	return 0;
}

/* FNV-1a over a piece's identity: tensor group, name and offset. */
static uint64_t piece_hash(const struct reg_tensor *t)
{
	uint64_t h = 1469598103934665603ull;
	const unsigned char *p;

	for (p = (const unsigned char *)t->group; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	h = (h ^ '/') * 1099511628211ull;
	for (p = (const unsigned char *)t->name; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	for (int d = 0; d < t->ndim; d++)
		for (int k = 0; k < 8; k++)
			h = (h ^ (uint8_t)((uint64_t)t->goffset[d] >> (8 * k))) * 1099511628211ull;
	return h;
}

/* Which pieces this rank writes (writes[i] for s->tensors[i]): rank-local
 * tensors and unreplicated pieces always; a replicated piece by exactly
 * one of its replicas, chosen from the piece alone (a hash of its group,
 * name and offset), so the replicas spread the pieces among them.  It
 * must not depend on what else a rank holds: on a 2-D mesh a rank's
 * pieces of different tensors are replicated over different groups of
 * ranks (a rank balancing bytes over all of them chose other writers than
 * its replicas did, and some pieces were written by nobody). */
static void choose_writers(const struct session *s, uint8_t *writes)
{
	for (size_t i = 0; i < s->ntensors; i++) {
		const struct reg_tensor *t = &s->tensors[i];
		writes[i] = !t->global || t->replica_count <= 1 ||
			(int)(piece_hash(t) % (uint64_t)t->replica_count) == t->replica_index;
	}
}

/* Record t's global layout in rt. */
static void note_layout(struct rs_tensor *rt, const struct reg_tensor *t, int written)
{
	rt->global = t->global;
	rt->written = written;
	memcpy(rt->gshape, t->gshape, sizeof(rt->gshape));
	memcpy(rt->goffset, t->goffset, sizeof(rt->goffset));
	rt->replica_index = t->replica_index;
	rt->replica_count = t->replica_count;
}

/* One safetensors shard for tensors t[0..n) of one group. */
static int plan_shard(struct rsave *rs, struct wfile *f, struct reg_tensor **t,
		      size_t n, int rank, uint64_t step, char *msg, size_t msglen)
{
	struct safet_entry *e = calloc(n, sizeof(*e));
	uint64_t *offs = calloc(n + 1, sizeof(*offs));
	char sstep[24], srank[16];
	const char *meta[] = { "format", "pt", "ckpt_step", sstep, "ckpt_rank", srank, NULL };
	size_t hlen = 0;
	int r = -ENOMEM;

	if (!e || !offs)
		goto out;
	snprintf(sstep, sizeof(sstep), "%llu", (unsigned long long)step);
	snprintf(srank, sizeof(srank), "%d", rank);
	for (size_t i = 0; i < n; i++)
		e[i] = (struct safet_entry){ t[i]->name, t[i]->dtype, t[i]->ndim,
					     t[i]->shape, t[i]->nbytes };
	r = safet_header_build(e, n, meta, 4096, &f->owned, &hlen, offs);
	if (r < 0) {
		snprintf(msg, msglen, "group %s: cannot encode the safetensors header",
			 t[0]->group);
		goto out;
	}
	layout_shard_path(t[0]->group, rank, f->path, sizeof(f->path));
	f->segs = calloc(n + 1, sizeof(*f->segs));
	if (!f->segs) {
		r = -ENOMEM;
		goto out;
	}
	f->segs[f->nsegs++] = (struct seg){ 0, hlen, f->owned, NULL, 0, NULL };
	for (size_t i = 0; i < n; i++) {
		struct rs_tensor *rt = &rs->tensors[rs->ntensors++];
		if (t[i]->nbytes && t[i]->rg->gm)      /* CUDA memory */
			f->segs[f->nsegs++] = (struct seg){ hlen + offs[i], t[i]->nbytes,
				NULL, t[i]->rg->gm, t[i]->offset, NULL };
		else if (t[i]->nbytes)
			f->segs[f->nsegs++] = (struct seg){ hlen + offs[i], t[i]->nbytes,
				(const uint8_t *)t[i]->rg->r.base + t[i]->offset, NULL,
				t[i]->offset, &t[i]->rg->r };
		rt->group = strdup(t[i]->group);
		rt->name = strdup(t[i]->name);
		if (!rt->group || !rt->name) {
			r = -ENOMEM;
			goto out;
		}
		memcpy(rt->dtype, t[i]->dtype, sizeof(rt->dtype));
		rt->ndim = t[i]->ndim;
		memcpy(rt->shape, t[i]->shape, sizeof(rt->shape));
		note_layout(rt, t[i], 1);
		rt->file = (size_t)(f - rs->files);
		rt->begin = hlen + offs[i];
		rt->end = hlen + offs[i + 1];
		if ((r = add_region(rs, t[i]->rg)) < 0)
			goto out;
	}
	f->size = hlen + offs[n];
	r = 0;
out:
	free(e);
	free(offs);
	return r;
}

int plan_rsave(struct rsave *rs, const struct session *s, uint64_t step,
	       uint64_t chunk_bytes, char *msg, size_t msglen)
{
	struct reg_tensor **t = NULL;
	uint8_t *writes = NULL;
	size_t ngroups = 0, nt = 0, i, j;
	uint64_t c = 0;
	int r = -ENOMEM;

	if (s->ntensors == 0 && s->nblobs == 0) {
		snprintf(msg, msglen, "nothing to save: register tensors or put blobs first");
		return -ENODATA;
	}
	t = calloc(s->ntensors + 1, sizeof(*t));
	writes = calloc(s->ntensors + 1, 1);
	if (!t || !writes)
		goto fail;
	choose_writers(s, writes);
	for (i = 0; i < s->ntensors; i++)
		if (writes[i])
			t[nt++] = &s->tensors[i];
	qsort(t, nt, sizeof(*t), cmp_group);
	for (i = 0; i < nt; i++)
		if (i == 0 || strcmp(t[i]->group, t[i - 1]->group))
			ngroups++;

	rs->rank = s->rank;
	rs->chunk_bytes = chunk_bytes;
	rs->gsync = gpu_sync_ref(s->save_sync);   /* ckpt_save_stream() */
	rs->files = calloc(ngroups + s->nblobs, sizeof(*rs->files));
	rs->tensors = calloc(s->ntensors + 1, sizeof(*rs->tensors));
	rs->blobs = calloc(s->nblobs + 1, sizeof(*rs->blobs));
	if (!rs->files || !rs->tensors || !rs->blobs)
		goto fail;

	for (i = 0; i < nt; i = j) {
		for (j = i + 1; j < nt && !strcmp(t[j]->group, t[i]->group); j++)
			;
		r = plan_shard(rs, &rs->files[rs->nfiles++], t + i, j - i, s->rank,
			       step, msg, msglen);
		if (r < 0)
			goto fail;
	}
	/* the pieces another replica writes: for the commit's layout check */
	for (i = 0; i < s->ntensors; i++) {
		const struct reg_tensor *x = &s->tensors[i];
		struct rs_tensor *rt;
		if (writes[i])
			continue;
		rt = &rs->tensors[rs->ntensors++];
		r = -ENOMEM;
		if (!(rt->group = strdup(x->group)) || !(rt->name = strdup(x->name)))
			goto fail;
		memcpy(rt->dtype, x->dtype, sizeof(rt->dtype));
		rt->ndim = x->ndim;
		memcpy(rt->shape, x->shape, sizeof(rt->shape));
		note_layout(rt, x, 0);
	}
	for (i = 0; i < s->nblobs; i++) {
		struct wfile *f = &rs->files[rs->nfiles];
		struct rs_blob *b = &rs->blobs[rs->nblobs++];
		r = -ENOMEM;
		b->name = strdup(s->blobs[i].name);
		b->file = rs->nfiles++;
		/* a copy: the trainer may replace the blob before we write it */
		f->owned = malloc(s->blobs[i].len ? s->blobs[i].len : 1);
		f->segs = calloc(1, sizeof(*f->segs));
		if (!b->name || !f->owned || !f->segs)
			goto fail;
		memcpy(f->owned, s->blobs[i].data, s->blobs[i].len);
		layout_blob_path(s->blobs[i].name, s->rank, f->path, sizeof(f->path));
		f->size = s->blobs[i].len;
		if (f->size)
			f->segs[f->nsegs++] = (struct seg){ 0, f->size, f->owned, NULL, 0, NULL };
	}

	for (i = 0; i < rs->nfiles; i++) {
		struct wfile *f = &rs->files[i];
		f->first_chunk = c;
		f->nchunks = (f->size + chunk_bytes - 1) / chunk_bytes;
		c += f->nchunks;
		rs->bytes_total += f->size;
	}
	rs->nchunks = c;
	rs->chunks = calloc(c + 1, sizeof(*rs->chunks));
	if (!rs->chunks)
		goto fail;
	for (i = 0; i < rs->nfiles; i++)
		for (uint64_t k = 0; k < rs->files[i].nchunks; k++) {
			struct chunk *ch = &rs->chunks[rs->files[i].first_chunk + k];
			ch->pool_idx = -1;
			ch->file = (uint32_t)i;
		}
	free(t);
	free(writes);
	return 0;
fail:
	if (r == -ENOMEM && !msg[0])
		snprintf(msg, msglen, "out of memory planning the save");
	free(t);
	free(writes);
	return r;
}

void plan_free(struct rsave *rs)
{
	for (size_t i = 0; i < rs->nfiles; i++) {
		free(rs->files[i].segs);
		free(rs->files[i].owned);
		free(rs->files[i].crcs);
	}
	for (size_t i = 0; i < rs->ntensors; i++) {
		free(rs->tensors[i].group);
		free(rs->tensors[i].name);
	}
	for (size_t i = 0; i < rs->nblobs; i++)
		free(rs->blobs[i].name);
	free(rs->files);
	free(rs->tensors);
	free(rs->blobs);
	free(rs->chunks);
	free(rs->regions);
	gpu_sync_unref(rs->gsync);      /* opens the trainer's "done" gate */
	rs->gsync = NULL;
	if (rs->staging_fd > 0)
		close(rs->staging_fd);
}
