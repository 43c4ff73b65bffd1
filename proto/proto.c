/* proto.c - encode, decode, send and receive ckpt wire messages.
 *
 * The reader never reads past the end of the message it is assembling: it
 * asks recvmsg() for at most the 40 header bytes, then (once the header has
 * been checked) for exactly the rest of that message.  So the buffer holds
 * at most one message, a bad header is refused before any of its payload is
 * read, the buffer is sized from a checked length, and proto_next() can hand
 * out pointers into the buffer without copying or keeping an offset: the
 * message stays where it is until the next proto_read() overwrites it.
 * The price is two recvmsg() calls per message, which is nothing next to
 * the JSON parsing the control messages need anyway.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "proto.h"

#define RD_FDS_MAX   (PROTO_MAX_FDS * 4)
#define RD_MIN_CAP   1024u
/* After a large message, an idle reader gives memory back down to this. */
#define RD_KEEP_CAP  (64u << 10)

/* --- header --------------------------------------------------------------- */

/* Explicit little-endian access: the wire format does not depend on the
 * host's byte order or on the compiler's struct layout. */
static void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t get_le64(const uint8_t *p)
{
	return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

static void hdr_encode(uint8_t out[PROTO_HDR_SIZE], const struct proto_hdr *h)
{
	put_le32(out + 0, h->magic);
	put_le16(out + 4, h->version);
	put_le16(out + 6, h->type);
	put_le32(out + 8, h->flags);
	put_le32(out + 12, h->len);
	put_le32(out + 16, h->jlen);
	put_le32(out + 20, (uint32_t)h->status);
	put_le64(out + 24, h->req_id);
	put_le32(out + 32, h->nfds);
	put_le32(out + 36, h->reserved);
}

static void hdr_decode(struct proto_hdr *h, const uint8_t in[PROTO_HDR_SIZE])
{
	h->magic = get_le32(in + 0);
	h->version = get_le16(in + 4);
	h->type = get_le16(in + 6);
	h->flags = get_le32(in + 8);
	h->len = get_le32(in + 12);
	h->jlen = get_le32(in + 16);
	h->status = (int32_t)get_le32(in + 20);
	h->req_id = get_le64(in + 24);
	h->nfds = get_le32(in + 32);
	h->reserved = get_le32(in + 36);
}

void proto_hdr_init(struct proto_hdr *h, uint16_t type, uint64_t req_id,
		    int32_t status, uint32_t jlen, uint32_t blen, uint32_t nfds)
{
	memset(h, 0, sizeof(*h));
	h->magic = PROTO_MAGIC;
	h->version = PROTO_VERSION;
	h->type = type;
	h->len = jlen + blen;
	h->jlen = jlen;
	h->status = status;
	h->req_id = req_id;
	h->nfds = nfds;
}

/* Returns err, with what is wrong in msg (may be NULL). */
static int bad_msg(char *msg, size_t msglen, const char *what, int err)
{
	if (msg && msglen)
		snprintf(msg, msglen, "%s", what);
	return err;
}

/* 0 means "the hard ceiling"; nothing may raise the ceiling. */
static uint32_t clamp_max(uint32_t max_payload)
{
	if (max_payload == 0 || max_payload > PROTO_MAX_PAYLOAD)
		return PROTO_MAX_PAYLOAD;
	return max_payload;
}

static int type_known(uint16_t type)
{
	uint16_t base = type & (uint16_t)~PROTO_REPLY;

	return base >= 1 && base < PROTO_TYPE_MAX;
}

int proto_hdr_check(const struct proto_hdr *h, uint32_t max_payload,
		    char *msg, size_t msglen)
{
	if (h->magic != PROTO_MAGIC)
		return bad_msg(msg, msglen, "bad magic", -EPROTO);
	if (h->version != PROTO_VERSION)
		return bad_msg(msg, msglen, "unsupported protocol version",
			       -EPROTONOSUPPORT);
	if (h->flags != 0)
		return bad_msg(msg, msglen, "unknown flags set", -EPROTO);
	if (h->reserved != 0)
		return bad_msg(msg, msglen, "reserved field not zero", -EPROTO);
	if (h->jlen > h->len)
		return bad_msg(msg, msglen, "JSON length exceeds payload length", -EPROTO);
	if (h->len > clamp_max(max_payload))
		return bad_msg(msg, msglen, "payload too large", -EMSGSIZE);
	if (!type_known(h->type))
		return bad_msg(msg, msglen, "unknown message type", -EBADMSG);
	if (h->nfds > PROTO_MAX_FDS)
		return bad_msg(msg, msglen, "too many fds", -EBADMSG);
	return 0;
}

#define NAMES(X) X(HELLO) X(REGION_ADD) X(REGION_DEL) X(TENSOR_REG) \
	X(TENSOR_DEL) X(BLOB_PUT) X(SAVE) X(RESTORE) X(STATUS) X(FLUSH) \
	X(LIST) X(EVENT) X(PRUNE) X(ERROR) X(CUDA_REGION_ADD) X(RESTORE_PART) \
	X(REMOTE)

const char *proto_type_name(uint16_t type)
{
#define REQ(n) [PROTO_##n] = #n,
#define REP(n) [PROTO_##n] = #n "_REPLY",
	static const char *const req[PROTO_TYPE_MAX] = { NAMES(REQ) };
	static const char *const rep[PROTO_TYPE_MAX] = { NAMES(REP) };
#undef REQ
#undef REP
	uint16_t base = type & (uint16_t)~PROTO_REPLY;

	if (!type_known(type))
		return "UNKNOWN";
	return (type & PROTO_REPLY) ? rep[base] : req[base];
}

/* --- reader --------------------------------------------------------------- */

void proto_reader_init(struct proto_reader *r, uint32_t max_payload)
{
	memset(r, 0, sizeof(*r));
	for (unsigned i = 0; i < RD_FDS_MAX; i++)
		r->fds[i] = -1;
	r->max_payload = clamp_max(max_payload);
}

static void close_fds(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

void proto_reader_release(struct proto_reader *r)
{
	if (!r)
		return;
	close_fds(r->fds, r->nfds);
	free(r->buf);
	r->buf = NULL;
	r->cap = r->used = 0;
	r->nfds = 0;
}

/* Bytes the reader needs buffered before the current message is complete:
 * the header, then the header plus its payload.  A bad header stops the
 * reader (no more bytes are read) and is reported again by proto_next(). */
static int rd_need(const struct proto_reader *r, size_t *need,
		   struct proto_hdr *h, char *msg, size_t msglen)
{
	int rc;

	if (r->used < PROTO_HDR_SIZE) {
		*need = PROTO_HDR_SIZE;
		return 0;
	}
	hdr_decode(h, r->buf);
	rc = proto_hdr_check(h, r->max_payload, msg, msglen);
	if (rc < 0)
		return rc;
	*need = PROTO_HDR_SIZE + (size_t)h->len;
	return 0;
}

static int rd_reserve(struct proto_reader *r, size_t need)
{
	size_t limit = PROTO_HDR_SIZE + (size_t)r->max_payload;
	size_t ncap;
	uint8_t *nbuf;

	/* An idle reader drops the memory a big message made it grow to, so a
	 * connection that once sent a 16 MiB blob does not keep 16 MiB. */
	if (r->used == 0 && r->cap > RD_KEEP_CAP && need <= RD_KEEP_CAP) {
		nbuf = realloc(r->buf, RD_KEEP_CAP);
		if (nbuf) {
			r->buf = nbuf;
			r->cap = RD_KEEP_CAP;
		}
	}
	if (need <= r->cap)
		return 0;
	/* Geometric growth, but straight to `need` when that is bigger: the
	 * checked header tells us exactly how much is coming. */
	ncap = r->cap ? r->cap * 2 : RD_MIN_CAP;
	if (ncap < need)
		ncap = need;
	if (ncap > limit)
		ncap = limit;
	if (ncap < need)
		return -EMSGSIZE;   /* cannot happen after proto_hdr_check() */
	nbuf = realloc(r->buf, ncap);
	if (!nbuf)
		return -ENOMEM;
	r->buf = nbuf;
	r->cap = ncap;
	return 0;
}

int proto_read(struct proto_reader *r, int fd)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * RD_FDS_MAX)];
	} cbuf;
	struct proto_hdr h;
	struct msghdr mh;
	struct iovec iov;
	struct cmsghdr *c;
	int newfds[RD_FDS_MAX];
	unsigned nnew = 0;
	size_t need;
	ssize_t n;
	int rc;

	rc = rd_need(r, &need, &h, NULL, 0);
	if (rc < 0)
		return rc;
	/* A complete message is waiting: reading on would mix the next one
	 * into it.  The caller must drain proto_next() first. */
	if (r->used >= need)
		return -ENOBUFS;
	rc = rd_reserve(r, need);
	if (rc < 0)
		return rc;

	iov.iov_base = r->buf + r->used;
	iov.iov_len = need - r->used;
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cbuf.buf;
	mh.msg_controllen = sizeof(cbuf.buf);
	do
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;

	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		size_t k;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0))
			continue;
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		/* The control buffer holds RD_FDS_MAX fds, so this only
		 * guards against a malformed cmsg_len. */
		if (k > RD_FDS_MAX - nnew)
			k = RD_FDS_MAX - nnew;
		memcpy(newfds + nnew, CMSG_DATA(c), k * sizeof(int));
		nnew += (unsigned)k;
	}
	/* The bytes are consumed either way; the stream is now out of step
	 * with its fds, so the caller must drop the connection. */
	r->used += (size_t)n;
	if ((mh.msg_flags & MSG_CTRUNC) || nnew > RD_FDS_MAX - r->nfds) {
		close_fds(newfds, nnew);
		return -EMFILE;
	}
	memcpy(r->fds + r->nfds, newfds, nnew * sizeof(int));
	r->nfds += nnew;
	return (int)n;
}

