/* ckpt.c - libckpt: a trainer's synchronous connection to ckptd.
 *
 * One blocking Unix stream socket per handle.  A request is sent, then
 * messages are read until the reply with its req_id arrives; EVENTs that
 * arrive meanwhile (save phases, pushed by the daemon) are folded into
 * per-ticket state that ckpt_wait() and ckpt_times() read.  The library
 * never logs, prints, exits or aborts: it returns -errno and keeps a message
 * for ckpt_last_error().
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt.h"
#include "gpu_client.h"
#include "proto.h"
#include "shm_region.h"

#define CKPT__ERR_LEN      1024
#define CKPT__MAX_TICKETS  4096   /* finished ones are forgotten beyond this */
#define CKPT__MAX_JOB      64
#define CKPT__MAX_GROUP    64
#define CKPT__MAX_BLOB     128
#define CKPT__MAX_TENSOR   1024

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
};

struct ckpt__blob {
	char    *name;
	uint8_t *data;
	size_t   len;
};

struct ckpt_client {
	int      fd;
	int      broken;           /* -errno once the connection is unusable */
	pid_t    pid;              /* the process that connected */
	uint64_t next_req, next_region;
	uint32_t max_payload;      /* the daemon's limit, from HELLO */
	bool     daemon_gpu;
	struct proto_reader rd;

	struct ckpt__region *regions; size_t nregions, cap_regions;
	struct ckpt__tensor *tensors; size_t ntensors, cap_tensors;
	struct ckpt__ticket *tickets; size_t ntickets, cap_tickets;
	struct ckpt__blob   *blobs;   size_t nblobs;
	struct ckpt__gpu_region *gpu; size_t ngpu, cap_gpu;
	struct gpu_ring      ring;    /* ckpt_save_stream() events */

	char err[CKPT__ERR_LEN];
};

/* ckpt_connect() fails without a handle to keep its message in; it goes
 * here instead and ckpt_last_error(NULL) returns it. */
static __thread char ckpt__connect_err[CKPT__ERR_LEN];

/* --- small helpers ------------------------------------------------------- */

static int ckpt__fail(ckpt_client *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int ckpt__fail(ckpt_client *c, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return err;
}

/* Mark the connection unusable: every later request returns err at once. */
static int ckpt__break(ckpt_client *c, int err, const char *what)
{
	if (!c->broken)
		c->broken = err;
	return ckpt__fail(c, err, "lost the connection to ckptd: %s", what);
}

/* After fork() the child shares the socket: a request from it would
 * interleave with the parent's and corrupt both streams. */
static int ckpt__check_owner(ckpt_client *c)
{
	if (getpid() == c->pid)
		return 0;
	return ckpt__fail(c, -ECHILD, "this handle belongs to process %d; a "
			  "forked child must call ckpt_connect() itself",
			  (int)c->pid);
}

static int ckpt__grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	size_t ncap;
	void *p;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 8;
	while (ncap < need)
		ncap *= 2;
	p = realloc(*arr, ncap * elem);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = ncap;
	return 0;
}

/* The path-component whitelist of PROTOCOL.md, checked locally so that a
 * bad name is refused with a precise message before anything is sent. */
static int ckpt__check_name(ckpt_client *c, const char *what, const char *s,
			    size_t maxlen)
{
	size_t n;

	if (!s || !*s)
		return ckpt__fail(c, -EINVAL, "%s name is empty", what);
	n = strnlen(s, maxlen + 1);
	if (n > maxlen)
		return ckpt__fail(c, -EINVAL, "%s name is longer than %zu bytes",
				  what, maxlen);
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		bool alnum = (ch >= 'a' && ch <= 'z') ||
			     (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
		if (i == 0 && !alnum)
			return ckpt__fail(c, -EINVAL, "%s name '%s' must start "
					  "with a letter or digit", what, s);
		if (!alnum && ch != '_' && ch != '.' && ch != '-')
			return ckpt__fail(c, -EINVAL, "%s name '%s' may only "
					  "contain A-Z a-z 0-9 _ . -", what, s);
	}
	return 0;
}

/* Valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF)
 * without control characters. */
