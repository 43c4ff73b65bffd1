/* job.h - jobs: who may save into which job directory, its ranks, and the
 * directory as it is on disk.  A job's in-flight steps are step.h's.
 * Loop thread only. */
#ifndef CKPT_JOB_H
#define CKPT_JOB_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "srv.h"
#include "step.h"
#include "store.h"

#define JOB_ABORTED_MEMORY 64

struct prior;

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
	struct prior   **prior;         /* [world_size] each rank's newest
	                                   committed files (incremental saves) */
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

/* Is <root>/<name> still the directory j holds?  (An operator may have
 * removed or moved it.) */
int  job_dir_same(const struct job *j);
/* Before a new step: check the directory is still the one held; when an
 * operator removed or moved it, make it again (same owner) or take the one
 * now there, once no step is in flight.  0 or -errno with msg. */
int  job_dir_refresh(struct job *j, char *msg, size_t msglen);
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
void job_free_all(struct srv *S);

#endif
