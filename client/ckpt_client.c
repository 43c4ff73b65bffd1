/* ckpt_client.c - the libckpt handle: connect and say HELLO, close, make
 * requests over the handle's connection, and keep the message of the last
 * failure for ckpt_last_error().  The library never logs, prints, exits or
 * aborts: it returns -errno and keeps a message.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_int.h"

/* ckpt_connect() fails without a handle to keep its message in; it goes
 * here instead and ckpt_last_error(NULL) returns it. */
static __thread char ckpt__connect_err[CKPT__ERR_LEN];

/* --- errors ---------------------------------------------------------------- */

int ckpt__fail(ckpt_client *c, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return err;
}

/* The connection broke (now or earlier): say so, with what broke it. */
static int ckpt__lost(ckpt_client *c)
{
	return ckpt__fail(c, c->conn.broken, "lost the connection to ckptd: %s",
			  c->conn.why);
}

/* After fork() the child shares the socket: a request from it would
 * interleave with the parent's and corrupt both streams. */
int ckpt__check_owner(ckpt_client *c)
{
	if (getpid() == c->pid)
		return 0;
	return ckpt__fail(c, -ECHILD, "this handle belongs to process %d; a "
			  "forked child must call ckpt_connect() itself",
			  (int)c->pid);
}

int ckpt__grow(void **arr, size_t *cap, size_t need, size_t elem)
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
	case ENXIO:        return "the GPU or its driver failed (ckpt_last_error() "
				  "has the CUDA error)";
	case EBADMSG:      return "checkpoint data is corrupt (size or "
				  "checksum mismatch)";
	case ENOENT:       return "not found (no such checkpoint, ticket or name, "
				  "or no ckptd socket at that path)";
	case EUCLEAN:      return "the job has checkpoints, but none verifies";
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

/* --- requests -------------------------------------------------------------- */

int ckpt__next_msg(ckpt_client *c, struct proto_msg *m, int64_t deadline_ms)
{
	int r = ckpt__conn_next(&c->conn, m, deadline_ms);

	if (r < 0 && r != -EAGAIN)
		return ckpt__lost(c);
	return r;
}

int ckpt__request(ckpt_client *c, uint16_t type, json_t *req,
		  const void *bin, size_t blen, const int *fds,
		  unsigned nfds, struct ckpt__reply *out, bool want_bin)
{
	return ckpt__request_with(c, type, req, bin, blen, fds, nfds, out,
				  want_bin, ckpt__on_event, c);
}

int ckpt__request_with(ckpt_client *c, uint16_t type, json_t *req,
		       const void *bin, size_t blen, const int *fds,
		       unsigned nfds, struct ckpt__reply *out, bool want_bin,
		       ckpt__event_fn on_msg, void *arg)
{
	struct ckpt__reply rep;
	uint64_t req_id;
	int r;

	if ((r = ckpt__check_owner(c)) < 0)
		return r;
	if (c->conn.broken)
		return ckpt__fail(c, c->conn.broken, "the connection to ckptd "
				  "was lost earlier: reconnect");
	if (!req)
		return ckpt__fail(c, -ENOMEM, "out of memory");
	r = ckpt__conn_send(&c->conn, type, req, bin, blen, fds, nfds, &req_id);
	if (r < 0 && !c->conn.broken)
		return ckpt__fail(c, r, "cannot send %s: %s",
				  proto_type_name(type), strerror(-r));
	if (r < 0)
		return ckpt__lost(c);

	r = ckpt__conn_await(&c->conn, type, req_id, -1, want_bin, on_msg,
			     arg, &rep);
	if (r == -EPROTO)
		return ckpt__fail(c, r, "ckptd sent a malformed %s reply",
				  proto_type_name(type));
	if (r == -ENOMEM)
		return ckpt__fail(c, r, "out of memory for a %s reply",
				  proto_type_name(type));
	if (r < 0)
		return ckpt__lost(c);
	if (rep.status < 0) {
		r = rep.status;
		if (*ckpt__reply_why(&rep))
			ckpt__fail(c, r, "%s", ckpt__reply_why(&rep));
		else
			ckpt__fail(c, r, "ckptd refused %s: %s",
				   proto_type_name(type), strerror(-r));
		ckpt__reply_release(&rep);
		return r;
	}
	if (out)
		*out = rep;
	else
		ckpt__reply_release(&rep);
	return 0;
}

/* --- connect / close ------------------------------------------------------- */

static int ckpt__hello(ckpt_client *c, const char *job, int rank,
		       int world_size)
{
	struct ckpt__reply rep = { 0 };
	json_t *req, *gpu;
	uint64_t max;
	int r;

	req = json_pack("{s:i, s:i, s:s, s:s, s:i, s:i, s:I}",
			"version", PROTO_VERSION,
			"features", PROTO_FEAT_HOST_MEM | PROTO_FEAT_EVENTS |
			PROTO_FEAT_RESTORE_PARTS | PROTO_FEAT_GLOBAL | PROTO_FEAT_FROZEN,
			"role", "trainer", "job", job, "rank", rank,
			"world_size", world_size, "pid", (json_int_t)getpid());
	r = ckpt__request(c, PROTO_HELLO, req, NULL, 0, NULL, 0, &rep, false);
	json_decref(req);
	if (r < 0)
		return r;
	if (ckpt__json_u64(rep.json, "features", &max) == 0)
		c->daemon_features = (uint32_t)max;
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

void ckpt__blobs_clear(ckpt_client *c)
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
	/* before the socket closes: the gates' watcher tells ckptd we are
	 * done on it, and opens the gates once ckptd has let go (not from a
	 * forked child: the connection and the streams are the parent's) */
	if (c->pid == getpid())
		gpu_ring_destroy(&c->ring);
	ckpt__conn_release(&c->conn);
	for (size_t i = 0; i < c->nregions; i++)
		shm_region_release(&c->regions[i].shm);
	free(c->regions);
	for (size_t i = 0; i < c->ntensors; i++) {
		free(c->tensors[i].group);
		free(c->tensors[i].name);
	}
	free(c->tensors);
	nidx_release(&c->tensor_idx);
	ckpt__tickets_free(c);
	ckpt__blobs_clear(c);
	ckpt__restore_free(c->restore);
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
	c->pid = getpid();
	c->max_payload = PROTO_MAX_PAYLOAD;
	gpu_ring_init(&c->ring);
	ckpt__conn_init(&c->conn, PROTO_MAX_PAYLOAD);

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

	r = ckpt__conn_open(&c->conn, socket_path, c->err, sizeof(c->err));
	if (r < 0)
		goto out_free;
	c->ring.sock = c->conn.fd;        /* watched once stream saves start */
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
