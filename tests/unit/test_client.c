/* test_client.c - the client transport shared by libckpt and ckptctl
 * (client/ckpt_conn.c), and libckpt's save contract on replies a real
 * ckptd does not send.  The "daemon" is the other end of a socketpair: the
 * test writes its messages there (replies can be queued before the request
 * because request ids are predictable) and reads what the client sent. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ckpt_int.h"
#include "testhelp.h"

/* Allocation failure, aimed: realloc() of one chosen block fails.  Not
 * under ASan, which owns the allocator (that test skips). */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define CAN_FAIL_REALLOC 1
extern void *__libc_realloc(void *p, size_t n);
static void *fail_realloc_of;

void *realloc(void *p, size_t n)
{
	if (p && p == fail_realloc_of) {
		errno = ENOMEM;
		return NULL;
	}
	return __libc_realloc(p, n);
}
#endif

struct pair {
	struct ckpt__conn conn;    /* the client's end */
	int daemon;                /* the test's end */
	json_t *req;               /* an empty request body */
};

static int pair_open(struct pair *p)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	ckpt__conn_init(&p->conn, PROTO_MAX_PAYLOAD);
	p->conn.fd = sv[0];
	p->daemon = sv[1];
	p->req = json_object();
	return p->req ? 0 : -ENOMEM;
}

static void pair_close(struct pair *p)
{
	ckpt__conn_release(&p->conn);
	if (p->daemon >= 0)
		close(p->daemon);
	p->daemon = -1;
	json_decref(p->req);
	p->req = NULL;
}

/* The daemon sends one message with JSON text js. */
static int say(int fd, uint16_t type, uint64_t req_id, int32_t status,
	       const char *js)
{
	return proto_send(fd, type, req_id, status, js, strlen(js), NULL, 0,
			  NULL, 0);
}

static int n_events;
static void count_event(void *arg, const struct proto_msg *m)
{
	(void)arg;
	n_events += m->hdr.type == PROTO_EVENT;
}

/* EVENTs go to the callback and a reply to another request is skipped
 * on the way to ours. */
static int test_await_events_and_strays(void)
{
	struct ckpt__reply rep;
	struct pair p;
	uint64_t id;
	uint64_t v;

	CHECK_EQ(pair_open(&p), 0);
	CHECK_EQ(ckpt__conn_send(&p.conn, PROTO_STATUS, p.req, NULL, 0,
				 NULL, 0, &id), 0);
	CHECK_EQ(id, 1);
	n_events = 0;
	CHECK_EQ(say(p.daemon, PROTO_EVENT, 0, 0, "{\"ticket\":3}"), 0);
	CHECK_EQ(say(p.daemon, PROTO_STATUS | PROTO_REPLY, 99, 0, "{\"x\":1}"), 0);
	CHECK_EQ(say(p.daemon, PROTO_EVENT, 0, 0, "{\"ticket\":4}"), 0);
	CHECK_EQ(say(p.daemon, PROTO_STATUS | PROTO_REPLY, 1, 0, "{\"x\":2}"), 0);
	CHECK_EQ(ckpt__conn_await(&p.conn, PROTO_STATUS, id, -1, false,
				  count_event, NULL, &rep), 0);
	CHECK_EQ(rep.status, 0);
	CHECK_EQ(ckpt__json_u64(rep.json, "x", &v), 0);
	CHECK_EQ(v, 2);
	CHECK_EQ(n_events, 2);
	ckpt__reply_release(&rep);
	pair_close(&p);
	return 0;
}

/* A refusal is a reply with the daemon's status and reason; an ERROR
 * without a request id (about the whole connection) answers too. */
