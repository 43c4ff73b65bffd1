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

/* What a session's registrations make of every save until they change
 * (s->treg_gen): each group's file with its header and segments, and the
 * manifest's tensor table.  Encoding them took ~0.6 us a tensor on the
 * save's stall (12 ms of 20,000 tensors); now a save only points at them.
 * A header holds nothing of the step, so unchanged tensors make a file
 * byte-identical to the last step's (incremental saves link it: wr.c).
 * Read-only once built, shared by the rsaves planned from it (refs: loop
 * thread only).  The regions are the session's, not held: they are only
 * used while the registrations are those it was built from. */
struct plan_file {
	char        path[LAYOUT_PATH_MAX];
	const char *group;
	uint8_t    *header;       /* the safetensors header, padded */
	uint64_t    hlen;
	struct seg *segs;         /* the tensors', at file offsets after hlen */
	size_t      nsegs;
	uint64_t    data_bytes;
};

struct plan_tmpl {
	int                 refs;
	uint64_t            gen;
	int                 rank;
	struct plan_file   *files;    size_t nfiles;
	struct rs_tensor   *tensors;  size_t ntensors;
	struct region_ref **regions;  size_t nregions;
	char               *names;    /* every tensor's group and name */
};

/* By file: group, then a group's tensors before its frozen ones. */
static int cmp_group(const void *a, const void *b)
{
	const struct reg_tensor *x = *(struct reg_tensor *const *)a;
	const struct reg_tensor *y = *(struct reg_tensor *const *)b;
	int c = strcmp(x->group, y->group);
	if (c || x->frozen != y->frozen)
		return c ? c : x->frozen - y->frozen;
	/* stable within a file: registration order (pointer order) */
	return x < y ? -1 : x > y;
}

static int same_file(const struct reg_tensor *x, const struct reg_tensor *y)
{
	return x->frozen == y->frozen && !strcmp(x->group, y->group);
}

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
	return x < y ? -1 : x > y;
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

/* Does this rank write piece t?  Rank-local tensors and unreplicated
 * pieces always; a replicated piece by exactly one of its replicas, chosen
 * from the piece alone (a hash of its group, name and offset), so the
 * replicas spread the pieces among them.  It must not depend on what else
 * a rank holds: on a 2-D mesh a rank's pieces of different tensors are
 * replicated over different groups of ranks (a rank balancing bytes over
 * all of them chose other writers than its replicas did, and some pieces
 * were written by nobody). */
static int writes_piece(const struct reg_tensor *t)
{
	return !t->global || t->replica_count <= 1 ||
	       (int)(piece_hash(t) % (uint64_t)t->replica_count) == t->replica_index;
}

/* rt describes t, its strings copied to *names (which moves on). */
static void describe(struct rs_tensor *rt, const struct reg_tensor *t, int written,
		     char **names)
{
	size_t g = strlen(t->group) + 1, n = strlen(t->name) + 1;

	rt->group = memcpy(*names, t->group, g);
	rt->name = memcpy(*names + g, t->name, n);
	*names += g + n;
	memcpy(rt->dtype, t->dtype, sizeof(rt->dtype));
	rt->ndim = t->ndim;
	memcpy(rt->shape, t->shape, sizeof(rt->shape));
	rt->global = t->global;
	rt->written = written;
	memcpy(rt->gshape, t->gshape, sizeof(rt->gshape));
	memcpy(rt->goffset, t->goffset, sizeof(rt->goffset));
	rt->replica_index = t->replica_index;
	rt->replica_count = t->replica_count;
}

/* The metadata every header carries (not the step: see plan_file). */
struct meta {
	char        rank[16];
	const char *kv[5];
};

static void meta_init(struct meta *m, int rank)
{
	snprintf(m->rank, sizeof(m->rank), "%d", rank);
	m->kv[0] = "format";
	m->kv[1] = "pt";
	m->kv[2] = "ckpt_rank";
	m->kv[3] = m->rank;
	m->kv[4] = NULL;
}

#define HEADER_ALIGN 4096

/* tm's file for tensors t[0..n) of one group, their table rows from
 * tm->tensors[tm->ntensors]. */
