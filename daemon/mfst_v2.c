/* mfst_v2.c - format 2 of the manifest: per-chunk checksums of files and
 * the table of global tensors, in JSON and checked (see mfst_v2.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "csum.h"
#include "errbuf.h"
#include "layout.h"
#include "mfst_int.h"
#include "mfst_v2.h"
#include "names.h"
#include "tiling.h"

static int put(json_t *o, const char *key, json_t *v)
{
	return v && json_object_set_new(o, key, v) == 0 ? 0 : -1;
}

static json_t *int_array(const int64_t *v, int n)
{
	json_t *a = json_array();

	for (int i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_integer(v[i])) < 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

/* A JSON array of at most max non-negative integers into v; *n its length. */
static int get_dims(const json_t *o, const char *where, const char *key, int max,
		    int64_t *v, int *n, char *err, size_t errlen)
{
	const json_t *a = json_object_get(o, key), *e;
	size_t i;

	if (!json_is_array(a) || json_array_size(a) > (size_t)max)
		return errbuf_fail(err, errlen, -EINVAL, "%s%s: must be an array of at most %d integers",
				   where, key, max);
	json_array_foreach(a, i, e) {
		if (!json_is_integer(e) || json_integer_value(e) < 0)
			return errbuf_fail(err, errlen, -EINVAL, "%s%s[%zu]: must be a non-negative integer",
					   where, key, i);
		v[i] = json_integer_value(e);
	}
	*n = (int)json_array_size(a);
	return 0;
}

/* ---- per-chunk checksums ---------------------------------------------- */

int mfst__file_csum_dump(const struct mfst_file *f, json_t *o)
{
	uint64_t n = csum_count(f->size, f->chunk_size);
	json_t *a;

	if (!f->chunk_size)
		return 0;
	if (!(a = json_array()) || put(o, "crc32c", a) < 0 ||
	    put(o, "chunk_size", json_integer((json_int_t)f->chunk_size)) < 0)
		return -ENOMEM;
	for (uint64_t k = 0; k < n; k++)
		if (json_array_append_new(a, json_integer(f->crc32c[k])) < 0)
			return -ENOMEM;
	return 0;
}

int mfst__file_csum_parse(const json_t *o, size_t i, struct mfst_file *f,
			  char *err, size_t errlen)
{
	const json_t *a = json_object_get(o, "crc32c"), *e;
	char where[48];
	int64_t cs = 0;
	size_t k;
	int r;

	if (!a && !json_object_get(o, "chunk_size"))
		return 0;
	snprintf(where, sizeof(where), "files[%zu].", i);
	if ((r = mfst__get_int(o, where, "chunk_size", 0, INT64_MAX, &cs, err, errlen)) < 0)
		return r;
	if (!json_is_array(a))
		return errbuf_fail(err, errlen, -EINVAL, "%scrc32c: must be an array", where);
	f->crc32c = calloc(json_array_size(a) + 1, sizeof(*f->crc32c));
	if (!f->crc32c)
		return errbuf_fail(err, errlen, -ENOMEM, "out of memory");
	json_array_foreach(a, k, e) {
		if (!json_is_integer(e) || json_integer_value(e) < 0 ||
		    json_integer_value(e) > UINT32_MAX)
			return errbuf_fail(err, errlen, -EINVAL, "%scrc32c[%zu]: must be a 32-bit integer",
					   where, k);
		f->crc32c[k] = (uint32_t)json_integer_value(e);
	}
	if (cs == 0 || json_array_size(a) != csum_count(f->size, (uint64_t)cs))
		return errbuf_fail(err, errlen, -EINVAL, "%scrc32c: %zu checksums for %llu bytes in "
				   "chunks of %lld", where, json_array_size(a),
				   (unsigned long long)f->size, (long long)cs);
	f->chunk_size = (uint64_t)cs;
	return 0;
}

/* ---- globals ------------------------------------------------------------ */

