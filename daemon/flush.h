/* flush.h - FLUSH waiters (ckptctl flush): reply once every step accepted
 * so far (of job, or of every job the requester may see) has finished.
 * Loop thread only. */
#ifndef CKPT_FLUSH_H
#define CKPT_FLUSH_H

#include <stdint.h>

struct session;
struct srv;
struct step;

/* Start waiting for s (a reference is held until the reply); the reply
 * comes later: {"committed":N,"failed":N}, -EIO when a save failed, or
 * -ETIMEDOUT after timeout_ms.  0 or -ENOMEM. */
int  flush_start(struct srv *S, struct session *s, uint64_t req_id,
		 const char *job, uint32_t timeout_ms);
/* A step ended (committed or not): count it for the waiters it concerns
 * and wake the loop (it is marked done only after this). */
void flush_on_step_end(struct srv *S, struct step *st, int ok);
/* Reply to the waiters with nothing left in flight (loop wake-up). */
void flush_poll(struct srv *S);

#endif
