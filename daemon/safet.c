/* safet.c - safetensors headers: the one we write in front of each shard,
 * and a strict reader used by verification. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "errbuf.h"
#include "jscan.h"
#include "jtext.h"
#include "safet.h"

static const struct {
	const char *name;
	size_t size;
} dtypes[] = {
	{ "F64", 8 }, { "F32", 4 }, { "F16", 2 }, { "BF16", 2 },
	{ "I64", 8 }, { "I32", 4 }, { "I16", 2 }, { "I8", 1 },
	{ "U8", 1 },  { "BOOL", 1 },
};

size_t safet_dtype_size(const char *dtype)
{
	if (!dtype)
		return 0;
	for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (strcmp(dtype, dtypes[i].name) == 0)
			return dtypes[i].size;
	return 0;
}

/* prod(shape) * esize, refusing negative dims and anything that does not
 * fit in an int64 (JSON integers are signed here).  0 or -1. */
static int shape_nbytes(const int64_t *shape, int ndim, size_t esize,
			uint64_t *out)
{
	uint64_t n = esize;

	for (int i = 0; i < ndim; i++)
		if (shape[i] < 0)
			return -1;
	/* A zero dim makes the tensor empty, however large the others are. */
	for (int i = 0; i < ndim; i++)
		if (shape[i] == 0) {
			*out = 0;
			return 0;
		}
	for (int i = 0; i < ndim; i++)
		if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n))
			return -1;
	if (n > INT64_MAX)
		return -1;
	*out = n;
	return 0;
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

size_t safet_entry_bound(const char *name, int ndim)
{
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		n += *p == '"' || *p == '\\' ? 2 : *p < 0x20 ? 6 : 1;
	/* "name":{"dtype":"BF16","shape":[..],"data_offsets":[b,e]},
	 * with up to 20 digits and a comma per number */
	return n + 64 + 21 * (size_t)(ndim + 2);
}

static int check_entry(const struct safet_entry *e)
{
	size_t esize = safet_dtype_size(e->dtype);
	uint64_t nb;

	if (!e->name || !e->name[0] || strcmp(e->name, "__metadata__") == 0)
		return -EINVAL;
	if (!esize || e->ndim < 0 || e->ndim > SAFET_MAX_NDIM ||
	    (e->ndim > 0 && !e->shape))
		return -EINVAL;
	if (shape_nbytes(e->shape, e->ndim, esize, &nb) < 0 || nb != e->nbytes)
		return -EINVAL;
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* No two entries share a name (-EINVAL), nor two metadata keys. */
static int names_unique(const struct safet_entry *e, size_t n, const char *const *metadata)
{
	const char **v;
	int ret = 0;

	for (const char *const *kv = metadata; kv && *kv; kv += 2)
		for (const char *const *k2 = metadata; k2 < kv; k2 += 2)
			if (!strcmp(*kv, *k2))
				return -EINVAL;
	if (n < 2)
		return 0;
	if (!(v = malloc(n * sizeof(*v))))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		v[i] = e[i].name;
	qsort(v, n, sizeof(*v), cmp_name);
	for (size_t i = 1; i < n && !ret; i++)
		if (!strcmp(v[i], v[i - 1]))
			ret = -EINVAL;
	free(v);
	return ret;
}

int safet_entries_build(const struct safet_entry *e, size_t n, char **out,
			size_t *out_len, uint64_t *offsets)
{
	struct jtext t = { 0 };
	uint64_t off = 0;
	int ret;

	if ((n && !e) || !out || !out_len || !offsets)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if ((ret = check_entry(&e[i])) < 0)
			return ret;
		if (!jscan_utf8_ok(e[i].name) || !jscan_utf8_ok(e[i].dtype) || off + e[i].nbytes > INT64_MAX)
			return -EINVAL;
		off += e[i].nbytes;
	}
	if ((ret = names_unique(e, n, NULL)) < 0)
		return ret;
	off = 0;
	for (size_t i = 0; i < n; i++) {  /* in the caller's layout order */
		if (i)
			jtext_put(&t, ",", 1);
		jtext_str(&t, e[i].name);
		jtext_puts(&t, ":{\"dtype\":");
		jtext_str(&t, e[i].dtype);
		jtext_puts(&t, ",\"shape\":");
		jtext_ints(&t, e[i].shape, e[i].ndim);
		jtext_puts(&t, ",\"data_offsets\":[");
		jtext_int(&t, (int64_t)off);
		jtext_put(&t, ",", 1);
		jtext_int(&t, (int64_t)(off + e[i].nbytes));
		jtext_puts(&t, "]}");
		offsets[i] = off;
		off += e[i].nbytes;
	}
	offsets[n] = off;
	if (!t.p && !t.nomem && !(t.p = malloc(1)))   /* n == 0: empty, not NULL */
		t.nomem = 1;
	if (t.nomem) {
		free(t.p);
		return -ENOMEM;
	}
	*out = t.p;
	*out_len = t.len;
	return 0;
}

