/* ctl.c - the operator's requests (ckptctl): STATUS, FLUSH, and LIST and
 * PRUNE, which run on the pool (cmd.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "coord.h"
#include "fail.h"
#include "job.h"
#include "layout.h"
#include "mfst.h"
#include "names.h"
#include "restore.h"
#include "session.h"
#include "srv.h"
#include "store.h"

/* A user sees their own jobs; root and ckptd's own uid see every job. */
static int may_see(const struct job *j, uid_t uid)
{
	return uid == 0 || uid == geteuid() || j->info.owner == uid;
}

static json_t *status_json(struct srv *S, uid_t uid)
{
	unsigned used, total;
	uint64_t waits;
	json_t *o, *jobs = json_array();

	shm_pool_usage(&S->pool, &used, &total, &waits);
	for (struct job *j = S->jobs; j; j = j->next) {
		if (!may_see(j, uid))
			continue;
		json_t *inflight = json_array();
		for (struct step *st = j->steps; st; st = st->next) {
			uint64_t total_b = 0, staged = 0, written = 0;
			for (int r = 0; r < j->world_size; r++) {
				struct rsave *rs = st->rs[r];
				if (!rs)
					continue;
				total_b += rs->bytes_total;
				staged += atomic_load(&rs->bytes_staged);
				written += atomic_load(&rs->bytes_written);
			}
			json_array_append_new(inflight, json_pack(
				"{sIsssssisisisIsIsI}", "step", (json_int_t)st->step,
				"txid", st->txid, "phase",
				st->failed ? "aborting" : st->state == STEP_COMMITTING ?
				"committing" : st->nstaged < st->nsaved || st->nsaved < j->world_size ?
				"staging" : "writing",
				"ranks_saved", st->nsaved, "ranks_staged", st->nstaged,
				"ranks_durable", st->ndurable, "bytes_total", (json_int_t)total_b,
				"bytes_staged", (json_int_t)staged, "bytes_written", (json_int_t)written));
		}
		json_array_append_new(jobs, json_pack(
			"{sssIsisisososo}", "name", j->name, "owner_uid", (json_int_t)j->info.owner,
			"world_size", j->world_size, "ranks_connected", j->nconnected,
			"last_committed_step", j->have_last ? json_integer((json_int_t)j->last_step) : json_null(),
			"last_committed_unix", j->last_unix ? json_integer(j->last_unix) : json_null(),
			"in_flight", inflight));
	}
	o = json_pack("{sssisIsssbsbs{sIsIsIsIsb}sisIsfsIsIso}",
		"daemon", "ckptd " CKPT_VERSION, "pid", (int)getpid(),
		"uptime_s", (json_int_t)((srv_now_ns() - S->started_ns) / 1000000000ull),
		"io_backend", S->pipe.backend_used, "direct_io", S->cfg.direct_io, "gpu", S->gpu,
		"pool", "used", (json_int_t)used * (json_int_t)S->pool.chunk_bytes,
		"total", (json_int_t)total * (json_int_t)S->pool.chunk_bytes,
		"chunk", (json_int_t)S->pool.chunk_bytes, "waits", (json_int_t)waits,
		"locked", S->pool.locked,
		"clients", (int)S->nsessions,
		"bytes_written", (json_int_t)atomic_load(&S->pipe.bytes_written),
		"write_rate_bps", S->write_rate_bps,
		"saves_committed", (json_int_t)S->saves_committed,
		"saves_failed", (json_int_t)S->saves_failed, "jobs", jobs);
	if (o) {
		json_object_set_new(o, "draining", json_boolean(S->draining));
		json_object_set_new(o, "reply_queue_bytes", json_integer((json_int_t)S->outq_total));
	}
	if (o && coord_active())
		json_object_set_new(o, "cluster", coord_status_json());
	return o;
}

int ctl_status(struct req *q)
{
	json_t *o = status_json(q->s->srv, q->s->uid);
	if (!o)
		return -ENOMEM;
	cmd_reply_json(q, o);
	return 0;
}

int ctl_flush(struct req *q)
{
	uint64_t timeout = 600000;
	const char *job = cmd_get_str(q->j, "job");
	cmd_get_u64(q->j, "timeout_ms", &timeout);
	if (timeout > 86400000)
		timeout = 86400000;
	return job_flush(q->s->srv, q->s, q->req_id, job, (uint32_t)timeout);
}

