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

/* Where the top-level "tensors" value starts in json (*a), or -1; the
 * table reader finds where it ends. */
static int find_table(const char *json, size_t len, size_t *a)
{
	struct jscan sc = { json, json + len };

	if (jscan_char(&sc, '{'))
		return -1;
	do {
		const char *k;
		size_t kn;
		if (jscan_str(&sc, &k, &kn) || jscan_char(&sc, ':'))
			return -1;
		if (jscan_key_is(k, kn, "tensors")) {
			*a = (size_t)(sc.p - json);
			return 0;
		}
		if (skip_value(&sc))
			return -1;
	} while (jscan_char(&sc, ',') == 0);
	return -1;
}

enum { K_GROUP, K_RANK, K_NAME, K_FILE, K_DTYPE, K_SHAPE, K_BEGIN, K_END, K_NONE };

/* Which of a tensor's keys the n bytes at k are (one compare, not eight:
 * this runs eight times a tensor). */
static unsigned tensor_key(const char *k, size_t n)
{
	static const char *const names[] = { "group", "rank", "name", "file", "dtype",
					     "shape", "begin", "end" };
	unsigned which;

	switch (n ? k[0] : 0) {
	case 'g': which = K_GROUP; break;
	case 'r': which = K_RANK;  break;
	case 'n': which = K_NAME;  break;
	case 'f': which = K_FILE;  break;
	case 'd': which = K_DTYPE; break;
	case 's': which = K_SHAPE; break;
	case 'b': which = K_BEGIN; break;
	case 'e': which = K_END;   break;
	default:  return K_NONE;
	}
	return jscan_key_is(k, n, names[which]) ? which : K_NONE;
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
		const char *k, *s;
		size_t kn, n;
		int64_t v = 0;
		unsigned which;

		if (jscan_str(sc, &k, &kn) || jscan_char(sc, ':'))
			return -1;
		which = tensor_key(k, kn);
		if (which == K_NONE || (seen & (1u << which)))
			return -1;
		seen |= 1u << which;
		switch (which) {
		case K_GROUP: case K_NAME: case K_DTYPE:
			if (jscan_str(sc, &s, &n))
				return -1;
			if (which == K_DTYPE) {
				if (n >= sizeof(t->dtype))
					return -1;
				for (size_t i = 0; i < n; i++)
					if ((unsigned char)s[i] >= 0x80)
						return -1;      /* jansson checks UTF-8 */
				memcpy(t->dtype, s, n);
				t->dtype[n] = '\0';
			} else {
				char **to = which == K_NAME ? &t->name : &t->group;
				if (!(*to = jscan_dup_utf8(s, n)))
					return -1;
			}
			break;
		case K_SHAPE:
			if (jscan_uints(sc, t->shape, SAFET_MAX_NDIM, &t->ndim))
				return -1;
			break;
		default:                       /* rank, file, begin, end */
			if (jscan_uint(sc, &v) || (which == K_RANK && v > MFST_MAX_WORLD - 1))
				return -1;
			if (which == K_RANK)
				t->rank = (int)v;
			else if (which == K_FILE)
				t->file = (uint64_t)v > SIZE_MAX ? SIZE_MAX : (size_t)v;
			else if (which == K_BEGIN)
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

	if (find_table(json, len, &a) < 0)
		return -1;
	sc = (struct jscan){ json + a, json + len };
	if (jscan_char(&sc, '['))
		return -1;
	if (jscan_char(&sc, ']') == 0) {
		if (!(t = calloc(1, sizeof(*t))))
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
	if (jscan_char(&sc, ']'))
		goto fail;
done:
	b = (size_t)(sc.p - json);
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
