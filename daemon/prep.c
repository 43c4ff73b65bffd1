/* prep.c - see prep.h: a trainer's saves made ready before the first. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "job.h"
#include "log.h"
#include "memt.h"
#include "plan.h"
#include "prep.h"
#include "prior.h"
#include "rsave.h"
#include "session.h"
#include "srv.h"

/* The tier holds a rank's newest committed step and its next save:
 * memory for two captures. */
#define PREP_CAPTURES 2

struct prep_work {
	uv_work_t       req;
	struct srv     *S;
	struct session *s;          /* held; NULL: a job's spares released */
	char            job[65];
	int             rank;
	uint64_t        len;        /* one capture (0: no memory tier) */
	uint64_t        old_len;    /* what was reserved for it before, or 0 */
	uint64_t        shared_len; /* one sharing its frozen shards (0: none) */
	uint64_t        old_shared_len;
	uint64_t        t0_ns;
	int             made;
	/* incremental saves after a restart: the rank's files (paths) in the
	 * newest checkpoint of the job directory (jobfd, a dup), or none */
	int             jobfd;
	char          **paths;
	size_t          npaths;
	struct prior   *prior;
};

static void work_free(struct prep_work *w)
{
	for (size_t i = 0; i < w->npaths; i++)
		free(w->paths[i]);
	free(w->paths);
	if (w->jobfd > 0)
		close(w->jobfd);
	prior_put(w->prior);
	free(w);
}

static void reserve_work(uv_work_t *req)
{
	struct prep_work *w = req->data;
	struct memt *t = w->S->memt;

	if (!w->s) {
		memt_release_job(t, w->job);
		return;
	}
	if (w->npaths)
		w->prior = prior_load(w->jobfd, w->paths, w->npaths);
	if (!w->len)
		return;
	/* registrations that changed since (an optimizer's state made at
	 * its first step): the memory for the old layout goes first */
	if (w->old_len && w->old_len != w->len)
		memt_unreserve(t, w->job, w->rank, w->old_len, PREP_CAPTURES);
	if (w->old_shared_len && w->old_shared_len != w->shared_len)
		memt_unreserve(t, w->job, w->rank, w->old_shared_len, PREP_CAPTURES);
	w->made = memt_reserve(t, w->job, w->rank, w->len, PREP_CAPTURES);
	/* and for the saves that share the frozen shards, as the budget
	 * allows (else they allocate their own) */
	if (w->made >= 0 && w->shared_len)
		(void)memt_reserve(t, w->job, w->rank, w->shared_len, PREP_CAPTURES);
}

/* The rank's files of the newest checkpoint, loaded for its first save
 * since ckptd (or the job) started: unless a step committed meanwhile. */
static void prior_loaded(struct prep_work *w, struct job *j)
{
	if (!w->prior || !j || !j->prior || w->rank >= j->world_size || j->prior[w->rank])
		return;
	log_debug("job %s rank %d: %zu files of iter_%09llu to link what does not change",
		  w->job, w->rank, w->prior->nfiles, (unsigned long long)w->prior->step);
	j->prior[w->rank] = w->prior;
	w->prior = NULL;
}

static int queue(struct prep_work *w);

static void reserve_done(uv_work_t *req, int status)
{
	struct prep_work *w = req->data;
	struct session *s = w->s;
	struct job *j = job_find(w->S, w->job);

	if (!s) {
		work_free(w);
		return;
	}
	s->prep_busy = 0;
	if (w->len && !s->job && (!j || !j->nconnected)) {
		/* its rank left while the memory was made, and the job with it */
		w->s = NULL;
		session_unref(s);
		if (queue(w) < 0)
			work_free(w);
		return;
	}
	prior_loaded(w, s->job);
	if (w->made == -ENOSPC)
		log_info("memory tier: no room to prepare job %s rank %d's saves (memory_tier_bytes "
			 "is taken by the steps and spare memory held: ckptctl status): its "
			 "captures allocate their own or are not kept", w->job, w->rank);
	else if (w->made < 0)
		log_warnx("memory tier: cannot allocate %llu bytes ahead of job %s rank %d's "
			  "saves: %s; they allocate it themselves", (unsigned long long)w->len,
			  w->job, w->rank, strerror(-w->made));
	else if (w->made > 0)
		log_debug("memory tier: %d x %llu bytes ready for job %s rank %d's saves "
			  "(%.0f ms)", w->made, (unsigned long long)w->len, w->job, w->rank,
			  (double)(now_ns() - w->t0_ns) / 1e6);
	session_unref(s);
	work_free(w);
}

