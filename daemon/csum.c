/* csum.c - CRC32C of file chunks (see csum.h). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "csum.h"

#define POLY 0x82f63b78u   /* CRC32C, reflected */

static uint32_t table[8][256];

static void table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

/* Slicing by 8: about 1 byte per cycle, for CPUs without SSE4.2. */
static uint32_t crc_table(uint32_t c, const uint8_t *p, size_t n)
{
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		v ^= c;
		c = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^
		    table[5][(v >> 16) & 0xff] ^ table[4][(v >> 24) & 0xff] ^
		    table[3][(v >> 32) & 0xff] ^ table[2][(v >> 40) & 0xff] ^
		    table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
	}
	while (n--)
		c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
	return c;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

/* One crc32 instruction per 8 bytes: about 8 GB/s per core, a tenth of
 * what SHA-256 costs on the same bytes. */
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
	uint64_t c64 = c;

	while (n && ((uintptr_t)p & 7)) {
		c64 = _mm_crc32_u8((uint32_t)c64, *p++);
		n--;
	}
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c64 = _mm_crc32_u64(c64, v);
	}
	while (n--)
		c64 = _mm_crc32_u8((uint32_t)c64, *p++);
	return (uint32_t)c64;
}
#endif

static int use_hw = -1;

static void init_once(void)
{
	table_init();
#if defined(__x86_64__)
	__builtin_cpu_init();
	use_hw = __builtin_cpu_supports("sse4.2") && !getenv("CKPT_CRC_NO_HW");
#else
	use_hw = 0;
#endif
}

uint32_t csum_crc32c(uint32_t crc, const void *buf, size_t len)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	uint32_t c = ~crc;

	pthread_once(&once, init_once);
#if defined(__x86_64__)
	if (use_hw)
		return ~crc_hw(c, buf, len);
#endif
	return ~crc_table(c, buf, len);
}

uint32_t csum__crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, table_init);
	return ~crc_table(~crc, buf, len);
}

uint64_t csum_count(uint64_t size, uint64_t chunk_bytes)
{
	return chunk_bytes ? size / chunk_bytes + (size % chunk_bytes != 0) : 0;
}

int csum_stream_init(struct csum_stream *s, uint64_t chunk_bytes, uint64_t size)
{
	uint64_t n = csum_count(size, chunk_bytes);

	if (!chunk_bytes)
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	if (n > SIZE_MAX / sizeof(uint32_t))
		return -ENOMEM;
	s->crcs = calloc(n ? (size_t)n : 1, sizeof(uint32_t));
	if (!s->crcs)
		return -ENOMEM;
	s->chunk_bytes = chunk_bytes;
	s->size = size;
	return 0;
}

void csum_stream_update(struct csum_stream *s, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	if (!s->crcs)
		return;
	if (len > s->size - s->pos)
		len = (size_t)(s->size - s->pos);
	while (len) {
		uint64_t in_chunk = s->pos % s->chunk_bytes;
		size_t take = len;
		if (take > s->chunk_bytes - in_chunk)
			take = (size_t)(s->chunk_bytes - in_chunk);
		s->cur = csum_crc32c(s->cur, p, take);
		s->pos += take;
		p += take;
		len -= take;
		if (s->pos % s->chunk_bytes == 0 || s->pos == s->size) {
			s->crcs[(s->pos - 1) / s->chunk_bytes] = s->cur;
			s->cur = 0;
		}
	}
}

int csum_stream_finish(struct csum_stream *s, uint32_t **crcs)
{
	if (!s->crcs || s->pos != s->size)
		return -EIO;
	*crcs = s->crcs;
	s->crcs = NULL;
	return 0;
}

void csum_stream_release(struct csum_stream *s)
{
	if (!s)
		return;
	free(s->crcs);
	s->crcs = NULL;
}
