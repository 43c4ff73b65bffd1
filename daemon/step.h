/* step.h - a job's in-flight steps: a step from its first SAVE to its
 * commit or abort.  Every rank's save joins the step; when all are durable
 * it is published (one step at a time per job, commit.h), or the
 * coordinator decides (multi-node, coord.h); any failure aborts it for
 * every rank.  Loop thread only. */
#ifndef CKPT_STEP_H
#define CKPT_STEP_H

#include <stdint.h>
#include <uv.h>

#include "commit.h"
#include "coord.h"
#include "pipe.h"
#include "rsave.h"

struct job;
struct session;
struct srv;

enum step_state { STEP_COLLECT = 0, STEP_COMMITTING, STEP_DONE };

struct step {
	struct step    *next;
	struct job     *job;
	uint64_t        step;
	uint64_t        seq;            /* global acceptance order, for flush */
	char            txid[33];
	char            staging_name[96];
	int             stagingfd;
	struct rsave  **rs;             /* [world_size] */
	struct commit_part **parts;     /* [world_size] durable parts (one node) */
	int             nsaved, nstaged, ndurable, nfinished;
	enum step_state state;
	int             failed;
	int             err;
	char            msg[512];
	int             publish_ok;
	int             memory;         /* committed in memory only (persist_every):
					   no staging directory, no file */
	int             forget;         /* do not remember the abort */
	uint64_t        t0_ns;
	uv_timer_t      deadline;
	int             refs;           /* timer handle + commit work */
};

/* SAVE of rank s->rank: join (or start) the step.  0 with *ticket and
 * txid, or -errno with msg. */
int  step_save(struct session *s, uint64_t step, uint64_t *ticket, char txid[33],
	       char *msg, size_t msglen);

/* A notice from the pipeline (loop thread). */
void step_on_notice(struct srv *S, enum pipe_notice what, struct rsave *rs);

/* Abort st for every rank: the clients, flush waiters and (multi-node) the
 * coordinator learn why. */
void step_abort(struct step *st, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Abort every in-flight step (drain timeout, shutdown). */
void step_abort_all(struct srv *S, int err, const char *why);

/* Multi-node: what the coordinator tells this node (coord.h): a step's
 * outcome (the local ranks learn COMMITTED, or the step aborts with its
 * error), or a lost peer (every step fails, the daemon drains and exits). */
extern const struct coord_hooks step_coord_hooks;

#endif