static bool ckpt__utf8_ok(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + n;

	while (p < end) {
		unsigned ch = *p++, need, cp;

		if (ch < 0x20 || ch == 0x7f)
			return false;
		if (ch < 0x80)
			continue;
		if (ch >= 0xc2 && ch <= 0xdf)      { need = 1; cp = ch & 0x1f; }
		else if (ch >= 0xe0 && ch <= 0xef) { need = 2; cp = ch & 0x0f; }
		else if (ch >= 0xf0 && ch <= 0xf4) { need = 3; cp = ch & 0x07; }
		else
			return false;
		if ((size_t)(end - p) < need)
			return false;
		for (unsigned i = 0; i < need; i++, p++) {
			if ((*p & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (*p & 0x3f);
		}
		if ((need == 2 && cp < 0x800) || (need == 3 && cp < 0x10000) ||
		    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff ||
		    (cp >= 0x80 && cp < 0xa0))
			return false;
	}
	return true;
}

static int ckpt__check_tensor_name(ckpt_client *c, const char *s)
{
	size_t n;

	if (!s || !*s)
		return ckpt__fail(c, -EINVAL, "tensor name is empty");
	n = strnlen(s, CKPT__MAX_TENSOR + 1);
	if (n > CKPT__MAX_TENSOR)
		return ckpt__fail(c, -EINVAL, "tensor name is longer than %d "
				  "bytes", CKPT__MAX_TENSOR);
	if (!ckpt__utf8_ok(s, n))
		return ckpt__fail(c, -EINVAL, "tensor name is not valid UTF-8 "
				  "or contains control characters");
	if (strcmp(s, "__metadata__") == 0)
		return ckpt__fail(c, -EINVAL, "tensor name '__metadata__' is "
				  "reserved by safetensors");
	return 0;
}

static const char *const ckpt__dtype_names[CKPT_DTYPE_COUNT] = {
	"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL",
};
static const size_t ckpt__dtype_sizes[CKPT_DTYPE_COUNT] = {
	8, 4, 2, 2, 8, 4, 2, 1, 1, 1,
};

/* An unsigned JSON integer member. */
static int ckpt__json_u64(const json_t *o, const char *key, uint64_t *out)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -EPROTO;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int64_t ckpt__now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* --- tickets: per-save state fed by EVENTs ------------------------------- */

static struct ckpt__ticket *ckpt__ticket_find(ckpt_client *c, uint64_t id)
{
	for (size_t i = 0; i < c->ntickets; i++)
		if (c->tickets[i].id == id)
			return &c->tickets[i];
	return NULL;
}

static void ckpt__ticket_drop(ckpt_client *c, size_t i)
{
	free(c->tickets[i].message);
	memmove(&c->tickets[i], &c->tickets[i + 1],
		(c->ntickets - i - 1) * sizeof(c->tickets[0]));
	c->ntickets--;
}

/* Find or add the state for ticket id.  A long run makes a save every few
 * minutes: beyond CKPT__MAX_TICKETS the oldest finished save is forgotten
 * (the oldest of all if none has finished). */
static struct ckpt__ticket *ckpt__ticket_get(ckpt_client *c, uint64_t id)
{
	struct ckpt__ticket *t = ckpt__ticket_find(c, id);

	if (t)
		return t;
	if (c->ntickets >= CKPT__MAX_TICKETS) {
		size_t victim = 0;
		for (size_t i = 0; i < c->ntickets; i++) {
			if (c->tickets[i].error ||
			    c->tickets[i].phase == CKPT_COMMITTED) {
				victim = i;
				break;
			}
		}
		ckpt__ticket_drop(c, victim);
	}
	if (ckpt__grow((void **)&c->tickets, &c->cap_tickets, c->ntickets + 1,
		       sizeof(*c->tickets)) < 0)
		return NULL;
	t = &c->tickets[c->ntickets++];
	memset(t, 0, sizeof(*t));
	t->id = id;
	return t;
}

static int ckpt__phase_parse(const char *s)
{
	if (!s)
		return 0;
	if (strcmp(s, "staged") == 0)
		return CKPT_STAGED;
	if (strcmp(s, "durable") == 0)
		return CKPT_DURABLE;
	if (strcmp(s, "committed") == 0)
		return CKPT_COMMITTED;
	if (strcmp(s, "failed") == 0)
		return -1;
	return 0;                       /* a phase we do not know: ignored */
}

static void ckpt__times_update(struct ckpt_times *tm, const json_t *ev)
{
	uint64_t v;

	if (ckpt__json_u64(ev, "staged_us", &v) == 0 && v)
		tm->staged_us = v;
	if (ckpt__json_u64(ev, "durable_us", &v) == 0 && v)
		tm->durable_us = v;
	if (ckpt__json_u64(ev, "committed_us", &v) == 0 && v)
		tm->committed_us = v;
	if (ckpt__json_u64(ev, "bytes", &v) == 0 && v)
		tm->bytes = v;
}

/* Fold one EVENT into its ticket.  A malformed event is dropped: there is
 * nobody to report it to, and the save's next event will still arrive. */
static void ckpt__on_event(ckpt_client *c, const struct proto_msg *m)
{
	json_t *ev = json_loadb(m->json, m->hdr.jlen, 0, NULL);
	struct ckpt__ticket *t;
	uint64_t id, step;
	int phase;

	if (!ev)
		return;
	if (ckpt__json_u64(ev, "ticket", &id) < 0)
		goto out_free_ev;
	phase = ckpt__phase_parse(json_string_value(json_object_get(ev,
								   "phase")));
	t = ckpt__ticket_get(c, id);
	if (!t || t->error)             /* nothing follows "failed" */
		goto out_free_ev;
	if (ckpt__json_u64(ev, "step", &step) == 0)
		t->step = step;
	ckpt__times_update(&t->times, ev);

	if (phase > t->phase) {
		t->phase = phase;
	} else if (phase < 0) {
		json_t *e = json_object_get(ev, "error");
		json_t *msg_j = json_object_get(ev, "message");
		const char *msg = json_string_value(msg_j);
		json_int_t err = json_is_integer(e) ? json_integer_value(e) : 0;

		t->error = (err < 0 && err > -4096) ? (int)err : -EIO;
		free(t->message);
		t->message = msg && *msg ? strdup(msg) : NULL;
	}
out_free_ev:
	json_decref(ev);
}

/* --- the connection ------------------------------------------------------ */

static void ckpt__msg_close_fds(struct proto_msg *m)
{
	for (unsigned i = 0; i < m->nfds; i++)
		close(m->fds[i]);
	m->nfds = 0;
}

/* Wait until the socket is readable or deadline_ms (monotonic; < 0 for
 * never) passes.  Returns 0 when readable, -EAGAIN on timeout. */
static int ckpt__wait_readable(ckpt_client *c, int64_t deadline_ms)
{
	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		int64_t left = -1;
		int r;

		if (deadline_ms >= 0) {
			left = deadline_ms - ckpt__now_ms();
			if (left < 0)
				left = 0;
			if (left > INT_MAX)
				left = INT_MAX;
		}
		r = poll(&p, 1, (int)left);
		if (r > 0)
			return 0;
		if (r == 0)
			return -EAGAIN;
		if (errno != EINTR)
			return ckpt__break(c, -errno, strerror(errno));
	}
}

/* The next complete message, reading as needed.  Returns 1, -EAGAIN when
 * deadline_ms (monotonic, < 0 for never) passed first, or the error that
 * broke the connection. */
static int ckpt__next_msg(ckpt_client *c, struct proto_msg *m,
			  int64_t deadline_ms)
{
	if (c->broken)
		return c->broken;
	for (;;) {
		const char *why = NULL;
		int r = proto_next(&c->rd, m, NULL, &why);

		if (r == 1)
			return 1;
		if (r < 0)
			return ckpt__break(c, r, why ? why : "malformed message");
		if (deadline_ms >= 0) {
			r = ckpt__wait_readable(c, deadline_ms);
			if (r < 0)
				return r;
		}
		r = proto_read(&c->rd, c->fd);
		if (r > 0 || r == -EINTR || r == -EAGAIN)
			continue;
		if (r == 0)
			return ckpt__break(c, -ECONNRESET,
					   "ckptd closed the connection");
		return ckpt__break(c, r, strerror(-r));
	}
}

/* The daemon's reason from a failed reply or ERROR message. */
static int ckpt__reply_error(ckpt_client *c, const struct proto_msg *m,
			     int status)
{
	json_t *j = json_loadb(m->json, m->hdr.jlen, 0, NULL);
	const char *why = json_string_value(json_object_get(j, "error"));

	if (status >= 0 || status <= -4096)
		status = -EPROTO;
	if (why && *why)
		ckpt__fail(c, status, "%s", why);
	else
		ckpt__fail(c, status, "ckptd refused %s: %s",
			   proto_type_name(m->hdr.type & ~PROTO_REPLY),
			   strerror(-status));
	json_decref(j);
	return status;
}

struct ckpt__reply {
	json_t  *json;         /* new reference */
	uint8_t *bin;          /* malloc'd copy, only if asked for */
	size_t   blen;
};

/* Read until the reply to req_id of type arrives, folding EVENTs on the
 * way.  On success fills *out (if not NULL). */
static int ckpt__await_reply(ckpt_client *c, uint16_t type, uint64_t req_id,
			     struct ckpt__reply *out, bool want_bin)
{
	for (;;) {
		struct proto_msg m;
		json_error_t jerr;
		int r = ckpt__next_msg(c, &m, -1);

		if (r < 0)
			return r;
		ckpt__msg_close_fds(&m);        /* replies carry none we use */
		if (m.hdr.type == PROTO_EVENT) {
			ckpt__on_event(c, &m);
			continue;
		}
		if (m.hdr.type == PROTO_ERROR &&
		    (m.hdr.req_id == req_id || m.hdr.req_id == 0))
			return ckpt__reply_error(c, &m, m.hdr.status);
		if (m.hdr.type != (type | PROTO_REPLY) || m.hdr.req_id != req_id)
			continue;                /* stray reply: not ours */
		if (m.hdr.status != 0)
			return ckpt__reply_error(c, &m, m.hdr.status);
		if (!out)
			return 0;

		out->json = m.hdr.jlen ? json_loadb(m.json, m.hdr.jlen, 0, &jerr)
				       : json_object();
		if (!json_is_object(out->json)) {
			json_decref(out->json);
			out->json = NULL;
			return ckpt__fail(c, -EPROTO, "ckptd sent a malformed "
					  "%s reply", proto_type_name(type));
		}
		out->bin = NULL;
		out->blen = 0;
		if (want_bin && m.blen) {
			out->bin = malloc(m.blen);
			if (!out->bin) {
				json_decref(out->json);
				out->json = NULL;
				return ckpt__fail(c, -ENOMEM, "out of memory "
						  "for a %zu-byte reply", m.blen);
			}
			memcpy(out->bin, m.bin, m.blen);
			out->blen = m.blen;
		}
		return 0;
	}
}

/* One request/reply exchange.  req is borrowed. */
static int ckpt__request(ckpt_client *c, uint16_t type, json_t *req,
			 const void *bin, size_t blen, const int *fds,
			 unsigned nfds, struct ckpt__reply *out, bool want_bin)
{
	uint64_t req_id;
	char *js;
	int r;

	if ((r = ckpt__check_owner(c)) < 0)
		return r;
	if (c->broken)
		return ckpt__fail(c, c->broken, "the connection to ckptd was "
				  "lost earlier: reconnect");
	if (!req)
		return ckpt__fail(c, -ENOMEM, "out of memory");
	js = json_dumps(req, JSON_COMPACT);
	if (!js)
		return ckpt__fail(c, -ENOMEM, "out of memory");

	req_id = ++c->next_req;
	r = proto_send(c->fd, type, req_id, 0, js, strlen(js), bin, blen,
		       fds, nfds);
	free(js);
	if (r == -EMSGSIZE || r == -EINVAL || r == -ENOMEM)
		return ckpt__fail(c, r, "cannot send %s: %s",
				  proto_type_name(type), strerror(-r));
	if (r < 0)
		return ckpt__break(c, r, strerror(-r));
	return ckpt__await_reply(c, type, req_id, out, want_bin);
}

static void ckpt__reply_release(struct ckpt__reply *rep)
{
	json_decref(rep->json);
	free(rep->bin);
	rep->json = NULL;
	rep->bin = NULL;
}

static int ckpt__socket_connect(ckpt_client *c, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (strlen(path) >= sizeof(sa.sun_path))
		return ckpt__fail(c, -ENAMETOOLONG, "socket path '%s' is too "
				  "long", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);

	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return ckpt__fail(c, -errno, "cannot create a socket: %s",
				  strerror(errno));
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return ckpt__fail(c, -errno, "cannot connect to %s: %s "
				  "(is ckptd running?)", path, strerror(errno));
	return 0;
}

static int ckpt__hello(ckpt_client *c, const char *job, int rank,
		       int world_size)
{
	struct ckpt__reply rep = { 0 };
	json_t *req, *gpu;
	uint64_t max;
	int r;

	req = json_pack("{s:i, s:i, s:s, s:s, s:i, s:i, s:I}",
			"version", PROTO_VERSION,
			"features", PROTO_FEAT_HOST_MEM | PROTO_FEAT_EVENTS,
			"role", "trainer", "job", job, "rank", rank,
			"world_size", world_size, "pid", (json_int_t)getpid());
	r = ckpt__request(c, PROTO_HELLO, req, NULL, 0, NULL, 0, &rep, false);
	json_decref(req);
	if (r < 0)
		return r;
	gpu = json_object_get(rep.json, "gpu");
	c->daemon_gpu = json_is_true(gpu);
	/* Optional: a daemon configured below the protocol's ceiling may say
	 * so, and then a too-large blob is refused here instead of costing
	 * the connection (the daemon closes it on an oversized header). */
	if (ckpt__json_u64(rep.json, "max_payload", &max) == 0 &&
	    max >= 4096 && max < PROTO_MAX_PAYLOAD)
		c->max_payload = (uint32_t)max;
	ckpt__reply_release(&rep);
	return 0;
}

/* --- connect / close ----------------------------------------------------- */

static void ckpt__blobs_clear(ckpt_client *c)
{
	for (size_t i = 0; i < c->nblobs; i++) {
		free(c->blobs[i].name);
		free(c->blobs[i].data);
	}
	free(c->blobs);
	c->blobs = NULL;
	c->nblobs = 0;
}

void ckpt_close(ckpt_client *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	proto_reader_release(&c->rd);
	for (size_t i = 0; i < c->nregions; i++)
		shm_region_release(&c->regions[i].shm);
	free(c->regions);
	for (size_t i = 0; i < c->ntensors; i++) {
		free(c->tensors[i].group);
		free(c->tensors[i].name);
	}
	free(c->tensors);
	for (size_t i = 0; i < c->ntickets; i++)
		free(c->tickets[i].message);
	free(c->tickets);
	ckpt__blobs_clear(c);
	gpu_ring_destroy(&c->ring);
	free(c->gpu);
	free(c);
}

static int ckpt__connect_args(ckpt_client *c, const char *job, int rank,
			      int world_size)
{
	int r = ckpt__check_name(c, "job", job, CKPT__MAX_JOB);

	if (r < 0)
		return r;
	if (world_size < 1)
		return ckpt__fail(c, -EINVAL, "world_size %d must be at least 1",
				  world_size);
	if (rank < 0 || rank >= world_size)
		return ckpt__fail(c, -EINVAL, "rank %d is outside 0..%d",
				  rank, world_size - 1);
	return 0;
}

int ckpt_connect(const char *socket_path, const char *job, int rank,
		 int world_size, ckpt_client **out)
{
	ckpt_client *c;
	int r;

	ckpt__connect_err[0] = '\0';
	c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(ckpt__connect_err, sizeof(ckpt__connect_err),
			 "out of memory");
		return -ENOMEM;
	}
	c->fd = -1;
	c->pid = getpid();
	c->max_payload = PROTO_MAX_PAYLOAD;
	gpu_ring_init(&c->ring);
	proto_reader_init(&c->rd, PROTO_MAX_PAYLOAD);

	if (!out) {
		r = ckpt__fail(c, -EINVAL, "out must not be NULL");
		goto out_free;
	}
	r = ckpt__connect_args(c, job, rank, world_size);
	if (r < 0)
		goto out_free;
	if (!socket_path || !*socket_path)
		socket_path = getenv("CKPT_SOCKET");
	if (!socket_path || !*socket_path)
		socket_path = CKPT_DEFAULT_SOCKET;

	r = ckpt__socket_connect(c, socket_path);
	if (r < 0)
		goto out_free;
	r = ckpt__hello(c, job, rank, world_size);
	if (r < 0)
		goto out_free;
	c->err[0] = '\0';
	*out = c;
	return 0;

out_free:
	memcpy(ckpt__connect_err, c->err, sizeof(ckpt__connect_err));
	ckpt_close(c);
	return r;
}

