/* status.h - one snapshot of ckptd's state (server, pool, clients, jobs,
 * steps in flight) that feeds both STATUS (ckptctl status) and the
 * Prometheus metrics, so the two always say the same.  Loop thread. */
#ifndef CKPT_STATUS_H
#define CKPT_STATUS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "memt.h"

struct srv;

struct status_step {
	uint64_t    step;
	const char *txid;              /* borrowed */
	const char *phase;             /* staging, writing, committing, aborting */
	int         ranks_saved, ranks_staged, ranks_durable;
	uint64_t    bytes_total, bytes_staged, bytes_written;
};

struct status_job {
	const char *name;              /* borrowed */
	uid_t       owner;
	int         world_size, ranks_connected;
	int         ranks_ready;       /* connected, first save prepared (prep.h) */
	int         have_last;
	uint64_t    last_step;
	int64_t     last_unix;         /* 0: none since ckptd started */
	struct status_step *steps;     size_t nsteps;
};

enum { STATUS_TRAINER, STATUS_CTL, STATUS_HANDSHAKE, STATUS_NROLES };

struct status {
	uint64_t    uptime_s;
	int64_t     start_unix;
	const char *io_backend;        /* borrowed */
	int         direct_io, gpu, draining;
	uint64_t    pool_used, pool_size, pool_chunk, pool_waits;
	int         pool_locked;
	int         pin_state;         /* enum gpu_pin_state */
	uint64_t    pin_bytes, pin_done, pin_ms;
	struct memt_usage memt;        /* the memory tier (budget 0: off) */
	unsigned    clients;           /* connections, closing ones included */
	unsigned    clients_by_role[STATUS_NROLES];    /* open ones */
	uint64_t    bytes_written;
	double      write_rate_bps;
	uint64_t    saves_committed, saves_failed;
	uint64_t    reply_queue_bytes;
	uint64_t    inflight_steps, inflight_bytes;
	struct status_job *jobs;       size_t njobs;
};

/* Take the snapshot.  Names are borrowed from the server: use it before
 * the loop runs on.  Returns 0 or -ENOMEM (*st is then empty). */
int  status_take(struct srv *S, struct status *st);
void status_release(struct status *st);

/* STATUS's JSON (new reference, NULL when out of memory): the jobs uid may
 * see (its own; root and ckptd's uid see all); with the cluster's state
 * when in cluster mode. */
json_t *status_json(const struct status *st, uid_t uid);

#endif
