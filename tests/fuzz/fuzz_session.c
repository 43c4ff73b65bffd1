/* fuzz_session.c - libFuzzer target for ckptd's session layer: the real
 * daemon (srv_init: private root and socket, small staging pool, its
 * pipeline threads) runs in this process and is fed message sequences, with
 * file descriptors, over a real connection; every input is one connection.
 *
 * Input: records, each
 *   op   1 byte   bits 0-3: message type (0: raw bytes, header included)
 *                 bits 4-6: fds sent with it: 0 none, 1 sealed memfd,
 *                           2 unsealed memfd, 3 sealed memfd shorter than
 *                           announced, 4 pipe, 5 /dev/null, 6 two sealed
 *                           memfds, 7 sealed memfd + a socket
 *                 bit 7:    wait for the reply before the next record
 *   len  2 bytes  little-endian, then len bytes: JSON up to the first NUL,
 *                 binary after it (the header is built to match: nfds, len,
 *                 jlen, an increasing req_id)
 * Memfds are MEMFD_BYTES long, so {"region":1,"size":65536} adopts one.
 *
 * Oracles besides the sanitizers: every byte ckptd sends parses as a
 * protocol message; ckptd closes the session within SESSION_GONE_MS once the
 * peer hangs up; every CHECK_EVERY inputs (every input in `make test`),
 * once the jobs have settled (step deadline 1 s), ckptd holds exactly its
 * baseline fds, no job is left in memory (idle jobs leave) and no step is
 * left in flight.  (Run libFuzzer with -print_funcs=0: its symbolizer
 * for NEW_FUNC lines would count as fds here.)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "job.h"
#include "log.h"
#include "proto.h"
#include "sha.h"
#include "shm_region.h"
#include "srv.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MEMFD_BYTES      65536
#define SESSION_GONE_MS  5000
#define SETTLE_MS        20000   /* step deadline 1 s, plus slack */
#define FDS_SETTLE_MS    2000
#define REPLY_WAIT_MS    300     /* a deferred restore may take longer: fine */
#define CHECK_EVERY      256     /* inputs between settled-state checks
                                    (FUZZ_SESSION_CHECK_EVERY overrides) */

#define FAIL(...) do { fprintf(stderr, "fuzz_session: " __VA_ARGS__); \
	fputc('\n', stderr); abort(); } while (0)

static struct srv S;
static char dir[64];
static int base_fds;
static unsigned long inputs, check_every = CHECK_EVERY;

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The client end of the input's connection. */
struct peer {
	int fd;
	int eof;                    /* ckptd closed it */
	uint64_t next_id, last_reply;
	struct proto_reader rd;
};

/* Read and check whatever ckptd sent. */
static void peer_drain(struct peer *p)
{
	while (!p->eof) {
		struct proto_msg m;
		int r = proto_read(&p->rd, p->fd);

		if (r == -EAGAIN)
			break;
		if (r <= 0 && r != -ENOBUFS) {
			p->eof = 1;     /* EOF, or a reset after ckptd closed */
			break;
		}
		while ((r = proto_next(&p->rd, &m, NULL, NULL, 0)) == 1) {
			if (m.hdr.type == PROTO_RESTORE_PART) {
				/* a piece of a RESTORE's outcome: its reply follows */
				if (m.hdr.status != 0 || m.hdr.req_id == 0 || m.nfds)
					FAIL("a RESTORE_PART with status %d, req_id %llu, %u fds",
					     m.hdr.status, (unsigned long long)m.hdr.req_id, m.nfds);
				continue;
			}
			if (!(m.hdr.type & PROTO_REPLY) && m.hdr.type != PROTO_EVENT &&
			    m.hdr.type != PROTO_ERROR)
				FAIL("ckptd sent a request (type %u)", m.hdr.type);
			if (m.hdr.status > 0)
				FAIL("a positive status %d", m.hdr.status);
			for (unsigned i = 0; i < m.nfds; i++)
				close(m.fds[i]);
			if (m.hdr.req_id > p->last_reply)
				p->last_reply = m.hdr.req_id;
		}
		if (r < 0)
			FAIL("ckptd sent a malformed message (%d)", r);
	}
}

/* Run ckptd's loop for up to ms, or until done() holds. */
static void pump(struct peer *p, int ms, int (*done)(struct peer *))
{
	uint64_t end = now_ms() + (uint64_t)ms;

	for (;;) {
		struct pollfd pf = { uv_backend_fd(S.loop), POLLIN, 0 };

		uv_run(S.loop, UV_RUN_NOWAIT);
		if (p)
			peer_drain(p);
		if ((done && done(p)) || now_ms() >= end)
			return;
		poll(&pf, 1, 1);
	}
}

/* Descriptors ckptd could hold: all of this process's but libFuzzer's own
 * files (merge control file, logs), i.e. regular files outside our
 * directory that are not memfds.  ckptd opens regular files only under
 * its root, and a leaked memfd from a client must count. */