/* One job's checkpoints for LIST. */
static void list_job(const char *name, int jobfd, json_t *arr)
{
	uint64_t *steps = NULL, latest = 0;
	int have_latest = layout_latest_read(jobfd, &latest) == 0;
	int n = layout_list_steps(jobfd, &steps);

	for (int i = 0; i < n; i++) {
		char iter[32], err[128];
		struct mfst *m = NULL;
		uint64_t bytes = 0;
		int fd;
		layout_iter_name(steps[i], iter, sizeof(iter));
		fd = openat(jobfd, iter, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || mfst_read(fd, &m, err, sizeof(err)) < 0) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		close(fd);
		for (size_t k = 0; k < m->nfiles; k++)
			bytes += m->files[k].size;
		json_array_append_new(arr, json_pack("{sssIsbsIsIsI}", "job", name,
			"step", (json_int_t)steps[i], "latest", have_latest && latest == steps[i],
			"files", (json_int_t)m->nfiles, "bytes", (json_int_t)bytes,
			"created_unix", (json_int_t)m->created_unix));
		mfst_free(m);
	}
	free(steps);
}

/* LIST and PRUNE read (and remove) whole directory trees: on the pool. */
int ctl_list_check(struct req *q)
{
	const char *want = cmd_get_str(q->j, "job"), *why;

	if (want && name_check(want, NAME_MAX_JOB, &why) < 0)
		FAIL(-EINVAL, "bad job name: %s", why);
	return 0;
}

int ctl_list_work(struct req *q)
{
	struct srv *S = q->s->srv;
	const char *want = cmd_get_str(q->j, "job");
	json_t *arr = json_array();
	struct dirent *e;
	DIR *d;

	FAILPOINT("ctl.list");
	/* a dup shares the directory offset: start from the top */
	d = fdopendir(fcntl(S->rootfd, F_DUPFD_CLOEXEC, 3));
	if (d)
		rewinddir(d);
	while (d && (e = readdir(d))) {
		struct store_job_info info;
		int jobfd;
		if (name_check(e->d_name, NAME_MAX_JOB, NULL) < 0 ||
		    (want && strcmp(want, e->d_name)))
			continue;
		if (store_job_open(S->rootfd, e->d_name, q->s->uid, 0, &info, &jobfd) < 0)
			continue;      /* another user's job, or not a job */
		list_job(e->d_name, jobfd, arr);
		close(jobfd);
	}
	if (d)
		closedir(d);
	return cmd_set_reply(q, json_pack("{so}", "checkpoints", arr));
}

int ctl_prune_check(struct req *q)
{
	const char *name = cmd_get_str(q->j, "job"), *why;
	uint64_t keep;

	if (!name || name_check(name, NAME_MAX_JOB, &why) < 0)
		FAIL(-EINVAL, "bad job name: %s", name ? why : "missing");
	if (cmd_get_u64(q->j, "keep", &keep) < 0 || keep == 0)
		FAIL(-EINVAL, "PRUNE needs \"keep\" >= 1");
	return 0;
}

int ctl_prune_work(struct req *q)
{
	struct srv *S = q->s->srv;
	const char *name = cmd_get_str(q->j, "job");
	struct store_job_info info;
	uint64_t keep = 0, *removed = NULL;
	json_t *arr;
	int jobfd, n;

	FAILPOINT("ctl.prune");
	cmd_get_u64(q->j, "keep", &keep);
	n = store_job_open(S->rootfd, name, q->s->uid, 0, &info, &jobfd);
	if (n < 0)
		FAIL(n, "job '%s': %s", name, n == -EPERM ? "belongs to another user" : strerror(-n));
	n = store_prune(jobfd, info.run_id, (unsigned)keep, &removed);
	close(jobfd);
	if (n < 0)
		FAIL(n, "prune failed: %s", strerror(-n));
	restore_cache_clear();
	arr = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(arr, json_integer((json_int_t)removed[i]));
	free(removed);
	return cmd_set_reply(q, json_pack("{so}", "removed", arr));
}
