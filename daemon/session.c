/* session.c - one client connection: its lifetime, output queue, reading
 * and dispatch of requests, and the reference-counted regions it registers. */
#include <errno.h>
#include <malloc.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cmd.h"
#include "fail.h"
#include "gpu.h"
#include "job.h"
#include "log.h"
#include "plan.h"
#include "session.h"
#include "srv.h"
#include "treg.h"

/* Replies a client has not read yet: at OUTQ_PAUSE its further requests
 * wait (it gets no more replies to sit on), above OUTQ_MAX (events, large
 * restore replies) it is dropped, and all sessions together hold at most
 * max_reply_queue_bytes: above it the one holding the most is dropped. */
#define OUTQ_PAUSE (1u << 20)
#define OUTQ_MAX   (64u << 20)

static void session_process(struct session *s);
static void session_update_poll(struct session *s);

void region_ref(struct region_ref *rg)
{
	rg->refs++;
}

/* Unmapping a large populated region and closing the last descriptor of
 * its memfd (which frees its pages) take time proportional to its size:
 * ~1 s for 2 GiB.  While the loop runs, large ones are released on the
 * pool. */
#define REGION_RELEASE_ASYNC (16u << 20)
static uv_loop_t *release_loop;

struct region_release {
	uv_work_t         w;
	struct shm_region r;
};

static void release_work(uv_work_t *w)
{
	struct region_release *rr = w->data;

	FAILPOINT("region.release");
	shm_region_release(&rr->r);
}

static void release_done(uv_work_t *w, int status)
{
	free(w->data);
}

void region_release_on(uv_loop_t *loop)
{
	release_loop = loop;
}

void region_unref(struct region_ref *rg)
{
	struct region_release *rr;

	if (!rg || --rg->refs > 0)
		return;
	if (release_loop && rg->r.base && rg->r.size >= REGION_RELEASE_ASYNC &&
	    (rr = malloc(sizeof(*rr)))) {
		rr->r = rg->r;
		rr->w.data = rr;
		if (uv_queue_work(release_loop, &rr->w, release_work, release_done) == 0)
			rg->r.base = NULL;      /* the pool's now */
		else
			free(rr);
	}
	if (rg->r.base)
		shm_region_release(&rg->r);
	gpu_mem_unref(rg->gm);
	free(rg);
}

/* --- sending ------------------------------------------------------------ */

static int outq_flush(struct session *s)
{
	while (s->outq) {
		struct out_msg *m = s->outq;
		ssize_t n = send(s->fd, m->buf + m->off, m->len - m->off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			return -errno;
		}
		m->off += (size_t)n;
		s->outq_bytes -= (size_t)n;
		s->srv->outq_total -= (size_t)n;
		if (m->off < m->len)
			return 0;
		s->outq = m->next;
		if (!s->outq)
			s->outq_tail = NULL;
		free(m->buf);
		free(m);
	}
	return 0;
}

/* Drop what a closing session still had queued, and give large amounts
 * back to the system (glibc keeps freed heap pages otherwise). */
static void outq_drop(struct session *s)
{
	size_t had = s->outq_bytes;

	while (s->outq) {
		struct out_msg *m = s->outq;
		s->outq = m->next;
		free(m->buf);
		free(m);
	}
	s->outq_tail = NULL;
	s->srv->outq_total -= s->outq_bytes;
	s->outq_bytes = 0;
	if (had >= OUTQ_PAUSE)
		malloc_trim(0);
}

static int outq_paused(const struct session *s)
{
	return s->outq_bytes >= OUTQ_PAUSE;
}

/* Over the total: drop the clients that hold the most until under it. */
static void outq_shed(struct srv *S)
{
	while (S->outq_total > S->cfg.max_reply_queue_bytes) {
		struct session *big = NULL;
		for (struct session *s = S->sessions; s; s = s->next)
			if (!s->closed && (!big || s->outq_bytes > big->outq_bytes))
				big = s;
		if (!big || big->outq_bytes == 0)
			return;
		log_warnx("session %llu (pid %d) does not read its replies (%zu bytes "
			  "waiting; all clients %zu, max_reply_queue_bytes %llu): closed",
			  (unsigned long long)big->id, (int)big->pid, big->outq_bytes,
			  S->outq_total, (unsigned long long)S->cfg.max_reply_queue_bytes);
		session_close(big, "replies waiting exceed max_reply_queue_bytes");
	}
}

