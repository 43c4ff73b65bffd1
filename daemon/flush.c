/* flush.c - flush waiters: a FLUSH is answered once every step accepted
 * before it (of one job, or of every job its uid may see) has finished,
 * with how many committed and failed, or at its timeout.  See flush.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "flush.h"
#include "job.h"
#include "session.h"

struct flush_waiter {
	struct flush_waiter *next;
	struct srv     *srv;
	struct session *sess;
	uint64_t        req_id;
	char            job[65];
	uid_t           uid;            /* waits for the jobs this uid may see */
	uint64_t        upto;
	unsigned        committed, failed;
	uv_timer_t      timer;
};

static int flush_pending(struct srv *S, struct flush_waiter *f)
{
	for (struct job *j = S->jobs; j; j = j->next) {
		if ((f->job[0] && strcmp(f->job, j->name)) || !job_visible_to(j, f->uid))
			continue;
		for (struct step *st = j->steps; st; st = st->next)
			if (st->seq <= f->upto && st->state != STEP_DONE && !st->failed)
				return 1;
	}
	return 0;
}

static void flush_close_cb(uv_handle_t *h)
{
	free(h->data);
}

static void flush_finish(struct flush_waiter *f, int status, const char *why)
{
	struct srv *S = f->srv;
	struct flush_waiter **pp;
	char json[160];

	for (pp = &S->flushes; *pp && *pp != f; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = f->next;
	if (status == 0 && f->failed) {
		status = -EIO;
		why = f->failed == 1 ? "a save failed" : "saves failed";
	}
	if (status == 0 || status == -EIO)
		snprintf(json, sizeof(json), "{\"committed\":%u,\"failed\":%u}", f->committed,
			 f->failed);
	if (status == 0)
		session_reply(f->sess, PROTO_FLUSH | PROTO_REPLY, f->req_id, 0, json, NULL, 0);
	else
		session_reply_err(f->sess, PROTO_FLUSH | PROTO_REPLY, f->req_id, status,
				  "%s (committed %u, failed %u)", why, f->committed, f->failed);
	session_unref(f->sess);
	uv_timer_stop(&f->timer);
	uv_close((uv_handle_t *)&f->timer, flush_close_cb);
}

static void flush_check_all(struct srv *S)
{
	for (struct flush_waiter *f = S->flushes, *next; f; f = next) {
		next = f->next;
		if (!flush_pending(S, f))
			flush_finish(f, 0, "");
	}
}

void flush_on_step_end(struct srv *S, struct step *st, int ok)
{
	for (struct flush_waiter *f = S->flushes; f; f = f->next) {
		if (st->seq > f->upto || (f->job[0] && strcmp(f->job, st->job->name)) ||
		    !job_visible_to(st->job, f->uid))
			continue;
		if (ok)
			f->committed++;
		else
			f->failed++;
	}
	/* steps are only marked done after this; check on the next turn */
	uv_async_send(&S->wake);
}

void flush_poll(struct srv *S)
{
	flush_check_all(S);
}

static void flush_timeout(uv_timer_t *t)
{
	flush_finish(t->data, -ETIMEDOUT, "timed out waiting for saves to commit");
}

int flush_start(struct srv *S, struct session *s, uint64_t req_id, const char *job,
		uint32_t timeout_ms)
{
	struct flush_waiter *f = calloc(1, sizeof(*f));

	if (!f)
		return -ENOMEM;
	f->srv = S;
	f->sess = s;
	s->refs++;
	f->uid = s->uid;
	f->req_id = req_id;
	snprintf(f->job, sizeof(f->job), "%s", job ? job : "");
	f->upto = S->step_seq;
	uv_timer_init(S->loop, &f->timer);
	f->timer.data = f;
	uv_timer_start(&f->timer, flush_timeout, timeout_ms, 0);
	f->next = S->flushes;
	S->flushes = f;
	flush_check_all(S);
	return 0;
}
