/* jtext.c - see jtext.h: JSON text written as it goes. */
#include <stdlib.h>
#include <string.h>

#include "jtext.h"

void jtext_put(struct jtext *t, const char *s, size_t n)
{
	if (t->nomem)
		return;
	if (t->len + n > t->cap) {
		size_t cap = t->cap ? t->cap : 4096;
		char *np;
		while (cap < t->len + n)
			cap *= 2;
		if (!(np = realloc(t->p, cap))) {
			t->nomem = 1;
			return;
		}
		t->p = np;
		t->cap = cap;
	}
	memcpy(t->p + t->len, s, n);
	t->len += n;
}

void jtext_puts(struct jtext *t, const char *s)
{
	jtext_put(t, s, strlen(s));
}

void jtext_str(struct jtext *t, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const char *run = s;

	jtext_put(t, "\"", 1);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		jtext_put(t, run, (size_t)(s - run));
		if (c == '"' || c == '\\') {
			esc[1] = (char)c;
			jtext_put(t, esc, 2);
		} else {
			jtext_put(t, esc, 6);
		}
		run = s + 1;
	}
	jtext_put(t, run, (size_t)(s - run));
	jtext_put(t, "\"", 1);
}

void jtext_int(struct jtext *t, int64_t v)
{
	char num[24], *p = num + sizeof(num);
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

	do
		*--p = (char)('0' + u % 10);
	while (u /= 10);
	if (v < 0)
		*--p = '-';
	jtext_put(t, p, (size_t)(num + sizeof(num) - p));
}

void jtext_ints(struct jtext *t, const int64_t *v, int n)
{
	jtext_put(t, "[", 1);
	for (int i = 0; i < n; i++) {
		if (i)
			jtext_put(t, ",", 1);
		jtext_int(t, v[i]);
	}
	jtext_put(t, "]", 1);
}
