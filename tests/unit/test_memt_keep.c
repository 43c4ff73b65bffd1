/* test_memt_keep.c - the memory tier's copies beyond one ckptd
 * (daemon/memt_fd.c, memt_peer.c): committed copies go to systemd's fd
 * store and come back from it at the next start, those that share files
 * with older steps together with the steps that lend them (each keeping
 * only what it lends); a partner node's copy is described, sent run by run
 * around what it shares, filled and kept like a capture, or refused when
 * the partner does not hold what it shares. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "csum.h"
#include "memt.h"
#include "memt_help.h"
#include "mfst.h"
#include "rsave.h"
#include "shard_read.h"
#include "testhelp.h"

/* Which way the tests that run both share a file: linked unstaged
 * (capture_shared), or found unchanged as written (capture_same). */
static int found_same;

static struct memt_cap *capture_sharing(struct memt *t, const char *job, uint64_t step,
					int rank, char *why, size_t whylen)
{
	return (found_same ? capture_same : capture_shared)(t, job, step, rank, why, whylen);
}


/* The fd store (memt_fd.c): a committed copy is handed over with its
 * description (FDSTORE=1 + SCM_RIGHTS), and a new tier takes it back from
 * $LISTEN_FDS and reads it; a memfd without a description and an fd not
 * named by ckptd are closed and taken out of the store. */
static int recv_notice(int s, char *buf, size_t len, int *fd)
{
	union { char b[CMSG_SPACE(sizeof(int))]; struct cmsghdr a; } u;
	struct iovec iov = { buf, len - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			     .msg_controllen = sizeof(u.b) };
	struct cmsghdr *cm;
	ssize_t n = recvmsg(s, &mh, MSG_DONTWAIT);

	*fd = -1;
	if (n < 0)
		return -1;
	buf[n] = '\0';
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(cm), sizeof(int));
	return 0;
}

/* A socket standing in for systemd's notify socket ($NOTIFY_SOCKET set),
 * at an fd clear of 3..5 (given back fds go there). */
static int store_open(struct sockaddr_un *sa)
{
	int ns;

	snprintf(sa->sun_path, sizeof(sa->sun_path), "/tmp/test_memt.%d.sock", (int)getpid());
	unlink(sa->sun_path);
	ns = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (ns < 0 || bind(ns, (struct sockaddr *)sa, sizeof(*sa)) < 0)
		return -1;
	setenv("NOTIFY_SOCKET", sa->sun_path, 1);
	return fcntl(ns, F_DUPFD_CLOEXEC, 100);
}

static void store_close(int ns, const struct sockaddr_un *sa)
{
	unsetenv("NOTIFY_SOCKET");
	close(ns);
	unlink(sa->sun_path);
}

/* The next notice: a memfd named name went to the store; its fd, moved
 * clear of 3..5 (given back fds go there), in *fd.  0, or 1. */
static int stored(int ns, const char *name, int *fd)
{
	char buf[512], want[128];
	int got;

	snprintf(want, sizeof(want), "FDSTORE=1\nFDNAME=%s", name);
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &got), 0);
	CHECK(!strcmp(buf, want));
	CHECK(got >= 0 && (*fd = fcntl(got, F_DUPFD_CLOEXEC, 100)) >= 100);
	close(got);
	return 0;
}

