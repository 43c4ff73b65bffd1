/* fuzz_proto.c - libFuzzer target for the wire protocol reader.
 *
 * Input: three control bytes, then the byte stream a peer would send.
 *   ctl[0]  bits 0-3: fds to attach (0-15), bit 4: attach them to every
 *           chunk instead of only the first
 *   ctl[1]  chunk size for the writes (0: the whole stream in one write)
 *   ctl[2]  reader max_payload in units of 16 bytes (0: the hard ceiling)
 * The stream goes through a real socketpair, so proto_read()'s recvmsg and
 * SCM_RIGHTS paths run exactly as in the daemon.
 *
 * Oracles besides the sanitizers: every message proto_next() accepts must
 * pass proto_hdr_check(), be NUL-terminated where promised, carry as many
 * valid fds as announced, and re-pack with proto_pack() to exactly the bytes
 * that were sent; the buffer never outgrows its limit; no fd leaks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "proto.h"
#include "tests/fdcount.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...) do { fprintf(stderr, "fuzz_proto: " __VA_ARGS__); \
	fputc('\n', stderr); abort(); } while (0)

struct run {
	struct proto_reader r;
	const uint8_t *stream;
	size_t len;
	size_t consumed;   /* stream bytes of the messages accepted so far */
	int dead;          /* the reader reported an error: stop */
};

static void check_msg(struct run *t, const struct proto_msg *m)
{
	const struct proto_hdr *h = &m->hdr;
	uint8_t *p = NULL;
	ssize_t n;

	if (proto_hdr_check(h, t->r.max_payload, NULL, 0) != 0)
		FAIL("accepted a header that does not check");
	if (strlen(m->json) != h->jlen)
		FAIL("json not NUL-terminated at jlen");
	if (m->blen != (size_t)h->len - h->jlen)
		FAIL("blen %zu for len %u jlen %u", m->blen, h->len, h->jlen);
	if (m->nfds != h->nfds)
		FAIL("%u fds for %u announced", m->nfds, h->nfds);
	for (unsigned i = 0; i < PROTO_MAX_FDS; i++) {
		if (i < m->nfds && !(fcntl(m->fds[i], F_GETFD) & FD_CLOEXEC))
			FAIL("fd %d not open or not close-on-exec", m->fds[i]);
		if (i >= m->nfds && m->fds[i] != -1)
			FAIL("unused fd slot %u is %d", i, m->fds[i]);
	}
	n = proto_pack(h->type, h->req_id, h->status, m->json, h->jlen,
		       m->bin, m->blen, h->nfds, &p);
	if (n < 0)
		FAIL("proto_pack refused an accepted message: %zd", n);
	if ((size_t)n > t->len - t->consumed ||
	    memcmp(p, t->stream + t->consumed, (size_t)n) != 0)
		FAIL("message does not re-pack to the bytes sent");
	t->consumed += (size_t)n;
	free(p);
	for (unsigned i = 0; i < m->nfds; i++)
		close(m->fds[i]);
}

/* Take out every complete message; read until the socket is empty. */
static void drain(struct run *t, int fd)
{
	struct proto_msg m;
	struct proto_hdr bad;
	char why[64];
	int rc;

	while (!t->dead) {
		why[0] = '\0';
		rc = proto_next(&t->r, &m, &bad, why, sizeof(why));
		if (rc == 1) {
			check_msg(t, &m);
			continue;
		}
		if (rc < 0) {
			if (!*why)
				FAIL("error %d without a reason", rc);
			t->dead = 1;
			break;
		}
		rc = proto_read(&t->r, fd);
		if (t->r.cap > PROTO_HDR_SIZE + (size_t)t->r.max_payload + 1)
			FAIL("buffer grew to %zu", t->r.cap);
		if (rc == -EAGAIN)
			break;
		if (rc <= 0)
			t->dead = 1;   /* EOF or error: the caller would close */
	}
}

static int send_chunk(int fd, const uint8_t *p, size_t n, int memfd,
		      unsigned nfds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * 16)];
	struct iovec iov = { (void *)p, n };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int fds[16];

	if (nfds) {
		struct cmsghdr *c;

		for (unsigned i = 0; i < nfds; i++)
			fds[i] = memfd;   /* the kernel installs a new fd each */
		memset(cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	return sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)n ? 0 : -1;
}

/* The header checker on its own, on the first 40 bytes as they are. */
static void fuzz_hdr(const uint8_t *data, size_t size)
{
	struct proto_hdr h;
	char why[64] = "";
	int rc;

	if (size < PROTO_HDR_SIZE)
		return;
	memcpy(&h, data, sizeof(h));   /* little-endian host */
	rc = proto_hdr_check(&h, PROTO_MAX_PAYLOAD, why, sizeof(why));
	if (rc < 0 && !*why)
		FAIL("rejection without a reason");
	if (rc == 0 && (h.jlen > h.len || h.len > PROTO_MAX_PAYLOAD ||
			h.nfds > PROTO_MAX_FDS || h.flags || h.reserved))
		FAIL("accepted a bad header");
	if (!proto_type_name(h.type))
		FAIL("no name for type %u", h.type);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int memfd = -1, base_fds = -1;
	struct run t;
	unsigned nfds, every;
	size_t chunk, off = 0;
	int sv[2], first = 1;

	fuzz_hdr(data, size);
	if (size < 3)
		return 0;
	if (memfd < 0) {
		memfd = memfd_create("fuzz_proto", MFD_CLOEXEC);
		if (memfd < 0)
			FAIL("memfd_create: %s", strerror(errno));
		base_fds = count_fds();
	}
	nfds = data[0] & 15;
	every = data[0] & 16;
	chunk = data[1] ? data[1] : size;
	memset(&t, 0, sizeof(t));
	proto_reader_init(&t.r, (uint32_t)data[2] * 16);
	t.stream = data + 3;
	t.len = size - 3;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv))
		FAIL("socketpair: %s", strerror(errno));
	while (off < t.len && !t.dead) {
		size_t n = t.len - off < chunk ? t.len - off : chunk;

		/* A full socket means the reader stopped taking bytes. */
		if (send_chunk(sv[0], t.stream + off, n, memfd,
			       first || every ? nfds : 0) < 0)
			break;
		first = 0;
		off += n;
		drain(&t, sv[1]);
	}
	/* EOF, possibly in mid-message; what is in the socket stays there. */
	close(sv[0]);
	drain(&t, sv[1]);

	proto_reader_release(&t.r);
	close(sv[1]);
	if (count_fds() != base_fds)
		FAIL("fd leak: %d open, %d expected", count_fds(), base_fds);
	return 0;
}
