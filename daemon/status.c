/* status.c - one snapshot of ckptd's state for STATUS and the metrics. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coord.h"
#include "job.h"
#include "memt.h"
#include "remote.h"
#include "gpu.h"
#include "prep.h"
#include "status.h"
#include "srv.h"

static const char *step_phase(const struct job *j, const struct step *st)
{
	if (st->failed)
		return "aborting";
	if (st->state == STEP_COMMITTING)
		return "committing";
	if (st->nstaged < st->nsaved || st->nsaved < j->world_size)
		return "staging";
	return "writing";
}

static int take_job(const struct job *j, struct status_job *sj, struct status *st)
{
	size_t n = 0;

	for (const struct step *s = j->steps; s; s = s->next)
		n++;
	sj->name = j->name;
	sj->owner = j->info.owner;
	sj->world_size = j->world_size;
	sj->ranks_connected = j->nconnected;
	for (int r = 0; r < j->world_size; r++)
		sj->ranks_ready += j->ranks[r] && prep_ready(j->ranks[r]);
	sj->have_last = j->have_last;
	sj->last_step = j->last_step;
	sj->last_unix = j->last_unix;
	if (n && !(sj->steps = calloc(n, sizeof(*sj->steps))))
		return -ENOMEM;
	for (const struct step *s = j->steps; s; s = s->next) {
		struct status_step *ss = &sj->steps[sj->nsteps++];
		ss->step = s->step;
		ss->txid = s->txid;
		ss->phase = step_phase(j, s);
		ss->ranks_saved = s->nsaved;
		ss->ranks_staged = s->nstaged;
		ss->ranks_durable = s->ndurable;
		for (int r = 0; r < j->world_size; r++) {
			struct rsave *rs = s->rs[r];
			if (!rs)
				continue;
			ss->bytes_total += rs->bytes_total;
			ss->bytes_staged += atomic_load(&rs->bytes_staged);
			ss->bytes_written += atomic_load(&rs->bytes_written);
		}
		st->inflight_steps++;
		st->inflight_bytes += ss->bytes_total;
	}
	return 0;
}

int status_take(struct srv *S, struct status *st)
{
	unsigned used = 0, total = 0;
	uint64_t waits = 0, up_ns = now_ns() - S->started_ns;
	size_t njobs = 0;

	memset(st, 0, sizeof(*st));
	shm_pool_usage(&S->pool, &used, &total, &waits);
	st->uptime_s = up_ns / 1000000000ull;
	st->start_unix = (int64_t)time(NULL) - (int64_t)st->uptime_s;
	st->io_backend = S->pipe.backend_used;
	st->direct_io = S->cfg.direct_io;
	st->gpu = S->gpu;
	st->draining = S->draining;
	st->pool_used = (uint64_t)used * S->pool.chunk_bytes;
	st->pool_size = (uint64_t)total * S->pool.chunk_bytes;
	st->pool_chunk = S->pool.chunk_bytes;
	st->pool_waits = waits;
	st->pool_locked = S->pool.locked;
	if (S->gpu) {
		struct gpu_pin_info pi;
		gpu_pin_info(&pi);
		st->pin_state = pi.state;
		st->pin_bytes = pi.bytes;
		st->pin_done = pi.done;
		st->pin_ms = pi.ms;
	}
	memt_usage(S->memt, &st->memt);
	st->clients = S->nsessions;
	for (struct session *s = S->sessions; s; s = s->next)
		if (!s->closed)
			st->clients_by_role[s->role == ROLE_TRAINER ? STATUS_TRAINER :
					    s->role == ROLE_CTL ? STATUS_CTL : STATUS_HANDSHAKE]++;
	st->bytes_written = atomic_load(&S->pipe.bytes_written);
	st->write_rate_bps = S->write_rate_bps;
	st->saves_committed = S->saves_committed;
	st->saves_failed = S->saves_failed;
	st->reply_queue_bytes = S->outq_total;

	for (struct job *j = S->jobs; j; j = j->next)
		njobs++;
	if (njobs && !(st->jobs = calloc(njobs, sizeof(*st->jobs))))
		return -ENOMEM;
	for (struct job *j = S->jobs; j; j = j->next)
		if (take_job(j, &st->jobs[st->njobs++], st) < 0) {
			status_release(st);
			return -ENOMEM;
		}
	return 0;
}

void status_release(struct status *st)
{
	for (size_t i = 0; i < st->njobs; i++)
		free(st->jobs[i].steps);
	free(st->jobs);
	memset(st, 0, sizeof(*st));
}

/* A user sees their own jobs; root and ckptd's own uid see every job. */
static int may_see(const struct status_job *j, uid_t uid)
{
	return uid == 0 || uid == geteuid() || j->owner == uid;
}

