/* gtab.c - the table of global tensors from every rank's pieces, with the
 * layout checks of a commit (see gtab.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gtab.h"
#include "tiling.h"

struct rec {
	const struct commit_piece *p;
	int rank;
};

static int cmp_rec(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;
	int c;

	if ((c = strcmp(x->p->group, y->p->group)) || (c = strcmp(x->p->name, y->p->name)))
		return c;
	for (int d = 0; d < SAFET_MAX_NDIM; d++) {
		if (x->p->offset[d] != y->p->offset[d])
			return x->p->offset[d] < y->p->offset[d] ? -1 : 1;
		if (x->p->shape[d] != y->p->shape[d])
			return x->p->shape[d] < y->p->shape[d] ? -1 : 1;
	}
	return x->rank - y->rank;
}

static int same_box(const struct commit_piece *a, const struct commit_piece *b)
{
	return !memcmp(a->offset, b->offset, sizeof(a->offset)) &&
	       !memcmp(a->shape, b->shape, sizeof(a->shape));
}

/* The replica group r[0..n) of one piece: count agreed, indexes 0..n-1
 * each once, exactly one writer.  Returns the writer's record. */
static const struct rec *check_replicas(const struct rec *r, size_t n, char *msg,
					size_t msglen)
{
	const struct rec *writer = NULL;
	uint8_t *seen = calloc(n, 1);
	char at[128];

	if (!seen) {
		snprintf(msg, msglen, "out of memory checking a replica group");
		return NULL;
	}
	tiling_dims_text(at, sizeof(at), r[0].p->offset, r[0].p->ndim);
	for (size_t k = 0; k < n; k++) {
		const struct commit_piece *p = r[k].p;
		if (p->replica_count != (int)n || p->replica_index < 0 || p->replica_index >= (int)n) {
			snprintf(msg, msglen, "global tensor %s/%s: the piece at offset %s is held "
				 "by %zu rank(s), but rank %d says replica %d of %d",
				 p->group, p->name, at, n, r[k].rank, p->replica_index,
				 p->replica_count);
			writer = NULL;
			goto out;
		}
		if (seen[p->replica_index]++) {
			snprintf(msg, msglen, "global tensor %s/%s: the piece at offset %s has "
				 "replica_index %d twice (rank %d)", p->group, p->name, at,
				 p->replica_index, r[k].rank);
			writer = NULL;
			goto out;
		}
		if (p->written) {
			if (writer) {
				snprintf(msg, msglen, "global tensor %s/%s: the replicas of the piece "
					 "at offset %s disagree: ranks %d and %d both wrote it "
					 "(they registered different pieces)", p->group, p->name,
					 at, writer->rank, r[k].rank);
				writer = NULL;
				goto out;
			}
			writer = &r[k];
		}
	}
	if (!writer)
		snprintf(msg, msglen, "global tensor %s/%s: the replicas of the piece at offset %s "
			 "disagree: none of ranks %d.. wrote it (they registered different "
			 "pieces)", r[0].p->group, r[0].p->name, at, r[0].rank);
out:
	free(seen);
	return writer;
}

/* An empty piece holds no element: the ranks that have one at the same
 * offset need not be replicas of each other (torch gives every rank past
 * the last row an empty piece there, each replica 0 of 1).  One that
 * wrote it stands for them; NULL if none did. */
static const struct rec *empty_writer(const struct rec *r, size_t n)
{
	for (int d = 0; d < r[0].p->ndim; d++)
		if (r[0].p->shape[d] == 0) {
			for (size_t k = 0; k < n; k++)
				if (r[k].p->written)
					return &r[k];
			return NULL;
		}
	return NULL;
}

/* Records r[0..n) of one tensor: consistent, and their distinct pieces
 * tile it.  Appends the global and its pieces to m. */
static int one_tensor(const struct rec *r, size_t n, const size_t *file_base,
		      struct mfst *m, struct tbox *boxes, char *msg, size_t msglen)
{
	const struct commit_piece *p0 = r[0].p;
	struct mfst_global *gl = &m->globals[m->nglobals];
	size_t i, j, bi = 0, bj = 0;
	char a[128], b[128];
	int t;

