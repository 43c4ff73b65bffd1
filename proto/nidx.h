/* nidx.h - a hash index from (group, name) to a position in the caller's
 * array, so that daemon and client find a registered tensor in O(1): a
 * trainer may register 100,000 of them and a scan per registration made
 * registering quadratic (20,000 tensors took 49 s).
 * The index stores hashes and positions only; the caller keeps the keys
 * and says, for a candidate position, whether it holds the key looked for.
 * Linear probing with backward-shift deletion: no tombstones. */
#ifndef CKPT_NIDX_H
#define CKPT_NIDX_H

#include <stddef.h>
#include <stdint.h>

struct nidx_slot {
	uint64_t hash;
	size_t   pos1;                  /* position + 1; 0: empty */
};

struct nidx {
	struct nidx_slot *slot;         /* cap slots, cap a power of two */
	size_t cap, n;
};

/* The hash of a key (name may be NULL: the group alone). */
uint64_t nidx_hash(const char *group, const char *name);

/* The position holding the key of hash h, or -1: same(ctx, pos) says
 * whether pos holds it (called only for positions of equal hash). */
long nidx_find(const struct nidx *x, uint64_t h,
	       int (*same)(void *ctx, size_t pos), void *ctx);

/* Record that pos holds a key of hash h.  0 or -ENOMEM (x unchanged). */
int  nidx_put(struct nidx *x, uint64_t h, size_t pos);

/* Forget pos (its key's hash h). */
void nidx_del(struct nidx *x, uint64_t h, size_t pos);

/* The key of hash h moved from position from to position to (the caller
 * filled a hole with its last element). */
void nidx_move(struct nidx *x, uint64_t h, size_t from, size_t to);

/* Free the table; x is empty and usable after. */
void nidx_release(struct nidx *x);

#endif