static int test_await_refusals(void)
{
	struct ckpt__reply rep;
	struct pair p;
	uint64_t id;

	CHECK_EQ(pair_open(&p), 0);
	CHECK_EQ(ckpt__conn_send(&p.conn, PROTO_LIST, p.req, NULL, 0,
				 NULL, 0, &id), 0);
	CHECK_EQ(say(p.daemon, PROTO_LIST | PROTO_REPLY, id, -EPERM,
		     "{\"error\":\"not yours\"}"), 0);
	CHECK_EQ(ckpt__conn_await(&p.conn, PROTO_LIST, id, -1, false, NULL,
				  NULL, &rep), 0);
	CHECK_EQ(rep.status, -EPERM);
	CHECK(strcmp(ckpt__reply_why(&rep), "not yours") == 0);
	ckpt__reply_release(&rep);

	CHECK_EQ(ckpt__conn_send(&p.conn, PROTO_LIST, p.req, NULL, 0,
				 NULL, 0, &id), 0);
	CHECK_EQ(say(p.daemon, PROTO_ERROR, 0, -EPROTO,
		     "{\"error\":\"bad header\"}"), 0);
	CHECK_EQ(ckpt__conn_await(&p.conn, PROTO_LIST, id, -1, false, NULL,
				  NULL, &rep), 0);
	CHECK_EQ(rep.status, -EPROTO);
	CHECK(strcmp(ckpt__reply_why(&rep), "bad header") == 0);
	ckpt__reply_release(&rep);

	/* an ERROR that claims success is still a refusal; no reason: "" */
	CHECK_EQ(ckpt__conn_send(&p.conn, PROTO_LIST, p.req, NULL, 0,
				 NULL, 0, &id), 0);
	CHECK_EQ(say(p.daemon, PROTO_ERROR, id, 0, ""), 0);
	CHECK_EQ(ckpt__conn_await(&p.conn, PROTO_LIST, id, -1, false, NULL,
				  NULL, &rep), 0);
	CHECK_EQ(rep.status, -EPROTO);
	CHECK(strcmp(ckpt__reply_why(&rep), "") == 0);
	ckpt__reply_release(&rep);
	pair_close(&p);
	return 0;
}

/* A deadline that passes is -EAGAIN and leaves the connection usable: the
 * late reply is still read. */
static int test_await_deadline(void)
{
	struct ckpt__reply rep;
	struct pair p;
	uint64_t id;

	CHECK_EQ(pair_open(&p), 0);
	CHECK_EQ(ckpt__conn_send(&p.conn, PROTO_FLUSH, p.req, NULL, 0,
				 NULL, 0, &id), 0);
	CHECK_EQ(ckpt__conn_await(&p.conn, PROTO_FLUSH, id, ckpt__now_ms(),
				  false, NULL, NULL, &rep), -EAGAIN);
	CHECK_EQ(p.conn.broken, 0);
	CHECK_EQ(say(p.daemon, PROTO_FLUSH | PROTO_REPLY, id, 0, "{}"), 0);
	CHECK_EQ(ckpt__conn_await(&p.conn, PROTO_FLUSH, id, ckpt__now_ms() +
				  10000, false, NULL, NULL, &rep), 0);
	CHECK_EQ(rep.status, 0);
	ckpt__reply_release(&rep);
	pair_close(&p);
	return 0;
}

/* A malformed successful reply is -EPROTO; the connection stays usable. */
static int test_await_malformed_reply(void)
{
	struct ckpt__reply rep;
	struct pair p;
	uint64_t id;

	CHECK_EQ(pair_open(&p), 0);
	CHECK_EQ(ckpt__conn_send(&p.conn, PROTO_LIST, p.req, NULL, 0,
				 NULL, 0, &id), 0);
	CHECK_EQ(say(p.daemon, PROTO_LIST | PROTO_REPLY, id, 0, "[1,2]"), 0);
	CHECK_EQ(ckpt__conn_await(&p.conn, PROTO_LIST, id, -1, false, NULL,
				  NULL, &rep), -EPROTO);
	CHECK_EQ(p.conn.broken, 0);
	pair_close(&p);
	return 0;
}

/* The daemon goes away: the reason is kept and every later call fails at
 * once with the same error. */