static int test_fd_store(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	struct memt_cap *c;
	struct memt_step *s;
	struct mfst_file mf = { "model/rank_00003.safetensors", FSIZE, { DIGEST_SHA256, SHA }, 0, NULL, NULL };
	struct shard_seg all;
	uint8_t *a = calloc(1, FSIZE);
	char buf[512], why[256], env[32];
	int ns, fd, junk;
	struct memt_usage u;

	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(memt_new(1 << 20, 0, &t), 0);
	CHECK((c = capture(t, "j", 7, 3, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 7);
	memt_cap_put(c);
	CHECK_EQ(stored(ns, "memt.j.7.3", &fd), 0);
	memt_free(t);                     /* exit: the store keeps it */
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);

	/* the next start: ours at 3, a bare memfd at 4, a stranger at 5 */
	junk = memfd_create("junk", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	CHECK(junk >= 0 && ftruncate(junk, 8192) == 0);
	CHECK(dup2(fd, 3) == 3 && dup2(junk, 4) == 4 && dup2(junk, 5) == 5);
	close(fd);
	close(junk);
	snprintf(env, sizeof(env), "%d", (int)getpid());
	setenv("LISTEN_PID", env, 1);
	setenv("LISTEN_FDS", "3", 1);
	setenv("LISTEN_FDNAMES", "memt.j.7.3:memt.x.1.0:other", 1);
	CHECK_EQ(memt_new(1 << 20, 0, &t), 0);
	memt_fd_take_back(t);
	CHECK(getenv("LISTEN_FDS") == NULL);
	CHECK_EQ(fcntl(4, F_GETFD), -1);        /* closed */
	CHECK_EQ(fcntl(5, F_GETFD), -1);
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &junk), 0);
	CHECK(!strcmp(buf, "FDSTOREREMOVE=1\nFDNAME=memt.x.1.0"));
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &junk), 0);
	CHECK(!strcmp(buf, "FDSTOREREMOVE=1\nFDNAME=other"));
	memt_usage(t, &u);
	CHECK_EQ(u.steps, 1);
	CHECK((s = memt_get(t, "j", 7, TXID, why, sizeof(why))) != NULL);
	all = (struct shard_seg){ 0, FSIZE, a, NULL, 0 };
	CHECK_EQ(memt_read(s, &mf, &all, 1, why, sizeof(why)), 0);
	CHECK(!memcmp(a, content, FSIZE));
	memt_put(s);
	/* a newer step of the job replaces it, in the store too */
	CHECK((c = capture(t, "j", 8, 3, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 8);
	memt_cap_put(c);
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &junk), 0);
	CHECK(!strcmp(buf, "FDSTOREREMOVE=1\nFDNAME=memt.j.7.3"));
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &fd), 0);
	CHECK(!strcmp(buf, "FDSTORE=1\nFDNAME=memt.j.8.3"));
	close(fd);
	memt_free(t);
	store_close(ns, &sa);
	free(a);
	return 0;
}

/* The next start of ckptd under systemd: fds[] (n of them, named) given
 * back at 3.. */
static void start_with(const int *fds, int n, const char *names)
{
	char env[32];

	for (int i = 0; i < n; i++)
		if (dup2(fds[i], 3 + i) == 3 + i)
			close(fds[i]);
	snprintf(env, sizeof(env), "%d", (int)getpid());
	setenv("LISTEN_PID", env, 1);
	snprintf(env, sizeof(env), "%d", n);
	setenv("LISTEN_FDS", env, 1);
	setenv("LISTEN_FDNAMES", names, 1);
}

/* Job j's step 1 (rank 0) captured and committed in a new tier *t: the
 * memfd it handed to the store (ns) in *fd.  0, or 1 (a check failed). */
static int stored_step1(int ns, struct memt **t, int *fd)
{
	struct memt_cap *c;

	CHECK_EQ(memt_new(4 << 20, 0, t), 0);
	CHECK((c = capture(*t, "j", 1, 0, UINT64_MAX)) != NULL);
	memt_step_committed(*t, "j", 1);
	memt_cap_put(c);
	return stored(ns, "memt.j.1.0", fd);
}

/* The next two notices take steps 1 and 2 out of the store, in any
 * order.  0, or 1. */
static int removed_1_and_2(int ns)
{
	char buf[512];
	int junk, removed = 0;

	for (int i = 0; i < 2; i++) {
		CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &junk), 0);
		removed += !strcmp(buf, "FDSTOREREMOVE=1\nFDNAME=memt.j.1.0") ||
			   !strcmp(buf, "FDSTOREREMOVE=1\nFDNAME=memt.j.2.0");
	}
	CHECK_EQ(removed, 2);
	return 0;
}

/* A step that shares a file with an older one goes to the store with it,
 * and the older step stays there while shared; both come back whatever
 * their order, the newer one readable; once nothing shares it, the older
 * one leaves the store. */
static int test_fd_store_shared(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	struct memt_cap *c;
	char buf[512], why[256];
	int ns, fd[2], junk;

	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(stored_step1(ns, &t, &fd[1]), 0);
	CHECK((c = capture_sharing(t, "j", 2, 0, why, sizeof(why))) != NULL);
	memt_step_committed(t, "j", 2);
	memt_cap_put(c);
	CHECK_EQ(stored(ns, "memt.j.2.0", &fd[0]), 0);      /* 1 stays */
	memt_free(t);
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);

	/* the newer one first */
	start_with(fd, 2, "memt.j.2.0:memt.j.1.0");
	CHECK_EQ(memt_new(4 << 20, 0, &t), 0);
	memt_fd_take_back(t);
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);      /* none dropped */
	CHECK_EQ(held(t), 1);
	CHECK_EQ(held_bytes(t), CAPLEN);
	CHECK_EQ(reads_back(t, "j", 2, 0), 0);
	CHECK((c = capture(t, "j", 3, 0, UINT64_MAX)) != NULL);
	memt_step_committed(t, "j", 3);
	memt_cap_put(c);
	CHECK_EQ(removed_1_and_2(ns), 0);
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &junk), 0);
	CHECK(!strcmp(buf, "FDSTORE=1\nFDNAME=memt.j.3.0"));
	close(junk);
	memt_free(t);
	store_close(ns, &sa);
	return 0;
}


