/* tiling.h - box geometry of global tensors: whether pieces tile a global
 * shape exactly, and which bytes of a stored piece land where in another
 * piece that overlaps it (row-major, contiguous pieces). */
#ifndef CKPT_TILING_H
#define CKPT_TILING_H

#include <stddef.h>
#include <stdint.h>

#define TILING_MAX_NDIM 8        /* as SAFET_MAX_NDIM and CKPT_MAX_NDIM */

/* A box of a global tensor: first index and extent per dimension. */
struct tbox {
	const int64_t *off, *shape;
};

enum tiling_fault { TILING_OK = 0, TILING_OUTSIDE, TILING_OVERLAP, TILING_GAP };

/* Do boxes b[0..n) (ndim dims each) tile gshape exactly: each inside it,
 * no two overlapping, together covering it?  Empty boxes (a zero extent)
 * cover nothing and overlap nothing.  Returns TILING_OK, or the fault with
 * *i (and *j for an overlap) naming the boxes; -ENOMEM.  O(n log n) plus
 * the pairs that share a span of dimension 0. */
int  tiling_check(int ndim, const int64_t *gshape, const struct tbox *b, size_t n,
		  size_t *i, size_t *j);

/* The intersection of a and b into out_off/out_shape.  1 if non-empty. */
int  tiling_intersect(int ndim, struct tbox a, struct tbox b,
		      int64_t *out_off, int64_t *out_shape);

/* Calls fn once per contiguous run of the intersection box isect, as byte
 * offsets relative to the start of the source piece src and of the
 * destination piece dst (both contain isect), esize bytes an element.
 * Runs come in increasing order of both offsets; the innermost dimensions
 * that isect, src and dst all span whole are merged into one run.
 * Returns 0, or the first non-zero value fn returned. */
typedef int (*tiling_run_fn)(void *arg, uint64_t src_off, uint64_t dst_off,
			     uint64_t len);
int  tiling_runs(int ndim, struct tbox isect, struct tbox src, struct tbox dst,
		 size_t esize, tiling_run_fn fn, void *arg);

/* Elements in a box (0 if any extent is 0); -1 on overflow past INT64_MAX. */
int64_t tiling_volume(int ndim, const int64_t *shape);
/* "[3, 4]": v[0..n) as text in buf (cut at len); returns buf. */
const char *tiling_dims_text(char *buf, size_t len, const int64_t *v, int n);

#endif
