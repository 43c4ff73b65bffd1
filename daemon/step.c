/* step.c - a step from its first SAVE to its commit or abort: the
 * deadline, the clients' events, the pipeline's notices, one publish at a
 * time per job, and the coordinator's outcome.  See step.h. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "commit.h"
#include "coord.h"
#include "flush.h"
#include "job.h"
#include "layout.h"
#include "log.h"
#include "mcat.h"
#include "memt.h"
#include "metrics.h"
#include "notify.h"
#include "plan.h"
#include "prior.h"
#include "session.h"
#include "step.h"

/* How a step ends without committing (step_fail). */
#define FAIL_DECIDED 1   /* the publish's or the coordinator's outcome: not
			    reported to the coordinator */
#define FAIL_ALL     2   /* the step's error, not a rank's: every rank gets it */

static void step_cleanup(struct step *st);
static void step_note_prior(struct step *st);
static void step_fail(struct step *st, int err, int how, const char *msg);
static void maybe_commit(struct job *j);
static void rank_durable(struct step *st, struct rsave *rs);

/* --- events ------------------------------------------------------------- */

static void send_event(struct rsave *rs, const char *phase, int err, const char *msg)
{
	json_t *o;
	char *txt;
	uint64_t t0 = rs->t_accept_ns;

	if (!rs->sess)
		return;
	o = json_pack("{sIsIsssIsIsIsI}", "ticket", (json_int_t)rs->ticket,
		      "step", (json_int_t)rs->step->step, "phase", phase,
		      "bytes", (json_int_t)rs->bytes_total,
		      "staged_us", (json_int_t)(rs->t_staged_ns ? (rs->t_staged_ns - t0) / 1000 : 0),
		      /* t_durable_ns is the writers' until DONE reached the loop */
		      "durable_us", (json_int_t)(rs->finished && !err && !rs->step->memory &&
						 rs->t_durable_ns ?
						 (rs->t_durable_ns - t0) / 1000 : 0),
		      "committed_us", (json_int_t)(!strcmp(phase, "committed") ?
						   (now_ns() - t0) / 1000 : 0));
	if (o && err && (json_object_set_new(o, "error", json_integer(err)) < 0 ||
			 json_object_set_new(o, "message", json_string(msg)) < 0)) {
		json_decref(o);
		o = NULL;
	}
	txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (txt) {   /* jansson 2.14 may return a truncated text when out of memory */
		json_t *chk = json_loads(txt, 0, NULL);
		if (!chk || !json_equal(chk, o)) {
			free(txt);
			txt = NULL;
		}
		json_decref(chk);
	}
	json_decref(o);
	if (!txt) {
		/* Out of memory: the client must still learn the outcome (it
		 * would wait for it forever), so without the timings. */
		char buf[320], tail[96] = "}";
		if (err)
			snprintf(tail, sizeof(tail), ",\"error\":%d,\"message\":"
				 "\"(out of memory describing the error)\"}", err);
		snprintf(buf, sizeof(buf), "{\"ticket\":%llu,\"step\":%llu,\"phase\":\"%s\","
			 "\"bytes\":%llu,\"staged_us\":0,\"durable_us\":0,\"committed_us\":0%s",
			 (unsigned long long)rs->ticket, (unsigned long long)rs->step->step,
			 phase, (unsigned long long)rs->bytes_total, tail);
		session_reply(rs->sess, PROTO_EVENT, 0, 0, buf, NULL, 0);
		return;
	}
	session_reply(rs->sess, PROTO_EVENT, 0, 0, txt, NULL, 0);
	free(txt);
}

/* --- steps -------------------------------------------------------------- */

