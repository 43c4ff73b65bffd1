/* jscan.c - reads compact JSON as ckpt's own writers write it (see
 * jscan.h). */
#include <stdlib.h>
#include <string.h>

#include "jscan.h"

int jscan_str(struct jscan *sc, const char **s, size_t *n)
{
	const char *q;

	if (sc->p >= sc->end || *sc->p != '"')
		return -1;
	for (q = sc->p + 1; q < sc->end && *q != '"'; q++)
		if ((unsigned char)*q < 0x20 || *q == '\\')
			return -1;
	if (q >= sc->end)
		return -1;
	*s = sc->p + 1;
	*n = (size_t)(q - *s);
	sc->p = q + 1;
	return 0;
}

int jscan_char(struct jscan *sc, char c)
{
	if (sc->p >= sc->end || *sc->p != c)
		return -1;
	sc->p++;
	return 0;
}

int jscan_uint(struct jscan *sc, int64_t *v)
{
	uint64_t x = 0;
	int digits = 0;

	while (sc->p < sc->end && *sc->p >= '0' && *sc->p <= '9' && digits < 19) {
		x = x * 10 + (uint64_t)(*sc->p++ - '0');
		digits++;
	}
	if (!digits || (digits > 1 && sc->p[-digits] == '0') || x > INT64_MAX ||
	    (sc->p < sc->end && *sc->p >= '0' && *sc->p <= '9'))
		return -1;
	*v = (int64_t)x;
	return 0;
}

int jscan_uints(struct jscan *sc, int64_t *v, int max, int *count)
{
	*count = 0;
	if (jscan_char(sc, '['))
		return -1;
	if (jscan_char(sc, ']') == 0)
		return 0;
	do {
		if (*count == max || jscan_uint(sc, &v[*count]))
			return -1;
		(*count)++;
	} while (jscan_char(sc, ',') == 0);
	return jscan_char(sc, ']');
}

int jscan_key_is(const char *k, size_t n, const char *want)
{
	return n == strlen(want) && memcmp(k, want, n) == 0;
}

char *jscan_dup_utf8(const char *s, size_t n)
{
	unsigned char any = 0, high = 0;
	char *c;

	/* one pass for a NUL and for bytes past ASCII (names rarely have
	 * them: the strict check runs only then) */
	for (size_t i = 0; i < n; i++) {
		any |= (unsigned char)(s[i] == '\0');
		high |= (unsigned char)s[i];
	}
	if (any || !(c = malloc(n + 1)))
		return NULL;
	memcpy(c, s, n);
	c[n] = '\0';
	if ((high & 0x80) && !jscan_utf8_ok(c)) {
		free(c);
		return NULL;
	}
	return c;
}

int jscan_utf8_ok(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	if (!s)
		return 0;
	while (*p) {
		unsigned need;
		uint32_t cp;
		if (*p < 0x80) {
			p++;
			continue;
		}
		if (*p >= 0xc2 && *p <= 0xdf)
			need = 1, cp = *p & 0x1f;
		else if (*p >= 0xe0 && *p <= 0xef)
			need = 2, cp = *p & 0x0f;
		else if (*p >= 0xf0 && *p <= 0xf4)
			need = 3, cp = *p & 0x07;
		else
			return 0;
		for (unsigned i = 1; i <= need; i++) {   /* stops at the NUL */
			if ((p[i] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (p[i] & 0x3f);
		}
		if ((need == 2 && cp < 0x800) || cp > 0x10ffff ||
		    (need == 3 && cp < 0x10000) || (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		p += need + 1;
	}
	return 1;
}
