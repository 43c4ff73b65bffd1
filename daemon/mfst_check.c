/* mfst_check.c - what a valid manifest is: whitelisted paths, hex fields,
 * ranks below world_size, indexes in range, extents that match dtype and
 * shape, nothing twice.  Checked before every write and after every parse
 * (mfst.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "errbuf.h"
#include "layout.h"
#include "mfst.h"
#include "mfst_int.h"
#include "mfst_v2.h"
#include "names.h"
#include "nidx.h"

#define SHARD_SUFFIX   ".safetensors"
#define EXTRA_PREFIX   "extra/rank_"

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
	int         frozen;      /* shard: rank_NNNNN.frozen.safetensors */
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

#define PATH_FORM "must be <group>/rank_NNNNN[.frozen].safetensors or extra/rank_NNNNN/<blob>"

/* 0, or -1 with what is wrong in why. */
int mfst_object_step(const struct mfst *m, const struct mfst_file *f, uint64_t *step)
{
	char iter[LAYOUT_ITER_LEN + 1];
	const char *slash = f->object ? strchr(f->object, '/') : NULL;

	if (!slash || (size_t)(slash - f->object) != LAYOUT_ITER_LEN ||
	    strcmp(slash + 1, f->path))
		return -EINVAL;
	memcpy(iter, f->object, LAYOUT_ITER_LEN);
	iter[LAYOUT_ITER_LEN] = '\0';
	if (layout_iter_parse(iter, step) < 0 || *step >= m->step)
		return -EINVAL;
	return 0;
}

