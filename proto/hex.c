/* hex.c - bytes as hex text and GPU UUIDs as text.  See hex.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "hex.h"

void hex_encode(const uint8_t *b, size_t n, char *out)
{
	static const char hx[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hx[b[i] >> 4];
		out[2 * i + 1] = hx[b[i] & 15];
	}
	out[2 * n] = '\0';
}

static int nib(char c)
{
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

int hex_decode(const char *s, uint8_t *b, size_t n)
{
	if (!s || strlen(s) != 2 * n)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		int hi = nib(s[2 * i]), lo = nib(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		b[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

void hex_gpu_uuid_str(const uint8_t u[16], char out[41])
{
	char h[33];
	hex_encode(u, 16, h);
	snprintf(out, 41, "GPU-%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12, h + 16, h + 20);
}

int hex_gpu_uuid_parse(const char *s, uint8_t u[16])
{
	char h[33];
	size_t k = 0;

	if (!s || strncmp(s, "GPU-", 4) || strlen(s) != 40)
		return -EINVAL;
	for (const char *p = s + 4; *p; p++) {
		size_t pos = (size_t)(p - s - 4);
		if (pos == 8 || pos == 13 || pos == 18 || pos == 23) {
			if (*p != '-')
				return -EINVAL;
			continue;
		}
		if (k >= 32)
			return -EINVAL;
		h[k++] = *p;
	}
	h[k] = '\0';
	return hex_decode(h, u, 16);
}