static int tmpl_file(struct plan_tmpl *tm, struct plan_file *f, struct reg_tensor **t,
		     size_t n, char **names, char *msg, size_t msglen)
{
	struct safet_entry *e = calloc(n, sizeof(*e));
	uint64_t *offs = calloc(n + 1, sizeof(*offs));
	char *entries = NULL;
	size_t entries_len, hlen;
	struct meta m;
	int r = -ENOMEM;

	if (!e || !offs)
		goto out;
	for (size_t i = 0; i < n; i++)
		e[i] = (struct safet_entry){ t[i]->name, t[i]->dtype, t[i]->ndim,
					     t[i]->shape, t[i]->nbytes };
	r = safet_entries_build(e, n, &entries, &entries_len, offs);
	meta_init(&m, tm->rank);
	if (r == 0)
		r = safet_header_join(m.kv, entries, entries_len, HEADER_ALIGN, &f->header,
				      &hlen);
	if (r < 0) {
		snprintf(msg, msglen, "group %s: cannot encode the safetensors header",
			 t[0]->group);
		goto out;
	}
	f->hlen = hlen;
	f->data_bytes = offs[n];
	layout_shard_path(t[0]->group, tm->rank, t[0]->frozen, f->path, sizeof(f->path));
	r = -ENOMEM;
	if (!(f->segs = calloc(n + 1, sizeof(*f->segs))))
		goto out;
	for (size_t i = 0; i < n; i++) {
		struct rs_tensor *rt = &tm->tensors[tm->ntensors++];
		const struct region_ref *rg = t[i]->rg;
		if (t[i]->nbytes && rg->gm)              /* CUDA memory */
			f->segs[f->nsegs++] = (struct seg){ hlen + offs[i], t[i]->nbytes,
				NULL, rg->gm, t[i]->offset, NULL };
		else if (t[i]->nbytes)
			f->segs[f->nsegs++] = (struct seg){ hlen + offs[i], t[i]->nbytes,
				(const uint8_t *)rg->r.base + t[i]->offset, NULL,
				t[i]->offset, &rg->r };
		describe(rt, t[i], 1, names);
		rt->file = (size_t)(f - tm->files);
		rt->begin = hlen + offs[i];
		rt->end = hlen + offs[i + 1];
	}
	f->group = tm->tensors[tm->ntensors - 1].group;
	r = 0;
out:
	free(entries);
	free(e);
	free(offs);
	return r;
}

static void tmpl_put(struct plan_tmpl *tm)
{
	if (!tm || --tm->refs > 0)
		return;
	for (size_t i = 0; i < tm->nfiles; i++) {
		free(tm->files[i].header);
		free(tm->files[i].segs);
	}
	free(tm->files);
	free(tm->tensors);
	free(tm->regions);
	free(tm->names);
	free(tm);
}

/* The regions of t[0..n), each once (sorted by address). */
static int tmpl_regions(struct plan_tmpl *tm, struct reg_tensor *const *t, size_t n)
{
	if (!(tm->regions = calloc(n + 1, sizeof(*tm->regions))))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		tm->regions[i] = t[i]->rg;
	qsort(tm->regions, n, sizeof(*tm->regions), cmp_ptr);
	for (size_t i = 0; i < n; i++)
		if (i == 0 || tm->regions[i] != tm->regions[tm->nregions - 1])
			tm->regions[tm->nregions++] = tm->regions[i];
	return 0;
}