static void deadline_cb(uv_timer_t *t)
{
	struct step *st = t->data;
	char missing[256] = "";
	size_t n = 0;

	for (int r = 0; r < st->job->world_size && n < sizeof(missing) - 16; r++)
		if (!st->rs[r])
			n += (size_t)snprintf(missing + n, sizeof(missing) - n, "%s%d",
					      n ? "," : "", r);
	step_abort(st, -ETIMEDOUT, "rank(s) %s did not save step %llu within %u ms",
		   missing, (unsigned long long)st->step, st->job->srv->cfg.step_deadline_ms);
}

static void step_free_cb(uv_handle_t *h)
{
	struct step *st = h->data;
	free(st->parts);
	free(st->rs);
	free(st);
}

static void step_unref(struct step *st)
{
	if (--st->refs == 0)
		uv_close((uv_handle_t *)&st->deadline, step_free_cb);
}

/* A new step of j with its staging directory: 0 and *out, or -errno with
 * msg. */
static int step_new(struct job *j, uint64_t step, struct step **out, char *msg,
		    size_t msglen)
{
	struct srv *S = j->srv;
	struct step *st = calloc(1, sizeof(*st));
	int r;

	if (!st || !(st->rs = calloc((size_t)j->world_size, sizeof(*st->rs))) ||
	    !(st->parts = calloc((size_t)j->world_size, sizeof(*st->parts)))) {
		if (st)
			free(st->rs);
		free(st);
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	st->job = j;
	st->step = step;
	st->seq = ++S->step_seq;
	st->t0_ns = now_ns();
	st->stagingfd = -1;
	/* between every persist_every-th step, steps live in memory only */
	st->memory = coord_active() && S->cfg.persist_every > 1 &&
		     step % S->cfg.persist_every != 0;
	if (coord_active()) {
		/* every node of the step writes into one staging directory */
		r = coord_txid(j->info.run_id, step, st->txid);
		if (r == 0 && !st->memory)
			r = store_staging_join(j->jobfd, step, st->txid, &st->stagingfd,
					       st->staging_name, sizeof(st->staging_name));
	} else {
		store_new_id(st->txid);
		r = store_staging_create(j->jobfd, step, st->txid, &st->stagingfd,
					 st->staging_name, sizeof(st->staging_name));
	}
	if (r < 0) {
		snprintf(msg, msglen, "cannot create the staging directory: %s", strerror(-r));
		free(st->parts);
		free(st->rs);
		free(st);
		return r;
	}
	uv_timer_init(S->loop, &st->deadline);
	st->deadline.data = st;
	st->refs = 1;
	if (coord_active())      /* the coordinator's coord_deadline_ms rules */
		coord_report_seen(j->name, step, st->txid, j->world_size);
	else
		uv_timer_start(&st->deadline, deadline_cb, S->cfg.step_deadline_ms, 0);
	st->next = j->steps;
	j->steps = st;
	*out = st;
	return 0;
}

static void rsave_free(struct rsave *rs)
{
	if (!rs->staged)
		for (size_t i = 0; i < rs->nregions; i++)
			region_unref(rs->regions[i]);
	memt_cap_put(rs->memt);
	prior_put(rs->prior);
	if (rs->prior_dirfd >= 0)
		close(rs->prior_dirfd);
	plan_free(rs);
	free(rs);
}

void step_abort(struct step *st, int err, const char *fmt, ...)
{
	char msg[sizeof(st->msg)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	step_fail(st, err, 0, msg);
}

/* The one place a step is recorded as failed: the clients, flush waiters,
 * counters, the late-rank memory and (unless it is its word) the
 * coordinator learn it.  Cleans up once every rank's writers are done,
 * unless a publish is running (its completion cleans up). */
static void step_fail(struct step *st, int err, int how, const char *msg)
{
	struct job *j = st->job;

	if (st->failed)
		return;
	st->failed = 1;
	st->err = err;
	snprintf(st->msg, sizeof(st->msg), "%s", msg);
	log_warnx("job %s: step %llu aborted: %s", j->name,
		  (unsigned long long)st->step, st->msg);
	uv_timer_stop(&st->deadline);
	if (!st->forget) {
		unsigned k = j->naborted++ % JOB_ABORTED_MEMORY;
		j->aborted[k].step = st->step;
		j->aborted[k].when_ns = now_ns();
		snprintf(j->aborted[k].why, sizeof(j->aborted[k].why), "%.159s", st->msg);
	}
	j->srv->saves_failed++;
	metrics_failed(err);
	for (int r = 0; r < j->world_size; r++) {
		struct rsave *rs = st->rs[r];
		if (!rs)
			continue;
		/* the rank whose error it is gets its own error (read before
		 * pipe_cancel records err as every unfinished rank's error); the
		 * others get -ECANCELED and learn why from the message, unless
		 * the reason is the step's, not a rank's (deadline, shutdown,
		 * publish) */
		int own = rs->err;
		if (!rs->finished)
			pipe_cancel(&j->srv->pipe, rs, err, st->msg);
		send_event(rs, "failed", own ? own : ((how & FAIL_ALL) || err == -ETIMEDOUT ||
			   err == -ESHUTDOWN ? err : -ECANCELED), st->msg);
	}
	flush_on_step_end(j->srv, st, 0);
	if (coord_active() && !(how & FAIL_DECIDED))
		coord_report_failed(j->name, st->step, st->txid, err, st->msg);
	if (st->nfinished == st->nsaved && st->state != STEP_COMMITTING)
		step_cleanup(st);
}

/* The one place a step is recorded as committed (published here, or by
 * the coordinator): latest, counters, every local rank's client, flush
 * waiters.  The caller cleans up. */
static void step_committed(struct step *st, const char *where)
{
	struct job *j = st->job;
	struct srv *S = j->srv;
	uint64_t linked, cloned;
	int here = 0;

	st->publish_ok = 1;
	if (!j->have_last || st->step > j->last_step) {
		j->last_step = st->step;
		j->have_last = 1;
	}
	j->last_unix = (int64_t)time(NULL);
	S->saves_committed++;
	for (int r = 0; r < j->world_size; r++) {
		if (!st->rs[r])
			continue;
		here++;
		metrics_observe(METRICS_COMMITTED, now_ns() - st->rs[r]->t_accept_ns);
		prior_shared_bytes(st->rs[r], &linked, &cloned);
		metrics_committed(st->rs[r]->bytes_total, linked, cloned);
		send_event(st->rs[r], "committed", 0, NULL);
	}
	step_note_prior(st);
	log_info("job %s: committed iter_%09llu (%s%d of %d ranks here)", j->name,
		 (unsigned long long)st->step, where, here, j->world_size);
	notify_statusf("serving; %llu committed, %llu failed; last %s iter_%09llu",
		       (unsigned long long)S->saves_committed,
		       (unsigned long long)S->saves_failed, j->name,
		       (unsigned long long)st->step);
	memt_step_committed(S->memt, j->name, st->step);
	flush_on_step_end(S, st, 1);
}

/* Incremental saves: the files of a committed step are what each local
 * rank's next save compares with (a memory-level step wrote none). */
static void step_note_prior(struct step *st)
{
	struct job *j = st->job;

	for (int r = 0; !st->memory && j->prior && r < j->world_size; r++) {
		if (!st->rs[r])
			continue;
		prior_put(j->prior[r]);
		j->prior[r] = prior_from_rsave(st->rs[r], st->step);
	}
}

/* rs's rank's newest committed files and their directory, for rs to link
 * what did not change and clone the unchanged chunks of what did (wr.c);
 * without them every file is written.  rs hashes its files by range
 * (clone) for the next save even when it has none. */
static void attach_prior(struct rsave *rs, const struct job *j, const struct srv *S)
{
	struct prior *p = j->prior ? j->prior[rs->rank] : NULL;
	char name[32];

	/* a link saves nothing on a small file (RNG state, a scheduler's),
	 * and its own copy in each step keeps the walk back past a damaged
	 * one possible */
	rs->link_min = 1u << 20;
	rs->clone = srv_clones(S);
	if (!p || layout_iter_name(p->step, name, sizeof(name)) < 0)
		return;
	rs->prior_dirfd = openat(j->jobfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
				 O_CLOEXEC);
	if (rs->prior_dirfd < 0)
		return;               /* removed by an operator: write it all */
	rs->prior = prior_get(p);
	rs->max_shared = S->cfg.incremental_max_shared;
}

static void step_cleanup(struct step *st)
{
	struct job *j = st->job;
	struct step **pp;

	for (pp = &j->steps; *pp && *pp != st; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = st->next;
	if (!st->publish_ok && coord_active()) {
		/* only the coordinator removes: other nodes may still write */
		coord_report_clean(j->name, st->step, st->txid);
	}
	if (!st->publish_ok)
		memt_step_failed(j->srv->memt, j->name, st->step);
	if (!st->publish_ok && !coord_active()) {
		int r = store_remove_tree(j->jobfd, st->staging_name);
		if (r < 0)
			log_warnx("job %s: cannot remove '%s': %s", j->name,
				  st->staging_name, strerror(-r));
	}
	for (int r = 0; r < j->world_size; r++) {
		if (st->rs[r])
			rsave_free(st->rs[r]);
		commit_part_free(st->parts[r]);
	}
	memset(st->rs, 0, sizeof(*st->rs) * (size_t)j->world_size);
	memset(st->parts, 0, sizeof(*st->parts) * (size_t)j->world_size);
	if (st->stagingfd >= 0)
		close(st->stagingfd);
	st->state = STEP_DONE;
	uv_timer_stop(&st->deadline);
	step_unref(st);
}

/* The reason of a recent abort of step (so a late rank learns the cause),
 * or NULL. */
static const char *step_aborted_before(struct job *j, uint64_t step, uint64_t since_ns)
{
	unsigned n = j->naborted < JOB_ABORTED_MEMORY ? j->naborted : JOB_ABORTED_MEMORY;
	for (unsigned i = 0; i < n; i++)
		if (j->aborted[i].step == step && j->aborted[i].when_ns > since_ns)
			return j->aborted[i].why;
	return NULL;
}

static int mkdirs_for(int dirfd, const char *path)
{
	char dir[LAYOUT_PATH_MAX];
	char *slash;
	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash)
		return 0;
	*slash = '\0';
	return store_mkdirs(dirfd, dir);
}

int step_save(struct session *s, uint64_t step, uint64_t *ticket, char txid[33],
	     char *msg, size_t msglen)
{
	struct job *j = s->job;
	struct srv *S = s->srv;
	struct step *st;
	struct rsave *rs;
	char nokeep[256];
	uint64_t linked = 0;
	int created = 0, r;

	if (step > 999999999ull) {
		snprintf(msg, msglen, "step %llu is out of range (at most 999999999)",
			 (unsigned long long)step);
		return -ERANGE;
	}
	for (st = j->steps; st && st->step != step; st = st->next)
		;
	/* Draining: the other ranks of a step already accepted may still join
	 * it (else it could never commit); new steps are refused. */
	if (S->draining && (!st || st->state != STEP_COLLECT || st->failed)) {
		snprintf(msg, msglen, "ckptd is shutting down");
		return -ESHUTDOWN;
	}
	if (st && (st->failed || st->state != STEP_COLLECT)) {
		snprintf(msg, msglen, "step %llu was aborted: %s", (unsigned long long)step,
			 st->failed ? st->msg : "already committing");
		return -ECANCELED;
	}
	if (st && st->rs[s->rank]) {
		snprintf(msg, msglen, "rank %d already saves step %llu", s->rank,
			 (unsigned long long)step);
		return -EALREADY;
	}
	if (!st) {
		char iter[32];
		const char *why = step_aborted_before(j, step, s->hello_ns);
		if (!why && (r = job_dir_refresh(j, msg, msglen)) < 0)
			return r;
		if (why) {
			snprintf(msg, msglen, "step %llu was aborted earlier: %s",
				 (unsigned long long)step, why);
			return -ECANCELED;
		}
		layout_iter_name(step, iter, sizeof(iter));
		if (faccessat(j->jobfd, iter, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
			snprintf(msg, msglen, "step %llu is already committed (to roll back and "
				 "save it again, remove the newer checkpoints first: README.md, "
				 "Rolling back)", (unsigned long long)step);
			return -EEXIST;
		}
		/* keep_last counts by step number: an older step would be the
		 * first one pruned, and restore LATEST would still give the
		 * newer one */
		if (j->have_last && step < j->last_step) {
			snprintf(msg, msglen, "step %llu is older than step %llu, the newest "
				 "checkpoint of job '%s': a job's steps only go up (to roll back, "
				 "remove the newer checkpoints first: README.md, Rolling back)",
				 (unsigned long long)step, (unsigned long long)j->last_step, j->name);
			return -EINVAL;
		}
		if ((r = step_new(j, step, &st, msg, msglen)) < 0)
			return r;
		created = 1;
	}

	rs = calloc(1, sizeof(*rs));
	if (!rs) {
		r = -ENOMEM;
		goto fail;
	}
	rs->staging_fd = -1;
	rs->prior_dirfd = -1;
	rs->job = j->name;
	rs->memory_only = st->memory;
	rs->digest_alg = digest_by_name(S->cfg.file_digest);   /* validated */
	r = plan_rsave(rs, s, S->pool.chunk_bytes, msg, msglen);
	for (size_t i = 0; r == 0 && !st->memory && i < rs->nfiles; i++)
		if ((r = mkdirs_for(st->stagingfd, rs->files[i].path)) < 0)
			snprintf(msg, msglen, "cannot create directories for %s: %s",
				 rs->files[i].path, strerror(-r));
	if (r == 0 && !st->memory &&
	    (rs->staging_fd = fcntl(st->stagingfd, F_DUPFD_CLOEXEC, 3)) < 0)
		r = -errno;
	if (r < 0)
		goto fail_rs;
	if (!st->memory && S->cfg.incremental)
		attach_prior(rs, j, S);
	/* CKPT_FROZEN shards that did not change: linked now, not copied (the
	 * memory tier's capture shares them, and partners their copy).  Saves
	 * that overlap link to the same committed prior, so the session
	 * counts its own (every PRIOR_FROZEN_CHECK-th save compares them) and
	 * links only to a step no older than its last save that compared
	 * them (one still in flight holds newer bytes). */
	if (!s->repl_whole && s->frozen_unchecked + 1 < PRIOR_FROZEN_CHECK &&
	    rs->prior && rs->prior->step >= s->frozen_compared &&
	    (linked = prior_prelink(rs, S->memt)))
		log_debug("job %s rank %d step %llu: %llu bytes of frozen shards linked to "
			  "iter_%09llu, not copied", j->name, rs->rank, (unsigned long long)step,
			  (unsigned long long)linked, (unsigned long long)rs->prior->step);
	s->frozen_unchecked = linked ? s->frozen_unchecked + 1 : 0;
	if (!linked)
		s->frozen_compared = step;
	rs->memt_whole = s->repl_whole;
	s->repl_whole = 0;
	rs->memt = memt_cap_start(S->memt, j->name, step, st->txid, rs, nokeep,
				  sizeof(nokeep));
	if (!rs->memt && st->memory) {
		r = -ENOSPC;
		snprintf(msg, msglen, "step %llu is kept in memory only (persist_every %u), but "
			 "%s: raise memory_tier_bytes or lower persist_every",
			 (unsigned long long)step, S->cfg.persist_every,
			 *nokeep ? nokeep : "the memory tier is off");
		goto fail_rs;
	}
	if (!rs->memt && *nokeep)
		log_info("job %s: step %llu is not kept in memory: %s", j->name,
			 (unsigned long long)step, nokeep);
	rs->step = st;
	rs->sess = s;
	rs->refs = 1;
	rs->ticket = ++s->next_ticket;
	rs->t_accept_ns = now_ns();
	st->rs[s->rank] = rs;     /* before submit: a 0-chunk rsave notifies at once */
	st->nsaved++;
	if ((r = pipe_submit(&S->pipe, rs)) < 0) {
		st->rs[s->rank] = NULL;
		st->nsaved--;
		snprintf(msg, msglen, "out of memory queueing the save");
		goto fail_rs;
	}
	if (st->nsaved == j->world_size)
		uv_timer_stop(&st->deadline);
	*ticket = rs->ticket;
	memcpy(txid, st->txid, 33);
	return 0;

fail_rs:
	rsave_free(rs);
fail:
	/* a memory-level step that cannot be held here cannot commit: the
	 * other nodes' ranks learn it now, not at the deadline */
	if (created && st->nsaved == 0 && st->memory && r == -ENOSPC)
		coord_report_failed(j->name, step, st->txid, r, msg);
	if (created && st->nsaved == 0)
		step_cleanup(st);
	else if (st->nsaved > 0)
		/* the other ranks would wait for this one until the deadline
		 * (its staging directory removed, say): the step ends now */
		step_abort(st, r, "rank %d: %s", s->rank, msg);
	return r;
}

/* --- multi-node (coord.h) ----------------------------------------------- */

static void cluster_outcome(struct srv *S, const struct coord_outcome *o)
{
	struct job *j = job_find(S, o->job);
	struct step *st = NULL;

	/* partners' copies are kept (or dropped) on every node, whether or
	 * not it saves ranks of the job */
	if (o->ok) {
		memt_step_committed(S->memt, o->job, o->step);
		if (o->manifest)
			memt_step_pin(S->memt, o->job, o->step);
		mcat_committed(o->job, o->step, o->txid, o->manifest, o->owners, o->nowners);
	} else {
		memt_step_aborted(S->memt, o->job, o->step);
	}
	for (st = j ? j->steps : NULL; st; st = st->next)
		if (st->step == o->step && st->state == STEP_COLLECT)
			break;
	if (!st)
		return;
	if (!o->ok) {
		step_fail(st, o->err ? o->err : -ECANCELED, FAIL_DECIDED, o->msg);
		return;
	}
	if (st->failed) {
		log_warnx("job %s: step %llu was committed by the coordinator after it "
			  "failed here", j->name, (unsigned long long)o->step);
		return;
	}
	step_committed(st, st->memory ? "in memory; " : "cluster; ");
	step_cleanup(st);
}

static void cluster_lost(struct srv *S, const char *why)
{
	step_abort_all(S, -EHOSTDOWN, why);
	srv_drain(S, 1, 2000);
}

/* A rank's copy reached its partners' memory (or not): REPLICATED, then
 * durable as before; a memory-level step cannot do without it. */
static void cluster_replicated(struct srv *S, const char *name, uint64_t step, int rank,
			       int ok, const char *msg)
{
	struct job *j = job_find(S, name);
	struct step *st;
	struct rsave *rs;

	for (st = j ? j->steps : NULL; st; st = st->next)
		if (st->step == step && st->state == STEP_COLLECT)
			break;
	if (!st || st->failed || rank < 0 || rank >= j->world_size || !(rs = st->rs[rank]))
		return;
	if (ok) {
		send_event(rs, "replicated", 0, NULL);
	} else if (st->memory) {
		step_abort(st, -EHOSTUNREACH, "rank %d: step %llu is kept in memory only, but "
			   "its copy did not reach the partner nodes: %s", rank,
			   (unsigned long long)step, msg);
		return;
	} else {
		log_warnx("job %s: rank %d of step %llu is not replicated (it is on disk): %s",
			  j->name, rank, (unsigned long long)step, msg);
		/* a partner without the older step it shares files with
		 * gets the next save whole */
		if (rs->sess && memt_cap_shares(rs->memt))
			rs->sess->repl_whole = 1;
	}
	rank_durable(st, rs);
}

const struct coord_hooks step_coord_hooks = { cluster_outcome, cluster_lost,
					      cluster_replicated };

/* --- pipeline notices --------------------------------------------------- */

/* A rank is durable (or, at memory level, held on its partners): its part
 * of the manifest goes to the coordinator (cluster) or waits for the other
 * ranks here. */
static void step_part_durable(struct step *st, struct rsave *rs)
{
	struct job *j = st->job;
	struct commit_part *part;

	if (commit_part_from_rsave(rs, &part) < 0) {
		step_abort(st, -ENOMEM, "out of memory recording rank %d's part", rs->rank);
		return;
	}
	if (coord_active()) {
		coord_report_durable(j->name, j->info.run_id, st->step, st->txid,
				     j->world_size, st->memory, part);
		return;
	}
	st->parts[rs->rank] = part;
	if (st->ndurable == j->world_size)
		maybe_commit(j);
}

/* Rank rs's files are written (and held where the memory levels want
 * them): DURABLE (a memory-level step has no such phase), its part to
 * the commit. */
static void rank_durable(struct step *st, struct rsave *rs)
{
	rs->durable = 1;
	st->ndurable++;
	if (!st->memory) {
		metrics_observe(METRICS_DURABLE, (rs->t_durable_ns ? rs->t_durable_ns :
				now_ns()) - rs->t_accept_ns);
		send_event(rs, "durable", 0, NULL);
	}
	step_part_durable(st, rs);
}

void step_on_notice(struct srv *S, enum pipe_notice what, struct rsave *rs)
{
	struct step *st = rs->step;

	if (what == PIPE_STAGED) {
		rs->staged = 1;
		if (!rs->t_staged_ns)      /* stamped by the stager; 0 chunks: now */
			rs->t_staged_ns = now_ns();
		metrics_observe(METRICS_STAGED, rs->t_staged_ns - rs->t_accept_ns);
		/* the trainer's memory is no longer needed */
		for (size_t i = 0; i < rs->nregions; i++)
			region_unref(rs->regions[i]);
		st->nstaged++;
		/* a chunk that failed to copy still counts as filled: its
		 * failure (cancel, set before) may reach us after this notice */
		if (!st->failed && !atomic_load(&rs->cancel))
			send_event(rs, "staged", 0, NULL);
		return;
	}

	rs->finished = 1;
	st->nfinished++;
	if (rs->err && !st->failed) {
		step_abort(st, rs->err, "rank %d: %s", rs->rank, rs->errmsg);
		return;     /* step_abort cleans up when all are finished */
	}
	if (!st->failed && (st->memory || coord_replicas() > 0)) {
		char why[200];
		if (memt_cap_ready(rs->memt, why, sizeof(why)) == 0) {
			coord_replicate(st->job->name, st->step, rs->rank, rs->memt);
			return;        /* cluster_replicated goes on */
		}
		if (st->memory) {
			step_abort(st, -ENOSPC, "rank %d: step %llu is kept in memory only "
				   "(persist_every), but %s", rs->rank,
				   (unsigned long long)st->step, why);
			return;
		}
		log_warnx("job %s: rank %d of step %llu is not replicated (it is on disk): %s",
			  st->job->name, rs->rank, (unsigned long long)st->step, why);
	}
	if (!st->failed) {
		rank_durable(st, rs);
	} else if (st->nfinished == st->nsaved && st->state != STEP_COMMITTING) {
		step_cleanup(st);
	}
}

/* --- commit (one node; commit.h) ---------------------------------------- */

struct commit_work {
	uv_work_t          req;
	struct step       *st;
	struct commit_step cs;
	enum commit_outcome outcome;
	int                r;
	uint32_t           keep_last;  /* the loop's copy: a reload replaces cfg */
	char               msg[512];
};

static void commit_thread(uv_work_t *req)
{
	struct commit_work *w = req->data;
	struct step *st = w->st;

	/* moved or removed by an operator during the save: publishing into
	 * it would report COMMITTED for a step the job no longer has (the
	 * cluster's coordinator opens it by name instead; commit.h) */
	if (!job_dir_same(st->job)) {
		w->r = -ESTALE;
		w->outcome = COMMIT_FAILED;
		snprintf(w->msg, sizeof(w->msg), "publish failed: the job directory was "
			 "removed or moved during the save");
		return;
	}
	w->r = commit_publish(st->job->jobfd, st->stagingfd, st->staging_name, &w->cs,
			      &w->outcome, w->msg, sizeof(w->msg));
}

static void prune_thread(uv_work_t *req)
{
	struct commit_work *w = req->data;
	struct job *j = w->st->job;

	commit_prune(j->jobfd, j->name, j->info.run_id, w->keep_last, w->st->step);
}

static void commit_finish(struct commit_work *w)
{
	struct job *j = w->st->job;

	j->committing = 0;
	step_unref(w->st);
	free(w);
	maybe_commit(j);
	if (!j->committing && !j->steps)
		uv_async_send(&j->srv->wake);     /* job_release_idle */
}

static void prune_done(uv_work_t *req, int status)
{
	commit_finish(req->data);
}

static void commit_done(uv_work_t *req, int status)
{
	struct commit_work *w = req->data;
	struct step *st = w->st;
	struct srv *S = st->job->srv;

	if (w->r == 0) {
		step_committed(st, "");
	} else {
		/* renamed: visible, so not removed as staging; recovery decides */
		if (w->outcome == COMMIT_UNKNOWN)
			st->publish_ok = 1;
		step_fail(st, w->r, FAIL_DECIDED | FAIL_ALL, w->msg);
	}
	st->refs++;                        /* kept until the work is freed */
	step_cleanup(st);
	if (w->r == 0 && S->cfg.keep_last > 0) {
		/* only after every client was told COMMITTED */
		w->keep_last = S->cfg.keep_last;
		uv_queue_work(S->loop, &w->req, prune_thread, prune_done);
		return;
	}
	commit_finish(w);
}

static void maybe_commit(struct job *j)
{
	struct step *best = NULL;
	struct commit_work *w;

	if (j->committing)
		return;
	for (struct step *st = j->steps; st; st = st->next)
		if (st->state == STEP_COLLECT && !st->failed &&
		    st->ndurable == j->world_size && (!best || st->seq < best->seq))
			best = st;
	if (!best)
		return;
	w = calloc(1, sizeof(*w));
	if (!w) {
		step_abort(best, -ENOMEM, "out of memory starting the publish");
		return;
	}
	w->cs.job = j->name;
	memcpy(w->cs.run_id, j->info.run_id, 33);
	memcpy(w->cs.txid, best->txid, 33);
	w->cs.step = best->step;
	w->cs.world_size = j->world_size;
	w->cs.parts = best->parts;      /* freed by step_cleanup, after the work */
	best->state = STEP_COMMITTING;
	j->committing = 1;
	w->st = best;
	w->req.data = w;
	uv_queue_work(j->srv->loop, &w->req, commit_thread, commit_done);
}

void step_abort_all(struct srv *S, int err, const char *why)
{
	for (struct job *j = S->jobs; j; j = j->next)
		for (struct step *st = j->steps, *next; st; st = next) {
			next = st->next;
			if (st->state == STEP_COLLECT)
				step_abort(st, err, "%s", why);
		}
}
