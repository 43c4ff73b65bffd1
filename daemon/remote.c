/* remote.c - the object-store tier's schedule: what is uploaded when, by
 * one upload thread; credentials; counters; start-up clean-up. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "layout.h"
#include "log.h"
#include "names.h"
#include "remote.h"
#include "remote_creds.h"
#include "remote_jrnl.h"
#include "remote_xfer.h"
#include "s3.h"
#include "store.h"

#define MAX_PENDING   16              /* steps waiting per job */
#define RETRY_MIN_MS  2000            /* a failed step is tried again after */
#define RETRY_MAX_MS  300000          /* this, doubling, at most this */

struct pend {
	uint64_t step;
	int64_t  when;                    /* committed (or pushed) */
	int      pushed;                  /* by ckptctl push: never coalesced */
	unsigned fails;
	uint64_t not_before_ns;
};

struct rjob {
	char        name[NAME_MAX_JOB + 1];
	uint64_t    commits;              /* seen since ckptd started */
	struct pend pend[MAX_PENDING];    int npend;
	int         active;               struct pend cur;
	int         have_remote;          uint64_t remote_step;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t  cond;
	pthread_mutex_t pull_lock;        /* one download at a time */
	pthread_t       tid;
	int             on, running, uploads;
	volatile int    stop;
	int             rootfd;
	struct s3_target t;               /* credentials inside: never logged */
	struct config_remote rc;
	uint32_t        every, keep_last, keep_local;
	int             share;            /* incremental: upload a file once */
	struct rjob    *jobs;             size_t njobs;
	int             scanned;          /* start-up clean-up done */
	uint64_t        scan_not_before_ns;
	unsigned        scan_fails;
	uint64_t        bytes_uploaded, steps_uploaded, failures, retries;
	char            last_error[512];
	int64_t         last_error_unix;
	struct xfer_progress pg;
} R = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
	.pull_lock = PTHREAD_MUTEX_INITIALIZER, .rootfd = -1 };

int remote_enabled(void) { return R.on; }

/* --- jobs and their queues (R.lock held) --------------------------------------- */

static struct rjob *job_get(const char *name)
{
	for (size_t i = 0; i < R.njobs; i++)
		if (strcmp(R.jobs[i].name, name) == 0)
			return &R.jobs[i];
	struct rjob *j = realloc(R.jobs, (R.njobs + 1) * sizeof(*j));
	if (!j)
		return NULL;
	R.jobs = j;
	j = &R.jobs[R.njobs++];
	memset(j, 0, sizeof(*j));
	snprintf(j->name, sizeof(j->name), "%s", name);
	return j;
}

static int64_t wall(void) { return (int64_t)time(NULL); }

static void pend_drop(struct rjob *j, int i)
{
	memmove(&j->pend[i], &j->pend[i + 1], (size_t)(--j->npend - i) * sizeof(j->pend[0]));
}

/* The rule for what waits in a job's queue, for a step committed or
 * pushed (enqueue) and for one whose upload failed (upload_one): with
 * local keep_last N, at most N steps that no ckptctl push asked for wait
 * (the newest and N-1 older ones), so the steps keep_last would prune are
 * not held for uploads that fail or lag; with keep_last 0 nothing is
 * replaced.  The step being uploaded is not in the queue: never replaced.
 * When the queue is still full, its oldest step goes (preferring one no
 * push asked for).  Older queued steps that give way leave the queue; 1
 * if p is to be queued, 0 if it is the one that gives way (all logged). */
static int make_room(struct rjob *j, const struct pend *p)
{
	char iter[32];
	int newer = 0, drop;

	layout_iter_name(p->step, iter, sizeof(iter));
	if (!p->pushed && R.keep_local) {
		uint64_t newest = 0;
		for (int i = 0; i < j->npend; i++)
			if (!j->pend[i].pushed && j->pend[i].step > p->step) {
				newer++;
				if (j->pend[i].step > newest)
					newest = j->pend[i].step;
			}
		if (newer >= (int)R.keep_local) {
			log_info("remote: job %s: %s will not be uploaded: iter_%09llu is "
				 "newer (keep_last %u)", j->name, iter,
				 (unsigned long long)newest, R.keep_local);
			return 0;
		}
		for (;;) {
			int n = newer, old = -1;
			for (int i = 0; i < j->npend; i++)
				if (!j->pend[i].pushed && j->pend[i].step < p->step) {
					n++;
					if (old < 0 || j->pend[i].step < j->pend[old].step)
						old = i;
				}
			if (n < (int)R.keep_local)
				break;
			log_info("remote: job %s: iter_%09llu will not be uploaded: %s is "
				 "newer (keep_last %u)", j->name,
				 (unsigned long long)j->pend[old].step, iter, R.keep_local);
			pend_drop(j, old);
		}
	}
	if (j->npend < MAX_PENDING)
		return 1;
	drop = 0;
	for (int i = MAX_PENDING - 1; i >= 0; i--)
		if (!j->pend[i].pushed)
			drop = i;
	if (!p->pushed && (j->pend[drop].pushed || p->step < j->pend[drop].step)) {
		log_warnx("remote: job %s: %s will not be uploaded: %d steps are waiting "
			  "(uploads are slower than saves)", j->name, iter, MAX_PENDING);
		return 0;
	}
	log_warnx("remote: job %s: iter_%09llu will not be uploaded: %d steps are "
		  "waiting (uploads are slower than saves)", j->name,
		  (unsigned long long)j->pend[drop].step, MAX_PENDING);
	pend_drop(j, drop);
	return 1;
}

