/* srv.h - ckptd's loop-thread state: the listening socket, the sessions
 * (session.h), jobs, the notice queue from worker threads, signals and the
 * tick.  Everything here is touched only on the loop thread unless noted. */
#ifndef CKPT_SRV_H
#define CKPT_SRV_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "clock.h"
#include "config.h"
#include "pipe.h"
#include "proto.h"
#include "shm_pool.h"
#include "session.h"

struct notice {
	enum pipe_notice what;
	struct rsave    *rs;
};

struct flush_waiter;
struct memt;

struct srv {
	struct config   cfg;
	const char     *config_path;
	uv_loop_t      *loop;
	int             listen_fd;
	uv_poll_t       listen_poll;
	uv_signal_t     sig_term, sig_int, sig_hup;
	uv_async_t      wake;
	uv_timer_t      tick;
	int             rootfd;
	int             can_clone;      /* the root's file system clones ranges */
	struct shm_pool pool;
	struct pipe     pipe;
	struct memt    *memt;           /* the memory tier; NULL when off */
	int             gpu;            /* CUDA usable */

	pthread_mutex_t nlock;          /* notices from worker threads */
	struct notice  *notices;        size_t nnotices, cnotices;

	struct session *sessions;
	unsigned        nsessions;
	size_t          outq_total;     /* replies queued, all sessions */
	uint64_t        blob_bytes;     /* blobs held, all sessions */
	uint64_t        next_session_id;
	struct job     *jobs;
	struct flush_waiter *flushes;

	uint64_t        started_ns;
	uint64_t        step_seq;
	uint64_t        saves_committed, saves_failed;
	uint64_t        rate_last_bytes, rate_last_ns;
	double          write_rate_bps;
	int             draining;
	uint64_t        drain_deadline_ns;
	int             exit_code;
};


/* May ckptd listen at path?  Yes when nothing is there or a stale socket
 * nobody listens on (replaced at start-up).  -EEXIST for anything that is
 * not a socket, -EADDRINUSE for a live socket, with err saying so. */
int  srv_socket_check(const char *path, char *err, size_t errlen);
int  srv_init(struct srv *S, const struct config *cfg, const char *config_path);
int  srv_run(struct srv *S);                 /* returns the exit code */
/* Stop accepting new saves and exit once those in flight are finished, or
 * within_ms from now (then they are aborted).  err != 0: exit non-zero.
 * A later call may only bring the deadline nearer.  Loop thread. */
void srv_drain(struct srv *S, int err, uint32_t within_ms);
/* Do incremental saves clone the unchanged chunks of changed files: on,
 * the root's file system clones ranges, chunks are whole csum chunks? */
int  srv_clones(const struct srv *S);

#endif
