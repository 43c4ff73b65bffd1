/* job.c - jobs: a job's directory as it is on disk, its ranks attaching
 * and detaching, lookup, visibility, and release when idle.  Its steps are
 * step.c's.  See job.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coord.h"
#include "flush.h"
#include "job.h"
#include "layout.h"
#include "log.h"
#include "prep.h"
#include "prior.h"
#include "session.h"
#include "step.h"

/* --- jobs --------------------------------------------------------------- */

int job_visible_to(const struct job *j, uid_t uid)
{
	return uid == 0 || uid == geteuid() || j->info.owner == uid;
}

/* The newest committed step is what latest names, if it is still there. */
static void job_latest_read(struct job *j)
{
	j->have_last = layout_latest_read(j->jobfd, &j->last_step) == 0 &&
		       layout_step_exists(j->jobfd, j->last_step);
}

/* Take jobfd (steals it) as the job's directory; latest as it says. */
static void job_dir_set(struct job *j, int jobfd)
{
	struct stat st;

	if (j->jobfd >= 0 && j->jobfd != jobfd)
		close(j->jobfd);
	j->jobfd = jobfd;
	if (fstat(jobfd, &st) == 0) {
		j->dev = st.st_dev;
		j->ino = st.st_ino;
	}
	job_latest_read(j);
}

