/* coord_repl.c - partner nodes' memory over MPI, on the MPI thread: a
 * rank's capture sent to this node's memory_replicas partners and their
 * acknowledgements (phase REPLICATED), partners' copies received into the
 * memory tier, and files fetched from a peer's memory for a restore
 * (CKPT_FROM_PEER).  See coord.h; the memory tier's side is memt_peer.c.
 *
 * Wire (tags in coord_int.h):
 *   T_REPL       a capture's description (memt_cap_describe), then its
 *   T_REPL_DATA  bytes in pieces of XFER_PIECE, in order
 *   T_REPL_ACK   {"job","step","rank","ok","msg"} back to the sender
 *   T_FETCH      {"id","job","step","txid","path"}: a restore wants a file
 *   T_FETCH_REPLY {"id","ok","msg","desc"}, then when ok its
 *   T_FETCH_DATA bytes, in order
 * MPI keeps one sender's messages in order, so a receiver needs no
 * offsets: one transfer of each kind at a time per pair of nodes (a
 * sender queues the others), its pieces counted as they come.  A
 * capture's bytes are those of its files that are not shared, run by run
 * (memt_cap_next_run; no piece spans two runs): both sides know the runs
 * from the description. */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "coord_int.h"
#include "fail.h"
#include "layout.h"
#include "log.h"
#include "memt.h"
#include "srv.h"

#ifdef CKPT_HAVE_MPI
#include <mpi.h>

#define XFER_PIECE    (8u << 20)    /* bytes per MPI message */
#define XFER_INFLIGHT 4             /* pieces posted at once per transfer */

struct repl;

struct xfer {                     /* bytes going to one node */
	struct xfer   *next;
	int            dst, tag;      /* T_REPL_DATA or T_FETCH_DATA */
	char          *head;          /* sent first, with head_tag */
	int            head_tag;
	const uint8_t *data;
	uint64_t       len, posted;   /* bytes to send, and sent */
	const struct memt_cap *runs;  /* a replica: sent run by run (NULL:
				       * data, len bytes in one run) */
	uint64_t       at;            /* in data: where the next run goes on */
	MPI_Request    req[XFER_INFLIGHT];
	int            nreq;
	struct repl   *repl;          /* a replica: its replication */
	struct memt_step *held;       /* a fetched file: its step, put at the end */
};

struct repl {                     /* one rank's capture, to every partner */
	struct repl     *next;
	char             job[NAME_MAX_JOB + 1];
	uint64_t         step;
	int              rank;
	struct memt_cap *cap;         /* held until every transfer is done */
	int              want, acks, sending, told;
	uint64_t         t_start;
	char             msg[300];
};

struct fetch {                    /* a restore thread waiting for a file */
	struct fetch    *next;
	uint64_t         id;
	int              node;
	char             job[NAME_MAX_JOB + 1], txid[33], path[LAYOUT_PATH_MAX];
	uint64_t         step, deadline;
	int              sent, done, r;
	char             msg[300];
};

#define RX_PENDING 8               /* pieces being received at once */
#define RX_SPIN_NS (100ull * 1000000ull)   /* a live sender's piece: at once */
#define RX_ALL     UINT64_MAX

/* Bytes coming from one node, received without blocking (MPI_Irecv): a
 * sender that dies mid-copy must not stop this node's MPI thread, which
 * notices the silence and leaves the world (coord__repl_poll). */
struct rx {
	int              tag;         /* T_REPL_DATA or T_FETCH_DATA */
	struct memt_cap *cap;         /* NULL: received and dropped */
	uint8_t         *base;
	uint64_t         len, posted; /* bytes to come, and whose receive is
				       * posted */
	uint64_t         at;          /* in base: where the next run goes on */
	const char      *bad;         /* given up (why): received, dropped */
	MPI_Request      req[RX_PENDING];
	uint8_t         *drop[RX_PENDING];   /* a dropped piece's buffer */
	int              npend;
	uint64_t         since;       /* last progress, ns */
	struct fetch    *fetch;       /* T_FETCH_DATA: whose */
	char             job[NAME_MAX_JOB + 1];
	uint64_t         step;
	int              rank;
};