json_t *status_json(const struct status *st, uid_t uid)
{
	json_t *o, *jobs = json_array();

	for (size_t i = 0; jobs && i < st->njobs; i++) {
		const struct status_job *j = &st->jobs[i];
		json_t *inflight = json_array();
		if (!may_see(j, uid))
			continue;
		for (size_t k = 0; inflight && k < j->nsteps; k++) {
			const struct status_step *s = &j->steps[k];
			json_array_append_new(inflight, json_pack(
				"{sIsssssisisisIsIsI}", "step", (json_int_t)s->step,
				"txid", s->txid, "phase", s->phase,
				"ranks_saved", s->ranks_saved, "ranks_staged", s->ranks_staged,
				"ranks_durable", s->ranks_durable,
				"bytes_total", (json_int_t)s->bytes_total,
				"bytes_staged", (json_int_t)s->bytes_staged,
				"bytes_written", (json_int_t)s->bytes_written));
		}
		json_array_append_new(jobs, json_pack(
			"{sssIsisisisososo}", "name", j->name, "owner_uid", (json_int_t)j->owner,
			"world_size", j->world_size, "ranks_connected", j->ranks_connected,
			"ranks_ready", j->ranks_ready,
			"last_committed_step", j->have_last ? json_integer((json_int_t)j->last_step) :
							      json_null(),
			"last_committed_unix", j->last_unix ? json_integer(j->last_unix) : json_null(),
			"in_flight", inflight));
	}
	o = json_pack("{sssisIsssbsbs{sIsIsIsIsb}sisIsfsIsIsosbsI}",
		"daemon", "ckptd " CKPT_VERSION, "pid", (int)getpid(),
		"uptime_s", (json_int_t)st->uptime_s,
		"io_backend", st->io_backend, "direct_io", st->direct_io, "gpu", st->gpu,
		"pool", "used", (json_int_t)st->pool_used, "total", (json_int_t)st->pool_size,
		"chunk", (json_int_t)st->pool_chunk, "waits", (json_int_t)st->pool_waits,
		"locked", st->pool_locked,
		"clients", (int)st->clients,
		"bytes_written", (json_int_t)st->bytes_written,
		"write_rate_bps", st->write_rate_bps,
		"saves_committed", (json_int_t)st->saves_committed,
		"saves_failed", (json_int_t)st->saves_failed, "jobs", jobs,
		"draining", st->draining,
		"reply_queue_bytes", (json_int_t)st->reply_queue_bytes);
	if (o && st->gpu)          /* the staging pool's pinning, off the loop */
		json_object_set_new(o, "gpu_pin", json_pack("{sssIsIsI}",
			"state", gpu_pin_state_name(st->pin_state),
			"bytes", (json_int_t)st->pin_bytes, "done", (json_int_t)st->pin_done,
			"ms", (json_int_t)st->pin_ms));
	if (o && st->gpu) {        /* faulted contexts, reset (gpu.c) */
		json_t *a = json_array();
		for (int d = 0; d < GPU_MAX_DEVICES; d++) {
			struct gpu_dev_state ds;
			gpu_dev_state(d, &ds);
			if (ds.resets || ds.faulted)
				json_array_append_new(a, json_pack("{sisIsisssIsi}", "device", d,
					"resets", (json_int_t)ds.resets, "last_error", ds.last_fault,
					"last_name", ds.last_name, "last_at", (json_int_t)ds.last_at,
					"faulted", ds.faulted));
		}
		json_object_set_new(o, "gpu_faults", a);
	}
	if (o && st->memt.budget)
		json_object_set_new(o, "memory_tier", json_pack("{sIsIsisIsIsIsI}",
			"held", (json_int_t)st->memt.held, "total", (json_int_t)st->memt.budget,
			"steps", (int)st->memt.steps, "spare", (json_int_t)st->memt.spare,
			"reserving", (json_int_t)st->memt.reserving,
			"copied", (json_int_t)st->memt.copied,
			"shared", (json_int_t)st->memt.shared));
	if (o && coord_active())
		json_object_set_new(o, "cluster", coord_status_json());
	json_t *r = o ? remote_status_json() : NULL;
	if (r && uid != 0 && uid != geteuid()) {     /* names of every job */
		json_object_del(r, "jobs");
		json_object_del(r, "uploading");
	}
	if (r)
		json_object_set_new(o, "remote", r);
	return o;
}
