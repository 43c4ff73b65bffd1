/* remote_bucket.c - see remote_xfer.h: what a job has in the bucket (its
 * steps listed, their manifests read and checked, unfinished multipart
 * uploads) and deleting a step's objects by the rule of what the steps
 * kept there name (objects uploaded once). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "mfst.h"
#include "names.h"
#include "remote_xfer.h"
#include "remote_xfer_int.h"

int xfer__job_key(const struct s3_target *t, const char *job, const char *rel,
		   char *buf, size_t len)
{
	char r[KEY_MAX];
	int n = snprintf(r, sizeof(r), "%s/%s", job, rel);
	if (n < 0 || (size_t)n >= sizeof(r))
		return -ENAMETOOLONG;
	return s3_key(t, r, buf, len);
}

int xfer__step_key(const struct s3_target *t, const char *job, uint64_t step,
		    const char *path, char *buf, size_t len)
{
	char iter[32], r[KEY_MAX];
	layout_iter_name(step, iter, sizeof(iter));
	snprintf(r, sizeof(r), "%s/%s", iter, path);
	return xfer__job_key(t, job, r, buf, len);
}

int xfer_manifest(struct s3_conn *c, const char *job, uint64_t step, struct mfst **out)
{
	char msg[320];
	int damaged, r;

	r = xfer_get_manifest(c, job, step, out, NULL, NULL, &damaged, msg, sizeof(msg));
	return r < 0 && r != -ENOENT && damaged ? -EINVAL : r;
}

int xfer_keep_add(struct xfer_keep *k, const struct mfst *m)
{
	for (size_t i = 0; i < m->nfiles; i++) {
		char **v;
		if (!m->files[i].object)
			continue;
		if (!(v = realloc(k->refs, (k->nrefs + 1) * sizeof(*v))))
			return -ENOMEM;
		k->refs = v;
		if (!(k->refs[k->nrefs] = strdup(m->files[i].object)))
			return -ENOMEM;
		k->nrefs++;
	}
	return 0;
}

void xfer_keep_release(struct xfer_keep *k)
{
	for (size_t i = 0; i < k->nrefs; i++)
		free(k->refs[i]);
	free(k->refs);
	k->refs = NULL;
	k->nrefs = 0;
}

/* May the object rel (of file f of m) go with m?  Its own unless a kept
 * step names it; another step's only with keep, when no kept step names
 * it and that step is not complete on the remote. */
static int may_delete(const struct mfst *m, const struct mfst_file *f, const char *rel,
		      const struct xfer_keep *keep)
{
	uint64_t owner;

	if (f->object && (!keep || mfst_object_step(m, f, &owner) < 0))
		return 0;
	for (size_t i = 0; keep && i < keep->nrefs; i++)
		if (!strcmp(keep->refs[i], rel))
			return 0;
	for (size_t i = 0; f->object && keep->l && i < keep->l->nsteps; i++)
		if (keep->l->steps[i].step == owner && keep->l->steps[i].complete)
			return 0;
	return 1;
}

int xfer_delete_files(struct s3_conn *c, const char *job, const struct mfst *m,
		      const struct mfst *except, const struct xfer_keep *keep)
{
	char key[KEY_MAX], rel[KEY_MAX], iter[32];
	int r;

	if (!except) {
		if ((r = xfer__step_key(s3_conn_target(c), job, m->step, MFST_NAME, key,
				  sizeof(key))) < 0 || ((r = s3_delete(c, key)) < 0 && r != -ENOENT))
			return r;
	}
	layout_iter_name(m->step, iter, sizeof(iter));
	for (size_t i = 0; i < m->nfiles; i++) {
		const struct mfst_file *f = &m->files[i];
		int named = 0;
		for (size_t k = 0; except && k < except->nfiles && !named; k++)
			named = strcmp(except->files[k].path, f->path) == 0;
		if (f->object)
			snprintf(rel, sizeof(rel), "%s", f->object);
		else
			snprintf(rel, sizeof(rel), "%s/%s", iter, f->path);
		if (named || !may_delete(m, f, rel, keep))
			continue;
		if ((r = xfer__job_key(s3_conn_target(c), job, rel, key, sizeof(key))) < 0 ||
		    ((r = s3_delete(c, key)) < 0 && r != -ENOENT))
			return r;
	}
	return 0;
}