void session_reply(struct session *s, uint16_t type, uint64_t req_id, int status,
		   const char *json, const void *bin, size_t blen)
{
	struct out_msg *m;
	ssize_t n;
	int r;

	if (s->closed)
		return;
	m = calloc(1, sizeof(*m));
	n = m ? proto_pack(type, req_id, status, json, json ? strlen(json) : 0, bin,
			   blen, 0, &m->buf) : -ENOMEM;
	if (n < 0) {
		free(m);
		session_close(s, "out of memory replying");
		return;
	}
	m->len = (size_t)n;
	if (s->outq_tail)
		s->outq_tail->next = m;
	else
		s->outq = m;
	s->outq_tail = m;
	s->outq_bytes += m->len;
	s->srv->outq_total += m->len;
	if (s->outq_bytes > OUTQ_MAX) {
		session_close(s, "client does not read its replies");
		return;
	}
	if ((r = outq_flush(s)) < 0) {
		session_close(s, strerror(-r));
		return;
	}
	session_update_poll(s);
	if (s->srv->outq_total > s->srv->cfg.max_reply_queue_bytes)
		outq_shed(s->srv);
}

void session_reply_err(struct session *s, uint16_t type, uint64_t req_id, int status,
		       const char *fmt, ...)
{
	char msg[512];
	json_t *o;
	char *txt;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	o = json_pack("{ss}", "error", msg);
	txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	session_reply(s, type, req_id, status, txt ? txt : "{}", NULL, 0);
	free(txt);
}

/* --- session lifetime --------------------------------------------------- */

/* A session that held this much heap gives it back to the system when it
 * goes: glibc keeps freed pages (a session of 100,000 registered tensors
 * left ckptd at 500 MB with no job until malloc_trim). */
#define SESSION_TRIM_BYTES (16u << 20)

static void session_free(struct session *s)
{
	struct srv *S = s->srv;
	size_t held = s->blob_bytes + s->ntensors * sizeof(*s->tensors);

	for (size_t i = 0; i < s->nregions; i++)
		region_unref(s->regions[i]);
	for (size_t i = 0; i < s->ntensors; i++)
		held += strlen(s->tensors[i].group) + strlen(s->tensors[i].name);
	treg_release(s);
	plan_forget(s);
	for (size_t i = 0; i < s->nblobs; i++) {
		free(s->blobs[i].name);
		free(s->blobs[i].data);
	}
	S->blob_bytes -= s->blob_bytes;
	outq_drop(s);
	free(s->regions);
	free(s->blobs);
	gpu_sess_close(s->gpu);
	proto_reader_release(&s->rd);
	if (s->prev)
		s->prev->next = s->next;
	else
		S->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	S->nsessions--;
	free(s);
	if (held >= SESSION_TRIM_BYTES)
		malloc_trim(0);
}

void session_unref(struct session *s)
{
	if (--s->refs == 0)
		session_free(s);
}

static void poll_closed(uv_handle_t *h)
{
	struct session *s = h->data;
	close(s->fd);
	s->fd = -1;
	session_unref(s);
}

void session_close(struct session *s, const char *why)
{
	if (s->closed)
		return;
	s->closed = 1;
	if (why)
		log_debug("session %llu (pid %d): closed: %s", (unsigned long long)s->id,
			  (int)s->pid, why);
	outq_drop(s);            /* nothing more is sent */
	job_detach(s);
	if (s->task.more) {     /* a restore: cancel it, let the rank go now */
		struct session_task t = s->task;
		s->task = (struct session_task){ 0 };
		t.more(s, t.arg, 1);
	}
	uv_poll_stop(&s->poll);
	uv_close((uv_handle_t *)&s->poll, poll_closed);
}

static void on_session_io(uv_poll_t *h, int status, int events);

static void session_update_poll(struct session *s)
{
	int ev = 0;
	if (s->closed)
		return;
	if (!s->busy && !outq_paused(s))
		ev |= UV_READABLE;
	else
		ev |= UV_DISCONNECT;    /* a client gone mid-request lets go at once */
	if (s->outq)
		ev |= UV_WRITABLE;
	if (ev != s->poll_events) {
		s->poll_events = ev;
		if (ev)
			uv_poll_start(&s->poll, ev, on_session_io);
		else
			uv_poll_stop(&s->poll);
	}
}

uint64_t session_idle_ns(const struct session *s, uint64_t now)
{
	/* refs > 1: work in flight holds it (a flush waiting for saves) */
	if (s->role != ROLE_CTL || s->busy || s->refs > 1 || s->outq || s->rd.used ||
	    now < s->active_ns)
		return 0;
	return now - s->active_ns;
}