/* --- memory and tensors -------------------------------------------------- */

void *ckpt_alloc(ckpt_client *c, size_t nbytes)
{
	struct shm_region shm;
	uint64_t id;
	json_t *req;
	int r;

	if (!c)
		return NULL;
	if (nbytes == 0) {
		ckpt__fail(c, -EINVAL, "ckpt_alloc: size must be greater than 0");
		return NULL;
	}
	if (nbytes > (size_t)INT64_MAX) {
		ckpt__fail(c, -EINVAL, "ckpt_alloc: %zu bytes is too large",
			   nbytes);
		return NULL;
	}
	if (ckpt__grow((void **)&c->regions, &c->cap_regions, c->nregions + 1,
		       sizeof(*c->regions)) < 0) {
		ckpt__fail(c, -ENOMEM, "out of memory");
		return NULL;
	}
	r = shm_region_create("ckpt", nbytes, &shm);
	if (r < 0) {
		ckpt__fail(c, r, "cannot create %zu bytes of shared memory: %s",
			   nbytes, strerror(-r));
		return NULL;
	}

	id = ++c->next_region;
	req = json_pack("{s:I, s:I}", "region", (json_int_t)id,
			"size", (json_int_t)shm.size);
	r = ckpt__request(c, PROTO_REGION_ADD, req, NULL, 0, &shm.fd, 1,
			  NULL, false);
	json_decref(req);
	if (r < 0) {
		shm_region_release(&shm);
		return NULL;
	}
	c->regions[c->nregions].id = id;
	c->regions[c->nregions].shm = shm;
	c->nregions++;
	return shm.base;
}

