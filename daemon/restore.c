/* restore.c - see restore.h: the RESTORE work item, on a worker thread:
 * chooses the newest step that verifies (in the memory tier, at a memory
 * level across nodes, on disk walking back, or in the object store) and
 * has restore_into.c copy it into the trainer's tensors. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "coord.h"
#include "io.h"
#include "job.h"
#include "layout.h"
#include "log.h"
#include "mcat.h"
#include "memt.h"
#include "mfst.h"
#include "remote.h"
#include "restore.h"
#include "restore_int.h"
#include "restore_peer.h"
#include "restore_reply.h"
#include "session.h"
#include "verdict.h"
#include "verify.h"

#define READ_DEPTH 8              /* as shard_read's reads in flight */

/* Can a job of this world size restore step m?  Rank-local tensors belong
 * to the world that saved them, so a strict restore of a step saved by
 * another world size that holds any is refused.  The answer depends on the
 * manifest and the world size alone, never on this rank's registrations,
 * so every rank of a job gives the same one and a job that walks back past
 * the step never mixes two steps.  0, or -EINVAL with why. */
static int world_fits(struct restore_work *w, const struct mfst *m, char *why, size_t whylen)
{
	if (w->partial || m->world_size == w->world || m->ntensors == 0)
		return 0;
	w->other_world++;
	snprintf(why, whylen, "saved by %d rank%s, with rank-local tensors: they restore only "
		 "into a job of that world size, this one has %d (CKPT_PARTIAL restores the "
		 "global tensors alone)", m->world_size, m->world_size == 1 ? "" : "s", w->world);
	return -EINVAL;
}

/* Restore this rank of m from the memory tier's step src->ms, which it
 * lets go of (a copy that failed its checksum is used no more). */
static int restore_held(struct restore_work *w, const struct rsource *src, struct mfst *m)
{
	int r;

	restore_result_clear(&w->res);
	w->msg[0] = '\0';
	r = (w->res.blobs = calloc(m->nblobs + 1, sizeof(*w->res.blobs))) ?
		restore__into(w, src, m) : -ENOMEM;
	if (r == -EBADMSG)
		memt_distrust(src->ms);
	memt_put(src->ms);
	return r;
}

/* Cluster: the files of m this rank reads that this node's memory tier
 * lacks, from other nodes' memory when the catalogue knows m as the job's
 * newest committed step (*known set).  How many were fetched (0: none
 * needed, or not known), or -errno with why. */
static int from_peers(struct restore_work *w, const struct mfst *m, int *known,
		      char *why, size_t whylen)
{
	struct mcat_step cat;
	int r = 0;

	*known = 0;
	if (!coord_active() || mcat_get(w->job, &cat) < 0)
		return 0;
	if (cat.step == m->step && !strcmp(cat.txid, m->txid)) {
		*known = 1;
		r = restore_fetch_missing(w->S->memt, w->job, m, w->rank, w->world,
					  w->nglobal > 0, &cat, why, whylen);
	}
	mcat_step_release(&cat);
	return r;
}

/* Does this node's memory tier hold every file of step m, every rank's?
 * A step held only in part is restored from disk by every rank: the disk
 * path verifies the whole step, so a damaged file of a rank whose part is
 * not in memory makes all ranks pass over the step, not only that one. */
static int memory_holds_all(struct restore_work *w, const struct mfst *m, char *why,
			    size_t whylen)
{
	for (size_t i = 0; i < m->nfiles; i++)
		if (!memt_holds(w->S->memt, w->job, m->step, m->txid, &m->files[i])) {
			snprintf(why, whylen, "memory holds only part of the step (not %s), so "
				 "every rank restores it from disk", m->files[i].path);
			return 0;
		}
	return 1;
}

/* A step committed at memory level (persist_every, the catalogue's cat):
 * on no disk, restored from this node's memory tier, what it lacks from
 * other nodes' memory.  0 when it is restored (the outcome in w->r), or
 * -errno with why when it cannot be (a copy missing or damaged). */