int mfst__globals_dump(const struct mfst *m, json_t *root)
{
	json_t *ga;

	if (!m->nglobals)
		return 0;
	if (!(ga = json_array()) || put(root, "globals", ga) < 0)
		return -ENOMEM;
	for (size_t g = 0; g < m->nglobals; g++) {
		const struct mfst_global *gl = &m->globals[g];
		json_t *o = json_object(), *pa = json_array();
		if (!o || json_array_append_new(ga, o) < 0 || !pa ||
		    put(o, "pieces", pa) < 0 ||
		    put(o, "group", json_string(gl->group)) < 0 ||
		    put(o, "name", json_string(gl->name)) < 0 ||
		    put(o, "dtype", json_string(gl->dtype)) < 0 ||
		    put(o, "shape", int_array(gl->shape, gl->ndim)) < 0)
			return -ENOMEM;
		for (size_t k = 0; k < gl->npieces; k++) {
			const struct mfst_piece *p = &m->pieces[gl->first_piece + k];
			json_t *po = json_object();
			if (!po || json_array_append_new(pa, po) < 0 ||
			    put(po, "rank", json_integer(p->t.rank)) < 0 ||
			    put(po, "file", json_integer((json_int_t)p->t.file)) < 0 ||
			    put(po, "offset", int_array(p->offset, gl->ndim)) < 0 ||
			    put(po, "shape", int_array(p->t.shape, gl->ndim)) < 0 ||
			    put(po, "begin", json_integer((json_int_t)p->t.begin)) < 0 ||
			    put(po, "end", json_integer((json_int_t)p->t.end)) < 0)
				return -ENOMEM;
		}
	}
	return 0;
}

static int parse_piece(const json_t *o, const char *where, struct mfst_global *gl,
		       struct mfst_piece *p, char *err, size_t errlen)
{
	int64_t rank = 0, file = 0, b = 0, e = 0;
	int n1 = 0, n2 = 0, r;

	if (!json_is_object(o))
		return errbuf_fail(err, errlen, -EINVAL, "%s must be an object", where);
	if ((r = mfst__get_int(o, where, "rank", 0, MFST_MAX_WORLD - 1, &rank, err, errlen)) < 0 ||
	    (r = mfst__get_int(o, where, "file", 0, INT64_MAX, &file, err, errlen)) < 0 ||
	    (r = mfst__get_int(o, where, "begin", 0, INT64_MAX, &b, err, errlen)) < 0 ||
	    (r = mfst__get_int(o, where, "end", 0, INT64_MAX, &e, err, errlen)) < 0 ||
	    (r = get_dims(o, where, "offset", SAFET_MAX_NDIM, p->offset, &n1, err, errlen)) < 0 ||
	    (r = get_dims(o, where, "shape", SAFET_MAX_NDIM, p->t.shape, &n2, err, errlen)) < 0)
		return r;
	if (n1 != gl->ndim || n2 != gl->ndim)
		return errbuf_fail(err, errlen, -EINVAL, "%soffset, shape: %d dims each, as "
				   "the global", where, gl->ndim);
	p->t.group = gl->group;
	p->t.name = gl->name;
	memcpy(p->t.dtype, gl->dtype, sizeof(p->t.dtype));
	p->t.ndim = gl->ndim;
	p->t.rank = (int)rank;
	p->t.file = (uint64_t)file > SIZE_MAX ? SIZE_MAX : (size_t)file;
	p->t.begin = (uint64_t)b;
	p->t.end = (uint64_t)e;
	return 0;
}