/* After a restart with a smaller budget: a step that shares a file with
 * an older one and does not fit goes, and so does the older one (taken
 * back for it alone: the job's newest step is the one kept). */
static int test_fd_store_shared_unfit(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	struct memt_cap *c;
	struct rsave rs;
	struct wfile f[2];
	char why[256];
	int ns, fd[2];

	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(stored_step1(ns, &t, &fd[1]), 0);
	/* step 2: step 1's file shared, and a file of its own */
	rsave_fake(&rs, &f[0], 0);
	f[0].linked = 1;
	f[0].nchunks = 0;
	f[0].digest = (struct digest){ DIGEST_SHA256, SHA };
	f[1] = f[0];
	snprintf(f[1].path, sizeof(f[1].path), "optim/rank_00000.safetensors");
	f[1].linked = 0;
	f[1].nchunks = (FSIZE + CHUNK - 1) / CHUNK;
	rs.files = f;
	rs.nfiles = 2;
	CHECK((c = memt_cap_start(t, "j", 2, TXID, &rs, why, sizeof(why))) != NULL);
	fill_file(c, 1, UINT64_MAX);
	memt_step_committed(t, "j", 2);
	memt_cap_put(c);
	CHECK_EQ(stored(ns, "memt.j.2.0", &fd[0]), 0);
	memt_free(t);

	/* room for one copy and a half: step 1 alone would fit */
	start_with(fd, 2, "memt.j.2.0:memt.j.1.0");
	CHECK_EQ(memt_new(CAPLEN + CAPLEN / 2, 0, &t), 0);
	memt_fd_take_back(t);
	CHECK_EQ(held(t), 0);
	CHECK_EQ(held_bytes(t), 0);
	CHECK_EQ(removed_1_and_2(ns), 0);
	memt_free(t);
	store_close(ns, &sa);
	return 0;
}

/* Copy c's bytes into r as coord_repl.c sends them: run by run, r's runs
 * the same as c's.  0 or -1. */
static int copy_runs(const struct memt_cap *c, struct memt_cap *r)
{
	const uint8_t *src = memt_cap_bytes(c);
	uint8_t *dst = memt_cap_bytes(r);
	uint64_t at = 0, run, rrun, sent = 0;

	if (memt_cap_sent(c) != memt_cap_sent(r))
		return -1;
	for (;;) {
		at = memt_cap_next_run(c, at, &run);
		if (memt_cap_next_run(r, at, &rrun) != at || rrun != run)
			return -1;
		if (!run)
			break;
		if (memt_copy_prepare(r, at, run) < 0)
			return -1;
		memcpy(dst + at, src + at, run);
		at += run;
		sent += run;
	}
	return sent == memt_cap_sent(c) ? 0 : -1;
}

/* Send capture c to tier b as coord_repl.c does: 0, or -1 with why (b
 * refused it). */
static int send_copy(struct memt_cap *c, struct memt *b, char *why, size_t whylen)
{
	json_t *desc = memt_cap_describe(c);
	struct memt_cap *r = memt_copy_start(b, desc, 0, why, whylen);
	int ok;

	json_decref(desc);
	if (!r)
		return -1;
	ok = copy_runs(c, r) == 0;
	memt_copy_end(r, ok);
	return ok ? 0 : -1;
}

/* A partner that holds nothing of c's job (restarted) refuses c's copy,
 * which shares what it does not hold.  0, or 1. */
static int new_partner_refuses(struct memt_cap *c)
{
	struct memt *b;
	char why[256];

	CHECK_EQ(memt_new(8 * CAPLEN, 0, &b), 0);
	CHECK_EQ(send_copy(c, b, why, sizeof(why)), -1);
	CHECK(strstr(why, "no longer in memory") != NULL);
	CHECK_EQ(held_bytes(b), 0);
	memt_free(b);
	return 0;
}

/* A partner's copy of a capture that shares a file with an older step
 * carries no bytes of it: the partner shares it with its own copy of the
 * step it holds (one copy there too), or refuses the copy when it holds
 * no such file. */
