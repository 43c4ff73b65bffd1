/* coord.h - multi-node two-phase commit: one ckptd per node in an MPI world
 * (config "cluster": "mpi").  The only module that calls MPI.
 *
 * MPI lives on one thread of its own (MPI_THREAD_FUNNELED: every MPI call
 * is made from it) and uses point-to-point messages only, polled with a
 * short sleep, so no daemon waits forever on a dead peer.  The loop thread
 * talks to it through a mutex-protected queue; outcomes come back through
 * a uv_async handle and are applied on the loop thread.
 *
 * Protocol (MPI rank 0 is the coordinator):
 *   each node  -> 0   SEEN     a job's step has its first local SAVE
 *   each node  -> 0   DURABLE  one local rank's part is durable (its files,
 *                              sizes, hashes, tensors and blobs)
 *   each node  -> 0   FAILED   a local rank failed, the step is aborted
 *   each node  -> 0   CLEAN    an aborted step's local writers are done
 *   0 -> every node   OUTCOME  committed, or aborted with the error
 *   both ways         PING     heartbeat; silence for coord_peer_timeout_ms
 *                              = peer lost: fail in-flight steps, exit
 *                              non-zero
 *   0 -> every node   GO       start-up recovery is done, serve; carries
 *                              the world id the coordinator wrote into
 *                              <root>/.ckpt-cluster, which each node must
 *                              read back under its own root (one shared
 *                              root, or the node refuses to start)
 * The coordinator counts the union of durable ranks of (job, step) until it
 * reaches the job's global world_size, then writes the manifest of every
 * node's files, publishes (store_publish) and sends OUTCOME; any failure,
 * or coord_deadline_ms since the step was first SEEN, aborts it everywhere.
 * Only the coordinator publishes, and only it removes staging directories
 * (on abort, and at start-up before any node serves).  Its file work
 * (publish, prune, removal) runs in order on a file thread of its own, so
 * heartbeats never wait for the file system. */
#ifndef CKPT_COORD_H
#define CKPT_COORD_H

#include <stddef.h>
#include <stdint.h>

struct commit_part;
struct config;
struct srv;
typedef struct json_t json_t;

/* What the cluster tells this node, on the loop thread (step.c implements
 * them: coord.c does not call back into jobs by name). */
struct coord_hooks {
	/* the coordinator's outcome of a job's step: committed (ok), or
	 * aborted with err and msg */
	void (*outcome)(struct srv *S, const char *job, uint64_t step, int ok,
			int err, const char *msg);
	/* a peer is lost: the world ends; fail what is in flight, exit */
	void (*lost)(struct srv *S, const char *why);
};

/* Join the MPI world, agree on recovery (the coordinator runs
 * store_recover; the others wait for its GO, up to coord_deadline_ms) and
 * start the MPI thread.  Substitutes "{rank}" in S->cfg.socket.  hooks is
 * borrowed for the daemon's lifetime.  0 or -errno (logged).  Loop
 * thread, before the loop runs. */
int  coord_init(struct srv *S, const struct coord_hooks *hooks);
/* Stop the thread and leave the world (MPI_Finalize, bounded).  NULL-safe
 * when never initialised. */
void coord_finalize(struct srv *S);

int  coord_active(void);               /* cluster mode is up */
int  coord_is_coordinator(void);       /* ... and this is rank 0 */
/* 1 while the coordinator has steps not decided yet (a drain waits). */
int  coord_busy(void);
/* A SIGHUP reload took effect: the reloadable keys the coordinator uses
 * (keep_last, for the pruning after a publish).  Loop thread; no-op when
 * not active. */
void coord_reload(const struct config *cfg);
/* Replace "{rank}" in s (cap bytes) by this node's rank (a SIGHUP reload
 * compares the socket path this way); no-op when not active. */
void coord_expand(char *s, size_t cap);

/* 32 hex chars every node derives alike for (run_id, step): the staging
 * directory all nodes of a step write into.  0, or -errno when the hash
 * cannot be started (out of memory): the step must fail then. */
int coord_txid(const char *run_id, uint64_t step, char out[33]);

/* Reports from the loop thread (copied; never block). */
void coord_report_seen(const char *job, uint64_t step, const char *txid,
		       int world_size);
/* One rank's durable part (commit.h; steals part, freed even on failure). */
void coord_report_durable(const char *job, const char *run_id, uint64_t step,
			  const char *txid, int world_size, struct commit_part *part);
void coord_report_failed(const char *job, uint64_t step, const char *txid,
			 int err, const char *msg);
void coord_report_clean(const char *job, uint64_t step, const char *txid);

/* "cluster" object for ckptctl status (new reference). */
json_t *coord_status_json(void);

#endif
