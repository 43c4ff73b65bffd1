/* coord.c - multi-node two-phase commit over MPI: the MPI thread (every
 * MPI call, FUNNELED), the transport (reports queued by the loop thread,
 * Isend/Iprobe, heartbeats, outcomes posted back to the loop), start-up
 * (recovery, the shared-root marker, GO), status.  The coordinator's
 * decisions are in coord_step.c, the wire form in coord_wire.c; what they
 * share, with its locking, in coord_int.h.  See coord.h.
 *
 * Threads: coord__main runs every MPI call.  The loop thread only queues
 * reports (C.outq) and drains outcomes (C.inq) in coord__wake. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "clock.h"
#include "commit.h"
#include "coord_int.h"
#include "fail.h"
#include "io.h"
#include "log.h"
#include "mcat.h"
#include "root.h"
#include "srv.h"
#include "store.h"

#ifdef CKPT_HAVE_MPI
#include <mpi.h>

struct psend {                    /* an Isend in flight */
	struct psend *next;
	MPI_Request   req;
	char         *buf;
};

struct coord_state C;

static void substitute_rank(char *s, size_t cap, int rank);

int coord_active(void) { return C.active; }
int coord_is_coordinator(void) { return C.active && C.rank == 0; }

/* --- loop thread -> MPI thread ------------------------------------------ */

static void coord__queue(struct qmsg *q)
{
	pthread_mutex_lock(&C.lock);
	*C.outq_tail = q;
	C.outq_tail = &q->next;
	pthread_cond_signal(&C.cond);       /* wake the MPI thread at once */
	pthread_mutex_unlock(&C.lock);
}

static struct qmsg *qmsg_new(int tag, const char *job, uint64_t step, const char *txid)
{
	struct qmsg *q = calloc(1, sizeof(*q));

	if (!q) {
		log_warnx("cluster: out of memory queueing a report");
		return NULL;
	}
	q->rep.tag = tag;
	snprintf(q->rep.job, sizeof(q->rep.job), "%s", job);
	q->rep.step = step;
	snprintf(q->rep.txid, sizeof(q->rep.txid), "%s", txid);
	return q;
}

void coord_report_seen(const char *job, uint64_t step, const char *txid, int world_size)
{
	struct qmsg *q;

	if (!C.active || !(q = qmsg_new(T_SEEN, job, step, txid)))
		return;
	q->rep.world_size = world_size;
	coord__queue(q);
}

void coord_report_durable(const char *job, const char *run_id, uint64_t step,
			  const char *txid, int world_size, int memory,
			  struct commit_part *part)
{
	struct qmsg *q;

	if (!C.active || !(q = qmsg_new(T_DURABLE, job, step, txid))) {
		commit_part_free(part);
		return;
	}
	snprintf(q->rep.run_id, sizeof(q->rep.run_id), "%s", run_id);
	q->rep.world_size = world_size;
	q->rep.memory = memory;
	q->rep.replicas = coord_replicas();
	q->rep.part = part;
	coord__queue(q);
}

void coord_report_failed(const char *job, uint64_t step, const char *txid, int err,
			 const char *msg)
{
	struct qmsg *q;

	if (!C.active || !(q = qmsg_new(T_FAILED, job, step, txid)))
		return;
	q->rep.err = err;
	snprintf(q->rep.msg, sizeof(q->rep.msg), "%s", msg);
	coord__queue(q);
}

void coord_report_clean(const char *job, uint64_t step, const char *txid)
{
	struct qmsg *q;

	if (C.active && (q = qmsg_new(T_CLEAN, job, step, txid)))
		coord__queue(q);
}

static void qmsg_free(struct qmsg *q)
{
	commit_part_free(q->rep.part);
	free(q);
}

/* --- MPI thread -> loop thread ------------------------------------------ */

struct cev *coord__cev(int kind, const char *job, uint64_t step, int ok, int err,
		       const char *msg)
{
	struct cev *e = calloc(1, sizeof(*e));
	if (!e)
		fatalx("cluster: out of memory posting an outcome");
	e->kind = kind;
	e->ok = ok;
	e->err = err;
	e->step = step;
	snprintf(e->job, sizeof(e->job), "%s", job ? job : "");
	snprintf(e->msg, sizeof(e->msg), "%s", msg ? msg : "");
	return e;
}

