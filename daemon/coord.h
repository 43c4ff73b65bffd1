/* coord.h - multi-node two-phase commit: one ckptd per node in an MPI world
 * (config "cluster": "mpi").  The only module that calls MPI (coord.c,
 * coord_step.c; coord_repl.c for the partner nodes' memory, below).
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

/* The coordinator's outcome of a job's step: committed (ok), or aborted
 * with err and msg.  A committed one also says its txid, which node saved
 * each rank (owners[rank], where that rank's copies are) and, for a step
 * committed at memory level (persist_every), its manifest (JSON text).
 * Everything is borrowed for the call. */
struct coord_outcome {
	const char *job;
	uint64_t    step;
	int         ok, err;
	const char *msg;
	const char *txid;             /* committed; else "" */
	const char *manifest;         /* memory level; else NULL */
	const int  *owners;           /* committed: [nowners]; else NULL */
	int         nowners;
};

/* What the cluster tells this node, on the loop thread (step.c implements
 * them: coord.c does not call back into jobs by name). */
struct coord_hooks {
	void (*outcome)(struct srv *S, const struct coord_outcome *o);
	/* a peer is lost: the world ends; fail what is in flight, exit */
	void (*lost)(struct srv *S, const char *why);
	/* rank's copy of job's step is in the memory of every partner node
	 * (ok), or could not be (msg says why): coord_replicate */
	void (*replicated)(struct srv *S, const char *job, uint64_t step, int rank,
			   int ok, const char *msg);
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
/* memory: a memory-level step (held on the partners, no file on disk). */
void coord_report_durable(const char *job, const char *run_id, uint64_t step,
			  const char *txid, int world_size, int memory,
			  struct commit_part *part);
void coord_report_failed(const char *job, uint64_t step, const char *txid,
			 int err, const char *msg);
void coord_report_clean(const char *job, uint64_t step, const char *txid);

/* --- partner nodes' memory (coord_repl.c; README "Memory levels") ----

 * Each node's partners are the memory_replicas nodes after it (node n:
 * n+1 .. n+K, modulo the world size).  A rank's capture (memt.h) is sent to
 * them in pieces, off the loop thread; each keeps it in its memory tier
 * and acknowledges it. */
struct memt_cap;

/* How many partners each node has: memory_replicas, at most the world
 * size - 1 (0 when not active). */
int  coord_replicas(void);
/* Loop thread: send rank's capture c of job's step to this node's
 * partners (c is held until sent: memt_cap_hold).  hooks->replicated says
 * how it went; with no partner it says so at once. */
void coord_replicate(const char *job, uint64_t step, int rank, struct memt_cap *c);
/* Restore thread: copy file path of job's committed step txid from node's
 * memory tier into this node's (memt_copy_start, committed), waiting up to
 * coord_peer_timeout_ms.  0, or -errno with msg (-ENOENT: node does not
 * hold it). */
int  coord_fetch(int node, const char *job, uint64_t step, const char *txid,
		 const char *path, char *msg, size_t msglen);
/* This node's number in the world, and the world's size (0, 1 when not
 * active). */
int  coord_rank(void);
int  coord_size(void);

/* "cluster" object for ckptctl status (new reference). */
json_t *coord_status_json(void);

#endif