/* Is <root>/<name> still the directory we hold? */
int job_dir_same(const struct job *j)
{
	struct stat st;

	return fstatat(j->srv->rootfd, j->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       S_ISDIR(st.st_mode) && st.st_dev == j->dev && st.st_ino == j->ino;
}

/* The job directory on disk is the truth (README.md "The root, jobs, and who sees what"): an operator may
 * remove or move it while ckptd runs.  Before each step, check that
 * <root>/<job> is still the directory held; if it is gone it is made again
 * for the same owner, if another one is there its job.json rules.  Steps
 * in flight keep the directory they started in, so the switch waits for
 * them.  0 or -errno with msg. */
int job_dir_refresh(struct job *j, char *msg, size_t msglen)
{
	struct store_job_info info;
	struct stat a, b;
	int fd, r, gone;

	/* the whole root moved or removed: its lock went with it, so no
	 * new directory is made anywhere until ckptd restarts */
	if (stat(j->srv->cfg.root, &a) < 0 || fstat(j->srv->rootfd, &b) < 0 ||
	    a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
		snprintf(msg, msglen, "the checkpoint root '%s' was moved or removed while "
			 "ckptd ran; restart ckptd", j->srv->cfg.root);
		return -ESTALE;
	}
	if (job_dir_same(j)) {
		job_latest_read(j);     /* checkpoints may have been removed by hand */
		return 0;
	}
	if (j->steps || j->committing) {
		snprintf(msg, msglen, "the directory of job '%s' was removed or moved while "
			 "saves were in flight; save again when they have finished", j->name);
		return -ESTALE;
	}
	gone = faccessat(j->srv->rootfd, j->name, F_OK, AT_SYMLINK_NOFOLLOW) < 0;
	r = store_job_open(j->srv->rootfd, j->name, j->info.owner, 1, &info, &fd, msg, msglen);
	if (r < 0)
		return r;
	log_info("job %s: its directory was %s; %s", j->name,
		 gone ? "removed or moved away" : "replaced",
		 gone ? "made it again" : "using the new one");
	j->info = info;
	job_dir_set(j, fd);
	return 0;
}

int job_dir_dup(struct job *j)
{
	char msg[256];

	int fd;

	/* a restore while saves are in flight reads the directory they use */
	(void)job_dir_refresh(j, msg, sizeof(msg));
	fd = fcntl(j->jobfd, F_DUPFD_CLOEXEC, 3);
	return fd < 0 ? -errno : fd;
}

static void drop_priors(struct job *j)
{
	for (int r = 0; j->prior && r < j->world_size; r++)
		prior_put(j->prior[r]);
	free(j->prior);
	j->prior = NULL;
}

static void job_free(struct job *j)
{
	close(j->jobfd);
	drop_priors(j);
	free(j->ranks);
	free(j);
}

/* Jobs nobody uses leave memory and status (their directory stays): no
 * trainer connected, nothing in flight, no commit or prune running. */
static void job_release_idle(struct srv *S)
{
	for (struct job **pp = &S->jobs; *pp; ) {
		struct job *j = *pp;
		if (j->nconnected || j->steps || j->committing) {
			pp = &j->next;
			continue;
		}
		*pp = j->next;
		job_free(j);
	}
}

struct job *job_find(struct srv *S, const char *name)
{
	for (struct job *j = S->jobs; j; j = j->next)
		if (strcmp(j->name, name) == 0)
			return j;
	return NULL;
}

int job_attach(struct srv *S, struct session *s, const char *name, int rank,
	       int world_size, char *msg, size_t msglen)
{
	struct job *j = job_find(S, name);
	int r;

	if (!j) {
		struct store_job_info info;
		int jobfd;
		r = store_job_open(S->rootfd, name, s->uid, 1, &info, &jobfd, msg, msglen);
		if (r < 0)
			return r;
		j = calloc(1, sizeof(*j));
		if (!j) {
			close(jobfd);
			return -ENOMEM;
		}
		j->srv = S;
		snprintf(j->name, sizeof(j->name), "%s", name);
		j->info = info;
		j->jobfd = -1;
		job_dir_set(j, jobfd);
		j->next = S->jobs;
		S->jobs = j;
	} else if (j->info.owner != s->uid && s->uid != 0) {
		snprintf(msg, msglen, "job '%s' belongs to another user", name);
		return -EPERM;
	}

	if (j->world_size != world_size) {
		struct session **n;
		if (j->nconnected > 0 || j->steps) {
			snprintf(msg, msglen, "job '%s' is running with world_size %d, not %d",
				 name, j->world_size, world_size);
			return -EINVAL;
		}
		struct prior **p = calloc((size_t)world_size, sizeof(*p));
		n = calloc((size_t)world_size, sizeof(*n));
		if (!n || !p) {
			free(n);
			free(p);
			return -ENOMEM;
		}
		drop_priors(j);
		free(j->ranks);
		j->ranks = n;
		j->prior = p;
		j->world_size = world_size;
	}
	if (j->ranks[rank]) {
		snprintf(msg, msglen, "rank %d of job '%s' is already connected (pid %d)",
			 rank, name, (int)j->ranks[rank]->pid);
		return -EEXIST;
	}
	j->ranks[rank] = s;
	j->nconnected++;
	s->job = j;
	s->rank = rank;
	/* A restarted rank will redo the steps its predecessor left half-saved:
	 * those can no longer complete with data of one incarnation. */
	for (struct step *st = j->steps, *next; st; st = next) {
		next = st->next;
		if (st->state == STEP_COLLECT && !st->failed && st->nsaved < j->world_size &&
		    st->rs[rank] && !st->rs[rank]->sess &&
		    /* multi-node: a durable part is reported and may be published */
		    !(coord_active() && st->rs[rank]->durable)) {
			st->forget = 1;
			step_abort(st, -ECANCELED, "rank %d restarted before every rank saved "
				   "step %llu", rank, (unsigned long long)st->step);
		}
	}
	return 0;
}

int job_settling(const struct job *j)
{
	for (const struct step *st = j->steps; st; st = st->next)
		if (!st->failed && (st->state == STEP_COMMITTING ||
		    (st->state == STEP_COLLECT && st->nsaved == j->world_size) ||
		    /* multi-node: every rank of this node saved, the rest is
		     * elsewhere; the coordinator's outcome settles it */
		    (st->state == STEP_COLLECT && coord_active() &&
		     st->nsaved >= j->nconnected)))
			return 1;
	return 0;
}


void job_detach(struct session *s)
{
	struct job *j = s->job;

	if (!j)
		return;
	for (struct step *st = j->steps, *next; st; st = next) {
		struct rsave *rs = st->rs[s->rank];
		next = st->next;
		if (!rs || rs->sess != s)
			continue;
		rs->sess = NULL;
		/* Staged data belongs to the daemon; unstaged data is torn. */
		if (!rs->staged && !st->failed && st->state == STEP_COLLECT)
			step_abort(st, -ECONNRESET, "rank %d (pid %d) disconnected before "
				   "its data was staged", s->rank, (int)s->pid);
	}
	j->ranks[s->rank] = NULL;
	j->nconnected--;
	s->job = NULL;
	if (!j->nconnected) {
		prep_job_left(j->srv, j->name);
		uv_async_send(&j->srv->wake);     /* job_release_idle */
	}
}

/* --- the loop's wake-up ------------------------------------------------- */

void job_flush_poll(struct srv *S)
{
	flush_poll(S);
	job_release_idle(S);
}

int job_busy(struct srv *S)
{
	for (struct job *j = S->jobs; j; j = j->next)
		if (j->steps)
			return 1;
	return 0;
}

void job_free_all(struct srv *S)
{
	while (S->jobs) {
		struct job *j = S->jobs;
		S->jobs = j->next;
		job_free(j);
	}
}
