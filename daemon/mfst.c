/* mfst.c - checkpoint_manifest.json: dump, strict parse, read, write. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "io.h"
#include "mfst.h"
#include "names.h"

#define MFST_MAX_WORLD 100000        /* ranks are written with 5 digits */
#define SHARD_SUFFIX   ".safetensors"
#define EXTRA_PREFIX   "extra/rank_"

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static int is_hex(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return s[len] == '\0';
}

/* ---- paths ------------------------------------------------------------ */

enum { PATH_SHARD = 1, PATH_BLOB = 2 };

struct path_info {
	int         kind;
	int         rank;
	size_t      group_len;   /* shard: path[0..group_len) is the group */
	const char *blob;        /* blob: the name after "extra/rank_NNNNN/" */
};

/* Exactly five decimal digits. */
static int rank5(const char *s, int *rank)
{
	int r = 0;

	for (int i = 0; i < 5; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		r = r * 10 + (s[i] - '0');
	}
	*rank = r;
	return 0;
}

static int path_classify(const char *path, struct path_info *pi,
			 const char **why)
{
	const char *slash = strchr(path, '/');
	size_t plen = strlen(path);
	char group[NAME_MAX_GROUP + 1];
	const char *rest;

	*why = "must be <group>/rank_NNNNN.safetensors or extra/rank_NNNNN/<blob>";
	if (!slash)
		return -1;
	rest = slash + 1;
	/* extra/rank_NNNNN/<blob> */
	if (strncmp(path, EXTRA_PREFIX, strlen(EXTRA_PREFIX)) == 0 &&
	    plen > strlen(EXTRA_PREFIX) + 6 &&
	    path[strlen(EXTRA_PREFIX) + 5] == '/') {
		if (rank5(path + strlen(EXTRA_PREFIX), &pi->rank) < 0)
			return -1;
		pi->blob = path + strlen(EXTRA_PREFIX) + 6;
		if (name_check(pi->blob, NAME_MAX_BLOB, why) < 0)
			return -1;
		pi->kind = PATH_BLOB;
		pi->group_len = 0;
		return 0;
	}
	/* <group>/rank_NNNNN.safetensors */
	if ((size_t)(slash - path) > NAME_MAX_GROUP)
		return -1;
	memcpy(group, path, (size_t)(slash - path));
	group[slash - path] = '\0';
	if (name_check(group, NAME_MAX_GROUP, why) < 0)
		return -1;
	*why = "must be <group>/rank_NNNNN.safetensors or extra/rank_NNNNN/<blob>";
	if (strlen(rest) != 5 + 5 + strlen(SHARD_SUFFIX) ||
	    strncmp(rest, "rank_", 5) != 0 ||
	    rank5(rest + 5, &pi->rank) < 0 ||
	    strcmp(rest + 10, SHARD_SUFFIX) != 0)
		return -1;
	pi->kind = PATH_SHARD;
	pi->group_len = (size_t)(slash - path);
	pi->blob = NULL;
	return 0;
}

/* ---- semantic validation, shared by parse and dump --------------------- */

/* A set of strings, for duplicate detection. 1 if already present, 0 if
 * added, -1 out of memory. */
static int set_add(json_t *set, const char *key)
{
	if (json_object_get(set, key))
		return 1;
	return json_object_set_new(set, key, json_null()) ? -1 : 0;
}

