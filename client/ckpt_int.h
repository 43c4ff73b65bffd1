/* ckpt_int.h - libckpt's private header: the handle's layout and the
 * ckpt__ functions its files share, plus the transport (ckpt_conn.c) that
 * ckptctl uses too.  Never installed; ckpt.h is the only public header.
 *
 * The files of libckpt, one job each:
 *   ckpt_conn.c     the transport: one Unix socket, requests and replies
 *   ckpt_client.c   the handle: connect with HELLO, close, errors, requests
 *   ckpt_check.c    argument checks done before anything is sent
 *   ckpt_mem.c      memory and tensors: ckpt_alloc/free, (un)register, blobs
 *   ckpt_save.c     saves: ckpt_save/_stream, tickets fed by EVENTs, wait
 *   ckpt_restore.c  restore and the blobs it brings back
 *   gpu_client.c    CUDA device memory and the stream event ring
 */
#ifndef CKPT_INT_H
#define CKPT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "ckpt.h"
#include "gpu_client.h"
#include "nidx.h"
#include "proto.h"
#include "shm_region.h"

#define CKPT__ERR_LEN      1024
#define CKPT__MAX_TICKETS  4096   /* finished ones are forgotten beyond this */
#define CKPT__MAX_JOB      64
#define CKPT__MAX_GROUP    64
#define CKPT__MAX_BLOB     128
#define CKPT__MAX_TENSOR   1024

/* --- the transport (ckpt_conn.c), shared by libckpt and ckptctl ------------
 * One blocking Unix stream socket.  A request is sent, then messages are
 * read until the reply with its req_id arrives; other messages on the way
 * (EVENTs) go to a callback or are dropped.  Nothing here prints or exits:
 * functions return -errno and a broken connection keeps its reason. */

struct ckpt__conn {
	int      fd;
	int      broken;           /* -errno once the connection is unusable */
	uint64_t next_req;
	struct proto_reader rd;
	char     why[256];         /* what broke it, e.g. "ckptd closed the
				    * connection" */
};

/* A reply.  status 0: json is the reply object.  status < 0: the daemon
 * refused (its -errno) and json is whatever it said (may be NULL). */
struct ckpt__reply {
	int32_t  status;
	json_t  *json;         /* new reference */
	uint8_t *bin;          /* malloc'd copy, only if asked for */
	size_t   blen;
};

/* Called for each EVENT read while waiting for a reply, and for each
 * RESTORE_PART of the RESTORE being waited for. */
typedef void (*ckpt__event_fn)(void *arg, const struct proto_msg *m);

void ckpt__conn_init(struct ckpt__conn *k, uint32_t max_payload);
/* Connect to the socket at path.  -errno with a message in err. */
int  ckpt__conn_open(struct ckpt__conn *k, const char *path, char *err,
		     size_t errlen);
void ckpt__conn_release(struct ckpt__conn *k);    /* NULL-safe, idempotent */
/* Send one request; *req_id gets its id.  req is borrowed.  -EMSGSIZE,
 * -EINVAL or -ENOMEM leave the connection usable; other errors break it. */
int  ckpt__conn_send(struct ckpt__conn *k, uint16_t type, const json_t *req,
		     const void *bin, size_t blen, const int *fds,
		     unsigned nfds, uint64_t *req_id);
/* The next complete message.  1, -EAGAIN when deadline_ms (monotonic, < 0
 * for never) passed first, or the error that broke the connection.  The
 * caller owns m->fds. */
int  ckpt__conn_next(struct ckpt__conn *k, struct proto_msg *m,
		     int64_t deadline_ms);
/* Read until the reply to req_id of type (or an ERROR for it) arrives.
 * 0 with *out filled (out->status says whether the daemon agreed);
 * -EAGAIN past deadline_ms; -EPROTO for a malformed successful reply;
 * -ENOMEM; or the error that broke the connection. */
int  ckpt__conn_await(struct ckpt__conn *k, uint16_t type, uint64_t req_id,
		      int64_t deadline_ms, bool want_bin,
		      ckpt__event_fn on_event, void *arg,
		      struct ckpt__reply *out);
/* The daemon's reason for a refused reply ("" if it gave none). */
const char *ckpt__reply_why(const struct ckpt__reply *rep);
void ckpt__reply_release(struct ckpt__reply *rep);
void ckpt__msg_close_fds(struct proto_msg *m);
int64_t ckpt__now_ms(void);                      /* CLOCK_MONOTONIC */
/* An unsigned JSON integer member: 0, or -EPROTO. */
int  ckpt__json_u64(const json_t *o, const char *key, uint64_t *out);

/* --- the handle ------------------------------------------------------------ */

