/* test_config.c - the configuration table: restart-only keys are told
 * apart from the keys a reload applies. */
#include <errno.h>
#include <stdio.h>
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

/* "remote": an object of its own keys, checked; off by default or null. */
static int test_remote(void)
{
	struct config c;
	char err[256], buf[512];
	const char *bad[][2] = {
		{ "{\"remote\": \"s3://b\"}", "remote: wrong type" },
		{ "{\"remote\": {\"url\": \"http://bucket\"}}", "remote.url" },
		{ "{\"remote\": {\"url\": \"s3://BU\"}}", "bucket must be" },
		{ "{\"remote\": {\"url\": \"s3://bucket/a//b\"}}", "prefix" },
		{ "{\"remote\": {\"url\": \"s3://bucket/../x\"}}", "prefix" },
		{ "{\"remote\": {\"url\": \"s3://bucket\", \"bogus\": 1}}", "unknown key \"bogus\"" },
		{ "{\"remote\": {\"url\": \"s3://bucket\", \"part_size\": \"1MiB\"}}", "remote.part_size" },
		{ "{\"remote\": {\"url\": \"s3://bucket\", \"endpoint\": \"ftp://x\"}}", "remote.endpoint" },
		{ "{\"remote\": {\"url\": \"s3://bucket\", \"endpoint\": \"http://h/p\"}}", "remote.endpoint" },
		{ "{\"remote\": {\"url\": \"s3://bucket\", \"credentials_file\": \"rel\"}}", "absolute" },
		{ "{\"remote\": {\"url\": \"s3://bucket\", \"threads\": 0}}", "remote.threads" },
		/* a negative number is out of range, not "not a number" */
		{ "{\"remote\": {\"url\": \"s3://bucket\", \"retries\": -1}}",
		  "remote.retries: must be between 0 and 100" },
	};

	CHECK_EQ(parse("{}", &c), 0);
	CHECK_EQ(c.remote.url[0], '\0');
	CHECK_EQ(parse("{\"remote\": null}", &c), 0);
	CHECK_EQ(c.remote.url[0], '\0');
	CHECK_EQ(parse("{\"remote\": {\"url\": \"s3://my-bucket/ckpt/a/\", \"region\": "
		       "\"eu-west-1\", \"part_size\": \"16MiB\", \"threads\": 8}, "
		       "\"remote_every\": 5, \"remote_max_bytes_per_s\": \"100MiB\"}", &c), 0);
	CHECK(strcmp(c.remote.url, "s3://my-bucket/ckpt/a") == 0);      /* '/' dropped */
	CHECK(strcmp(c.remote.endpoint, "https://s3.eu-west-1.amazonaws.com") == 0);
	CHECK_EQ(c.remote.part_bytes, 16u << 20);
	CHECK_EQ(c.remote.threads, 8);
	CHECK_EQ(c.remote.retries, 5);
	CHECK_EQ(c.remote_every, 5);
	CHECK_EQ(c.remote_max_bytes_per_s, 100u << 20);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK_EQ(config_parse(bad[i][0], strlen(bad[i][0]), &c, err, sizeof(err)), -EINVAL);
		if (!strstr(err, bad[i][1])) {
			printf("    %s: %s\n", bad[i][0], err);
			return 1;
		}
	}
	/* the remote changes only on restart; its limits on reload */
	struct config a, b;
	CHECK_EQ(parse("{\"remote\": {\"url\": \"s3://bucket\"}}", &a), 0);
	CHECK_EQ(parse("{\"remote\": {\"url\": \"s3://bucket\"}, \"remote_keep_last\": 4}", &b), 0);
	CHECK_EQ(config_diff_restart(&a, &b, buf, sizeof(buf)), 0);
	CHECK_EQ(parse("{\"remote\": {\"url\": \"s3://bucket2\"}}", &b), 0);
	CHECK_EQ(config_diff_restart(&a, &b, buf, sizeof(buf)), 1);
	CHECK(strstr(buf, "remote s3://bucket ") != NULL);
	return 0;
}

