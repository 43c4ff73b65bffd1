/* nidx.c - (group, name) -> array position hash index (see nidx.h). */
#include <errno.h>
#include <stdlib.h>

#include "nidx.h"

/* FNV-1a over group, a separator no name contains, and name. */
uint64_t nidx_hash(const char *group, const char *name)
{
	uint64_t h = 1469598103934665603ull;

	for (const unsigned char *p = (const unsigned char *)group; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	h = (h ^ 0) * 1099511628211ull;
	for (const unsigned char *p = (const unsigned char *)name; p && *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	return h ^ (h >> 29);
}

long nidx_find(const struct nidx *x, uint64_t h,
	       int (*same)(void *ctx, size_t pos), void *ctx)
{
	if (!x->cap)
		return -1;
	for (size_t i = h & (x->cap - 1);; i = (i + 1) & (x->cap - 1)) {
		const struct nidx_slot *s = &x->slot[i];
		if (!s->pos1)
			return -1;
		if (s->hash == h && same(ctx, s->pos1 - 1))
			return (long)(s->pos1 - 1);
	}
}

static void put_slot(struct nidx_slot *slot, size_t cap, uint64_t h, size_t pos1)
{
	size_t i = h & (cap - 1);

	while (slot[i].pos1)
		i = (i + 1) & (cap - 1);
	slot[i] = (struct nidx_slot){ h, pos1 };
}

int nidx_put(struct nidx *x, uint64_t h, size_t pos)
{
	if ((x->n + 1) * 4 > x->cap * 3) {         /* keep the load under 3/4 */
		size_t cap = x->cap ? x->cap * 2 : 64;
		struct nidx_slot *s = calloc(cap, sizeof(*s));
		if (!s)
			return -ENOMEM;
		for (size_t i = 0; i < x->cap; i++)
			if (x->slot[i].pos1)
				put_slot(s, cap, x->slot[i].hash, x->slot[i].pos1);
		free(x->slot);
		x->slot = s;
		x->cap = cap;
	}
	put_slot(x->slot, x->cap, h, pos + 1);
	x->n++;
	return 0;
}

/* The slot holding (h, pos), or cap when there is none. */
static size_t slot_of(const struct nidx *x, uint64_t h, size_t pos)
{
	if (!x->cap)
		return 0;
	for (size_t i = h & (x->cap - 1);; i = (i + 1) & (x->cap - 1)) {
		if (!x->slot[i].pos1)
			return x->cap;
		if (x->slot[i].hash == h && x->slot[i].pos1 == pos + 1)
			return i;
	}
}

void nidx_del(struct nidx *x, uint64_t h, size_t pos)
{
	size_t mask = x->cap - 1, i = slot_of(x, h, pos), j;

	if (i >= x->cap)
		return;
	/* shift back the entries after it that probed past it */
	for (j = (i + 1) & mask; x->slot[j].pos1; j = (j + 1) & mask) {
		size_t home = x->slot[j].hash & mask;
		/* j's entry may fill hole i unless its home lies in (i, j] */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			x->slot[i] = x->slot[j];
			i = j;
		}
	}
	x->slot[i].pos1 = 0;
	x->n--;
}

void nidx_move(struct nidx *x, uint64_t h, size_t from, size_t to)
{
	size_t i = slot_of(x, h, from);

	if (i < x->cap)
		x->slot[i].pos1 = to + 1;
}

void nidx_release(struct nidx *x)
{
	free(x->slot);
	x->slot = NULL;
	x->cap = x->n = 0;
}