void session_resume(struct session *s)
{
	s->busy = 0;
	if (s->closed)
		return;
	session_update_poll(s);
	session_process(s);
}

/* --- regions ------------------------------------------------------------ */

struct region_ref *session_region_find(struct session *s, uint64_t id, size_t *idx)
{
	for (size_t i = 0; i < s->nregions; i++)
		if (s->regions[i]->id == id) {
			if (idx)
				*idx = i;
			return s->regions[i];
		}
	return NULL;
}

int session_region_add(struct session *s, struct region_ref *rg)
{
	if (s->nregions == s->cregions) {
		size_t n = s->cregions ? s->cregions * 2 : 16;
		struct region_ref **a = realloc(s->regions, n * sizeof(*a));
		if (!a)
			return -ENOMEM;
		s->regions = a;
		s->cregions = n;
	}
	s->regions[s->nregions++] = rg;
	return 0;
}

void session_region_del(struct session *s, size_t idx)
{
	struct region_ref *rg = s->regions[idx];

	s->regions[idx] = s->regions[--s->nregions];
	region_unref(rg);
}

/* --- dispatch ----------------------------------------------------------- */

static void req_reply(struct req *q)
{
	if (q->r < 0)
		session_reply_err(q->s, q->rtype, q->req_id, q->r, "%s",
				  q->msg[0] ? q->msg : strerror(-q->r));
	else
		session_reply(q->s, q->rtype, q->req_id, 0, q->reply ? q->reply : "{}", NULL, 0);
}

static void pool_work(uv_work_t *w)
{
	struct req *q = w->data;
	q->r = q->c->work(q);
}

static void pool_done(uv_work_t *w, int status)
{
	struct req *q = w->data;
	struct session *s = q->s;

	if (q->c->done)
		q->c->done(q);
	req_reply(q);
	if (q->fd >= 0)
		close(q->fd);
	free(q->reply);
	json_decref(q->j);
	free(q);
	session_resume(s);
	session_unref(s);
}

/* A CMD_POOL request: check it here, work on the pool, reply when done.
 * The session reads nothing more meanwhile (busy) and is kept (a ref). */
static void dispatch_pool(struct req *stack_q)
{
	struct req *q = malloc(sizeof(*q));
	struct session *s = stack_q->s;
	int r;

	if (!q) {
		stack_q->r = -ENOMEM;
		req_reply(stack_q);
		json_decref(stack_q->j);
		return;
	}
	*q = *stack_q;
	q->work.data = q;
	r = q->c->fn ? q->c->fn(q) : 0;
	q->m = NULL;                    /* the reader's buffer: not across the hop */
	if (r == 0)
		r = uv_queue_work(s->srv->loop, &q->work, pool_work, pool_done);
	if (r < 0) {
		q->r = r;
		if (q->c->done)
			q->c->done(q);
		req_reply(q);
		if (q->fd >= 0)
			close(q->fd);
		json_decref(q->j);
		free(q);
		return;
	}
	s->busy = 1;
	s->refs++;
}

static void dispatch(struct session *s, struct proto_msg *m)
{
	struct req q = { .s = s, .m = m, .req_id = m->hdr.req_id, .fd = -1,
			 .rtype = (uint16_t)(m->hdr.type | PROTO_REPLY) };
	json_error_t jerr;
	uint16_t t = m->hdr.type;
	const struct cmd *c = cmd_lookup(t);

	s->active_ns = now_ns();
	if (!c) {
		session_reply_err(s, PROTO_ERROR, m->hdr.req_id, -EBADMSG,
				  "%s is not a request", proto_type_name(t));
		return;
	}
	q.c = c;
	if (c->needs_hello && s->role == ROLE_NONE) {
		session_reply_err(s, q.rtype, m->hdr.req_id, -EPROTO, "send HELLO first");
		return;
	}
	if (m->nfds && !c->fds_ok) {
		session_reply_err(s, q.rtype, m->hdr.req_id, -EINVAL,
				  "unexpected file descriptors with %s", proto_type_name(t));
		return;
	}
	q.j = json_loadb(m->json, m->hdr.jlen, JSON_REJECT_DUPLICATES, &jerr);
	if (!q.j && json_error_code(&jerr) == json_error_out_of_memory) {
		session_reply_err(s, PROTO_ERROR, m->hdr.req_id, -ENOMEM,
				  "out of memory reading %s", proto_type_name(t));
		return;
	}
	if (!json_is_object(q.j)) {
		session_reply_err(s, PROTO_ERROR, m->hdr.req_id, -EINVAL,
				  "malformed JSON in %s: %s", proto_type_name(t),
				  q.j ? "not an object" : jerr.text);
		json_decref(q.j);
		return;
	}
	if ((c->role == CMD_TRAINER && s->role != ROLE_TRAINER) ||
	    (c->role == CMD_CTL && s->role != ROLE_CTL)) {
		session_reply_err(s, q.rtype, m->hdr.req_id, -EPERM, "%s",
				  c->role_why ? c->role_why : "not allowed in this role");
		json_decref(q.j);
		return;
	}
	if (c->runs_on == CMD_POOL) {
		dispatch_pool(&q);
		return;
	}
	q.r = c->fn(&q);
	if (q.r < 0)
		req_reply(&q);
	json_decref(q.j);
}

