/* test_layout.c - names inside a job directory, the latest pointer and the
 * list of published steps. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testhelp.h"
#include "layout.h"

static int test_iter_name(void)
{
	char buf[LAYOUT_ITER_LEN + 1], small[8];
	uint64_t step = 77;

	CHECK_EQ(layout_iter_name(500, buf, sizeof(buf)), 0);
	CHECK(strcmp(buf, "iter_000000500") == 0);
	CHECK_EQ(layout_iter_name(0, buf, sizeof(buf)), 0);
	CHECK(strcmp(buf, "iter_000000000") == 0);
	CHECK_EQ(layout_iter_name(999999999, buf, sizeof(buf)), 0);
	CHECK(strcmp(buf, "iter_999999999") == 0);
	CHECK_EQ(layout_iter_name(1000000000, buf, sizeof(buf)), -ERANGE);
	CHECK(layout_iter_name(1, small, sizeof(small)) < 0);

	CHECK_EQ(layout_iter_parse("iter_000000500", &step), 0);
	CHECK_EQ(step, 500);
	CHECK_EQ(layout_iter_parse("iter_999999999", &step), 0);
	CHECK_EQ(step, 999999999);
	step = 77;
	CHECK_EQ(layout_iter_parse("iter_00000050", &step), -EINVAL);
	CHECK_EQ(layout_iter_parse("iter_0000005000", &step), -EINVAL);
	CHECK_EQ(layout_iter_parse("iter_00000050x", &step), -EINVAL);
	CHECK_EQ(layout_iter_parse("iter_-00000050", &step), -EINVAL);
	CHECK_EQ(layout_iter_parse("iter_+00000050", &step), -EINVAL);
	CHECK_EQ(layout_iter_parse("Iter_000000500", &step), -EINVAL);
	CHECK_EQ(layout_iter_parse(".iter_000000500", &step), -EINVAL);
	CHECK_EQ(layout_iter_parse("", &step), -EINVAL);
	CHECK_EQ(layout_iter_parse(NULL, &step), -EINVAL);
	CHECK_EQ(step, 77);
	return 0;
}

static int test_staging_and_leftovers(void)
{
	char buf[128];

	CHECK_EQ(layout_staging_name(600, "0123456789abcdef0123456789abcdef", buf,
				     sizeof(buf)), 0);
	CHECK(strcmp(buf, ".iter_000000600.staging-0123456789abcdef0123456789abcdef") == 0);
	CHECK(layout_is_leftover(buf));
	CHECK_EQ(layout_staging_name(600, "../x", buf, sizeof(buf)), -EINVAL);
	CHECK_EQ(layout_staging_name(600, "", buf, sizeof(buf)), -EINVAL);
	CHECK_EQ(layout_staging_name(1000000000, "ab", buf, sizeof(buf)), -ERANGE);
	CHECK(layout_staging_name(600, "ab", buf, 10) < 0);

	CHECK(layout_is_leftover("latest_checkpoint.txt.tmp"));
	CHECK(layout_is_leftover("job.json.tmp"));
	CHECK(layout_is_leftover(".iter_000000001.staging-0123456789abcdef0123456789abcdef"));
	/* the suffix is a txid (32 hex) or "pruned": nothing else ckptd makes */
	CHECK(!layout_is_leftover(".iter_000000001.staging-x"));
	CHECK(!layout_is_leftover(".iter_000000001.staging-mine"));
	CHECK(!layout_is_leftover(".iter_000000001.staging-0123456789abcdef0123456789abcdeF"));
	CHECK(!layout_is_leftover(".iter_000000001.staging-0123456789abcdef0123456789abcdef0"));
	CHECK(!layout_is_leftover(".iter_000000001.staging-prunedx"));
	CHECK(!layout_is_leftover("iter_000000500"));
	CHECK(!layout_is_leftover("latest_checkpoint.txt"));
	CHECK(!layout_is_leftover("job.json"));
	CHECK(!layout_is_leftover(".iter_000000500"));
	CHECK(!layout_is_leftover("iter_000000500.staging-x"));
	CHECK(!layout_is_leftover("tmp"));
	CHECK(!layout_is_leftover("x.tmpx"));
	CHECK(!layout_is_leftover(""));
	CHECK(!layout_is_leftover(NULL));
	/* only names ckptd creates: a user's temp files are not leftovers */
	CHECK(layout_is_leftover("job.json.0123456789abcdef0123456789abcdef.tmp"));
	CHECK(!layout_is_leftover("job.json.0123456789abcdef0123456789abcde.tmp"));
	CHECK(!layout_is_leftover("job.json.0123456789ABCDEF0123456789abcdef.tmp"));
	CHECK(!layout_is_leftover("draft.tmp"));
	CHECK(!layout_is_leftover("build.tmp"));
	CHECK(!layout_is_leftover("iter_000000001.tmp"));
	CHECK(!layout_is_leftover(".iter_000000001.staging-"));
	CHECK(!layout_is_leftover(".iter_00000001x.staging-abc"));
	CHECK(!layout_is_leftover(".iter_000000001.staging-../x"));
	CHECK(!layout_is_leftover(".iter_000000001.staging-.hidden"));
	CHECK(!layout_is_leftover(".iter_0000000011.staging-abc"));
	CHECK(layout_is_leftover(".iter_000000001.staging-pruned"));
	return 0;
}