static int test_partner_shared(void)
{
	struct memt *a, *b;
	struct memt_cap *c;
	char why[256];

	CHECK_EQ(memt_new(4 << 20, 0, &a), 0);
	CHECK_EQ(memt_new(4 << 20, 0, &b), 0);
	CHECK((c = capture(a, "j", 1, 1, UINT64_MAX)) != NULL);
	CHECK_EQ(send_copy(c, b, why, sizeof(why)), 0);
	memt_step_committed(a, "j", 1);
	memt_step_committed(b, "j", 1);
	memt_cap_put(c);
	for (uint64_t step = 2; step <= 3; step++) {
		CHECK((c = capture_sharing(a, "j", step, 1, why, sizeof(why))) != NULL);
		CHECK_EQ(send_copy(c, b, why, sizeof(why)), 0);
		memt_step_committed(a, "j", step);
		memt_step_committed(b, "j", step);
		memt_cap_put(c);
		CHECK_EQ(reads_back(b, "j", step, 1), 0);
		CHECK_EQ(held_bytes(b), CAPLEN);
	}
	memt_free(b);
	CHECK((c = capture_sharing(a, "j", 4, 1, why, sizeof(why))) != NULL);
	CHECK_EQ(new_partner_refuses(c), 0);
	memt_cap_put(c);
	memt_free(a);
	return 0;
}


/* Partner nodes (memt_peer.c): a capture described and copied into a
 * second tier lands in the same step, readable once committed; a held
 * capture outlives its dropped save until released; a fetched copy joins
 * a committed step; every held file is walked once, a changed one left
 * out. */
static int test_partner_copy(void)
{
	struct memt *a, *b;
	struct memt_cap *c, *r;
	struct memt_step *s;
	struct mfst_file mf = { "model/rank_00001.safetensors", FSIZE, { DIGEST_SHA256, SHA }, 0, NULL, NULL };
	uint8_t *buf = calloc(1, FSIZE), *dst;
	struct shard_seg seg = { 0, FSIZE, buf, NULL, 0 };
	const uint8_t *src;
	uint64_t len;
	struct seen seen = { 0, 0 };
	json_t *desc;
	char why[256], msg[256];

	CHECK_EQ(memt_new(1 << 20, 0, &a), 0);
	CHECK_EQ(memt_new(1 << 20, 0, &b), 0);
	/* node a captures rank 1; node b takes its copy into step 7 */
	CHECK((c = capture(a, "j", 7, 1, UINT64_MAX)) != NULL);
	CHECK_EQ(memt_cap_ready(c, why, sizeof(why)), 0);
	CHECK((desc = memt_cap_describe(c)) != NULL);
	src = memt_cap_bytes(c);
	len = memt_cap_sent(c);
	CHECK_EQ(len, CAPLEN);
	CHECK((r = memt_copy_start(b, desc, 0, why, sizeof(why))) != NULL);
	dst = memt_cap_bytes(r);
	CHECK_EQ(memt_cap_sent(r), len);
	CHECK_EQ(memt_copy_prepare(r, 0, len / 2), 0);      /* as the MPI thread does */
	CHECK_EQ(memt_copy_prepare(r, len / 2, len - len / 2), 0);
	memcpy(dst, src, len);
	memt_copy_end(r, 1);
	json_decref(desc);
	CHECK(memt_get(b, "j", 7, TXID, why, sizeof(why)) == NULL);   /* not committed */
	memt_step_committed(b, "j", 7);
	CHECK((s = memt_get(b, "j", 7, TXID, why, sizeof(why))) != NULL);
	CHECK_EQ(memt_read(s, &mf, &seg, 1, msg, sizeof(msg)), 0);
	CHECK(!memcmp(buf, content, FSIZE));
	CHECK(memt_holds(b, "j", 7, TXID, &mf));
	CHECK_EQ(memt_each_file(s, each, &seen), 0);
	CHECK_EQ(seen.n, 1);
	CHECK_EQ(seen.ok, 1);
	/* served to a third node, fetched into a committed step there */
	const uint8_t *fdata;
	CHECK_EQ(memt_file_describe(s, "model/rank_00001.safetensors", &desc, &fdata, &len), 0);
	CHECK_EQ(memt_file_describe(s, "model/rank_00009.safetensors", &desc, &fdata, &len) < 0, 1);
	memt_put(s);
	memt_step_failed(a, "j", 7);
	memt_cap_put(c);
	memt_free(a);
	CHECK_EQ(memt_new(1 << 20, 0, &a), 0);
	CHECK(!memt_holds(a, "j", 7, TXID, &mf));
	CHECK((r = memt_copy_start(a, desc, 1, why, sizeof(why))) != NULL);
	dst = memt_cap_bytes(r);
	CHECK_EQ(memt_cap_sent(r), len);
	memcpy(dst, fdata, len);
	memt_copy_end(r, 1);
	json_decref(desc);
	CHECK(memt_holds(a, "j", 7, TXID, &mf));
	/* a copy that did not complete is not kept */
	CHECK_EQ(memt_file_describe((s = memt_get(b, "j", 7, TXID, why, sizeof(why))),
				    mf.path, &desc, &fdata, &len), 0);
	memt_put(s);
	CHECK((r = memt_copy_start(a, desc, 0, why, sizeof(why))) != NULL);  /* step 7 is committed */
	memt_copy_end(r, 0);
	json_decref(desc);
	memt_free(a);

	/* a capture held for sending survives its save's drop until released */
	CHECK_EQ(memt_new(1 << 20, 0, &a), 0);
	CHECK((c = capture(a, "j", 8, 0, UINT64_MAX)) != NULL);
	memt_cap_hold(c);
	memt_step_failed(a, "j", 8);
	memt_cap_put(c);
	src = memt_cap_bytes(c);
	CHECK(!memcmp(src, content, FSIZE));     /* still mapped */
	memt_cap_release(c);
	CHECK_EQ(held(a), 0);
	/* an incomplete capture is not ready */
	CHECK((c = capture(a, "j", 9, 0, 1)) != NULL);
	CHECK_EQ(memt_cap_ready(c, why, sizeof(why)), -ENODATA);
	CHECK(strstr(why, "not captured whole") != NULL);
	memt_cap_put(c);

	/* a changed byte: the file is left out of the walk */
	s = memt_get(b, "j", 7, TXID, why, sizeof(why));
	CHECK(s != NULL);
	CHECK_EQ(memt_file_describe(s, mf.path, &desc, &fdata, &len), 0);
	json_decref(desc);
	((uint8_t *)fdata)[100] ^= 1;
	seen = (struct seen){ 0, 0 };
	CHECK_EQ(memt_each_file(s, each, &seen), 0);
	CHECK_EQ(seen.n, 0);
	memt_put(s);
	memt_free(a);
	memt_free(b);
	free(buf);
	return 0;
}


