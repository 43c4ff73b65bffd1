/* commit.c - a step's manifest from typed per-rank parts, its publish and
 * the pruning after it.  See commit.h. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "commit.h"
#include "csum.h"
#include "errbuf.h"
#include "gtab.h"
#include "layout.h"
#include "log.h"
#include "names.h"
#include "remote.h"
#include "rsave.h"
#include "store.h"

/* --- parts -------------------------------------------------------------- */

void commit_part_free(struct commit_part *p)
{
	if (!p)
		return;
	for (size_t i = 0; p->files && i < p->nfiles; i++) {
		free(p->files[i].path);
		free(p->files[i].crc32c);
	}
	for (size_t i = 0; p->tensors && i < p->ntensors; i++) {
		free(p->tensors[i].group);
		free(p->tensors[i].name);
	}
	for (size_t i = 0; p->blobs && i < p->nblobs; i++)
		free(p->blobs[i].name);
	for (size_t i = 0; p->pieces && i < p->npieces; i++) {
		free(p->pieces[i].group);
		free(p->pieces[i].name);
	}
	free(p->files);
	free(p->tensors);
	free(p->blobs);
	free(p->pieces);
	free(p);
}

/* Allocate the arrays (n zeroed entries each, counts set). */
static struct commit_part *part_alloc(int rank, size_t nf, size_t nt, size_t nb,
				      size_t np)
{
	struct commit_part *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->rank = rank;
	p->files = calloc(nf + 1, sizeof(*p->files));
	p->tensors = calloc(nt + 1, sizeof(*p->tensors));
	p->blobs = calloc(nb + 1, sizeof(*p->blobs));
	p->pieces = calloc(np + 1, sizeof(*p->pieces));
	if (!p->files || !p->tensors || !p->blobs || !p->pieces) {
		commit_part_free(p);
		return NULL;
	}
	p->nfiles = nf;
	p->ntensors = nt;
	p->nblobs = nb;
	p->npieces = np;
	return p;
}

/* A piece of the rsave into the part's form. */
static int piece_from(const struct rs_tensor *t, struct commit_piece *cp)
{
	if (!(cp->group = strdup(t->group)) || !(cp->name = strdup(t->name)))
		return -ENOMEM;
	memcpy(cp->dtype, t->dtype, sizeof(cp->dtype));
	cp->ndim = t->ndim;
	memcpy(cp->gshape, t->gshape, sizeof(cp->gshape));
	memcpy(cp->offset, t->goffset, sizeof(cp->offset));
	memcpy(cp->shape, t->shape, sizeof(cp->shape));
	cp->replica_index = t->replica_index;
	cp->replica_count = t->replica_count;
	cp->written = t->written;
	cp->file = t->written ? t->file : 0;
	cp->begin = t->written ? t->begin : 0;
	cp->end = t->written ? t->end : 0;
	return 0;
}

int commit_part_from_rsave(const struct rsave *rs, struct commit_part **out)
{
	size_t np = 0, nt = 0;
	struct commit_part *p;

	for (size_t i = 0; i < rs->ntensors; i++)
		np += rs->tensors[i].global != 0;
	p = part_alloc(rs->rank, rs->nfiles, rs->ntensors - np, rs->nblobs, np);
	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < rs->nfiles; i++) {
		struct mfst_file *f = &p->files[i];
		if (!(f->path = strdup(rs->files[i].path)))
			goto out_nomem;
		f->size = rs->files[i].size;
		f->digest = rs->files[i].digest;
		if (!rs->files[i].linked)
			p->bytes_written += f->size - rs->files[i].cloned;
		if (rs->files[i].crcs) {
			uint64_t n = csum_count(f->size, CSUM_CHUNK_BYTES);
			if (!(f->crc32c = malloc(n * sizeof(uint32_t) + 1)))
				goto out_nomem;
			memcpy(f->crc32c, rs->files[i].crcs, n * sizeof(uint32_t));
			f->chunk_size = CSUM_CHUNK_BYTES;
		}
	}
	np = 0;
	for (size_t i = 0; i < rs->ntensors; i++) {
		const struct rs_tensor *t = &rs->tensors[i];
		struct mfst_tensor *mt;
		if (t->global) {
			if (piece_from(t, &p->pieces[np++]) < 0)
				goto out_nomem;
			continue;
		}
		mt = &p->tensors[nt++];
		if (!(mt->group = strdup(t->group)) || !(mt->name = strdup(t->name)))
			goto out_nomem;
		mt->rank = rs->rank;
		mt->file = t->file;
		memcpy(mt->dtype, t->dtype, sizeof(mt->dtype));
		mt->ndim = t->ndim;
		memcpy(mt->shape, t->shape, sizeof(mt->shape));
		mt->begin = t->begin;
		mt->end = t->end;
	}
	for (size_t i = 0; i < rs->nblobs; i++) {
		if (!(p->blobs[i].name = strdup(rs->blobs[i].name)))
			goto out_nomem;
		p->blobs[i].rank = rs->rank;
		p->blobs[i].file = rs->blobs[i].file;
	}
	*out = p;
	return 0;