static int validate(const struct mfst *m, char *err, size_t errlen)
{
	struct path_info *pi = NULL;
	json_t *set = NULL;
	const char *why;
	char key[NAME_MAX_GROUP + NAME_MAX_TENSOR + 16];
	int ret = -EINVAL;

	if (m->format_version < 1 || m->format_version > MFST_VERSION)
		return fail(err, errlen, "format_version %d is not supported "
			    "(this ckpt reads 1..%d)", m->format_version,
			    MFST_VERSION);
	if (strnlen(m->status, sizeof(m->status)) == 0 ||
	    strnlen(m->status, sizeof(m->status)) == sizeof(m->status) ||
	    strspn(m->status, "abcdefghijklmnopqrstuvwxyz_") != strlen(m->status))
		return fail(err, errlen, "status: must be 1..15 of [a-z_]");
	if (name_check(m->job, NAME_MAX_JOB, &why) < 0)
		return fail(err, errlen, "job: %s", why);
	if (!is_hex(m->run_id, 32))
		return fail(err, errlen, "run_id: must be 32 lowercase hex digits");
	if (!is_hex(m->txid, 32))
		return fail(err, errlen, "txid: must be 32 lowercase hex digits");
	if (m->step > INT64_MAX)
		return fail(err, errlen, "step: out of range");
	if (m->world_size < 1 || m->world_size > MFST_MAX_WORLD)
		return fail(err, errlen, "world_size: must be 1..%d",
			    MFST_MAX_WORLD);
	if ((m->nfiles && !m->files) || (m->ntensors && !m->tensors) ||
	    (m->nblobs && !m->blobs))
		return fail(err, errlen, "missing arrays");

	pi = calloc(m->nfiles ? m->nfiles : 1, sizeof(*pi));
	set = json_object();
	if (!pi || !set) {
		ret = -ENOMEM;
		fail(err, errlen, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct mfst_file *f = &m->files[i];

		if (!f->path || path_classify(f->path, &pi[i], &why) < 0) {
			fail(err, errlen, "files[%zu].path: %s", i,
			     f->path ? why : "missing");
			goto out;
		}
		if (pi[i].rank >= m->world_size) {
			fail(err, errlen, "files[%zu].path: rank %d >= world_size %d",
			     i, pi[i].rank, m->world_size);
			goto out;
		}
		if (f->size > INT64_MAX) {
			fail(err, errlen, "files[%zu].size: out of range", i);
			goto out;
		}
		if (!is_hex(f->sha256, SHA_HEX_LEN)) {
			fail(err, errlen, "files[%zu].sha256: must be 64 lowercase hex digits", i);
			goto out;
		}
		switch (set_add(set, f->path)) {
		case 1:
			fail(err, errlen, "files[%zu].path: duplicate '%s'", i, f->path);
			goto out;
		case -1:
			ret = -ENOMEM;
			fail(err, errlen, "out of memory");
			goto out;
		}
	}
	json_object_clear(set);
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct mfst_tensor *t = &m->tensors[i];
		const struct path_info *p;
		size_t esize;
		uint64_t nb = 0;

		if (name_check(t->group, NAME_MAX_GROUP, &why) < 0) {
			fail(err, errlen, "tensors[%zu].group: %s", i, why);
			goto out;
		}
		if (name_check_tensor(t->name, &why) < 0) {
			fail(err, errlen, "tensors[%zu].name: %s", i, why);
			goto out;
		}
		if (t->rank < 0 || t->rank >= m->world_size) {
			fail(err, errlen, "tensors[%zu].rank: %d out of range", i, t->rank);
			goto out;
		}
		if (t->file >= m->nfiles) {
			fail(err, errlen, "tensors[%zu].file: index %zu out of range", i,
			     t->file);
			goto out;
		}
		p = &pi[t->file];
		if (p->kind != PATH_SHARD || p->rank != t->rank ||
		    strlen(t->group) != p->group_len ||
		    memcmp(t->group, m->files[t->file].path, p->group_len) != 0) {
			fail(err, errlen, "tensors[%zu].file: '%s' is not the %s shard of rank %d",
			     i, m->files[t->file].path, t->group, t->rank);
			goto out;
		}
		esize = safet_dtype_size(t->dtype);
		if (!esize || strnlen(t->dtype, sizeof(t->dtype)) == sizeof(t->dtype)) {
			fail(err, errlen, "tensors[%zu].dtype: unknown", i);
			goto out;
		}
		if (t->ndim < 0 || t->ndim > SAFET_MAX_NDIM) {
			fail(err, errlen, "tensors[%zu].shape: at most %d dims", i,
			     SAFET_MAX_NDIM);
			goto out;
		}
		/* prod(shape) * esize without overflow; a zero dim wins. */
		nb = esize;
		for (int d = 0; d < t->ndim; d++) {
			if (t->shape[d] < 0) {
				fail(err, errlen, "tensors[%zu].shape: negative dim", i);
				goto out;
			}
			if (t->shape[d] == 0)
				nb = 0;
		}
		for (int d = 0; nb && d < t->ndim; d++)
			if (__builtin_mul_overflow(nb, (uint64_t)t->shape[d], &nb) ||
			    nb > INT64_MAX) {
				fail(err, errlen, "tensors[%zu].shape: too large", i);
				goto out;
			}
		if (t->begin > t->end || t->end > m->files[t->file].size) {
			fail(err, errlen, "tensors[%zu]: begin/end outside '%s'", i,
			     m->files[t->file].path);
			goto out;
		}
		if (t->end - t->begin != nb) {
			fail(err, errlen, "tensors[%zu]: end-begin is %llu, dtype and shape need %llu",
			     i, (unsigned long long)(t->end - t->begin),
			     (unsigned long long)nb);
			goto out;
		}
		/* group and rank contain no '/', so this key is unambiguous */
		snprintf(key, sizeof(key), "%s/%d/%s", t->group, t->rank, t->name);
		switch (set_add(set, key)) {
		case 1:
			fail(err, errlen, "tensors[%zu]: duplicate tensor '%s' in %s rank %d",
			     i, t->name, t->group, t->rank);
			goto out;
		case -1:
			ret = -ENOMEM;
			fail(err, errlen, "out of memory");
			goto out;
		}
	}
	json_object_clear(set);
	for (size_t i = 0; i < m->nblobs; i++) {
		const struct mfst_blob *b = &m->blobs[i];
		const struct path_info *p;

		if (name_check(b->name, NAME_MAX_BLOB, &why) < 0) {
			fail(err, errlen, "blobs[%zu].name: %s", i, why);
			goto out;
		}
		if (b->rank < 0 || b->rank >= m->world_size) {
			fail(err, errlen, "blobs[%zu].rank: %d out of range", i, b->rank);
			goto out;
		}
		if (b->file >= m->nfiles) {
			fail(err, errlen, "blobs[%zu].file: index %zu out of range", i,
			     b->file);
			goto out;
		}
		p = &pi[b->file];
		if (p->kind != PATH_BLOB || p->rank != b->rank ||
		    strcmp(p->blob, b->name) != 0) {
			fail(err, errlen, "blobs[%zu].file: '%s' is not the path of blob '%s' of rank %d",
			     i, m->files[b->file].path, b->name, b->rank);
			goto out;
		}
		snprintf(key, sizeof(key), "%d/%s", b->rank, b->name);
		switch (set_add(set, key)) {
		case 1:
			fail(err, errlen, "blobs[%zu]: duplicate blob '%s' of rank %d",
			     i, b->name, b->rank);
			goto out;
		case -1:
			ret = -ENOMEM;
			fail(err, errlen, "out of memory");
			goto out;
		}
	}
	ret = 0;
out:
	json_decref(set);
	free(pi);
	return ret;
}