struct ckpt__region {
	uint64_t          id;
	struct shm_region shm;
};

struct ckpt__tensor {
	char    *group, *name;
	uint64_t region;
};

struct ckpt__gpu_region {          /* CUDA memory exported to ckptd */
	uint64_t id;
	int      kind;             /* GPU_CLIENT_IPC / _VMM */
	uint64_t base, size;
	uint8_t  key[GPU_CLIENT_HANDLE];
};

struct ckpt__ticket {
	uint64_t id, step;
	bool     known;            /* returned by ckpt_save() (events may come
				    * before its reply) */
	int      phase;            /* highest ckpt_phase reached, 0 if none */
	int      error;            /* 0, or -errno once the save failed */
	char    *message;          /* the daemon's reason for the failure */
	struct ckpt_times times;
	bool     stream;           /* a stream save: slot and seq are its gate */
	unsigned slot;
	uint32_t seq;
	void    *gated;            /* the stream ckpt_gate_stream() last made
				    * wait on it (repeats are no-ops) */
	bool     gated_any;
};

struct ckpt__blob {
	char    *name;
	uint8_t *data;
	size_t   len;
};

struct ckpt__restore;

struct ckpt_client {
	struct ckpt__conn conn;
	pid_t    pid;              /* the process that connected */
	uint64_t next_region;
	uint32_t max_payload;      /* the daemon's limit, from HELLO */
	bool     daemon_gpu;
	uint32_t daemon_features;  /* PROTO_FEAT_* from the HELLO reply */

	struct ckpt__region *regions; size_t nregions, cap_regions;
	struct ckpt__tensor *tensors; size_t ntensors, cap_tensors;
	struct nidx          tensor_idx;   /* (group, name) -> tensors[] */
	struct ckpt__ticket *tickets; size_t ntickets, cap_tickets;
	struct ckpt__blob   *blobs;   size_t nblobs;
	struct ckpt__restore *restore;   /* the last restore's report, or NULL */
	struct ckpt__gpu_region *gpu; size_t ngpu, cap_gpu;
	struct gpu_ring      ring;    /* ckpt_save_stream() events */
	void    *empty;            /* a page of ours that zero-byte tensors found
	                            * in no region are registered in (NULL) */

	char err[CKPT__ERR_LEN];
};

/* ckpt_client.c */
int  ckpt__fail(ckpt_client *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int  ckpt__check_owner(ckpt_client *c);
int  ckpt__grow(void **arr, size_t *cap, size_t need, size_t elem);
/* One request/reply exchange, EVENTs folded into tickets on the way.  req
 * is borrowed.  A refusal is returned as the daemon's -errno with its
 * reason in c->err. */
int  ckpt__request(ckpt_client *c, uint16_t type, json_t *req,
		   const void *bin, size_t blen, const int *fds,
		   unsigned nfds, struct ckpt__reply *out, bool want_bin);
/* The same, with the messages read on the way to the reply (EVENTs, and
 * a RESTORE's parts) given to on_msg instead. */
int  ckpt__request_with(ckpt_client *c, uint16_t type, json_t *req,
			const void *bin, size_t blen, const int *fds,
			unsigned nfds, struct ckpt__reply *out, bool want_bin,
			ckpt__event_fn on_msg, void *arg);
/* The next message (EVENTs not folded); as ckpt__conn_next, with a
 * broken connection's reason in c->err. */
int  ckpt__next_msg(ckpt_client *c, struct proto_msg *m, int64_t deadline_ms);
void ckpt__blobs_clear(ckpt_client *c);

/* ckpt_check.c */
int  ckpt__check_name(ckpt_client *c, const char *what, const char *s,
		      size_t maxlen);
int  ckpt__check_tensor_name(ckpt_client *c, const char *s);

/* ckpt_restore.c */
void ckpt__restore_free(struct ckpt__restore *r);     /* NULL-safe */

/* ckpt_save.c */
void ckpt__on_event(void *client, const struct proto_msg *m);
void ckpt__tickets_free(ckpt_client *c);
/* Where ckpt_save_stream() records and ckpt_save_stream() /
 * ckpt_gate_stream() wait on CUDA events: gpu_ring_record and
 * gpu_ring_wait, or a test's stand-ins (the stream paths after ckptd
 * accepted a save cannot be reached otherwise on a machine without CUDA). */
struct ckpt__stream_ops {
	int (*record)(struct gpu_ring *r, unsigned slot, void *stream,
		      struct gpu_ring_save *out, char *err, size_t errlen);
	int (*wait)(struct gpu_ring *r, unsigned slot, uint32_t seq, void *stream,
		    char *err, size_t errlen);
};
extern struct ckpt__stream_ops ckpt__stream_ops;

#endif