/* A capture whose middle file is shared sends two runs (never the
 * hole), and a partner holding the older step fills its copy from them:
 * every file reads back there. */
static int test_runs(void)
{
	struct memt *a, *b;
	struct memt_cap *c;
	uint64_t run;
	char why[256];

	content_fill();
	CHECK_EQ(memt_new(4 << 20, 0, &a), 0);
	CHECK_EQ(memt_new(4 << 20, 0, &b), 0);
	for (uint64_t step = 1; step <= 2; step++) {
		CHECK((c = capture_files(a, step, 3, step == 2 ? 2 : 0)) != NULL);
		if (step == 2) {
			CHECK_EQ(memt_cap_sent(c), 2 * CAPLEN);
			CHECK_EQ(memt_cap_next_run(c, 0, &run), 0);
			CHECK_EQ(run, CAPLEN);
			CHECK_EQ(memt_cap_next_run(c, 100, &run), 100);
			CHECK_EQ(run, CAPLEN - 100);
			CHECK_EQ(memt_cap_next_run(c, CAPLEN, &run), 2 * CAPLEN);
			CHECK_EQ(run, CAPLEN);
			CHECK_EQ(memt_cap_next_run(c, 3 * CAPLEN, &run), 3 * CAPLEN);
			CHECK_EQ(run, 0);
		}
		CHECK_EQ(send_copy(c, b, why, sizeof(why)), 0);
		memt_step_committed(a, "j", step);
		memt_step_committed(b, "j", step);
		memt_cap_put(c);
		CHECK_EQ(files_read_back(b, step, 3), 0);
		/* one copy of each file: step 1's memory keeps the one it lends */
		CHECK_EQ(held_bytes(b), 3 * CAPLEN);
	}
	memt_free(a);
	memt_free(b);
	return 0;
}


/* ckptd restarts: tier *t closes (the store told nothing), and a new one
 * of 8 copies takes back fds (n, named) and drops none; it holds one step
 * of nfiles copies' bytes, whose files g0.. of step read back.  0, or 1. */
