/* mfst_fast.c - a manifest's tensor table, as ckptd writes it, read
 * without a JSON tree: jansson took ~6 us a tensor (120 ms of a
 * 20,000-tensor restore).  mfst_parse cuts the table out, has jansson read
 * the rest and takes these tensors; whatever this reader does not know is
 * left to jansson for the whole manifest. */
#include <stdlib.h>
#include <string.h>

#include "jscan.h"
#include "mfst_int.h"

/* Past one JSON value (any, not checked: jansson or the table reader
 * checks what it is): 0, or -1 at the end of the text. */
static int skip_value(struct jscan *sc)
{
	int depth = 0;

	while (sc->p < sc->end) {
		char c = *sc->p++;
		if (c == '"') {
			while (sc->p < sc->end && *sc->p != '"')
				sc->p += *sc->p == '\\' ? 2 : 1;
			if (sc->p++ >= sc->end)
				return -1;
		} else if (c == '{' || c == '[') {
			depth++;
		} else if (c == '}' || c == ']') {
			if (--depth < 0)
				return -1;
		}
		if (depth == 0 && (sc->p >= sc->end || *sc->p == ',' || *sc->p == '}' ||
				   *sc->p == ']'))
			return 0;
	}
	return -1;
}

/* Where the top-level "tensors" value lies in json: [*a, *b), or -1. */
static int find_table(const char *json, size_t len, size_t *a, size_t *b)
{
	struct jscan sc = { json, json + len };

	if (jscan_char(&sc, '{'))
		return -1;
	do {
		const char *k;
		size_t kn;
		const char *at;
		if (jscan_str(&sc, &k, &kn) || jscan_char(&sc, ':'))
			return -1;
		at = sc.p;
		if (skip_value(&sc))
			return -1;
		if (jscan_key_is(k, kn, "tensors")) {
			*a = (size_t)(at - json);
			*b = (size_t)(sc.p - json);
			return 0;
		}
	} while (jscan_char(&sc, ',') == 0);
	return -1;
}

/* {"group":..,"rank":..,"name":..,"file":..,"dtype":..,"shape":[..],
 * "begin":..,"end":..}, each once, in any order, within the ranges
 * mfst.c's reader allows. */
static int read_tensor(struct jscan *sc, struct mfst_tensor *t)
{
	unsigned seen = 0;

	if (jscan_char(sc, '{'))
		return -1;
	do {
		static const char *const keys[] = { "group", "rank", "name", "file", "dtype",
						     "shape", "begin", "end" };
		const char *k, *s;
		size_t kn, n;
		int64_t v = 0;
		unsigned which;

		if (jscan_str(sc, &k, &kn) || jscan_char(sc, ':'))
			return -1;
		for (which = 0; which < 8 && !jscan_key_is(k, kn, keys[which]); which++)
			;
		if (which == 8 || (seen & (1u << which)))
			return -1;
		seen |= 1u << which;
		switch (which) {
		case 0: case 2: case 4:        /* group, name, dtype */
			if (jscan_str(sc, &s, &n))
				return -1;
			if (which == 4) {
				if (n >= sizeof(t->dtype))
					return -1;
				for (size_t i = 0; i < n; i++)
					if ((unsigned char)s[i] >= 0x80)
						return -1;      /* jansson checks UTF-8 */
				memcpy(t->dtype, s, n);
				t->dtype[n] = '\0';
			} else if (!(*(which ? &t->name : &t->group) = jscan_dup_utf8(s, n))) {
				return -1;
			}
			break;
		case 5:
			if (jscan_uints(sc, t->shape, SAFET_MAX_NDIM, &t->ndim))
				return -1;
			break;
		default:                       /* rank, file, begin, end */
			if (jscan_uint(sc, &v) || (which == 1 && v > MFST_MAX_WORLD - 1))
				return -1;
			if (which == 1)
				t->rank = (int)v;
			else if (which == 3)
				t->file = (uint64_t)v > SIZE_MAX ? SIZE_MAX : (size_t)v;
			else if (which == 6)
				t->begin = (uint64_t)v;
			else
				t->end = (uint64_t)v;
		}
	} while (jscan_char(sc, ',') == 0);
	return jscan_char(sc, '}') || seen != 0xff ? -1 : 0;
}

void mfst__fast_table_free(struct mfst_tensor *t, size_t n)
{
	for (size_t i = 0; t && i < n; i++) {
		free(t[i].group);
		free(t[i].name);
	}
	free(t);
}

int mfst__fast_table(const char *json, size_t len, struct mfst_tensor **out,
		     size_t *n, char **rest, size_t *rest_len)
{
	struct mfst_tensor *t = NULL;
	size_t a, b, cap = 0, count = 0;
	struct jscan sc;
	char *r;

	if (find_table(json, len, &a, &b) < 0)
		return -1;
	sc = (struct jscan){ json + a, json + b };
	if (jscan_char(&sc, '['))
		return -1;
	if (jscan_char(&sc, ']') == 0) {
		if (sc.p != json + b || !(t = calloc(1, sizeof(*t))))
			return -1;
		goto done;
	}
	do {
		if (count == cap) {
			size_t c = cap ? cap * 2 : 256;
			struct mfst_tensor *nt = realloc(t, c * sizeof(*nt));
			if (!nt)
				goto fail;
			memset(nt + cap, 0, (c - cap) * sizeof(*nt));
			t = nt;
			cap = c;
		}
		if (read_tensor(&sc, &t[count]) < 0) {
			count++;                      /* its strings are freed too */
			goto fail;
		}
		count++;
	} while (jscan_char(&sc, ',') == 0);
	if (jscan_char(&sc, ']') || sc.p != json + b)
		goto fail;
done:
	/* the rest, with an empty table for jansson */
	if (!(r = malloc(len - (b - a) + 3)))
		goto fail;
	memcpy(r, json, a);
	memcpy(r + a, "[]", 2);
	memcpy(r + a + 2, json + b, len - b);
	r[len - (b - a) + 2] = '\0';
	*rest = r;
	*rest_len = len - (b - a) + 2;
	*out = t;
	*n = count;
	return 0;
fail:
	mfst__fast_table_free(t, count);
	return -1;
}