static int restore_memory_level(struct restore_work *w, const struct mcat_step *cat,
				char *why, size_t whylen)
{
	struct rsource src = { .iterfd = -1 };
	struct mfst *m = NULL;
	int fetched, r;

	if ((r = mfst_parse(cat->manifest, strlen(cat->manifest), &m, why, whylen)) < 0)
		return r;
	if ((fetched = restore_fetch_missing(w->S->memt, w->job, m, w->rank, w->world,
					     w->nglobal > 0, cat, why, whylen)) < 0 ||
	    !(src.ms = memt_get(w->S->memt, w->job, m->step, m->txid, why, whylen))) {
		mfst_free(m);
		return fetched < 0 ? fetched : -ENOENT;
	}
	r = restore_held(w, &src, m);
	mfst_free(m);
	if (r == -EBADMSG || r == -EIO || (r == -ENOENT && strstr(w->msg, "not in memory"))) {
		snprintf(why, whylen, "%.400s", w->msg);
		restore_result_clear(&w->res);
		return r;
	}
	w->r = r;
	w->res.source = fetched ? "peer" : "memory";
	return 0;
}

/* Restore the job's memory-level step when it is the one wanted: the
 * newest (newer than every step on disk; have_disk 0: none) or the one
 * asked for.  1 when that settled the restore (w->r, w->msg), 0 when the
 * steps on disk serve it.  A rank that cannot restore the newest step does
 * not go back to an older one alone: other ranks may hold the newer one,
 * and a job must never mix two steps. */
static int try_memory_level(struct restore_work *w, uint64_t newest_disk, int have_disk)
{
	struct mcat_step cat;
	char why[512] = "", iter[32];
	int r;

	if (!coord_active() || mcat_get(w->job, &cat) < 0)
		return 0;
	layout_iter_name(w->step >= 0 ? (uint64_t)w->step : cat.step, iter, sizeof(iter));
	if (faccessat(w->jobfd, iter, F_OK, AT_SYMLINK_NOFOLLOW) == 0 || !cat.manifest ||
	    (w->step < 0 && have_disk && newest_disk >= cat.step)) {
		mcat_step_release(&cat);
		return 0;
	}
	if (w->step >= 0 && (uint64_t)w->step != cat.step) {
		uint32_t every = w->S->cfg.persist_every;
		if (every < 2 || w->step % every == 0) {
			mcat_step_release(&cat);
			return 0;
		}
		w->r = -ENOENT;
		snprintf(w->msg, sizeof(w->msg), "step %lld is not on disk, and memory holds only "
			 "the job's newest memory-level step (%llu): it was never saved, or it was "
			 "committed in memory only (persist_every %u) and a newer step replaced it",
			 (long long)w->step, (unsigned long long)cat.step, every);
		mcat_step_release(&cat);
		return 1;
	}
	if ((r = restore_memory_level(w, &cat, why, sizeof(why))) == 0) {
		w->res.step = cat.step;
		mcat_step_release(&cat);
		return 1;
	}
	log_warnx("job %s: rank %d: memory-level step %llu cannot be restored: %s",
		  w->job, w->rank, (unsigned long long)cat.step, why);
	/* not "no checkpoint" (-ENOENT) nor "damaged, walk back" (-EBADMSG):
	 * a failure the caller must see */
	w->r = r == -ENOENT || r == -EBADMSG ? -EIO : r;
	snprintf(w->msg, sizeof(w->msg), "step %llu, committed in memory only, cannot be "
		 "restored here: %.400s%s", (unsigned long long)cat.step, why, w->step >= 0 ? "" :
		 "; other ranks may have restored it, so this rank does not go back to an older "
		 "step alone: restore every rank with an older step (the newest on disk) to go "
		 "back");
	mcat_step_release(&cat);
	return 1;
}

/* Restore this rank of `step` from ckptd's memory tier, if it holds that
 * save: the manifest is read from the checkpoint directory (it says what
 * the step is; no shard file is opened) and the bytes come from memory,
 * every block checked against its checksum.  Returns 1 when served (the
 * outcome in w->r), 0 when the disk must serve it (the reason logged). */
