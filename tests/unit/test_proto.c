/* test_proto.c - the wire protocol: header checks, the stream reader (split
 * and batched messages, fd passing, early rejection), sending and packing. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto.h"
#include "tests/unit/testhelp.h"
#include "tests/fdcount.h"

/* --- helpers -------------------------------------------------------------- */

static int pair(int sv[2])
{
	return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
}

static int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t k = write(fd, b, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* sendmsg() of raw bytes with fds attached, bypassing proto_send(). */
static int send_raw_fds(int fd, const void *p, size_t n, const int *fds,
			unsigned nfds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * 64)];
	struct iovec iov = { (void *)p, n };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;

	memset(cbuf, 0, sizeof(cbuf));
	mh.msg_control = cbuf;
	mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	return sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

static int memfd_with(const char *tag)
{
	int fd = memfd_create("test_proto", MFD_CLOEXEC);

	if (fd >= 0 && write_all(fd, tag, strlen(tag)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Does fd refer to a memfd holding exactly `tag`? */
static int fd_has(int fd, const char *tag)
{
	char buf[64];
	ssize_t n = pread(fd, buf, sizeof(buf), 0);

	return n == (ssize_t)strlen(tag) && memcmp(buf, tag, (size_t)n) == 0;
}

/* Read until one message is complete (blocking socket). */
static int recv_one(struct proto_reader *r, int fd, struct proto_msg *m,
		    struct proto_hdr *bad, char *why, size_t whylen)
{
	for (;;) {
		int rc = proto_next(r, m, bad, why, whylen);
		if (rc != 0)
			return rc;
		rc = proto_read(r, fd);
		if (rc <= 0)
			return rc == 0 ? -ECONNRESET : rc;
	}
}

static void close_msg_fds(struct proto_msg *m)
{
	for (unsigned i = 0; i < m->nfds; i++)
		close(m->fds[i]);
}

static void valid_hdr(struct proto_hdr *h)
{
	proto_hdr_init(h, PROTO_SAVE, 7, 0, 10, 6, 0);
}

/* Pack and write one message; returns 0 or -1. */
static int put_msg(int fd, uint16_t type, uint64_t req_id, const char *json,
		   const void *bin, size_t blen, uint32_t nfds)
{
	uint8_t *p;
	ssize_t n = proto_pack(type, req_id, 0, json, json ? strlen(json) : 0,
			       bin, blen, nfds, &p);
	int rc;

	if (n < 0)
		return -1;
	rc = write_all(fd, p, (size_t)n);
	free(p);
	return rc;
}

/* --- header --------------------------------------------------------------- */

static int test_hdr_layout(void)
{
	static const uint8_t want[PROTO_HDR_SIZE] = {
		'C', 'K', 'P', 'T',                 /* magic */
		1, 0,                               /* version */
		7, 0x80,                            /* SAVE | REPLY */
		0, 0, 0, 0,                         /* flags */
		12, 0, 0, 0,                        /* len */
		10, 0, 0, 0,                        /* jlen */
		0xfb, 0xff, 0xff, 0xff,             /* status -5 */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
		1, 0, 0, 0,                         /* nfds */
		0, 0, 0, 0,                         /* reserved */
	};
	uint8_t *p = NULL;
	ssize_t n = proto_pack(PROTO_SAVE | PROTO_REPLY, 0x1122334455667788ull,
			       -5, "{\"step\":3}", 10, "ab", 2, 1, &p);

	CHECK_EQ(n, PROTO_HDR_SIZE + 12);
	CHECK(memcmp(p, want, sizeof(want)) == 0);
	CHECK(memcmp(p + 40, "{\"step\":3}ab", 12) == 0);
	free(p);
	return 0;
}

static int test_hdr_roundtrip(void)
{
	struct proto_reader r;
	struct proto_hdr h;
	struct proto_msg m;
	int sv[2];

	CHECK(pair(sv) == 0);
	proto_hdr_init(&h, PROTO_RESTORE | PROTO_REPLY, 0xfedcba9876543210ull,
		       -ENOENT, 12, 0, 0);
	CHECK(proto_hdr_check(&h, 0, NULL, 0) == 0);
	CHECK(proto_send(sv[0], PROTO_RESTORE | PROTO_REPLY,
			 0xfedcba9876543210ull, -ENOENT, "{\"step\":500}",
			 12, NULL, 0, NULL, 0) == 0);
	proto_reader_init(&r, 0);
	CHECK_EQ(recv_one(&r, sv[1], &m, NULL, NULL, 0), 1);
	CHECK(memcmp(&m.hdr, &h, sizeof(h)) == 0);
	CHECK_EQ(m.hdr.status, -ENOENT);
	CHECK_EQ(m.hdr.req_id, 0xfedcba9876543210ull);
	CHECK(strcmp(m.json, "{\"step\":500}") == 0);
	CHECK_EQ(m.blen, 0);
	CHECK_EQ(m.nfds, 0);
	proto_reader_release(&r);
	close(sv[0]);
	close(sv[1]);
	return 0;
}

static int test_hdr_accepts_limits(void)
{
	struct proto_hdr h;
	char why[64] = "untouched";

	for (unsigned t = 1; t < PROTO_TYPE_MAX; t++) {
		valid_hdr(&h);
		h.type = (uint16_t)t;
		CHECK(proto_hdr_check(&h, 0, why, sizeof(why)) == 0);
		h.type = (uint16_t)(t | PROTO_REPLY);
		CHECK(proto_hdr_check(&h, 0, why, sizeof(why)) == 0);
	}
	CHECK(strcmp(why, "untouched") == 0);   /* only set on failure */
	valid_hdr(&h);
	h.len = h.jlen = 64;                    /* all JSON, exactly the limit */
	CHECK(proto_hdr_check(&h, 64, NULL, 0) == 0);
	h.nfds = PROTO_MAX_FDS;
	CHECK(proto_hdr_check(&h, 64, NULL, 0) == 0);
	h.len = h.jlen = PROTO_MAX_PAYLOAD;     /* 0 = the hard ceiling */
	CHECK(proto_hdr_check(&h, 0, NULL, 0) == 0);
	h.len = h.jlen = PROTO_MAX_PAYLOAD + 1; /* nothing raises the ceiling */
	CHECK_EQ(proto_hdr_check(&h, UINT32_MAX, NULL, 0), -EMSGSIZE);
	return 0;
}

/* Apply `mutate` to a valid header and expect `err` and a reason. */
#define REJECT(mutate, err) do { \
	struct proto_hdr h_; char why_[64] = ""; \
	valid_hdr(&h_); mutate; \
	CHECK_EQ(proto_hdr_check(&h_, 1024, why_, sizeof(why_)), (err)); \
	CHECK(why_[0] != '\0'); \
} while (0)

static int test_reject_magic(void)
{
	REJECT(h_.magic = 0x544b5043, -EPROTO);
	REJECT(h_.magic = 0, -EPROTO);
	return 0;
}

static int test_reject_version(void)
{
	REJECT(h_.version = 0, -EPROTONOSUPPORT);
	REJECT(h_.version = 2, -EPROTONOSUPPORT);
	return 0;
}

static int test_reject_flags_reserved(void)
{
	REJECT(h_.flags = 1, -EPROTO);
	REJECT(h_.flags = 0x80000000u, -EPROTO);
	REJECT(h_.reserved = 1, -EPROTO);
	return 0;
}

static int test_reject_jlen(void)
{
	REJECT(h_.jlen = h_.len + 1, -EPROTO);
	REJECT((h_.len = 0, h_.jlen = UINT32_MAX), -EPROTO);
	return 0;
}

static int test_reject_len(void)
{
	REJECT(h_.len = 1025, -EMSGSIZE);
	REJECT(h_.len = UINT32_MAX, -EMSGSIZE);
	return 0;
}

static int test_reject_type(void)
{
	REJECT(h_.type = 0, -EBADMSG);
	REJECT(h_.type = PROTO_TYPE_MAX, -EBADMSG);
	REJECT(h_.type = PROTO_REPLY, -EBADMSG);
	REJECT(h_.type = PROTO_REPLY | PROTO_TYPE_MAX, -EBADMSG);
	REJECT(h_.type = 0x4001, -EBADMSG);
	REJECT(h_.type = 0xffff, -EBADMSG);
	return 0;
}

static int test_reject_nfds(void)
{
	REJECT(h_.nfds = PROTO_MAX_FDS + 1, -EBADMSG);
	REJECT(h_.nfds = UINT32_MAX, -EBADMSG);
	return 0;
}

static int test_type_names(void)
{
	CHECK(strcmp(proto_type_name(PROTO_HELLO), "HELLO") == 0);
	CHECK(strcmp(proto_type_name(PROTO_SAVE), "SAVE") == 0);
	CHECK(strcmp(proto_type_name(PROTO_REGION_ADD), "REGION_ADD") == 0);
	CHECK(strcmp(proto_type_name(PROTO_ERROR), "ERROR") == 0);
	CHECK(strcmp(proto_type_name(PROTO_SAVE | PROTO_REPLY), "SAVE_REPLY") == 0);
	CHECK(strcmp(proto_type_name(PROTO_PRUNE | PROTO_REPLY), "PRUNE_REPLY") == 0);
	CHECK(strcmp(proto_type_name(0), "UNKNOWN") == 0);
	CHECK(strcmp(proto_type_name(PROTO_TYPE_MAX), "UNKNOWN") == 0);
	CHECK(strcmp(proto_type_name(PROTO_REPLY), "UNKNOWN") == 0);
	CHECK(strcmp(proto_type_name(0xffff), "UNKNOWN") == 0);
	return 0;
}

/* --- reader --------------------------------------------------------------- */

/* Two messages written one byte at a time: nothing comes out early, each
 * comes out whole. */
static int test_split_one_byte(void)
{
	static const uint8_t bin[5] = { 0, 1, 2, 0, 255 };
	struct proto_reader r;
	struct proto_msg m;
	uint8_t *a, *b, *all;
	ssize_t na, nb;
	int sv[2], got = 0;

	CHECK(pair(sv) == 0);
	na = proto_pack(PROTO_HELLO, 1, 0, "{\"version\":1}", 13, NULL, 0, 0, &a);
	nb = proto_pack(PROTO_BLOB_PUT, 2, 0, "{\"name\":\"rng\"}", 14, bin,
			sizeof(bin), 0, &b);
	CHECK(na > 0 && nb > 0);
	all = malloc((size_t)(na + nb));
	CHECK(all != NULL);
	memcpy(all, a, (size_t)na);
	memcpy(all + na, b, (size_t)nb);
	proto_reader_init(&r, 0);
	for (ssize_t i = 0; i < na + nb; i++) {
		int rc;

		CHECK(write_all(sv[0], all + i, 1) == 0);
		CHECK_EQ(proto_read(&r, sv[1]), 1);
		rc = proto_next(&r, &m, NULL, NULL, 0);
		if (i == na - 1) {
			CHECK_EQ(rc, 1);
			CHECK_EQ(m.hdr.type, PROTO_HELLO);
			CHECK_EQ(m.hdr.req_id, 1);
			CHECK(strcmp(m.json, "{\"version\":1}") == 0);
			CHECK_EQ(m.blen, 0);
			got++;
		} else if (i == na + nb - 1) {
			CHECK_EQ(rc, 1);
			CHECK_EQ(m.hdr.type, PROTO_BLOB_PUT);
			CHECK_EQ(m.hdr.req_id, 2);
			CHECK(strcmp(m.json, "{\"name\":\"rng\"}") == 0);
			CHECK_EQ(m.blen, sizeof(bin));
			CHECK(memcmp(m.bin, bin, sizeof(bin)) == 0);
			got++;
		} else {
			CHECK_EQ(rc, 0);
		}
	}
	CHECK_EQ(got, 2);
	CHECK_EQ(proto_next(&r, &m, NULL, NULL, 0), 0);
	proto_reader_release(&r);
	free(a);
	free(b);
	free(all);
	close(sv[0]);
	close(sv[1]);
	return 0;
}

/* Several messages in one write, of various shapes, come out in order. */
static int test_many_in_one_write(void)
{
	static const struct { uint16_t type; const char *json; size_t blen; } in[] = {
		{ PROTO_STATUS, "{}", 0 },
		{ PROTO_BLOB_PUT, "{\"name\":\"x\"}", 3000 },
		{ PROTO_EVENT, NULL, 0 },          /* empty payload */
		{ PROTO_RESTORE | PROTO_REPLY, NULL, 17 },   /* binary only */
		{ PROTO_SAVE, "{\"step\":42}", 0 },
	};
	const size_t n = sizeof(in) / sizeof(in[0]);
	uint8_t stream[8192], bin[3000];
	struct proto_reader r;
	struct proto_msg m;
	size_t len = 0, i = 0;
	int sv[2];

	for (size_t k = 0; k < sizeof(bin); k++)
		bin[k] = (uint8_t)(k * 7);
	for (size_t k = 0; k < n; k++) {
		uint8_t *p;
		size_t jl = in[k].json ? strlen(in[k].json) : 0;
		ssize_t pl = proto_pack(in[k].type, k + 1, 0, in[k].json, jl,
					bin, in[k].blen, 0, &p);
		CHECK(pl > 0 && len + (size_t)pl <= sizeof(stream));
		memcpy(stream + len, p, (size_t)pl);
		len += (size_t)pl;
		free(p);
	}
	CHECK(pair(sv) == 0);
	CHECK(write_all(sv[0], stream, len) == 0);
	close(sv[0]);
	proto_reader_init(&r, 4096);
	for (;;) {
		int rc = proto_next(&r, &m, NULL, NULL, 0);
		CHECK(rc >= 0);
		if (rc == 0) {
			rc = proto_read(&r, sv[1]);
			CHECK(rc >= 0);
			if (rc == 0)
				break;   /* EOF */
			continue;
		}
		CHECK(i < n);
		CHECK_EQ(m.hdr.type, in[i].type);
		CHECK_EQ(m.hdr.req_id, i + 1);
		CHECK(strcmp(m.json, in[i].json ? in[i].json : "") == 0);
		CHECK_EQ(m.blen, in[i].blen);
		CHECK(memcmp(m.bin, bin, m.blen) == 0);
		i++;
	}
	CHECK_EQ(i, n);
	CHECK(r.cap <= PROTO_HDR_SIZE + 4096 + 1);
	proto_reader_release(&r);
	close(sv[1]);
	return 0;
}

/* fds sent with SCM_RIGHTS are handed to the message they came with. */
static int test_fd_passing(void)
{
	struct proto_reader r;
	struct proto_msg m;
	int sv[2], a, c[2], base;

	base = count_fds();
	CHECK(pair(sv) == 0);
	a = memfd_with("region A");
	c[0] = memfd_with("region C1");
	c[1] = memfd_with("region C2");
	CHECK(a >= 0 && c[0] >= 0 && c[1] >= 0);
	CHECK(proto_send(sv[0], PROTO_REGION_ADD, 1, 0, "{\"region\":1}", 12,
			 NULL, 0, &a, 1) == 0);
	CHECK(proto_send(sv[0], PROTO_STATUS, 2, 0, "{}", 2, NULL, 0, NULL, 0) == 0);
	CHECK(proto_send(sv[0], PROTO_REGION_ADD, 3, 0, "{\"region\":3}", 12,
			 "xyz", 3, c, 2) == 0);
	close(a);
	close(c[0]);
	close(c[1]);

	proto_reader_init(&r, 0);
	CHECK_EQ(recv_one(&r, sv[1], &m, NULL, NULL, 0), 1);
	CHECK_EQ(m.hdr.req_id, 1);
	CHECK_EQ(m.nfds, 1);
	CHECK(fd_has(m.fds[0], "region A"));
	CHECK(fcntl(m.fds[0], F_GETFD) & FD_CLOEXEC);
	CHECK_EQ(m.fds[1], -1);
	close_msg_fds(&m);

	CHECK_EQ(recv_one(&r, sv[1], &m, NULL, NULL, 0), 1);
	CHECK_EQ(m.hdr.req_id, 2);
	CHECK_EQ(m.nfds, 0);

	CHECK_EQ(recv_one(&r, sv[1], &m, NULL, NULL, 0), 1);
	CHECK_EQ(m.hdr.req_id, 3);
	CHECK_EQ(m.nfds, 2);
	CHECK(fd_has(m.fds[0], "region C1"));
	CHECK(fd_has(m.fds[1], "region C2"));
	CHECK_EQ(m.blen, 3);
	CHECK(memcmp(m.bin, "xyz", 3) == 0);
	close_msg_fds(&m);
	CHECK_EQ(r.nfds, 0);

	proto_reader_release(&r);
	close(sv[0]);
	close(sv[1]);
	CHECK_EQ(count_fds(), base);
	return 0;
}

/* More fds than the header announces: -EBADF, and none is kept (they
 * used to wait for a later message and piled up to EMFILE). */
static int test_surplus_fds(void)
{
	struct proto_reader r;
	struct proto_msg m;
	struct proto_hdr bad;
	char why[64] = "";
	uint8_t *p;
	ssize_t n;
	int sv[2], ab[2], base = count_fds();

	CHECK(pair(sv) == 0);
	ab[0] = memfd_with("A");
	ab[1] = memfd_with("B");
	CHECK(ab[0] >= 0 && ab[1] >= 0);
	for (unsigned announced = 0; announced < 2; announced++) {
		n = proto_pack(PROTO_REGION_ADD, 7, 0, "{}", 2, NULL, 0, announced, &p);
		CHECK(n > 0);
		CHECK(send_raw_fds(sv[0], p, (size_t)n, ab, 2) == 0);
		free(p);
		proto_reader_init(&r, 0);
		memset(&bad, 0, sizeof(bad));
		CHECK_EQ(recv_one(&r, sv[1], &m, &bad, why, sizeof(why)), -EBADF);
		CHECK_EQ(bad.req_id, 7);
		CHECK(strstr(why, "did not announce") != NULL);
		proto_reader_release(&r);
	}
	close(ab[0]);
	close(ab[1]);
	close(sv[0]);
	close(sv[1]);
	CHECK_EQ(count_fds(), base);
	return 0;
}

/* The header announces fds that never came: -EBADF, req_id echoed. */
static int test_missing_fds(void)
{
	struct proto_reader r;
	struct proto_msg m;
	struct proto_hdr bad;
	char why[64] = "";
	int sv[2];

	CHECK(pair(sv) == 0);
	CHECK(put_msg(sv[0], PROTO_REGION_ADD, 99, "{\"region\":1}", NULL, 0, 2) == 0);
	proto_reader_init(&r, 0);
	memset(&bad, 0, sizeof(bad));
	CHECK_EQ(recv_one(&r, sv[1], &m, &bad, why, sizeof(why)), -EBADF);
	CHECK_EQ(bad.req_id, 99);
	CHECK_EQ(bad.nfds, 2);
	CHECK(why[0] != '\0');
	proto_reader_release(&r);
	close(sv[0]);
	close(sv[1]);
	return 0;
}

/* Fewer fds than announced, even when some arrived. */
static int test_too_few_fds(void)
{
	struct proto_reader r;
	struct proto_msg m;
	uint8_t *p;
	ssize_t n;
	int sv[2], fd, base = count_fds();

	CHECK(pair(sv) == 0);
	fd = memfd_with("one");
	CHECK(fd >= 0);
	n = proto_pack(PROTO_REGION_ADD, 5, 0, "{}", 2, NULL, 0, 2, &p);
	CHECK(n > 0);
	CHECK(send_raw_fds(sv[0], p, (size_t)n, &fd, 1) == 0);
	free(p);
	close(fd);
	proto_reader_init(&r, 0);
	CHECK_EQ(recv_one(&r, sv[1], &m, NULL, NULL, 0), -EBADF);
	CHECK_EQ(r.nfds, 1);
	proto_reader_release(&r);   /* closes the fd that did arrive */
	close(sv[0]);
	close(sv[1]);
	CHECK_EQ(count_fds(), base);
	return 0;
}

/* A length over the reader's limit is refused from the header alone: the
 * payload stays in the socket and no buffer of that size is allocated. */
static int test_oversized_early(void)
{
	static uint8_t big[8192];
	struct proto_reader r;
	struct proto_msg m;
	struct proto_hdr bad;
	char why[64] = "";
	int sv[2], pending = 0;

	CHECK(pair(sv) == 0);
	CHECK(put_msg(sv[0], PROTO_BLOB_PUT, 77, "{}", big, sizeof(big), 0) == 0);
	proto_reader_init(&r, 1024);
	CHECK_EQ(proto_read(&r, sv[1]), PROTO_HDR_SIZE);
	CHECK_EQ(proto_next(&r, &m, &bad, why, sizeof(why)), -EMSGSIZE);
	CHECK_EQ(bad.req_id, 77);
	CHECK_EQ(bad.len, sizeof(big) + 2);
	CHECK(why[0] != '\0');
	CHECK(r.cap < sizeof(big));
	CHECK(ioctl(sv[1], FIONREAD, &pending) == 0);
	CHECK_EQ(pending, sizeof(big) + 2);
	/* The reader stays stopped: it reads nothing more. */
	CHECK_EQ(proto_read(&r, sv[1]), -EMSGSIZE);
	CHECK(ioctl(sv[1], FIONREAD, &pending) == 0);
	CHECK_EQ(pending, sizeof(big) + 2);
	proto_reader_release(&r);
	close(sv[0]);
	close(sv[1]);
	return 0;
}

/* A payload of exactly max_payload is fine, one more byte is not. */
static int test_max_payload_boundary(void)
{
	char json[65];
	struct proto_reader r;
	struct proto_msg m;
	int sv[2];

	memset(json, 'x', 64);
	json[0] = '"';
	json[63] = '"';
	json[64] = '\0';
	CHECK(pair(sv) == 0);
	CHECK(put_msg(sv[0], PROTO_STATUS, 1, json, NULL, 0, 0) == 0);
	CHECK(put_msg(sv[0], PROTO_STATUS, 2, json, "!", 1, 0) == 0);
	proto_reader_init(&r, 64);
	CHECK_EQ(recv_one(&r, sv[1], &m, NULL, NULL, 0), 1);
	CHECK(strcmp(m.json, json) == 0);
	CHECK(r.cap <= PROTO_HDR_SIZE + 64 + 1);
	CHECK_EQ(recv_one(&r, sv[1], &m, NULL, NULL, 0), -EMSGSIZE);
	proto_reader_release(&r);
	close(sv[0]);
	close(sv[1]);
	return 0;
}

static int test_bad_header_on_stream(void)
{
	struct proto_reader r;
	struct proto_msg m;
	struct proto_hdr bad;
	char why[64] = "";
	uint8_t *p;
	ssize_t n;
	int sv[2];

	CHECK(pair(sv) == 0);
	n = proto_pack(PROTO_SAVE, 1234, 0, "{}", 2, NULL, 0, 0, &p);
	CHECK(n > 0);
	p[0] ^= 0xff;   /* magic */
	CHECK(write_all(sv[0], p, (size_t)n) == 0);
	free(p);
	proto_reader_init(&r, 0);
	CHECK_EQ(recv_one(&r, sv[1], &m, &bad, why, sizeof(why)), -EPROTO);
	CHECK_EQ(bad.req_id, 1234);
	CHECK(strstr(why, "magic"));
	proto_reader_release(&r);
	close(sv[0]);
	close(sv[1]);
	return 0;
}

/* NUL inside the JSON is refused; NUL in the binary part is data. */
static int test_nul_in_json(void)
{
	static const uint8_t zeros[4];
	struct proto_reader r;
	struct proto_msg m;
	struct proto_hdr bad;
	char why[64] = "";
	uint8_t *p;
	ssize_t n;
	int sv[2];

	CHECK(pair(sv) == 0);
	CHECK(put_msg(sv[0], PROTO_BLOB_PUT, 1, "{\"name\":\"z\"}", zeros, 4, 0) == 0);
	n = proto_pack(PROTO_SAVE, 2, 0, "{\"step\":1}", 10, NULL, 0, 0, &p);
	CHECK(n > 0);
	p[PROTO_HDR_SIZE + 9] = '\0';   /* the closing brace */
	CHECK(write_all(sv[0], p, (size_t)n) == 0);
	free(p);
	proto_reader_init(&r, 0);
	CHECK_EQ(recv_one(&r, sv[1], &m, NULL, NULL, 0), 1);
	CHECK_EQ(m.blen, 4);
	CHECK(memcmp(m.bin, zeros, 4) == 0);
	CHECK_EQ(recv_one(&r, sv[1], &m, &bad, why, sizeof(why)), -EPROTO);
	CHECK_EQ(bad.req_id, 2);
	CHECK(strstr(why, "NUL"));
	proto_reader_release(&r);
	close(sv[0]);
	close(sv[1]);
	return 0;
}

/* proto_pack() produces exactly the bytes proto_send() puts on the wire. */
static int test_pack_matches_send(void)
{
	static uint8_t bin[100000];
	static uint8_t got[PROTO_HDR_SIZE + 20 + sizeof(bin)];
	const char *json = "{\"ticket\":9,\"x\":1}";
	uint8_t *p;
	ssize_t n;
	size_t have = 0;
	int sv[2], fd;
	pid_t pid;
	int st;

	for (size_t i = 0; i < sizeof(bin); i++)
		bin[i] = (uint8_t)(i ^ (i >> 8));
	n = proto_pack(PROTO_EVENT, 0, -EIO, json, strlen(json), bin,
		       sizeof(bin), 1, &p);
	CHECK(n == (ssize_t)(PROTO_HDR_SIZE + strlen(json) + sizeof(bin)));
	CHECK(pair(sv) == 0);
	fd = memfd_with("x");
	CHECK(fd >= 0);
	/* Bigger than the socket buffer: the sender must loop, so send from
	 * a child while this side reads. */
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(sv[1]);
		_exit(proto_send(sv[0], PROTO_EVENT, 0, -EIO, json, strlen(json),
				 bin, sizeof(bin), &fd, 1) == 0 ? 0 : 1);
	}
	close(sv[0]);
	close(fd);
	for (;;) {
		ssize_t k = read(sv[1], got + have, sizeof(got) - have);
		if (k < 0 && errno == EINTR)
			continue;
		CHECK(k >= 0);
		if (k == 0)
			break;
		have += (size_t)k;
	}
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_EQ(have, n);
	CHECK(memcmp(got, p, (size_t)n) == 0);
	free(p);
	close(sv[1]);
	return 0;
}

/* A non-blocking sender with a message far bigger than the socket buffer:
 * proto_send() waits in poll() instead of failing with EAGAIN. */
static int test_send_nonblocking(void)
{
	const size_t blen = 3u << 20;
	struct proto_reader r;
	struct proto_msg m;
	uint8_t *bin;
	int sv[2], st, fd, base = count_fds();
	pid_t pid;

	bin = malloc(blen);
	CHECK(bin != NULL);
	for (size_t i = 0; i < blen; i++)
		bin[i] = (uint8_t)(i * 31 + (i >> 12));
	CHECK(pair(sv) == 0);
	CHECK(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0);
	fd = memfd_with("big");
	CHECK(fd >= 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(sv[1]);
		_exit(proto_send(sv[0], PROTO_BLOB_PUT, 11, 0, "{\"name\":\"b\"}",
				 12, bin, blen, &fd, 1) == 0 ? 0 : 1);
	}
	close(sv[0]);
	close(fd);
	proto_reader_init(&r, 0);
	CHECK_EQ(recv_one(&r, sv[1], &m, NULL, NULL, 0), 1);
	CHECK_EQ(m.hdr.req_id, 11);
	CHECK_EQ(m.blen, blen);
	CHECK(memcmp(m.bin, bin, blen) == 0);
	CHECK_EQ(m.nfds, 1);
	CHECK(fd_has(m.fds[0], "big"));
	close_msg_fds(&m);
	CHECK(r.cap <= PROTO_HDR_SIZE + PROTO_MAX_PAYLOAD + 1);
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* Idle again: the big buffer is given back on the next read. */
	CHECK_EQ(proto_read(&r, sv[1]), 0);
	CHECK(r.cap <= (64u << 10));
	proto_reader_release(&r);
	close(sv[1]);
	free(bin);
	CHECK_EQ(count_fds(), base);
	return 0;
}

/* More fds than the reader's queue holds: the new ones are closed. */
static int test_fd_queue_overflow(void)
{
	struct proto_reader r;
	int sv[2], fds[20], base = count_fds();
	uint8_t *p;
	ssize_t n;

	CHECK(pair(sv) == 0);
	fds[0] = memfd_with("q");
	CHECK(fds[0] >= 0);
	for (int i = 1; i < 20; i++)
		fds[i] = fds[0];   /* the kernel dups each one */
	n = proto_pack(PROTO_STATUS, 1, 0, "{\"a\":1}", 7, NULL, 0, 0, &p);
	CHECK(n > 0);
	/* Header with 20 fds, then the payload with 20 more. */
	CHECK(send_raw_fds(sv[0], p, PROTO_HDR_SIZE, fds, 20) == 0);
	CHECK(send_raw_fds(sv[0], p + PROTO_HDR_SIZE, (size_t)n - PROTO_HDR_SIZE,
			   fds, 20) == 0);
	free(p);
	close(fds[0]);
	proto_reader_init(&r, 0);
	CHECK_EQ(proto_read(&r, sv[1]), PROTO_HDR_SIZE);
	CHECK_EQ(r.nfds, 20);
	CHECK_EQ(proto_read(&r, sv[1]), -EMFILE);
	CHECK_EQ(r.nfds, 20);
	CHECK_EQ(count_fds(), base + 2 + 20);
	proto_reader_release(&r);
	close(sv[0]);
	close(sv[1]);
	CHECK_EQ(count_fds(), base);
	return 0;
}

/* More fds in one go than the control buffer holds (MSG_CTRUNC). */
static int test_fd_ctrunc(void)
{
	struct proto_reader r;
	int sv[2], fds[40], base = count_fds();
	uint8_t *p;
	ssize_t n;

	CHECK(pair(sv) == 0);
	fds[0] = memfd_with("t");
	CHECK(fds[0] >= 0);
	for (int i = 1; i < 40; i++)
		fds[i] = fds[0];
	n = proto_pack(PROTO_STATUS, 1, 0, "{}", 2, NULL, 0, 0, &p);
	CHECK(n > 0);
	CHECK(send_raw_fds(sv[0], p, (size_t)n, fds, 40) == 0);
	free(p);
	close(fds[0]);
	proto_reader_init(&r, 0);
	CHECK_EQ(proto_read(&r, sv[1]), -EMFILE);
	CHECK_EQ(r.nfds, 0);
	proto_reader_release(&r);
	close(sv[0]);
	close(sv[1]);
	CHECK_EQ(count_fds(), base);
	return 0;
}

static int test_eof_and_eagain(void)
{
	struct proto_reader r;
	struct proto_msg m;
	int sv[2];

	CHECK(pair(sv) == 0);
	CHECK(fcntl(sv[1], F_SETFL, O_NONBLOCK) == 0);
	proto_reader_init(&r, 0);
	CHECK_EQ(proto_read(&r, sv[1]), -EAGAIN);
	CHECK(put_msg(sv[0], PROTO_SAVE, 1, "{\"step\":1}", NULL, 0, 0) == 0);
	close(sv[0]);
	CHECK_EQ(recv_one(&r, sv[1], &m, NULL, NULL, 0), 1);
	CHECK_EQ(proto_read(&r, sv[1]), 0);
	CHECK_EQ(proto_read(&r, -1), -EBADF);
	proto_reader_release(&r);
	proto_reader_release(&r);   /* twice is harmless */
	proto_reader_release(NULL);
	close(sv[1]);
	return 0;
}

/* proto_read() will not read into the next message while a complete one
 * waits for proto_next(). */
static int test_read_waits_for_next(void)
{
	struct proto_reader r;
	struct proto_msg m;
	int sv[2];

	CHECK(pair(sv) == 0);
	CHECK(put_msg(sv[0], PROTO_STATUS, 1, "{}", NULL, 0, 0) == 0);
	CHECK(put_msg(sv[0], PROTO_STATUS, 2, "{}", NULL, 0, 0) == 0);
	proto_reader_init(&r, 0);
	CHECK_EQ(proto_read(&r, sv[1]), PROTO_HDR_SIZE);
	CHECK_EQ(proto_read(&r, sv[1]), 2);
	CHECK_EQ(proto_read(&r, sv[1]), -ENOBUFS);
	CHECK_EQ(proto_next(&r, &m, NULL, NULL, 0), 1);
	CHECK_EQ(m.hdr.req_id, 1);
	CHECK_EQ(recv_one(&r, sv[1], &m, NULL, NULL, 0), 1);
	CHECK_EQ(m.hdr.req_id, 2);
	proto_reader_release(&r);
	close(sv[0]);
	close(sv[1]);
	return 0;
}

static int test_send_rejects_bad_args(void)
{
	int sv[2], fds[PROTO_MAX_FDS + 1];
	uint8_t *out = (uint8_t *)"untouched";
	static const char dummy[1];

	for (int i = 0; i <= PROTO_MAX_FDS; i++)
		fds[i] = 0;
	CHECK(pair(sv) == 0);
	CHECK_EQ(proto_send(sv[0], PROTO_SAVE, 1, 0, "{}", 2, NULL, 0, fds,
			    PROTO_MAX_FDS + 1), -EINVAL);
	CHECK_EQ(proto_send(sv[0], PROTO_SAVE, 1, 0, "{}", 2, NULL, 0, NULL, 1),
		 -EINVAL);
	CHECK_EQ(proto_send(sv[0], 0, 1, 0, "{}", 2, NULL, 0, NULL, 0), -EINVAL);
	CHECK_EQ(proto_send(sv[0], PROTO_TYPE_MAX, 1, 0, NULL, 0, NULL, 0, NULL, 0),
		 -EINVAL);
	CHECK_EQ(proto_send(sv[0], PROTO_SAVE, 1, 0, "{\0}", 3, NULL, 0, NULL, 0),
		 -EINVAL);
	CHECK_EQ(proto_send(sv[0], PROTO_SAVE, 1, 0, NULL, 2, NULL, 0, NULL, 0),
		 -EINVAL);
	CHECK_EQ(proto_send(sv[0], PROTO_SAVE, 1, 0, "{}", 2, NULL, 5, NULL, 0),
		 -EINVAL);
	/* Sizes are checked before the buffers are touched. */
	CHECK_EQ(proto_send(sv[0], PROTO_BLOB_PUT, 1, 0, "{}", 2, dummy,
			    PROTO_MAX_PAYLOAD - 1, NULL, 0), -EMSGSIZE);
	CHECK_EQ(proto_pack(PROTO_BLOB_PUT, 1, 0, dummy, SIZE_MAX, dummy, 2, 0,
			    &out), -EMSGSIZE);
	CHECK_EQ(proto_pack(PROTO_SAVE, 1, 0, "{}", 2, NULL, 0,
			    PROTO_MAX_FDS + 1, &out), -EINVAL);
	CHECK(strcmp((char *)out, "untouched") == 0);
	/* Nothing reached the socket. */
	close(sv[0]);
	CHECK_EQ(read(sv[1], fds, 1), 0);
	close(sv[1]);
	/* Writing to a closed peer is -EPIPE, not SIGPIPE. */
	CHECK(pair(sv) == 0);
	close(sv[1]);
	CHECK_EQ(proto_send(sv[0], PROTO_SAVE, 1, 0, "{}", 2, NULL, 0, NULL, 0),
		 -EPIPE);
	close(sv[0]);
	return 0;
}

static const struct test tests[] = {
	{ "hdr_layout", test_hdr_layout },
	{ "hdr_roundtrip", test_hdr_roundtrip },
	{ "hdr_accepts_limits", test_hdr_accepts_limits },
	{ "reject_magic", test_reject_magic },
	{ "reject_version", test_reject_version },
	{ "reject_flags_reserved", test_reject_flags_reserved },
	{ "reject_jlen", test_reject_jlen },
	{ "reject_len", test_reject_len },
	{ "reject_type", test_reject_type },
	{ "reject_nfds", test_reject_nfds },
	{ "type_names", test_type_names },
	{ "split_one_byte", test_split_one_byte },
	{ "many_in_one_write", test_many_in_one_write },
	{ "fd_passing", test_fd_passing },
	{ "surplus_fds", test_surplus_fds },
	{ "missing_fds", test_missing_fds },
	{ "too_few_fds", test_too_few_fds },
	{ "oversized_early", test_oversized_early },
	{ "max_payload_boundary", test_max_payload_boundary },
	{ "bad_header_on_stream", test_bad_header_on_stream },
	{ "nul_in_json", test_nul_in_json },
	{ "pack_matches_send", test_pack_matches_send },
	{ "send_nonblocking", test_send_nonblocking },
	{ "fd_queue_overflow", test_fd_queue_overflow },
	{ "fd_ctrunc", test_fd_ctrunc },
	{ "eof_and_eagain", test_eof_and_eagain },
	{ "read_waits_for_next", test_read_waits_for_next },
	{ "send_rejects_bad_args", test_send_rejects_bad_args },
};

TEST_MAIN(tests)
