/* coord_int.h - what the files of the multi-node commit share (coord.c:
 * the MPI thread, transport and start-up; coord_step.c: the coordinator's
 * step table, decisions and file thread; coord_wire.c: the wire form of a
 * report).  Not a public interface: see coord.h.  No MPI type in here.
 *
 * Threads and locks: C.lock guards the queues (outq, inq, fq, fdone), the
 * peer table and the step table's list and decisions (status reads them on
 * the loop thread).  A step's decided is written only under C.lock, by the
 * MPI thread, which reads it without the lock (the only writer).  A step
 * being published is read by the file thread and left alone by the MPI
 * thread until the result comes back.  C.lost is written by the MPI thread
 * and read by the loop thread (status, finalize): atomic, as are the flags
 * the loop thread sets for the MPI thread (stop, finalize) and keep_last. */
#ifndef CKPT_COORD_INT_H
#define CKPT_COORD_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "commit.h"
#include "coord.h"
#include "names.h"

enum { T_GO = 1, T_PING, T_SEEN, T_DURABLE, T_FAILED, T_CLEAN, T_OUTCOME,
       /* partner nodes' memory (coord_repl.c) */
       T_REPL, T_REPL_DATA, T_REPL_ACK, T_FETCH, T_FETCH_REPLY, T_FETCH_DATA };
enum { EV_OUTCOME = 1, EV_LOST, EV_REPLICATED };

#define COORD_POLL_US    200        /* busy: poll MPI this often */
#define COORD_IDLE_US    2000       /* idle (nothing for COORD_IDLE_AFTER) */
#define COORD_IDLE_AFTER 50000000ull
#define COORD_KEEP_NS    (600ull * 1000000000ull)   /* remember outcomes 10 min */

/* A node's word about (job, step): queued by the loop thread, sent as
 * JSON (the only place it is serialised), decoded by the coordinator. */
struct report {
	int          tag;             /* T_SEEN .. T_CLEAN */
	char         job[NAME_MAX_JOB + 1];
	uint64_t     step;
	char         txid[33], run_id[33];
	int          world_size;
	int          err;             /* T_FAILED */
	char         msg[512];        /* T_FAILED */
	struct commit_part *part;     /* T_DURABLE: owned */
	int          memory;          /* T_DURABLE: in memory only (a memory-
				       * level step: persist_every) */
	int          replicas;        /* T_DURABLE: the node's memory_replicas */
};

struct qmsg {                     /* loop -> MPI thread */
	struct qmsg  *next;
	struct report rep;
};

struct cev {                      /* MPI thread -> loop */
	struct cev *next;
	int         kind, ok, err;
	uint64_t    step;
	int         rank;             /* EV_REPLICATED */
	char        job[NAME_MAX_JOB + 1];
	char        msg[512];
	char        txid[33];         /* EV_OUTCOME, committed */
	char       *manifest;         /* ... at memory level: owned */
	int        *owners;           /* ... [nowners]: owned */
	int         nowners;
};


struct cstep {                    /* coordinator: one (job, step) */
	struct cstep *next;
	char          job[NAME_MAX_JOB + 1];
	uint64_t      step;
	char          txid[33], run_id[33];
	int           world_size;
	struct commit_part **ranks;   /* [world_size] reported parts */
	int          *rank_node;      /* [world_size] who reported it */
	int           ndurable;
	unsigned char *seen, *durable; /* [size] nodes */
	uint64_t      t_first, t_decided;
	int           decided;        /* 0, 1 committed, -1 aborted; written
					 under C.lock (status reads it) */
	int           publishing;     /* on the file thread (MPI thread only) */
	int           memory;         /* a memory-level step (-1 not yet known) */
	int           replicas;       /* the nodes' memory_replicas (-1 ...) */
	char         *manifest;       /* memory level, committed: its text */
	int           err;
	char          msg[512];
};

/* Coordinator: file work, in order, on a thread of its own (heartbeats
 * never wait for the file system). */
enum { FW_PUBLISH = 1, FW_PRUNE, FW_REMOVE };

struct fwork {
	struct fwork *next;
	int           kind;
	struct cstep *cs;             /* FW_PUBLISH: kept until decided */
	char          job[NAME_MAX_JOB + 1];
	uint64_t      step;
	char          txid[33], run_id[33];
	int           r;              /* FW_PUBLISH: result */
	enum commit_outcome outcome;
	char          msg[512];
};

struct psend;

struct coord_state {
	int            active;
	int            rank, size;
	struct srv    *S;
	const struct coord_hooks *hooks;
	int            rootfd;
	uint32_t       deadline_ms;   /* durability deadline of a step */
	uint32_t       peer_ms, hb_ms; /* peer lost after peer_ms of silence */
	atomic_uint    keep_last;     /* reloadable: coord_reload */
	pthread_t      thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int            init_done, init_err;
	atomic_int     lost;          /* a peer was lost: MPI thread writes */
	atomic_int     stop, finalize;
	char           init_msg[1024];
	struct qmsg   *outq, **outq_tail;
	struct cev    *inq, **inq_tail;
	uv_async_t     async;
	uint64_t      *last_heard;    /* [size], ns; 0 = never */
	struct cstep  *steps;
	struct psend  *sends;
	/* the file thread (coordinator); fq, fdone, fstop under C.lock */
	pthread_t      fthread;
	int            fthread_up;
	pthread_cond_t fcond;
	struct fwork  *fq, **fq_tail, *fdone, **fdone_tail;
	int            fstop;
};

extern struct coord_state C;

/* coord.c: MPI thread -> a node (Isend, copied) and -> the loop thread */
void coord__send(int dst, int tag, const char *txt);
void coord__post(int kind, const char *job, uint64_t step, int ok, int err,
		 const char *msg);
/* ... an outcome, with what a committed one says (txid, owners, manifest);
 * takes o (parsed from the wire or built by the coordinator). */
void coord__post_outcome(json_t *o);
/* ... an event built with coord__cev (which never fails: out of memory
 * is fatal), completed by the caller. */
struct cev *coord__cev(int kind, const char *job, uint64_t step, int ok, int err,
		       const char *msg);
void coord__post_ev(struct cev *e);

/* A peer is lost (once; MPI thread): fail the steps in flight, tell the
 * loop thread, which ends the daemon's part in the world. */
void coord__lost(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* coord_step.c: the coordinator (MPI thread unless noted) */
void coord__on_report(int node, struct report *rp);
void coord__check_deadlines(uint64_t now);
void coord__files_done(void);
void *coord__files_main(void *arg);          /* the file thread */
void coord__abort(struct cstep *cs, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* coord_repl.c: partner nodes' memory, on the MPI thread: a message of
 * tag T_REPL..T_FETCH_DATA from src (the raw data tags are received by it:
 * coord__repl_recv), and the sends and waits it has in flight (called on
 * every round).  Returns 1 when it took the message. */
int  coord__repl_recv(int src, int tag, int count);
void coord__repl_msg(int src, int tag, const char *txt);
/* 1 while transfers are in flight (poll MPI often). */
int  coord__repl_poll(void);
void coord__repl_init(void);
void coord__repl_fini(void);

/* coord_wire.c: a report as JSON text (malloc'd, NULL when out of
 * memory), and back (0, or -EINVAL / -ENOMEM with msg). */
char *coord__report_encode(const struct report *rp);
int   coord__report_decode(int tag, const char *txt, struct report *rp, char *msg,
			   size_t msglen);

#endif