void coord__post(int kind, const char *job, uint64_t step, int ok, int err,
			const char *msg)
{
	coord__post_ev(coord__cev(kind, job, step, ok, err, msg));
}

void coord__post_ev(struct cev *e)
{
	pthread_mutex_lock(&C.lock);
	*C.inq_tail = e;
	C.inq_tail = &e->next;
	pthread_mutex_unlock(&C.lock);
	uv_async_send(&C.async);
}

void coord__post_outcome(json_t *o)
{
	const char *job = json_string_value(json_object_get(o, "job"));
	const char *msg = json_string_value(json_object_get(o, "msg"));
	const char *txid = json_string_value(json_object_get(o, "txid"));
	const char *mf = json_string_value(json_object_get(o, "manifest"));
	json_t *owners = json_object_get(o, "owners");
	struct cev *e = calloc(1, sizeof(*e));

	if (!e || !job || name_check(job, NAME_MAX_JOB, NULL, 0) < 0) {
		if (job)
			log_warnx("cluster: %s outcome dropped", e ? "a malformed" : "out of memory: an");
		free(e);
		json_decref(o);
		return;
	}
	e->kind = EV_OUTCOME;
	e->ok = json_is_true(json_object_get(o, "ok"));
	e->err = (int)json_integer_value(json_object_get(o, "err"));
	e->step = (uint64_t)json_integer_value(json_object_get(o, "step"));
	snprintf(e->job, sizeof(e->job), "%s", job);
	snprintf(e->msg, sizeof(e->msg), "%s", msg ? msg : "");
	snprintf(e->txid, sizeof(e->txid), "%s", txid && strlen(txid) == 32 ? txid : "");
	if (e->ok && mf)
		e->manifest = strdup(mf);
	if (e->ok && json_is_array(owners) && json_array_size(owners) > 0 &&
	    (e->owners = calloc(json_array_size(owners), sizeof(int)))) {
		e->nowners = (int)json_array_size(owners);
		for (int r = 0; r < e->nowners; r++) {
			json_int_t n = json_integer_value(json_array_get(owners, (size_t)r));
			e->owners[r] = n >= 0 && n < C.size ? (int)n : -1;
		}
	}
	json_decref(o);
	coord__post_ev(e);
}

static void coord__wake(uv_async_t *h)
{
	struct srv *S = C.S;
	struct cev *e, *list;

	pthread_mutex_lock(&C.lock);
	list = C.inq;
	C.inq = NULL;
	C.inq_tail = &C.inq;
	pthread_mutex_unlock(&C.lock);
	while ((e = list)) {
		list = e->next;
		if (e->kind == EV_OUTCOME) {
			struct coord_outcome o = { e->job, e->step, e->ok, e->err, e->msg,
						   e->txid, e->manifest, e->owners,
						   e->nowners };
			C.hooks->outcome(S, &o);
		} else if (e->kind == EV_REPLICATED) {
			C.hooks->replicated(S, e->job, e->step, e->rank, e->ok, e->msg);
		} else if (e->kind == EV_LOST) {
			log_warnx("cluster: %s; failing in-flight saves and exiting", e->msg);
			C.hooks->lost(S, e->msg);
		}
		free(e->manifest);
		free(e->owners);
		free(e);
	}
}

/* --- MPI sends ---------------------------------------------------------- */

void coord__send(int dst, int tag, const char *txt)
{
	struct psend *p = calloc(1, sizeof(*p));
	size_t len = strlen(txt);

	if (!p || !(p->buf = malloc(len + 1))) {
		free(p);
		log_warnx("cluster: out of memory sending to node %d", dst);
		return;
	}
	memcpy(p->buf, txt, len + 1);
	if (MPI_Isend(p->buf, (int)len + 1, MPI_CHAR, dst, tag, MPI_COMM_WORLD,
		      &p->req) != MPI_SUCCESS) {
		free(p->buf);
		free(p);
		log_warnx("cluster: cannot send to node %d", dst);
		return;
	}
	p->next = C.sends;
	C.sends = p;
}