static void ckpt__tensor_drop(ckpt_client *c, size_t i)
{
	free(c->tensors[i].group);
	free(c->tensors[i].name);
	c->tensors[i] = c->tensors[--c->ntensors];
}

static ssize_t ckpt__tensor_find(ckpt_client *c, const char *group,
				 const char *name)
{
	for (size_t i = 0; i < c->ntensors; i++)
		if (strcmp(c->tensors[i].group, group) == 0 &&
		    strcmp(c->tensors[i].name, name) == 0)
			return (ssize_t)i;
	return -1;
}

int ckpt_free(ckpt_client *c, void *ptr)
{
	size_t i;
	json_t *req;
	int r;

	if (!c)
		return -EINVAL;
	for (i = 0; i < c->nregions; i++)
		if (c->regions[i].shm.base == ptr)
			break;
	if (!ptr || i == c->nregions)
		return ckpt__fail(c, -EINVAL, "ckpt_free: pointer was not "
				  "returned by ckpt_alloc() on this handle");

	/* If the daemon refuses, the memory stays valid and registered.  If
	 * the connection is gone, the daemon has dropped the region anyway. */
	req = json_pack("{s:I}", "region", (json_int_t)c->regions[i].id);
	r = ckpt__request(c, PROTO_REGION_DEL, req, NULL, 0, NULL, 0, NULL,
			  false);
	json_decref(req);
	if (r < 0 && !c->broken)
		return r;

	for (size_t t = c->ntensors; t-- > 0;)
		if (c->tensors[t].region == c->regions[i].id)
			ckpt__tensor_drop(c, t);
	shm_region_release(&c->regions[i].shm);
	c->regions[i] = c->regions[--c->nregions];
	return 0;
}

/* nbytes = prod(shape) * element size, refusing overflow. */
static int ckpt__tensor_nbytes(ckpt_client *c, ckpt_dtype dtype, int ndim,
			       const int64_t *shape, size_t *out)
{
	size_t n;

	if ((unsigned)dtype >= CKPT_DTYPE_COUNT)
		return ckpt__fail(c, -EINVAL, "unknown dtype %d", (int)dtype);
	if (ndim < 0 || ndim > CKPT_MAX_NDIM)
		return ckpt__fail(c, -EINVAL, "ndim %d is outside 0..%d", ndim,
				  CKPT_MAX_NDIM);
	if (ndim > 0 && !shape)
		return ckpt__fail(c, -EINVAL, "shape is NULL");
	n = ckpt__dtype_sizes[dtype];
	for (int i = 0; i < ndim; i++) {
		if (shape[i] < 0)
			return ckpt__fail(c, -EINVAL, "shape[%d] is negative "
					  "(%lld)", i, (long long)shape[i]);
		if (shape[i] && n > SIZE_MAX / (uint64_t)shape[i])
			return ckpt__fail(c, -EOVERFLOW, "tensor size overflows");
		n *= (size_t)shape[i];
	}
	*out = n;
	return 0;
}