static int restart_reads(int ns, struct memt **t, const int *fds, int n, const char *names,
			 uint64_t step, int nfiles)
{
	char buf[512];
	int junk;

	memt_free(*t);
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);
	start_with(fds, n, names);
	CHECK_EQ(memt_new(8 * CAPLEN, 0, t), 0);
	memt_fd_take_back(*t);
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);
	CHECK_EQ(held(*t), 1);
	CHECK_EQ(held_bytes(*t), (uint64_t)nfiles * CAPLEN);
	CHECK_EQ(files_read_back(*t, step, nfiles), 0);
	return 0;
}

/* Files frozen one more each step (4 files; step k shares files 0..k-2
 * with the steps before it): one copy of each file is held, every older
 * step keeping only the file it lends (an orphan gives back the others),
 * and so after a restart: every step is stored while it lends, each
 * describing what it kept, and all come back, step 4 readable. */
static int test_stair(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	char buf[512], name[32];
	int ns, fd[4], junk;

	content_fill();
	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	for (uint64_t step = 1; step <= 4; step++) {
		CHECK_EQ(save_files(t, step, 4, (1u << (step - 1)) - 1), 0);
		CHECK_EQ(held(t), 1);
		CHECK_EQ(held_bytes(t), 4 * CAPLEN);
		snprintf(name, sizeof(name), "memt.j.%llu.0", (unsigned long long)step);
		CHECK_EQ(stored(ns, name, &fd[step - 1]), 0);
	}
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);    /* none removed */
	CHECK_EQ(files_read_back(t, 4, 4), 0);
	CHECK_EQ(restart_reads(ns, &t, fd, 4, "memt.j.1.0:memt.j.2.0:memt.j.3.0:memt.j.4.0",
			       4, 4), 0);
	memt_free(t);
	store_close(ns, &sa);
	return 0;
}

/* Three steps of job j, two files each: step 2 finds those in same2
 * unchanged, step 3 those in same3.  One copy of each file is held; step
 * `gone` leaves the store as step 3 comes (it lends nothing), and after a
 * restart the other two come back, step 3 readable.  0, or 1. */
static int three_steps(unsigned same2, unsigned same3, int gone)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	char buf[512], want[64], names[64] = "";
	int ns, fd[3], kept[2], n = 0, junk;

	content_fill();
	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	CHECK_EQ(save_files(t, 1, 2, 0), 0);
	CHECK_EQ(save_files(t, 2, 2, same2), 0);
	CHECK_EQ(save_files(t, 3, 2, same3), 0);
	CHECK_EQ(held_bytes(t), 2 * CAPLEN);
	CHECK_EQ(stored(ns, "memt.j.1.0", &fd[0]), 0);
	CHECK_EQ(stored(ns, "memt.j.2.0", &fd[1]), 0);
	snprintf(want, sizeof(want), "FDSTOREREMOVE=1\nFDNAME=memt.j.%d.0", gone);
	CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &junk), 0);
	CHECK(!strcmp(buf, want));
	CHECK_EQ(stored(ns, "memt.j.3.0", &fd[2]), 0);
	close(fd[gone - 1]);
	for (int step = 1; step <= 3; step++)
		if (step != gone) {
			kept[n++] = fd[step - 1];
			snprintf(names + strlen(names), sizeof(names) - strlen(names),
				 "%smemt.j.%d.0", n > 1 ? ":" : "", step);
		}
	CHECK_EQ(restart_reads(ns, &t, kept, 2, names, 3, 2), 0);
	memt_free(t);
	store_close(ns, &sa);
	return 0;
}

/* A step that lends a file while what it shared itself is gone (step 2
 * shares g0 with step 1, step 3 g1 with step 2 and not g0): step 1 leaves
 * the store, and after a restart step 2 comes back without g0, for step 3
 * to share g1 with. */
static int test_fd_store_chain(void)
{
	return three_steps(1, 2, 1);
}

/* An older step's memory that lends two files, one of which changes
 * later, gives that one back then (step 1 lends g0 and g1 to step 2; step
 * 3 changes g0): one copy of each file is held, and after a restart step
 * 1 comes back with g1 alone, for step 3. */
static int test_orphan_later(void)
{
	return three_steps(3, 2, 2);
}

/* Closing the tier leaves the memfds in the store as they are: step 2
 * shares both of step 1's files; when step 2 goes at close, step 1 does
 * not give its files back one by one, and both come back readable. */