static void coord__test_sends(void)
{
	for (struct psend **pp = &C.sends, *p; (p = *pp);) {
		int done = 0;
		if (MPI_Test(&p->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
			done = 1;      /* the peer is gone: loss is detected by silence */
		if (done) {
			*pp = p->next;
			free(p->buf);
			free(p);
		} else {
			pp = &p->next;
		}
	}
}

/* Wait (bounded) until every send has left: before a failpoint and exit. */
static void coord__flush_sends(uint64_t limit_ns)
{
	uint64_t end = now_ns() + limit_ns;
	while (C.sends && now_ns() < end) {
		coord__test_sends();
		usleep(COORD_POLL_US);
	}
}

/* --- non-coordinator ---------------------------------------------------- */

/* --- the thread --------------------------------------------------------- */

void coord__lost(const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	atomic_store(&C.lost, 1);
	if (C.rank == 0)
		for (struct cstep *cs = C.steps; cs; cs = cs->next)
			if (!cs->publishing)     /* its outcome is on the way */
				coord__abort(cs, -EHOSTDOWN, "%s", msg);
	coord__flush_sends(500000000ull);
	coord__post(EV_LOST, NULL, 0, 0, -EHOSTDOWN, msg);
}

static void coord__handle(int src, int tag, char *buf)
{
	char msg[256];

	pthread_mutex_lock(&C.lock);
	C.last_heard[src] = now_ns();
	pthread_mutex_unlock(&C.lock);
	if (tag == T_OUTCOME && C.rank != 0) {
		json_t *o = json_loads(buf, 0, NULL);
		if (o)
			coord__post_outcome(o);
		else
			log_warnx("cluster: malformed outcome from node %d", src);
	} else if (tag >= T_REPL && tag <= T_FETCH_DATA) {
		coord__repl_msg(src, tag, buf);
	} else if (C.rank == 0 && tag >= T_SEEN && tag <= T_CLEAN) {
		struct report rp;
		if (coord__report_decode(tag, buf, &rp, msg, sizeof(msg)) < 0) {
			log_warnx("cluster: node %d: %s", src, msg);
			commit_part_free(rp.part);
			return;
		}
		coord__on_report(src, &rp);
		commit_part_free(rp.part);
	}
}

/* Receive whatever has arrived.  Returns how many messages (not PINGs). */
static int coord__poll_recv(void)
{
	int n = 0;

	for (;;) {
		MPI_Status stt;
		int flag = 0, count = 0;
		char *buf;
		if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &stt) !=
		    MPI_SUCCESS || !flag)
			return n;
		MPI_Get_count(&stt, MPI_CHAR, &count);
		if (coord__repl_recv(stt.MPI_SOURCE, stt.MPI_TAG, count)) {   /* raw bytes */
			pthread_mutex_lock(&C.lock);
			C.last_heard[stt.MPI_SOURCE] = now_ns();
			pthread_mutex_unlock(&C.lock);
			n++;
			continue;
		}
		buf = malloc((size_t)count + 1);
		if (!buf)
			fatalx("cluster: out of memory receiving %d bytes", count);
		if (MPI_Recv(buf, count, MPI_CHAR, stt.MPI_SOURCE, stt.MPI_TAG, MPI_COMM_WORLD,
			     MPI_STATUS_IGNORE) != MPI_SUCCESS) {
			free(buf);
			return n;
		}
		buf[count] = '\0';
		coord__handle(stt.MPI_SOURCE, stt.MPI_TAG, buf);
		free(buf);
		n += stt.MPI_TAG != T_PING;
	}
}

