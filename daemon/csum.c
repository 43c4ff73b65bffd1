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

#define LANE 4096     /* bytes per lane of the three-lane loop */

/* shift[k][b]: the CRC register c (raw, not inverted) after LANE * (k+1)
 * zero bytes is the XOR of shift[k][byte i of c] over its 4 bytes (the map
 * is linear), so lanes computed apart can be joined. */
static uint32_t shift[2][4][256];

__attribute__((target("sse4.2")))
static uint32_t zeros_hw(uint32_t c, size_t n)
{
	uint64_t c64 = c;

	for (size_t i = 0; i < n / 8; i++)
		c64 = _mm_crc32_u64(c64, 0);
	return (uint32_t)c64;
}

/* The image of each of the 32 bits first (64 runs over zeros), then each
 * table entry as the XOR of its bits' images: 6 ms of CPU at a daemon's
 * first CRC (inside its first save) when every entry ran over zeros. */
static void shift_init(void)
{
	for (int k = 0; k < 2; k++) {
		uint32_t img[32];

		for (int bit = 0; bit < 32; bit++)
			img[bit] = zeros_hw(1u << bit, LANE * (size_t)(k + 1));
		for (int byte = 0; byte < 4; byte++)
			for (uint32_t v = 0; v < 256; v++) {
				uint32_t r = 0;
				for (int bit = 0; bit < 8; bit++)
					if (v & (1u << bit))
						r ^= img[8 * byte + bit];
				shift[k][byte][v] = r;
			}
	}
}

static uint32_t shifted(int k, uint32_t c)
{
	return shift[k][0][c & 0xff] ^ shift[k][1][(c >> 8) & 0xff] ^
	       shift[k][2][(c >> 16) & 0xff] ^ shift[k][3][c >> 24];
}

/* The crc32 instruction has a latency of 3 cycles and a throughput of 1:
 * three lanes of LANE bytes each run at once and are joined, about 3x the
 * speed of one chain (one chain: ~5 GB/s here). */
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
	uint64_t c64 = c;

	while (n && ((uintptr_t)p & 7)) {
		c64 = _mm_crc32_u8((uint32_t)c64, *p++);
		n--;
	}
	for (; n >= 3 * LANE; n -= 3 * LANE, p += 3 * LANE) {
		uint64_t a = c64, b = 0, d = 0, v0, v1, v2;
		for (size_t i = 0; i < LANE; i += 8) {
			memcpy(&v0, p + i, 8);
			memcpy(&v1, p + LANE + i, 8);
			memcpy(&v2, p + 2 * LANE + i, 8);
			a = _mm_crc32_u64(a, v0);
			b = _mm_crc32_u64(b, v1);
			d = _mm_crc32_u64(d, v2);
		}
		c64 = shifted(1, (uint32_t)a) ^ shifted(0, (uint32_t)b) ^ (uint32_t)d;
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

/* crc_hw while copying: every 16 bytes loaded once, fed to the CRC and
 * written with a streaming store (the destination is not read back soon:
 * a trainer's tensors), so the copy and the check cost about one copy. */
__attribute__((target("sse4.2")))
static uint32_t crc_copy_hw(uint32_t c, uint8_t *d, const uint8_t *s, size_t n)
{
	size_t head = (16 - ((uintptr_t)d & 15)) & 15;

	if (head > n)
		head = n;
	memcpy(d, s, head);
	c = crc_hw(c, d, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 3 * LANE; n -= 3 * LANE, s += 3 * LANE, d += 3 * LANE) {
		uint64_t a = c, b = 0, e = 0;
		for (size_t i = 0; i < LANE; i += 16) {
			__m128i x = _mm_loadu_si128((const __m128i *)(s + i));
			__m128i y = _mm_loadu_si128((const __m128i *)(s + LANE + i));
			__m128i z = _mm_loadu_si128((const __m128i *)(s + 2 * LANE + i));
			a = _mm_crc32_u64(a, (uint64_t)_mm_cvtsi128_si64(x));
			b = _mm_crc32_u64(b, (uint64_t)_mm_cvtsi128_si64(y));
			e = _mm_crc32_u64(e, (uint64_t)_mm_cvtsi128_si64(z));
			a = _mm_crc32_u64(a, (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(x, x)));
			b = _mm_crc32_u64(b, (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(y, y)));
			e = _mm_crc32_u64(e, (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(z, z)));
			_mm_stream_si128((__m128i *)(d + i), x);
			_mm_stream_si128((__m128i *)(d + LANE + i), y);
			_mm_stream_si128((__m128i *)(d + 2 * LANE + i), z);
		}
		c = shifted(1, (uint32_t)a) ^ shifted(0, (uint32_t)b) ^ (uint32_t)e;
	}
	_mm_sfence();      /* the stores are visible before the bytes are handed on */
	memcpy(d, s, n);
	return crc_hw(c, d, n);
}
#endif

static int use_hw = -1;
static pthread_once_t hw_once = PTHREAD_ONCE_INIT;

static void init_once(void)
{
	table_init();
#if defined(__x86_64__)
	__builtin_cpu_init();
	use_hw = __builtin_cpu_supports("sse4.2") && !getenv("CKPT_CRC_NO_HW");
	if (use_hw)
		shift_init();
#else
	use_hw = 0;
#endif
}

uint32_t csum_crc32c(uint32_t crc, const void *buf, size_t len)
{
	uint32_t c = ~crc;

	pthread_once(&hw_once, init_once);
#if defined(__x86_64__)
	if (use_hw)
		return ~crc_hw(c, buf, len);
#endif
	return ~crc_table(c, buf, len);
}

uint32_t csum_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
	pthread_once(&hw_once, init_once);
#if defined(__x86_64__)
	if (use_hw)
		return ~crc_copy_hw(~crc, dst, src, len);
#endif
	memcpy(dst, src, len);
	return ~crc_table(~crc, dst, len);
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