static int test_peer_closes(void)
{
	struct ckpt__reply rep;
	struct proto_msg m;
	struct pair p;
	char buf[4096];
	uint64_t id;

	CHECK_EQ(pair_open(&p), 0);
	CHECK_EQ(ckpt__conn_send(&p.conn, PROTO_LIST, p.req, NULL, 0,
				 NULL, 0, &id), 0);
	CHECK(read(p.daemon, buf, sizeof(buf)) > 0);   /* else: a reset */
	close(p.daemon);
	p.daemon = -1;
	CHECK_EQ(ckpt__conn_await(&p.conn, PROTO_LIST, id, -1, false, NULL,
				  NULL, &rep), -ECONNRESET);
	CHECK(strcmp(p.conn.why, "ckptd closed the connection") == 0);
	CHECK_EQ(ckpt__conn_next(&p.conn, &m, -1), -ECONNRESET);
	CHECK_EQ(ckpt__conn_send(&p.conn, PROTO_LIST, p.req, NULL, 0,
				 NULL, 0, &id), -ECONNRESET);
	pair_close(&p);
	return 0;
}

/* Garbage on the stream breaks the connection with a reason. */
static int test_bad_header(void)
{
	static const char junk[64] = "this is not a ckpt header at all......";
	struct proto_msg m;
	struct pair p;

	CHECK_EQ(pair_open(&p), 0);
	CHECK_EQ(write(p.daemon, junk, sizeof(junk)), (long)sizeof(junk));
	CHECK(ckpt__conn_next(&p.conn, &m, -1) < 0);
	CHECK(p.conn.broken < 0);
	CHECK(strncmp(p.conn.why, "bad message from ckptd: ", 24) == 0);
	pair_close(&p);
	return 0;
}

static int test_open_errors(void)
{
	char err[256], path[200];
	struct ckpt__conn k;

	memset(path, 'x', sizeof(path) - 1);
	path[sizeof(path) - 1] = '\0';
	ckpt__conn_init(&k, PROTO_MAX_PAYLOAD);
	CHECK_EQ(ckpt__conn_open(&k, path, err, sizeof(err)), -ENAMETOOLONG);
	CHECK(strstr(err, "too long"));
	ckpt__conn_release(&k);
	ckpt__conn_init(&k, PROTO_MAX_PAYLOAD);
	CHECK_EQ(ckpt__conn_open(&k, "/nonexistent/ckptd.sock", err, sizeof(err)),
		 -ENOENT);
	CHECK(strstr(err, "cannot connect to /nonexistent/ckptd.sock"));
	ckpt__conn_release(&k);
	ckpt__conn_release(NULL);
	return 0;
}

/* --- libckpt's save contract ------------------------------------------------ */

static int fake_page = -1;          /* stands for the gate page's memfd */
static int fake_record(struct gpu_ring *r, unsigned slot, void *stream,
		       struct gpu_ring_save *out, char *err, size_t errlen)
{
	(void)stream; (void)err; (void)errlen;
	memset(out->uuid, 0x22, 16);
	memset(out->ready, 0, GPU_CLIENT_HANDLE);
	out->seq = ++r->seq[slot];
	if (fake_page < 0)
		fake_page = open("/dev/null", O_RDONLY | O_CLOEXEC);
	out->page_fd = r->page_sent ? -1 : fake_page;
	return 0;
}

static int n_waits;
static unsigned wait_slot;
static uint32_t wait_seq;
static void *wait_stream;
static int fake_wait(struct gpu_ring *r, unsigned slot, uint32_t seq, void *stream,
		     char *err, size_t errlen)
{
	(void)r; (void)err; (void)errlen;
	n_waits++;
	wait_slot = slot;
	wait_seq = seq;
	wait_stream = stream;
	return 0;
}

/* The SAVE requests the client wrote (the daemon end reads them): how
 * many descriptors came with each, -1 past the last. */
static int heard_fds(int daemon, int *nfds, int max)
{
	struct proto_reader rd;
	struct proto_msg m;
	int n = 0;

	proto_reader_init(&rd, PROTO_MAX_PAYLOAD);
	fcntl(daemon, F_SETFL, O_NONBLOCK);
	do {
		while (n < max && proto_next(&rd, &m, NULL, NULL, 0) == 1) {
			nfds[n++] = (int)m.nfds;
			for (unsigned i = 0; i < m.nfds; i++)
				close(m.fds[i]);
		}
	} while (n < max && proto_read(&rd, daemon) > 0);
	proto_reader_release(&rd);
	return n;
}

/* A handle on the client end of a socketpair, as ckpt_connect() leaves it
 * after a HELLO that said the daemon has a GPU. */