/* Send the reports the loop thread queued; returns how many there were. */
static int coord__drain_outq(void)
{
	struct qmsg *list, *q;
	int n = 0;

	pthread_mutex_lock(&C.lock);
	list = C.outq;
	C.outq = NULL;
	C.outq_tail = &C.outq;
	pthread_mutex_unlock(&C.lock);
	while ((q = list)) {
		list = q->next;
		n++;
		if (C.rank == 0) {
			coord__on_report(0, &q->rep);     /* no wire: typed */
		} else {
			char *txt = coord__report_encode(&q->rep);
			if (!txt) {
				log_warnx("cluster: out of memory sending a report of job %s "
					  "step %llu", q->rep.job, (unsigned long long)q->rep.step);
			} else {
				if (q->rep.tag == T_DURABLE)
					FAILPOINT("coord.before_report");
				coord__send(0, q->rep.tag, txt);
				if (q->rep.tag == T_DURABLE && fail_armed) {
					coord__flush_sends(1000000000ull);
					FAILPOINT("coord.after_report");
				}
				free(txt);
			}
		}
		qmsg_free(q);
	}
	return n;
}

/* The root must be one shared file system: the coordinator writes a fresh
 * world id into <root>/.ckpt-cluster and sends it with GO; every node reads
 * the file under its own root and must find that id. */
#define COORD_MARKER     ".ckpt-cluster"
#define COORD_MARKER_TMP ".ckpt-cluster.tmp"

static int coord__write_marker(char id[33], char *msg, size_t msglen)
{
	char text[40];
	int r;

	store_new_id(id);
	snprintf(text, sizeof(text), "%s\n", id);
	r = io_write_file(C.rootfd, COORD_MARKER, COORD_MARKER_TMP, text, strlen(text),
			  IO_FILE_REPLACE | IO_FILE_SYNC_DIR, 0644);
	if (r < 0)
		snprintf(msg, msglen, "cannot write '%s/%s': %s",
			 C.S->cfg.root, COORD_MARKER, strerror(-r));
	return r;
}

/* 0 when this node's root holds the coordinator's id; -EXDEV (with
 * msg) when not.  A network file system may show the new file a
 * moment late: look again for up to 2 s. */
static int coord__check_marker(const char *want, char *msg, size_t msglen)
{
	char got[40] = "";
	int tries = 20, fd = -1;
	ssize_t n = -1;

	while (tries-- > 0) {
		fd = openat(C.rootfd, COORD_MARKER, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		n = fd >= 0 ? read(fd, got, sizeof(got) - 1) : -1;
		if (fd >= 0)
			close(fd);
		got[n > 0 ? n : 0] = '\0';
		got[strcspn(got, "\n")] = '\0';
		if (!strcmp(got, want))
			return 0;
		usleep(100000);
	}
	snprintf(msg, msglen, "the root '%s' is not shared with the "
		 "coordinator (node 0): the marker %s it just wrote there is %s here. Cluster "
		 "mode needs one root on a shared file system, at the same path on every node",
		 C.S->cfg.root, COORD_MARKER, n < 0 ? "missing" : "another world's");
	return -EXDEV;
}

/* Start-up: MPI_Init, then the coordinator recovers the shared root while
 * the others wait for its GO (no node writes before recovery is done). */
/* 0, or -errno with msg. */
static int coord__start(char *msg, size_t msglen)
{
	char go[128], id[33];
	int prov = 0, r = 0;
	uint64_t end;

	if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &prov) != MPI_SUCCESS) {
		snprintf(msg, msglen, "MPI_Init_thread failed");
		return -EIO;
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &C.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &C.size);
	C.last_heard = calloc((size_t)C.size, sizeof(*C.last_heard));
	if (!C.last_heard)
		return -ENOMEM;
	if (C.rank == 0) {
		/* one world per root: another world's recovery would remove
		 * this one's staging (root.h) */
		if ((r = root_lock(C.rootfd, C.S->cfg.root, msg, msglen)) < 0)
			return r;
		store_recover(C.rootfd);
		if ((r = coord__write_marker(id, msg, msglen)) < 0)
			return r;
		snprintf(go, sizeof(go), "{\"root_id\":\"%s\"}", id);
		for (int n = 1; n < C.size; n++)
			coord__send(n, T_GO, go);
		return 0;
	}
	end = now_ns() + (uint64_t)C.deadline_ms * 1000000ull;
	while (now_ns() < end) {
		MPI_Status stt;
		int flag = 0;
		if (MPI_Iprobe(0, T_GO, MPI_COMM_WORLD, &flag, &stt) == MPI_SUCCESS && flag) {
			int count = 0;
			json_t *o;
			MPI_Get_count(&stt, MPI_CHAR, &count);
			if (count <= 0 || count >= (int)sizeof(go))
				count = sizeof(go) - 1;
			MPI_Recv(go, count, MPI_CHAR, 0, T_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			go[count] = '\0';
			o = json_loads(go, 0, NULL);
			snprintf(id, sizeof(id), "%s",
				 json_string_value(json_object_get(o, "root_id")) ?: "?");
			json_decref(o);
			return coord__check_marker(id, msg, msglen);
		}
		usleep(1000);
	}
	snprintf(msg, msglen, "no GO from the coordinator within %u ms "
		 "(coord_deadline_ms)", C.deadline_ms);
	r = -ETIMEDOUT;
	return r;
}

