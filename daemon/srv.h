/* srv.h - ckptd's loop-thread state: the listening socket, sessions (one
 * per connection), the notice queue from worker threads, and the objects
 * sessions register (shared-memory regions, tensors, blobs).
 * Everything here is touched only on the loop thread unless noted. */
#ifndef CKPT_SRV_H
#define CKPT_SRV_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "config.h"
#include "pipe.h"
#include "proto.h"
#include "safet.h"
#include "shm_pool.h"
#include "shm_region.h"

struct gpu_mem;
struct gpu_sess;
struct gpu_sync;

struct region_ref {
	int               refs;
	uint64_t          id;
	struct shm_region r;        /* host memory (r.base NULL for CUDA) */
	struct gpu_mem   *gm;       /* CUDA memory: r.size bytes of it */
};

struct reg_tensor {
	char    *group, *name;
	char     dtype[8];
	int      ndim;
	int64_t  shape[SAFET_MAX_NDIM];
	uint64_t nbytes;
	struct region_ref *rg;
	uint64_t offset;
};

struct blob {
	char    *name;
	uint8_t *data;
	size_t   len;
};

struct out_msg {
	struct out_msg *next;
	uint8_t *buf;
	size_t   len, off;
};

enum session_role { ROLE_NONE = 0, ROLE_TRAINER, ROLE_CTL };

struct job;

struct session {
	struct session *next, *prev;
	struct srv     *srv;
	uint64_t        id;
	int             fd;
	int             refs;           /* the connection + in-flight work */
	int             closed;
	int             busy;           /* a restore runs: reading paused */
	uv_poll_t       poll;
	int             poll_events;
	uint64_t        hello_ns;       /* when it connected */
	int64_t         pending_restore_step;   /* deferred RESTORE */
	uint64_t        pending_restore_req;    /* 0: none */
	int             pending_restore_partial;
	uint64_t        rd_since_ns;    /* a message (or HELLO) pending since */
	struct proto_reader rd;
	uid_t           uid;
	gid_t           gid;
	pid_t           pid;
	enum session_role role;
	struct job     *job;
	int             rank;
	struct region_ref **regions;    size_t nregions, cregions;
	struct reg_tensor  *tensors;    size_t ntensors, ctensors;
	struct blob        *blobs;      size_t nblobs;
	struct out_msg *outq, *outq_tail;
	size_t          outq_bytes;
	uint64_t        next_ticket;
	struct gpu_sess *gpu;           /* ckpt_save_stream() events, or NULL */
	struct gpu_sync *save_sync;     /* the SAVE being planned (h_save only) */
};

struct notice {
	enum pipe_notice what;
	struct rsave    *rs;
};

struct flush_waiter;

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
	struct shm_pool pool;
	struct pipe     pipe;
	int             gpu;            /* CUDA usable */

	pthread_mutex_t nlock;          /* notices from worker threads */
	struct notice  *notices;        size_t nnotices, cnotices;

	struct session *sessions;
	unsigned        nsessions;
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

uint64_t srv_now_ns(void);

/* Queue a reply / event for a session (drops silently if it is closed). */
void session_reply(struct session *s, uint16_t type, uint64_t req_id,
		   int status, const char *json, const void *bin, size_t blen);
void session_reply_err(struct session *s, uint16_t type, uint64_t req_id,
		       int status, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
void session_unref(struct session *s);
void session_resume(struct session *s);      /* after a restore */

int  srv_init(struct srv *S, const struct config *cfg, const char *config_path);
int  srv_run(struct srv *S);                 /* returns the exit code */

#endif