static ckpt_client *fake_client(int *daemon)
{
	ckpt_client *c = calloc(1, sizeof(*c));
	int sv[2];

	if (!c || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		free(c);
		return NULL;
	}
	c->pid = getpid();
	c->max_payload = PROTO_MAX_PAYLOAD;
	c->daemon_gpu = true;
	gpu_ring_init(&c->ring);
	ckpt__conn_init(&c->conn, PROTO_MAX_PAYLOAD);
	c->conn.fd = sv[0];
	*daemon = sv[1];
	ckpt__stream_ops.record = fake_record;
	ckpt__stream_ops.wait = fake_wait;
	return c;
}

/* Accepted: the ticket comes back and the stream waits on its gate.  An
 * EVENT that came before the reply is kept for that ticket. */
static int test_stream_event_before_reply(void)
{
	uint64_t ticket = 12345;
	int daemon, r;
	ckpt_client *c = fake_client(&daemon);

	CHECK(c);
	n_waits = 0;
	CHECK_EQ(say(daemon, PROTO_EVENT, 0, 0,
		     "{\"ticket\":7,\"step\":5,\"phase\":\"staged\"}"), 0);
	CHECK_EQ(say(daemon, PROTO_SAVE | PROTO_REPLY, 1, 0,
		     "{\"ticket\":7,\"txid\":\"x\"}"), 0);
	r = ckpt_save_stream(c, 5, (void *)0x1, &ticket);
	CHECK_EQ(r, 0);
	CHECK_EQ(ticket, 7);
	CHECK_EQ(n_waits, 1);
	CHECK_EQ(ckpt_wait(c, 7, CKPT_STAGED, 0), 0);
	CHECK_EQ(ckpt_wait(c, 7, CKPT_DURABLE, 0), -EAGAIN);
	close(daemon);
	ckpt_close(c);
	return 0;
}

/* No ticket in the reply: nothing to hand back; -EPROTO, ticket untouched. */
static int test_stream_reply_without_ticket(void)
{
	uint64_t ticket = 12345;
	int daemon;
	ckpt_client *c = fake_client(&daemon);

	CHECK(c);
	CHECK_EQ(say(daemon, PROTO_SAVE | PROTO_REPLY, 1, 0, "{\"txid\":\"x\"}"), 0);
	CHECK_EQ(ckpt_save_stream(c, 5, (void *)0x1, &ticket), -EPROTO);
	CHECK_EQ(ticket, 12345);
	close(daemon);
	ckpt_close(c);
	return 0;
}

/* Refused: the daemon's error and reason, ticket untouched; the stream
 * save after it gets the next request id and works.  The gate page goes
 * with every stream SAVE until one is accepted, then never again. */
static int test_stream_refused_then_ok(void)
{
	uint64_t ticket = 12345;
	int daemon, nfds[4];
	ckpt_client *c = fake_client(&daemon);

	CHECK(c);
	n_waits = 0;
	CHECK_EQ(say(daemon, PROTO_SAVE | PROTO_REPLY, 1, -ENOSPC,
		     "{\"error\":\"pool full\"}"), 0);
	CHECK_EQ(ckpt_save_stream(c, 5, (void *)0x1, &ticket), -ENOSPC);
	CHECK_EQ(ticket, 12345);
	CHECK(strcmp(ckpt_last_error(c), "pool full") == 0);
	CHECK_EQ(say(daemon, PROTO_SAVE | PROTO_REPLY, 2, 0, "{\"ticket\":8,\"txid\":\"x\"}"), 0);
	CHECK_EQ(ckpt_save_stream(c, 6, (void *)0x1, &ticket), 0);
	CHECK_EQ(ticket, 8);
	CHECK_EQ(n_waits, 1);
	CHECK_EQ(say(daemon, PROTO_SAVE | PROTO_REPLY, 3, 0, "{\"ticket\":9,\"txid\":\"x\"}"), 0);
	CHECK_EQ(ckpt_save_stream(c, 7, (void *)0x1, &ticket), 0);
	CHECK_EQ(heard_fds(daemon, nfds, 4), 3);
	CHECK_EQ(nfds[0], 1);                       /* refused: sent again */
	CHECK_EQ(nfds[1], 1);
	CHECK_EQ(nfds[2], 0);                       /* ckptd has it */
	close(daemon);
	ckpt_close(c);
	return 0;
}