static int test_close_keeps(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	int ns, fd[2];

	content_fill();
	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	CHECK_EQ(save_files(t, 1, 2, 0), 0);
	CHECK_EQ(save_files(t, 2, 2, 3), 0);
	CHECK_EQ(stored(ns, "memt.j.1.0", &fd[0]), 0);
	CHECK_EQ(stored(ns, "memt.j.2.0", &fd[1]), 0);
	CHECK_EQ(restart_reads(ns, &t, fd, 2, "memt.j.1.0:memt.j.2.0", 2, 2), 0);
	memt_free(t);
	store_close(ns, &sa);
	return 0;
}

/* The fd store and partner nodes, with files found unchanged as written. */
static int test_fd_store_same(void)
{
	int r;

	found_same = 1;
	r = test_fd_store_shared();
	found_same = 0;
	return r;
}

static int test_partner_same(void)
{
	int r;

	found_same = 1;
	r = test_partner_shared();
	found_same = 0;
	return r;
}


/* Spliced chunks across a restart: steps 1..3 each change a chunk of the
 * file; the store keeps 1 and 2 while 3 has chunks of theirs, and the next
 * start (the memfds in any order) maps them again: one copy of each
 * chunk, step 3 readable.  Once step 4 changes every chunk, all three
 * leave the store. */
static int test_fd_store_splice(void)
{
	static uint8_t v[4][FSIZE];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	char buf[512], name[32];
	int ns, fd[3], junk, removed = 0;
	uint64_t resident = 0;

	content_fill();
	version(v[0], 0, 0);
	version(v[1], 1u << 1, 1);
	version(v[2], 1u << 1 | 1u << 2, 1);
	version(v[3], 0xf, 2);
	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(save_bytes(t, (uint64_t)i + 1, v[i]), 0);
		snprintf(name, sizeof(name), "memt.j.%d.0", i + 1);
		CHECK_EQ(stored(ns, name, &fd[i]), 0);
	}
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);    /* 1 and 2 stay */
	memt_free(t);

	start_with((int[]){ fd[1], fd[2], fd[0] }, 3, "memt.j.2.0:memt.j.3.0:memt.j.1.0");
	CHECK_EQ(memt_new(8 * CAPLEN, 1, &t), 0);        /* locked: no hole allocated */
	memt_fd_take_back(t);
	CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);    /* none dropped */
	CHECK_EQ(held(t), 1);
	CHECK_EQ(held_bytes(t), CAPLEN);
	for (int i = 0; i < 3; i++) {    /* the memfds: chunks, each a page of description */
		struct stat st;
		CHECK_EQ(fstat(3 + i, &st), 0);
		resident += (uint64_t)st.st_blocks * 512;
	}
	CHECK(resident <= CAPLEN + 3 * 4096);
	CHECK_EQ(reads_as(t, 3, 0, v[2]), 0);
	CHECK_EQ(save_bytes(t, 4, v[3]), 0);
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &junk), 0);
		removed += !strncmp(buf, "FDSTOREREMOVE=1\nFDNAME=memt.j.", 30);
	}
	CHECK_EQ(removed, 3);
	CHECK_EQ(held_bytes(t), CAPLEN);
	CHECK_EQ(reads_as(t, 4, 0, v[3]), 0);
	memt_free(t);
	store_close(ns, &sa);
	return 0;
}

/* Two ranks of a job on the node, each splicing chunks from step 1 at
 * step 2, sharing step 2's file whole at step 3: after a restart both
 * copies of step 3 come back, whatever their order (each finds what it
 * shares in step 2, not in the other rank's step 3; step 1 stays until
 * every copy of the newest step is taken back). */