/* --- listing ------------------------------------------------------------------ */

struct lister {
	struct xfer_list *l;
	size_t skip;          /* length of "<prefix>/<job>/" */
	int    r;
};

static struct xfer_step *list_step(struct xfer_list *l, uint64_t step)
{
	for (size_t i = 0; i < l->nsteps; i++)
		if (l->steps[i].step == step)
			return &l->steps[i];
	struct xfer_step *s = realloc(l->steps, (l->nsteps + 1) * sizeof(*s));
	if (!s)
		return NULL;
	l->steps = s;
	s = &l->steps[l->nsteps++];
	memset(s, 0, sizeof(*s));
	s->step = step;
	return s;
}

static int on_key(void *arg, const char *key, uint64_t size)
{
	struct lister *ls = arg;
	const char *rel = key + ls->skip, *slash;
	char iter[32];
	uint64_t step;

	if (strlen(key) <= ls->skip)
		return 0;
	slash = strchr(rel, '/');
	if (!slash || (size_t)(slash - rel) >= sizeof(iter))
		return 0;                 /* latest_checkpoint.txt, or not ours */
	memcpy(iter, rel, (size_t)(slash - rel));
	iter[slash - rel] = '\0';
	if (layout_iter_parse(iter, &step) < 0)
		return 0;
	struct xfer_step *s = list_step(ls->l, step);
	char **k = s ? realloc(s->keys, (s->nkeys + 1) * sizeof(*k)) : NULL;
	if (!k || !(k[s->nkeys] = strdup(key))) {
		if (k)
			s->keys = k;
		return -ENOMEM;
	}
	s->keys = k;
	s->nkeys++;
	s->bytes += size;
	if (strcmp(slash + 1, MFST_NAME) == 0)
		s->complete = 1;
	return 0;
}

static int cmp_step_desc(const void *a, const void *b)
{
	const struct xfer_step *x = a, *y = b;
	return x->step < y->step ? 1 : x->step > y->step ? -1 : 0;
}

int xfer_list(struct s3_conn *c, const char *job, struct xfer_list *out)
{
	struct lister ls = { .l = out };
	char prefix[KEY_MAX], key[KEY_MAX], *lbuf = NULL;
	size_t llen;
	int r;

	memset(out, 0, sizeof(*out));
	if ((r = xfer__job_key(s3_conn_target(c), job, "", prefix, sizeof(prefix))) < 0)
		return r;
	ls.skip = strlen(prefix);
	if ((r = s3_list(c, prefix, 0, on_key, &ls)) < 0) {
		xfer_list_release(out);
		return r;
	}
	qsort(out->steps, out->nsteps, sizeof(*out->steps), cmp_step_desc);
	/* latest unread is not "no latest": retention would delete its step */
	if ((r = xfer__job_key(s3_conn_target(c), job, LAYOUT_LATEST, key, sizeof(key))) < 0 ||
	    ((r = s3_get_buf(c, key, 64, &lbuf, &llen)) < 0 && r != -ENOENT && r != -EFBIG)) {
		xfer_list_release(out);
		return r;
	}
	if (r == 0) {
		lbuf[strcspn(lbuf, "\n")] = '\0';
		out->have_latest = layout_iter_parse(lbuf, &out->latest) == 0;
	}
	free(lbuf);
	return 0;
}

void xfer_list_release(struct xfer_list *l)
{
	for (size_t i = 0; i < l->nsteps; i++) {
		for (size_t k = 0; k < l->steps[i].nkeys; k++)
			free(l->steps[i].keys[k]);
		free(l->steps[i].keys);
	}
	free(l->steps);
	memset(l, 0, sizeof(*l));
}

struct jobs_acc { char **jobs; int n; size_t skip; };