static int queue(struct prep_work *w)
{
	w->req.data = w;
	return uv_queue_work(w->S->loop, &w->req, reserve_work, reserve_done);
}

void prep_job_left(struct srv *S, const char *job)
{
	struct prep_work *w;

	if (!S->memt || !(w = calloc(1, sizeof(*w))))
		return;
	w->S = S;
	snprintf(w->job, sizeof(w->job), "%s", job);
	if (queue(w) < 0)
		work_free(w);
}

/* A layout made to look at, not saved: its references go. */
static void unplan(struct rsave *rs)
{
	for (size_t i = 0; i < rs->nregions; i++)
		region_unref(rs->regions[i]);
	plan_free(rs);
}

/* What the rank's first save will compare its files with is to be read
 * from disk: incremental saves on, nothing from a commit of this run of
 * the job yet, and a checkpoint there.  Its paths and a dup of the job's
 * directory go to w.  0, or -1 when there is nothing to read. */
static int want_prior(struct srv *S, struct session *s, const struct rsave *rs,
		      struct prep_work *w)
{
	const struct job *j = s->job;

	if (!S->cfg.incremental || !j->prior || j->prior[s->rank] || !j->have_last ||
	    !(w->paths = calloc(rs->nfiles + 1, sizeof(*w->paths))) ||
	    (w->jobfd = fcntl(j->jobfd, F_DUPFD_CLOEXEC, 3)) < 0)
		return -1;
	for (size_t i = 0; i < rs->nfiles; i++)
		if (!(w->paths[w->npaths++] = strdup(rs->files[i].path)))
			return -1;
	return 0;
}

/* Lay out s's saves now (kept in s until its registrations change); on
 * the pool, reserve the tier's memory for them and read what their files
 * are compared with after a restart. */
static void prepare(struct srv *S, struct session *s)
{
	struct rsave rs = { .staging_fd = -1 };
	struct prep_work *w;
	char msg[256];
	int r, load;

	s->prep_gen = s->treg_gen;      /* tried, whatever comes of it */
	r = plan_rsave(&rs, s, S->pool.chunk_bytes, msg, sizeof(msg));
	if (r < 0 || !(w = calloc(1, sizeof(*w)))) {   /* (the save will say why) */
		unplan(&rs);
		return;
	}
	*w = (struct prep_work){ .S = S, .s = s, .rank = s->rank, .old_len = s->prep_len,
				 .old_shared_len = s->prep_shared_len, .t0_ns = now_ns(),
				 .jobfd = -1 };
	w->len = S->memt ? memt_cap_len(&rs, 0) : 0;
	w->shared_len = S->memt ? memt_cap_len(&rs, 1) : 0;
	if (w->shared_len == w->len)
		w->shared_len = 0;
	load = want_prior(S, s, &rs, w) == 0;
	unplan(&rs);
	if (!w->len && !load) {
		work_free(w);
		return;
	}
	snprintf(w->job, sizeof(w->job), "%s", s->job->name);
	s->refs++;
	s->prep_len = w->len;
	s->prep_shared_len = w->shared_len;
	s->prep_busy = 1;
	if (queue(w) < 0) {
		s->prep_busy = 0;
		session_unref(s);
		work_free(w);
	}
}

void prep_tick(struct srv *S)
{
	for (struct session *s = S->sessions; s; s = s->next) {
		uint64_t seen = s->prep_seen;

		s->prep_seen = s->treg_gen;
		/* settled, not laid out yet (a save that came first laid
		 * them out, and its capture made its own memory) */
		if (s->closed || s->role != ROLE_TRAINER || !s->job || s->prep_busy ||
		    s->treg_gen != seen || s->prep_gen == s->treg_gen || plan_current(s) ||
		    (!s->ntensors && !s->nblobs) || S->draining)
			continue;
		prepare(S, s);
	}
}

int prep_ready(const struct session *s)
{
	return !s->prep_busy && plan_current(s) && (s->ntensors || s->nblobs);
}