static void coord__files_stop(void)
{
	struct timespec ts;

	if (!C.fthread_up)
		return;
	pthread_mutex_lock(&C.lock);
	C.fstop = 1;
	pthread_cond_signal(&C.fcond);
	pthread_mutex_unlock(&C.lock);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 3;
	if (pthread_timedjoin_np(C.fthread, NULL, &ts) != 0)
		log_warnx("cluster: file work still running at exit; leaving it");
	C.fthread_up = 0;
}

static void *coord__main(void *arg)
{
	int r = coord__start(C.init_msg, sizeof(C.init_msg));
	uint64_t last_ping = 0, last_busy = 0, limit = (uint64_t)C.peer_ms * 1000000ull;

	if (r == 0 && C.rank == 0) {
		int e = pthread_create(&C.fthread, NULL, coord__files_main, NULL);
		if (e != 0) {
			snprintf(C.init_msg, sizeof(C.init_msg), "cannot start the file "
				 "thread: %s", strerror(e));
			r = -e;
		} else {
			C.fthread_up = 1;
		}
	}

	if (r == 0)
		coord__repl_init();     /* before any save can replicate */
	pthread_mutex_lock(&C.lock);
	C.init_err = r;
	C.init_done = 1;
	if (r == 0 && C.last_heard)
		for (int n = 0; n < C.size; n++)
			C.last_heard[n] = now_ns();   /* grace from now on */
	pthread_cond_signal(&C.cond);
	pthread_mutex_unlock(&C.lock);
	if (r < 0)
		return NULL;

	while (!C.stop) {
		uint64_t now, busy = 0;
		struct timespec ts;
		busy += (uint64_t)coord__drain_outq();
		busy += (uint64_t)coord__poll_recv();
		if (C.rank == 0)
			coord__files_done();
		busy += (uint64_t)coord__repl_poll();
		now = now_ns();
		if (busy)
			last_busy = now;
		if (now - last_ping >= (uint64_t)C.hb_ms * 1000000ull) {
			last_ping = now;
			for (int n = 0; n < C.size; n++)
				if (n != C.rank && (C.rank == 0 || n == 0))
					coord__send(n, T_PING, "{}");
		}
		if (!atomic_load(&C.lost))
			for (int n = 0; n < C.size; n++) {
				if (n == C.rank || (C.rank != 0 && n != 0))
					continue;
				if (now - C.last_heard[n] > limit) {
					coord__lost("node %d (of %d) not heard from for %u ms "
						    "(coord_peer_timeout_ms)", n, C.size, C.peer_ms);
					break;
				}
			}
		if (C.rank == 0)
			coord__check_deadlines(now);
		coord__test_sends();
		/* sleep until a report is queued, or the next MPI poll: short
		 * while busy, longer when idle */
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (now - last_busy < COORD_IDLE_AFTER ? COORD_POLL_US :
			       COORD_IDLE_US) * 1000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&C.lock);
		if (!C.outq && !C.fdone && !C.stop)
			pthread_cond_timedwait(&C.cond, &C.lock, &ts);
		pthread_mutex_unlock(&C.lock);
	}
	coord__files_stop();
	coord__repl_fini();
	if (C.finalize) {        /* FUNNELED: the thread that initialised */
		coord__flush_sends(1000000000ull);
		MPI_Finalize();
	}
	return NULL;
}