	for (i = 1; i < n; i++) {
		const struct commit_piece *p = r[i].p;
		if (strcmp(p->dtype, p0->dtype) || p->ndim != p0->ndim ||
		    memcmp(p->gshape, p0->gshape, sizeof(p->gshape))) {
			tiling_dims_text(a, sizeof(a), p0->gshape, p0->ndim);
			tiling_dims_text(b, sizeof(b), p->gshape, p->ndim);
			snprintf(msg, msglen, "global tensor %s/%s: ranks disagree on it: rank %d "
				 "registers %s %s, rank %d %s %s", p0->group, p0->name, r[0].rank,
				 p0->dtype, a, r[i].rank, p->dtype, b);
			return -EINVAL;
		}
	}
	*gl = (struct mfst_global){ p0->group, p0->name, "", p0->ndim, { 0 }, m->npieces, 0 };
	memcpy(gl->dtype, p0->dtype, sizeof(gl->dtype));
	memcpy(gl->shape, p0->gshape, sizeof(gl->shape));
	for (i = 0; i < n; i = j) {
		const struct rec *w;
		struct mfst_piece *mp;
		for (j = i + 1; j < n && same_box(r[j].p, r[i].p); j++)
			;
		if (!(w = empty_writer(r + i, j - i)) &&
		    !(w = check_replicas(r + i, j - i, msg, msglen)))
			return -EINVAL;
		mp = &m->pieces[m->npieces++];
		memset(mp, 0, sizeof(*mp));
		mp->t.group = p0->group;
		mp->t.name = p0->name;
		memcpy(mp->t.dtype, p0->dtype, sizeof(mp->t.dtype));
		mp->t.ndim = p0->ndim;
		memcpy(mp->t.shape, w->p->shape, sizeof(mp->t.shape));
		mp->t.rank = w->rank;
		mp->t.file = file_base[w->rank] + w->p->file;
		mp->t.begin = w->p->begin;
		mp->t.end = w->p->end;
		memcpy(mp->offset, w->p->offset, sizeof(mp->offset));
		mp->global = m->nglobals;
		boxes[gl->npieces++] = (struct tbox){ mp->offset, mp->t.shape };
	}
	t = tiling_check(gl->ndim, gl->shape, boxes, gl->npieces, &bi, &bj);
	if (t == -ENOMEM) {
		snprintf(msg, msglen, "out of memory checking global tensor %s/%s", gl->group,
			 gl->name);
		return -ENOMEM;
	}
	if (t != TILING_OK) {
		const struct mfst_piece *x = &m->pieces[gl->first_piece + bi];
		char g[128];
		tiling_dims_text(g, sizeof(g), gl->shape, gl->ndim);
		tiling_dims_text(a, sizeof(a), x->offset, gl->ndim);
		tiling_dims_text(b, sizeof(b), x->t.shape, gl->ndim);
		if (t == TILING_GAP)
			snprintf(msg, msglen, "global tensor %s/%s: its pieces leave a gap in its "
				 "global shape %s", gl->group, gl->name, g);
		else if (t == TILING_OUTSIDE)
			snprintf(msg, msglen, "global tensor %s/%s: rank %d's piece %s at offset %s "
				 "lies outside its global shape %s", gl->group, gl->name,
				 x->t.rank, b, a, g);
		else
			snprintf(msg, msglen, "global tensor %s/%s: the pieces of ranks %d (at "
				 "offset %s) and %d overlap", gl->group, gl->name, x->t.rank, a,
				 m->pieces[gl->first_piece + bj].t.rank);
		return -EINVAL;
	}
	m->nglobals++;
	return 0;
}

int gtab_build(const struct commit_step *cs, const size_t *file_base,
	       struct mfst *m, char *msg, size_t msglen)
{
	struct rec *r = NULL;
	struct tbox *boxes = NULL;
	size_t n = 0, i, j;
	int ret = -ENOMEM;

	for (int k = 0; k < cs->world_size; k++)
		n += cs->parts[k]->npieces;
	m->globals = NULL;
	m->pieces = NULL;
	m->nglobals = m->npieces = 0;
	if (!n)
		return 0;
	r = calloc(n, sizeof(*r));
	boxes = calloc(n, sizeof(*boxes));
	m->globals = calloc(n, sizeof(*m->globals));
	m->pieces = calloc(n, sizeof(*m->pieces));
	if (!r || !boxes || !m->globals || !m->pieces) {
		snprintf(msg, msglen, "out of memory building the table of global tensors");
		goto out;
	}
	n = 0;
	for (int k = 0; k < cs->world_size; k++)
		for (i = 0; i < cs->parts[k]->npieces; i++)
			r[n++] = (struct rec){ &cs->parts[k]->pieces[i], k };
	qsort(r, n, sizeof(*r), cmp_rec);
	for (i = 0; i < n; i = j) {
		for (j = i + 1; j < n && !strcmp(r[j].p->group, r[i].p->group) &&
			       !strcmp(r[j].p->name, r[i].p->name); j++)
			;
		if ((ret = one_tensor(r + i, j - i, file_base, m, boxes, msg, msglen)) < 0)
			goto out;
	}
	ret = 0;
out:
	free(r);
	free(boxes);
	if (ret < 0)
		gtab_release(m);
	return ret;
}

void gtab_release(struct mfst *m)
{
	free(m->globals);
	free(m->pieces);
	m->globals = NULL;
	m->pieces = NULL;
	m->nglobals = m->npieces = 0;
}
