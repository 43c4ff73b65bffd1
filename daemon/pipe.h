/* pipe.h - the save pipeline: the queues between the loop thread, the
 * stager threads (trainer memory -> staging pool) and the writer threads
 * (staging pool -> files, file digest, fsync).
 *
 * Ordering keeps it deadlock-free with a bounded pool: stagers take pool
 * chunks and claim chunk numbers together, in one global order (rsaves
 * FIFO, files in order, chunks in order), and writers take files in the
 * same order, so the oldest chunk held in the pool always belongs to a file
 * some writer is consuming.  The one exception: a run of rsaves at the
 * queue's head whose chunks all fit in the free pool get them promised at
 * once (shm_pool_reserve) and are staged side by side (the ranks of a step
 * become STAGED together); they never wait for space, so they cannot block
 * anyone, and only a prefix of the queue is ever reserved.
 * tests/unit/test_pipe.c runs the real threads on a pool of 4 chunks with
 * saves of many times that, small reservable ones between them, a cancel
 * in the middle, and 1..3 stagers or writers: every save must finish.
 */
#ifndef CKPT_PIPE_H
#define CKPT_PIPE_H

#include <pthread.h>
#include <stdatomic.h>

#include "config.h"
#include "io.h"
#include "rsave.h"
#include "shm_pool.h"

enum pipe_notice { PIPE_STAGED = 1, PIPE_DONE = 2 };

/* Called from worker threads; must only queue and wake the loop. */
typedef void (*pipe_notify_fn)(void *arg, enum pipe_notice what,
			       struct rsave *rs);

struct wjob { struct rsave *rs; size_t file; };

struct pipe {
	struct shm_pool  *pool;          /* borrowed */
	char              io_backend[16];
	int               direct_io;
	unsigned          io_depth;
	pipe_notify_fn    notify;
	void             *notify_arg;

	pthread_mutex_t   lock;          /* queues and chunk states */
	pthread_cond_t    stage_cond;    /* stage queue not empty */
	pthread_cond_t    write_cond;    /* write queue not empty / chunk ready */
	pthread_mutex_t   claim_lock;    /* pool take + chunk claim, in order */

	struct rsave    **sq;  size_t sq_head, sq_len, sq_cap;
	struct wjob      *wq;  size_t wq_head, wq_len, wq_cap;
	int               stopping;

	pthread_t        *stagers;  unsigned nstagers;
	pthread_t        *writers;  unsigned nwriters;

	atomic_uint_fast64_t bytes_written;
	char              backend_used[16];
	int               fell_back;     /* io_uring unavailable */
};

/* Start the threads.  Returns 0 or -errno. */
int  pipe_start(struct pipe *p, struct shm_pool *pool, const struct config *cfg,
		pipe_notify_fn fn, void *arg);
/* Queue a built rsave (loop thread).  The pipeline borrows it until it
 * posts PIPE_DONE.  Returns 0 or -ENOMEM (then nothing was queued). */
int  pipe_submit(struct pipe *p, struct rsave *rs);
/* Ask an rsave to stop; its files drain and PIPE_DONE follows. */
void pipe_cancel(struct pipe *p, struct rsave *rs, int err, const char *msg);
/* Record the first error of an rsave and cancel it (any thread). */
void pipe_fail(struct pipe *p, struct rsave *rs, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Stop and join the threads (queues must be drained first). */
void pipe_stop(struct pipe *p);

/* Thread bodies (stage.c, wr.c). */
void *stage_thread(void *arg);
/* 1 when rs's bytes may be copied now: no stream save, or its trainer's
 * stream has reached it.  Never blocks (stage.c). */
int   rsave_may_copy(struct rsave *rs);
void *wr_thread(void *arg);

#endif