/* Handle every complete message buffered, unless a restore or a pool
 * request is in flight or the client has too many replies to read. */
static void session_process(struct session *s)
{
	while (!s->closed && !s->busy && !outq_paused(s)) {
		struct proto_msg m;
		struct proto_hdr bad;
		char why[64] = "";
		int r = proto_next(&s->rd, &m, &bad, why, sizeof(why));

		if (r == 0)
			break;
		if (r < 0) {
			/* the stream cannot be re-synchronised: say why, then close */
			char msg[160];
			snprintf(msg, sizeof(msg), "{\"error\":\"bad message: %s\"}", why);
			session_reply(s, PROTO_ERROR, r == -EPROTO ? 0 : bad.req_id, r, msg, NULL, 0);
			outq_flush(s);
			session_close(s, why);
			return;
		}
		dispatch(s, &m);
		for (unsigned i = 0; i < m.nfds; i++)
			if (m.fds[i] >= 0)
				close(m.fds[i]);
		if (s->busy)
			session_update_poll(s);
	}
	/* a message started and not finished is timed, unless we stopped
	 * reading it ourselves */
	s->rd_since_ns = s->rd.used && !outq_paused(s) ?
			 (s->rd_since_ns ? s->rd_since_ns : now_ns()) : 0;
}

static void on_session_io(uv_poll_t *h, int status, int events)
{
	struct session *s = h->data;

	if (status < 0) {
		session_close(s, uv_strerror(status));
		return;
	}
	if ((events & UV_DISCONNECT) && s->busy) {
		session_close(s, "hung up during a request");
		return;
	}
	if (events & UV_WRITABLE) {
		int r = outq_flush(s);
		if (r < 0) {
			session_close(s, strerror(-r));
			return;
		}
		if (s->task.more)
			s->task.more(s, s->task.arg, 0);
		if (s->closed)
			return;
		session_update_poll(s);
		if (!s->busy)
			session_process(s);     /* requests that waited for it */
	}
	if ((events & UV_READABLE) && !s->busy && !s->closed) {
		/* the reader holds at most one complete message: drain between reads */
		for (int i = 0; i < 16 && !s->closed && !s->busy && !outq_paused(s); i++) {
			int r = proto_read(&s->rd, s->fd);
			if (r == -ENOBUFS) {
				session_process(s);
				continue;
			}
			if (r == -EAGAIN)
				break;
			if (r == 0) {
				session_close(s, "end of file");
				return;
			}
			if (r < 0) {
				/* A bad header makes proto_read() refuse to read on:
				 * session_process() sends the ERROR reply saying why
				 * and closes; any other error just closes. */
				session_process(s);
				if (!s->closed)
					session_close(s, strerror(-r));
				return;
			}
		}
		if (!s->closed)
			session_process(s);
	}
}

int session_new(struct srv *S, int fd, const struct ucred *cred)
{
	struct session *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->srv = S;
	s->id = ++S->next_session_id;
	s->fd = fd;
	s->refs = 1;
	s->uid = cred->uid;
	s->gid = cred->gid;
	s->pid = cred->pid;
	s->rank = -1;
	s->rd_since_ns = now_ns();     /* HELLO must come in time too */
	s->hello_ns = s->rd_since_ns;
	s->active_ns = s->rd_since_ns;
	proto_reader_init(&s->rd, S->cfg.max_message_bytes);
	uv_poll_init(S->loop, &s->poll, fd);
	s->poll.data = s;
	s->next = S->sessions;
	if (S->sessions)
		S->sessions->prev = s;
	S->sessions = s;
	S->nsessions++;
	session_update_poll(s);
	return 0;
}
