/* test_config.c - the configuration table: restart-only keys are told
 * apart from the keys a reload applies. */
#include <string.h>

#include "testhelp.h"
#include "config.h"

static int parse(const char *json, struct config *c)
{
	char err[256];
	return config_parse(json, strlen(json), c, err, sizeof(err));
}

static int test_restart_keys(void)
{
	struct config a, b;
	char buf[512];

	CHECK_EQ(parse("{\"keep_last\": 3, \"log_level\": \"info\", \"io_depth\": 4}", &a), 0);
	/* reloadable keys only: nothing needs a restart */
	CHECK_EQ(parse("{\"keep_last\": 1, \"log_level\": \"debug\", \"io_depth\": 4}", &b), 0);
	CHECK_EQ(config_diff_restart(&a, &b, buf, sizeof(buf)), 0);
	CHECK_EQ(buf[0], '\0');
	config_diff(&a, &b, buf, sizeof(buf));
	CHECK(strstr(buf, "keep_last 3 -> 1") != NULL);
	/* io_depth, staging_bytes, gpu: restart-only, each named */
	CHECK_EQ(parse("{\"keep_last\": 1, \"io_depth\": 8, \"staging_bytes\": \"2GiB\", "
		       "\"gpu\": \"off\"}", &b), 0);
	CHECK_EQ(config_diff_restart(&a, &b, buf, sizeof(buf)), 3);
	CHECK(strstr(buf, "io_depth 4 -> 8") != NULL);
	CHECK(strstr(buf, "staging_bytes") != NULL);
	CHECK(strstr(buf, "gpu auto -> off") != NULL);
	CHECK(strstr(buf, "keep_last") == NULL);
	/* a short buffer still counts every key */
	CHECK_EQ(config_diff_restart(&a, &b, buf, 8), 3);
	CHECK(strlen(buf) < 8);
	return 0;
}

static const struct test tests[] = {
	{ "restart_keys", test_restart_keys },
};
TEST_MAIN(tests)