static struct {
	struct xfer   *xfers;
	struct repl   *repl_new;      /* under C.lock: queued by the loop */
	struct repl   *repls;         /* the MPI thread's */
	struct fetch  *fetches;       /* under C.lock: queued and in flight */
	uint64_t       next_id;
	pthread_cond_t fetch_cond;
	struct rx     *repl_rx, *fetch_rx;   /* [C.size] */
} R;

int coord_replicas(void)
{
	uint32_t k;

	if (!C.active)
		return 0;
	k = C.S->cfg.memory_replicas;
	return (int)(k < (uint32_t)C.size ? k : (uint32_t)C.size - 1);
}

int coord_rank(void) { return C.active ? C.rank : 0; }
int coord_size(void) { return C.active ? C.size : 1; }

/* --- loop thread: a capture to the partners ----------------------------- */

static void post_replicated(const char *job, uint64_t step, int rank, int ok,
			    const char *msg)
{
	struct cev *e = coord__cev(EV_REPLICATED, job, step, ok, 0, msg);

	e->rank = rank;
	coord__post_ev(e);
}

void coord_replicate(const char *job, uint64_t step, int rank, struct memt_cap *c)
{
	struct repl *rp;

	if (coord_replicas() == 0) {
		post_replicated(job, step, rank, 1, "");
		return;
	}
	if (!(rp = calloc(1, sizeof(*rp)))) {
		post_replicated(job, step, rank, 0, "out of memory");
		return;
	}
	snprintf(rp->job, sizeof(rp->job), "%s", job);
	rp->step = step;
	rp->rank = rank;
	rp->cap = c;
	rp->want = coord_replicas();
	memt_cap_hold(c);
	pthread_mutex_lock(&C.lock);
	rp->next = R.repl_new;         /* picked up by the MPI thread */
	R.repl_new = rp;
	pthread_cond_signal(&C.cond);
	pthread_mutex_unlock(&C.lock);
}

/* --- MPI thread: sending ------------------------------------------------ */

static void xfer_queue(struct xfer *x)
{
	struct xfer **pp = &R.xfers;

	while (*pp)
		pp = &(*pp)->next;
	*pp = x;
}

/* The first queued transfer of its kind to its node is the one sending. */
static int xfer_active(const struct xfer *x)
{
	for (const struct xfer *o = R.xfers; o != x; o = o->next)
		if (o->dst == x->dst && o->tag == x->tag)
			return 0;
	return 1;
}