static int next_fail(struct proto_hdr *bad, const struct proto_hdr *h,
		     char *msg, size_t msglen, const char *what, int err)
{
	if (bad)
		*bad = *h;
	return bad_msg(msg, msglen, what, err);
}

int proto_next(struct proto_reader *r, struct proto_msg *m,
	       struct proto_hdr *bad, char *msg, size_t msglen)
{
	struct proto_hdr h;
	size_t need;
	uint8_t *json, *text;
	int rc;

	if (r->used < PROTO_HDR_SIZE)
		return 0;
	rc = rd_need(r, &need, &h, msg, msglen);
	if (rc < 0) {
		if (bad)
			*bad = h;
		return rc;
	}
	if (r->used < need)
		return 0;
	if (r->nfds < h.nfds)
		return next_fail(bad, &h, msg, msglen, "fds announced but not received",
				 -EBADF);
	/* A message's fds come with its first bytes, and the reader never
	 * reads past the message: any more are ones the header did not
	 * announce (kept, they would pile up until the connection ends). */
	if (r->nfds > h.nfds)
		return next_fail(bad, &h, msg, msglen, "fds received that the header did "
				 "not announce", -EBADF);
	json = r->buf + PROTO_HDR_SIZE;
	if (memchr(json, 0, h.jlen))
		return next_fail(bad, &h, msg, msglen, "NUL byte in JSON", -EPROTO);