static int on_job(void *arg, const char *key, uint64_t size)
{
	struct jobs_acc *a = arg;
	char name[NAME_MAX_JOB + 2];
	size_t len;

	if (size != UINT64_MAX || strlen(key) <= a->skip)
		return 0;
	len = strlen(key + a->skip);
	if (len < 2 || len > NAME_MAX_JOB + 1)
		return 0;
	memcpy(name, key + a->skip, len - 1);          /* "<job>/" */
	name[len - 1] = '\0';
	if (name_check(name, NAME_MAX_JOB, NULL, 0) < 0)
		return 0;
	char **j = realloc(a->jobs, (size_t)(a->n + 1) * sizeof(*j));
	if (!j)
		return -ENOMEM;
	a->jobs = j;
	if (!(j[a->n] = strdup(name)))
		return -ENOMEM;
	a->n++;
	return 0;
}

int xfer_list_jobs(struct s3_conn *c, char ***jobs)
{
	struct jobs_acc a = { 0 };
	char prefix[KEY_MAX];
	int r;

	if ((r = s3_key(s3_conn_target(c), "", prefix, sizeof(prefix))) < 0)
		return r;
	a.skip = strlen(prefix);
	if ((r = s3_list(c, prefix, 1, on_job, &a)) < 0) {
		for (int i = 0; i < a.n; i++)
			free(a.jobs[i]);
		free(a.jobs);
		return r;
	}
	*jobs = a.jobs;
	return a.n;
}

struct aborter { struct s3_conn *c; int n, r; };

static int on_upload(void *arg, const char *key, const char *id)
{
	struct aborter *a = arg;
	int r = s3_mpu_abort(a->c, key, id);
	if (r < 0)
		a->r = r;
	else
		a->n++;
	return 0;
}

int xfer_abort_uploads(struct s3_conn *c, const char *job, uint64_t step)
{
	struct aborter a = { .c = c };
	char prefix[KEY_MAX];
	int r;

	if ((r = xfer__step_key(s3_conn_target(c), job, step, "", prefix, sizeof(prefix))) < 0)
		return r;
	/* listed first, aborted after: no listing page changes under us */
	if ((r = s3_list_uploads(c, prefix, on_upload, &a)) < 0)
		return r;
	return a.r < 0 ? a.r : a.n;
}

int xfer_get_manifest(struct s3_conn *c, const char *job, uint64_t step,
		      struct mfst **out, char **raw, size_t *rawlen, int *damaged,
		      char *msg, size_t msglen)
{
	struct mfst *m = NULL;
	char key[KEY_MAX], err[256], *buf = NULL;
	size_t len = 0;
	int r;

	*damaged = 0;
	if ((r = xfer__step_key(s3_conn_target(c), job, step, MFST_NAME, key, sizeof(key))) < 0) {
		snprintf(msg, msglen, "%s", strerror(-r));
		return r;
	}
	if ((r = s3_get_buf(c, key, MFST_MAX_BYTES, &buf, &len)) < 0) {
		snprintf(msg, msglen, "%s", s3_conn_msg(c));
		*damaged = r == -ENOENT || r == -EFBIG;
		return r;
	}
	if (mfst_parse(buf, len, &m, err, sizeof(err)) < 0)
		snprintf(msg, msglen, "its manifest is not valid: %s", err);
	else if (m->step != step)
		snprintf(msg, msglen, "its manifest is not valid: it names step %llu",
			 (unsigned long long)m->step);
	else if (!m->job || strcmp(m->job, job) != 0)
		snprintf(msg, msglen, "its manifest is not valid: it names job '%.64s'",
			 m->job ? m->job : "");
	else
		msg[0] = '\0';
	if (msg[0]) {
		mfst_free(m);
		free(buf);
		*damaged = 1;
		return -EINVAL;
	}
	if (out)
		*out = m;
	else
		mfst_free(m);
	if (raw) {
		*raw = buf;
		*rawlen = len;
	} else {
		free(buf);
	}
	return 0;
}