/* A template of s's registrations: 0 and *out, or -errno with msg. */
static int tmpl_build(const struct session *s, struct plan_tmpl **out, char *msg,
		      size_t msglen)
{
	struct plan_tmpl *tm = calloc(1, sizeof(*tm));
	struct reg_tensor **t = calloc(s->ntensors + 1, sizeof(*t));
	size_t nt = 0, nfiles = 0, names_len = 1, i, j;
	char *names;
	int r = -ENOMEM;

	if (!tm || !t)
		goto fail;
	tm->refs = 1;
	tm->gen = s->treg_gen;
	tm->rank = s->rank;
	for (i = 0; i < s->ntensors; i++) {
		names_len += strlen(s->tensors[i].group) + strlen(s->tensors[i].name) + 2;
		if (writes_piece(&s->tensors[i]))
			t[nt++] = &s->tensors[i];
	}
	qsort(t, nt, sizeof(*t), cmp_group);
	for (i = 0; i < nt; i++)
		if (i == 0 || !same_file(t[i], t[i - 1]))
			nfiles++;
	tm->files = calloc(nfiles + 1, sizeof(*tm->files));
	tm->tensors = calloc(s->ntensors + 1, sizeof(*tm->tensors));
	tm->names = names = malloc(names_len);
	if (!tm->files || !tm->tensors || !names || tmpl_regions(tm, t, nt) < 0)
		goto fail;
	for (i = 0; i < nt; i = j) {
		for (j = i + 1; j < nt && same_file(t[j], t[i]); j++)
			;
		r = tmpl_file(tm, &tm->files[tm->nfiles++], t + i, j - i, &names, msg, msglen);
		if (r < 0)
			goto fail;
	}
	/* the pieces another replica writes: for the commit's layout check */
	for (i = 0; i < s->ntensors; i++)
		if (!writes_piece(&s->tensors[i]))
			describe(&tm->tensors[tm->ntensors++], &s->tensors[i], 0, &names);
	free(t);
	*out = tm;
	return 0;
fail:
	if (r == -ENOMEM)
		snprintf(msg, msglen, "out of memory planning the save");
	free(t);
	tmpl_put(tm);
	return r;
}

void plan_forget(struct session *s)
{
	tmpl_put(s->plan);
	s->plan = NULL;
}

/* rs's file for tm's file tf: tf's header (held by rs->tmpl) in front of
 * tf's segments. */
static int plan_file(struct wfile *f, const struct plan_file *tf)
{
	if (!(f->segs = malloc((tf->nsegs + 1) * sizeof(*f->segs))))
		return -ENOMEM;
	memcpy(f->path, tf->path, sizeof(f->path));
	f->segs[0] = (struct seg){ 0, tf->hlen, tf->header, NULL, 0, NULL };
	memcpy(f->segs + 1, tf->segs, tf->nsegs * sizeof(*f->segs));
	f->nsegs = tf->nsegs + 1;
	f->size = tf->hlen + tf->data_bytes;
	return 0;
}

struct claim_key {
	uintptr_t at;           /* the chunk's first trainer byte */
	uint32_t  chunk;
};

static int cmp_claim(const void *a, const void *b)
{
	const struct claim_key *x = a, *y = b;
	if (x->at != y->at)
		return x->at < y->at ? -1 : 1;
	return x->chunk < y->chunk ? -1 : x->chunk > y->chunk;
}

/* rs->claim_order: its chunks by the host address of the first tensor
 * byte each holds (chunks without one, CUDA or blob bytes, last, in file
 * order).  Left NULL when there are too many chunks to reserve. */
static int plan_claim_order(struct rsave *rs)
{
	struct claim_key *k;

	if (rs->nchunks < 2 || rs->nchunks > UINT32_MAX)
		return 0;
	if (!(k = malloc(rs->nchunks * sizeof(*k))) ||
	    !(rs->claim_order = malloc(rs->nchunks * sizeof(*rs->claim_order)))) {
		free(k);
		return -ENOMEM;
	}
	for (size_t i = 0; i < rs->nfiles; i++) {
		const struct wfile *f = &rs->files[i];
		size_t sg = 0;
		for (uint64_t c = 0; c < f->nchunks; c++) {
			uint64_t off = c * rs->chunk_bytes, end = off + rs->chunk_bytes;
			struct claim_key *x = &k[f->first_chunk + c];
			x->at = UINTPTR_MAX;
			x->chunk = (uint32_t)(f->first_chunk + c);
			while (sg < f->nsegs && f->segs[sg].off + f->segs[sg].len <= off)
				sg++;
			for (size_t j = sg; j < f->nsegs && f->segs[j].off < end; j++) {
				const struct seg *g = &f->segs[j];
				if (!g->shm)      /* the header, a blob, CUDA memory */
					continue;
				x->at = (uintptr_t)g->src + (off > g->off ? off - g->off : 0);
				break;
			}
		}
	}
	qsort(k, rs->nchunks, sizeof(*k), cmp_claim);
	for (uint64_t c = 0; c < rs->nchunks; c++)
		rs->claim_order[c] = k[c].chunk;
	free(k);
	return 0;
}