/* CKPT_GATE_LATER: the save queues no wait; ckpt_gate_stream() queues one
 * on the save's own gate (slot, seq), once per stream, none for a save
 * already known STAGED; a failed save returns its error and queues
 * nothing; unknown tickets and ckpt_save() tickets are refused. */
static int test_stream_gate_later(void)
{
	uint64_t ticket = 12345;
	uint32_t seq;
	unsigned slot;
	int daemon;
	ckpt_client *c = fake_client(&daemon);

	CHECK(c);
	n_waits = 0;
	CHECK_EQ(ckpt_save_stream_flags(c, 5, (void *)0x1, 0x2, &ticket), -EINVAL);
	CHECK_EQ(ticket, 12345);
	CHECK_EQ(say(daemon, PROTO_SAVE | PROTO_REPLY, 1, 0, "{\"ticket\":7}"), 0);
	CHECK_EQ(ckpt_save_stream_flags(c, 5, (void *)0x1, CKPT_GATE_LATER, &ticket), 0);
	CHECK_EQ(ticket, 7);
	CHECK_EQ(n_waits, 0);
	slot = (unsigned)(c->ring.next + GPU_CLIENT_RING - 1) % GPU_CLIENT_RING;
	seq = c->ring.seq[slot];
	CHECK_EQ(ckpt_gate_stream(c, 7, (void *)0x1), 0);
	CHECK_EQ(n_waits, 1);
	CHECK_EQ(wait_slot, slot);
	CHECK_EQ(wait_seq, seq);
	CHECK(wait_stream == (void *)0x1);
	CHECK_EQ(ckpt_gate_stream(c, 7, (void *)0x1), 0);     /* again: no-op */
	CHECK_EQ(n_waits, 1);
	CHECK_EQ(ckpt_gate_stream(c, 7, (void *)0x2), 0);     /* another stream */
	CHECK_EQ(n_waits, 2);
	CHECK(wait_stream == (void *)0x2);
	CHECK_EQ(ckpt_gate_stream(c, 99, (void *)0x1), -ENOENT);
	CHECK(strstr(ckpt_last_error(c), "no save with ticket 99"));

	/* a plain save has no gate */
	CHECK_EQ(say(daemon, PROTO_SAVE | PROTO_REPLY, 2, 0, "{\"ticket\":8}"), 0);
	CHECK_EQ(ckpt_save(c, 6, &ticket), 0);
	CHECK_EQ(ckpt_gate_stream(c, 8, (void *)0x1), -EINVAL);
	CHECK(strstr(ckpt_last_error(c), "not a stream save"));

	/* staged before the gate: nothing to hold */
	CHECK_EQ(say(daemon, PROTO_SAVE | PROTO_REPLY, 3, 0, "{\"ticket\":9}"), 0);
	CHECK_EQ(ckpt_save_stream_flags(c, 7, (void *)0x1, CKPT_GATE_LATER, &ticket), 0);
	CHECK_EQ(say(daemon, PROTO_EVENT, 0, 0,
		     "{\"ticket\":9,\"step\":7,\"phase\":\"staged\"}"), 0);
	CHECK_EQ(ckpt_gate_stream(c, 9, (void *)0x1), 0);
	CHECK_EQ(n_waits, 2);

	/* failed before the gate: its error, nothing queued */
	CHECK_EQ(say(daemon, PROTO_SAVE | PROTO_REPLY, 4, 0, "{\"ticket\":10}"), 0);
	CHECK_EQ(ckpt_save_stream_flags(c, 8, (void *)0x1, CKPT_GATE_LATER, &ticket), 0);
	CHECK_EQ(say(daemon, PROTO_EVENT, 0, 0,
		     "{\"ticket\":10,\"phase\":\"failed\",\"error\":-5,"
		     "\"message\":\"disk on fire\"}"), 0);
	CHECK_EQ(ckpt_gate_stream(c, 10, (void *)0x1), -EIO);
	CHECK(strcmp(ckpt_last_error(c), "disk on fire") == 0);
	CHECK_EQ(n_waits, 2);
	close(daemon);
	ckpt_close(c);
	return 0;
}