static int count_daemon_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		char link[300], target[PATH_MAX];
		struct stat st;
		ssize_t k;

		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		k = readlink(link, target, sizeof(target) - 1);
		if (k > 0 && stat(link, &st) == 0 && S_ISREG(st.st_mode)) {
			target[k] = 0;
			if (target[0] == '/' && strncmp(target, dir, strlen(dir)) != 0 &&
			    strncmp(target, "/memfd:", 7) != 0)
				continue;
		}
		n++;
	}
	closedir(d);
	return n;
}

static int no_sessions(struct peer *p) { (void)p; return S.nsessions == 0; }
static int settled(struct peer *p) { (void)p; return S.nsessions == 0 && !job_busy(&S); }
static int replied(struct peer *p) { return p->eof || p->last_reply + 1 >= p->next_id; }

static int make_memfd(size_t size, int seal)
{
	int fd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
		FAIL("memfd: %s", strerror(errno));
	if (seal && fcntl(fd, F_ADD_SEALS, SHM_REQUIRED_SEALS) < 0)
		FAIL("seal: %s", strerror(errno));
	return fd;
}

/* Fds for kind 0-7 (see the top); returns how many. */
static unsigned make_fds(unsigned kind, int fds[2])
{
	int pp[2];

	switch (kind) {
	case 0: return 0;
	case 1: fds[0] = make_memfd(MEMFD_BYTES, 1); return 1;
	case 2: fds[0] = make_memfd(MEMFD_BYTES, 0); return 1;
	case 3: fds[0] = make_memfd(4096, 1); return 1;
	case 4:
		if (pipe2(pp, O_CLOEXEC) < 0)
			FAIL("pipe: %s", strerror(errno));
		close(pp[1]);
		fds[0] = pp[0];
		return 1;
	case 5:
		if ((fds[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
			FAIL("/dev/null: %s", strerror(errno));
		return 1;
	case 6:
		fds[0] = make_memfd(MEMFD_BYTES, 1);
		fds[1] = make_memfd(MEMFD_BYTES, 1);
		return 2;
	default:
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pp) < 0)
			FAIL("socketpair: %s", strerror(errno));
		close(pp[1]);
		fds[0] = make_memfd(MEMFD_BYTES, 1);
		fds[1] = pp[0];
		return 2;
	}
}

/* Send buf (fds with its first byte), running ckptd while the socket is
 * full.  Returns 0, or -1 once ckptd has closed the connection. */
static int peer_send(struct peer *p, const uint8_t *buf, size_t len, const int *fds,
		     unsigned nfds)
{
	size_t off = 0;

	while (off < len && !p->eof) {
		char cbuf[CMSG_SPACE(2 * sizeof(int))];
		struct iovec iov = { (void *)(buf + off), len - off };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n;

		if (nfds && off == 0) {
			struct cmsghdr *c;
			memset(cbuf, 0, sizeof(cbuf));
			mh.msg_control = cbuf;
			mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
			c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
			memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
		}
		n = sendmsg(p->fd, &mh, MSG_NOSIGNAL);
		if (n > 0) {
			off += (size_t)n;
		} else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			pump(p, 1, NULL);
		} else {
			p->eof = 1;     /* EPIPE / ECONNRESET: ckptd closed it */
		}
	}
	return p->eof ? -1 : 0;
}

static void send_record(struct peer *p, uint8_t op, const uint8_t *body, size_t len)
{
	unsigned type = op & 15, kind = (op >> 4) & 7, nfds;
	const uint8_t *nul = memchr(body, 0, len);
	size_t jlen = nul ? (size_t)(nul - body) : len;
	struct proto_hdr h;
	uint8_t *buf;
	int fds[2];

	nfds = make_fds(kind, fds);
	if (type == 0) {        /* raw bytes */
		peer_send(p, body, len, fds, nfds);
	} else {
		/* the binary part starts after the NUL that ends the JSON */
		size_t blen = nul ? len - jlen - 1 : 0;
		if (!(buf = malloc(PROTO_HDR_SIZE + jlen + blen + 1)))
			FAIL("out of memory");
		proto_hdr_init(&h, (uint16_t)type, p->next_id++, 0, (uint32_t)jlen,
			       (uint32_t)blen, nfds);
		memcpy(buf, &h, PROTO_HDR_SIZE);
		memcpy(buf + PROTO_HDR_SIZE, body, jlen);
		if (blen)
			memcpy(buf + PROTO_HDR_SIZE + jlen, nul + 1, blen);
		peer_send(p, buf, PROTO_HDR_SIZE + jlen + blen, fds, nfds);
		free(buf);
	}
	for (unsigned i = 0; i < nfds; i++)
		close(fds[i]);          /* ckptd has its own copies now */
	pump(p, (op & 0x80) && type ? REPLY_WAIT_MS : 0, (op & 0x80) ? replied : NULL);
}