	/* The header is decoded, so its bytes are free: slide the JSON one
	 * byte down over them to make room for the terminating NUL without
	 * touching the binary part that follows. */
	text = json - 1;
	memmove(text, json, h.jlen);
	text[h.jlen] = '\0';

	memset(m, 0, sizeof(*m));
	m->hdr = h;
	m->json = (const char *)text;
	m->bin = json + h.jlen;
	m->blen = h.len - h.jlen;
	for (unsigned i = 0; i < PROTO_MAX_FDS; i++)
		m->fds[i] = -1;
	m->nfds = h.nfds;
	memcpy(m->fds, r->fds, h.nfds * sizeof(int));
	memmove(r->fds, r->fds + h.nfds, (r->nfds - h.nfds) * sizeof(int));
	for (unsigned i = r->nfds - h.nfds; i < r->nfds; i++)
		r->fds[i] = -1;
	r->nfds -= h.nfds;
	/* Consumed; the bytes stay valid until proto_read() reuses them. */
	r->used = 0;
	return 1;
}

/* --- sending -------------------------------------------------------------- */

static int msg_check(uint16_t type, const char *json, size_t jlen,
		     const void *bin, size_t blen, uint32_t nfds)
{
	if ((jlen && !json) || (blen && !bin))
		return -EINVAL;
	if (!type_known(type) || nfds > PROTO_MAX_FDS)
		return -EINVAL;
	if (jlen > PROTO_MAX_PAYLOAD || blen > PROTO_MAX_PAYLOAD - jlen)
		return -EMSGSIZE;
	/* The receiver would refuse it; say so here, where the bug is. */
	if (jlen && memchr(json, 0, jlen))
		return -EINVAL;
	return 0;
}