static struct ckpt__region *ckpt__region_containing(ckpt_client *c,
						    const void *ptr,
						    size_t nbytes)
{
	uintptr_t p = (uintptr_t)ptr;

	for (size_t i = 0; i < c->nregions; i++) {
		uintptr_t base = (uintptr_t)c->regions[i].shm.base;
		size_t size = c->regions[i].shm.size;

		if (p >= base && p - base <= size && nbytes <= size - (p - base))
			return &c->regions[i];
	}
	return NULL;
}

/* CUDA device memory: find the region of the allocation holding ptr, or
 * export the allocation to ckptd as a new region.  An IPC allocation seen
 * before at the same base with other handle bytes was freed and the address
 * reused: its region (and the tensors in it) is dropped first. */
static int ckpt__gpu_region(ckpt_client *c, const void *ptr, size_t nbytes,
			    uint64_t *id, uint64_t *offset)
{
	struct gpu_client_export *ex;
	struct gpu_client_mem mem;
	char why[512];
	uint64_t rid;
	json_t *req;
	int r = gpu_client_describe(ptr, nbytes, &mem);

	if (r < 0)
		return ckpt__fail(c, -EINVAL, "pointer is not inside memory "
				  "from ckpt_alloc() and is not CUDA device "
				  "memory%s%s", gpu_client_reason()[0] ? " (" : "",
				  gpu_client_reason()[0] ? gpu_client_reason() : "");
	if (!c->daemon_gpu)
		return ckpt__fail(c, -EOPNOTSUPP, "this is CUDA memory but ckptd has "
				  "no GPU: run ckptd where the GPU is visible, or "
				  "register host memory from ckpt_alloc()");
	if (!(ex = malloc(sizeof(*ex))))
		return ckpt__fail(c, -ENOMEM, "out of memory");
	if ((r = gpu_client_export(&mem, ex, why, sizeof(why))) < 0) {
		free(ex);
		return ckpt__fail(c, r, "cannot register CUDA memory: %s", why);
	}
	for (size_t i = 0; i < c->ngpu; i++) {
		struct ckpt__gpu_region *g = &c->gpu[i];
		if (g->base != ex->base || g->kind != ex->kind)
			continue;
		if (g->size == ex->size && !memcmp(g->key, ex->key, sizeof(g->key))) {
			*id = g->id;
			*offset = ex->offset;
			gpu_client_export_release(ex);
			free(ex);
			return 0;
		}
		if (ex->kind == GPU_CLIENT_IPC) {     /* freed, address reused */
			req = json_pack("{s:I}", "region", (json_int_t)g->id);
			(void)ckpt__request(c, PROTO_REGION_DEL, req, NULL, 0, NULL, 0,
					    NULL, false);
			json_decref(req);
			for (size_t t = c->ntensors; t-- > 0;)
				if (c->tensors[t].region == g->id)
					ckpt__tensor_drop(c, t);
			c->gpu[i] = c->gpu[--c->ngpu];
			break;
		}
	}
	if (ckpt__grow((void **)&c->gpu, &c->cap_gpu, c->ngpu + 1, sizeof(*c->gpu)) < 0) {
		gpu_client_export_release(ex);
		free(ex);
		return ckpt__fail(c, -ENOMEM, "out of memory");
	}
	rid = ++c->next_region;
	r = 0;
	if (ex->kind == GPU_CLIENT_IPC) {
		req = gpu_client_region_json(ex, rid, 0, 0);
		r = ckpt__request(c, PROTO_CUDA_REGION_ADD, req, NULL, 0, NULL, 0,
				  NULL, false);
		json_decref(req);
	}
	for (unsigned k = 0; ex->kind == GPU_CLIENT_VMM && r == 0 && k < ex->nchunks;
	     k += GPU_CLIENT_FDS_PER_MSG) {
		unsigned n = ex->nchunks - k < GPU_CLIENT_FDS_PER_MSG ?
			     ex->nchunks - k : GPU_CLIENT_FDS_PER_MSG;
		req = gpu_client_region_json(ex, rid, k, n);
		r = ckpt__request(c, PROTO_CUDA_REGION_ADD, req, NULL, 0, ex->fds + k,
				  n, NULL, false);
		json_decref(req);
	}
	if (r == 0) {
		struct ckpt__gpu_region *g = &c->gpu[c->ngpu++];
		g->id = rid;
		g->kind = ex->kind;
		g->base = ex->base;
		g->size = ex->size;
		memcpy(g->key, ex->key, sizeof(g->key));
		*id = rid;
		*offset = ex->offset;
	}
	gpu_client_export_release(ex);    /* ckptd has its own copies */
	free(ex);
	return r;
}

static int ckpt__tensor_remember(ckpt_client *c, const char *group,
				 const char *name, uint64_t region)
{
	ssize_t i = ckpt__tensor_find(c, group, name);
	struct ckpt__tensor t;

	if (i >= 0) {
		c->tensors[i].region = region;
		return 0;
	}
	if (ckpt__grow((void **)&c->tensors, &c->cap_tensors, c->ntensors + 1,
		       sizeof(*c->tensors)) < 0)
		return -ENOMEM;
	t.group = strdup(group);
	t.name = strdup(name);
	t.region = region;
	if (!t.group || !t.name) {
		free(t.group);
		free(t.name);
		return -ENOMEM;
	}
	c->tensors[c->ntensors++] = t;
	return 0;
}

int ckpt_register(ckpt_client *c, const char *group, const char *name,
		  const void *ptr, ckpt_dtype dtype, int ndim,
		  const int64_t *shape)
{
	struct ckpt__region *reg;
	json_t *req, *jshape;
	size_t nbytes = 0;
	uint64_t rid, off;
	int r;

	if (!c)
		return -EINVAL;
	if ((r = ckpt__check_name(c, "group", group, CKPT__MAX_GROUP)) < 0 ||
	    (r = ckpt__check_tensor_name(c, name)) < 0 ||
	    (r = ckpt__tensor_nbytes(c, dtype, ndim, shape, &nbytes)) < 0)
		return r;
	reg = ckpt__region_containing(c, ptr, nbytes);
	if (reg) {
		rid = reg->id;
		off = (uint64_t)((uintptr_t)ptr - (uintptr_t)reg->shm.base);
	} else if ((r = ckpt__gpu_region(c, ptr, nbytes, &rid, &off)) < 0) {
		return r;
	}

	jshape = json_array();
	for (int i = 0; jshape && i < ndim; i++)
		json_array_append_new(jshape, json_integer(shape[i]));
	req = json_pack("{s:s, s:s, s:s, s:o, s:I, s:I}", "group", group,
			"name", name, "dtype", ckpt__dtype_names[dtype],
			"shape", jshape, "region", (json_int_t)rid,
			"offset", (json_int_t)off);
	r = ckpt__request(c, PROTO_TENSOR_REG, req, NULL, 0, NULL, 0, NULL,
			  false);
	json_decref(req);
	if (r < 0)
		return r;
	/* Registered with the daemon; our list only serves ckpt_free(), so
	 * running out of memory here costs nothing worse than a stale entry. */
	(void)ckpt__tensor_remember(c, group, name, rid);
	return 0;
}