int mfst__globals_parse(const json_t *root, struct mfst *m, char *err, size_t errlen)
{
	const json_t *ga = json_object_get(root, "globals"), *o;
	size_t g, np = 0;
	char where[64];
	int r;

	if (!ga)
		return 0;
	if (!json_is_array(ga))
		return errbuf_fail(err, errlen, -EINVAL, "globals: must be an array");
	json_array_foreach(ga, g, o) {
		const json_t *pa = json_object_get(o, "pieces");
		if (!json_is_array(pa))
			return errbuf_fail(err, errlen, -EINVAL, "globals[%zu].pieces: must be an array", g);
		np += json_array_size(pa);
	}
	m->globals = calloc(json_array_size(ga) + 1, sizeof(*m->globals));
	m->pieces = calloc(np + 1, sizeof(*m->pieces));
	if (!m->globals || !m->pieces)
		return errbuf_fail(err, errlen, -ENOMEM, "out of memory");
	json_array_foreach(ga, g, o) {
		struct mfst_global *gl = &m->globals[m->nglobals++];
		const json_t *pa = json_object_get(o, "pieces"), *po;
		const char *group = NULL, *name = NULL, *dtype = NULL;
		size_t k;
		snprintf(where, sizeof(where), "globals[%zu].", g);
		if ((r = mfst__get_str(o, where, "group", &group, err, errlen)) < 0 ||
		    (r = mfst__get_str(o, where, "name", &name, err, errlen)) < 0 ||
		    (r = mfst__get_str(o, where, "dtype", &dtype, err, errlen)) < 0 ||
		    (r = get_dims(o, where, "shape", SAFET_MAX_NDIM, gl->shape, &gl->ndim,
				  err, errlen)) < 0)
			return r;
		if (strlen(dtype) >= sizeof(gl->dtype))
			return errbuf_fail(err, errlen, -EINVAL, "%sdtype: unknown", where);
		strcpy(gl->dtype, dtype);
		if (!(gl->group = strdup(group)) || !(gl->name = strdup(name)))
			return errbuf_fail(err, errlen, -ENOMEM, "out of memory");
		gl->first_piece = m->npieces;
		json_array_foreach(pa, k, po) {
			struct mfst_piece *p = &m->pieces[m->npieces++];
			snprintf(where, sizeof(where), "globals[%zu].pieces[%zu].", g, k);
			p->global = g;
			if ((r = parse_piece(po, where, gl, p, err, errlen)) < 0)
				return r;
			gl->npieces++;
		}
	}
	return 0;
}

/* ---- checks ------------------------------------------------------------- */

static int check_global(const struct mfst *m, size_t g, struct tbox *boxes,
			char *err, size_t errlen)
{
	const struct mfst_global *gl = &m->globals[g];
	size_t esize = safet_dtype_size(gl->dtype), i = 0, j = 0;
	char why[160];
	char shard[LAYOUT_PATH_MAX], frozen[LAYOUT_PATH_MAX];
	int r;

	if (name_check(gl->group, NAME_MAX_GROUP, why, sizeof(why)) < 0)
		return errbuf_fail(err, errlen, -EINVAL, "globals[%zu].group: %s", g, why);
	if (name_check_tensor(gl->name, why, sizeof(why)) < 0)
		return errbuf_fail(err, errlen, -EINVAL, "globals[%zu].name: %s", g, why);
	if (!esize || strnlen(gl->dtype, sizeof(gl->dtype)) == sizeof(gl->dtype))
		return errbuf_fail(err, errlen, -EINVAL, "globals[%zu].dtype: unknown", g);
	if (gl->ndim < 0 || gl->ndim > SAFET_MAX_NDIM ||
	    tiling_volume(gl->ndim, gl->shape) < 0)
		return errbuf_fail(err, errlen, -EINVAL, "globals[%zu].shape: invalid", g);
	for (size_t k = 0; k < gl->npieces; k++) {
		const struct mfst_piece *p = &m->pieces[gl->first_piece + k];
		int64_t v = tiling_volume(gl->ndim, p->t.shape);
		uint64_t nb;
		if (p->t.rank < 0 || p->t.rank >= m->world_size || p->t.file >= m->nfiles)
			return errbuf_fail(err, errlen, -EINVAL, "globals[%zu].pieces[%zu]: rank or file "
					   "out of range", g, k);
		/* the rank's shard of the group, or its frozen shard */
		layout_shard_path(gl->group, p->t.rank, 0, shard, sizeof(shard));
		layout_shard_path(gl->group, p->t.rank, 1, frozen, sizeof(frozen));
		if (strcmp(m->files[p->t.file].path, shard) &&
		    strcmp(m->files[p->t.file].path, frozen))
			return errbuf_fail(err, errlen, -EINVAL, "globals[%zu].pieces[%zu].file: '%s' is "
					   "not %s", g, k, m->files[p->t.file].path, shard);
		if (v < 0 || __builtin_mul_overflow((uint64_t)v, esize, &nb) ||
		    p->t.begin > p->t.end || p->t.end > m->files[p->t.file].size ||
		    p->t.end - p->t.begin != nb)
			return errbuf_fail(err, errlen, -EINVAL, "globals[%zu].pieces[%zu]: begin/end do "
					   "not hold its shape inside '%s'", g, k,
					   m->files[p->t.file].path);
		boxes[k] = (struct tbox){ p->offset, p->t.shape };
	}
	r = tiling_check(gl->ndim, gl->shape, boxes, gl->npieces, &i, &j);
	if (r == -ENOMEM)
		return errbuf_fail(err, errlen, -ENOMEM, "out of memory");
	if (r != TILING_OK)
		return errbuf_fail(err, errlen, -EINVAL, "globals[%zu] (%s/%s): its pieces %s",
				   g, gl->group, gl->name, r == TILING_OUTSIDE ? "leave its shape" :
				   r == TILING_OVERLAP ? "overlap" : "leave a gap");
	return 0;
}