static void check_settled(void)
{
	unsigned njobs = 0;
	int n;

	pump(NULL, SETTLE_MS, settled);
	if (!settled(NULL))
		FAIL("a step is still in flight %d ms after the last session closed", SETTLE_MS);
	/* a worker may close its files just after its last notice, and idle
	 * jobs (no session, nothing in flight) leave on the loop's next turn */
	for (uint64_t end = now_ms() + FDS_SETTLE_MS; ; pump(NULL, 5, NULL)) {
		njobs = 0;
		for (struct job *j = S.jobs; j; j = j->next)
			njobs++;
		if (((n = count_daemon_fds()) == base_fds && !njobs) || now_ms() > end)
			break;
	}
	if (njobs)
		FAIL("%u idle jobs are still in memory with no session left", njobs);
	if (n != base_fds) {
		fflush(stdout);
		if (system("ls -l /proc/$PPID/fd >&2") != 0)
			fprintf(stderr, "(cannot list the fds)\n");
		FAIL("ckptd holds %d fds, expected %d (baseline) + %u (jobs)", n, base_fds, njobs);
	}
}

static void cleanup(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (dir[0] && system(cmd) != 0)
		fprintf(stderr, "fuzz_session: could not remove %s\n", dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct config cfg;
	(void)argc; (void)argv;

	/* tmpfs: fast, and O_DIRECT's refusal there exercises the fallback */
	snprintf(dir, sizeof(dir), "/dev/shm/fuzz-session.XXXXXX");
	if (!mkdtemp(dir)) {
		snprintf(dir, sizeof(dir), "/tmp/fuzz-session.XXXXXX");
		if (!mkdtemp(dir))
			FAIL("mkdtemp: %s", strerror(errno));
	}
	atexit(cleanup);
	config_defaults(&cfg);
	snprintf(cfg.socket, sizeof(cfg.socket), "%s/s", dir);
	snprintf(cfg.root, sizeof(cfg.root), "%s/root", dir);
	if (mkdir(cfg.root, 0700) < 0)
		FAIL("mkdir: %s", strerror(errno));
	cfg.staging_bytes = 4 << 20;
	cfg.chunk_bytes = 256 << 10;
	cfg.keep_last = 1;
	cfg.lock_pool = 0;
	cfg.stage_threads = cfg.write_threads = 1;
	cfg.step_deadline_ms = 1000;
	cfg.msg_timeout_ms = 1000;
	cfg.max_regions = 4;
	cfg.max_tensors = 16;
	cfg.max_blobs = 4;
	cfg.max_blob_bytes = 1 << 16;
	snprintf(cfg.gpu, sizeof(cfg.gpu), "off");
	sha_setup();    /* the daemon's threads may be hashing at exit */
	log_init(LOG_LVL_ERR);
	log_set_level(getenv("FUZZ_SESSION_LOG") ? LOG_LVL_DEBUG : LOG_LVL_ERR);
	if (srv_init(&S, &cfg, NULL) < 0)
		FAIL("srv_init failed");
	if (getenv("FUZZ_SESSION_CHECK_EVERY"))
		check_every = strtoul(getenv("FUZZ_SESSION_CHECK_EVERY"), NULL, 10) ?: 1;
	/* the first connection opens ckptd's spare fd (for EMFILE), and the
	 * writer threads open their rings as they start: count once the
	 * number has held still for 200 ms */
	LLVMFuzzerTestOneInput(NULL, 0);
	for (int still = 0, last = -1; still < 4; ) {
		pump(NULL, 50, NULL);
		base_fds = count_daemon_fds();
		still = base_fds == last ? still + 1 : 0;
		last = base_fds;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct peer p = { .next_id = 1 };
	size_t i = 0;

	p.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", S.cfg.socket);
	if (p.fd < 0 || connect(p.fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		FAIL("connect: %s", strerror(errno));
	proto_reader_init(&p.rd, PROTO_MAX_PAYLOAD);
	pump(&p, 0, NULL);      /* accept */
	while (i + 3 <= size && !p.eof) {
		uint8_t op = data[i];
		size_t len = (size_t)data[i + 1] | (size_t)data[i + 2] << 8;

		i += 3;
		if (len > size - i)
			len = size - i;
		send_record(&p, op, data + i, len);
		i += len;
	}
	close(p.fd);
	pump(NULL, SESSION_GONE_MS, no_sessions);
	if (S.nsessions)
		FAIL("ckptd still has %u sessions %d ms after the peer hung up",
		     S.nsessions, SESSION_GONE_MS);
	proto_reader_release(&p.rd);
	if (base_fds && ++inputs % check_every == 0)
		check_settled();
	return 0;
}
