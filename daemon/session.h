/* session.h - one client connection (a trainer rank or ckptctl): its
 * lifetime, output queue, request reading and dispatch, and what it
 * registered: shared-memory or CUDA regions (reference-counted, since a
 * save or restore in flight keeps using them), tensors and blobs.
 * Loop thread only. */
#ifndef CKPT_SESSION_H
#define CKPT_SESSION_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <uv.h>

#include "nidx.h"
#include "proto.h"
#include "safet.h"
#include "shm_region.h"

struct srv;
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
	/* a piece of a global tensor (ckpt_register_global), or not */
	int      global;
	int64_t  gshape[SAFET_MAX_NDIM];    /* the whole tensor */
	int64_t  goffset[SAFET_MAX_NDIM];   /* this piece's first index */
	int      replica_index, replica_count;
	int      frozen;     /* CKPT_FROZEN: training does not change it; its
	                        group's frozen tensors get a file of their own
	                        (plan.c), linked when unchanged (wr.c) */
};

/* A group of a session's tensors: the bytes its shard's safetensors
 * header will take, at most (treg.h). */
struct reg_group {
	char    *name;
	uint64_t header_bytes;
	size_t   ntensors;
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

struct session;

/* Work a session runs beyond one reply (a restore): more() is called on
 * the loop each time its output queue may take more, and once with
 * closing set when the session closes (the task is cleared first). */
struct session_task {
	void (*more)(struct session *s, void *arg, int closing);
	void  *arg;
};

struct job;

struct session {
	struct session *next, *prev;
	struct srv     *srv;
	uint64_t        id;
	int             fd;
	int             refs;           /* the connection + in-flight work */
	int             closed;
	int             busy;           /* a restore or pool request runs: reading paused */
	uv_poll_t       poll;
	int             poll_events;
	uint64_t        hello_ns;       /* when it connected */
	int64_t         pending_restore_step;   /* deferred RESTORE */
	uint64_t        pending_restore_req;    /* 0: none */
	int             pending_restore_partial;
	uint64_t        rd_since_ns;    /* a message (or HELLO) pending since */
	uint64_t        active_ns;      /* its last request */
	struct proto_reader rd;
	uid_t           uid;
	gid_t           gid;
	pid_t           pid;
	enum session_role role;
	struct job     *job;
	int             rank;
	struct region_ref **regions;    size_t nregions, cregions;
	struct reg_tensor  *tensors;    size_t ntensors, ctensors;
	uint64_t            treg_gen;   /* changes with every registration */
	struct plan_tmpl   *plan;       /* their saves' layout (plan.c), or NULL */
	uint64_t            prep_seen;  /* treg_gen at the last tick (prep.c) */
	uint64_t            prep_gen;   /* treg_gen prep.c last prepared */
	uint64_t            prep_len;   /* the tier memory reserved per capture */
	uint64_t            prep_shared_len;   /* ... per one sharing frozen shards */
	int                 prep_busy;  /* reserving it now */
	int                 repl_whole; /* a partner could not share its last save's
					 * files: the next one is copied whole */
	unsigned            frozen_unchecked;  /* its saves in a row that linked
						* frozen shards uncompared */
	uint64_t            frozen_compared;   /* its newest save that copied them */
	struct nidx         tensor_idx;     /* (group, name) -> tensors[] */
	struct reg_group   *groups;     size_t ngroups, cgroups;
	struct nidx         group_idx;      /* group -> groups[] */
	struct blob        *blobs;      size_t nblobs;
	uint64_t        blob_bytes;     /* of its blobs (srv's blob_bytes too) */
	struct out_msg *outq, *outq_tail;
	size_t          outq_bytes;
	uint64_t        next_ticket;
	struct gpu_sess *gpu;           /* ckpt_save_stream() events, or NULL */
	struct gpu_sync *save_sync;     /* the SAVE being planned (h_save only) */
	uint32_t        features;       /* the client's PROTO_FEAT_* from HELLO */
	struct session_task task;       /* a restore running, or none */
};

/* Regions: a new one has refs 1 (its session's).  Whoever keeps using a
 * region after the request that found it (an rsave, a restore) takes a
 * reference and drops it when done; the last one unmaps it. */
void region_ref(struct region_ref *rg);
void region_unref(struct region_ref *rg);         /* NULL ok */
/* While loop runs (NULL after), large regions are unmapped and closed on
 * its pool instead of the calling (loop) thread. */
void region_release_on(uv_loop_t *loop);

/* The session's region with that id (and its index), or NULL. */
struct region_ref *session_region_find(struct session *s, uint64_t id, size_t *idx);
/* Append rg (steals its reference on success). */
int  session_region_add(struct session *s, struct region_ref *rg);
/* Remove the idx-th region and drop the session's reference. */
void session_region_del(struct session *s, size_t idx);

/* A new session for an accepted connection (steals fd on success). */
int  session_new(struct srv *S, int fd, const struct ucred *cred);
/* Close: stop reading, detach from its job; freed when the last
 * reference (in-flight work) goes. */
void session_close(struct session *s, const char *why);
void session_unref(struct session *s);
/* How long a ckptctl session has been idle at now: no request for that
 * long, none in flight (a flush waiting), nothing queued to send; 0 for
 * any other session. */
uint64_t session_idle_ns(const struct session *s, uint64_t now);
/* Reading was paused (s->busy) for a restore or a pool request: go on. */
void session_resume(struct session *s);

/* Queue a reply / event for a session (drops silently if it is closed). */
void session_reply(struct session *s, uint16_t type, uint64_t req_id,
		   int status, const char *json, const void *bin, size_t blen);
void session_reply_err(struct session *s, uint16_t type, uint64_t req_id,
		       int status, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

#endif