/* Queue step (pushed: by ckptctl push), under make_room's rule.  A push
 * of a step already queued or being uploaded marks it pushed. */
static void enqueue(struct rjob *j, uint64_t step, int pushed)
{
	struct pend p = { .step = step, .when = wall(), .pushed = pushed };

	if (j->active && j->cur.step == step) {
		j->cur.pushed |= pushed;
		return;
	}
	for (int i = 0; i < j->npend; i++)
		if (j->pend[i].step == step) {
			j->pend[i].pushed |= pushed;
			return;
		}
	if (!make_room(j, &p))
		return;
	j->pend[j->npend++] = p;
	pthread_cond_signal(&R.cond);
}

/* The ready pending step committed first, of any job; -1 if none (with
 * *wait_ns the time until one is ready). */
static int pick(struct rjob **jp, uint64_t *wait_ns)
{
	uint64_t now = now_ns(), soonest = UINT64_MAX;
	struct rjob *best = NULL;
	int bi = -1;

	for (size_t i = 0; i < R.njobs; i++) {
		struct rjob *j = &R.jobs[i];
		for (int k = 0; k < j->npend; k++) {
			struct pend *p = &j->pend[k];
			if (p->not_before_ns > now) {
				if (p->not_before_ns - now < soonest)
					soonest = p->not_before_ns - now;
				continue;
			}
			if (!best || p->when < best->pend[bi].when) {
				best = j;
				bi = k;
			}
		}
	}
	*wait_ns = soonest;
	*jp = best;
	return bi;
}

int remote_held(const char *job, uint64_t step)
{
	int held = 0;

	if (!R.on)
		return 0;
	pthread_mutex_lock(&R.lock);
	for (size_t i = 0; i < R.njobs && !held; i++) {
		struct rjob *j = &R.jobs[i];
		if (strcmp(j->name, job) != 0)
			continue;
		held = j->active && j->cur.step == step;
		for (int k = 0; k < j->npend && !held; k++)
			held = j->pend[k].step == step;
	}
	pthread_mutex_unlock(&R.lock);
	return held;
}

void remote_committed(const char *job, uint64_t step)
{
	struct rjob *j;

	if (!R.uploads)
		return;
	pthread_mutex_lock(&R.lock);
	if ((j = job_get(job)) && j->commits++ % R.every == 0)
		enqueue(j, step, 0);
	pthread_mutex_unlock(&R.lock);
}

