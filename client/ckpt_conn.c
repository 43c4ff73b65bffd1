/* ckpt_conn.c - the client side of ckptd's socket, shared by libckpt and
 * ckptctl: connect, send a request, read messages with a deadline and wait
 * for the reply to a request, handing EVENTs met on the way to a callback.
 * Never prints or exits; a connection that broke keeps its reason.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_int.h"

int64_t ckpt__now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ckpt__json_u64(const json_t *o, const char *key, uint64_t *out)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -EPROTO;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

void ckpt__msg_close_fds(struct proto_msg *m)
{
	for (unsigned i = 0; i < m->nfds; i++)
		close(m->fds[i]);
	m->nfds = 0;
}

void ckpt__conn_init(struct ckpt__conn *k, uint32_t max_payload)
{
	memset(k, 0, sizeof(*k));
	k->fd = -1;
	proto_reader_init(&k->rd, max_payload);
}

int ckpt__conn_open(struct ckpt__conn *k, const char *path, char *err,
		    size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int r;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path '%s' is too long", path);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	k->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (k->fd < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot create a socket: %s", strerror(-r));
		return r;
	}
	if (connect(k->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		/* EACCES: ckptd is there, but only its group may connect */
		snprintf(err, errlen, "cannot connect to %s: %s (%s)", path,
			 strerror(-r), r == -EACCES ? "the socket is open to "
			 "ckptd's group only: join it (the service's is 'ckpt')" :
			 "is ckptd running?");
		return r;
	}
	return 0;
}

void ckpt__conn_release(struct ckpt__conn *k)
{
	if (!k)
		return;
	if (k->fd >= 0)
		close(k->fd);
	k->fd = -1;
	proto_reader_release(&k->rd);
}

/* Mark the connection unusable: every later call returns err at once. */
static int ckpt__conn_break(struct ckpt__conn *k, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int ckpt__conn_break(struct ckpt__conn *k, int err, const char *fmt, ...)
{
	va_list ap;

	if (!k->broken) {
		k->broken = err;
		va_start(ap, fmt);
		vsnprintf(k->why, sizeof(k->why), fmt, ap);
		va_end(ap);
	}
	return k->broken;
}

int ckpt__conn_send(struct ckpt__conn *k, uint16_t type, const json_t *req,
		    const void *bin, size_t blen, const int *fds,
		    unsigned nfds, uint64_t *req_id)
{
	uint64_t id;
	char *js;
	int r;

	if (k->broken)
		return k->broken;
	if (!req || !(js = json_dumps(req, JSON_COMPACT)))
		return -ENOMEM;
	id = ++k->next_req;
	r = proto_send(k->fd, type, id, 0, js, strlen(js), bin, blen, fds,
		       nfds);
	free(js);
	if (r == -EMSGSIZE || r == -EINVAL || r == -ENOMEM)
		return r;
	if (r < 0)
		return ckpt__conn_break(k, r, "cannot send %s to ckptd: %s",
					proto_type_name(type), strerror(-r));
	*req_id = id;
	return 0;
}

/* Wait until the socket is readable or deadline_ms passes.  0 when
 * readable, -EAGAIN on timeout. */
static int ckpt__conn_wait_readable(struct ckpt__conn *k, int64_t deadline_ms)
{
	for (;;) {
		struct pollfd p = { .fd = k->fd, .events = POLLIN };
		int64_t left = deadline_ms - ckpt__now_ms();
		int r;

		if (left < 0)
			left = 0;
		if (left > INT_MAX)
			left = INT_MAX;
		r = poll(&p, 1, (int)left);
		if (r > 0)
			return 0;
		if (r == 0)
			return -EAGAIN;
		if (errno != EINTR)
			return ckpt__conn_break(k, -errno, "poll: %s",
						strerror(errno));
	}
}

int ckpt__conn_next(struct ckpt__conn *k, struct proto_msg *m,
		    int64_t deadline_ms)
{
	if (k->broken)
		return k->broken;
	for (;;) {
		char why[64] = "";
		int r = proto_next(&k->rd, m, NULL, why, sizeof(why));

		if (r == 1)
			return 1;
		if (r < 0)
			return ckpt__conn_break(k, r, "bad message from ckptd: %s",
						*why ? why : "malformed message");
		if (deadline_ms >= 0) {
			r = ckpt__conn_wait_readable(k, deadline_ms);
			if (r < 0)
				return r;
		}
		r = proto_read(&k->rd, k->fd);
		if (r > 0 || r == -EINTR || r == -EAGAIN)
			continue;
		if (r == 0)
			return ckpt__conn_break(k, -ECONNRESET, "%s",
						"ckptd closed the connection");
		return ckpt__conn_break(k, r, "cannot read from ckptd: %s",
					strerror(-r));
	}
}

/* Fill *out from a reply message of type. */
static int ckpt__reply_take(const struct proto_msg *m, bool want_bin,
			    struct ckpt__reply *out)
{
	memset(out, 0, sizeof(*out));
	out->status = m->hdr.status;
	if (m->hdr.type == PROTO_ERROR && out->status >= 0)
		out->status = -EPROTO;
	if (out->status <= -4096)
		out->status = -EPROTO;
	out->json = m->hdr.jlen ? json_loadb(m->json, m->hdr.jlen, 0, NULL)
				: json_object();
	if (out->status < 0)
		return 0;                 /* the reason is optional */
	if (!json_is_object(out->json)) {
		json_decref(out->json);
		out->json = NULL;
		return -EPROTO;
	}
	if (want_bin && m->blen) {
		out->bin = malloc(m->blen);
		if (!out->bin) {
			json_decref(out->json);
			out->json = NULL;
			return -ENOMEM;
		}
		memcpy(out->bin, m->bin, m->blen);
		out->blen = m->blen;
	}
	return 0;
}

int ckpt__conn_await(struct ckpt__conn *k, uint16_t type, uint64_t req_id,
		     int64_t deadline_ms, bool want_bin,
		     ckpt__event_fn on_event, void *arg,
		     struct ckpt__reply *out)
{
	for (;;) {
		struct proto_msg m;
		int r = ckpt__conn_next(k, &m, deadline_ms);

		if (r < 0)
			return r;
		ckpt__msg_close_fds(&m);        /* replies carry none we use */
		if (m.hdr.type == PROTO_EVENT ||
		    (m.hdr.type == PROTO_RESTORE_PART && type == PROTO_RESTORE &&
		     m.hdr.req_id == req_id)) {
			if (on_event)
				on_event(arg, &m);
			continue;
		}
		/* An ERROR without a request id is about the connection as a
		 * whole (ckptd sends it before closing): it answers this too. */
		if (m.hdr.type == PROTO_ERROR &&
		    (m.hdr.req_id == req_id || m.hdr.req_id == 0))
			return ckpt__reply_take(&m, false, out);
		if (m.hdr.type != (type | PROTO_REPLY) || m.hdr.req_id != req_id)
			continue;                /* stray reply: not ours */
		return ckpt__reply_take(&m, want_bin, out);
	}
}

const char *ckpt__reply_why(const struct ckpt__reply *rep)
{
	const char *why = json_string_value(json_object_get(rep->json, "error"));

	return why ? why : "";
}

void ckpt__reply_release(struct ckpt__reply *rep)
{
	json_decref(rep->json);
	free(rep->bin);
	rep->json = NULL;
	rep->bin = NULL;
}