static int restore_from_memory(struct restore_work *w, uint64_t step, int iterfd)
{
	struct rsource src = { .iterfd = iterfd };
	struct mfst *m = NULL;
	char why[sizeof(w->msg)] = "";
	int r;

	int fetched = 0, known;

	if (!w->S->memt)
		return 0;
	if (mfst_read(iterfd, &m, why, sizeof(why)) < 0 || world_fits(w, m, why, sizeof(why)) < 0) {
		mfst_free(m);
		return 0;               /* the disk path says what is wrong */
	}
	/* damage another rank's restore of global tensors found on disk: this
	 * rank passes over the step too, memory or not, so the ranks of a job
	 * (some of whose chunks may not be held here) never mix two steps */
	if (w->nglobal && verdict_known(w->job, step, iterfd, m->nfiles, why, sizeof(why)) < 0)
		goto disk;
	if ((fetched = from_peers(w, m, &known, why, sizeof(why))) < 0)
		goto disk;
	if (!(src.ms = memt_get(w->S->memt, w->job, step, m->txid, why, sizeof(why))))
		goto disk;
	if (!known && !memory_holds_all(w, m, why, sizeof(why))) {
		memt_put(src.ms);
		goto disk;
	}
	r = restore_held(w, &src, m);
	if (r == -ENOENT || r == -EBADMSG || r == -EIO) {
		snprintf(why, sizeof(why), "%s", w->msg);
		restore_result_clear(&w->res);
		goto disk;
	}
	mfst_free(m);
	w->r = r;
	w->res.source = fetched ? "peer" : "memory";
	return 1;
disk:
	log_info("job %s: rank %d restores iter_%09llu from disk: %s", w->job, w->rank,
		 (unsigned long long)step, why);
	mfst_free(m);
	return 0;
}

/* Verify checkpoint `step` (directory iterfd) and restore this rank from it
 * in the same pass.  Returns < 0 (why filled) when the step does not verify
 * (or the restore was cancelled); 0 when it does, with the restore's own
 * outcome in w->r. */
static int restore_step(struct restore_work *w, uint64_t step, int iterfd,
			char *why, size_t whylen)
{
	struct rsource src = { .iterfd = iterfd };
	struct io_ctx io = { 0 };
	struct mfst *m = NULL;
	size_t nfiles;
	int r, rr;

	if (restore_from_memory(w, step, iterfd))
		return 0;
	r = verify_checkpoint(iterfd, VERIFY_STRUCTURE, 0, &m, why, whylen);
	if (r < 0)
		return r;
	if ((r = world_fits(w, m, why, whylen)) < 0) {
		mfst_free(m);
		return r;
	}
	nfiles = m->nfiles;
	/* damage another rank's restore found: every rank walks past it */
	if (w->nglobal && (r = verdict_known(w->job, step, iterfd, nfiles, why, whylen)) < 0) {
		mfst_free(m);
		return r;
	}
	/* A restore of global tensors reads byte ranges and checks exactly
	 * what it reads (chunk CRC32Cs; format 1 files, SHA-256): a
	 * damaged byte elsewhere does not block it (ckptctl verify finds
	 * it).  Other restores verify the whole checkpoint first. */
	src.v = w->nglobal ? NULL : verdict_join(w->job, step, iterfd, m->nfiles, w->threads,
						 &r, why, whylen);
	if (!w->nglobal && !src.v && r < 0 && r != -EAGAIN) {
		mfst_free(m);
		return r;
	}
	w->msg[0] = '\0';
	restore_result_clear(&w->res);
	w->res.blobs = calloc(m->nblobs + 1, sizeof(*w->res.blobs));
	rr = !w->res.blobs ? -ENOMEM : io_ctx_init(&io, w->S->pipe.io_backend, READ_DEPTH, NULL);
	if (rr == 0) {
		src.io = &io;
		rr = restore__into(w, &src, m);
		io_ctx_release(&io);
	}
	if (src.v && (r = verdict_finish(src.v, iterfd, m, w->threads, &w->cancel, why,
					 whylen)) < 0) {
		restore_result_clear(&w->res);
		mfst_free(m);
		return r;
	}
	mfst_free(m);
	if (atomic_load(&w->cancel)) {
		snprintf(why, whylen, "the restore was cancelled");
		return -ECANCELED;
	}
	if (w->nglobal && rr == -EBADMSG) {   /* it does not verify */
		snprintf(why, whylen, "%.400s", w->msg);
		verdict_record_bad(w->job, step, iterfd, nfiles, rr, why);
		restore_result_clear(&w->res);
		w->found_damage = 1;
		return rr;
	}
	w->r = rr;
	w->res.source = "disk";
	return 0;
}

