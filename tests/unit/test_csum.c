/* test_csum.c - CRC32C of file chunks: the standard check value, the
 * CPU's instruction against the table, chaining, the copying variant, and
 * chunk tables built from bytes fed in odd pieces. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "testhelp.h"
#include "csum.h"

static int test_check_value(void)
{
	/* RFC 3720 B.4 and the usual "123456789" check value */
	uint8_t zeros[32] = { 0 }, ones[32];

	memset(ones, 0xff, sizeof(ones));
	CHECK_EQ(csum_crc32c(0, "123456789", 9), 0xe3069283u);
	CHECK_EQ(csum__crc32c_sw(0, "123456789", 9), 0xe3069283u);
	CHECK_EQ(csum_crc32c(0, zeros, 32), 0x8a9136aau);
	CHECK_EQ(csum_crc32c(0, ones, 32), 0x62a8ab43u);
	CHECK_EQ(csum_crc32c(0, "", 0), 0);
	return 0;
}

static int test_hw_matches_table(void)
{
	size_t n = 100003;
	uint8_t *b = malloc(n);

	CHECK(b);
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 2654435761u >> 13);
	/* every alignment and length near the 8-byte steps */
	for (size_t off = 0; off < 9; off++)
		for (size_t len = 0; len < 40; len++)
			if (csum_crc32c(7, b + off, len) != csum__crc32c_sw(7, b + off, len)) {
				free(b);
				CHECK(!"hardware and table CRCs differ");
			}
	CHECK_EQ(csum_crc32c(0, b, n), csum__crc32c_sw(0, b, n));
	/* around the three-lane blocks of the CPU's loop (3 x 4096 bytes) */
	for (size_t off = 0; off < 9; off += 4)
		for (size_t len = 12280; len < 12300; len++)
			CHECK_EQ(csum_crc32c(5, b + off, len), csum__crc32c_sw(5, b + off, len));
	CHECK_EQ(csum_crc32c(0, b + 3, 3 * 12288 + 11), csum__crc32c_sw(0, b + 3, 3 * 12288 + 11));
	/* chaining */
	CHECK_EQ(csum_crc32c(csum_crc32c(0, b, 777), b + 777, n - 777), csum_crc32c(0, b, n));
	free(b);
	return 0;
}

static int test_stream(void)
{
	size_t n = 10 * 1000 + 17, chunk = 1000;
	uint8_t *b = malloc(n);
	struct csum_stream s;
	uint32_t *crcs = NULL;

	CHECK(b);
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 31 + 7);
	CHECK_EQ(csum_count(n, chunk), 11);
	CHECK_EQ(csum_count(0, chunk), 0);
	CHECK_EQ(csum_count(3000, chunk), 3);
	CHECK_EQ(csum_stream_init(&s, 0, n), -EINVAL);
	CHECK_EQ(csum_stream_init(&s, chunk, n), 0);
	/* pieces of odd sizes that straddle chunk boundaries */
	for (size_t off = 0, step = 1; off < n; off += step, step = step * 3 % 1237 + 1)
		csum_stream_update(&s, b + off, step < n - off ? step : n - off);
	csum_stream_update(&s, b, 5);   /* past the size: ignored */
	CHECK_EQ(csum_stream_finish(&s, &crcs), 0);
	for (size_t k = 0; k < 11; k++) {
		size_t len = k == 10 ? 17 : chunk;
		CHECK_EQ(crcs[k], csum_crc32c(0, b + k * chunk, len));
	}
	free(crcs);
	csum_stream_release(&s);

	/* fewer bytes than announced: no table */
	CHECK_EQ(csum_stream_init(&s, chunk, n), 0);
	csum_stream_update(&s, b, n - 1);
	crcs = NULL;
	CHECK_EQ(csum_stream_finish(&s, &crcs), -EIO);
	CHECK(crcs == NULL);
	csum_stream_release(&s);
	csum_stream_release(NULL);
	free(b);
	return 0;
}

/* csum_crc32c_copy copies exactly and gives csum_crc32c's value, for any
 * alignment of either side and lengths around the 3 x 4 KiB lane loop. */
static int test_copy(void)
{
	const size_t lens[] = { 0, 1, 15, 16, 17, 12287, 12288, 12289, 3 * 12288 + 5,
				(1u << 20) + 3 };
	size_t n = (1u << 20) + 64;
	uint8_t *src = malloc(n), *dst = malloc(n + 64);

	CHECK(src && dst);
	for (size_t i = 0; i < n; i++)
		src[i] = (uint8_t)(i * 2654435761u >> 11);
	for (size_t so = 0; so < 3; so++)
		for (size_t d0 = 0; d0 < 17; d0 += 5)
			for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
				memset(dst, 0xa5, n + 64);
				CHECK_EQ(csum_crc32c_copy(9, dst + d0, src + so, lens[l]),
					 csum_crc32c(9, src + so, lens[l]));
				CHECK(memcmp(dst + d0, src + so, lens[l]) == 0);
				CHECK_EQ(dst[d0 + lens[l]], 0xa5);      /* not a byte more */
				CHECK(!d0 || dst[d0 - 1] == 0xa5);
			}
	free(src);
	free(dst);
	return 0;
}

static const struct test tests[] = {
	{ "check_value", test_check_value },
	{ "hw_matches_table", test_hw_matches_table },
	{ "copy", test_copy },
	{ "stream", test_stream },
};
TEST_MAIN(tests)