static int test_fd_store_ranks(void)
{
	static uint8_t v[3][FSIZE];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct memt *t;
	struct memt_cap *c[2];
	char buf[512], name[64], why[256];
	int ns, fd[6], junk;

	content_fill();
	version(v[0], 0, 0);
	version(v[1], 1u << 1, 1);
	CHECK((ns = store_open(&sa)) >= 0);
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
	for (uint64_t step = 1; step <= 3; step++) {
		for (int r = 0; r < 2; r++)
			CHECK((c[r] = step < 3 ? capture_bytes(t, step, r, v[step - 1])
					       : capture_same(t, "j", step, r, why, sizeof(why))));
		memt_step_committed(t, "j", step);
		for (int r = 0; r < 2; r++)
			memt_cap_put(c[r]);
		for (int i = 0; i < 2; i++) {           /* the ranks in any order */
			int got, r;
			CHECK_EQ(recv_notice(ns, buf, sizeof(buf), &got), 0);
			for (r = 0; r < 2; r++) {
				snprintf(name, sizeof(name), "FDSTORE=1\nFDNAME=memt.j.%d.%d",
					 (int)step, r);
				if (!strcmp(buf, name))
					break;
			}
			CHECK(r < 2 && got >= 0);
			fd[2 * (step - 1) + (uint64_t)r] = fcntl(got, F_DUPFD_CLOEXEC, 100);
			close(got);
		}
	}
	memt_free(t);
	for (int order = 0; order < 2; order++) {
		int f[6];
		for (int i = 0; i < 6; i++)             /* (taken back: fds of their own) */
			f[i] = fcntl(fd[order ? 5 - i : i], F_DUPFD_CLOEXEC, 100);
		start_with(f, 6, order ?
			   "memt.j.3.1:memt.j.3.0:memt.j.2.1:memt.j.2.0:memt.j.1.1:memt.j.1.0" :
			   "memt.j.1.0:memt.j.1.1:memt.j.2.0:memt.j.2.1:memt.j.3.0:memt.j.3.1");
		CHECK_EQ(memt_new(8 * CAPLEN, 0, &t), 0);
		memt_fd_take_back(t);
		CHECK(recv_notice(ns, buf, sizeof(buf), &junk) < 0);    /* none dropped */
		CHECK_EQ(held(t), 1);
		CHECK_EQ(held_bytes(t), 2 * CAPLEN);
		CHECK_EQ(reads_as(t, 3, 0, v[1]), 0);
		CHECK_EQ(reads_as(t, 3, 1, v[1]), 0);
		memt_free(t);
	}
	for (int i = 0; i < 6; i++)
		close(fd[i]);
	store_close(ns, &sa);
	return 0;
}

/* A partner's copy of a capture with spliced chunks carries only its own
 * chunks: the partner splices the others from its copy of the step they
 * came from (one copy there too), or refuses the copy when it does not
 * hold that step. */
static int test_partner_splice(void)
{
	static uint8_t v[3][FSIZE];
	struct memt *a, *b;
	struct memt_cap *c;
	json_t *desc;
	char why[256];

	content_fill();
	version(v[0], 0, 0);
	version(v[1], 1u << 1, 1);
	version(v[2], 1u << 1 | 1u << 2, 1);
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &a), 0);
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &b), 0);
	for (uint64_t step = 1; step <= 3; step++) {
		CHECK((c = capture_bytes(a, step, 0, v[step - 1])) != NULL);
		CHECK_EQ(memt_cap_sent(c), step == 1 ? CAPLEN : CHUNK);
		CHECK_EQ(memt_cap_shares(c), step > 1);
		CHECK_EQ(send_copy(c, b, why, sizeof(why)), 0);
		memt_step_committed(a, "j", step);
		memt_step_committed(b, "j", step);
		memt_cap_put(c);
		CHECK_EQ(reads_as(b, step, 0, v[step - 1]), 0);
		CHECK_EQ(held_bytes(b), CAPLEN);          /* one copy of each chunk */
	}
	memt_free(b);
	CHECK((c = capture_bytes(a, 4, 0, v[1])) != NULL);
	CHECK_EQ(new_partner_refuses(c), 0);
	/* nor is a copy described with chunks given back (an older step's) */
	CHECK_EQ(memt_new(8 * CAPLEN, 0, &b), 0);
	CHECK((desc = memt_cap_describe(c)) != NULL);
	json_object_set_new(json_array_get(json_object_get(desc, "files"), 0), "gone",
			    json_pack("[i]", 2));    /* (its own chunk) */
	json_object_del(desc, "sent_bytes");
	CHECK(memt_copy_start(b, desc, 0, why, sizeof(why)) == NULL);
	CHECK(strstr(why, "is not whole") != NULL);
	json_decref(desc);
	memt_free(b);
	memt_cap_put(c);
	memt_free(a);
	return 0;
}

static const struct test tests[] = {
	{ "fd_store", test_fd_store },
	{ "partner_copy", test_partner_copy },
	{ "fd_store_shared", test_fd_store_shared },
	{ "fd_store_shared_unfit", test_fd_store_shared_unfit },
	{ "partner_shared", test_partner_shared },
	{ "runs", test_runs },
	{ "fd_store_same", test_fd_store_same },
	{ "partner_same", test_partner_same },
	{ "stair", test_stair },
	{ "fd_store_chain", test_fd_store_chain },
	{ "orphan_later", test_orphan_later },
	{ "close_keeps", test_close_keeps },
	{ "fd_store_splice", test_fd_store_splice },
	{ "fd_store_ranks", test_fd_store_ranks },
	{ "partner_splice", test_partner_splice },
};
TEST_MAIN(tests)