/* No local copy verified: download the step (or the remote's latest),
 * publish it here, and restore from it. */
static void restore_from_remote(struct restore_work *w)
{
	char msg[512], why[512] = "", iter[32];
	uint64_t got;
	int fd, r;

	r = remote_pull(w->jobfd, w->job, w->uid, w->step, w->partial ? 0 : w->world, &got,
			msg, sizeof(msg));
	if (r < 0) {
		size_t n = strlen(w->msg);
		snprintf(w->msg + n, sizeof(w->msg) - n, "; from the remote: %s", msg);
		/* a remote that cannot be read (the bucket missing, refused,
		 * down) is not "no checkpoint", which starts a trainer from
		 * scratch; one holding none this user may take is */
		if (r != -ENOENT && r != -EPERM)
			w->r = r;
		return;
	}
	layout_iter_name(got, iter, sizeof(iter));
	fd = openat(w->jobfd, iter, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	r = fd < 0 ? -errno : restore_step(w, got, fd, why, sizeof(why));
	if (fd >= 0)
		close(fd);
	if (r < 0) {
		w->r = r;
		snprintf(w->msg, sizeof(w->msg), "%s from the remote %s: %s", iter,
			 w->other_world ? "cannot be restored here" : "does not verify",
			 fd < 0 ? strerror(-r) : why);
		return;
	}
	w->res.step = got;
	w->res.source = "remote";
}

/* Why each step was passed over (w->res.skipped), after head, into w->msg. */
static void name_skipped(struct restore_work *w, size_t n)
{
	size_t i;
	json_t *e;

	json_array_foreach(w->res.skipped, i, e) {
		if (n >= sizeof(w->msg) - 1)
			break;
		n += (size_t)snprintf(w->msg + n, sizeof(w->msg) - n, "%s iter_%09lld %s",
				      i ? ";" : "", (long long)json_integer_value(
					      json_object_get(e, "step")),
				      json_string_value(json_object_get(e, "reason")));
	}
}

/* CKPT_LATEST found steps, but none this world size can restore: not "no
 * checkpoint" (-ENOENT makes a trainer start from scratch) but -EINVAL,
 * with every step passed over and why. */
static void no_step_fits(struct restore_work *w)
{
	w->r = -EINVAL;
	name_skipped(w, (size_t)snprintf(w->msg, sizeof(w->msg), "no checkpoint of job '%s' "
					 "can be restored by %d rank%s:", w->job, w->world,
					 w->world == 1 ? "" : "s"));
}

/* CKPT_LATEST found steps on disk, but none verifies: not "no checkpoint"
 * either (a trainer would start from scratch over damaged checkpoints
 * that an operator may repair) but -EUCLEAN, naming each. */
static void none_verifies(struct restore_work *w)
{
	w->r = -EUCLEAN;
	name_skipped(w, (size_t)snprintf(w->msg, sizeof(w->msg), "job '%s' has checkpoints, "
					 "but none verifies (repair or remove them; ckptctl "
					 "verify names the damage):", w->job));
}

static void restore_thread(uv_work_t *req)
{
	struct restore_work *w = req->data;
	uint64_t *steps = NULL, one;
	int n, verified = 0, damaged = 0;

	if (w->step >= 0) {
		one = (uint64_t)w->step;
		steps = &one;
		n = 1;
	} else if ((n = layout_list_steps(w->jobfd, &steps)) < 0) {
		w->r = n;
		snprintf(w->msg, sizeof(w->msg), "cannot list checkpoints: %s", strerror(-n));
		return;
	}
	w->r = -ENOENT;
	snprintf(w->msg, sizeof(w->msg), n > 0 ? "no checkpoint of job '%s' verifies" :
		 "no checkpoint of job '%s' (none was saved, or all were pruned)", w->job);
	if (try_memory_level(w, n > 0 ? steps[0] : 0, n > 0)) {
		verified = 1;
		n = 0;               /* settled: no step on disk is tried */
	}
	for (int i = 0; i < n && !atomic_load(&w->cancel); i++) {
		char iter[32], why[512] = "";
		int fd, r;

		layout_iter_name(steps[i], iter, sizeof(iter));
		fd = openat(w->jobfd, iter, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			r = -errno;
			snprintf(why, sizeof(why), "%s", errno == ENOENT ? "it is not on disk (never "
				 "saved here, or pruned)" : strerror(errno));
		} else {
			int passed = w->other_world;
			r = restore_step(w, steps[i], fd, why, sizeof(why));
			close(fd);
			/* a step of this world size that does not verify */
			damaged += r < 0 && r != -ECANCELED && w->other_world == passed;
		}
		if (r == -ECANCELED)
			break;
		if (r < 0 && w->found_damage && w->step < 0) {
			/* Only this rank's reads saw it: ranks that restored before
			 * may hold this step, so walking back alone could mix two
			 * steps in one job.  Fail; the next restore of every rank
			 * skips it (verdict_record_bad). */
			log_warnx("job %s: rank %d: %s is damaged: %s", w->job, w->rank, iter, why);
			w->r = r;
			snprintf(w->msg, sizeof(w->msg), "%s is damaged (%.400s); other ranks may "
				 "have restored it already, so this rank does not walk back "
				 "alone: restore every rank again (all will skip it)", iter, why);
			break;
		}
		if (r < 0) {
			log_warnx("job %s: restore skips %s: %s", w->job, iter, why);
			json_array_append_new(w->res.skipped, json_pack("{sIss}", "step",
						(json_int_t)steps[i], "reason", why));
			if (w->step >= 0) {
				w->r = r;
				snprintf(w->msg, sizeof(w->msg), "%s %s: %s", iter, w->other_world ?
					 "cannot be restored here" : fd < 0 && r == -ENOENT ?
					 "does not exist" : "does not verify", why);
			} else {         /* a read of the failed step may have set it */
				snprintf(w->msg, sizeof(w->msg), "no checkpoint of job '%s' verifies",
					 w->job);
			}
			continue;
		}
		w->res.step = steps[i];
		verified = 1;
		break;
	}
	/* damage first: a step that fits but does not verify is the news */
	if (!verified && damaged && w->step < 0 && w->r == -ENOENT)
		none_verifies(w);
	else if (!verified && w->other_world && w->step < 0)
		no_step_fits(w);
	if (!verified && w->r != -ECANCELED && !atomic_load(&w->cancel) && remote_enabled())
		restore_from_remote(w);
	if (atomic_load(&w->cancel)) {
		w->r = -ECANCELED;
		snprintf(w->msg, sizeof(w->msg), "the restore was cancelled");
	}
	if (steps != &one)
		free(steps);
}

static void work_free(struct restore_work *w)
{
	for (size_t i = 0; i < w->nwant; i++) {
		free(w->want[i].group);
		free(w->want[i].name);
	}
	free(w->want);
	for (size_t i = 0; i < w->nregions; i++)
		region_unref(w->regions[i]);
	free(w->regions);
	restore_result_release(&w->res);
	if (w->jobfd >= 0)
		close(w->jobfd);
	free(w);
}

/* The session closed while the work runs: stop it at the next piece. */
static void restore_cancel(struct session *s, void *arg, int closing)
{
	struct restore_work *w = arg;

	(void)s;
	if (closing)
		atomic_store(&w->cancel, 1);
}

static void restore_done(uv_work_t *req, int status)
{
	struct restore_work *w = req->data;
	struct session *s = w->s;

	(void)status;
	if (s->task.arg == w)
		s->task = (struct session_task){ 0 };
	if (s->closed || atomic_load(&w->cancel)) {
		log_info("job %s: rank %d went away: its restore was cancelled", w->job, w->rank);
		work_free(w);
		session_resume(s);
		session_unref(s);
		return;
	}
	if (w->r < 0) {
		session_reply_err(s, PROTO_RESTORE | PROTO_REPLY, w->req_id, w->r, "%s", w->msg);
		work_free(w);
		session_resume(s);
		session_unref(s);
		return;
	}
	restore_reply_send(s, w->req_id, &w->res);   /* resumes, unrefs */
	work_free(w);
}

void restore_cache_clear(void)
{
	verdict_cache_clear();
}

int restore_start(struct srv *S, struct session *s, uint64_t req_id, int64_t step,
		  int partial)
{
	struct restore_work *w = calloc(1, sizeof(*w));
	struct job *j = s->job;

	if (!w)
		return -ENOMEM;
	w->S = S;
	w->s = s;
	w->uid = s->uid;
	w->req_id = req_id;
	w->step = step;
	w->partial = partial;
	w->rank = s->rank;
	w->world = j->world_size;
	w->threads = S->cfg.verify_threads;
	w->res.t_start_ns = now_ns();
	w->res.source = "disk";
	snprintf(w->job, sizeof(w->job), "%s", j->name);
	w->jobfd = job_dir_dup(j);     /* as it is on disk now */
	w->want = calloc(s->ntensors + 1, sizeof(*w->want));
	w->regions = calloc(s->nregions + 1, sizeof(*w->regions));
	w->res.skipped = json_array();
	w->res.restored = json_array();
	w->res.missing = json_array();
	w->res.unexpected = json_array();
	if (w->jobfd < 0 || !w->want || !w->regions || !w->res.skipped || !w->res.restored ||
	    !w->res.missing || !w->res.unexpected)
		goto out_nomem;
	for (size_t i = 0; i < s->ntensors; i++) {
		struct reg_tensor *t = &s->tensors[i];
		struct want *wt = &w->want[w->nwant++];
		wt->group = strdup(t->group);
		wt->name = strdup(t->name);
		if (!wt->group || !wt->name)
			goto out_nomem;
		memcpy(wt->dtype, t->dtype, sizeof(wt->dtype));
		wt->ndim = t->ndim;
		memcpy(wt->shape, t->shape, sizeof(wt->shape));
		wt->nbytes = t->nbytes;
		if ((wt->global = t->global)) {
			memcpy(wt->gshape, t->gshape, sizeof(wt->gshape));
			memcpy(wt->goffset, t->goffset, sizeof(wt->goffset));
			w->nglobal++;
		}
		if (t->rg->gm) {       /* CUDA memory: through pinned scratch */
			wt->gm = t->rg->gm;
			wt->goff = t->offset;
		} else {
			wt->dst = (uint8_t *)t->rg->r.base + t->offset;
			wt->mapped = t->rg->r.mapped;
		}
	}
	/* the trainer's memory must outlive the work, even if it disconnects */
	for (size_t i = 0; i < s->nregions; i++) {
		w->regions[w->nregions++] = s->regions[i];
		region_ref(s->regions[i]);
	}
	s->refs++;
	s->busy = 1;
	s->task = (struct session_task){ restore_cancel, w };
	w->req.data = w;
	uv_queue_work(S->loop, &w->req, restore_thread, restore_done);
	return 0;

out_nomem:
	work_free(w);
	return -ENOMEM;
}