/* ---- dump ------------------------------------------------------------- */

/* Steals v; any failure here is an allocation failure (inputs were
 * validated, so every string is ASCII or checked UTF-8). */
static int put(json_t *o, const char *key, json_t *v)
{
	return v && json_object_set_new(o, key, v) == 0 ? 0 : -1;
}

static int append(json_t *a, json_t *v)
{
	return v && json_array_append_new(a, v) == 0 ? 0 : -1;
}

static json_t *dump_json(const struct mfst *m)
{
	json_t *root, *files, *tensors, *blobs;

	root = json_object();
	files = json_array();
	tensors = json_array();
	blobs = json_array();
	if (!root || !files || !tensors || !blobs)
		goto out_fail;
	if (put(root, "format", json_string(MFST_FORMAT)) ||
	    put(root, "format_version", json_integer(m->format_version)) ||
	    put(root, "status", json_string(m->status)) ||
	    put(root, "job", json_string(m->job)) ||
	    put(root, "run_id", json_string(m->run_id)) ||
	    put(root, "txid", json_string(m->txid)) ||
	    put(root, "step", json_integer((json_int_t)m->step)) ||
	    put(root, "world_size", json_integer(m->world_size)) ||
	    put(root, "created_unix", json_integer(m->created_unix)) ||
	    put(root, "files", json_incref(files)) ||
	    put(root, "tensors", json_incref(tensors)) ||
	    put(root, "blobs", json_incref(blobs)))
		goto out_fail;
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct mfst_file *f = &m->files[i];
		json_t *o = json_object();

		if (append(files, o) ||
		    put(o, "path", json_string(f->path)) ||
		    put(o, "size", json_integer((json_int_t)f->size)) ||
		    put(o, "sha256", json_string(f->sha256)))
			goto out_fail;
	}
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct mfst_tensor *t = &m->tensors[i];
		json_t *o = json_object(), *shape = json_array();
		int bad = append(tensors, o) || !shape;

		for (int d = 0; !bad && d < t->ndim; d++)
			bad = append(shape, json_integer(t->shape[d]));
		/* shape is attached with its own reference, so it is
		 * released here whichever put failed */
		bad = bad ||
		    put(o, "group", json_string(t->group)) ||
		    put(o, "rank", json_integer(t->rank)) ||
		    put(o, "name", json_string(t->name)) ||
		    put(o, "file", json_integer((json_int_t)t->file)) ||
		    put(o, "dtype", json_string(t->dtype)) ||
		    put(o, "shape", json_incref(shape)) ||
		    put(o, "begin", json_integer((json_int_t)t->begin)) ||
		    put(o, "end", json_integer((json_int_t)t->end));
		json_decref(shape);
		if (bad)
			goto out_fail;
	}
	for (size_t i = 0; i < m->nblobs; i++) {
		const struct mfst_blob *b = &m->blobs[i];
		json_t *o = json_object();

		if (append(blobs, o) ||
		    put(o, "rank", json_integer(b->rank)) ||
		    put(o, "name", json_string(b->name)) ||
		    put(o, "file", json_integer((json_int_t)b->file)))
			goto out_fail;
	}
	json_decref(files);
	json_decref(tensors);
	json_decref(blobs);
	return root;