/* The memory levels across nodes need cluster mode and the memory tier. */
static int test_memory_levels(void)
{
	struct config c;
	char err[256];
	const char *bad[][2] = {
		{ "{\"memory_replicas\": 1, \"memory_tier_bytes\": \"1GiB\"}",
		  "memory_replicas: needs \"cluster\": \"mpi\"" },
		{ "{\"persist_every\": 5, \"memory_tier_bytes\": \"1GiB\"}",
		  "persist_every: needs \"cluster\": \"mpi\"" },
		{ "{\"cluster\": \"mpi\", \"persist_every\": 5}",
		  "persist_every: needs the memory tier" },
		{ "{\"cluster\": \"mpi\", \"memory_replicas\": 1}",
		  "memory_replicas: needs the memory tier" },
		{ "{\"cluster\": \"mpi\", \"persist_every\": 0}", "persist_every: must be" },
		{ "{\"cluster\": \"mpi\", \"memory_replicas\": 17}", "memory_replicas: must be" },
	};

	CHECK_EQ(parse("{}", &c), 0);
	CHECK_EQ(c.memory_replicas, 0);
	CHECK_EQ(c.persist_every, 1);
	CHECK_EQ(parse("{\"cluster\": \"mpi\", \"memory_tier_bytes\": \"1GiB\", "
		       "\"memory_replicas\": 2, \"persist_every\": 5}", &c), 0);
	CHECK_EQ(c.memory_replicas, 2);
	CHECK_EQ(c.persist_every, 5);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK_EQ(config_parse(bad[i][0], strlen(bad[i][0]), &c, err, sizeof(err)), -EINVAL);
		if (!strstr(err, bad[i][1])) {
			printf("    %s: %s\n", bad[i][0], err);
			return 1;
		}
	}
	return 0;
}

/* "file_digest": xxh3-128 by default, sha256 on request, anything else
 * refused naming the key and what it may be; a reload applies it. */
static int test_file_digest(void)
{
	struct config a, b;
	char err[256], buf[512];
	const char *bad[] = { "{\"file_digest\": \"md5\"}", "{\"file_digest\": \"xxh3\"}",
			      "{\"file_digest\": \"SHA256\"}", "{\"file_digest\": \"\"}" };

	CHECK_EQ(parse("{}", &a), 0);
	CHECK(strcmp(a.file_digest, "xxh3-128") == 0);
	CHECK_EQ(parse("{\"file_digest\": \"sha256\"}", &b), 0);
	CHECK(strcmp(b.file_digest, "sha256") == 0);
	CHECK_EQ(parse("{\"file_digest\": \"xxh3-128\"}", &b), 0);
	CHECK(strcmp(b.file_digest, "xxh3-128") == 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK_EQ(config_parse(bad[i], strlen(bad[i]), &b, err, sizeof(err)), -EINVAL);
		if (!strstr(err, "file_digest") || (i < 3 && !strstr(err, "xxh3-128|sha256"))) {
			printf("    %s: %s\n", bad[i], err);
			return 1;
		}
	}
	CHECK_EQ(config_parse("{\"file_digest\": 1}", 18, &b, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "file_digest: wrong type") != NULL);
	CHECK_EQ(parse("{\"file_digest\": \"sha256\"}", &b), 0);
	CHECK_EQ(config_diff_restart(&a, &b, buf, sizeof(buf)), 0);
	config_diff(&a, &b, buf, sizeof(buf));
	CHECK(strstr(buf, "file_digest xxh3-128 -> sha256") != NULL);
	return 0;
}

static const struct test tests[] = {
	{ "restart_keys", test_restart_keys },
	{ "remote", test_remote },
	{ "memory_levels", test_memory_levels },
	{ "file_digest", test_file_digest },
};
TEST_MAIN(tests)