int mfst__v2_validate(const struct mfst *m, char *err, size_t errlen)
{
	struct tbox *boxes = NULL;
	json_t *names = NULL;
	char key[NAME_MAX_GROUP + NAME_MAX_TENSOR + 4];
	int r = 0;

	for (size_t i = 0; i < m->nfiles; i++) {
		const struct mfst_file *f = &m->files[i];
		if (f->chunk_size && !f->crc32c)
			return errbuf_fail(err, errlen, -EINVAL, "files[%zu].crc32c: missing", i);
	}
	if (!m->nglobals)
		return 0;
	if (!m->globals || (m->npieces && !m->pieces))
		return errbuf_fail(err, errlen, -EINVAL, "missing arrays");
	boxes = calloc(m->npieces + 1, sizeof(*boxes));
	names = json_object();
	if (!boxes || !names) {
		r = errbuf_fail(err, errlen, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t g = 0; g < m->nglobals && r == 0; g++) {
		const struct mfst_global *gl = &m->globals[g];
		if (gl->first_piece > m->npieces || gl->npieces > m->npieces - gl->first_piece) {
			r = errbuf_fail(err, errlen, -EINVAL, "globals[%zu]: pieces out of range", g);
			break;
		}
		if ((r = check_global(m, g, boxes, err, errlen)) < 0)
			break;
		snprintf(key, sizeof(key), "%s/%s", gl->group, gl->name);
		if (json_object_get(names, key))
			r = errbuf_fail(err, errlen, -EINVAL, "globals[%zu]: duplicate '%s'", g, key);
		else if (json_object_set_new(names, key, json_null()) < 0)
			r = errbuf_fail(err, errlen, -ENOMEM, "out of memory");
	}
out:
	json_decref(names);
	free(boxes);
	return r;
}

void mfst__v2_free(struct mfst *m)
{
	for (size_t i = 0; m->files && i < m->nfiles; i++)
		free(m->files[i].crc32c);
	for (size_t g = 0; m->globals && g < m->nglobals; g++) {
		free(m->globals[g].group);
		free(m->globals[g].name);
	}
	free(m->globals);
	free(m->pieces);
	m->globals = NULL;
	m->pieces = NULL;
}