out_fail:
	json_decref(files);
	json_decref(tensors);
	json_decref(blobs);
	json_decref(root);
	return NULL;
}

int mfst_dump(const struct mfst *m, char **out, size_t *len)
{
	char ebuf[256];
	json_t *root;
	char *s, *t;
	size_t n;

	if (!m || !out || !len)
		return -EINVAL;
	/* Never write a manifest that mfst_parse would refuse. */
	if (validate(m, ebuf, sizeof(ebuf)) < 0)
		return -EINVAL;
	root = dump_json(m);
	if (!root)
		return -ENOMEM;
	s = json_dumps(root, JSON_COMPACT);
	/* jansson 2.14 ignores some failed appends (a key's) and can return
	 * a truncated document when memory runs out: read it back. */
	if (s) {
		json_t *chk = json_loads(s, 0, NULL);
		int same = chk && json_equal(chk, root);
		json_decref(chk);
		if (!same) {
			free(s);
			s = NULL;
		}
	}
	json_decref(root);
	if (!s)
		return -ENOMEM;
	n = strlen(s);
	t = realloc(s, n + 2);
	if (!t) {
		free(s);
		return -ENOMEM;
	}
	t[n] = '\n';
	t[n + 1] = '\0';
	*out = t;
	*len = n + 1;
	return 0;
}

/* ---- parse ------------------------------------------------------------ */

void mfst_free(struct mfst *m)
{
	if (!m)
		return;
	for (size_t i = 0; m->files && i < m->nfiles; i++)
		free(m->files[i].path);
	for (size_t i = 0; m->tensors && i < m->ntensors; i++) {
		free(m->tensors[i].group);
		free(m->tensors[i].name);
	}
	for (size_t i = 0; m->blobs && i < m->nblobs; i++)
		free(m->blobs[i].name);
	free(m->files);
	free(m->tensors);
	free(m->blobs);
	free(m->job);
	free(m);
}

/* Typed field readers: each fills err as "<where>.<key>: ..." on failure. */
static int get_str(const json_t *o, const char *where, const char *key,
		   const char **out, char *err, size_t errlen)
{
	const json_t *v = json_object_get(o, key);

	if (!json_is_string(v))
		return fail(err, errlen, "%s%s: %s", where, key,
			    v ? "must be a string" : "missing");
	*out = json_string_value(v);
	return 0;
}