int safet_header_join(const char *const *metadata, const char *entries,
		      size_t entries_len, size_t align, uint8_t **out, size_t *out_len)
{
	struct jtext t = { 0 };
	size_t total;
	int ret;

	if (!out || !out_len || (entries_len && !entries))
		return -EINVAL;
	if (align < 8 || (align & (align - 1)))
		return -EINVAL;
	for (const char *const *kv = metadata; kv && *kv; kv += 2)
		if (!jscan_utf8_ok(kv[0]) || !jscan_utf8_ok(kv[1]))
			return -EINVAL;
	if ((ret = names_unique(NULL, 0, metadata)) < 0)
		return ret;

	jtext_put(&t, "\0\0\0\0\0\0\0\0{", 9);      /* the length goes in front */
	if (metadata) {                  /* first, as writers conventionally put it */
		jtext_puts(&t, "\"__metadata__\":{");
		for (const char *const *kv = metadata; *kv; kv += 2) {
			if (kv != metadata)
				jtext_put(&t, ",", 1);
			jtext_str(&t, kv[0]);
			jtext_put(&t, ":", 1);
			jtext_str(&t, kv[1]);
		}
		jtext_put(&t, "}", 1);
		if (entries_len)
			jtext_put(&t, ",", 1);
	}
	jtext_put(&t, entries, entries_len);
	jtext_put(&t, "}", 1);
	/* Pad with spaces so the data starts at a multiple of align. */
	total = (t.len + align - 1) & ~(align - 1);
	if (!t.nomem && total - 8 > SAFET_MAX_HEADER) {
		free(t.p);
		return -EINVAL;
	}
	while (!t.nomem && t.len < total)
		jtext_put(&t, " ", 1);
	if (t.nomem) {
		free(t.p);
		return -ENOMEM;
	}
	put_le64((uint8_t *)t.p, total - 8);
	*out = (uint8_t *)t.p;
	*out_len = total;
	return 0;
}

int safet_header_build(const struct safet_entry *e, size_t n,
		       const char *const *metadata, size_t align,
		       uint8_t **out, size_t *out_len, uint64_t *offsets)
{
	uint64_t *offs;
	char *entries;
	size_t elen;
	int ret;

	if ((n && !e) || !out || !out_len || !offsets)
		return -EINVAL;
	if (align < 8 || (align & (align - 1)))
		return -EINVAL;
	/* the out-parameters only once it is sure */
	if (!(offs = malloc((n + 1) * sizeof(*offs))))
		return -ENOMEM;
	ret = safet_entries_build(e, n, &entries, &elen, offs);
	if (ret == 0) {
		ret = safet_header_join(metadata, entries, elen, align, out, out_len);
		free(entries);
	}
	if (ret == 0)
		memcpy(offsets, offs, (n + 1) * sizeof(*offs));
	free(offs);
	return ret;
}

void safet_header_free(struct safet_header *h)
{
	if (!h)
		return;
	for (size_t i = 0; h->tensors && i < h->ntensors; i++)
		free(h->tensors[i].name);
	free(h->tensors);
	free(h);
}