int coord_busy(void)
{
	int busy = 0;

	if (!C.active || C.rank != 0)
		return 0;
	pthread_mutex_lock(&C.lock);
	for (struct cstep *cs = C.steps; cs && !busy; cs = cs->next)
		busy = !cs->decided;
	pthread_mutex_unlock(&C.lock);
	return busy;
}

void coord_reload(const struct config *cfg)
{
	if (C.active)
		atomic_store(&C.keep_last, cfg->keep_last);
}

void coord_expand(char *s, size_t cap)
{
	if (C.active)
		substitute_rank(s, cap, C.rank);
}

static void substitute_rank(char *s, size_t cap, int rank)
{
	char *p = strstr(s, "{rank}"), out[512];

	if (!p)
		return;
	snprintf(out, sizeof(out), "%.*s%d%s", (int)(p - s), s, rank, p + 6);
	if (strlen(out) < cap)
		memcpy(s, out, strlen(out) + 1);
	else
		log_warnx("cluster: '%s' with rank %d is too long; kept as is", s, rank);
}

int coord_init(struct srv *S, const struct coord_hooks *hooks)
{
	struct timespec ts;
	int r;

	memset(&C, 0, sizeof(C));
	C.S = S;
	C.hooks = hooks;
	C.deadline_ms = S->cfg.coord_deadline_ms;
	C.peer_ms = S->cfg.coord_peer_timeout_ms;
	C.hb_ms = C.peer_ms / 5 < 500 ? C.peer_ms / 5 : 500;
	if (C.hb_ms < 10)
		C.hb_ms = 10;
	atomic_store(&C.keep_last, S->cfg.keep_last);
	C.rootfd = S->rootfd;
	C.outq_tail = &C.outq;
	C.inq_tail = &C.inq;
	C.fq_tail = &C.fq;
	C.fdone_tail = &C.fdone;
	pthread_mutex_init(&C.lock, NULL);
	pthread_cond_init(&C.cond, NULL);
	pthread_cond_init(&C.fcond, NULL);
	if ((r = pthread_create(&C.thread, NULL, coord__main, NULL)) != 0) {
		log_warnx("cluster: cannot start the MPI thread: %s", strerror(r));
		return -r;
	}
	/* bounded: a node that dies while the world starts can leave the
	 * others inside MPI_Init for ever (Open MPI with --enable-recovery) */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 2 * (time_t)(C.deadline_ms / 1000) + 1;
	pthread_mutex_lock(&C.lock);
	while (!C.init_done && r != ETIMEDOUT)
		r = pthread_cond_timedwait(&C.cond, &C.lock, &ts);
	pthread_mutex_unlock(&C.lock);
	if (!C.init_done) {
		log_warnx("cluster: cannot join the MPI world: not done within 2 x "
			  "coord_deadline_ms (%u ms; a node lost while the world starts?)",
			  C.deadline_ms);
		return -ETIMEDOUT;      /* the MPI thread is left behind: exiting */
	}
	if (C.init_err < 0) {
		log_warnx("cluster: cannot join the MPI world: %s", C.init_msg);
		C.stop = 1;
		pthread_join(C.thread, NULL);
		return C.init_err;
	}
	uv_async_init(S->loop, &C.async, coord__wake);
	uv_unref((uv_handle_t *)&C.async);   /* the loop may end without us */
	C.active = 1;
	substitute_rank(S->cfg.socket, sizeof(S->cfg.socket), C.rank);
	log_info("cluster: node %d of %d (coordinator: node 0), coord_deadline_ms %u, "
		 "coord_peer_timeout_ms %u", C.rank, C.size, C.deadline_ms, C.peer_ms);
	return 0;
}