/* A CUDA region without tensors goes: ckptd's mapping would otherwise keep
 * the GPU memory alive after the trainer frees it. */
static void ckpt__gpu_region_gc(ckpt_client *c, uint64_t rid)
{
	json_t *req;

	for (size_t t = 0; t < c->ntensors; t++)
		if (c->tensors[t].region == rid)
			return;
	for (size_t g = 0; g < c->ngpu; g++) {
		if (c->gpu[g].id != rid)
			continue;
		req = json_pack("{s:I}", "region", (json_int_t)rid);
		(void)ckpt__request(c, PROTO_REGION_DEL, req, NULL, 0, NULL, 0, NULL, false);
		json_decref(req);
		c->gpu[g] = c->gpu[--c->ngpu];
		return;
	}
}

int ckpt_unregister(ckpt_client *c, const char *group, const char *name)
{
	json_t *req;
	ssize_t i;
	int r;

	if (!c)
		return -EINVAL;
	if ((r = ckpt__check_name(c, "group", group, CKPT__MAX_GROUP)) < 0 ||
	    (r = ckpt__check_tensor_name(c, name)) < 0)
		return r;
	req = json_pack("{s:s, s:s}", "group", group, "name", name);
	r = ckpt__request(c, PROTO_TENSOR_DEL, req, NULL, 0, NULL, 0, NULL,
			  false);
	json_decref(req);
	if (r < 0)
		return r;
	i = ckpt__tensor_find(c, group, name);
	if (i >= 0) {
		uint64_t rid = c->tensors[i].region;
		ckpt__tensor_drop(c, (size_t)i);
		ckpt__gpu_region_gc(c, rid);
	}
	return 0;
}

int ckpt_put_blob(ckpt_client *c, const char *name, const void *data,
		  size_t len)
{
	json_t *req;
	int r;

	if (!c)
		return -EINVAL;
	if ((r = ckpt__check_name(c, "blob", name, CKPT__MAX_BLOB)) < 0)
		return r;
	if (!data && len)
		return ckpt__fail(c, -EINVAL, "blob data is NULL");
	/* Room for the JSON part: {"name":"<128 bytes>"} */
	if (len > c->max_payload - 1024)
		return ckpt__fail(c, -EMSGSIZE, "blob '%s' is %zu bytes; ckptd "
				  "takes at most %u", name, len,
				  c->max_payload - 1024);
	req = json_pack("{s:s}", "name", name);
	r = ckpt__request(c, PROTO_BLOB_PUT, req, data, len, NULL, 0, NULL,
			  false);
	json_decref(req);
	return r;
}

/* --- saves --------------------------------------------------------------- */

int ckpt_save(ckpt_client *c, uint64_t step, uint64_t *ticket)
{
	struct ckpt__reply rep = { 0 };
	struct ckpt__ticket *t;
	uint64_t id;
	json_t *req;
	int r;

	if (!c)
		return -EINVAL;
	if (step > (uint64_t)INT64_MAX)
		return ckpt__fail(c, -EINVAL, "step %llu is too large",
				  (unsigned long long)step);
	req = json_pack("{s:I}", "step", (json_int_t)step);
	r = ckpt__request(c, PROTO_SAVE, req, NULL, 0, NULL, 0, &rep, false);
	json_decref(req);
	if (r < 0)
		return r;
	if (ckpt__json_u64(rep.json, "ticket", &id) < 0) {
		ckpt__reply_release(&rep);
		return ckpt__fail(c, -EPROTO, "ckptd's SAVE reply has no ticket");
	}
	ckpt__reply_release(&rep);

	/* Events for it may already have arrived: keep what they said. */
	t = ckpt__ticket_get(c, id);
	if (!t)
		return ckpt__fail(c, -ENOMEM, "out of memory");
	t->known = true;
	t->step = step;
	if (ticket)
		*ticket = id;
	return 0;
}

/* Take in queued events without waiting (the host never blocks here). */
static void ckpt__poll_events(ckpt_client *c)
{
	struct proto_msg m;

	while (ckpt__next_msg(c, &m, ckpt__now_ms()) == 1) {
		ckpt__msg_close_fds(&m);
		if (m.hdr.type == PROTO_EVENT)
			ckpt__on_event(c, &m);
	}
}

/* Slots whose save is STAGED or failed may be recorded again. */
static void ckpt__ring_reap(ckpt_client *c)
{
	for (unsigned i = 0; i < GPU_CLIENT_RING; i++) {
		struct ckpt__ticket *t;
		if (!c->ring.busy[i] || !c->ring.ticket[i])
			continue;
		t = ckpt__ticket_find(c, c->ring.ticket[i]);
		if (!t || t->error || t->phase >= CKPT_STAGED)
			gpu_ring_release(&c->ring, i);
	}
}

