/* test_shard_read.c - the one shard reader of a restore (daemon/shard_read.c):
 * both ways to read (buffered into the destination, O_DIRECT windows from
 * the pool) deliver exactly the wanted byte ranges, and every failure is
 * clean and named: a changed file (caught by the chunk CRC32Cs of format
 * 2 and by the SHA-256 of format 1), a short or long file, a read error, a
 * cancel. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "csum.h"
#include "io.h"
#include "mfst.h"
#include "sha.h"
#include "shard_read.h"
#include "shm_pool.h"
#include "testhelp.h"

#define FILE_BYTES (3u << 20 | 12345)   /* odd size: a partial last window */

static char dir[64];
static int iterfd = -1;
static uint8_t *content;
static struct mfst_file mf = { .path = "model/rank_00000.safetensors" };

/* A checkpoint directory with model/rank_00000.safetensors of known bytes,
 * its manifest entry with chunk CRC32Cs of chunk bytes (0: none, format 1). */
static int setup_chunks(size_t size, uint64_t chunk)
{
	struct csum_stream cs;
	struct sha_ctx sha;
	int fd;

	snprintf(dir, sizeof(dir), "/var/tmp/test_shard_read.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	iterfd = open(dir, O_RDONLY | O_DIRECTORY);
	mkdirat(iterfd, "model", 0700);
	content = malloc(size);
	for (size_t i = 0; i < size; i++)
		content[i] = (uint8_t)(i * 2654435761u >> 13);
	fd = openat(iterfd, mf.path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, content, size) != (ssize_t)size)
		return -1;
	close(fd);
	mf.size = size;
	sha_init(&sha);
	sha_update(&sha, content, size);
	sha_final_hex(&sha, mf.digest.hex);
	free(mf.crc32c);
	mf.crc32c = NULL;
	mf.chunk_size = chunk;
	if (!chunk)
		return 0;
	if (csum_stream_init(&cs, chunk, size) < 0)
		return -1;
	csum_stream_update(&cs, content, size);
	return csum_stream_finish(&cs, &mf.crc32c);
}

static int setup(size_t size)
{
	return setup_chunks(size, CSUM_CHUNK_BYTES);
}

static void teardown(void)
{
	char p[128];

	snprintf(p, sizeof(p), "%s/%s", dir, mf.path);
	unlink(p);
	snprintf(p, sizeof(p), "%s/model", dir);
	rmdir(p);
	rmdir(dir);
	close(iterfd);
	free(content);
	content = NULL;
	free(mf.crc32c);
	mf.crc32c = NULL;
}

/* Three ranges: one inside the first 4 KiB, one across window boundaries,
 * one ending at the last byte. */
static int read_and_check(struct shm_pool *pool, atomic_int *cancel, int want_r,
			  char *msg, size_t msglen)
{
	uint64_t at[3][2] = { { 100, 3000 }, { 60000, 2200000 }, { FILE_BYTES - 777, FILE_BYTES } };
	struct shard_seg segs[3];
	struct io_ctx io = { 0 };
	uint8_t *dst[3];
	int r;

	if (io_ctx_init(&io, "auto", 8, NULL) < 0)
		return -1;
	for (int i = 0; i < 3; i++) {
		dst[i] = calloc(1, at[i][1] - at[i][0]);
		segs[i] = (struct shard_seg){ at[i][0], at[i][1], dst[i], NULL, 0 };
	}
	struct shard_src src = { &io, iterfd, &mf, pool, cancel };
	msg[0] = '\0';
	r = shard_read(&src, segs, 3, msg, msglen);
	if (r == 0)
		for (int i = 0; i < 3; i++)
			if (memcmp(dst[i], content + at[i][0], at[i][1] - at[i][0]))
				r = 1;
	if (io.inflight != 0)        /* every read reaped, even after a failure */
		r = 2;
	io_ctx_release(&io);
	for (int i = 0; i < 3; i++)
		free(dst[i]);
	return r == want_r ? 0 : r == 0 ? 3 : r;
}

static int t_buffered(void)
{
	atomic_int cancel = 0;
	char msg[512];

	CHECK(setup(FILE_BYTES) == 0);
	CHECK_EQ(read_and_check(NULL, &cancel, 0, msg, sizeof(msg)), 0);
	teardown();
	return 0;
}

static int t_direct_windows(void)
{
	struct shm_pool pool;
	atomic_int cancel = 0;
	char msg[512];

	CHECK(setup(FILE_BYTES) == 0);
	/* 64 KiB windows: many of them, ranges across their edges */
	CHECK(shm_pool_init(&pool, 1 << 20, 64 << 10, 1) == 0);
	CHECK_EQ(read_and_check(&pool, &cancel, 0, msg, sizeof(msg)), 0);
	CHECK(shm_pool_try_take(&pool) >= 0);     /* the windows went back */
	shm_pool_release(&pool);
	teardown();
	return 0;
}

/* One byte changed in chunk 1 (format 2: its CRC32C) or anywhere (format
 * 1: the SHA-256), read both ways. */