void coord_finalize(struct srv *S)
{
	struct timespec ts;

	if (!C.active)
		return;
	/* MPI_Finalize may wait for the peers: only on a clean exit, bounded */
	C.finalize = !atomic_load(&C.lost) && !S->exit_code;
	C.stop = 1;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	if (pthread_timedjoin_np(C.thread, NULL, &ts) != 0)
		log_warnx("cluster: the MPI thread did not finish in 5 s; exiting anyway");
	C.active = 0;
	uv_close((uv_handle_t *)&C.async, NULL);
	uv_run(S->loop, UV_RUN_NOWAIT);
}

/* mcat_each_memory: {"job", "step"} of a step committed in memory only. */
static void memory_level_json(void *arg, const char *job, const struct mcat_step *s)
{
	json_array_append_new(arg, json_pack("{sssI}", "job", job, "step",
					     (json_int_t)s->step));
}

json_t *coord_status_json(void)
{
	json_t *o, *peers = json_array(), *steps = json_array();
	uint64_t now = now_ns(), limit = (uint64_t)C.peer_ms * 1000000ull;

	pthread_mutex_lock(&C.lock);
	for (int n = 0; n < C.size; n++)
		if (n == C.rank || (C.last_heard[n] && now - C.last_heard[n] <= limit &&
				    (C.rank == 0 || n == 0)))
			json_array_append_new(peers, json_integer(n));
	for (struct cstep *cs = C.steps; cs; cs = cs->next) {
		json_t *seen = json_array(), *dur = json_array();
		if (cs->decided)
			continue;
		for (int n = 0; n < C.size; n++) {
			if (cs->seen[n])
				json_array_append_new(seen, json_integer(n));
			if (cs->durable[n])
				json_array_append_new(dur, json_integer(n));
		}
		json_array_append_new(steps, json_pack("{sssIsisisoso}", "job", cs->job,
			"step", (json_int_t)cs->step, "world_size", cs->world_size,
			"ranks_durable", cs->ndurable, "nodes_seen", seen, "nodes_durable", dur));
	}
	pthread_mutex_unlock(&C.lock);
	o = json_pack("{sssisisisosbsiso}", "mode", "mpi", "rank", C.rank, "size", C.size,
		      "coordinator", 0, "peers_seen", peers, "peer_lost", atomic_load(&C.lost),
		      "coord_deadline_ms", (int)C.deadline_ms, "steps", steps);
	if (o) {
		json_t *ml = json_array();
		json_object_set_new(o, "coord_peer_timeout_ms", json_integer(C.peer_ms));
		json_object_set_new(o, "memory_replicas", json_integer(coord_replicas()));
		json_object_set_new(o, "persist_every", json_integer(C.S->cfg.persist_every));
		mcat_each_memory(memory_level_json, ml);
		json_object_set_new(o, "memory_level_steps", ml);
	}
	return o;
}

#else  /* !CKPT_HAVE_MPI: built without Open MPI */

int coord_init(struct srv *S, const struct coord_hooks *hooks)
{
	log_warnx("cluster \"mpi\": this ckptd was built without MPI (mpicc not found)");
	return -ENOTSUP;
}
void coord_finalize(struct srv *S) { }
int coord_active(void) { return 0; }
int coord_is_coordinator(void) { return 0; }
int coord_busy(void) { return 0; }
void coord_expand(char *s, size_t cap) { }
void coord_reload(const struct config *cfg) { }
void coord_report_seen(const char *job, uint64_t step, const char *txid, int world_size) { }
void coord_report_durable(const char *job, const char *run_id, uint64_t step,
			  const char *txid, int world_size, int memory,
			  struct commit_part *part)
{
	commit_part_free(part);
}
void coord_report_failed(const char *job, uint64_t step, const char *txid, int err,
			 const char *msg) { }
void coord_report_clean(const char *job, uint64_t step, const char *txid) { }
json_t *coord_status_json(void) { return json_object(); }
int coord_replicas(void) { return 0; }
int coord_rank(void) { return 0; }
int coord_size(void) { return 1; }
void coord_replicate(const char *job, uint64_t step, int rank, struct memt_cap *c) { }
int coord_fetch(int node, const char *job, uint64_t step, const char *txid,
		const char *path, char *msg, size_t msglen)
{
	snprintf(msg, msglen, "ckptd was built without MPI");
	return -ENOTSUP;
}

#endif