/* Wait until fd is writable; for non-blocking sockets. */
static int wait_writable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };

	for (;;) {
		if (poll(&p, 1, -1) >= 0)
			return 0;   /* POLLERR/POLLHUP: sendmsg() reports it */
		if (errno != EINTR)
			return -errno;
	}
}

int proto_send(int fd, uint16_t type, uint64_t req_id, int32_t status,
	       const char *json, size_t jlen, const void *bin, size_t blen,
	       const int *fds, unsigned nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * PROTO_MAX_FDS)];
	} cbuf;
	uint8_t hb[PROTO_HDR_SIZE];
	struct proto_hdr h;
	struct iovec iov[3];
	struct msghdr mh;
	struct iovec *cur = iov;
	size_t left;
	int rc;

	rc = msg_check(type, json, jlen, bin, blen, nfds);
	if (rc < 0)
		return rc;
	if (nfds && !fds)
		return -EINVAL;
	proto_hdr_init(&h, type, req_id, status, (uint32_t)jlen,
		       (uint32_t)blen, nfds);
	hdr_encode(hb, &h);

	iov[0] = (struct iovec){ hb, sizeof(hb) };
	iov[1] = (struct iovec){ (void *)json, jlen };
	iov[2] = (struct iovec){ (void *)bin, blen };
	left = sizeof(hb) + jlen + blen;

	memset(&mh, 0, sizeof(mh));
	if (nfds) {
		struct cmsghdr *c;

		memset(&cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}

	while (left) {
		ssize_t n;

		/* Skip iovecs already sent (and the empty ones). */
		while (cur->iov_len == 0)
			cur++;
		mh.msg_iov = cur;
		mh.msg_iovlen = (size_t)(iov + 3 - cur);
		n = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				rc = wait_writable(fd);
				if (rc < 0)
					return rc;
				continue;
			}
			return -errno;
		}
		if (n == 0)
			return -EIO;   /* cannot happen on a stream; no spinning */
		/* The fds went with the first byte; never send them twice. */
		mh.msg_control = NULL;
		mh.msg_controllen = 0;
		left -= (size_t)n;
		while (n > 0) {
			size_t k = (size_t)n < cur->iov_len ? (size_t)n : cur->iov_len;

			cur->iov_base = (uint8_t *)cur->iov_base + k;
			cur->iov_len -= k;
			n -= (ssize_t)k;
			if (cur->iov_len == 0 && n > 0)
				cur++;
		}
	}
	return 0;
}

ssize_t proto_pack(uint16_t type, uint64_t req_id, int32_t status,
		   const char *json, size_t jlen, const void *bin, size_t blen,
		   uint32_t nfds, uint8_t **out)
{
	struct proto_hdr h;
	uint8_t *p;
	int rc;

	rc = msg_check(type, json, jlen, bin, blen, nfds);
	if (rc < 0)
		return rc;
	p = malloc(PROTO_HDR_SIZE + jlen + blen);
	if (!p)
		return -ENOMEM;
	proto_hdr_init(&h, type, req_id, status, (uint32_t)jlen,
		       (uint32_t)blen, nfds);
	hdr_encode(p, &h);
	if (jlen)
		memcpy(p + PROTO_HDR_SIZE, json, jlen);
	if (blen)
		memcpy(p + PROTO_HDR_SIZE + jlen, bin, blen);
	*out = p;
	return (ssize_t)(PROTO_HDR_SIZE + jlen + blen);
}
