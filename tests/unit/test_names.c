/* test_names.c - the path-component whitelist and tensor-name rules. */
#include <errno.h>
#include <string.h>

#include "testhelp.h"
#include "names.h"

static int test_name_ok(void)
{
	char why[96];
	const char *ok[] = { "model", "optim", "a", "Z9", "rng_state.v2",
			     "data-loader", "0", "x.y-z_w" };

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		CHECK_EQ(name_check(ok[i], NAME_MAX_GROUP, why, sizeof(why)), 0);
	return 0;
}

static int test_name_bad(void)
{
	const char *bad[] = { "", ".", "..", ".hidden", "-rf", "_x", "a/b",
			      "a b", "a\\b", "a:b", "é", "a\n", "a*", "~x" };
	char why[96];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = '\0';
		CHECK_EQ(name_check(bad[i], NAME_MAX_GROUP, why, sizeof(why)), -EINVAL);
		CHECK(why[0] != '\0');
	}
	CHECK_EQ(name_check(NULL, NAME_MAX_GROUP, why, sizeof(why)), -EINVAL);
	/* no message buffer */
	CHECK_EQ(name_check("..", NAME_MAX_GROUP, NULL, 0), -EINVAL);
	/* a short one gets what fits */
	CHECK_EQ(name_check("..", NAME_MAX_GROUP, why, 5), -EINVAL);
	CHECK_EQ(strlen(why), 4u);
	return 0;
}

static int test_name_length(void)
{
	char s[NAME_MAX_BLOB + 2];
	char why[96];

	memset(s, 'a', sizeof(s));
	s[NAME_MAX_GROUP] = '\0';
	CHECK_EQ(name_check(s, NAME_MAX_GROUP, why, sizeof(why)), 0);
	s[NAME_MAX_GROUP] = 'a';
	s[NAME_MAX_GROUP + 1] = '\0';
	CHECK_EQ(name_check(s, NAME_MAX_GROUP, why, sizeof(why)), -EINVAL);
	CHECK(strstr(why, "long") != NULL);
	CHECK_EQ(name_check(s, NAME_MAX_BLOB, why, sizeof(why)), 0);
	return 0;
}

static int test_tensor_ok(void)
{
	char why[96];

	CHECK_EQ(name_check_tensor("model.layers.0.self_attn.q_proj.weight", why, sizeof(why)), 0);
	CHECK_EQ(name_check_tensor("a/b:c d", why, sizeof(why)), 0);       /* any ASCII text */
	CHECK_EQ(name_check_tensor("poids_\xc3\xa9t\xc3\xa9", why, sizeof(why)), 0); /* é */
	CHECK_EQ(name_check_tensor("\xe2\x82\xac", why, sizeof(why)), 0);   /* U+20AC */
	CHECK_EQ(name_check_tensor("\xf0\x9f\x98\x80", why, sizeof(why)), 0); /* U+1F600 */
	CHECK_EQ(name_check_tensor("\xef\xbf\xbd", why, sizeof(why)), 0);   /* U+FFFD */
	CHECK_EQ(name_check_tensor("\xf4\x8f\xbf\xbf", why, sizeof(why)), 0); /* U+10FFFF */
	CHECK_EQ(name_check_tensor("__metadata__x", why, sizeof(why)), 0);
	return 0;
}

static int test_tensor_bad(void)
{
	static const char *bad[] = {
		"",
		"__metadata__",
		"tab\there", "nl\n", "\x01", "del\x7f",
		"\xc2\x85",                 /* U+0085, a C1 control */
		"\xc0\xaf", "\xc1\xbf",     /* overlong 2-byte */
		"\xe0\x80\xaf",             /* overlong 3-byte */
		"\xf0\x80\x80\xaf",         /* overlong 4-byte */
		"\xed\xa0\x80",             /* U+D800 surrogate */
		"\xed\xbf\xbf",             /* U+DFFF surrogate */
		"\xf4\x90\x80\x80",         /* > U+10FFFF */
		"\xf5\x80\x80\x80", "\xff", "\x80", "a\xbf",
		"\xc3", "\xe2\x82", "\xf0\x9f\x98", /* truncated */
		"\xe2\x28\xa1",             /* bad continuation */
	};
	char why[96];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = '\0';
		if (name_check_tensor(bad[i], why, sizeof(why)) != -EINVAL) {
			fprintf(stderr, "    accepted bad[%zu]\n", i);
			return 1;
		}
		CHECK(why[0] != '\0');
	}
	CHECK_EQ(name_check_tensor(NULL, why, sizeof(why)), -EINVAL);
	return 0;
}

static int test_tensor_length(void)
{
	static char s[NAME_MAX_TENSOR + 2];
	char why[96];

	memset(s, 'w', NAME_MAX_TENSOR);
	s[NAME_MAX_TENSOR] = '\0';
	CHECK_EQ(name_check_tensor(s, why, sizeof(why)), 0);
	s[NAME_MAX_TENSOR] = 'w';
	s[NAME_MAX_TENSOR + 1] = '\0';
	CHECK_EQ(name_check_tensor(s, why, sizeof(why)), -EINVAL);
	return 0;
}

/* Group names are directories in a step: never ckptd's own manifest. */
static int test_group_reserved(void)
{
	const char *bad[] = { "checkpoint_manifest.json", "checkpoint_manifest.json.x" };
	char why[96];

	CHECK_EQ(name_check_group("model", why, sizeof(why)), 0);
	CHECK_EQ(name_check_group("checkpoint_manifest", why, sizeof(why)), 0);
	CHECK_EQ(name_check_group(".x", why, sizeof(why)), -EINVAL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = '\0';
		CHECK_EQ(name_check_group(bad[i], why, sizeof(why)), -EINVAL);
		CHECK(strstr(why, "ckptd's manifest") != NULL);
	}
	return 0;
}

static const struct test tests[] = {
	{ "group_reserved", test_group_reserved },
	{ "name_ok", test_name_ok },
	{ "name_bad", test_name_bad },
	{ "name_length", test_name_length },
	{ "tensor_ok", test_tensor_ok },
	{ "tensor_bad", test_tensor_bad },
	{ "tensor_length", test_tensor_length },
};

TEST_MAIN(tests)
