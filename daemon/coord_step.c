/* coord_step.c - the coordinator's side of the multi-node commit: the
 * table of (job, step) it decides, reports in, decisions out (commit or
 * abort, told to every node), the deadline, and the file thread that
 * publishes, prunes and removes aborted staging directories in order.
 * Built only with MPI (coord.c's transport); see coord_int.h for threads
 * and locks. */
#ifdef CKPT_HAVE_MPI
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "coord_int.h"
#include "fail.h"
#include "layout.h"
#include "log.h"
#include "srv.h"
#include "store.h"

/* --- coordinator -------------------------------------------------------- */

static void cstep_free(struct cstep *cs)
{
	if (!cs)
		return;
	for (int r = 0; cs->ranks && r < cs->world_size; r++)
		commit_part_free(cs->ranks[r]);
	free(cs->ranks);
	free(cs->rank_node);
	free(cs->seen);
	free(cs->durable);
	free(cs->manifest);
	free(cs);
}

/* Find (job, step), or make it.  Under C.lock. */
static struct cstep *cstep_get(const char *job, uint64_t step, int world_size,
			       const char *txid)
{
	struct cstep *cs;

	for (cs = C.steps; cs; cs = cs->next)
		if (cs->step == step && strcmp(cs->job, job) == 0)
			break;
	if (!cs) {
		if (world_size <= 0)
			return NULL;
		cs = calloc(1, sizeof(*cs));
		if (!cs || !(cs->ranks = calloc((size_t)world_size, sizeof(*cs->ranks))) ||
		    !(cs->rank_node = calloc((size_t)world_size, sizeof(int))) ||
		    !(cs->seen = calloc((size_t)C.size, 1)) ||
		    !(cs->durable = calloc((size_t)C.size, 1))) {
			cstep_free(cs);
			return NULL;
		}
		snprintf(cs->job, sizeof(cs->job), "%s", job);
		cs->step = step;
		cs->world_size = world_size;
		cs->t_first = now_ns();
		cs->memory = -1;
		cs->replicas = -1;
		cs->next = C.steps;
		C.steps = cs;
	}
	if (!cs->txid[0] && txid && strlen(txid) == 32)
		memcpy(cs->txid, txid, 33);
	return cs;
}

/* Decided: the parts are no longer needed (only the outcome is kept). */
static void cstep_drop_parts(struct cstep *cs)
{
	pthread_mutex_lock(&C.lock);
	for (int r = 0; r < cs->world_size; r++) {
		commit_part_free(cs->ranks[r]);
		cs->ranks[r] = NULL;
	}
	pthread_mutex_unlock(&C.lock);
}

/* The outcome to node (-1: every node).  A committed one also says the
 * txid, the node that saved each rank (where its copies are) and, at
 * memory level, the manifest (it is on no disk). */
static void coord__tell(struct cstep *cs, int node)
{
	json_t *o = json_pack("{sssIsbsiss}", "job", cs->job, "step", (json_int_t)cs->step,
			      "ok", cs->decided > 0, "err", cs->err, "msg", cs->msg);
	json_t *owners = cs->decided > 0 ? json_array() : NULL;
	char *txt = NULL;

	for (int r = 0; owners && r < cs->world_size; r++)
		json_array_append_new(owners, json_integer(cs->rank_node[r]));
	if (o && cs->decided > 0 &&
	    (!owners || json_object_set_new(o, "owners", owners) < 0 ||
	     json_object_set_new(o, "txid", json_string(cs->txid)) < 0 ||
	     (cs->manifest && json_object_set_new(o, "manifest",
						  json_string(cs->manifest)) < 0))) {
		json_decref(o);
		o = NULL;
	}
	if (o)
		txt = json_dumps(o, JSON_COMPACT);
	if (!txt) {
		json_decref(o);
		log_warnx("cluster: job %s: out of memory telling step %llu's outcome", cs->job,
			  (unsigned long long)cs->step);
		return;
	}
	for (int n = 0; n < C.size; n++)
		if (node < 0 || n == node) {
			if (n == C.rank)
				coord__post_outcome(json_incref(o));
			else
				coord__send(n, T_OUTCOME, txt);
		}
	json_decref(o);
	free(txt);
}