static int t_changed_file(void)
{
	struct shm_pool pool;
	atomic_int cancel = 0;
	char msg[512];
	int fd;

	for (int v1 = 0; v1 <= 1; v1++) {
		CHECK(setup_chunks(FILE_BYTES, v1 ? 0 : CSUM_CHUNK_BYTES) == 0);
		fd = openat(iterfd, mf.path, O_WRONLY);
		CHECK(pwrite(fd, "X", 1, 2000000) == 1);
		close(fd);
		CHECK_EQ(read_and_check(NULL, &cancel, -EBADMSG, msg, sizeof(msg)), 0);
		CHECK(strstr(msg, v1 ? "model/rank_00000.safetensors: sha256 mismatch" :
			     "model/rank_00000.safetensors: crc32c of chunk 1 (bytes "
			     "1048576..2097151) does not match the manifest"));
		CHECK(strstr(msg, "the restored tensors are not trustworthy"));
		CHECK(shm_pool_init(&pool, 1 << 20, 64 << 10, 1) == 0);
		CHECK_EQ(read_and_check(&pool, &cancel, -EBADMSG, msg, sizeof(msg)), 0);
		CHECK(strstr(msg, v1 ? "sha256 mismatch" : "crc32c of chunk 1 "));
		shm_pool_release(&pool);
		teardown();
	}
	return 0;
}

/* A single bit flipped in the middle of a large shard (64 MiB), in a byte
 * no wanted range covers: the whole file is still checked, and refused. */
static int t_flipped_bit(void)
{
	const size_t size = 64u << 20;
	struct shard_seg seg;
	struct io_ctx io = { 0 };
	atomic_int cancel = 0;
	uint8_t *dst = calloc(1, 4096), b;
	char msg[512];
	int fd;

	CHECK(dst && setup(size) == 0);
	fd = openat(iterfd, mf.path, O_RDWR);
	CHECK(pread(fd, &b, 1, size / 2 + 3) == 1);
	b ^= 0x10;
	CHECK(pwrite(fd, &b, 1, size / 2 + 3) == 1);
	close(fd);
	for (int direct = 0; direct <= 1; direct++) {
		struct shm_pool pool;
		CHECK(io_ctx_init(&io, "auto", 8, NULL) == 0);
		seg = (struct shard_seg){ 0, 4096, dst, NULL, 0 };
		if (direct)
			CHECK(shm_pool_init(&pool, 8 << 20, 1 << 20, 1) == 0);
		struct shard_src src = { &io, iterfd, &mf, direct ? &pool : NULL, &cancel };
		CHECK_EQ(shard_read(&src, &seg, 1, msg, sizeof(msg)), -EBADMSG);
		CHECK(strstr(msg, "model/rank_00000.safetensors: crc32c of chunk 32 (bytes "
			     "33554432..34603007) does not match the manifest: the restored "
			     "tensors are not trustworthy"));
		CHECK_EQ(io.inflight, 0);
		io_ctx_release(&io);
		if (direct)
			shm_pool_release(&pool);
	}
	free(dst);
	teardown();
	return 0;
}

/* A file longer than the manifest says: its bytes are not the checkpoint's. */
static int t_long_file(void)
{
	atomic_int cancel = 0;
	char msg[512];

	CHECK(setup(FILE_BYTES) == 0);
	mf.size = FILE_BYTES - 5000;
	CHECK_EQ(read_and_check(NULL, &cancel, -EBADMSG, msg, sizeof(msg)), 0);
	CHECK(strstr(msg, "longer than its manifest says"));
	teardown();
	return 0;
}

static int t_short_file(void)
{
	atomic_int cancel = 0;
	char msg[512];

	CHECK(setup(FILE_BYTES - 5000) == 0);
	mf.size = FILE_BYTES;              /* the manifest says more */
	CHECK_EQ(read_and_check(NULL, &cancel, -EIO, msg, sizeof(msg)), 0);
	CHECK(strstr(msg, "shorter than its manifest says"));
	teardown();
	return 0;
}

static int t_read_error(void)
{
	atomic_int cancel = 0;
	char msg[512];

	CHECK(setup(FILE_BYTES) == 0);
	CHECK(io_fault_setup("read:2:-5") == 0);
	CHECK_EQ(read_and_check(NULL, &cancel, -EIO, msg, sizeof(msg)), 0);
	CHECK(strstr(msg, "read model/rank_00000.safetensors"));
	teardown();
	return 0;
}

static int t_cancelled(void)
{
	atomic_int cancel = 1;
	char msg[512];

	CHECK(setup(FILE_BYTES) == 0);
	CHECK_EQ(read_and_check(NULL, &cancel, -ECANCELED, msg, sizeof(msg)), 0);
	teardown();
	return 0;
}

static const struct test tests[] = {
	{ "buffered", t_buffered },
	{ "direct_windows", t_direct_windows },
	{ "changed_file", t_changed_file },
	{ "flipped_bit", t_flipped_bit },
	{ "short_file", t_short_file },
	{ "long_file", t_long_file },
	{ "read_error", t_read_error },
	{ "cancelled", t_cancelled },
};

int main(int argc, char **argv)
{
	sha_setup();
	return test_main(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