static int path_classify(const char *path, struct path_info *pi,
			 char *why, size_t whylen)
{
	const char *slash = strchr(path, '/');
	size_t plen = strlen(path);
	char group[NAME_MAX_GROUP + 1];
	const char *rest;

	if (path[0] == '/') {
		snprintf(why, whylen, "is an absolute path; %s", PATH_FORM);
		return -1;
	}
	if (!slash)
		goto bad_form;
	rest = slash + 1;
	/* extra/rank_NNNNN/<blob> */
	if (strncmp(path, EXTRA_PREFIX, strlen(EXTRA_PREFIX)) == 0 &&
	    plen > strlen(EXTRA_PREFIX) + 6 &&
	    path[strlen(EXTRA_PREFIX) + 5] == '/') {
		if (rank5(path + strlen(EXTRA_PREFIX), &pi->rank) < 0)
			goto bad_form;
		pi->blob = path + strlen(EXTRA_PREFIX) + 6;
		if (name_check(pi->blob, NAME_MAX_BLOB, why, whylen) < 0)
			return -1;
		pi->kind = PATH_BLOB;
		pi->group_len = 0;
		return 0;
	}
	/* <group>/rank_NNNNN.safetensors */
	if ((size_t)(slash - path) > NAME_MAX_GROUP)
		goto bad_form;
	memcpy(group, path, (size_t)(slash - path));
	group[slash - path] = '\0';
	if (name_check(group, NAME_MAX_GROUP, why, whylen) < 0)
		return -1;
	if (strncmp(rest, "rank_", 5) != 0 || strlen(rest) < 10 || rank5(rest + 5, &pi->rank) < 0)
		goto bad_form;
	pi->frozen = strcmp(rest + 10, LAYOUT_FROZEN_SUFFIX) == 0;
	if (!pi->frozen && strcmp(rest + 10, SHARD_SUFFIX) != 0)
		goto bad_form;
	pi->kind = PATH_SHARD;
	pi->group_len = (size_t)(slash - path);
	pi->blob = NULL;
	return 0;
bad_form:
	snprintf(why, whylen, "%s", PATH_FORM);
	return -1;
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

struct same_tensor {
	const struct mfst *m;
	size_t i;
};

static int same_tensor(void *ctx, size_t pos)
{
	const struct same_tensor *c = ctx;
	const struct mfst_tensor *a = &c->m->tensors[c->i], *b = &c->m->tensors[pos];

	return a->rank == b->rank && !strcmp(a->name, b->name) && !strcmp(a->group, b->group);
}

/* Tensor i's (group, rank, name) into x, hashed (a manifest may list
 * 100,000: no key strings built): 1 if already there, 0, -1 out of memory. */
static int tensor_add(struct nidx *x, const struct mfst *m, size_t i)
{
	const struct mfst_tensor *t = &m->tensors[i];
	struct same_tensor c = { m, i };
	uint64_t h = nidx_hash(t->group, t->name) ^ ((uint64_t)t->rank * 0x9e3779b97f4a7c15ull);

	if (nidx_find(x, h, same_tensor, &c) >= 0)
		return 1;
	return nidx_put(x, h, i) < 0 ? -1 : 0;
}

int mfst__validate(const struct mfst *m, char *err, size_t errlen)
{
	struct path_info *pi = NULL;
	json_t *set = NULL;
	struct nidx seen = { 0 };   /* the tensors' keys */
	char why[96];
	char key[NAME_MAX_GROUP + NAME_MAX_TENSOR + 16];
	uint64_t ostep;
	int ret = -EINVAL;

	if (m->format_version < 1 || m->format_version > MFST_VERSION)
		return errbuf_fail(err, errlen, -EINVAL, "format_version %d is not supported "
				   "(this ckpt reads 1..%d)", m->format_version,
				   MFST_VERSION);
	if (strnlen(m->status, sizeof(m->status)) == 0 ||
	    strnlen(m->status, sizeof(m->status)) == sizeof(m->status) ||
	    strspn(m->status, "abcdefghijklmnopqrstuvwxyz_") != strlen(m->status))
		return errbuf_fail(err, errlen, -EINVAL, "status: must be 1..15 of [a-z_]");
	if (name_check(m->job, NAME_MAX_JOB, why, sizeof(why)) < 0)
		return errbuf_fail(err, errlen, -EINVAL, "job: %s", why);
	if (!is_hex(m->run_id, 32))
		return errbuf_fail(err, errlen, -EINVAL, "run_id: must be 32 lowercase hex digits");
	if (!is_hex(m->txid, 32))
		return errbuf_fail(err, errlen, -EINVAL, "txid: must be 32 lowercase hex digits");
	if (m->step > INT64_MAX)
		return errbuf_fail(err, errlen, -EINVAL, "step: out of range");
	if (m->world_size < 1 || m->world_size > MFST_MAX_WORLD)
		return errbuf_fail(err, errlen, -EINVAL, "world_size: must be 1..%d",
				   MFST_MAX_WORLD);
	if ((m->nfiles && !m->files) || (m->ntensors && !m->tensors) ||
	    (m->nblobs && !m->blobs))
		return errbuf_fail(err, errlen, -EINVAL, "missing arrays");

	pi = calloc(m->nfiles ? m->nfiles : 1, sizeof(*pi));
	set = json_object();
	if (!pi || !set) {
		ret = -ENOMEM;
		errbuf_fail(err, errlen, -EINVAL, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct mfst_file *f = &m->files[i];

		if (!f->path || path_classify(f->path, &pi[i], why, sizeof(why)) < 0) {
			errbuf_fail(err, errlen, -EINVAL, "files[%zu].path: %s", i,
				    f->path ? why : "missing");
			goto out;
		}
		if (pi[i].frozen && m->format_version < 4) {
			errbuf_fail(err, errlen, -EINVAL, "files[%zu].path: a frozen shard needs "
				    "format_version 4 (this manifest is %d)", i, m->format_version);
			goto out;
		}
		if (pi[i].rank >= m->world_size) {
			errbuf_fail(err, errlen, -EINVAL,
				    "files[%zu].path: rank %d >= world_size %d",
				    i, pi[i].rank, m->world_size);
			goto out;
		}
		if (f->size > INT64_MAX) {
			errbuf_fail(err, errlen, -EINVAL, "files[%zu].size: out of range", i);
			goto out;
		}
		if (f->digest.alg < 0 || f->digest.alg >= DIGEST_NALGS) {
			errbuf_fail(err, errlen, -EINVAL, "files[%zu]: unknown digest", i);
			goto out;
		}
		if (!digest_valid(&f->digest)) {
			errbuf_fail(err, errlen, -EINVAL,
				    "files[%zu].%s: must be %zu lowercase hex digits", i,
				    digest_key(f->digest.alg), digest_hex_len(f->digest.alg));
			goto out;
		}
		if (f->digest.alg != DIGEST_SHA256 && m->format_version < 3) {
			errbuf_fail(err, errlen, -EINVAL, "files[%zu].%s: needs format_version "
				    "3 (this manifest is %d)", i, digest_key(f->digest.alg),
				    m->format_version);
			goto out;
		}
		if (f->object && mfst_object_step(m, f, &ostep) < 0) {
			errbuf_fail(err, errlen, -EINVAL, "files[%zu].object: must be "
				    "\"iter_N/%s\", N before step %llu", i, f->path,
				    (unsigned long long)m->step);
			goto out;
		}
		switch (set_add(set, f->path)) {
		case 1:
			errbuf_fail(err, errlen, -EINVAL,
				    "files[%zu].path: duplicate '%s'", i, f->path);
			goto out;
		case -1:
			ret = -ENOMEM;
			errbuf_fail(err, errlen, -EINVAL, "out of memory");
			goto out;
		}
	}
	json_object_clear(set);
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct mfst_tensor *t = &m->tensors[i];
		const struct path_info *p;
		size_t esize;
		uint64_t nb = 0;

		if (name_check(t->group, NAME_MAX_GROUP, why, sizeof(why)) < 0) {
			errbuf_fail(err, errlen, -EINVAL, "tensors[%zu].group: %s", i, why);
			goto out;
		}
		if (name_check_tensor(t->name, why, sizeof(why)) < 0) {
			errbuf_fail(err, errlen, -EINVAL, "tensors[%zu].name: %s", i, why);
			goto out;
		}
		if (t->rank < 0 || t->rank >= m->world_size) {
			errbuf_fail(err, errlen, -EINVAL,
				    "tensors[%zu].rank: %d out of range", i, t->rank);
			goto out;
		}
		if (t->file >= m->nfiles) {
			errbuf_fail(err, errlen, -EINVAL,
				    "tensors[%zu].file: index %zu out of range", i,
				    t->file);
			goto out;
		}
		p = &pi[t->file];
		if (p->kind != PATH_SHARD || p->rank != t->rank ||
		    strlen(t->group) != p->group_len ||
		    memcmp(t->group, m->files[t->file].path, p->group_len) != 0) {
			errbuf_fail(err, errlen, -EINVAL,
				    "tensors[%zu].file: '%s' is not the %s shard of rank %d",
				    i, m->files[t->file].path, t->group, t->rank);
			goto out;
		}
		esize = safet_dtype_size(t->dtype);
		if (!esize || strnlen(t->dtype, sizeof(t->dtype)) == sizeof(t->dtype)) {
			errbuf_fail(err, errlen, -EINVAL, "tensors[%zu].dtype: unknown", i);
			goto out;
		}
		if (t->ndim < 0 || t->ndim > SAFET_MAX_NDIM) {
			errbuf_fail(err, errlen, -EINVAL, "tensors[%zu].shape: at most %d dims", i,
				    SAFET_MAX_NDIM);
			goto out;
		}
		/* prod(shape) * esize without overflow; a zero dim wins. */
		nb = esize;
		for (int d = 0; d < t->ndim; d++) {
			if (t->shape[d] < 0) {
				errbuf_fail(err, errlen, -EINVAL,
					    "tensors[%zu].shape: negative dim", i);
				goto out;
			}
			if (t->shape[d] == 0)
				nb = 0;
		}
		for (int d = 0; nb && d < t->ndim; d++)
			if (__builtin_mul_overflow(nb, (uint64_t)t->shape[d], &nb) ||
			    nb > INT64_MAX) {
				errbuf_fail(err, errlen, -EINVAL,
					    "tensors[%zu].shape: too large", i);
				goto out;
			}
		if (t->begin > t->end || t->end > m->files[t->file].size) {
			errbuf_fail(err, errlen, -EINVAL, "tensors[%zu]: begin/end outside '%s'", i,
				    m->files[t->file].path);
			goto out;
		}
		if (t->end - t->begin != nb) {
			errbuf_fail(err, errlen, -EINVAL,
				    "tensors[%zu]: end-begin is %llu, dtype and shape need %llu",
				    i, (unsigned long long)(t->end - t->begin),
				    (unsigned long long)nb);
			goto out;
		}
		switch (tensor_add(&seen, m, i)) {
		case 1:
			errbuf_fail(err, errlen, -EINVAL,
				    "tensors[%zu]: duplicate tensor '%s' in %s rank %d",
				    i, t->name, t->group, t->rank);
			goto out;
		case -1:
			ret = -ENOMEM;
			errbuf_fail(err, errlen, -EINVAL, "out of memory");
			goto out;
		}
	}
	json_object_clear(set);
	for (size_t i = 0; i < m->nblobs; i++) {
		const struct mfst_blob *b = &m->blobs[i];
		const struct path_info *p;

		if (name_check(b->name, NAME_MAX_BLOB, why, sizeof(why)) < 0) {
			errbuf_fail(err, errlen, -EINVAL, "blobs[%zu].name: %s", i, why);
			goto out;
		}
		if (b->rank < 0 || b->rank >= m->world_size) {
			errbuf_fail(err, errlen, -EINVAL,
				    "blobs[%zu].rank: %d out of range", i, b->rank);
			goto out;
		}
		if (b->file >= m->nfiles) {
			errbuf_fail(err, errlen, -EINVAL,
				    "blobs[%zu].file: index %zu out of range", i,
				    b->file);
			goto out;
		}
		p = &pi[b->file];
		if (p->kind != PATH_BLOB || p->rank != b->rank ||
		    strcmp(p->blob, b->name) != 0) {
			errbuf_fail(err, errlen, -EINVAL,
				    "blobs[%zu].file: '%s' is not the path of blob '%s' of rank %d",
				    i, m->files[b->file].path, b->name, b->rank);
			goto out;
		}
		snprintf(key, sizeof(key), "%d/%s", b->rank, b->name);
		switch (set_add(set, key)) {
		case 1:
			errbuf_fail(err, errlen, -EINVAL,
				    "blobs[%zu]: duplicate blob '%s' of rank %d",
				    i, b->name, b->rank);
			goto out;
		case -1:
			ret = -ENOMEM;
			errbuf_fail(err, errlen, -EINVAL, "out of memory");
			goto out;
		}
	}
	ret = mfst__v2_validate(m, err, errlen);
out:
	nidx_release(&seen);
	json_decref(set);
	free(pi);
	return ret;
}
