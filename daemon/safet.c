/* safet.c - safetensors headers: the one we write in front of each shard,
 * and a strict reader used by verification. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "errbuf.h"
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

/* Steals v; a NULL v is a failed allocation.  Callers have checked
 * strings with utf8_ok() first, so failures here mean -ENOMEM. */
static int obj_set(json_t *o, const char *key, json_t *v)
{
	if (!v)
		return -ENOMEM;
	return json_object_set_new(o, key, v) ? -ENOMEM : 0;
}

/* jansson refuses strings that are not UTF-8; ask it up front so that a
 * bad name reads as -EINVAL rather than as running out of memory. */
static int utf8_ok(const char *s)
{
	json_t *v = s ? json_string(s) : NULL;

	json_decref(v);
	return v != NULL;
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

static int entry_json(const struct safet_entry *e, uint64_t begin,
		      json_t **out)
{
	json_t *t, *shape, *offs;
	int ret;

	t = json_object();
	if (!t)
		return -ENOMEM;
	ret = obj_set(t, "dtype", json_string(e->dtype));
	if (ret < 0)
		goto out_free;
	shape = json_array();
	ret = obj_set(t, "shape", shape);     /* t owns shape from here */
	if (ret < 0)
		goto out_free;
	for (int d = 0; d < e->ndim; d++)
		if (json_array_append_new(shape, json_integer(e->shape[d]))) {
			ret = -ENOMEM;
			goto out_free;
		}
	offs = json_array();
	ret = obj_set(t, "data_offsets", offs);
	if (ret < 0)
		goto out_free;
	if (json_array_append_new(offs, json_integer((json_int_t)begin)) ||
	    json_array_append_new(offs,
				  json_integer((json_int_t)(begin + e->nbytes)))) {
		ret = -ENOMEM;
		goto out_free;
	}
	*out = t;
	return 0;
out_free:
	json_decref(t);
	return ret;
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

int safet_header_build(const struct safet_entry *e, size_t n,
		       const char *const *metadata, size_t align,
		       uint8_t **out, size_t *out_len, uint64_t *offsets)
{
	json_t *root, *md = NULL, *t = NULL;
	uint64_t off = 0;
	size_t jlen, total;
	uint8_t *buf;
	char *js = NULL;
	int ret;

	if ((n && !e) || !out || !out_len || !offsets)
		return -EINVAL;
	if (align < 8 || (align & (align - 1)))
		return -EINVAL;
	root = json_object();
	if (!root)
		return -ENOMEM;
	if (metadata) {
		md = json_object();
		if (!md) {
			ret = -ENOMEM;
			goto out_free_root;
		}
		for (const char *const *kv = metadata; *kv; kv += 2) {
			if (!utf8_ok(kv[0]) || !utf8_ok(kv[1]) ||
			    json_object_get(md, kv[0])) {
				ret = -EINVAL;
				goto out_free_root;
			}
			ret = obj_set(md, kv[0], json_string(kv[1]));
			if (ret < 0)
				goto out_free_root;
		}
		/* First, as writers conventionally put it. */
		ret = obj_set(root, "__metadata__", json_incref(md));
		if (ret < 0)
			goto out_free_root;
	}
	for (size_t i = 0; i < n; i++) {
		ret = check_entry(&e[i]);
		if (ret < 0)
			goto out_free_root;
		if (!utf8_ok(e[i].name) || off + e[i].nbytes > INT64_MAX ||
		    json_object_get(root, e[i].name)) {
			ret = -EINVAL;
			goto out_free_root;
		}
		ret = entry_json(&e[i], off, &t);
		if (ret < 0)
			goto out_free_root;
		ret = obj_set(root, e[i].name, t);
		if (ret < 0)
			goto out_free_root;
		off += e[i].nbytes;
	}
	/* jansson (>= 2.8) keeps insertion order, so entries stay in the
	 * caller's layout order. */
	js = json_dumps(root, JSON_COMPACT);
	if (!js) {
		ret = -ENOMEM;
		goto out_free_root;
	}
	/* jansson 2.14 ignores some failed appends (a key's) and can return
	 * a truncated document when memory runs out: read it back. */
	{
		json_t *chk = json_loads(js, 0, NULL);
		int same = chk && json_equal(chk, root);
		json_decref(chk);
		if (!same) {
			ret = -ENOMEM;
			goto out_free_js;
		}
	}
	jlen = strlen(js);
	/* Pad with spaces so the data starts at a multiple of align. */
	total = (8 + jlen + align - 1) & ~(align - 1);
	if (total - 8 > SAFET_MAX_HEADER) {
		ret = -EINVAL;
		goto out_free_js;
	}
	buf = malloc(total);
	if (!buf) {
		ret = -ENOMEM;
		goto out_free_js;
	}
	put_le64(buf, total - 8);
	memcpy(buf + 8, js, jlen);
	memset(buf + 8 + jlen, ' ', total - 8 - jlen);
	off = 0;
	for (size_t i = 0; i < n; i++) {
		offsets[i] = off;
		off += e[i].nbytes;
	}
	offsets[n] = off;
	*out = buf;
	*out_len = total;
	ret = 0;
out_free_js:
	free(js);
out_free_root:
	json_decref(md);
	json_decref(root);
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

int safet_header_parse(const uint8_t *buf, size_t len, uint64_t file_size,
		       struct safet_header **out, size_t *need,
		       char *err, size_t errlen)
{
	struct safet_header *h = NULL;
	json_error_t jerr;
	const char *key;
	json_t *root, *v;
	uint64_t n, expect;
	size_t i, count;
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
	/* Stop at the end of the object so we can insist that only space
	 * padding follows (jansson would also accept tabs and newlines). */
	root = json_loadb((const char *)buf + 8, (size_t)n,
			  JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK, &jerr);
	if (!root)
		return errbuf_fail(err, errlen, -EINVAL,
				   "header is not valid JSON: %s (byte %d)", jerr.text,
				   jerr.position);
	if (!json_is_object(root)) {
		ret = errbuf_fail(err, errlen, -EINVAL, "header is not a JSON object");
		goto out_free_root;
	}
	for (uint64_t p = (uint64_t)jerr.position; p < n; p++)
		if (buf[8 + p] != ' ') {
			ret = errbuf_fail(err, errlen, -EINVAL,
					  "header has trailing bytes other than space padding");
			goto out_free_root;
		}
	h = calloc(1, sizeof(*h));
	if (!h) {
		ret = errbuf_fail(err, errlen, -ENOMEM, "out of memory");
		goto out_free_root;
	}
	h->data_start = 8 + n;
	count = json_object_size(root);
	if (json_object_get(root, "__metadata__")) {
		ret = check_metadata(json_object_get(root, "__metadata__"), err,
				     errlen);
		if (ret < 0)
			goto out_free_h;
		count--;
	}
	h->tensors = calloc(count ? count : 1, sizeof(*h->tensors));
	if (!h->tensors) {
		ret = errbuf_fail(err, errlen, -ENOMEM, "out of memory");
		goto out_free_h;
	}
	i = 0;
	json_object_foreach(root, key, v) {
		if (strcmp(key, "__metadata__") == 0)
			continue;
		ret = parse_tensor(key, v, &h->tensors[i], err, errlen);
		if (ret < 0)
			goto out_free_h;
		h->tensors[i].name = strdup(key);
		if (!h->tensors[i].name) {
			ret = errbuf_fail(err, errlen, -ENOMEM, "out of memory");
			goto out_free_h;
		}
		h->ntensors = ++i;
	}
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
	json_decref(root);
	*out = h;
	return 0;
out_free_h:
	safet_header_free(h);
out_free_root:
	json_decref(root);
	return ret;
}