static int cmp_tensor(const void *a, const void *b)
{
	const struct safet_tensor *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	/* Empty tensors share their begin with the next one: put them
	 * first so the contiguity walk sees [b,b] before [b,e]. */
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* A non-negative JSON integer, or -1. */
static int64_t json_nonneg(const json_t *v)
{
	json_int_t i;

	if (!json_is_integer(v))
		return -1;
	i = json_integer_value(v);
	return i < 0 ? -1 : (int64_t)i;
}

static int parse_tensor(const char *name, const json_t *v,
			struct safet_tensor *t, char *err, size_t errlen)
{
	const json_t *dt, *shape, *offs;
	size_t esize, ndim;
	int64_t b, e;
	uint64_t nb;

	if (!json_is_object(v))
		return errbuf_fail(err, errlen, -EINVAL, "tensor '%.64s': not an object",
				   name);
	dt = json_object_get(v, "dtype");
	shape = json_object_get(v, "shape");
	offs = json_object_get(v, "data_offsets");
	if (!dt || !shape || !offs || json_object_size(v) != 3)
		return errbuf_fail(err, errlen, -EINVAL,
				   "tensor '%.64s': needs exactly dtype, shape, data_offsets",
				   name);
	esize = safet_dtype_size(json_string_value(dt));
	if (!esize)
		return errbuf_fail(err, errlen, -EINVAL, "tensor '%.64s': unknown dtype",
				   name);
	strcpy(t->dtype, json_string_value(dt));   /* known, so < 8 bytes */
	if (!json_is_array(shape) || json_array_size(shape) > SAFET_MAX_NDIM)
		return errbuf_fail(err, errlen, -EINVAL,
				   "tensor '%.64s': shape must be an array of at most %d dims",
				   name, SAFET_MAX_NDIM);
	ndim = json_array_size(shape);
	t->ndim = (int)ndim;
	for (size_t d = 0; d < ndim; d++) {
		t->shape[d] = json_nonneg(json_array_get(shape, d));
		if (t->shape[d] < 0)
			return errbuf_fail(err, errlen, -EINVAL,
					   "tensor '%.64s': shape[%zu] is not a non-negative integer",
					   name, d);
	}
	if (!json_is_array(offs) || json_array_size(offs) != 2)
		return errbuf_fail(err, errlen, -EINVAL,
				   "tensor '%.64s': data_offsets must be [begin, end]", name);
	b = json_nonneg(json_array_get(offs, 0));
	e = json_nonneg(json_array_get(offs, 1));
	if (b < 0 || e < 0 || b > e)
		return errbuf_fail(err, errlen, -EINVAL,
				   "tensor '%.64s': bad data_offsets", name);
	if (shape_nbytes(t->shape, t->ndim, esize, &nb) < 0)
		return errbuf_fail(err, errlen, -EINVAL, "tensor '%.64s': shape too large",
				   name);
	if (nb != (uint64_t)(e - b))
		return errbuf_fail(err, errlen, -EINVAL,
				   "tensor '%.64s': data_offsets span %lld bytes, dtype and shape need %llu",
				   name, (long long)(e - b), (unsigned long long)nb);
	t->begin = (uint64_t)b;
	t->end = (uint64_t)e;
	return 0;
}

static int check_metadata(const json_t *md, char *err, size_t errlen)
{
	const char *k;
	json_t *v;

	if (!json_is_object(md))
		return errbuf_fail(err, errlen, -EINVAL, "__metadata__ is not an object");
	json_object_foreach((json_t *)md, k, v)
		if (!json_is_string(v))
			return errbuf_fail(err, errlen, -EINVAL,
					   "__metadata__ value of '%.64s' is not a string", k);
	return 0;
}

/* --- the fast reader ------------------------------------------------------
 *
 * Headers as writers write them (compact JSON, no escapes, known dtypes,
 * consistent offsets) are read here without building a JSON tree: jansson
 * took ~2 us a tensor, 38 ms of a 20,000-tensor restore.  Anything else,
 * valid or not, is left to the jansson reader below, which decides and
 * words the error; so this reader only ever accepts what that one accepts,
 * with the same result. */
int safet_parse_fast = 1;
unsigned long safet_parse_fast_count;

/* {"dtype":"..","shape":[..],"data_offsets":[b,e]}, in any order. */
static int scan_tensor(struct jscan *sc, struct safet_tensor *t)
{
	int seen = 0, n;
	int64_t offs[2];
	uint64_t nb;
	size_t esize;

	if (jscan_char(sc, '{'))
		return -1;
	do {
		const char *k, *v;
		size_t kn, vn;
		if (jscan_str(sc, &k, &kn) || jscan_char(sc, ':'))
			return -1;
		if (jscan_key_is(k, kn, "dtype") && !(seen & 1)) {
			if (jscan_str(sc, &v, &vn) || vn >= sizeof(t->dtype))
				return -1;
			memcpy(t->dtype, v, vn);
			t->dtype[vn] = '\0';
			seen |= 1;
		} else if (jscan_key_is(k, kn, "shape") && !(seen & 2)) {
			if (jscan_uints(sc, t->shape, SAFET_MAX_NDIM, &t->ndim))
				return -1;
			seen |= 2;
		} else if (jscan_key_is(k, kn, "data_offsets") && !(seen & 4)) {
			if (jscan_uints(sc, offs, 2, &n) || n != 2)
				return -1;
			seen |= 4;
		} else {
			return -1;
		}
	} while (jscan_char(sc, ',') == 0);
	if (jscan_char(sc, '}') || seen != 7 || !(esize = safet_dtype_size(t->dtype)) ||
	    offs[0] > offs[1] || shape_nbytes(t->shape, t->ndim, esize, &nb) < 0 ||
	    nb != (uint64_t)(offs[1] - offs[0]))
		return -1;
	t->begin = (uint64_t)offs[0];
	t->end = (uint64_t)offs[1];
	return 0;
}

/* {"k":"v",...}: string values, no key twice. */
static int scan_metadata(struct jscan *sc)
{
	const char *keys[64];
	size_t lens[64], nk = 0;

	if (jscan_char(sc, '{'))
		return -1;
	if (jscan_char(sc, '}') == 0)
		return 0;
	do {
		const char *k, *v;
		size_t kn, vn;
		char *ck, *cv;
		int ok;
		if (nk == 64 || jscan_str(sc, &k, &kn) || jscan_char(sc, ':') ||
		    jscan_str(sc, &v, &vn))
			return -1;
		for (size_t i = 0; i < nk; i++)
			if (lens[i] == kn && !memcmp(keys[i], k, kn))
				return -1;
		ck = jscan_dup_utf8(k, kn);
		cv = jscan_dup_utf8(v, vn);
		ok = ck && cv;
		free(ck);
		free(cv);
		if (!ok)
			return -1;
		keys[nk] = k;
		lens[nk++] = kn;
	} while (jscan_char(sc, ',') == 0);
	return jscan_char(sc, '}');
}

static int cmp_tensor_name(const void *a, const void *b)
{
	return strcmp((*(const struct safet_tensor *const *)a)->name,
		      (*(const struct safet_tensor *const *)b)->name);
}

/* No two tensors share a name (jansson refuses duplicate keys). */
static int names_distinct(const struct safet_header *h)
{
	const struct safet_tensor **v = malloc((h->ntensors + 1) * sizeof(*v));
	int ok = v != NULL;

	for (size_t i = 0; ok && i < h->ntensors; i++)
		v[i] = &h->tensors[i];
	if (ok)
		qsort(v, h->ntensors, sizeof(*v), cmp_tensor_name);
	for (size_t i = 1; ok && i < h->ntensors; i++)
		ok = strcmp(v[i]->name, v[i - 1]->name) != 0;
	free(v);
	return ok;
}

/* h's tensors from the n bytes of JSON at j: 1, or 0 (h's tensors freed)
 * to leave the header to the jansson reader. */
static int parse_fast(const uint8_t *j, uint64_t n, struct safet_header *h)
{
	struct jscan sc = { (const char *)j, (const char *)j + n };
	size_t cap = 0;
	int meta = 0;

	if (jscan_char(&sc, '{'))
		return 0;
	if (jscan_char(&sc, '}') == 0)
		goto done;
	do {
		const char *k;
		size_t kn;
		if (jscan_str(&sc, &k, &kn) || jscan_char(&sc, ':'))
			goto no;
		if (jscan_key_is(k, kn, "__metadata__")) {
			if (meta++ || scan_metadata(&sc))
				goto no;
			continue;
		}
		if (h->ntensors == cap) {
			size_t c = cap ? cap * 2 : 64;
			struct safet_tensor *t = realloc(h->tensors, c * sizeof(*t));
			if (!t)
				goto no;
			memset(t + cap, 0, (c - cap) * sizeof(*t));
			h->tensors = t;
			cap = c;
		}
		if (scan_tensor(&sc, &h->tensors[h->ntensors]) ||
		    !(h->tensors[h->ntensors].name = jscan_dup_utf8(k, kn)))
			goto no;
		h->ntensors++;
	} while (jscan_char(&sc, ',') == 0);
	if (jscan_char(&sc, '}'))
		goto no;
done:
	while (sc.p < sc.end && *sc.p == ' ')
		sc.p++;
	if (sc.p == sc.end && names_distinct(h))
		return 1;
no:
	for (size_t i = 0; i < h->ntensors; i++)
		free(h->tensors[i].name);
	free(h->tensors);
	h->tensors = NULL;
	h->ntensors = 0;
	return 0;
}

/* h's tensors from the n bytes of JSON at j, through jansson: 0, or -errno
 * with err. */
static int parse_json(const uint8_t *j, uint64_t n, struct safet_header *h, char *err,
		      size_t errlen)
{
	json_error_t jerr;
	const char *key;
	json_t *root, *v;
	size_t i, count;
	int ret;

	/* Stop at the end of the object so we can insist that only space
	 * padding follows (jansson would also accept tabs and newlines). */
	root = json_loadb((const char *)j, (size_t)n,
			  JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK, &jerr);
	if (!root)
		return errbuf_fail(err, errlen, -EINVAL,
				   "header is not valid JSON: %s (byte %d)", jerr.text,
				   jerr.position);
	if (!json_is_object(root)) {
		ret = errbuf_fail(err, errlen, -EINVAL, "header is not a JSON object");
		goto out;
	}
	for (uint64_t p = (uint64_t)jerr.position; p < n; p++)
		if (j[p] != ' ') {
			ret = errbuf_fail(err, errlen, -EINVAL,
					  "header has trailing bytes other than space padding");
			goto out;
		}
	count = json_object_size(root);
	if (json_object_get(root, "__metadata__")) {
		ret = check_metadata(json_object_get(root, "__metadata__"), err,
				     errlen);
		if (ret < 0)
			goto out;
		count--;
	}
	h->tensors = calloc(count ? count : 1, sizeof(*h->tensors));
	if (!h->tensors) {
		ret = errbuf_fail(err, errlen, -ENOMEM, "out of memory");
		goto out;
	}
	i = 0;
	json_object_foreach(root, key, v) {
		if (strcmp(key, "__metadata__") == 0)
			continue;
		ret = parse_tensor(key, v, &h->tensors[i], err, errlen);
		if (ret < 0)
			goto out;
		h->tensors[i].name = strdup(key);
		if (!h->tensors[i].name) {
			ret = errbuf_fail(err, errlen, -ENOMEM, "out of memory");
			goto out;
		}
		h->ntensors = ++i;
	}
	ret = 0;
out:
	json_decref(root);
	return ret;
}

int safet_header_parse(const uint8_t *buf, size_t len, uint64_t file_size,
		       struct safet_header **out, size_t *need,
		       char *err, size_t errlen)
{
	struct safet_header *h = NULL;
	uint64_t n, expect;
	size_t i;
	int ret;

	if (!out || (!buf && len))
		return errbuf_fail(err, errlen, -EINVAL, "bad arguments");
	if (file_size < 8)
		return errbuf_fail(err, errlen, -EINVAL,
				   "file too short for a safetensors header");
	if (len < 8) {
		if (need)
			*need = 8;
		return -EAGAIN;
	}
	n = get_le64(buf);
	if (n > SAFET_MAX_HEADER)
		return errbuf_fail(err, errlen, -EINVAL,
				   "header length %llu exceeds the %u byte limit",
				   (unsigned long long)n, SAFET_MAX_HEADER);
	if (8 + n > file_size)
		return errbuf_fail(err, errlen, -EINVAL,
				   "header length %llu runs past the end of the file",
				   (unsigned long long)n);
	if (len < 8 + n) {
		if (need)
			*need = (size_t)(8 + n);
		return -EAGAIN;
	}
	if (n < 2 || buf[8] != '{')
		return errbuf_fail(err, errlen, -EINVAL, "header does not start with '{'");
	h = calloc(1, sizeof(*h));
	if (!h)
		return errbuf_fail(err, errlen, -ENOMEM, "out of memory");
	h->data_start = 8 + n;
	if (safet_parse_fast && parse_fast(buf + 8, n, h))
		__atomic_fetch_add(&safet_parse_fast_count, 1, __ATOMIC_RELAXED);
	else if ((ret = parse_json(buf + 8, n, h, err, errlen)) < 0)
		goto out_free_h;
	if (h->ntensors > 1)
		qsort(h->tensors, h->ntensors, sizeof(*h->tensors), cmp_tensor);
	/* Sorted by begin, each tensor must start where the last ended:
	 * no overlaps, no holes, and together they fill the data section. */
	expect = 0;
	for (i = 0; i < h->ntensors; i++) {
		if (h->tensors[i].begin != expect) {
			ret = errbuf_fail(err, errlen, -EINVAL,
					  "tensor '%.64s' starts at %llu, expected %llu (%s)",
					  h->tensors[i].name,
					  (unsigned long long)h->tensors[i].begin,
					  (unsigned long long)expect,
					  h->tensors[i].begin > expect ? "hole" : "overlap");
			goto out_free_h;
		}
		expect = h->tensors[i].end;
	}
	if (expect != file_size - h->data_start) {
		ret = errbuf_fail(err, errlen, -EINVAL,
				  "tensors cover %llu bytes but the data section is %llu",
				  (unsigned long long)expect,
				  (unsigned long long)(file_size - h->data_start));
		goto out_free_h;
	}
	*out = h;
	return 0;
out_free_h:
	safet_header_free(h);
	return ret;
}
