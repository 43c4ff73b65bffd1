/* job.h - jobs and their in-flight steps: who may save, when a step is
 * complete, commit (publish) one step at a time per job, abort everywhere
 * on any failure, and flush waiters.  Loop thread only. */
#ifndef CKPT_JOB_H
#define CKPT_JOB_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "commit.h"
#include "coord.h"
#include "rsave.h"
#include "srv.h"
#include "store.h"

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
	int             forget;         /* do not remember the abort */
	uint64_t        t0_ns;
	uv_timer_t      deadline;
	int             refs;           /* timer handle + commit work */
};

#define JOB_ABORTED_MEMORY 64

struct job {
	struct job     *next;
	struct srv     *srv;
	char            name[65];
	struct store_job_info info;
	int             jobfd;          /* <root>/<name> as last checked */
	dev_t           dev;            /* ... its identity, to notice when an */
	ino_t           ino;            /* operator removed or moved it */
	int             world_size;
	struct session **ranks;         /* [world_size] connected trainers */
	int             nconnected;
	struct step    *steps;          /* in flight */
	int             committing;     /* a publish is running */
	int             have_last;
	uint64_t        last_step;
	int64_t         last_unix;
	/* recently aborted steps: a rank arriving late gets the error at once,
	 * but a trainer that connected after the abort (a restart) may redo it */
	struct { uint64_t step, when_ns; char why[160]; } aborted[JOB_ABORTED_MEMORY];
	unsigned        naborted;
};

/* HELLO of a trainer: find or create the job, check owner and world size,
 * take the rank.  0 or -errno with msg. */
int  job_attach(struct srv *S, struct session *s, const char *name, int rank,
		int world_size, char *msg, size_t msglen);
/* Connection gone: steps it had not staged abort; staged ones go on. */
void job_detach(struct session *s);

/* SAVE: 0 with *ticket and txid, or -errno with msg. */
int  job_save(struct session *s, uint64_t step, uint64_t *ticket, char txid[33],
	      char *msg, size_t msglen);

/* A notice from the pipeline (loop thread). */
void job_on_notice(struct srv *S, enum pipe_notice what, struct rsave *rs);

/* A new fd of the job's directory as it is on disk now: when an operator
 * removed or moved it, it is made again (same owner) and used from now on.
 * Returns the fd or -errno. */
int  job_dir_dup(struct job *j);

/* What a user sees of other users (README "who sees what"): their own
 * jobs; root and ckptd's own uid see every job.  status and flush. */
int  job_visible_to(const struct job *j, uid_t uid);

/* Open a job for a ctl request (LIST/PRUNE) by name, checking ownership. */
struct job *job_find(struct srv *S, const char *name);


/* 1 while a step of j that every rank has saved is still in flight: a
 * restore waits for it, so it never misses an acknowledged save. */
int  job_settling(const struct job *j);
/* The loop was woken: answer flush waiters (flush.h), release idle jobs. */
void job_flush_poll(struct srv *S);
/* Anything in flight anywhere?  (SIGTERM drain.) */
int  job_busy(struct srv *S);
/* Multi-node: what the coordinator tells this node (coord.h): a step's
 * outcome (the local ranks learn COMMITTED, or the step aborts with its
 * error), or a lost peer (every step fails, the daemon drains and exits). */
extern const struct coord_hooks job_coord_hooks;
/* Abort every in-flight step (drain timeout). */
void job_abort_all(struct srv *S, int err, const char *why);
void job_free_all(struct srv *S);

#endif
