/* test_nidx.c - the (group, name) hash index: random puts, deletes and moves
 * against a plain array, with hashes forced to collide. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testhelp.h"
#include "nidx.h"

#define N 3000

struct model {
	char   key[N][16];
	size_t n;
	struct nidx x;
	int    mask;          /* hashes & mask: small masks collide */
};

static uint64_t hash_of(const struct model *m, const char *k)
{
	return nidx_hash("g", k) & (uint64_t)m->mask;
}

struct probe { const struct model *m; const char *k; };

static int same(void *ctx, size_t pos)
{
	const struct probe *p = ctx;
	return !strcmp(p->m->key[pos], p->k);
}

static long find(const struct model *m, const char *k)
{
	struct probe p = { m, k };
	return nidx_find(&m->x, hash_of(m, k), same, &p);
}

/* Drop position i the way callers do: the last element fills the hole. */
static void drop(struct model *m, size_t i)
{
	size_t last = m->n - 1;

	nidx_del(&m->x, hash_of(m, m->key[i]), i);
	if (i != last) {
		nidx_move(&m->x, hash_of(m, m->key[last]), last, i);
		memcpy(m->key[i], m->key[last], sizeof(m->key[i]));
	}
	m->n--;
}

static int run(int mask)
{
	static struct model m;
	unsigned seed = 7;

	memset(&m, 0, sizeof(m));
	m.mask = mask;
	for (int op = 0; op < 20000; op++) {
		char k[16];
		long at;

		snprintf(k, sizeof(k), "k%u", (unsigned)(rand_r(&seed) % (N * 2 / 3)));
		at = find(&m, k);
		if (at >= 0) {
			CHECK(!strcmp(m.key[at], k));
			if (rand_r(&seed) % 2)
				drop(&m, (size_t)at);
			continue;
		}
		for (size_t i = 0; i < m.n; i++)          /* really absent */
			CHECK(strcmp(m.key[i], k) != 0);
		if (m.n < N) {
			CHECK_EQ(nidx_put(&m.x, hash_of(&m, k), m.n), 0);
			memcpy(m.key[m.n++], k, sizeof(k));
		}
	}
	CHECK_EQ(m.x.n, m.n);
	for (size_t i = 0; i < m.n; i++)
		CHECK_EQ(find(&m, m.key[i]), (long)i);
	while (m.n)
		drop(&m, m.n / 2);
	CHECK_EQ(m.x.n, 0);
	CHECK_EQ(find(&m, "k1"), -1);
	nidx_release(&m.x);
	CHECK_EQ(find(&m, "k1"), -1);            /* usable after release */
	return 0;
}

static int test_spread(void) { return run(-1); }
static int test_collide(void) { return run(7); }      /* 8 hashes in all */
static int test_one_hash(void) { return run(0); }     /* every key collides */

static int test_hash_splits_group_and_name(void)
{
	CHECK(nidx_hash("ab", "c") != nidx_hash("a", "bc"));
	CHECK(nidx_hash("ab", NULL) == nidx_hash("ab", ""));
	return 0;
}

static const struct test tests[] = {
	{ "spread", test_spread },
	{ "collide", test_collide },
	{ "one_hash", test_one_hash },
	{ "hash_splits_group_and_name", test_hash_splits_group_and_name },
};

TEST_MAIN(tests)
