/* test_treg.c - a session's tensor registry: lookup after adds, drops and
 * replaces; each group's safetensors header bound, refused at the limit
 * with a message naming it; empty groups go. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testhelp.h"
#include "safet.h"
#include "treg.h"

static struct reg_tensor u8(int ndim)
{
	struct reg_tensor t = { 0 };
	strcpy(t.dtype, "U8");
	t.ndim = ndim;
	for (int d = 0; d < ndim; d++)
		t.shape[d] = 1;
	t.nbytes = 1;
	return t;
}

static int test_find_drop_replace(void)
{
	struct session *s = calloc(1, sizeof(*s));
	struct reg_tensor t = u8(1), *f;
	char msg[512], name[32];

	CHECK(s);
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "t%d", i);
		CHECK_EQ(treg_add(s, &t, i % 2 ? "model" : "optim", name, msg, sizeof(msg)), 0);
	}
	CHECK_EQ(s->ntensors, 1000);
	CHECK_EQ(s->ngroups, 2);
	CHECK(treg_find(s, "model", "t1"));
	CHECK(!treg_find(s, "optim", "t1"));          /* the group is part of the key */
	for (int i = 0; i < 1000; i += 2) {           /* every optim tensor */
		snprintf(name, sizeof(name), "t%d", i);
		CHECK((f = treg_find(s, "optim", name)));
		treg_drop(s, (size_t)(f - s->tensors));
	}
	CHECK_EQ(s->ngroups, 1);                      /* optim went with its last tensor */
	for (int i = 1; i < 1000; i += 2) {
		snprintf(name, sizeof(name), "t%d", i);
		CHECK((f = treg_find(s, "model", name)));
		CHECK(!strcmp(f->name, name));
	}
	{
		uint64_t was = s->groups[0].header_bytes;
		struct reg_tensor wide = u8(8);
		CHECK((f = treg_find(s, "model", "t1")));
		CHECK_EQ(treg_replace(s, f, &wide, msg, sizeof(msg)), 0);
		CHECK_EQ(f->ndim, 8);
		CHECK(!strcmp(f->name, "t1"));
		CHECK(s->groups[0].header_bytes > was);
	}
	treg_release(s);
	CHECK_EQ(s->ntensors, 0);
	CHECK(!treg_find(s, "model", "t1"));
	free(s);
	return 0;
}

/* The bound holds what safetensors really writes: a header built from the
 * registered entries is never longer than the group's header_bytes. */
static int test_bound_covers_header(void)
{
	struct session *s = calloc(1, sizeof(*s));
	const char *names[] = { "a", "q\"uote", "back\\slash", "caf\xc3\xa9", "x/y.z" };
	struct safet_entry e[5];
	int64_t shape[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
	uint64_t offs[6];
	uint8_t *buf;
	size_t hlen;
	char msg[512];

	CHECK(s);
	for (int i = 0; i < 5; i++) {
		struct reg_tensor t = u8(i + 3);
		CHECK_EQ(treg_add(s, &t, "g", names[i], msg, sizeof(msg)), 0);
		e[i] = (struct safet_entry){ names[i], "U8", i + 3, shape, 1 };
	}
	CHECK_EQ(safet_header_build(e, 5, NULL, 8, &buf, &hlen, offs), 0);
	{
		size_t json = hlen;                   /* the JSON without padding */
		while (json > 8 && buf[json - 1] == ' ')
			json--;
		json -= 8;
		/* "{" + entries + "}": the entries alone within their bound */
		CHECK(json - 2 <= s->groups[0].header_bytes - SAFET_HEADER_OVERHEAD);
		fprintf(stderr, "    5 entries: %zu bytes of JSON, bound %llu\n", json - 2,
			(unsigned long long)(s->groups[0].header_bytes - SAFET_HEADER_OVERHEAD));
	}
	free(buf);
	treg_release(s);
	free(s);
	return 0;
}

static int test_header_limit(void)
{
	struct session *s = calloc(1, sizeof(*s));
	struct reg_tensor t = u8(1);
	char msg[512], *name = malloc(1025);
	size_t i;
	int r = 0;

	CHECK(s && name);
	for (i = 0; i < 200000 && r == 0; i++) {
		int n = snprintf(name, 1025, "%zu-", i);
		memset(name + n, 'x', 1024 - (size_t)n);
		name[1024] = '\0';
		r = treg_add(s, &t, "model", name, msg, sizeof(msg));
	}
	CHECK_EQ(r, -E2BIG);
	fprintf(stderr, "    refused tensor %zu: %s\n", i, msg);
	CHECK(strstr(msg, "group model: its safetensors header would pass 104857600 bytes"));
	CHECK(i > 90000 && i < 110000);
	CHECK_EQ(s->ntensors, i - 1);                /* the refused one is not there */
	CHECK(s->groups[0].header_bytes <= SAFET_MAX_HEADER);
	CHECK_EQ(treg_add(s, &t, "optim", name, msg, sizeof(msg)), 0);   /* other groups */
	treg_release(s);
	free(s);
	free(name);
	return 0;
}

static const struct test tests[] = {
	{ "find_drop_replace", test_find_drop_replace },
	{ "bound_covers_header", test_bound_covers_header },
	{ "header_limit", test_header_limit },
};

TEST_MAIN(tests)