static int test_paths(void)
{
	char buf[LAYOUT_PATH_MAX], small[16];

	CHECK_EQ(layout_shard_path("model", 3, 0, buf, sizeof(buf)), 0);
	CHECK(strcmp(buf, "model/rank_00003.safetensors") == 0);
	CHECK_EQ(layout_shard_path("optim", 99999, 0, buf, sizeof(buf)), 0);
	CHECK(strcmp(buf, "optim/rank_99999.safetensors") == 0);
	CHECK_EQ(layout_shard_path("model", 3, 1, buf, sizeof(buf)), 0);
	CHECK(strcmp(buf, "model/rank_00003.frozen.safetensors") == 0);
	CHECK(layout_frozen_shard(buf));
	CHECK(!layout_frozen_shard("model/rank_00003.safetensors"));
	CHECK(!layout_frozen_shard("extra/rank_00003/x.frozen.safetensors"));
	CHECK_EQ(layout_blob_path("rng", 3, buf, sizeof(buf)), 0);
	CHECK(strcmp(buf, "extra/rank_00003/rng") == 0);
	CHECK_EQ(layout_rank_dir(3, buf, sizeof(buf)), 0);
	CHECK(strcmp(buf, "rank_00003") == 0);

	CHECK_EQ(layout_shard_path("../etc", 0, 0, buf, sizeof(buf)), -EINVAL);
	CHECK_EQ(layout_shard_path("a/b", 0, 0, buf, sizeof(buf)), -EINVAL);
	CHECK_EQ(layout_shard_path("model", -1, 0, buf, sizeof(buf)), -EINVAL);
	CHECK_EQ(layout_shard_path("model", 100000, 0, buf, sizeof(buf)), -EINVAL);
	CHECK_EQ(layout_blob_path("..", 0, buf, sizeof(buf)), -EINVAL);
	CHECK_EQ(layout_blob_path(".rng", 0, buf, sizeof(buf)), -EINVAL);
	CHECK_EQ(layout_rank_dir(-5, buf, sizeof(buf)), -EINVAL);
	/* Never a silently cut path. */
	CHECK_EQ(layout_shard_path("model", 0, 0, small, sizeof(small)), -ENAMETOOLONG);
	CHECK_EQ(layout_blob_path("rng", 0, small, sizeof(small)), -ENAMETOOLONG);
	return 0;
}

struct jobdir {
	char path[64];
	int fd;
};