static int coord__open_job(const char *job)
{
	if (name_check(job, NAME_MAX_JOB, NULL, 0) < 0)
		return -EINVAL;
	int fd = openat(C.rootfd, job, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* --- the file thread (coordinator) ------------------------------------- */

static void coord__files_queue(struct fwork *w)
{
	pthread_mutex_lock(&C.lock);
	*C.fq_tail = w;
	C.fq_tail = &w->next;
	pthread_cond_signal(&C.fcond);
	pthread_mutex_unlock(&C.lock);
}

static struct fwork *fwork_new(int kind, const char *job, uint64_t step, const char *txid,
			       const char *run_id)
{
	struct fwork *w = calloc(1, sizeof(*w));

	if (!w) {
		log_warnx("cluster: job %s: out of memory queueing file work for step %llu",
			  job, (unsigned long long)step);
		return NULL;
	}
	w->kind = kind;
	snprintf(w->job, sizeof(w->job), "%s", job);
	w->step = step;
	snprintf(w->txid, sizeof(w->txid), "%s", txid ? txid : "");
	snprintf(w->run_id, sizeof(w->run_id), "%s", run_id ? run_id : "");
	return w;
}

/* Remove an aborted step's staging directory (after the decision). */
static void coord__remove_staging(const char *job, uint64_t step, const char *txid)
{
	struct fwork *w;

	if (txid && strlen(txid) == 32 && (w = fwork_new(FW_REMOVE, job, step, txid, NULL)))
		coord__files_queue(w);
}

static void files_remove(struct fwork *w)
{
	char name[96];
	int jobfd, r;

	if (layout_staging_name(w->step, w->txid, name, sizeof(name)) < 0 ||
	    (jobfd = coord__open_job(w->job)) < 0)
		return;
	r = store_remove_tree(jobfd, name);
	if (r < 0 && r != -ENOENT && r != -ENOTEMPTY)
		log_warnx("cluster: job %s: cannot remove '%s': %s", w->job, name, strerror(-r));
	close(jobfd);
}

static void files_prune(struct fwork *w)
{
	int jobfd = coord__open_job(w->job);

	if (jobfd < 0)
		return;
	commit_prune(jobfd, w->job, w->run_id, atomic_load(&C.keep_last), w->step);
	close(jobfd);
}

/* The step's parts are not touched by the MPI thread while publishing. */
/* The job and its staging directory are opened by name here, not held
 * from the step's start: a job directory moved during the save has no such
 * staging directory in its place, so nothing is published into a
 * directory the job no longer has (commit.h). */
static void files_publish(struct fwork *w)
{
	struct cstep *cs = w->cs;
	struct commit_step step = { .job = cs->job, .step = cs->step,
				    .world_size = cs->world_size, .parts = cs->ranks };
	char name[96];
	int jobfd = -1, sfd, r;

	FAILPOINT("coord.publish");
	w->outcome = COMMIT_FAILED;
	memcpy(step.run_id, cs->run_id, 33);
	memcpy(step.txid, cs->txid, 33);
	if ((r = layout_staging_name(cs->step, cs->txid, name, sizeof(name))) < 0 ||
	    (r = jobfd = coord__open_job(cs->job)) < 0) {
		snprintf(w->msg, sizeof(w->msg), "publish failed: cannot open job '%s': %s",
			 cs->job, strerror(-r));
	} else if ((sfd = openat(jobfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
				 O_CLOEXEC)) < 0) {
		r = -errno;
		snprintf(w->msg, sizeof(w->msg), "publish failed: cannot open '%s': %s", name,
			 strerror(errno));
	} else {
		r = commit_publish(jobfd, sfd, name, &step, &w->outcome, w->msg, sizeof(w->msg));
		close(sfd);
	}
	if (jobfd >= 0)
		close(jobfd);
	if (r == 0)
		FAILPOINT("coord.after_publish");
	w->r = r;
}

void *coord__files_main(void *arg)
{
	struct fwork *w;

	pthread_mutex_lock(&C.lock);
	for (;;) {
		while (!C.fq && !C.fstop)
			pthread_cond_wait(&C.fcond, &C.lock);
		if (!(w = C.fq))
			break;                  /* stopping, nothing left */
		if (!(C.fq = w->next))
			C.fq_tail = &C.fq;
		pthread_mutex_unlock(&C.lock);
		if (w->kind == FW_PUBLISH)
			files_publish(w);
		else if (w->kind == FW_PRUNE)
			files_prune(w);
		else
			files_remove(w);
		pthread_mutex_lock(&C.lock);
		if (w->kind == FW_PUBLISH) {    /* the MPI thread decides */
			w->next = NULL;
			*C.fdone_tail = w;
			C.fdone_tail = &w->next;
			pthread_cond_signal(&C.cond);
		} else {
			free(w);
		}
	}
	pthread_mutex_unlock(&C.lock);
	return NULL;
}

/* Record the decision (committed 1 / aborted -1).  cs->decided is read by
 * status (coord_busy, coord_status_json) on the loop thread: written only
 * under C.lock, read on the MPI thread without it (the only writer). */
static void coord__vdecide(struct cstep *cs, int decided, int err, const char *fmt,
			   va_list ap)
{
	pthread_mutex_lock(&C.lock);
	cs->decided = decided;
	cs->t_decided = now_ns();
	cs->err = err;
	vsnprintf(cs->msg, sizeof(cs->msg), fmt, ap);
	pthread_mutex_unlock(&C.lock);
}

static void coord__decide(struct cstep *cs, int decided, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void coord__decide(struct cstep *cs, int decided, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	coord__vdecide(cs, decided, err, fmt, ap);
	va_end(ap);
	log_warnx("cluster: job %s: step %llu: %s", cs->job, (unsigned long long)cs->step,
		  cs->msg);
}

static void coord__decide_ok(struct cstep *cs)
{
	pthread_mutex_lock(&C.lock);
	cs->decided = 1;
	cs->t_decided = now_ns();
	pthread_mutex_unlock(&C.lock);
}

/* Decide abort: tell everyone, remove the staging directory. */
void coord__abort(struct cstep *cs, int err, const char *fmt, ...)
{
	va_list ap;

	if (cs->decided)
		return;
	va_start(ap, fmt);
	coord__vdecide(cs, -1, err, fmt, ap);
	va_end(ap);
	log_warnx("cluster: job %s: step %llu aborted on every node: %s", cs->job,
		  (unsigned long long)cs->step, cs->msg);
	coord__tell(cs, -1);
	coord__remove_staging(cs->job, cs->step, cs->txid);
	cstep_drop_parts(cs);
}

/* Every rank is durable: publish (commit.h) on the file thread. */
static void coord__publish(struct cstep *cs)
{
	struct fwork *w = fwork_new(FW_PUBLISH, cs->job, cs->step, cs->txid, cs->run_id);

	if (!w) {
		coord__abort(cs, -ENOMEM, "out of memory starting the publish");
		return;
	}
	w->cs = cs;
	cs->publishing = 1;
	coord__files_queue(w);
}

/* Every rank of a memory-level step is in memory on its node and its
 * partners: committed at memory level, nothing written.  The manifest
 * goes to every node with the outcome (restore and the flush when the
 * world ends need it). */
static void coord__commit_memory(struct cstep *cs)
{
	struct commit_step cst = { .job = cs->job, .step = cs->step,
				   .world_size = cs->world_size, .parts = cs->ranks };
	struct mfst m;
	char msg[512];
	size_t len = 0;
	int r;

	memcpy(cst.run_id, cs->run_id, 33);
	memcpy(cst.txid, cs->txid, 33);
	if ((r = commit_manifest(&cst, &m, msg, sizeof(msg))) < 0) {
		coord__abort(cs, r, "%s", msg);
		return;
	}
	r = mfst_dump(&m, &cs->manifest, &len);
	commit_manifest_release(&m);
	if (r < 0) {
		coord__abort(cs, r, "out of memory writing the manifest");
		return;
	}
	coord__decide_ok(cs);
	log_info("cluster: job %s: step %llu committed in memory (%d ranks)", cs->job,
		 (unsigned long long)cs->step, cs->world_size);
	coord__tell(cs, -1);
	cstep_drop_parts(cs);
}

/* The file thread published (or not): decide, tell everyone, then prune
 * (only after every node was told). */
static void coord__published(struct fwork *w)
{
	struct cstep *cs = w->cs;

	cs->publishing = 0;
	if (w->r == 0) {
		coord__decide_ok(cs);
		log_info("cluster: job %s: published iter_%09llu (%d ranks)", cs->job,
			 (unsigned long long)cs->step, cs->world_size);
		coord__tell(cs, -1);
		if (atomic_load(&C.keep_last) > 0) {
			struct fwork *p = fwork_new(FW_PRUNE, cs->job, cs->step, NULL, cs->run_id);
			if (p)
				coord__files_queue(p);
		}
	} else if (w->outcome == COMMIT_UNKNOWN) {
		/* visible but not fully synced: recovery on restart decides; the
		 * staging directory is gone (renamed), nothing to remove */
		coord__decide(cs, -1, w->r, "%s", w->msg);
		coord__tell(cs, -1);
	} else {
		coord__abort(cs, w->r, "%s", w->msg);
	}
	cstep_drop_parts(cs);
}

void coord__files_done(void)
{
	struct fwork *list, *w;

	pthread_mutex_lock(&C.lock);
	list = C.fdone;
	C.fdone = NULL;
	C.fdone_tail = &C.fdone;
	pthread_mutex_unlock(&C.lock);
	while ((w = list)) {
		list = w->next;
		coord__published(w);
		free(w);
	}
}

/* A node's report (the coordinator's own, or decoded from the wire).  A
 * DURABLE report's part is taken (rp->part set to NULL) when kept. */
void coord__on_report(int node, struct report *rp)
{
	const char *job = rp->job;
	int tag = rp->tag, world = rp->world_size;
	struct cstep *cs;

	if (node < 0 || node >= C.size)
		return;
	pthread_mutex_lock(&C.lock);
	cs = cstep_get(job, rp->step, tag == T_SEEN || tag == T_DURABLE ? world : 0,
		       rp->txid);
	pthread_mutex_unlock(&C.lock);
	if (!cs) {
		/* a CLEAN of a forgotten step is ignored: the same name may be a
		 * new attempt's by now; start-up recovery removes leftovers */
		if (tag == T_SEEN || tag == T_DURABLE)
			log_warnx("cluster: out of memory tracking job %s step %llu", job,
				  (unsigned long long)rp->step);
		return;
	}
	if (cs->publishing) {
		/* the outcome goes to every node when the publish is done */
		if (tag == T_FAILED)
			log_warnx("cluster: job %s: step %llu: node %d failed while every rank "
				  "was durable and the step is being published: %s", job,
				  (unsigned long long)rp->step, node, rp->msg);
		return;
	}
	if (cs->decided) {
		/* a late node: it gets the outcome at once */
		if (tag == T_SEEN || tag == T_DURABLE || tag == T_FAILED)
			coord__tell(cs, node);
		if (tag == T_CLEAN && cs->decided < 0)
			coord__remove_staging(job, rp->step, cs->txid);
		return;
	}
	switch (tag) {
	case T_SEEN:
		cs->seen[node] = 1;
		if (world != cs->world_size)
			coord__abort(cs, -EINVAL, "node %d says world_size %d, node(s) before it %d",
				     node, world, cs->world_size);
		break;
	case T_DURABLE: {
		int r = rp->part ? rp->part->rank : -1;
		cs->seen[node] = 1;
		if (world != cs->world_size) {
			coord__abort(cs, -EINVAL, "node %d says world_size %d, not %d", node,
				     world, cs->world_size);
			break;
		}
		if (r < 0 || r >= cs->world_size || strlen(rp->run_id) != 32) {
			coord__abort(cs, -EINVAL, "node %d sent a malformed report", node);
			break;
		}
		if (cs->memory >= 0 && cs->memory != rp->memory) {
			coord__abort(cs, -EINVAL, "node %d keeps step %llu %s, the nodes before "
				     "it %s: persist_every must be the same on every node", node,
				     (unsigned long long)rp->step, rp->memory ? "in memory only" :
				     "on disk", cs->memory ? "in memory only" : "on disk");
			break;
		}
		if (cs->replicas >= 0 && cs->replicas != rp->replicas) {
			coord__abort(cs, -EINVAL, "node %d keeps copies on %d partner node(s), the "
				     "nodes before it on %d: memory_replicas must be the same on "
				     "every node", node, rp->replicas, cs->replicas);
			break;
		}
		cs->memory = rp->memory;
		cs->replicas = rp->replicas;
		if (!cs->run_id[0])
			memcpy(cs->run_id, rp->run_id, 33);
		if (strcmp(cs->run_id, rp->run_id) || strcmp(cs->txid, rp->txid)) {
			coord__abort(cs, -EINVAL, "node %d saves another run of job %s", node, job);
			break;
		}
		if (cs->ranks[r]) {
			coord__abort(cs, -EEXIST, "rank %d saved on node %d and node %d", r,
				     cs->rank_node[r], node);
			break;
		}
		pthread_mutex_lock(&C.lock);
		cs->ranks[r] = rp->part;
		rp->part = NULL;
		cs->rank_node[r] = node;
		cs->durable[node] = 1;
		cs->ndurable++;
		pthread_mutex_unlock(&C.lock);
		if (cs->ndurable == cs->world_size && cs->memory)
			coord__commit_memory(cs);
		else if (cs->ndurable == cs->world_size)
			coord__publish(cs);
		break;
	}
	case T_FAILED:
		coord__abort(cs, rp->err, "node %d: %s", node, rp->msg[0] ? rp->msg : "failed");
		break;
	case T_CLEAN:            /* undecided: a node's own writers are done */
		break;
	}
}

void coord__check_deadlines(uint64_t now)
{
	uint64_t limit = (uint64_t)C.deadline_ms * 1000000ull;

	for (struct cstep *cs = C.steps; cs; cs = cs->next) {
		char missing[200] = "";
		size_t n = 0;
		if (cs->decided || cs->publishing || now <= cs->t_first + limit)
			continue;
		for (int r = 0; r < cs->world_size && n < sizeof(missing) - 16; r++)
			if (!cs->ranks[r])
				n += (size_t)snprintf(missing + n, sizeof(missing) - n, "%s%d",
						      n ? "," : "", r);
		coord__abort(cs, -ETIMEDOUT, "rank(s) %s not durable on every node within %u ms "
			     "(coord_deadline_ms; %d of %d ranks durable)", missing, C.deadline_ms,
			     cs->ndurable, cs->world_size);
	}
	/* forget outcomes after a while.  A step decided above was stamped
	 * after now was read: compare without subtracting from now. */
	pthread_mutex_lock(&C.lock);
	for (struct cstep **pp = &C.steps, *cs; (cs = *pp);) {
		if (cs->decided && now > cs->t_decided + COORD_KEEP_NS) {
			*pp = cs->next;
			cstep_free(cs);
		} else {
			pp = &cs->next;
		}
	}
	pthread_mutex_unlock(&C.lock);
}

#endif