static void repl_finish(struct repl *rp, int ok, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void repl_finish(struct repl *rp, int ok, const char *fmt, ...)
{
	va_list ap;

	if (rp->told)
		return;
	rp->told = 1;
	va_start(ap, fmt);
	vsnprintf(rp->msg, sizeof(rp->msg), fmt, ap);
	va_end(ap);
	post_replicated(rp->job, rp->step, rp->rank, ok, rp->msg);
}

/* Post the next pieces; 1 when every byte is sent and acknowledged by MPI. */
static int xfer_progress(struct xfer *x)
{
	for (int i = 0; i < x->nreq;) {
		int done = 0;
		if (MPI_Test(&x->req[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
			done = 1;          /* the peer is gone: loss is seen by silence */
		if (done)
			x->req[i] = x->req[--x->nreq];
		else
			i++;
	}
	if (!xfer_active(x))
		return 0;
	if (x->head) {
		coord__send(x->dst, x->head_tag, x->head);
		free(x->head);
		x->head = NULL;
	}
	while (x->nreq < XFER_INFLIGHT && x->posted < x->len) {
		uint64_t run = x->len - x->posted;
		uint64_t at = x->runs ? memt_cap_next_run(x->runs, x->at, &run) : x->posted;
		uint64_t n = run < XFER_PIECE ? run : XFER_PIECE;
		if (n == 0 || MPI_Isend(x->data + at, (int)n, MPI_BYTE, x->dst, x->tag,
					MPI_COMM_WORLD, &x->req[x->nreq]) != MPI_SUCCESS) {
			x->posted = x->len;      /* the peer is gone */
			break;
		}
		x->nreq++;
		x->posted += n;
		x->at = at + n;
		if (x->tag == T_REPL_DATA)
			FAILPOINT("repl.piece");     /* a node dies mid-copy (tests) */
	}
	return x->posted == x->len && x->nreq == 0;
}

static void xfer_free(struct xfer *x)
{
	free(x->head);
	memt_put(x->held);
	free(x);
}

static struct xfer *xfer_new(int dst, int tag, int head_tag, json_t *head,
			     const uint8_t *data, uint64_t len)
{
	struct xfer *x = calloc(1, sizeof(*x));

	if (x && !(x->head = json_dumps(head, JSON_COMPACT))) {
		free(x);
		x = NULL;
	}
	json_decref(head);
	if (!x)
		return NULL;
	x->dst = dst;
	x->tag = tag;
	x->head_tag = head_tag;
	x->data = data;
	x->len = len;
	return x;
}

/* A new replication: one transfer to each partner. */
static void repl_start(struct repl *rp)
{
	const uint8_t *data = memt_cap_bytes(rp->cap);

	rp->t_start = now_ns();
	for (int i = 1; i <= rp->want; i++) {
		struct xfer *x = xfer_new((C.rank + i) % C.size, T_REPL_DATA, T_REPL,
					  memt_cap_describe(rp->cap), data,
					  memt_cap_sent(rp->cap));
		if (!x) {
			repl_finish(rp, 0, "out of memory sending rank %d's copy", rp->rank);
			break;
		}
		x->runs = rp->cap;
		x->repl = rp;
		rp->sending++;
		xfer_queue(x);
	}
}

/* --- MPI thread: receiving ---------------------------------------------- */

static int rx_settle(struct rx *x, int src, uint64_t spin);

static void send_json(int dst, int tag, json_t *o)
{
	char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;

	if (txt)
		coord__send(dst, tag, txt);
	else
		log_warnx("cluster: out of memory answering node %d", dst);
	free(txt);
	json_decref(o);
}

static void repl_ack(int dst, const struct rx *x, int ok, const char *msg)
{
	send_json(dst, T_REPL_ACK, json_pack("{sssIsisbss}", "job", x->job, "step",
		  (json_int_t)x->step, "rank", x->rank, "ok", ok, "msg", msg));
}

/* x's bytes go into its copy (x->cap), run by run. */
static void rx_hold(struct rx *x)
{
	x->base = memt_cap_bytes(x->cap);
	x->len = memt_cap_sent(x->cap);
}

/* T_REPL: a partner's capture is coming; make room for it. */
static void on_repl(int src, const char *txt)
{
	json_t *desc = json_loads(txt, 0, NULL);
	struct rx *x = &R.repl_rx[src];
	char why[300] = "";

	rx_settle(x, src, RX_ALL);         /* the copy before it, first */
	memset(x, 0, sizeof(*x));
	x->tag = T_REPL_DATA;
	snprintf(x->job, sizeof(x->job), "%s",
		 json_string_value(json_object_get(desc, "job")) ?: "?");
	x->step = (uint64_t)json_integer_value(json_object_get(desc, "step"));
	x->rank = (int)json_integer_value(json_object_get(desc, "rank"));
	x->cap = memt_copy_start(C.S->memt, desc, 0, why, sizeof(why));
	json_decref(desc);
	if (!x->cap) {
		log_warnx("cluster: job %s: cannot hold node %d's copy of rank %d, step %llu: %s",
			  x->job, src, x->rank, (unsigned long long)x->step, why);
		repl_ack(src, x, 0, why);    /* its bytes are received and dropped */
	} else {
		rx_hold(x);
	}
	if (x->len == 0 && x->cap) {
		memt_copy_end(x->cap, 1);
		x->cap = NULL;
		repl_ack(src, x, 1, "");
	}
}

static void on_repl_ack(int src, const char *txt)
{
	json_t *o = json_loads(txt, 0, NULL);
	const char *job = json_string_value(json_object_get(o, "job"));
	const char *msg = json_string_value(json_object_get(o, "msg"));
	uint64_t step = (uint64_t)json_integer_value(json_object_get(o, "step"));
	int rank = (int)json_integer_value(json_object_get(o, "rank"));

	for (struct repl *rp = R.repls; job && rp; rp = rp->next) {
		if (rp->told || rp->step != step || rp->rank != rank || strcmp(rp->job, job))
			continue;
		if (!json_is_true(json_object_get(o, "ok")))
			repl_finish(rp, 0, "node %d cannot hold rank %d's copy: %s", src, rank,
				    msg ? msg : "?");
		else if (++rp->acks == rp->want)
			repl_finish(rp, 1, "%s", "");
		break;
	}
	json_decref(o);
}

/* A fetch is over: wake its restore thread (which frees it). */
static void fetch_done(struct fetch *f, int r, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fetch_done(struct fetch *f, int r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	pthread_mutex_lock(&C.lock);
	if (!f->done) {
		vsnprintf(f->msg, sizeof(f->msg), fmt, ap);
		f->r = r;
		f->done = 1;
		for (struct fetch **pp = &R.fetches; *pp; pp = &(*pp)->next)
			if (*pp == f) {
				*pp = f->next;
				break;
			}
	}
	pthread_cond_broadcast(&R.fetch_cond);
	pthread_mutex_unlock(&C.lock);
	va_end(ap);
}

/* T_FETCH: a peer's restore wants a file this node holds in memory. */
static void on_fetch(int src, const char *txt)
{
	json_t *o = json_loads(txt, 0, NULL), *desc = NULL;
	const char *job = json_string_value(json_object_get(o, "job"));
	const char *txid = json_string_value(json_object_get(o, "txid"));
	const char *path = json_string_value(json_object_get(o, "path"));
	json_int_t id = json_integer_value(json_object_get(o, "id"));
	uint64_t step = (uint64_t)json_integer_value(json_object_get(o, "step"));
	struct memt_step *s = NULL;
	const uint8_t *data = NULL;
	uint64_t len = 0;
	struct xfer *x;
	char why[300] = "malformed request";
	int r = -EINVAL;

	if (job && txid && path) {
		s = memt_get(C.S->memt, job, step, txid, why, sizeof(why));
		r = s ? memt_file_describe(s, path, &desc, &data, &len) : -ENOENT;
		if (s && r < 0)
			snprintf(why, sizeof(why), "%s is not in its memory", path);
	}
	if (r < 0) {
		memt_put(s);
		send_json(src, T_FETCH_REPLY, json_pack("{sIsbss}", "id", id, "ok", 0, "msg",
							why));
	} else if (!(x = xfer_new(src, T_FETCH_DATA, T_FETCH_REPLY,
				  json_pack("{sIsbsssO}", "id", id, "ok", 1, "msg", "",
					    "desc", desc), data, len))) {
		memt_put(s);
		send_json(src, T_FETCH_REPLY, json_pack("{sIsbss}", "id", id, "ok", 0, "msg",
							"out of memory"));
	} else {
		x->held = s;
		xfer_queue(x);
	}
	json_decref(desc);
	json_decref(o);
}

static void on_fetch_reply(int src, const char *txt)
{
	json_t *o = json_loads(txt, 0, NULL);
	uint64_t id = (uint64_t)json_integer_value(json_object_get(o, "id"));
	const char *msg = json_string_value(json_object_get(o, "msg"));
	struct rx *x = &R.fetch_rx[src];
	struct fetch *f;
	char why[300] = "";

	pthread_mutex_lock(&C.lock);
	for (f = R.fetches; f && f->id != id; f = f->next)
		;
	pthread_mutex_unlock(&C.lock);
	if (!json_is_true(json_object_get(o, "ok"))) {
		if (f)
			fetch_done(f, -ENOENT, "node %d: %s", src, msg ? msg : "?");
		json_decref(o);
		return;
	}
	/* its bytes follow: kept when the restore still waits for them */
	rx_settle(x, src, RX_ALL);
	memset(x, 0, sizeof(*x));
	x->tag = T_FETCH_DATA;
	x->fetch = f;
	if (f && !(x->cap = memt_copy_start(C.S->memt, json_object_get(o, "desc"), 1, why,
					    sizeof(why))))
		fetch_done(f, -ENOSPC, "cannot hold it here: %s", why);
	if (x->cap)
		rx_hold(x);
	json_decref(o);
	if (x->len == 0 && x->cap) {
		memt_copy_end(x->cap, 1);
		x->cap = NULL;
		fetch_done(f, 0, "%s", "");
	}
}

/* Collect finished receives of x (from src), driving MPI's progress for
 * up to spin ns (RX_ALL: until none is left, or the sender has been silent
 * for coord_peer_timeout_ms: it is lost).  When every byte is in (or the
 * copy was given up), finish it: keep or drop it, and answer.  Returns 1
 * when x is idle. */
static int rx_settle(struct rx *x, int src, uint64_t spin)
{
	uint64_t limit = (uint64_t)C.peer_ms * 1000000ull, t0 = now_ns();

	for (;;) {
		for (int i = 0; i < x->npend;) {
			int done = 0;
			if (MPI_Test(&x->req[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
				done = 1;
			if (!done) {
				i++;
				continue;
			}
			free(x->drop[i]);
			x->npend--;
			x->req[i] = x->req[x->npend];
			x->drop[i] = x->drop[x->npend];
			x->since = now_ns();
		}
		if (x->npend == 0 || atomic_load(&C.lost) ||
		    (spin != RX_ALL && now_ns() - t0 >= spin))
			break;
		if (now_ns() - x->since > limit) {
			coord__lost("node %d stopped sending its copy of job %s step %llu for "
				    "%u ms (coord_peer_timeout_ms)", src, x->job,
				    (unsigned long long)x->step, C.peer_ms);
			break;
		}
	}
	if (x->npend || !x->cap || (!x->bad && x->posted < x->len))
		return x->npend == 0;
	memt_copy_end(x->cap, !x->bad);
	x->cap = NULL;
	if (x->tag == T_REPL_DATA)
		repl_ack(src, x, !x->bad, x->bad ? x->bad : "");
	else if (x->fetch && x->bad)
		fetch_done(x->fetch, -EPROTO, "node %d's copy: %s", src, x->bad);
	else if (x->fetch)
		fetch_done(x->fetch, 0, "%s", "");
	x->fetch = NULL;
	return 1;
}

int coord__repl_recv(int src, int tag, int count)
{
	struct rx *x;
	uint8_t *buf = NULL, *drop = NULL;
	uint64_t at = 0, run = 0;

	if (tag != T_REPL_DATA && tag != T_FETCH_DATA)
		return 0;
	x = tag == T_REPL_DATA ? &R.repl_rx[src] : &R.fetch_rx[src];
	if (x->npend == RX_PENDING)
		rx_settle(x, src, RX_ALL);
	if (x->npend == RX_PENDING)        /* the sender is lost: stop */
		return 1;
	if (x->cap && !x->bad)
		at = memt_cap_next_run(x->cap, x->at, &run);
	if (x->cap && !x->bad && ((uint64_t)count > x->len - x->posted || (uint64_t)count > run))
		x->bad = "more bytes than described";
	else if (x->cap && !x->bad && memt_copy_prepare(x->cap, at, (uint64_t)count) < 0)
		x->bad = "out of memory holding it";
	if (x->cap && !x->bad) {
		buf = x->base + at;
		x->at = at + (uint64_t)count;
		x->posted += (uint64_t)count;
	} else if (!(buf = drop = malloc(count > 0 ? (size_t)count : 1))) {
		fatalx("cluster: out of memory receiving %d bytes", count);
	}
	if (x->npend == 0)
		x->since = now_ns();
	if (MPI_Irecv(buf, count, MPI_BYTE, src, tag, MPI_COMM_WORLD, &x->req[x->npend]) !=
	    MPI_SUCCESS) {
		free(drop);
		if (x->cap && !x->bad)
			x->bad = "the receive failed";
		return 1;
	}
	x->drop[x->npend++] = drop;
	rx_settle(x, src, RX_SPIN_NS);
	return 1;
}

void coord__repl_msg(int src, int tag, const char *txt)
{
	switch (tag) {
	case T_REPL:        on_repl(src, txt); break;
	case T_REPL_ACK:    on_repl_ack(src, txt); break;
	case T_FETCH:       on_fetch(src, txt); break;
	case T_FETCH_REPLY: on_fetch_reply(src, txt); break;
	}
}

/* --- MPI thread: every round -------------------------------------------- */

int coord__repl_poll(void)
{
	uint64_t now = now_ns(), limit = (uint64_t)C.deadline_ms * 1000000ull;
	struct repl *rp, **pp;
	int receiving = 0;

	/* new replications, and fetches not yet asked */
	pthread_mutex_lock(&C.lock);
	while ((rp = R.repl_new)) {
		R.repl_new = rp->next;
		rp->next = R.repls;
		R.repls = rp;
		pthread_mutex_unlock(&C.lock);
		repl_start(rp);
		pthread_mutex_lock(&C.lock);
	}
	for (struct fetch *f = R.fetches; f; f = f->next)
		if (!f->sent) {
			json_t *o = json_pack("{sIsssIssss}", "id", (json_int_t)f->id, "job",
					      f->job, "step", (json_int_t)f->step, "txid",
					      f->txid, "path", f->path);
			f->sent = 1;
			pthread_mutex_unlock(&C.lock);
			send_json(f->node, T_FETCH, o);
			pthread_mutex_lock(&C.lock);
		}
	pthread_mutex_unlock(&C.lock);

	for (struct xfer **xp = &R.xfers, *x; (x = *xp);) {
		if (!xfer_progress(x)) {
			xp = &x->next;
			continue;
		}
		*xp = x->next;
		if (x->repl)
			x->repl->sending--;
		xfer_free(x);
	}

	/* replications acknowledged (or not) and sent: let go of the capture */
	for (pp = &R.repls; (rp = *pp);) {
		if (rp->t_start && !rp->told && now > rp->t_start + limit)
			repl_finish(rp, 0, "%d of %d partner nodes acknowledged rank %d's copy "
				    "within %u ms (coord_deadline_ms)", rp->acks, rp->want,
				    rp->rank, C.deadline_ms);
		if (rp->t_start && rp->told && rp->sending == 0) {
			*pp = rp->next;
			memt_cap_release(rp->cap);
			free(rp);
		} else {
			pp = &rp->next;
		}
	}

	/* copies coming in: done, or their sender silent (lost) */
	for (int n = 0; n < C.size && !atomic_load(&C.lost); n++)
		for (int k = 0; k < 2; k++) {
			struct rx *x = k ? &R.fetch_rx[n] : &R.repl_rx[n];
			receiving |= x->npend > 0;
			if (!x->npend) {
				rx_settle(x, n, 0);
			} else if (rx_settle(x, n, 0) == 0 &&
				   now > x->since + (uint64_t)C.peer_ms * 1000000ull) {
				coord__lost("node %d stopped sending its copy of job %s step %llu "
					    "for %u ms (coord_peer_timeout_ms)", n, x->job,
					    (unsigned long long)x->step, C.peer_ms);
			}
		}

	/* fetches whose peer does not answer */
	for (;;) {
		struct fetch *late = NULL;
		pthread_mutex_lock(&C.lock);
		for (struct fetch *f = R.fetches; f && !late; f = f->next)
			if (now > f->deadline)
				late = f;
		pthread_mutex_unlock(&C.lock);
		if (!late)
			break;
		fetch_done(late, -ETIMEDOUT, "node %d did not answer within %u ms "
			   "(coord_peer_timeout_ms)", late->node, C.peer_ms);
		for (int n = 0; n < C.size; n++)
			if (R.fetch_rx[n].fetch == late)
				R.fetch_rx[n].fetch = NULL;
	}
	return R.xfers || R.repls || receiving;
}

/* --- restore threads ---------------------------------------------------- */

int coord_fetch(int node, const char *job, uint64_t step, const char *txid,
		const char *path, char *msg, size_t msglen)
{
	struct fetch *f;
	int r;

	if (!C.active || node < 0 || node >= C.size || node == C.rank) {
		snprintf(msg, msglen, "node %d is not a peer", node);
		return -EINVAL;
	}
	if (!(f = calloc(1, sizeof(*f)))) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	f->node = node;
	snprintf(f->job, sizeof(f->job), "%s", job);
	snprintf(f->txid, sizeof(f->txid), "%s", txid);
	snprintf(f->path, sizeof(f->path), "%s", path);
	f->step = step;
	f->deadline = now_ns() + (uint64_t)C.peer_ms * 1000000ull;
	pthread_mutex_lock(&C.lock);
	f->id = ++R.next_id;
	f->next = R.fetches;
	R.fetches = f;
	pthread_cond_signal(&C.cond);
	while (!f->done && !C.stop)
		pthread_cond_wait(&R.fetch_cond, &C.lock);
	if (!f->done) {           /* the MPI thread stopped: it is no longer read */
		for (struct fetch **pp = &R.fetches; *pp; pp = &(*pp)->next)
			if (*pp == f) {
				*pp = f->next;
				break;
			}
		f->r = -ESHUTDOWN;
		snprintf(f->msg, sizeof(f->msg), "ckptd is leaving the cluster");
	}
	pthread_mutex_unlock(&C.lock);
	r = f->r;
	snprintf(msg, msglen, "%s", f->msg);
	free(f);
	return r;
}

void coord__repl_init(void)
{
	pthread_cond_init(&R.fetch_cond, NULL);
	R.repl_rx = calloc((size_t)C.size, sizeof(*R.repl_rx));
	R.fetch_rx = calloc((size_t)C.size, sizeof(*R.fetch_rx));
	if (!R.repl_rx || !R.fetch_rx)
		fatalx("cluster: out of memory");
}

/* The MPI thread ends: what is in flight is dropped (its peers are gone
 * or leaving too). */
void coord__repl_fini(void)
{
	for (int n = 0; R.repl_rx && n < C.size; n++)
		for (int k = 0; k < 2; k++) {
			struct rx *x = k ? &R.fetch_rx[n] : &R.repl_rx[n];
			for (int i = 0; i < x->npend; i++) {   /* their senders are gone */
				MPI_Cancel(&x->req[i]);
				MPI_Request_free(&x->req[i]);
				/* a cancelled receive may still write: leak, not free */
			}
			if (x->cap && !x->npend)
				memt_copy_end(x->cap, 0);
		}
	while (R.xfers) {
		struct xfer *x = R.xfers;
		R.xfers = x->next;
		for (int i = 0; i < x->nreq; i++)
			MPI_Request_free(&x->req[i]);
		if (x->repl)
			x->repl->sending--;
		xfer_free(x);
	}
	pthread_mutex_lock(&C.lock);
	for (int list = 0; list < 2; list++)
		while (list ? R.repls : R.repl_new) {
			struct repl **pp = list ? &R.repls : &R.repl_new, *rp = *pp;
			*pp = rp->next;
			memt_cap_release(rp->cap);
			free(rp);
		}
	while (R.fetches) {
		struct fetch *f = R.fetches;
		R.fetches = f->next;
		f->r = -ESHUTDOWN;
		snprintf(f->msg, sizeof(f->msg), "ckptd is leaving the cluster");
		f->done = 1;
	}
	pthread_cond_broadcast(&R.fetch_cond);
	pthread_mutex_unlock(&C.lock);
	free(R.repl_rx);
	free(R.fetch_rx);
	R.repl_rx = R.fetch_rx = NULL;
}

#endif