int plan_rsave(struct rsave *rs, struct session *s, uint64_t chunk_bytes, char *msg,
	       size_t msglen)
{
	struct plan_tmpl *tm;
	uint64_t c = 0;
	size_t i;
	int r = -ENOMEM;

	if (s->ntensors == 0 && s->nblobs == 0) {
		snprintf(msg, msglen, "nothing to save: register tensors or put blobs first");
		return -ENODATA;
	}
	if (!plan_current(s)) {
		if ((r = tmpl_build(s, &tm, msg, msglen)) < 0)
			return r;
		plan_forget(s);
		s->plan = tm;
	}
	tm = s->plan;
	tm->refs++;
	rs->tmpl = tm;

	rs->rank = s->rank;
	rs->sess_id = s->id;
	rs->reg_gen = s->treg_gen;
	rs->chunk_bytes = chunk_bytes;
	rs->gsync = gpu_sync_ref(s->save_sync);   /* ckpt_save_stream() */
	rs->files = calloc(tm->nfiles + s->nblobs + 1, sizeof(*rs->files));
	rs->blobs = calloc(s->nblobs + 1, sizeof(*rs->blobs));
	rs->regions = malloc((tm->nregions + 1) * sizeof(*rs->regions));
	if (!rs->files || !rs->blobs || !rs->regions)
		goto nomem;
	for (i = 0; i < tm->nregions; i++)
		region_ref(rs->regions[rs->nregions++] = tm->regions[i]);

	for (i = 0; i < tm->nfiles; i++)
		if (plan_file(&rs->files[rs->nfiles++], &tm->files[i]) < 0)
			goto nomem;
	rs->tensors = tm->tensors;
	rs->ntensors = tm->ntensors;
	for (i = 0; i < s->nblobs; i++) {
		struct wfile *f = &rs->files[rs->nfiles];
		struct rs_blob *b = &rs->blobs[rs->nblobs++];
		b->name = strdup(s->blobs[i].name);
		b->file = rs->nfiles++;
		/* a copy: the trainer may replace the blob before we write it */
		f->owned = malloc(s->blobs[i].len ? s->blobs[i].len : 1);
		f->segs = calloc(1, sizeof(*f->segs));
		if (!b->name || !f->owned || !f->segs)
			goto nomem;
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
	if (!(rs->chunks = calloc(c + 1, sizeof(*rs->chunks))))
		goto nomem;
	for (i = 0; i < rs->nfiles; i++)
		for (uint64_t k = 0; k < rs->files[i].nchunks; k++) {
			struct chunk *ch = &rs->chunks[rs->files[i].first_chunk + k];
			ch->pool_idx = -1;
			ch->file = (uint32_t)i;
		}
	if (plan_claim_order(rs) < 0)
		goto nomem;
	return 0;
nomem:
	snprintf(msg, msglen, "out of memory planning the save");
	return -ENOMEM;
}

void plan_drop_chunks(struct rsave *rs, size_t i)
{
	struct wfile *f = &rs->files[i];
	uint64_t at = f->first_chunk, n = f->nchunks;

	if (!n)
		return;
	/* a file's chunks are contiguous, in file order (plan_rsave) */
	memmove(&rs->chunks[at], &rs->chunks[at + n],
		(rs->nchunks - at - n) * sizeof(*rs->chunks));
	rs->nchunks -= n;
	for (size_t k = i + 1; k < rs->nfiles; k++)
		rs->files[k].first_chunk -= n;
	f->nchunks = 0;
	free(rs->claim_order);
	rs->claim_order = NULL;
	(void)plan_claim_order(rs);   /* none (out of memory): file order */
}

int plan_current(const struct session *s)
{
	return s->plan && s->plan->gen == s->treg_gen && s->plan->rank == s->rank;
}

void plan_free(struct rsave *rs)
{
	for (size_t i = 0; i < rs->nfiles; i++) {
		free(rs->files[i].segs);
		free(rs->files[i].owned);
		free(rs->files[i].crcs);
		free(rs->files[i].ranges);
	}
	for (size_t i = 0; i < rs->nblobs; i++)
		free(rs->blobs[i].name);
	tmpl_put(rs->tmpl);
	rs->tmpl = NULL;
	free(rs->files);
	free(rs->blobs);
	free(rs->chunks);
	free(rs->claim_order);
	free(rs->regions);
	gpu_sync_unref(rs->gsync);      /* opens the trainer's "done" gate */
	rs->gsync = NULL;
	if (rs->staging_fd > 0)
		close(rs->staging_fd);
}