static int jd_open(struct jobdir *j)
{
	strcpy(j->path, "/tmp/ckpt_layout_XXXXXX");
	if (!mkdtemp(j->path))
		return -1;
	j->fd = open(j->path, O_RDONLY | O_DIRECTORY);
	return j->fd < 0 ? -1 : 0;
}

static void jd_close(struct jobdir *j)
{
	char cmd[128];

	close(j->fd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", j->path);
	if (system(cmd) != 0)
		fprintf(stderr, "    cannot remove %s\n", j->path);
}

static int put(int dfd, const char *name, const char *text)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ssize_t n = (ssize_t)strlen(text);

	if (fd < 0 || write(fd, text, (size_t)n) != n)
		return -1;
	return close(fd);
}

static int test_latest(void)
{
	struct jobdir j;
	uint64_t step = 77;
	char buf[32] = "";
	int fd;

	CHECK_EQ(jd_open(&j), 0);
	CHECK_EQ(layout_latest_read(j.fd, &step), -ENOENT);
	CHECK_EQ(step, 77);
	CHECK_EQ(layout_latest_write(j.fd, 500), 0);
	CHECK_EQ(layout_latest_read(j.fd, &step), 0);
	CHECK_EQ(step, 500);
	fd = openat(j.fd, LAYOUT_LATEST, O_RDONLY);
	CHECK(fd >= 0);
	CHECK_EQ(read(fd, buf, sizeof(buf)), 15);
	close(fd);
	CHECK(strcmp(buf, "iter_000000500\n") == 0);
	/* Replaced, and no temp file left behind. */
	CHECK_EQ(layout_latest_write(j.fd, 600), 0);
	CHECK_EQ(layout_latest_read(j.fd, &step), 0);
	CHECK_EQ(step, 600);
	CHECK(faccessat(j.fd, LAYOUT_LATEST ".tmp", F_OK, AT_SYMLINK_NOFOLLOW) < 0);
	CHECK_EQ(layout_latest_write(j.fd, 1000000000), -ERANGE);

	/* A stale temp file from a crash is simply overwritten. */
	CHECK_EQ(put(j.fd, LAYOUT_LATEST ".tmp", "garbage garbage garbage"), 0);
	CHECK_EQ(layout_latest_write(j.fd, 700), 0);
	CHECK_EQ(layout_latest_read(j.fd, &step), 0);
	CHECK_EQ(step, 700);

	/* A hard link or a directory planted at the temp name is removed,
	 * never written through (symlinks: below). */
	{
		char outside[96], got[8] = "";
		int ofd;
		snprintf(outside, sizeof(outside), "%s.outside", j.path);
		CHECK_EQ(put(AT_FDCWD, outside, "keep"), 0);
		CHECK_EQ(linkat(AT_FDCWD, outside, j.fd, LAYOUT_LATEST ".tmp", 0), 0);
		CHECK_EQ(layout_latest_write(j.fd, 702), 0);
		ofd = open(outside, O_RDONLY);
		CHECK(ofd >= 0);
		CHECK_EQ(read(ofd, got, sizeof(got)), 4);
		close(ofd);
		unlink(outside);
		CHECK(memcmp(got, "keep", 4) == 0);
		CHECK_EQ(mkdirat(j.fd, LAYOUT_LATEST ".tmp", 0700), 0);
		CHECK_EQ(layout_latest_write(j.fd, 703), 0);
		CHECK_EQ(layout_latest_read(j.fd, &step), 0);
		CHECK_EQ(step, 703);
	}

	/* Malformed pointers. */
	step = 77;
	CHECK_EQ(put(j.fd, LAYOUT_LATEST, "iter_000000500\nx"), 0);
	CHECK_EQ(layout_latest_read(j.fd, &step), -EINVAL);
	CHECK_EQ(put(j.fd, LAYOUT_LATEST, "iter_00000050\n"), 0);
	CHECK_EQ(layout_latest_read(j.fd, &step), -EINVAL);
	CHECK_EQ(put(j.fd, LAYOUT_LATEST, "500\n"), 0);
	CHECK_EQ(layout_latest_read(j.fd, &step), -EINVAL);
	CHECK_EQ(put(j.fd, LAYOUT_LATEST, ""), 0);
	CHECK_EQ(layout_latest_read(j.fd, &step), -EINVAL);
	CHECK_EQ(put(j.fd, LAYOUT_LATEST, "iter_000000500\n\n"), 0);
	CHECK_EQ(layout_latest_read(j.fd, &step), -EINVAL);
	CHECK_EQ(step, 77);
	/* Hand-written without the newline is accepted. */
	CHECK_EQ(put(j.fd, LAYOUT_LATEST, "iter_000000042"), 0);
	CHECK_EQ(layout_latest_read(j.fd, &step), 0);
	CHECK_EQ(step, 42);

	/* A symlink is neither read nor written through. */
	CHECK_EQ(unlinkat(j.fd, LAYOUT_LATEST, 0), 0);
	CHECK_EQ(symlinkat("/etc/hostname", j.fd, LAYOUT_LATEST), 0);
	CHECK_EQ(layout_latest_read(j.fd, &step), -ELOOP);
	/* ... and one planted at the temp name is removed, not followed */
	CHECK_EQ(symlinkat("/tmp/ckpt_layout_never", j.fd, LAYOUT_LATEST ".tmp"), 0);
	CHECK_EQ(layout_latest_write(j.fd, 800), 0);
	CHECK(access("/tmp/ckpt_layout_never", F_OK) < 0);
	CHECK_EQ(layout_latest_read(j.fd, &step), 0);
	CHECK_EQ(step, 800);
	jd_close(&j);
	return 0;
}