int ckpt_save_stream(ckpt_client *c, uint64_t step, void *cuda_stream,
		     uint64_t *ticket)
{
	struct ckpt__reply rep = { 0 };
	struct ckpt__ticket *t;
	uint8_t uuid[16], ready[GPU_CLIENT_HANDLE], done[GPU_CLIENT_HANDLE];
	char why[512], uuid_s[41], ready_s[2 * GPU_CLIENT_HANDLE + 1];
	uint64_t id;
	json_t *req;
	int slot, r;

	if (!c)
		return -EINVAL;
	if ((r = ckpt__check_owner(c)) < 0)
		return r;
	if (step > (uint64_t)INT64_MAX)
		return ckpt__fail(c, -EINVAL, "step %llu is too large",
				  (unsigned long long)step);
	if (!c->daemon_gpu)
		return ckpt__fail(c, -EOPNOTSUPP, "ckptd has no GPU: use ckpt_save()");
	ckpt__ring_reap(c);
	if ((slot = gpu_ring_acquire(&c->ring)) < 0) {
		ckpt__poll_events(c);
		ckpt__ring_reap(c);
		if ((slot = gpu_ring_acquire(&c->ring)) < 0)
			return ckpt__fail(c, -EBUSY, "%d stream saves are still being "
					  "staged: wait for one with ckpt_wait(..., "
					  "CKPT_STAGED, ...)", GPU_CLIENT_RING);
	}
	if ((r = gpu_ring_record(&c->ring, (unsigned)slot, cuda_stream, uuid, ready,
				 why, sizeof(why))) < 0) {
		gpu_ring_release(&c->ring, (unsigned)slot);
		return ckpt__fail(c, r, "ckpt_save_stream: %s", why);
	}
	gpu_client_uuid_str(uuid, uuid_s);
	gpu_client_hex(ready, sizeof(ready), ready_s);
	req = json_pack("{s:I, s:{s:s, s:i, s:s}}", "step", (json_int_t)step, "cuda",
			"gpu", uuid_s, "slot", slot, "ready", ready_s);
	r = ckpt__request(c, PROTO_SAVE, req, NULL, 0, NULL, 0, &rep, false);
	json_decref(req);
	if (r < 0) {
		gpu_ring_release(&c->ring, (unsigned)slot);
		return r;
	}
	if (ckpt__json_u64(rep.json, "ticket", &id) < 0 ||
	    gpu_client_unhex(json_string_value(json_object_get(rep.json, "done")),
			     done, sizeof(done)) < 0) {
		ckpt__reply_release(&rep);
		/* the slot stays busy: ckptd may still record on it */
		return ckpt__fail(c, -EPROTO, "ckptd's SAVE reply lacks \"ticket\" "
				  "or \"done\"");
	}
	ckpt__reply_release(&rep);
	gpu_ring_bind(&c->ring, (unsigned)slot, id);
	t = ckpt__ticket_get(c, id);
	if (!t)
		return ckpt__fail(c, -ENOMEM, "out of memory");
	t->known = true;
	t->step = step;
	/* The training stream goes on once ckptd has staged the tensors; the
	 * save is accepted even if this fails (the caller should then wait
	 * for STAGED on the host before writing the tensors). */
	if ((r = gpu_ring_wait(&c->ring, (unsigned)slot, cuda_stream, done, why,
			       sizeof(why))) < 0)
		return ckpt__fail(c, r, "save %llu accepted, but the stream cannot "
				  "wait for it (%s): ckpt_wait() for CKPT_STAGED "
				  "before changing the tensors", (unsigned long long)id, why);
	if (ticket)
		*ticket = id;
	return 0;
}

static const char *ckpt__phase_name(int phase)
{
	switch (phase) {
	case CKPT_STAGED:    return "staged";
	case CKPT_DURABLE:   return "durable";
	case CKPT_COMMITTED: return "committed";
	default:             return "?";
	}
}

static struct ckpt__ticket *ckpt__ticket_known(ckpt_client *c, uint64_t id)
{
	struct ckpt__ticket *t = ckpt__ticket_find(c, id);

	return t && t->known ? t : NULL;
}

/* Has the save reached phase?  1 yes, 0 not yet, < 0 its error. */
static int ckpt__ticket_done(ckpt_client *c, struct ckpt__ticket *t,
			     ckpt_phase phase)
{
	if (t->phase >= (int)phase)
		return 1;
	if (!t->error)
		return 0;
	if (t->message)
		return ckpt__fail(c, t->error, "%s", t->message);
	return ckpt__fail(c, t->error, "save of step %llu failed: %s",
			  (unsigned long long)t->step,
			  ckpt_strerror(t->error));
}

int ckpt_wait(ckpt_client *c, uint64_t ticket, ckpt_phase phase,
	      int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : ckpt__now_ms() + timeout_ms;
	uint64_t step;
	int r;

	if (!c)
		return -EINVAL;
	if (phase < CKPT_STAGED || phase > CKPT_COMMITTED)
		return ckpt__fail(c, -EINVAL, "unknown phase %d", (int)phase);
	if ((r = ckpt__check_owner(c)) < 0)
		return r;

	for (;;) {
		/* Looked up again each time: events may move the array. */
		struct ckpt__ticket *t = ckpt__ticket_known(c, ticket);
		struct proto_msg m;

		if (!t)
			return ckpt__fail(c, -ENOENT, "no save with ticket %llu "
					  "on this handle",
					  (unsigned long long)ticket);
		r = ckpt__ticket_done(c, t, phase);
		if (r != 0)
			return r < 0 ? r : 0;
		step = t->step;

		r = ckpt__next_msg(c, &m, deadline);
		if (r == -EAGAIN)
			return ckpt__fail(c, -EAGAIN, "timed out waiting for "
					  "step %llu to be %s",
					  (unsigned long long)step,
					  ckpt__phase_name(phase));
		if (r < 0)
			return r;
		ckpt__msg_close_fds(&m);
		if (m.hdr.type == PROTO_EVENT)
			ckpt__on_event(c, &m);
	}
}

int ckpt_times(ckpt_client *c, uint64_t ticket, struct ckpt_times *out)
{
	struct ckpt__ticket *t;

	if (!c || !out)
		return -EINVAL;
	t = ckpt__ticket_known(c, ticket);
	if (!t)
		return ckpt__fail(c, -ENOENT, "no save with ticket %llu on this "
				  "handle", (unsigned long long)ticket);
	*out = t->times;
	return 0;
}

/* --- restore ------------------------------------------------------------- */

/* Slice the reply's binary part into blobs by the "blobs" lengths; on
 * success they replace the previous restore's. */
static int ckpt__blobs_take(ckpt_client *c, const json_t *list,
			    const uint8_t *bin, size_t blen)
{
	size_t n = json_array_size(list), off = 0;
	struct ckpt__blob *b;

	if (list && !json_is_array(list))
		goto out_bad;
	b = calloc(n ? n : 1, sizeof(*b));
	if (!b)
		return ckpt__fail(c, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(list, i);
		const char *name = json_string_value(json_object_get(e, "name"));
		uint64_t len;

		if (!name || ckpt__json_u64(e, "len", &len) < 0 ||
		    len > blen - off)
			goto out_free_blobs;
		b[i].name = strdup(name);
		b[i].data = malloc(len ? len : 1);
		if (!b[i].name || !b[i].data) {
			free(b[i].name);
			free(b[i].data);
			n = i;
			goto out_free_oom;
		}
		memcpy(b[i].data, bin + off, len);
		b[i].len = len;
		off += len;
	}
	if (off != blen)
		goto out_free_blobs;
	ckpt__blobs_clear(c);
	c->blobs = b;
	c->nblobs = n;
	return 0;

out_free_oom:
	for (size_t i = 0; i < n; i++) {
		free(b[i].name);
		free(b[i].data);
	}
	free(b);
	return ckpt__fail(c, -ENOMEM, "out of memory");
out_free_blobs:
	for (size_t i = 0; i < n; i++) {
		free(b[i].name);
		free(b[i].data);
	}
	free(b);
out_bad:
	return ckpt__fail(c, -EPROTO, "ckptd's RESTORE reply has malformed "
			  "blobs");
}

