/* remote_xfer.c - one checkpoint up to the bucket or down from it (what
 * is in the bucket, and deleting it: remote_bucket.c). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fail.h"
#include "layout.h"
#include "log.h"
#include "mfst.h"
#include "names.h"
#include "remote_xfer.h"
#include "remote_xfer_int.h"
#include "digest.h"
#include "store.h"
#include "verify.h"

#define OWNER_NAME "owner.json"       /* <prefix>/<job>/owner.json */

/* --- upload ------------------------------------------------------------------ */

struct up {
	const struct s3_target *t;
	const volatile int *stop;
	int           dirfd;
	const char   *job;
	uint64_t      step, part_bytes;
	struct mfst  *m;              /* files with "object": not sent */
	atomic_size_t next;
	atomic_int    failed;
	pthread_mutex_t lock;
	char          msg[512];
	struct xfer_progress *pg;
};

static void up_fail(struct up *u, int r, const char *fmt, const char *a, const char *b)
{
	pthread_mutex_lock(&u->lock);
	if (!atomic_load(&u->failed)) {
		snprintf(u->msg, sizeof(u->msg), fmt, a, b);
		atomic_store(&u->failed, r);
	}
	pthread_mutex_unlock(&u->lock);
}

static int read_full(int fd, void *buf, size_t len, uint64_t off)
{
	for (size_t done = 0; done < len; ) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

/* One file: skip it when the remote has it already, else PUT or multipart.
 * The bytes sent are hashed on the way (the digest its manifest names) and
 * must be the manifest's. */
static int up_file(struct up *u, struct s3_conn *c, const struct mfst_file *f, void *buf)
{
	char key[KEY_MAX], id[512];
	char (*etags)[80] = NULL;
	uint64_t size, off = 0;
	struct digest there, got;
	struct digest_ctx sc;
	int fd, r, nparts = 0;

	if ((r = xfer__step_key(u->t, u->job, u->step, f->path, key, sizeof(key))) < 0)
		return r;
	if (s3_head(c, key, &size, &there) == 0 && size == f->size &&
	    digest_eq(&there, &f->digest)) {
		log_debug("remote: %s is there already", key);
		atomic_fetch_add(&u->pg->bytes_done, f->size);
		return 0;
	}
	fd = openat(u->dirfd, f->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		up_fail(u, r, "cannot open '%s': %s", f->path, strerror(errno));
		return r;
	}
	if ((r = digest_init(&sc, f->digest.alg)) < 0)
		goto out_close;
	if (f->size <= u->part_bytes) {
		if ((r = read_full(fd, buf, f->size, 0)) < 0)
			goto out_read;
		digest_update(&sc, buf, f->size);
		digest_final(&sc, &got);
		if (!digest_eq(&got, &f->digest))
			goto out_changed;
		if ((r = s3_put(c, key, buf, f->size, &f->digest)) < 0)
			goto out_s3;
		atomic_fetch_add(&u->pg->bytes_done, f->size);
		atomic_fetch_add(&u->pg->bytes_sent, f->size);
		goto out_close;
	}
	nparts = (int)((f->size + u->part_bytes - 1) / u->part_bytes);
	if (nparts > 10000 || !(etags = calloc((size_t)nparts, sizeof(*etags)))) {
		digest_release(&sc);
		r = nparts > 10000 ? -EFBIG : -ENOMEM;
		up_fail(u, r, "'%s': %s", f->path, nparts > 10000 ?
			"more than 10000 parts (raise remote.part_size)" : "out of memory");
		goto out_close;
	}
	if ((r = s3_mpu_create(c, key, &f->digest, id, sizeof(id))) < 0) {
		digest_release(&sc);
		goto out_s3;
	}
	for (int p = 0; p < nparts; p++, off += u->part_bytes) {
		size_t len = f->size - off < u->part_bytes ? f->size - off : u->part_bytes;
		if ((r = read_full(fd, buf, len, off)) < 0) {
			digest_release(&sc);
			s3_mpu_abort(c, key, id);
			goto out_read;
		}
		digest_update(&sc, buf, len);
		if ((r = s3_mpu_part(c, key, id, p + 1, buf, len, etags[p])) < 0) {
			digest_release(&sc);
			up_fail(u, r, "%s%s", s3_conn_msg(c), "");
			s3_mpu_abort(c, key, id);
			goto out_close;
		}
		atomic_fetch_add(&u->pg->bytes_done, len);
		atomic_fetch_add(&u->pg->bytes_sent, len);
		FAILPOINT("remote.part_uploaded");
	}
	digest_final(&sc, &got);
	if (!digest_eq(&got, &f->digest)) {
		s3_mpu_abort(c, key, id);
		goto out_changed;
	}
	r = s3_mpu_complete(c, key, id, etags, nparts);
	/* a retry after a reply that got lost: the first attempt completed it */
	if (r == -ENOENT && s3_head(c, key, &size, &there) == 0 && size == f->size &&
	    digest_eq(&there, &f->digest))
		r = 0;
	if (r < 0) {
		up_fail(u, r, "%s%s", s3_conn_msg(c), "");
		s3_mpu_abort(c, key, id);
	}
	goto out_close;

out_changed:
	r = -EBADMSG;
	up_fail(u, r, "'%s' changed on disk (its %s is not the manifest's)", f->path,
		digest_key(f->digest.alg));
	goto out_close;
out_read:
	up_fail(u, r, "cannot read '%s': %s", f->path, strerror(-r));
	goto out_close;
out_s3:
	up_fail(u, r, "%s%s", s3_conn_msg(c), "");
out_close:
	free(etags);
	close(fd);
	return r;
}

static void *up_thread(void *arg)
{
	struct up *u = arg;
	struct s3_conn *c = NULL;
	void *buf = malloc(u->part_bytes);
	size_t i;

	if (!buf || s3_conn_new(u->t, u->stop, &c) < 0) {
		up_fail(u, -ENOMEM, "out of memory%s%s", "", "");
		goto out;
	}
	while (!atomic_load(&u->failed) && !*u->stop &&
	       (i = atomic_fetch_add(&u->next, 1)) < u->m->nfiles) {
		if (u->m->files[i].object)
			continue;
		if (up_file(u, c, &u->m->files[i], buf) < 0)
			break;
		FAILPOINT("remote.file_uploaded");
	}
	atomic_fetch_add(&u->pg->retries, s3_conn_retries(c));
out:
	s3_conn_free(c);
	free(buf);
	return NULL;
}

/* --- files the remote has from an older step ------------------------------- */

/* The remote's newest complete step of job before step: 0 with *prev
 * (its manifest; NULL when there is none, or it is not one ckptd reads),
 * or -errno. */
static int prev_manifest(struct s3_conn *c, const char *job, uint64_t step,
			 struct mfst **prev)
{
	struct xfer_list l;
	int r = xfer_list(c, job, &l);

	*prev = NULL;
	if (r < 0)
		return r;
	for (size_t i = 0; i < l.nsteps; i++)        /* newest first */
		if (l.steps[i].complete && l.steps[i].step < step) {
			r = xfer_manifest(c, job, l.steps[i].step, prev);
			if (r == -ENOENT || r == -EINVAL)
				r = 0;                  /* (then every file goes up) */
			break;
		}
	xfer_list_release(&l);
	return r;
}

/* Each file of m that prev has (same path, size and digest), in an object
 * that is there with that size and digest: named in m ("object"), not
 * uploaded.  The bytes so referenced, or -errno (the bucket failed). */
static int64_t refer(struct s3_conn *c, const char *job, struct mfst *m,
		     const struct mfst *prev)
{
	char rel[KEY_MAX], key[KEY_MAX], iter[32];
	struct digest there;
	uint64_t size, ostep;
	int64_t bytes = 0;
	int r;

	for (size_t i = 0; prev && i < m->nfiles; i++) {
		struct mfst_file *f = &m->files[i];
		const struct mfst_file *pf = NULL;

		for (size_t k = 0; k < prev->nfiles && !pf; k++)
			if (!strcmp(prev->files[k].path, f->path))
				pf = &prev->files[k];
		if (!pf || pf->size != f->size || !digest_eq(&pf->digest, &f->digest))
			continue;
		if (mfst_object_step(prev, pf, &ostep) == 0)       /* no chains */
			snprintf(rel, sizeof(rel), "%s", pf->object);
		else if (layout_iter_name(prev->step, iter, sizeof(iter)) < 0 ||
			 snprintf(rel, sizeof(rel), "%s/%s", iter, f->path) >= (int)sizeof(rel))
			continue;
		if ((r = xfer__job_key(s3_conn_target(c), job, rel, key, sizeof(key))) < 0)
			continue;
		r = s3_head(c, key, &size, &there);
		if (r < 0 && r != -ENOENT)
			return r;
		if (r < 0 || size != f->size || !digest_eq(&there, &f->digest))
			continue;               /* gone or not the same: uploaded */
		if (!(f->object = strdup(rel)))
			return -ENOMEM;
		bytes += (int64_t)f->size;
	}
	return bytes;
}

/* Read dirfd/checkpoint_manifest.json as it is (its bytes go up as such). */
static int read_manifest(int dirfd, char **out, size_t *len)
{
	struct stat st;
	char *buf;
	int fd = openat(dirfd, MFST_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), r;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > MFST_MAX_BYTES) {
		close(fd);
		return -EINVAL;
	}
	if (!(buf = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return -ENOMEM;
	}
	r = read_full(fd, buf, (size_t)st.st_size, 0);
	close(fd);
	if (r < 0) {
		free(buf);
		return r;
	}
	*out = buf;
	*len = (size_t)st.st_size;
	return 0;
}

/* PUT body with its SHA-256 as metadata (a manifest or a pointer: small,
 * and no manifest names a digest for it). */
static int put_hashed(struct s3_conn *c, const char *key, const void *body, size_t len)
{
	struct digest d;
	struct digest_ctx sc;
	int r = digest_init(&sc, DIGEST_SHA256);

	if (r < 0)
		return r;
	digest_update(&sc, body, len);
	digest_final(&sc, &d);
	return s3_put(c, key, body, len, &d);
}

int xfer_put_latest(struct s3_conn *c, const char *job, uint64_t step,
		    const char *run_id, int back)
{
	char key[KEY_MAX], line[32], *lbuf = NULL;
	uint64_t have = 0;
	size_t llen;
	int r;

	if ((r = xfer__job_key(s3_conn_target(c), job, LAYOUT_LATEST, key, sizeof(key))) < 0)
		return r;
	r = s3_get_buf(c, key, 64, &lbuf, &llen);
	if (r == 0) {
		lbuf[strcspn(lbuf, "\n")] = '\0';
		if (layout_iter_parse(lbuf, &have) < 0)
			have = 0;
		free(lbuf);
	} else if (r != -ENOENT) {
		return r;
	}
	if (r == 0 && have == step)
		return 0;
	if (r == 0 && have > step) {
		/* back only to follow a rollback of the same run: the step
		 * latest names was this run's and is gone here */
		struct mfst *m = NULL;
		int same;
		if (!back || !run_id)
			return 0;
		r = xfer_manifest(c, job, have, &m);
		if (r < 0 && r != -ENOENT && r != -EINVAL)
			return r;
		same = m && strcmp(m->run_id, run_id) == 0;
		mfst_free(m);
		if (!same && r == 0)
			return 0;               /* another run's (another cluster's) */
		if (!same)
			log_info("remote: job %s: latest named iter_%09llu, which has no valid "
				 "manifest there", job, (unsigned long long)have);
	}
	layout_iter_name(step, line, sizeof(line));
	strcat(line, "\n");
	r = put_hashed(c, key, line, strlen(line));
	return r < 0 ? r : 1;
}

/* The remote holds another checkpoint under this step number (a local
 * rollback, then the step saved again): make it invisible (its manifest
 * first) before any file of ours replaces one of its files, and delete
 * its files ours do not overwrite. */
enum { THERE_ANY = 1, THERE_MANIFEST = 2 };

static int on_manifest_key(void *arg, const char *key, uint64_t size)
{
	size_t n = strlen(key), m = strlen(MFST_NAME);
	(void)size;
	*(int *)arg |= THERE_ANY;
	if (n > m && key[n - m - 1] == '/' && strcmp(key + n - m, MFST_NAME) == 0)
		*(int *)arg |= THERE_MANIFEST;
	return 0;
}

/* Does m name an object of one of the steps in gone (n of them)? */
static int names_gone(const struct mfst *m, const uint64_t *gone, size_t n)
{
	uint64_t owner;

	for (size_t i = 0; i < m->nfiles; i++)
		for (size_t k = 0; mfst_object_step(m, &m->files[i], &owner) == 0 && k < n; k++)
			if (gone[k] == owner)
				return 1;
	return 0;
}

/* Step's objects are about to be replaced: the complete steps that name
 * them (after it, abandoned by a rollback here) would read the new step's
 * bytes, so they go first, and so, in turn, do those naming theirs; then
 * old (the checkpoint there before, NULL: its manifest is gone), with the
 * objects it named that no remaining step names.  0 or -errno (a
 * manifest that cannot be read: nothing is deleted). */
static int delete_replaced(struct s3_conn *c, const char *job, uint64_t step,
			   const struct mfst *old)
{
	struct xfer_list l = { 0 };
	struct xfer_keep keep = { .l = &l };
	struct mfst **ms = NULL;
	uint64_t *gone = NULL;
	size_t n = 0, ngone = 1;
	int r = xfer_list(c, job, &l), more = 1;

	if (r == 0 && (!(ms = calloc(l.nsteps + 1, sizeof(*ms))) ||
		       !(gone = calloc(l.nsteps + 1, sizeof(*gone)))))
		r = -ENOMEM;
	for (size_t i = 0; r == 0 && i < l.nsteps; i++) {
		if (!l.steps[i].complete || l.steps[i].step == step)
			continue;
		if ((r = xfer_manifest(c, job, l.steps[i].step, &ms[n])) == 0)
			n++;
		else if (r == -EINVAL)
			r = 0;                      /* names nothing ckptd reads */
	}
	if (gone)
		gone[0] = step;
	while (r == 0 && more) {
		more = 0;
		for (size_t i = 0; i < n; i++)
			if (ms[i] && names_gone(ms[i], gone, ngone)) {
				gone[ngone++] = ms[i]->step;
				log_info("remote: job %s: iter_%09llu on the remote shares files with "
					 "the replaced iter_%09llu (a step abandoned by a rollback "
					 "here): deleted with it", job,
					 (unsigned long long)ms[i]->step, (unsigned long long)step);
				r = xfer_delete_files(c, job, ms[i], NULL, NULL);
				mfst_free(ms[i]);
				ms[i] = NULL;
				more = 1;
				break;
			}
	}
	for (size_t i = 0; r == 0 && i < n; i++)
		if (ms[i])
			r = xfer_keep_add(&keep, ms[i]);
	if (r == 0 && old)
		r = xfer_delete_files(c, job, old, NULL, &keep);
	for (size_t i = 0; ms && i < n; i++)
		mfst_free(ms[i]);
	free(ms);
	free(gone);
	xfer_keep_release(&keep);
	xfer_list_release(&l);
	return r;
}

static int replace_old(struct s3_conn *c, const char *job, const struct mfst *ours,
		       char *msg, size_t msglen)
{
	struct mfst *old = NULL;
	char iter[32], prefix[KEY_MAX];
	int r, there = 0;

	layout_iter_name(ours->step, iter, sizeof(iter));
	/* listed first: no request for a manifest that is not there */
	if ((r = xfer__step_key(s3_conn_target(c), job, ours->step, "", prefix, sizeof(prefix))) < 0 ||
	    (r = s3_list(c, prefix, 0, on_manifest_key, &there)) < 0) {
		snprintf(msg, msglen, "%s", s3_conn_msg(c)[0] ? s3_conn_msg(c) : strerror(-r));
		return r;
	}
	if (!there)
		return 0;
	r = there & THERE_MANIFEST ? xfer_manifest(c, job, ours->step, &old) : -ENOENT;
	if (r == 0 && strcmp(old->txid, ours->txid) == 0) {
		mfst_free(old);
		return 0;           /* ours, uploaded before: resumed */
	}
	if (r == -EINVAL)
		return 0;          /* not a manifest ckptd can read: ours replaces it */
	/* objects without their manifest (retention deleted it: kept for the
	 * steps that name them) are replaced too */
	if ((r == 0 || r == -ENOENT) && (r = delete_replaced(c, job, ours->step, old)) == 0 &&
	    old && (r = xfer_delete_files(c, job, old, ours, NULL)) == 0)
		log_info("remote: job %s: %s on the remote was another checkpoint "
			 "(txid %.8s..., this one %.8s...): deleted before the upload",
			 job, iter, old->txid, ours->txid);
	mfst_free(old);
	if (r < 0 && r != -ENOENT)
		snprintf(msg, msglen, "cannot replace the remote's older %s: %s", iter,
			 s3_conn_msg(c)[0] ? s3_conn_msg(c) : strerror(-r));
	return r;
}

/* Record the job's owner (its job.json's) next to its steps: a restore on
 * another node gives the job to that uid only. */
static int put_owner(struct s3_conn *c, int jobfd, const char *job)
{
	char key[KEY_MAX], body[64];
	uid_t owner;
	int r;

	if ((r = store_job_owner(jobfd, &owner)) < 0 ||
	    (r = xfer__job_key(s3_conn_target(c), job, OWNER_NAME, key, sizeof(key))) < 0)
		return r;
	snprintf(body, sizeof(body), "{\"owner_uid\": %u}\n", (unsigned)owner);
	return put_hashed(c, key, body, strlen(body));
}

int xfer_get_owner(struct s3_conn *c, const char *job, uid_t *owner)
{
	char key[KEY_MAX], *buf = NULL;
	json_t *j, *o;
	size_t len;
	int r;

	if ((r = xfer__job_key(s3_conn_target(c), job, OWNER_NAME, key, sizeof(key))) < 0 ||
	    (r = s3_get_buf(c, key, 4096, &buf, &len)) < 0)
		return r;
	j = json_loadb(buf, len, 0, NULL);
	o = json_object_get(j, "owner_uid");
	r = json_is_integer(o) && json_integer_value(o) >= 0 &&
	    json_integer_value(o) < (json_int_t)UINT32_MAX ? 0 : -EINVAL;
	if (r == 0)
		*owner = (uid_t)json_integer_value(o);
	json_decref(j);
	free(buf);
	return r;
}

int xfer_upload(const struct s3_target *t, const volatile int *stop, int jobfd,
		const char *job, uint64_t step, unsigned threads, uint64_t part_bytes,
		int share, struct xfer_progress *pg, xfer_begin_cb begin, void *arg,
		char *msg, size_t msglen)
{
	struct up u = { .t = t, .stop = stop, .job = job, .step = step,
			.part_bytes = part_bytes, .pg = pg };
	pthread_t tid[64];
	unsigned n = 0;
	char iter[32], key[KEY_MAX], err[256], *mbuf = NULL;
	size_t mlen = 0;
	struct s3_conn *c = NULL;
	struct mfst *prev = NULL;
	uint64_t *local = NULL;
	int64_t referenced = 0;
	int r, newest;

	pthread_mutex_init(&u.lock, NULL);
	layout_iter_name(step, iter, sizeof(iter));
	u.dirfd = openat(jobfd, iter, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (u.dirfd < 0) {
		r = -errno;
		snprintf(msg, msglen, "cannot open %s: %s", iter, strerror(errno));
		goto out;
	}
	/* what goes up is what verifies here: structure now, hashes on the way */
	if ((r = verify_checkpoint(u.dirfd, VERIFY_STRUCTURE, 0, &u.m, err, sizeof(err))) < 0 ||
	    (r = read_manifest(u.dirfd, &mbuf, &mlen)) < 0) {
		snprintf(msg, msglen, "%s does not verify: %s", iter,
			 u.m ? strerror(-r) : err);
		goto out;
	}
	for (size_t i = 0; i < u.m->nfiles; i++) {   /* (a remote's only) */
		free(u.m->files[i].object);
		u.m->files[i].object = NULL;
	}
	if ((r = s3_conn_new(t, stop, &c)) < 0) {
		snprintf(msg, msglen, "out of memory");
		goto out;
	}
	/* what the remote has already goes up as a reference: the manifest
	 * that goes up names those objects; when the bucket cannot say what
	 * it has, every file goes up */
	if (share && ((r = prev_manifest(c, job, step, &prev)) < 0 ||
		      (referenced = refer(c, job, u.m, prev)) < 0)) {
		log_warnx("remote: job %s: %s: cannot tell which files the remote has "
			  "already (%s): uploading all of them", job, iter,
			  s3_conn_msg(c)[0] ? s3_conn_msg(c) : strerror(r < 0 ? -r : (int)-referenced));
		for (size_t i = 0; i < u.m->nfiles; i++) {
			free(u.m->files[i].object);
			u.m->files[i].object = NULL;
		}
		referenced = 0;
	}
	if (referenced > 0) {
		free(mbuf);
		mbuf = NULL;
		if ((r = mfst_dump(u.m, &mbuf, &mlen)) < 0) {
			snprintf(msg, msglen, "out of memory");
			goto out;
		}
	}
	if (begin && (r = begin(arg, mbuf, mlen)) < 0) {
		snprintf(msg, msglen, "cannot record the upload in the journal: %s",
			 strerror(-r));
		goto out;
	}
	if ((r = replace_old(c, job, u.m, msg, msglen)) < 0)
		goto out;
	atomic_store(&pg->bytes_total, 0);
	for (size_t i = 0; i < u.m->nfiles; i++)
		atomic_fetch_add(&pg->bytes_total, u.m->files[i].size);
	atomic_fetch_add(&pg->bytes_total, mlen);
	atomic_fetch_add(&pg->bytes_done, (uint64_t)referenced);
	if (referenced > 0)
		log_info("remote: job %s: %s: %.1f MiB unchanged since iter_%09llu, not "
			 "uploaded again (referenced)", job, iter, (double)referenced / 1048576.0,
			 (unsigned long long)prev->step);

	if (threads > u.m->nfiles)
		threads = u.m->nfiles ? (unsigned)u.m->nfiles : 1;
	for (; n < threads && n < 64; n++)
		if (pthread_create(&tid[n], NULL, up_thread, &u) != 0)
			break;
	if (!n)
		up_fail(&u, -EAGAIN, "cannot start an upload thread%s%s", "", "");
	for (unsigned i = 0; i < n; i++)
		pthread_join(tid[i], NULL);
	if (*stop && !atomic_load(&u.failed))
		up_fail(&u, -ECANCELED, "stopped%s%s", "", "");
	if ((r = atomic_load(&u.failed)) < 0) {
		snprintf(msg, msglen, "%s", u.msg);
		goto out;
	}
	/* the commit marker: only now does the step exist on the remote */
	if ((r = xfer__step_key(t, job, step, MFST_NAME, key, sizeof(key))) < 0)
		goto out_msg;
	if ((r = put_owner(c, jobfd, job)) < 0) {
		snprintf(msg, msglen, "cannot record the job's owner: %s",
			 s3_conn_msg(c)[0] ? s3_conn_msg(c) : strerror(-r));
		goto out;
	}
	FAILPOINT("remote.before_manifest");
	if ((r = put_hashed(c, key, mbuf, mlen)) < 0)
		goto out_msg;
	atomic_fetch_add(&pg->bytes_done, mlen);
	atomic_fetch_add(&pg->bytes_sent, mlen);
	FAILPOINT("remote.after_manifest");
	/* latest follows the job's latest here: back too, after a rollback */
	newest = layout_list_steps(jobfd, &local) > 0 && local[0] == step;
	free(local);
	if ((r = xfer_put_latest(c, job, step, u.m->run_id, newest)) < 0)
		goto out_msg;
	r = 0;
	goto out;
out_msg:
	snprintf(msg, msglen, "%s", c && s3_conn_msg(c)[0] ? s3_conn_msg(c) : strerror(-r));
out:
	if (c)
		atomic_fetch_add(&pg->retries, s3_conn_retries(c));
	s3_conn_free(c);
	free(mbuf);
	mfst_free(prev);
	mfst_free(u.m);
	if (u.dirfd >= 0)
		close(u.dirfd);
	pthread_mutex_destroy(&u.lock);
	return r;
}

/* --- download ------------------------------------------------------------------ */

/* The complete steps to try, best first: want alone, or (want < 0) the
 * one the remote's latest names, then the others newest first.  *steps
 * malloc'd; -ENOENT with msg when there is none. */
static int pick_steps(struct s3_conn *c, const char *job, int64_t want, uint64_t **steps,
		      size_t *n, char *msg, size_t msglen)
{
	struct xfer_list l;
	uint64_t *v, latest;
	size_t k = 0;
	int r = xfer_list(c, job, &l), have_latest;

	if (r < 0) {
		snprintf(msg, msglen, "%s", s3_conn_msg(c));
		return r;
	}
	if (!(v = calloc(l.nsteps + 1, sizeof(*v)))) {
		xfer_list_release(&l);
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < l.nsteps; i++)         /* the latest first */
		if (l.steps[i].complete && want < 0 && l.have_latest &&
		    l.steps[i].step == l.latest)
			v[k++] = l.steps[i].step;
	for (size_t i = 0; i < l.nsteps; i++) {       /* then newest first */
		const struct xfer_step *s = &l.steps[i];
		if (!s->complete || (want >= 0 && s->step != (uint64_t)want) ||
		    (k && want < 0 && s->step == v[0]))
			continue;
		v[k++] = s->step;
	}
	have_latest = l.have_latest;
	latest = l.latest;
	xfer_list_release(&l);
	if (!k) {
		free(v);
		if (want >= 0)
			snprintf(msg, msglen, "job '%s' has no step %lld on the remote", job,
				 (long long)want);
		else if (have_latest)      /* it is written after a manifest */
			snprintf(msg, msglen, "job '%s' on the remote: its latest names "
				 "iter_%09llu, but no step there has its manifest (damaged)", job,
				 (unsigned long long)latest);
		else
			snprintf(msg, msglen, "job '%s' has no checkpoint on the remote", job);
		return want < 0 && have_latest ? -EUCLEAN : -ENOENT;
	}
	*steps = v;
	*n = k;
	return 0;
}

static int mkparents(int dirfd, const char *path)
{
	char dir[LAYOUT_PATH_MAX];
	const char *slash = strrchr(path, '/');

	if (!slash)
		return 0;
	if ((size_t)(slash - path) >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	return store_mkdirs(dirfd, dir);
}

/* jobfd/iter exists and fully verifies (else err says why). */
static int local_ok(int jobfd, const char *iter, char *err, size_t errlen)
{
	int dfd = openat(jobfd, iter, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), r;

	if (dfd < 0) {
		snprintf(err, errlen, "%s", strerror(errno));
		return 0;
	}
	r = verify_checkpoint(dfd, VERIFY_FULL, 2, NULL, err, errlen);
	close(dfd);
	return r == 0;
}

/* Download step and publish it here: 0 with *bytes, or -errno with msg
 * and *damaged set when the fault is the remote copy's (an object missing,
 * too long, not the manifest's, or the manifest not valid). */
static int download_step(struct s3_conn *c, const struct s3_target *t,
			 const volatile int *stop, int jobfd, const char *job, uint64_t step,
			 int world, uint64_t *bytes, int *damaged, int *unfit, char *msg,
			 size_t msglen)
{
	struct mfst *m = NULL;
	char key[KEY_MAX], txid[33], name[128], iter[32], err[256], *mbuf = NULL;
	size_t mlen = 0;
	uint64_t total = 0;
	int sfd = -1, r, renamed;

	msg[0] = '\0';
	*damaged = *unfit = 0;
	layout_iter_name(step, iter, sizeof(iter));
	if (local_ok(jobfd, iter, err, sizeof(err))) {    /* pulled meanwhile */
		*bytes = 0;
		return 0;
	}
	if ((r = xfer_get_manifest(c, job, step, &m, &mbuf, &mlen, damaged, msg,
				   msglen)) < 0)
		goto out;
	if (world > 0 && m->world_size != world && m->ntensors) {
		snprintf(msg, msglen, "saved by %d rank%s, with rank-local tensors: they restore "
			 "only into a job of that world size, this one has %d", m->world_size,
			 m->world_size == 1 ? "" : "s", world);
		*unfit = 1;
		r = -EINVAL;
		goto out;
	}
	store_new_id(txid);
	if ((r = store_staging_create(jobfd, step, txid, &sfd, name, sizeof(name))) < 0) {
		snprintf(msg, msglen, "cannot make a staging directory: %s", strerror(-r));
		goto out;
	}
	for (size_t i = 0; i < m->nfiles && !*stop; i++) {
		const struct mfst_file *f = &m->files[i];
		struct digest got;
		uint64_t size = 0;
		int fd;

		if ((r = mkparents(sfd, f->path)) < 0 ||
		    (fd = openat(sfd, f->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW |
				 O_CLOEXEC, 0640)) < 0) {
			r = r < 0 ? r : -errno;
			snprintf(msg, msglen, "cannot create '%s': %s", f->path, strerror(-r));
			goto out_remove;
		}
		r = f->object ? xfer__job_key(t, job, f->object, key, sizeof(key))
			      : xfer__step_key(t, job, step, f->path, key, sizeof(key));
		if (r == 0 && (r = s3_get_fd(c, key, fd, f->size, &size)) < 0) {
			snprintf(msg, msglen, "%s", s3_conn_msg(c));
			*damaged = r == -ENOENT || r == -EFBIG;
		}
		if (r == 0 && fsync(fd) < 0)
			r = -errno;
		/* the digest its manifest names, of what is now on disk */
		if (r == 0 && lseek(fd, 0, SEEK_SET) == 0 &&
		    (r = digest_fd_csum(fd, f->digest.alg, &got, &size, NULL)) == 0 &&
		    (size != f->size || !digest_eq(&got, &f->digest))) {
			r = -EBADMSG;
			*damaged = 1;
			snprintf(msg, msglen, "'%s' from the remote does not match its manifest "
				 "(%llu bytes, %s %.12s...)", f->path,
				 (unsigned long long)size, digest_key(got.alg), got.hex);
		}
		close(fd);
		if (r < 0) {
			if (!msg[0])
				snprintf(msg, msglen, "'%s': %s", f->path, strerror(-r));
			goto out_remove;
		}
		total += f->size;
	}
	if (*stop) {
		r = -ECANCELED;
		snprintf(msg, msglen, "stopped");
		goto out_remove;
	}
	/* here every file is its own: the manifest published says no more */
	for (size_t i = 0; i < m->nfiles; i++) {
		free(m->files[i].object);
		m->files[i].object = NULL;
	}
	/* a local copy that does not verify gives way to the remote one */
	if (layout_step_exists(jobfd, step)) {
		if (local_ok(jobfd, iter, err, sizeof(err))) {
			store_remove_tree(jobfd, name);
			goto done;
		}
		char aside[128];
		snprintf(aside, sizeof(aside), ".%s.staging-pruned", iter);
		store_remove_leftover(jobfd, aside);
		if (renameat2(jobfd, iter, jobfd, aside, RENAME_NOREPLACE) < 0) {
			r = -errno;
			snprintf(msg, msglen, "cannot move the broken local %s aside: %s", iter,
				 strerror(errno));
			goto out_remove;
		}
		log_info("job %s: %s does not verify (%s): replaced by the remote copy",
			 job, iter, err);
		store_remove_leftover(jobfd, aside);
	}
	if ((r = store_publish(jobfd, sfd, name, m, &renamed, err, sizeof(err))) < 0) {
		snprintf(msg, msglen, "publish of the downloaded %s: %s", iter, err);
		if (!renamed)
			goto out_remove;
		goto out;
	}
done:
	*bytes = total + mlen;
	r = 0;
	goto out;
out_remove:
	store_remove_tree(jobfd, name);
out:
	if (sfd >= 0)
		close(sfd);
	mfst_free(m);
	free(mbuf);
	return r;
}

int xfer_download(const struct s3_target *t, const volatile int *stop, int jobfd,
		  const char *job, int64_t want, int world, unsigned threads, uint64_t *got,
		  uint64_t *bytes, char *msg, size_t msglen)
{
	struct s3_conn *c = NULL;
	uint64_t *steps = NULL, b = 0;
	char one[512], iter[32], tried[512] = "";
	size_t n = 0, used = 0;
	int r, damaged = 0, unfit = 0, any_unfit = 0;

	(void)threads;
	if ((r = s3_conn_new(t, stop, &c)) < 0) {
		snprintf(msg, msglen, "out of memory");
		return r;
	}
	if ((r = pick_steps(c, job, want, &steps, &n, msg, msglen)) < 0)
		goto out;
	/* like a local restore: a damaged newest step gives way to the one
	 * before; a failure of the bucket or of this node does not */
	for (size_t i = 0; i < n; i++) {
		layout_iter_name(steps[i], iter, sizeof(iter));
		r = download_step(c, t, stop, jobfd, job, steps[i], world, &b, &damaged, &unfit,
				  one, sizeof(one));
		any_unfit |= unfit;    /* another world's: the one before may fit */
		if (r == 0) {
			if (i)
				log_warnx("remote: job %s: took %s, the newest that verifies "
					  "and fits: %s", job, iter, tried);
			*got = steps[i];
			if (bytes)
				*bytes = b;
			goto out;
		}
		if (used < sizeof(tried))
			used += (size_t)snprintf(tried + used, sizeof(tried) - used, "%s%s: %s",
						 i ? "; " : "", iter, one);
		if (!damaged && !unfit)
			break;
		if (i + 1 < n)
			log_warnx("remote: job %s: %s on the remote is %s: %s", job, iter,
				  unfit ? "passed over" : "damaged", one);
	}
	if (n == 1 || (!damaged && !any_unfit))
		snprintf(msg, msglen, "%s", tried);
	else
		snprintf(msg, msglen, "no checkpoint of job '%s' on the remote could be "
			 "restored: %s", job, tried);
	if (any_unfit && (unfit || damaged))
		r = -EINVAL;                 /* steps exist, none of this world: not "none" */
	else if (damaged)
		r = -EUCLEAN;                /* steps, none that verifies: as a local restore */
out:
	free(steps);
	s3_conn_free(c);
	return r;
}