static int test_list_steps(void)
{
	struct jobdir j;
	uint64_t *steps = (uint64_t *)0x1;
	int n;

	CHECK_EQ(jd_open(&j), 0);
	CHECK_EQ(layout_list_steps(j.fd, &steps), 0);
	free(steps);
	CHECK_EQ(mkdirat(j.fd, "iter_000000500", 0700), 0);
	CHECK_EQ(mkdirat(j.fd, "iter_000000100", 0700), 0);
	CHECK_EQ(mkdirat(j.fd, "iter_000001000", 0700), 0);
	CHECK_EQ(mkdirat(j.fd, "iter_000000000", 0700), 0);
	/* Not steps: staging, malformed, a file, a symlink. */
	CHECK_EQ(mkdirat(j.fd, ".iter_000000600.staging-ab", 0700), 0);
	CHECK_EQ(mkdirat(j.fd, "iter_00000070", 0700), 0);
	CHECK_EQ(mkdirat(j.fd, "iter_000000800x", 0700), 0);
	CHECK_EQ(put(j.fd, "iter_000000900", "not a dir"), 0);
	CHECK_EQ(symlinkat("iter_000000500", j.fd, "iter_000000999"), 0);
	CHECK_EQ(put(j.fd, LAYOUT_LATEST, "iter_000000500\n"), 0);
	n = layout_list_steps(j.fd, &steps);
	CHECK_EQ(n, 4);
	CHECK_EQ(steps[0], 1000);
	CHECK_EQ(steps[1], 500);
	CHECK_EQ(steps[2], 100);
	CHECK_EQ(steps[3], 0);
	free(steps);
	/* The caller's fd and its position are untouched: list twice. */
	CHECK_EQ(layout_list_steps(j.fd, &steps), 4);
	free(steps);
	jd_close(&j);
	return 0;
}

static const struct test tests[] = {
	{ "iter_name", test_iter_name },
	{ "staging_and_leftovers", test_staging_and_leftovers },
	{ "paths", test_paths },
	{ "latest", test_latest },
	{ "list_steps", test_list_steps },
};

TEST_MAIN(tests)