/* Append "<sep><label> a, b, c" to buf for a non-empty list of names.
 * Entries are "group/name" strings or {"group", "name"} objects. */
static void ckpt__append_names(char *buf, size_t cap, size_t *len,
			       const char *sep, const char *label,
			       const json_t *list)
{
	size_t i;
	json_t *e;

	if (json_array_size(list) == 0)
		return;
	*len += snprintf(buf + *len, cap - *len, "%s%s ", sep, label);
	json_array_foreach(list, i, e) {
		const char *g = json_string_value(json_object_get(e, "group"));
		const char *n = json_string_value(json_object_get(e, "name"));

		if (*len >= cap)
			break;
		if (json_is_string(e))
			*len += snprintf(buf + *len, cap - *len, "%s%s",
					 i ? ", " : "", json_string_value(e));
		else if (g && n)
			*len += snprintf(buf + *len, cap - *len, "%s%s/%s",
					 i ? ", " : "", g, n);
	}
	if (*len >= cap)
		*len = cap - 1;
}

/* What a successful restore has to tell, kept as ckpt_last_error(): the
 * tensors left out of a partial restore, e.g. "partial restore: missing
 * model/w2; unexpected optim/m", and newer checkpoints passed over because
 * they did not verify. */
static void ckpt__restore_report(ckpt_client *c, const json_t *rep)
{
	const json_t *missing = json_object_get(rep, "missing");
	const json_t *unexpected = json_object_get(rep, "unexpected");
	char buf[CKPT__ERR_LEN] = "";
	size_t len = 0, i;
	json_t *e;

	if (json_array_size(missing) || json_array_size(unexpected)) {
		len = snprintf(buf, sizeof(buf), "partial restore:");
		ckpt__append_names(buf, sizeof(buf), &len, " ", "missing",
				   missing);
		ckpt__append_names(buf, sizeof(buf), &len,
				   json_array_size(missing) ? "; " : " ",
				   "unexpected", unexpected);
	}
	json_array_foreach(json_object_get(rep, "skipped"), i, e) {
		const char *why = json_string_value(json_object_get(e, "reason"));
		uint64_t step;

		if (len >= sizeof(buf) - 1 ||
		    ckpt__json_u64(e, "step", &step) < 0)
			continue;
		len += snprintf(buf + len, sizeof(buf) - len,
				"%sskipped step %llu: %s", len ? "; " : "",
				(unsigned long long)step,
				why ? why : "did not verify");
	}
	if (buf[0])
		ckpt__fail(c, 0, "%s", buf);
}

int ckpt_restore(ckpt_client *c, int64_t step, unsigned flags,
		 uint64_t *restored_step)
{
	struct ckpt__reply rep = { 0 };
	uint64_t got;
	json_t *req;
	int r;

	if (!c)
		return -EINVAL;
	if (step < CKPT_LATEST)
		return ckpt__fail(c, -EINVAL, "step %lld is not a step or "
				  "CKPT_LATEST", (long long)step);
	if (flags & ~CKPT_PARTIAL)
		return ckpt__fail(c, -EINVAL, "unknown flags 0x%x",
				  flags & ~CKPT_PARTIAL);
	req = json_pack("{s:I, s:b}", "step", (json_int_t)step,
			"partial", (flags & CKPT_PARTIAL) != 0);
	r = ckpt__request(c, PROTO_RESTORE, req, NULL, 0, NULL, 0, &rep, true);
	json_decref(req);
	if (r < 0)
		return r;

	if (ckpt__json_u64(rep.json, "step", &got) < 0) {
		r = ckpt__fail(c, -EPROTO, "ckptd's RESTORE reply has no step");
		goto out_release;
	}
	r = ckpt__blobs_take(c, json_object_get(rep.json, "blobs"), rep.bin,
			     rep.blen);
	if (r < 0)
		goto out_release;
	c->err[0] = '\0';    /* success: no earlier failure's text remains */
	ckpt__restore_report(c, rep.json);
	if (restored_step)
		*restored_step = got;
out_release:
	ckpt__reply_release(&rep);
	return r;
}

int ckpt_get_blob(ckpt_client *c, const char *name, void *buf, size_t cap,
		  size_t *len)
{
	if (!c || !name || (cap && !buf))
		return -EINVAL;
	for (size_t i = 0; i < c->nblobs; i++) {
		const struct ckpt__blob *b = &c->blobs[i];

		if (strcmp(b->name, name) != 0)
			continue;
		if (cap)
			memcpy(buf, b->data, b->len < cap ? b->len : cap);
		if (len)
			*len = b->len;
		return 0;
	}
	return ckpt__fail(c, -ENOENT, "the last restore brought no blob "
			  "named '%s'", name);
}

/* --- errors -------------------------------------------------------------- */

const char *ckpt_strerror(int err)
{
	static __thread char buf[128];

	if (err == 0)
		return "success";
	if (err == INT_MIN)
		return "unknown error";
	if (err < 0)
		err = -err;
	switch (err) {
	case ECANCELED:    return "save aborted because another rank failed";
	case ETIMEDOUT:    return "a rank missed the save deadline";
	case EAGAIN:       return "timed out waiting";
	case EPERM:        return "not permitted (the job belongs to another "
				  "user?)";
	case ENOSPC:       return "no space left for the checkpoint";
	case EIO:          return "I/O error on the checkpoint storage";
	case EBADMSG:      return "checkpoint data is corrupt (size or "
				  "checksum mismatch)";
	case ENOENT:       return "no such checkpoint, ticket or name";
	case ECONNRESET:
	case EPIPE:        return "the connection to ckptd was lost";
	case ECONNREFUSED: return "ckptd is not running (connection refused)";
	case EPROTO:       return "protocol error talking to ckptd";
	case EPROTONOSUPPORT: return "ckptd speaks another protocol version";
	case EMSGSIZE:     return "message too large for ckptd";
	case EOPNOTSUPP:   return "not supported";
	case EINVAL:       return "invalid argument";
	case ENOMEM:       return "out of memory";
	}
	return strerror_r(err, buf, sizeof(buf));   /* GNU: may not use buf */
}

const char *ckpt_last_error(const ckpt_client *c)
{
	return c ? c->err : ckpt__connect_err;
}