out_nomem:
	commit_part_free(p);
	return -ENOMEM;
}

static json_t *dims_json(const int64_t *v, int n)
{
	json_t *a = json_array();

	for (int d = 0; a && d < n; d++)
		if (json_array_append_new(a, json_integer(v[d])) < 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

static json_t *pieces_json(const struct commit_part *p)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < p->npieces; i++) {
		const struct commit_piece *x = &p->pieces[i];
		json_t *gs = dims_json(x->gshape, x->ndim), *off = dims_json(x->offset, x->ndim);
		json_t *sh = dims_json(x->shape, x->ndim);
		if (!gs || !off || !sh ||
		    json_array_append_new(a, json_pack("[sssoooiiiIII]", x->group, x->name,
				x->dtype, gs, off, sh, x->replica_index, x->replica_count,
				x->written, (json_int_t)x->file, (json_int_t)x->begin,
				(json_int_t)x->end)) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

/* dims of a piece from JSON: an array of n non-negative integers */
static int dims_from(const json_t *a, int n, int64_t *v)
{
	const json_t *e;
	size_t d;

	if (!json_is_array(a) || json_array_size(a) != (size_t)n)
		return -1;
	json_array_foreach(a, d, e) {
		if (!json_is_integer(e) || json_integer_value(e) < 0)
			return -1;
		v[d] = json_integer_value(e);
	}
	return 0;
}

static int pieces_from(const json_t *jp, struct commit_part *p)
{
	const json_t *e;
	size_t i;

	json_array_foreach(jp, i, e) {
		struct commit_piece *x = &p->pieces[i];
		const char *group = json_string_value(json_array_get(e, 0));
		const char *name = json_string_value(json_array_get(e, 1));
		const char *dtype = json_string_value(json_array_get(e, 2));
		const json_t *gs = json_array_get(e, 3);
		int64_t n[6];
		if (json_array_size(e) != 12 || !group || !name || !dtype ||
		    name_check(group, NAME_MAX_GROUP, NULL, 0) < 0 ||
		    name_check_tensor(name, NULL, 0) < 0 || strlen(dtype) >= sizeof(x->dtype) ||
		    !json_is_array(gs) || json_array_size(gs) > SAFET_MAX_NDIM)
			return -EINVAL;
		x->ndim = (int)json_array_size(gs);
		if (dims_from(gs, x->ndim, x->gshape) < 0 ||
		    dims_from(json_array_get(e, 4), x->ndim, x->offset) < 0 ||
		    dims_from(json_array_get(e, 5), x->ndim, x->shape) < 0)
			return -EINVAL;
		for (int k = 0; k < 6; k++) {
			const json_t *v = json_array_get(e, (size_t)(6 + k));
			if (!json_is_integer(v) || json_integer_value(v) < 0)
				return -EINVAL;
			n[k] = json_integer_value(v);
		}
		if (n[1] < 1 || n[1] > MFST_MAX_WORLD || n[0] >= n[1] || n[2] > 1 ||
		    (n[2] && (size_t)n[3] >= p->nfiles) || n[5] < n[4])
			return -EINVAL;
		if (!(x->group = strdup(group)) || !(x->name = strdup(name)))
			return -ENOMEM;
		snprintf(x->dtype, sizeof(x->dtype), "%s", dtype);
		x->replica_index = (int)n[0];
		x->replica_count = (int)n[1];
		x->written = (int)n[2];
		x->file = (size_t)n[3];
		x->begin = (uint64_t)n[4];
		x->end = (uint64_t)n[5];
	}
	return 0;
}

int commit_part_to_json(const struct commit_part *p, json_t **out)
{
	json_t *f = json_array(), *t = json_array(), *b = json_array(), *o;
	int bad = !f || !t || !b;

	for (size_t i = 0; !bad && i < p->nfiles; i++) {
		const struct mfst_file *pf = &p->files[i];
		json_t *crc = json_array();
		uint64_t n = csum_count(pf->size, pf->chunk_size);
		for (uint64_t k = 0; crc && k < n; k++)
			if (json_array_append_new(crc, json_integer(pf->crc32c[k])) < 0) {
				json_decref(crc);
				crc = NULL;
			}
		/* the digest's key as a sixth element when it is not SHA-256 */
		bad = !crc || json_array_append_new(f, pf->digest.alg == DIGEST_SHA256 ?
				json_pack("[sIsIo]", pf->path, (json_int_t)pf->size,
					  pf->digest.hex, (json_int_t)pf->chunk_size, crc) :
				json_pack("[sIsIos]", pf->path, (json_int_t)pf->size,
					  pf->digest.hex, (json_int_t)pf->chunk_size, crc,
					  digest_key(pf->digest.alg))) < 0;
	}
	for (size_t i = 0; !bad && i < p->ntensors; i++) {
		const struct mfst_tensor *x = &p->tensors[i];
		json_t *shape = json_array();
		for (int d = 0; shape && d < x->ndim; d++)
			if (json_array_append_new(shape, json_integer(x->shape[d])) < 0) {
				json_decref(shape);
				shape = NULL;
			}
		bad = !shape || json_array_append_new(t, json_pack("[ssIsoII]", x->group,
				x->name, (json_int_t)x->file, x->dtype, shape,
				(json_int_t)x->begin, (json_int_t)x->end)) < 0;
	}
	for (size_t i = 0; !bad && i < p->nblobs; i++)
		bad = json_array_append_new(b, json_pack("[sI]", p->blobs[i].name,
					    (json_int_t)p->blobs[i].file)) < 0;
	if (bad) {
		json_decref(f);
		json_decref(t);
		json_decref(b);
		return -ENOMEM;
	}
	o = json_pack("{sisososo sI}", "rank", p->rank, "files", f, "tensors", t, "blobs", b,
		      "written", (json_int_t)p->bytes_written);
	if (!o)
		return -ENOMEM;
	if (p->npieces) {
		json_t *pc = pieces_json(p);
		if (!pc || json_object_set_new(o, "pieces", pc) < 0) {
			json_decref(o);
			return -ENOMEM;
		}
	}
	*out = o;
	return 0;
}

/* A relative path of whitelisted components (no "..", no leading '/'). */
static int path_ok(const char *path)
{
	char buf[LAYOUT_PATH_MAX];
	char *save = NULL, *c;
	int n = 0;

	if (!path || !*path || strlen(path) >= sizeof(buf) || path[0] == '/')
		return 0;
	snprintf(buf, sizeof(buf), "%s", path);
	for (c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save), n++)
		if (name_check(c, NAME_MAX_BLOB, NULL, 0) < 0)
			return 0;
	return n > 0 && n <= 4;
}

/* A file's digest on the wire: hex, and the key of its algorithm (NULL:
 * SHA-256).  0, or -1 when either is malformed. */
static int digest_from(const char *hex, const json_t *key, struct digest *d)
{
	int alg = key ? digest_by_key(json_string_value(key)) : DIGEST_SHA256;

	if (alg < 0 || !hex || strlen(hex) != digest_hex_len(alg))
		return -1;
	d->alg = alg;
	memcpy(d->hex, hex, digest_hex_len(alg) + 1);
	return digest_valid(d) ? 0 : -1;
}

static int bad(char *msg, size_t msglen, const char *what, size_t i)
{
	return errbuf_fail(msg, msglen, -EINVAL, "malformed part: %s %zu", what, i);
}

int commit_part_from_json(const json_t *o, struct commit_part **out,
			  char *msg, size_t msglen)
{
	const json_t *jf = json_object_get(o, "files"), *jt = json_object_get(o, "tensors");
	const json_t *jb = json_object_get(o, "blobs"), *jr = json_object_get(o, "rank");
	const json_t *jp = json_object_get(o, "pieces"), *jw = json_object_get(o, "written");
	struct commit_part *p;
	json_t *e;
	size_t i;
	int r = -EINVAL;

	if (!json_is_integer(jr) || json_integer_value(jr) < 0 ||
	    json_integer_value(jr) > 0x7fffffff || !json_is_array(jf) ||
	    !json_is_array(jt) || !json_is_array(jb) || (jp && !json_is_array(jp)) ||
	    (jw && (!json_is_integer(jw) || json_integer_value(jw) < 0))) {
		snprintf(msg, msglen, "malformed part: rank, files, tensors, blobs or written");
		return -EINVAL;
	}
	p = part_alloc((int)json_integer_value(jr), json_array_size(jf),
		       json_array_size(jt), json_array_size(jb), jp ? json_array_size(jp) : 0);
	if (!p) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	p->bytes_written = jw ? (uint64_t)json_integer_value(jw) : 0;
	json_array_foreach(jf, i, e) {
		struct mfst_file *f = &p->files[i];
		const char *path = json_string_value(json_array_get(e, 0));
		const char *hex = json_string_value(json_array_get(e, 2));
		json_t *size = json_array_get(e, 1), *cs = json_array_get(e, 3);
		json_t *crc = json_array_get(e, 4), *c;
		size_t k;
		if (json_array_size(e) < 5 || json_array_size(e) > 6 || !path_ok(path) ||
		    digest_from(hex, json_array_get(e, 5), &f->digest) < 0 ||
		    !json_is_integer(size) || json_integer_value(size) < 0 ||
		    !json_is_integer(cs) || json_integer_value(cs) < 0 || !json_is_array(crc) ||
		    json_array_size(crc) != csum_count((uint64_t)json_integer_value(size),
						       (uint64_t)json_integer_value(cs))) {
			r = bad(msg, msglen, "file", i);
			goto out_free;
		}
		if (!(f->path = strdup(path)))
			goto out_nomem;
		f->size = (uint64_t)json_integer_value(size);
		if (!jw)                     /* a part without it wrote every file */
			p->bytes_written += f->size;
		f->chunk_size = (uint64_t)json_integer_value(cs);
		if (f->chunk_size && !(f->crc32c = calloc(json_array_size(crc) + 1, sizeof(uint32_t))))
			goto out_nomem;
		json_array_foreach(crc, k, c) {
			if (!json_is_integer(c) || json_integer_value(c) < 0 ||
			    json_integer_value(c) > UINT32_MAX) {
				r = bad(msg, msglen, "file", i);
				goto out_free;
			}
			f->crc32c[k] = (uint32_t)json_integer_value(c);
		}
	}
	json_array_foreach(jt, i, e) {
		struct mfst_tensor *t = &p->tensors[i];
		const char *group = json_string_value(json_array_get(e, 0));
		const char *name = json_string_value(json_array_get(e, 1));
		const char *dtype = json_string_value(json_array_get(e, 3));
		json_t *file = json_array_get(e, 2), *shape = json_array_get(e, 4), *dim;
		json_t *begin = json_array_get(e, 5), *end = json_array_get(e, 6);
		size_t d;
		if (json_array_size(e) != 7 || !group || !name || !dtype ||
		    name_check(group, NAME_MAX_GROUP, NULL, 0) < 0 ||
		    name_check_tensor(name, NULL, 0) < 0 || strlen(dtype) >= sizeof(t->dtype) ||
		    !json_is_integer(file) || json_integer_value(file) < 0 ||
		    (size_t)json_integer_value(file) >= p->nfiles || !json_is_array(shape) ||
		    json_array_size(shape) > SAFET_MAX_NDIM || !json_is_integer(begin) ||
		    !json_is_integer(end) || json_integer_value(begin) < 0 ||
		    json_integer_value(end) < json_integer_value(begin)) {
			r = bad(msg, msglen, "tensor", i);
			goto out_free;
		}
		if (!(t->group = strdup(group)) || !(t->name = strdup(name)))
			goto out_nomem;
		t->rank = p->rank;
		t->file = (size_t)json_integer_value(file);
		snprintf(t->dtype, sizeof(t->dtype), "%s", dtype);
		t->ndim = (int)json_array_size(shape);
		json_array_foreach(shape, d, dim) {
			if (!json_is_integer(dim) || json_integer_value(dim) < 0) {
				r = bad(msg, msglen, "tensor", i);
				goto out_free;
			}
			t->shape[d] = json_integer_value(dim);
		}
		t->begin = (uint64_t)json_integer_value(begin);
		t->end = (uint64_t)json_integer_value(end);
	}
	json_array_foreach(jb, i, e) {
		const char *name = json_string_value(json_array_get(e, 0));
		json_t *file = json_array_get(e, 1);
		if (json_array_size(e) != 2 || !name ||
		    name_check(name, NAME_MAX_BLOB, NULL, 0) < 0 || !json_is_integer(file) ||
		    json_integer_value(file) < 0 ||
		    (size_t)json_integer_value(file) >= p->nfiles) {
			r = bad(msg, msglen, "blob", i);
			goto out_free;
		}
		if (!(p->blobs[i].name = strdup(name)))
			goto out_nomem;
		p->blobs[i].rank = p->rank;
		p->blobs[i].file = (size_t)json_integer_value(file);
	}
	if (jp && (r = pieces_from(jp, p)) < 0) {
		if (r == -ENOMEM)
			goto out_nomem;
		r = bad(msg, msglen, "piece", 0);
		goto out_free;
	}
	*out = p;
	return 0;
out_nomem:
	snprintf(msg, msglen, "out of memory");
	r = -ENOMEM;
out_free:
	commit_part_free(p);
	return r;
}

/* --- manifest ----------------------------------------------------------- */

void commit_manifest_release(struct mfst *m)
{
	gtab_release(m);
	free(m->files);
	free(m->tensors);
	free(m->blobs);
	m->files = NULL;
	m->tensors = NULL;
	m->blobs = NULL;
}

int commit_manifest(const struct commit_step *cs, struct mfst *m, char *msg, size_t msglen)
{
	size_t nf = 0, nt = 0, nb = 0, *base_of = NULL;
	int r;

	memset(m, 0, sizeof(*m));
	for (int r = 0; r < cs->world_size; r++) {
		const struct commit_part *p = cs->parts[r];
		if (!p || p->rank != r) {
			snprintf(msg, msglen, "rank %d has no part", r);
			return -EINVAL;
		}
		nf += p->nfiles;
		nt += p->ntensors;
		nb += p->nblobs;
	}
	m->files = calloc(nf + 1, sizeof(*m->files));
	m->tensors = calloc(nt + 1, sizeof(*m->tensors));
	m->blobs = calloc(nb + 1, sizeof(*m->blobs));
	base_of = calloc((size_t)cs->world_size + 1, sizeof(*base_of));
	if (!m->files || !m->tensors || !m->blobs || !base_of) {
		free(base_of);
		commit_manifest_release(m);
		snprintf(msg, msglen, "out of memory building the manifest");
		return -ENOMEM;
	}
	m->format_version = 2;       /* 3 or 4 only if a file needs it (mfst.h) */
	snprintf(m->status, sizeof(m->status), "committed");
	m->job = (char *)cs->job;
	memcpy(m->run_id, cs->run_id, 33);
	memcpy(m->txid, cs->txid, 33);
	m->step = cs->step;
	m->world_size = cs->world_size;
	m->created_unix = (int64_t)time(NULL);
	for (int r = 0; r < cs->world_size; r++) {
		const struct commit_part *p = cs->parts[r];
		size_t base = m->nfiles;
		base_of[r] = base;
		m->bytes_written += p->bytes_written;
		for (size_t i = 0; i < p->nfiles; i++) {
			if (p->files[i].digest.alg != DIGEST_SHA256 && m->format_version < 3)
				m->format_version = 3;
			if (layout_frozen_shard(p->files[i].path))
				m->format_version = 4;
			m->files[m->nfiles++] = p->files[i];
		}
		for (size_t i = 0; i < p->ntensors; i++) {
			struct mfst_tensor *t = &m->tensors[m->ntensors++];
			*t = p->tensors[i];
			t->rank = r;
			t->file += base;
		}
		for (size_t i = 0; i < p->nblobs; i++) {
			struct mfst_blob *b = &m->blobs[m->nblobs++];
			*b = p->blobs[i];
			b->rank = r;
			b->file += base;
		}
	}
	r = gtab_build(cs, base_of, m, msg, msglen);
	free(base_of);
	if (r < 0)
		commit_manifest_release(m);
	return r;
}

/* --- publish ------------------------------------------------------------ */

int commit_check_files(int stagingfd, const struct commit_step *cs, char *msg, size_t msglen)
{
	for (int r = 0; r < cs->world_size; r++) {
		const struct commit_part *p = cs->parts[r];
		for (size_t i = 0; p && i < p->nfiles; i++) {
			const struct mfst_file *f = &p->files[i];
			struct stat st;
			if (fstatat(stagingfd, f->path, &st, AT_SYMLINK_NOFOLLOW) < 0) {
				int e = errno;
				snprintf(msg, msglen, "file %s of rank %d is gone: %s", f->path,
					 r, strerror(e));
				return -e;
			}
			if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->size) {
				snprintf(msg, msglen, "file %s of rank %d changed: %llu bytes, "
					 "%llu reported", f->path, r,
					 (unsigned long long)st.st_size,
					 (unsigned long long)f->size);
				return -EIO;
			}
		}
	}
	return 0;
}

int commit_publish(int jobfd, int stagingfd, const char *staging_name,
		   const struct commit_step *cs, enum commit_outcome *outcome,
		   char *msg, size_t msglen)
{
	char why[384] = "";
	struct mfst m;
	int renamed = 0, r;

	r = commit_manifest(cs, &m, why, sizeof(why));
	if (r == 0) {
		r = commit_check_files(stagingfd, cs, why, sizeof(why));
		if (r == 0)
			r = store_publish(jobfd, stagingfd, staging_name, &m, &renamed,
					  why, sizeof(why));
		commit_manifest_release(&m);
	}
	if (r == 0) {
		*outcome = COMMIT_OK;
		remote_committed(cs->job, cs->step);    /* queued before any prune */
		return 0;
	}
	/* after the rename the checkpoint is visible but maybe not synced:
	 * not "not saved"; start-up recovery decides */
	*outcome = renamed ? COMMIT_UNKNOWN : COMMIT_FAILED;
	snprintf(msg, msglen, "%s: %s", renamed ? "outcome unknown after publish" :
		 "publish failed", why);
	return r;
}

int commit_held(void *job, uint64_t step)
{
	return remote_held(job, step);
}

struct prune_keep {
	const char *job;
	uint64_t    committed;
};

/* Beyond keep_last, a step still being uploaded or the one just
 * committed (its clients were told it is saved) stays. */
static int prune_keeps(void *arg, uint64_t step)
{
	const struct prune_keep *k = arg;

	return step == k->committed || commit_held((void *)k->job, step);
}

int commit_prune(int jobfd, const char *job, const char *run_id, unsigned keep,
		 uint64_t committed)
{
	struct prune_keep k = { job, committed };
	uint64_t *pruned = NULL;
	int n = store_prune_held(jobfd, run_id, keep, prune_keeps, &k, &pruned);

	if (n < 0)
		log_warnx("job %s: prune (keep_last %u): %s", job, keep, strerror(-n));
	for (int i = 0; i < n; i++)
		log_info("job %s: pruned iter_%09llu (keep_last %u)", job,
			 (unsigned long long)pruned[i], keep);
	free(pruned);
	return n;
}