int remote_push(int jobfd, const char *job, uint64_t step, char *msg, size_t msglen)
{
	struct rjob *j;

	if (!R.on) {
		snprintf(msg, msglen, "no remote is configured");
		return -ENOTCONN;
	}
	if (!R.uploads) {
		snprintf(msg, msglen, "uploads run on the cluster's coordinator (node 0): "
			 "push there");
		return -EOPNOTSUPP;
	}
	if (!layout_step_exists(jobfd, step)) {
		snprintf(msg, msglen, "job '%s' has no step %llu here", job,
			 (unsigned long long)step);
		return -ENOENT;
	}
	pthread_mutex_lock(&R.lock);
	if ((j = job_get(job)))
		enqueue(j, step, 1);
	pthread_mutex_unlock(&R.lock);
	if (!j) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

static void note_error(const char *what, const char *why)
{
	pthread_mutex_lock(&R.lock);
	R.failures++;
	snprintf(R.last_error, sizeof(R.last_error), "%s: %s", what, why);
	R.last_error_unix = wall();
	pthread_mutex_unlock(&R.lock);
	log_warnx("remote: %s: %s", what, why);
}

/* --- the upload thread ------------------------------------------------------------ */

/* The local step's transaction id into txid ("" when it has none). */
static void local_txid(int jobfd, uint64_t step, char txid[33])
{
	struct mfst *m = NULL;
	char iter[32], err[128];
	int dfd;

	txid[0] = '\0';
	layout_iter_name(step, iter, sizeof(iter));
	if (jobfd < 0 ||
	    (dfd = openat(jobfd, iter, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return;
	if (mfst_read(dfd, &m, err, sizeof(err)) == 0)
		memcpy(txid, m->txid, 33);
	mfst_free(m);
	close(dfd);
}

static int newest_local(int jobfd, uint64_t *step)
{
	uint64_t *steps = NULL;
	int n = jobfd >= 0 ? layout_list_steps(jobfd, &steps) : 0;

	if (n > 0)
		*step = steps[0];
	free(steps);
	return n > 0;
}

/* An upload this ckptd recorded in its journal and is no longer doing:
 * finished but for latest (killed after the manifest) -> latest; at
 * start-up, the job's newest checkpoint here -> resumed (queued); else its
 * objects (the keys its manifest names, its multipart uploads) are
 * deleted unless another checkpoint is complete there now.  The record
 * goes once settled.  0, or -errno (the bucket failed: try later). */
static int settle(struct s3_conn *c, int jobfd, const char *job, uint64_t step,
		  int at_start)
{
	struct mfst *ours = NULL, *there = NULL;
	char err[256], iter[32], txid[33];
	uint64_t newest;
	int r, n;

	layout_iter_name(step, iter, sizeof(iter));
	if ((r = rjrnl_read(job, step, &ours, err, sizeof(err))) < 0) {
		if (r == -ENOENT)
			return 0;
		log_warnx("remote: job %s: the journal's record of %s: %s: dropped, "
			  "nothing deleted", job, iter, err);
		return rjrnl_del(job, step);
	}
	/* nothing of ours is uploading it now: its parts in flight go */
	if ((n = xfer_abort_uploads(c, job, step)) > 0)
		log_info("remote: job %s: aborted %d unfinished multipart upload(s)", job, n);
	r = n < 0 ? n : xfer_manifest(c, job, step, &there);
	if (r == 0 && strcmp(there->txid, ours->txid) == 0) {
		int back = newest_local(jobfd, &newest) && newest == step;
		if ((r = xfer_put_latest(c, job, step, ours->run_id, back)) > 0)
			log_info("remote: job %s: latest set to %s", job, iter);
		goto out;
	}
	/* at start-up the job's newest step is resumed; older ones give way */
	if (at_start && (r == 0 || r == -ENOENT || r == -EINVAL) &&
	    newest_local(jobfd, &newest) && newest == step) {
		local_txid(jobfd, step, txid);
		if (strcmp(txid, ours->txid) == 0) {
			struct rjob *j;
			log_info("remote: job %s: resuming the upload of %s", job, iter);
			pthread_mutex_lock(&R.lock);
			if ((j = job_get(job)))
				enqueue(j, step, 0);
			pthread_mutex_unlock(&R.lock);
			mfst_free(there);
			mfst_free(ours);
			return 0;               /* the record stays until it is done */
		}
	}
	if (r == 0 || r == -EINVAL) {
		log_info("remote: job %s: %s on the remote is not the checkpoint this ckptd "
			 "was uploading: left as it is", job, iter);
		r = 0;
		goto out;
	}
	if (r != -ENOENT)
		goto out;
	if ((r = xfer_delete_files(c, job, ours, NULL, NULL)) == 0)
		log_info("remote: job %s: %s: cleaned up an upload that never finished "
			 "(deleted its objects, if any were sent)", job, iter);
out:
	if (r >= 0)
		r = rjrnl_del(job, step);
	else
		log_warnx("remote: job %s: clean-up of %s: %s", job, iter,
			  s3_conn_msg(c)[0] ? s3_conn_msg(c) : strerror(-r));
	mfst_free(there);
	mfst_free(ours);
	return r < 0 ? r : 0;
}

/* The journal's uploads of job that nobody is doing any more. */
static int sweep(struct s3_conn *c, int jobfd, const char *job, int at_start)
{
	uint64_t *steps = NULL;
	int n = rjrnl_steps(job, &steps), r = 0;

	for (int i = 0; i < n && r == 0 && !R.stop; i++)
		if (!remote_held(job, steps[i]))
			r = settle(c, jobfd, job, steps[i], at_start);
	free(steps);
	return n < 0 ? n : r;
}

/* Keep the newest remote_keep_last complete steps of a job (and the one
 * its latest names); delete older ones by their manifests (the keys a
 * manifest names and nothing else), but for the objects a kept step
 * names (uploaded once, xfer_upload); settle the journal's half-uploads. */
static void retain(struct s3_conn *c, const char *job)
{
	struct xfer_list l;
	struct xfer_keep keep = { .l = &l };
	unsigned kept = 0, keep_last;
	uint8_t *drop;

	if (xfer_list(c, job, &l) < 0) {
		log_warnx("remote: job %s: retention: %s", job, s3_conn_msg(c));
		return;
	}
	pthread_mutex_lock(&R.lock);
	keep_last = R.keep_last;
	pthread_mutex_unlock(&R.lock);
	if (!(drop = calloc(l.nsteps + 1, 1)))
		goto out;
	/* which go, and what the kept ones name: a kept manifest that cannot
	 * be read leaves every step where it is */
	for (size_t i = 0; i < l.nsteps; i++) {
		struct xfer_step *s = &l.steps[i];
		struct mfst *m = NULL;
		int r;
		if (!s->complete)
			continue;                   /* a half-upload: only from the journal */
		if (kept < keep_last || !keep_last || (l.have_latest && s->step == l.latest))
			kept++;
		else if (!remote_held(job, s->step)) {    /* (held: uploaded again) */
			drop[i] = 1;
			continue;
		}
		if ((r = xfer_manifest(c, job, s->step, &m)) == -EINVAL)
			continue;                   /* names nothing ckptd reads */
		if (r < 0 || xfer_keep_add(&keep, m) < 0) {
			log_warnx("remote: job %s: retention: cannot read the kept iter_%09llu's "
				  "manifest: %s", job, (unsigned long long)s->step,
				  r < 0 && s3_conn_msg(c)[0] ? s3_conn_msg(c) : strerror(r < 0 ? -r : ENOMEM));
			mfst_free(m);
			goto out;
		}
		mfst_free(m);
	}
	for (size_t i = 0; i < l.nsteps; i++) {
		struct xfer_step *s = &l.steps[i];
		struct mfst *m = NULL;
		char iter[32];
		int r;
		if (!drop[i])
			continue;
		layout_iter_name(s->step, iter, sizeof(iter));
		if ((r = xfer_manifest(c, job, s->step, &m)) == -EINVAL) {
			log_warnx("remote: job %s: %s not deleted (remote_keep_last): its "
				  "manifest is not a valid one of that step", job, iter);
			continue;
		}
		if (r < 0 || (r = xfer_delete_files(c, job, m, NULL, &keep)) < 0) {
			log_warnx("remote: job %s: cannot delete %s: %s", job, iter,
				  s3_conn_msg(c)[0] ? s3_conn_msg(c) : strerror(-r));
			mfst_free(m);
			break;
		}
		mfst_free(m);
		log_info("remote: job %s: deleted %s (remote_keep_last)", job, iter);
	}
out:
	sweep(c, -1, job, 0);
	free(drop);
	xfer_keep_release(&keep);
	xfer_list_release(&l);
}

/* At start-up, for a local job or one with journal records: settle the
 * uploads a killed ckptd left (resume those it still has), and queue the
 * job's newest step when the remote does not have it. */
static int scan_job(struct s3_conn *c, const char *job)
{
	struct xfer_list l;
	struct mfst *m = NULL;
	uint64_t newest = 0;
	char txid[33];
	int jobfd, r, have_local, want, there = 0;

	jobfd = openat(R.rootfd, job, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if ((r = sweep(c, jobfd, job, 1)) < 0 || jobfd < 0)
		goto out;
	if ((r = xfer_list(c, job, &l)) < 0)
		goto out;
	have_local = newest_local(jobfd, &newest);
	pthread_mutex_lock(&R.lock);
	struct rjob *j = job_get(job);
	for (size_t i = 0; j && i < l.nsteps && !j->have_remote; i++)
		if (l.steps[i].complete) {
			j->have_remote = 1;
			j->remote_step = l.steps[i].step;
		}
	pthread_mutex_unlock(&R.lock);
	for (size_t i = 0; have_local && i < l.nsteps; i++)
		there |= l.steps[i].complete && l.steps[i].step == newest;
	xfer_list_release(&l);
	/* the newest step here, unless the remote has that very checkpoint */
	if (have_local) {
		r = there ? xfer_manifest(c, job, newest, &m) : -ENOENT;
		if (r < 0 && r != -ENOENT && r != -EINVAL)
			goto out;
		local_txid(jobfd, newest, txid);
		want = !m || strcmp(m->txid, txid) != 0;
		mfst_free(m);
		pthread_mutex_lock(&R.lock);
		if (want && (j = job_get(job)))
			enqueue(j, newest, 0);
		pthread_mutex_unlock(&R.lock);
	}
	retain(c, job);
	r = 0;
out:
	if (jobfd >= 0)
		close(jobfd);
	return r;
}

static int scan(struct s3_conn *c)
{
	DIR *d;
	struct dirent *e;
	/* a file description of its own: a dup would share a read offset */
	int fd = openat(R.rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	while (!R.stop && (e = readdir(d))) {
		struct stat st;
		char jf[sizeof(e->d_name) + 16];
		if (name_check(e->d_name, NAME_MAX_JOB, NULL, 0) < 0)
			continue;
		snprintf(jf, sizeof(jf), "%s/%s", e->d_name, LAYOUT_JOBFILE);
		if (fstatat(R.rootfd, jf, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;                   /* not a job of ckptd's */
		if ((r = scan_job(c, e->d_name)) < 0)
			break;
	}
	closedir(d);
	if (r == 0) {                    /* journal records of jobs gone here */
		char **jobs = NULL;
		int n = rjrnl_jobs(&jobs);
		for (int i = 0; i < n; i++) {
			struct stat st;
			if (r == 0 && fstatat(R.rootfd, jobs[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
				r = sweep(c, -1, jobs[i], 1);
			free(jobs[i]);
		}
		free(jobs);
	}
	return r;
}

static uint64_t backoff_ns(unsigned fails)
{
	uint64_t ms = (uint64_t)RETRY_MIN_MS << (fails < 10 ? fails : 10);
	return (ms > RETRY_MAX_MS ? RETRY_MAX_MS : ms) * 1000000ull;
}

struct jrnl_arg { const char *job; uint64_t step; };

static int journal_begin(void *arg, const char *mbuf, size_t mlen)
{
	const struct jrnl_arg *a = arg;
	return rjrnl_add(a->job, a->step, mbuf, mlen);
}

static void upload_one(struct rjob *j)
{
	char msg[512], iter[32], job[NAME_MAX_JOB + 1];
	struct pend p = j->cur;
	uint64_t t0 = now_ns(), bytes;
	int jobfd, r, gone = 0, share = R.share;

	snprintf(job, sizeof(job), "%s", j->name);
	layout_iter_name(p.step, iter, sizeof(iter));
	atomic_store(&R.pg.bytes_done, 0);
	atomic_store(&R.pg.bytes_total, 0);
	atomic_store(&R.pg.bytes_sent, 0);
	pthread_mutex_unlock(&R.lock);

	jobfd = openat(R.rootfd, job, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	r = jobfd < 0 ? -errno : 0;
	if (r < 0)
		snprintf(msg, sizeof(msg), "cannot open the job directory: %s", strerror(-r));
	else
		r = xfer_upload(&R.t, &R.stop, jobfd, job, p.step, R.rc.threads,
				R.rc.part_bytes, share, &R.pg, journal_begin,
				&(struct jrnl_arg){ job, p.step }, msg, sizeof(msg));
	bytes = atomic_load(&R.pg.bytes_done);
	uint64_t sent = atomic_exchange(&R.pg.bytes_sent, 0);
	if (r == 0) {
		struct s3_conn *c;
		double s = (double)(now_ns() - t0) / 1e9;
		char part[64] = "";
		if (sent < bytes)      /* files there already, or referenced */
			snprintf(part, sizeof(part), "; %.1f MiB of it sent",
				 (double)sent / (1 << 20));
		log_info("remote: job %s: %s uploaded (%.1f MiB in %.2f s)%s", job, iter,
			 (double)bytes / (1 << 20), s, part);
		if (rjrnl_del(job, p.step) < 0)
			log_warnx("remote: job %s: cannot remove the journal's record of %s",
				  job, iter);
		if (s3_conn_new(&R.t, &R.stop, &c) == 0) {
			retain(c, job);
			s3_conn_free(c);
		}
	} else if (r != -ECANCELED) {
		char what[320];
		/* only the step's absence here ends its upload: any failure of
		 * the bucket (missing, refused, down) is tried again */
		gone = jobfd < 0 ? r == -ENOENT : !layout_step_exists(jobfd, p.step);
		snprintf(what, sizeof(what), gone ? "job %s: %s is gone here, not uploaded" :
			 "job %s: upload of %s failed", job, iter);
		note_error(what, msg);
	}
	if (jobfd >= 0)
		close(jobfd);

	pthread_mutex_lock(&R.lock);
	j = job_get(job);                   /* R.jobs may have moved */
	p.pushed |= j->cur.pushed;          /* pushed while it was uploading */
	j->active = 0;
	R.bytes_uploaded += sent;
	R.retries += atomic_exchange(&R.pg.retries, 0);
	if (r == 0) {
		R.steps_uploaded++;
		if (!j->have_remote || j->remote_step < p.step) {
			j->have_remote = 1;
			j->remote_step = p.step;
		}
	} else if (!gone && !(r == -ECANCELED && R.stop)) {
		/* again later, unless the queue's rule says it gives way */
		p.fails++;
		p.not_before_ns = now_ns() + backoff_ns(p.fails - 1);
		if (make_room(j, &p))
			j->pend[j->npend++] = p;
	}
}

static void *remote_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&R.lock);
	while (!R.stop) {
		struct rjob *j;
		uint64_t wait_ns = UINT64_MAX;
		int k;

		if (!R.scanned && now_ns() >= R.scan_not_before_ns) {
			struct s3_conn *c = NULL;
			int r;
			pthread_mutex_unlock(&R.lock);
			r = s3_conn_new(&R.t, &R.stop, &c);
			if (r == 0)
				r = scan(c);
			if (r < 0 && r != -ECANCELED)
				note_error("start-up check of the bucket failed",
					   c && s3_conn_msg(c)[0] ? s3_conn_msg(c) : strerror(-r));
			s3_conn_free(c);
			pthread_mutex_lock(&R.lock);
			if (r == 0)
				R.scanned = 1;
			else
				R.scan_not_before_ns = now_ns() + backoff_ns(R.scan_fails++);
			continue;
		}
		if (R.scanned && (k = pick(&j, &wait_ns)) >= 0) {
			j->cur = j->pend[k];
			memmove(&j->pend[k], &j->pend[k + 1], (size_t)(j->npend - k - 1) * sizeof(j->pend[0]));
			j->npend--;
			j->active = 1;
			upload_one(j);              /* unlocks while it works */
			continue;
		}
		if (!R.scanned)
			wait_ns = R.scan_not_before_ns - now_ns();
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		if (wait_ns > 60000000000ull)
			wait_ns = 60000000000ull;
		ts.tv_sec += (time_t)(wait_ns / 1000000000ull);
		ts.tv_nsec += (long)(wait_ns % 1000000000ull);
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&R.cond, &R.lock, &ts);
	}
	pthread_mutex_unlock(&R.lock);
	return NULL;
}

/* --- life cycle ------------------------------------------------------------------ */

static void apply_limits(const struct config *cfg)
{
	R.every = cfg->remote_every ? cfg->remote_every : 1;
	R.keep_last = cfg->remote_keep_last;
	R.keep_local = cfg->keep_last;
	R.share = cfg->incremental;
	/* one budget shared by every connection (s3.c) */
	R.t.max_send_bps = cfg->remote_max_bytes_per_s;
}

int remote_start(const struct config *cfg, int rootfd, int uploads, char *err,
		 size_t errlen)
{
	const struct config_remote *rc = &cfg->remote;
	const char *b = rc->url + 5, *slash = strchr(b, '/');
	int r;

	if (!rc->url[0])
		return 0;
	memset(&R.t, 0, sizeof(R.t));
	snprintf(R.t.endpoint, sizeof(R.t.endpoint), "%s", rc->endpoint);
	snprintf(R.t.bucket, sizeof(R.t.bucket), "%.*s",
		 (int)(slash ? (size_t)(slash - b) : strlen(b)), b);
	snprintf(R.t.prefix, sizeof(R.t.prefix), "%s", slash ? slash + 1 : "");
	snprintf(R.t.region, sizeof(R.t.region), "%s", rc->region);
	R.t.timeout_ms = rc->request_timeout_ms;
	R.t.retries = rc->retries;
	if ((r = creds_load(rc, &R.t, err, errlen)) < 0)
		return r;
	if ((r = s3_global_init()) < 0) {
		snprintf(err, errlen, "remote: cannot initialise libcurl");
		return r;
	}
	if ((R.rootfd = dup(rootfd)) < 0) {
		snprintf(err, errlen, "remote: dup: %s", strerror(errno));
		return -errno;
	}
	if (uploads && (r = rjrnl_open(R.rootfd)) < 0) {
		snprintf(err, errlen, "remote: cannot open the upload journal "
			 "'.remote-journal' under the root: %s", strerror(-r));
		close(R.rootfd);
		R.rootfd = -1;
		return r;
	}
	R.rc = *rc;
	apply_limits(cfg);
	R.stop = 0;
	R.on = 1;
	R.uploads = uploads;
	if (uploads && (r = pthread_create(&R.tid, NULL, remote_thread, NULL)) != 0) {
		R.on = 0;
		snprintf(err, errlen, "remote: cannot start the upload thread: %s", strerror(r));
		return -r;
	}
	R.running = uploads;
	log_info("remote: %s at %s (%s every %u commit(s), keep %u, key id %.4s...)",
		 rc->url, rc->endpoint, uploads ? "uploads" : "restores only here; the "
		 "coordinator uploads", R.every, R.keep_last, R.t.key_id);
	return 0;
}

void remote_reload(const struct config *cfg)
{
	if (!R.on)
		return;
	pthread_mutex_lock(&R.lock);
	apply_limits(cfg);
	pthread_mutex_unlock(&R.lock);
}

void remote_stop(void)
{
	if (!R.on)
		return;
	pthread_mutex_lock(&R.lock);
	R.stop = 1;
	pthread_cond_broadcast(&R.cond);
	pthread_mutex_unlock(&R.lock);
	if (R.running)
		pthread_join(R.tid, NULL);
	R.running = 0;
	R.on = 0;
	free(R.jobs);
	R.jobs = NULL;
	R.njobs = 0;
	close(R.rootfd);
	R.rootfd = -1;
	rjrnl_close();
	explicit_bzero(&R.t, sizeof(R.t));
}

/* --- pull, list, status ------------------------------------------------------------ */

int remote_may_pull(const char *job, uid_t uid, uid_t *owner, char *msg, size_t msglen)
{
	struct s3_conn *c;
	int admin = uid == 0 || uid == geteuid(), r;
	uid_t rec = 0;

	if (!R.on) {
		snprintf(msg, msglen, "no remote is configured");
		return -ENOTCONN;
	}
	if ((r = s3_conn_new(&R.t, &R.stop, &c)) < 0) {
		snprintf(msg, msglen, "out of memory");
		return r;
	}
	r = xfer_get_owner(c, job, &rec);
	if (r < 0 && r != -ENOENT)
		snprintf(msg, msglen, "cannot read who owns job '%s' on the remote: %s", job,
			 r == -EINVAL ? "its owner.json is not valid" : s3_conn_msg(c));
	s3_conn_free(c);
	if (r == -ENOENT && admin) {
		*owner = uid;
		return 1;
	}
	if (r == -ENOENT) {
		snprintf(msg, msglen, "the remote does not record who owns job '%s' (uploaded "
			 "by an older ckptd): only root can pull it", job);
		return -EPERM;
	}
	if (r < 0)
		return r;
	if (!admin && rec != uid) {
		snprintf(msg, msglen, "job '%s' on the remote belongs to another user", job);
		return -EPERM;
	}
	*owner = rec;
	return 0;
}

int remote_pull(int jobfd, const char *job, uid_t uid, int64_t step, int world,
		uint64_t *got, char *msg, size_t msglen)
{
	uint64_t bytes = 0, t0 = now_ns();
	uid_t owner, here;
	int r;

	if (!R.on) {
		snprintf(msg, msglen, "no remote is configured");
		return -ENOTCONN;
	}
	/* the copy goes to its owner's job only, whoever asks */
	msg[0] = '\0';
	if ((r = remote_may_pull(job, uid, &owner, msg, msglen)) == 0 &&
	    (r = store_job_owner(jobfd, &here)) == 0 && here != owner) {
		snprintf(msg, msglen, "job '%s' here belongs to uid %u, on the remote to uid "
			 "%u: not pulled (an operator may remove the local job)", job,
			 (unsigned)here, (unsigned)owner);
		r = -EPERM;
	} else if (r > 0) {
		r = 0;                      /* no owner recorded: root's choice */
	} else if (r < 0 && !msg[0]) {
		snprintf(msg, msglen, "cannot read the owner of job '%s' here: %s", job,
			 strerror(-r));
	}
	if (r < 0) {
		log_warnx("remote: job %s: not pulled for uid %u: %s", job, (unsigned)uid, msg);
		return r;
	}
	pthread_mutex_lock(&R.pull_lock);
	r = xfer_download(&R.t, &R.stop, jobfd, job, step, world, R.rc.threads, got, &bytes,
			  msg, msglen);
	pthread_mutex_unlock(&R.pull_lock);
	if (r == 0)
		log_info("remote: job %s: iter_%09llu downloaded and verified (%.1f MiB in %.2f s)",
			 job, (unsigned long long)*got, (double)bytes / (1 << 20),
			 (double)(now_ns() - t0) / 1e9);
	else
		log_warnx("remote: job %s: download failed: %s", job, msg);
	return r;
}

/* The complete steps of job; each manifest is read and checked, and a
 * step whose manifest is not valid is listed with "valid": false and why
 * (no restore takes it). */
static int list_job(struct s3_conn *c, const char *job, json_t *arr)
{
	struct xfer_list l;
	int r = xfer_list(c, job, &l);

	if (r < 0)
		return r;
	for (size_t i = 0; i < l.nsteps && r == 0; i++) {
		char why[512];
		int damaged;
		json_t *e;
		if (!l.steps[i].complete)
			continue;
		r = xfer_get_manifest(c, job, l.steps[i].step, NULL, NULL, NULL, &damaged, why,
				      sizeof(why));
		if (r < 0 && !damaged)
			break;
		e = json_pack("{sssIsIsbsb}", "job", job, "step", (json_int_t)l.steps[i].step,
			      "bytes", (json_int_t)l.steps[i].bytes, "latest",
			      l.have_latest && l.latest == l.steps[i].step, "valid", r == 0);
		if (e && r < 0)
			json_object_set_new(e, "reason", json_string(why));
		json_array_append_new(arr, e);
		r = 0;
	}
	xfer_list_release(&l);
	return r;
}

int remote_list(const char *job, json_t **out, char *msg, size_t msglen)
{
	struct s3_conn *c;
	char **jobs = NULL;
	json_t *arr;
	int r, n = 0;

	if (!R.on) {
		snprintf(msg, msglen, "no remote is configured");
		return -ENOTCONN;
	}
	if (!(arr = json_array()) || s3_conn_new(&R.t, &R.stop, &c) < 0) {
		json_decref(arr);
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	if (job) {
		r = list_job(c, job, arr);
	} else if ((r = n = xfer_list_jobs(c, &jobs)) >= 0) {
		r = 0;
		for (int i = 0; i < n && r == 0; i++)
			r = list_job(c, jobs[i], arr);
	}
	for (int i = 0; i < n; i++)
		free(jobs[i]);
	free(jobs);
	if (r < 0) {
		snprintf(msg, msglen, "%s", s3_conn_msg(c)[0] ? s3_conn_msg(c) : strerror(-r));
		json_decref(arr);
	} else {
		*out = arr;
	}
	s3_conn_free(c);
	return r;
}

json_t *remote_status_json(void)
{
	json_t *o, *jobs;
	int64_t now = wall(), lag = 0;
	uint64_t queued = 0;

	if (!R.on)
		return NULL;
	if (!(jobs = json_array()))
		return NULL;
	pthread_mutex_lock(&R.lock);
	for (size_t i = 0; i < R.njobs; i++) {
		struct rjob *j = &R.jobs[i];
		int64_t since = 0;       /* the oldest commit not yet on the remote */
		for (int k = 0; k < j->npend; k++)
			if (!since || j->pend[k].when < since)
				since = j->pend[k].when;
		if (j->active && (!since || j->cur.when < since))
			since = j->cur.when;
		int64_t jl = since ? now - since : 0;
		if (jl > lag)
			lag = jl;
		queued += (uint64_t)j->npend;
		json_array_append_new(jobs, json_pack("{sssisIsIsI}", "job", j->name,
			"have_remote", j->have_remote, "remote_step", (json_int_t)j->remote_step,
			"queued", (json_int_t)j->npend, "lag_seconds", (json_int_t)jl));
	}
	o = json_pack("{sssbsIsIsIsIsIsIss}", "url", R.rc.url, "uploads", R.uploads,
		      "bytes_uploaded", (json_int_t)(R.bytes_uploaded +
						     atomic_load(&R.pg.bytes_sent)),
		      "steps_uploaded", (json_int_t)R.steps_uploaded,
		      "failures", (json_int_t)R.failures,
		      "retries", (json_int_t)R.retries,
		      "queued", (json_int_t)queued,
		      "lag_seconds", (json_int_t)lag,
		      "last_error", R.last_error);
	if (o && R.last_error[0])
		json_object_set_new(o, "last_error_unix", json_integer(R.last_error_unix));
	for (size_t i = 0; o && i < R.njobs; i++)
		if (R.jobs[i].active)
			json_object_set_new(o, "uploading", json_pack("{sssIsIsI}",
				"job", R.jobs[i].name, "step", (json_int_t)R.jobs[i].cur.step,
				"bytes_done", (json_int_t)atomic_load(&R.pg.bytes_done),
				"bytes_total", (json_int_t)atomic_load(&R.pg.bytes_total)));
	pthread_mutex_unlock(&R.lock);
	if (o)
		json_object_set_new(o, "jobs", jobs);
	else
		json_decref(jobs);
	return o;
}
