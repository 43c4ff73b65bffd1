/* tiling.c - box geometry of global tensors (see tiling.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "tiling.h"

int64_t tiling_volume(int ndim, const int64_t *shape)
{
	int64_t v = 1;

	for (int d = 0; d < ndim; d++)
		if (shape[d] == 0)
			return 0;
	for (int d = 0; d < ndim; d++)
		if (shape[d] < 0 || __builtin_mul_overflow(v, shape[d], &v))
			return -1;
	return v;
}

int tiling_intersect(int ndim, struct tbox a, struct tbox b,
		     int64_t *out_off, int64_t *out_shape)
{
	for (int d = 0; d < ndim; d++) {
		int64_t lo = a.off[d] > b.off[d] ? a.off[d] : b.off[d];
		int64_t ea = a.off[d] + a.shape[d], eb = b.off[d] + b.shape[d];
		int64_t hi = ea < eb ? ea : eb;
		if (hi <= lo)
			return 0;
		out_off[d] = lo;
		out_shape[d] = hi - lo;
	}
	return tiling_volume(ndim, a.shape) != 0 && tiling_volume(ndim, b.shape) != 0;
}

struct order {
	const struct tbox *b;
	size_t idx;
};

static int cmp_dim0(const void *x, const void *y)
{
	const struct order *a = x, *b = y;

	if (a->b->off[0] != b->b->off[0])
		return a->b->off[0] < b->b->off[0] ? -1 : 1;
	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

int tiling_check(int ndim, const int64_t *gshape, const struct tbox *b, size_t n,
		 size_t *i, size_t *j)
{
	int64_t total = tiling_volume(ndim, gshape), sum = 0;
	int64_t io[TILING_MAX_NDIM], is[TILING_MAX_NDIM];
	struct order *o;
	size_t k, m, live = 0;

	for (k = 0; k < n; k++) {
		int64_t v = tiling_volume(ndim, b[k].shape);
		for (int d = 0; d < ndim; d++)
			if (b[k].off[d] < 0 || b[k].shape[d] < 0 ||
			    b[k].off[d] > gshape[d] || b[k].shape[d] > gshape[d] - b[k].off[d]) {
				*i = k;
				return TILING_OUTSIDE;
			}
		if (v < 0 || __builtin_add_overflow(sum, v, &sum)) {
			*i = k;
			return TILING_OUTSIDE;
		}
	}
	if (ndim == 0) {   /* a scalar: exactly one piece holds it */
		if (n == 0)
			return *i = 0, TILING_GAP;
		if (n > 1)
			return *i = 0, *j = 1, TILING_OVERLAP;
		return TILING_OK;
	}
	o = calloc(n + 1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	for (k = 0; k < n; k++)
		if (tiling_volume(ndim, b[k].shape) > 0)
			o[live++] = (struct order){ &b[k], k };
	qsort(o, live, sizeof(*o), cmp_dim0);
	/* a sweep over dimension 0: only boxes whose spans there overlap can
	 * overlap */
	for (k = 0; k < live; k++)
		for (m = k + 1; m < live && o[m].b->off[0] < o[k].b->off[0] + o[k].b->shape[0]; m++)
			if (tiling_intersect(ndim, *o[k].b, *o[m].b, io, is)) {
				*i = o[k].idx;
				*j = o[m].idx;
				free(o);
				return TILING_OVERLAP;
			}
	free(o);
	/* inside, disjoint: they cover the whole exactly when the volumes add up */
	if (sum != total) {
		*i = 0;
		return TILING_GAP;
	}
	return TILING_OK;
}

int tiling_runs(int ndim, struct tbox isect, struct tbox src, struct tbox dst,
		size_t esize, tiling_run_fn fn, void *arg)
{
	uint64_t sstride[TILING_MAX_NDIM + 1], dstride[TILING_MAX_NDIM + 1], run;
	int64_t idx[TILING_MAX_NDIM];
	int k = ndim, r;

	if (tiling_volume(ndim, isect.shape) == 0)
		return 0;
	/* element strides of the two pieces, row-major */
	sstride[ndim] = dstride[ndim] = 1;
	for (int d = ndim - 1; d >= 0; d--) {
		sstride[d] = sstride[d + 1] * (uint64_t)src.shape[d];
		dstride[d] = dstride[d + 1] * (uint64_t)dst.shape[d];
	}
	/* dims k.. are spanned whole by all three: one run covers them */
	while (k > 0 && isect.shape[k - 1] == src.shape[k - 1] &&
	       isect.shape[k - 1] == dst.shape[k - 1])
		k--;
	run = k > 0 ? (uint64_t)isect.shape[k - 1] * sstride[k] : sstride[0];
	/* odometer over dims 0..k-2; dim k-1 is the run's own */
	for (int d = 0; d < ndim; d++)
		idx[d] = 0;
	for (;;) {
		uint64_t so = 0, dof = 0;
		int d;
		for (d = 0; d < ndim; d++) {
			uint64_t g = (uint64_t)(isect.off[d] + (d < k - 1 ? idx[d] : 0));
			so += (g - (uint64_t)src.off[d]) * sstride[d + 1];
			dof += (g - (uint64_t)dst.off[d]) * dstride[d + 1];
			if (d >= k - 1)
				break;
		}
		if ((r = fn(arg, so * esize, dof * esize, run * esize)) != 0)
			return r;
		for (d = k - 2; d >= 0; d--) {
			if (++idx[d] < isect.shape[d])
				break;
			idx[d] = 0;
		}
		if (d < 0)
			return 0;
	}
}

const char *tiling_dims_text(char *buf, size_t len, const int64_t *v, int n)
{
	size_t o = (size_t)snprintf(buf, len, "[");

	for (int d = 0; d < n && o < len; d++)
		o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? ", " : "", (long long)v[d]);
	if (o < len)
		snprintf(buf + o, len - o, "]");
	return buf;
}