/* ckpt_save: accepted means a ticket; refused means the error alone. */
static int test_save_contract(void)
{
	uint64_t ticket = 12345;
	int daemon;
	ckpt_client *c = fake_client(&daemon);

	CHECK(c);
	CHECK_EQ(say(daemon, PROTO_SAVE | PROTO_REPLY, 1, -EBUSY, "{}"), 0);
	CHECK_EQ(ckpt_save(c, 1, &ticket), -EBUSY);
	CHECK_EQ(ticket, 12345);
	CHECK(strstr(ckpt_last_error(c), "ckptd refused SAVE"));
	CHECK_EQ(say(daemon, PROTO_SAVE | PROTO_REPLY, 2, 0, "{\"ticket\":9}"), 0);
	CHECK_EQ(ckpt_save(c, 2, &ticket), 0);
	CHECK_EQ(ticket, 9);
	CHECK_EQ(ckpt_wait(c, 9, CKPT_STAGED, 0), -EAGAIN);
	CHECK_EQ(say(daemon, PROTO_EVENT, 0, 0,
		     "{\"ticket\":9,\"phase\":\"failed\",\"error\":-5,"
		     "\"message\":\"disk on fire\"}"), 0);
	CHECK_EQ(ckpt_wait(c, 9, CKPT_COMMITTED, 1000), -EIO);
	CHECK(strcmp(ckpt_last_error(c), "disk on fire") == 0);
	close(daemon);
	ckpt_close(c);
	return 0;
}

/* Out of memory for the ticket's place after ckptd accepted the save: the
 * ticket still comes back; the oldest finished save is forgotten for it. */
static int test_save_accepted_oom(void)
{
#ifdef CAN_FAIL_REALLOC
	struct ckpt_times tm;
	uint64_t ticket = 12345;
	int daemon, r;
	ckpt_client *c = fake_client(&daemon);

	CHECK(c);
	c->tickets = calloc(8, sizeof(*c->tickets));
	CHECK(c->tickets);
	c->cap_tickets = c->ntickets = 8;
	for (unsigned i = 0; i < 8; i++) {
		c->tickets[i].id = i + 1;
		c->tickets[i].known = true;
		c->tickets[i].phase = i == 2 ? CKPT_COMMITTED : CKPT_STAGED;
	}
	CHECK_EQ(say(daemon, PROTO_SAVE | PROTO_REPLY, 1, 0, "{\"ticket\":100}"), 0);
	fail_realloc_of = c->tickets;
	r = ckpt_save(c, 10, &ticket);
	fail_realloc_of = NULL;
	CHECK_EQ(r, 0);
	CHECK_EQ(ticket, 100);
	CHECK_EQ(ckpt_times(c, 100, &tm), 0);
	CHECK_EQ(ckpt_times(c, 3, &tm), -ENOENT);   /* the finished one went */
	CHECK_EQ(ckpt_times(c, 1, &tm), 0);
	CHECK_EQ(ckpt_times(c, 8, &tm), 0);
	close(daemon);
	ckpt_close(c);
	return 0;
#else
	SKIP("ASan owns the allocator");
#endif
}

static const struct test tests[] = {
	{ "await_events_and_strays", test_await_events_and_strays },
	{ "await_refusals", test_await_refusals },
	{ "await_deadline", test_await_deadline },
	{ "await_malformed_reply", test_await_malformed_reply },
	{ "peer_closes", test_peer_closes },
	{ "bad_header", test_bad_header },
	{ "open_errors", test_open_errors },
	{ "stream_event_before_reply", test_stream_event_before_reply },
	{ "stream_reply_without_ticket", test_stream_reply_without_ticket },
	{ "stream_refused_then_ok", test_stream_refused_then_ok },
	{ "stream_gate_later", test_stream_gate_later },
	{ "save_contract", test_save_contract },
	{ "save_accepted_oom", test_save_accepted_oom },
};

TEST_MAIN(tests)