static int get_dup(const json_t *o, const char *where, const char *key,
		   char **out, char *err, size_t errlen)
{
	const char *s = NULL;
	int ret = get_str(o, where, key, &s, err, errlen);

	if (ret < 0)
		return ret;
	*out = strdup(s);
	if (!*out) {
		fail(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

/* Into a fixed buffer; strings that do not fit are malformed anyway. */
static int get_fixed(const json_t *o, const char *where, const char *key,
		     char *buf, size_t size, char *err, size_t errlen)
{
	const char *s = NULL;
	int ret = get_str(o, where, key, &s, err, errlen);

	if (ret < 0)
		return ret;
	if (strlen(s) >= size)
		return fail(err, errlen, "%s%s: too long", where, key);
	strcpy(buf, s);
	return 0;
}

static int get_int(const json_t *o, const char *where, const char *key,
		   int64_t min, int64_t max, int64_t *out,
		   char *err, size_t errlen)
{
	const json_t *v = json_object_get(o, key);
	json_int_t i;

	if (!json_is_integer(v))
		return fail(err, errlen, "%s%s: %s", where, key,
			    v ? "must be an integer" : "missing");
	i = json_integer_value(v);
	if (i < min || i > max)
		return fail(err, errlen, "%s%s: %lld out of range", where, key,
			    (long long)i);
	*out = i;
	return 0;
}

static int get_array(const json_t *o, const char *key, const json_t **out,
		     char *err, size_t errlen)
{
	const json_t *v = json_object_get(o, key);

	if (!json_is_array(v))
		return fail(err, errlen, "%s: %s", key,
			    v ? "must be an array" : "missing");
	*out = v;
	return 0;
}

static int parse_file(const json_t *o, size_t i, struct mfst_file *f,
		      char *err, size_t errlen)
{
	char where[48];
	int64_t v = 0;
	int ret;

	snprintf(where, sizeof(where), "files[%zu].", i);
	if (!json_is_object(o))
		return fail(err, errlen, "files[%zu]: must be an object", i);
	if ((ret = get_dup(o, where, "path", &f->path, err, errlen)) < 0 ||
	    (ret = get_int(o, where, "size", 0, INT64_MAX, &v, err, errlen)) < 0 ||
	    (ret = get_fixed(o, where, "sha256", f->sha256, sizeof(f->sha256),
			     err, errlen)) < 0)
		return ret;
	f->size = (uint64_t)v;
	return 0;
}

static int parse_tensor(const json_t *o, size_t i, struct mfst_tensor *t,
			char *err, size_t errlen)
{
	const json_t *shape;
	char where[48];
	int64_t rank = 0, file = 0, b = 0, e = 0;
	int ret;

	snprintf(where, sizeof(where), "tensors[%zu].", i);
	if (!json_is_object(o))
		return fail(err, errlen, "tensors[%zu]: must be an object", i);
	if ((ret = get_dup(o, where, "group", &t->group, err, errlen)) < 0 ||
	    (ret = get_int(o, where, "rank", 0, MFST_MAX_WORLD - 1, &rank,
			   err, errlen)) < 0 ||
	    (ret = get_dup(o, where, "name", &t->name, err, errlen)) < 0 ||
	    (ret = get_int(o, where, "file", 0, INT64_MAX, &file, err,
			   errlen)) < 0 ||
	    (ret = get_fixed(o, where, "dtype", t->dtype, sizeof(t->dtype),
			     err, errlen)) < 0 ||
	    (ret = get_int(o, where, "begin", 0, INT64_MAX, &b, err,
			   errlen)) < 0 ||
	    (ret = get_int(o, where, "end", 0, INT64_MAX, &e, err,
			   errlen)) < 0)
		return ret;
	shape = json_object_get(o, "shape");
	if (!json_is_array(shape) || json_array_size(shape) > SAFET_MAX_NDIM)
		return fail(err, errlen, "%sshape: must be an array of at most %d integers",
			    where, SAFET_MAX_NDIM);
	t->ndim = (int)json_array_size(shape);
	for (int d = 0; d < t->ndim; d++) {
		const json_t *v = json_array_get(shape, (size_t)d);

		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return fail(err, errlen, "%sshape[%d]: must be a non-negative integer",
				    where, d);
		t->shape[d] = json_integer_value(v);
	}
	t->rank = (int)rank;
	t->file = (uint64_t)file > SIZE_MAX ? SIZE_MAX : (size_t)file;
	t->begin = (uint64_t)b;
	t->end = (uint64_t)e;
	return 0;
}

static int parse_blob(const json_t *o, size_t i, struct mfst_blob *bl,
		      char *err, size_t errlen)
{
	char where[48];
	int64_t rank = 0, file = 0;
	int ret;

	snprintf(where, sizeof(where), "blobs[%zu].", i);
	if (!json_is_object(o))
		return fail(err, errlen, "blobs[%zu]: must be an object", i);
	if ((ret = get_int(o, where, "rank", 0, MFST_MAX_WORLD - 1, &rank,
			   err, errlen)) < 0 ||
	    (ret = get_dup(o, where, "name", &bl->name, err, errlen)) < 0 ||
	    (ret = get_int(o, where, "file", 0, INT64_MAX, &file, err,
			   errlen)) < 0)
		return ret;
	bl->rank = (int)rank;
	bl->file = (uint64_t)file > SIZE_MAX ? SIZE_MAX : (size_t)file;
	return 0;
}

int mfst_parse(const char *json, size_t len, struct mfst **out,
	       char *err, size_t errlen)
{
	const json_t *files, *tensors, *blobs;
	const char *s = NULL;
	struct mfst *m = NULL;
	json_error_t jerr;
	json_t *root;
	int64_t v = 0;
	int ret;

	if (!json || !out)
		return fail(err, errlen, "bad arguments");
	if (len > MFST_MAX_BYTES)
		return fail(err, errlen, "larger than %u bytes", MFST_MAX_BYTES);
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return fail(err, errlen, "not valid JSON: %s (line %d, column %d)",
			    jerr.text, jerr.line, jerr.column);
	if (!json_is_object(root)) {
		ret = fail(err, errlen, "not a JSON object");
		goto out_free;
	}
	/* Identify the format and its version before anything else, so a
	 * newer manifest is refused as such rather than as malformed. */
	if ((ret = get_str(root, "", "format", &s, err, errlen)) < 0)
		goto out_free;
	if (strcmp(s, MFST_FORMAT) != 0) {
		ret = fail(err, errlen, "format: '%.32s' is not '%s'", s, MFST_FORMAT);
		goto out_free;
	}
	if ((ret = get_int(root, "", "format_version", INT64_MIN, INT64_MAX, &v,
			   err, errlen)) < 0)
		goto out_free;
	if (v > MFST_VERSION) {
		ret = fail(err, errlen, "format_version %lld is newer than this "
			   "ckpt supports (%d); upgrade ckpt to read it",
			   (long long)v, MFST_VERSION);
		goto out_free;
	}
	if (v < 1) {
		ret = fail(err, errlen, "format_version %lld is invalid", (long long)v);
		goto out_free;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		ret = -ENOMEM;
		fail(err, errlen, "out of memory");
		goto out_free;
	}
	m->format_version = (int)v;
	if ((ret = get_fixed(root, "", "status", m->status, sizeof(m->status),
			     err, errlen)) < 0 ||
	    (ret = get_dup(root, "", "job", &m->job, err, errlen)) < 0 ||
	    (ret = get_fixed(root, "", "run_id", m->run_id, sizeof(m->run_id),
			     err, errlen)) < 0 ||
	    (ret = get_fixed(root, "", "txid", m->txid, sizeof(m->txid),
			     err, errlen)) < 0)
		goto out_free;
	if ((ret = get_int(root, "", "step", 0, INT64_MAX, &v, err, errlen)) < 0)
		goto out_free;
	m->step = (uint64_t)v;
	if ((ret = get_int(root, "", "world_size", 1, MFST_MAX_WORLD, &v, err,
			   errlen)) < 0)
		goto out_free;
	m->world_size = (int)v;
	if ((ret = get_int(root, "", "created_unix", INT64_MIN, INT64_MAX,
			   &m->created_unix, err, errlen)) < 0)
		goto out_free;
	if ((ret = get_array(root, "files", &files, err, errlen)) < 0 ||
	    (ret = get_array(root, "tensors", &tensors, err, errlen)) < 0 ||
	    (ret = get_array(root, "blobs", &blobs, err, errlen)) < 0)
		goto out_free;

	/* Counts are set with the allocation so mfst_free can walk them. */
	m->files = calloc(json_array_size(files) + 1, sizeof(*m->files));
	m->tensors = calloc(json_array_size(tensors) + 1, sizeof(*m->tensors));
	m->blobs = calloc(json_array_size(blobs) + 1, sizeof(*m->blobs));
	if (!m->files || !m->tensors || !m->blobs) {
		ret = -ENOMEM;
		fail(err, errlen, "out of memory");
		goto out_free;
	}
	m->nfiles = json_array_size(files);
	m->ntensors = json_array_size(tensors);
	m->nblobs = json_array_size(blobs);
	for (size_t i = 0; i < m->nfiles; i++)
		if ((ret = parse_file(json_array_get(files, i), i, &m->files[i],
				      err, errlen)) < 0)
			goto out_free;
	for (size_t i = 0; i < m->ntensors; i++)
		if ((ret = parse_tensor(json_array_get(tensors, i), i,
					&m->tensors[i], err, errlen)) < 0)
			goto out_free;
	for (size_t i = 0; i < m->nblobs; i++)
		if ((ret = parse_blob(json_array_get(blobs, i), i, &m->blobs[i],
				      err, errlen)) < 0)
			goto out_free;
	if ((ret = validate(m, err, errlen)) < 0)
		goto out_free;
	json_decref(root);
	*out = m;
	return 0;
out_free:
	mfst_free(m);
	json_decref(root);
	return ret;
}

/* ---- files ------------------------------------------------------------ */

int mfst_read(int dirfd, struct mfst **out, char *err, size_t errlen)
{
	char ebuf[512];
	struct stat st;
	size_t got = 0;
	char *buf;
	ssize_t r;
	int fd, ret;

	if (!out)
		return -EINVAL;
	/* O_NONBLOCK: a FIFO in its place must not hang recovery. */
	fd = openat(dirfd, MFST_NAME,
		    O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		ret = -errno;
		if (err && errlen)
			snprintf(err, errlen, "%s: cannot open: %s", MFST_NAME,
				 ret == -ELOOP ? "is a symbolic link" : strerror(-ret));
		return ret;
	}
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		if (err && errlen)
			snprintf(err, errlen, "%s: cannot stat: %s", MFST_NAME,
				 strerror(-ret));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > MFST_MAX_BYTES) {
		ret = fail(err, errlen, "%s: %s", MFST_NAME,
			   S_ISREG(st.st_mode) ? "too large" : "not a regular file");
		goto out_close;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		ret = -ENOMEM;
		if (err && errlen)
			snprintf(err, errlen, "%s: out of memory", MFST_NAME);
		goto out_close;
	}
	/* Read up to the size seen by fstat; a file still growing is not a
	 * finished manifest and will fail to parse. */
	while (got < (size_t)st.st_size) {
		r = read(fd, buf + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = -errno;
			if (err && errlen)
				snprintf(err, errlen, "%s: read error: %s", MFST_NAME,
					 strerror(-ret));
			goto out_free_buf;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	ret = mfst_parse(buf, got, out, ebuf, sizeof(ebuf));
	if (ret < 0 && err && errlen)
		snprintf(err, errlen, "%s: %s", MFST_NAME, ebuf);
out_free_buf:
	free(buf);
out_close:
	close(fd);
	return ret;
}

int mfst_write(int dirfd, const struct mfst *m)
{
	size_t len;
	char *buf;
	int ret = mfst_dump(m, &buf, &len);

	if (ret < 0)
		return ret;
	/* through the I/O table (fault injection reaches it); a torn
	 * manifest is never left under its name */
	ret = io_write_file(dirfd, MFST_NAME, MFST_NAME ".tmp", buf, len,
			    IO_FILE_NOREPLACE, 0640);
	free(buf);
	return ret;
}
