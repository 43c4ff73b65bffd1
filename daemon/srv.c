/* srv.c - ckptd's event loop: start-up, the control socket and accepting
 * connections, worker notices, signals (drain, reload) and the tick. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "coord.h"
#include "csum.h"
#include "gpu.h"
#include "io.h"
#include "job.h"
#include "log.h"
#include "memflush.h"
#include "memt.h"
#include "metrics.h"
#include "notify.h"
#include "prep.h"
#include "remote.h"
#include "restore.h"
#include "root.h"
#include "session.h"
#include "srv.h"
#include "store.h"


/* Connections uid holds (closing ones count until they are gone). */
static unsigned uid_sessions(const struct srv *S, uid_t uid)
{
	unsigned n = 0;
	for (const struct session *s = S->sessions; s; s = s->next)
		n += s->uid == uid;
	return n;
}

static void on_accept(uv_poll_t *h, int status, int events)
{
	struct srv *S = h->data;
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	/* One descriptor held in reserve: out of fds (EMFILE), the listening
	 * socket stays readable and the loop would spin; give the reserve up
	 * to accept the waiting connection, refuse it, and take it back. */
	static int spare = -2;
	static const char nofd[] = "{\"error\":\"ckptd is out of file descriptors\"}";
	int fd;

	if (spare == -2)
		spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	fd = accept4(S->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0 && (errno == EMFILE || errno == ENFILE) && spare >= 0) {
		close(spare);
		fd = accept4(S->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			proto_send(fd, PROTO_ERROR, 0, -EMFILE, nofd, sizeof(nofd) - 1,
				   NULL, 0, NULL, 0);
			close(fd);
		}
		spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
		log_warnx("out of file descriptors: refused a connection");
		return;
	}
	if (fd < 0)
		return;
	if (S->nsessions >= S->cfg.max_clients) {
		static const char busy[] = "{\"error\":\"too many clients (max_clients)\"}";
		proto_send(fd, PROTO_ERROR, 0, -EBUSY, busy, sizeof(busy) - 1, NULL, 0, NULL, 0);
		close(fd);
		return;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		close(fd);
		return;
	}
	if (cred.uid != 0 && uid_sessions(S, cred.uid) >= S->cfg.max_clients_per_uid) {
		char busy[160];
		int n = snprintf(busy, sizeof(busy), "{\"error\":\"too many connections "
				 "of uid %u (max_clients_per_uid %u)\"}", (unsigned)cred.uid,
				 S->cfg.max_clients_per_uid);
		proto_send(fd, PROTO_ERROR, 0, -EBUSY, busy, (size_t)n, NULL, 0, NULL, 0);
		close(fd);
		log_debug("refused a connection of uid %u: max_clients_per_uid %u",
			  (unsigned)cred.uid, S->cfg.max_clients_per_uid);
		return;
	}
	if (session_new(S, fd, &cred) < 0)
		close(fd);
}

/* --- notices, signals, tick --------------------------------------------- */

static void srv_notify(void *arg, enum pipe_notice what, struct rsave *rs)
{
	struct srv *S = arg;
	pthread_mutex_lock(&S->nlock);
	if (S->nnotices == S->cnotices) {
		size_t n = S->cnotices ? S->cnotices * 2 : 256;
		struct notice *a = realloc(S->notices, n * sizeof(*a));
		if (!a)
			fatalx("out of memory queueing a pipeline notice");
		S->notices = a;
		S->cnotices = n;
	}
	S->notices[S->nnotices++] = (struct notice){ what, rs };
	pthread_mutex_unlock(&S->nlock);
	uv_async_send(&S->wake);
}

/* Start restores that waited for their job's in-flight steps to settle. */
static void restore_poll(struct srv *S)
{
	for (struct session *s = S->sessions; s; s = s->next) {
		uint64_t req = s->pending_restore_req;
		int r;
		if (!req || s->closed || !s->job || job_settling(s->job))
			continue;
		s->pending_restore_req = 0;
		s->busy = 0;
		r = restore_start(S, s, req, s->pending_restore_step, s->pending_restore_partial);
		if (r < 0) {
			session_reply_err(s, PROTO_RESTORE | PROTO_REPLY, req, r,
					  "cannot start the restore: %s", strerror(-r));
			session_resume(s);
		}
	}
}

static void on_wake(uv_async_t *h)
{
	struct srv *S = h->data;
	for (;;) {
		struct notice batch[64];
		size_t n;
		pthread_mutex_lock(&S->nlock);
		n = S->nnotices < 64 ? S->nnotices : 64;
		if (n == 0) {           /* (notices may still be NULL) */
			pthread_mutex_unlock(&S->nlock);
			break;
		}
		memcpy(batch, S->notices, n * sizeof(*batch));
		memmove(S->notices, S->notices + n, (S->nnotices - n) * sizeof(*batch));
		S->nnotices -= n;
		pthread_mutex_unlock(&S->nlock);
		for (size_t i = 0; i < n; i++)
			step_on_notice(S, batch[i].what, batch[i].rs);
	}
	job_flush_poll(S);
	restore_poll(S);
}

static void unlink_own_socket(const char *path);

static void srv_shutdown(struct srv *S)
{
	uv_poll_stop(&S->listen_poll);
	uv_close((uv_handle_t *)&S->listen_poll, NULL);
	close(S->listen_fd);
	metrics_stop();
	unlink_own_socket(S->cfg.socket);
	for (struct session *s = S->sessions; s; s = s->next)
		session_close(s, "daemon exiting");
	uv_close((uv_handle_t *)&S->tick, NULL);
	uv_close((uv_handle_t *)&S->sig_term, NULL);
	uv_close((uv_handle_t *)&S->sig_int, NULL);
	uv_close((uv_handle_t *)&S->sig_hup, NULL);
	uv_close((uv_handle_t *)&S->wake, NULL);
}

static void on_tick(uv_timer_t *t)
{
	struct srv *S = t->data;
	uint64_t now = now_ns(), bytes = atomic_load(&S->pipe.bytes_written);
	uint64_t limit = (uint64_t)S->cfg.msg_timeout_ms * 1000000ull;
	uint64_t ctl_idle = (uint64_t)S->cfg.ctl_idle_timeout_ms * 1000000ull;

	if (S->rate_last_ns) {
		double inst = (double)(bytes - S->rate_last_bytes) * 1e9 /
			      (double)(now - S->rate_last_ns);
		S->write_rate_bps = 0.5 * S->write_rate_bps + 0.5 * inst;
	}
	S->rate_last_ns = now;
	S->rate_last_bytes = bytes;

	/* a half-sent message, or no HELLO, for too long: slowloris; a
	 * ckptctl connection idle too long (it holds a max_clients slot) */
	for (struct session *s = S->sessions, *next; s; s = next) {
		next = s->next;
		if (!s->closed && !s->busy && s->rd_since_ns && now - s->rd_since_ns > limit)
			session_close(s, s->role == ROLE_NONE ? "no HELLO in time" :
				      "message not completed in time");
		else if (!s->closed && session_idle_ns(s, now) > ctl_idle)
			session_close(s, "ckptctl connection idle (ctl_idle_timeout_ms)");
	}

	prep_tick(S);
	if (S->draining) {
		if (!job_busy(S) && !coord_busy()) {
			log_info("drained: every accepted save is finished; exiting");
			srv_shutdown(S);
		} else if (now > S->drain_deadline_ns) {
			log_warnx("drain timeout: aborting saves still in flight");
			step_abort_all(S, -ESHUTDOWN, "ckptd stopped before the save finished");
			S->exit_code = 1;
			S->drain_deadline_ns = UINT64_MAX;
		}
	}
}

void srv_drain(struct srv *S, int err, uint32_t within_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)within_ms * 1000000ull;

	if (err)
		S->exit_code = 1;
	if (!S->draining || deadline < S->drain_deadline_ns)
		S->drain_deadline_ns = deadline;
	S->draining = 1;
}

static void on_term(uv_signal_t *h, int sig)
{
	struct srv *S = h->data;
	if (S->draining) {
		log_warnx("second signal: exiting now");
		S->exit_code = 1;
		step_abort_all(S, -ESHUTDOWN, "ckptd stopped");
		srv_shutdown(S);
		return;
	}
	S->draining = 1;
	S->drain_deadline_ns = now_ns() + (uint64_t)S->cfg.drain_timeout_ms * 1000000ull;
	notify_send("STOPPING=1\nSTATUS=draining: finishing accepted saves");
	log_info("%s: finishing accepted saves (up to %u ms), accepting no new ones",
		 strsignal(sig), S->cfg.drain_timeout_ms);
	on_tick(&S->tick);
}

int srv_clones(const struct srv *S)
{
	return S->cfg.incremental && S->can_clone && S->pool.chunk_bytes % CSUM_CHUNK_BYTES == 0;
}

/* Incremental saves with the kept checkpoints all sharing one copy of a
 * file: a damaged copy leaves none to walk back to.  Say so once per
 * start or reload (README, Incremental saves), and whether the unchanged
 * chunks of changed files are cloned. */
static void warn_shared(const struct srv *S)
{
	const struct config *c = &S->cfg;

	if (c->incremental)
		log_info("incremental saves: %s", srv_clones(S) ?
			 "the root's file system clones ranges: the unchanged chunks of a "
			 "changed file are cloned from the step before" : S->can_clone ?
			 "chunk_bytes is not a multiple of 1 MiB: changed files are written whole" :
			 "the root's file system does not clone ranges (reflinks): changed "
			 "files are written whole");
	if (c->incremental && c->keep_last != 1 &&
	    (c->incremental_max_shared == 0 ||
	     (c->keep_last && c->incremental_max_shared >= c->keep_last)))
		log_info("incremental saves: the checkpoints kept (keep_last %u) may all share "
			 "one copy of a file that did not change (incremental_max_shared %u): "
			 "if that copy is damaged, none of them restores%s", c->keep_last,
			 c->incremental_max_shared, c->keep_last > 1 ?
			 "; incremental_max_shared below keep_last keeps a second copy" : "");
}

static void on_hup(uv_signal_t *h, int sig)
{
	struct srv *S = h->data;
	struct config nc;
	char err[512];

	if (!S->config_path) {
		log_warnx("SIGHUP: no configuration file to reload");
		return;
	}
	if (config_load(S->config_path, &nc, err, sizeof(err)) < 0) {
		log_warnx("SIGHUP: new configuration rejected, keeping the old one: %s", err);
		return;
	}
	coord_expand(nc.socket, sizeof(nc.socket));     /* "{rank}" */
	/* Keys that shape what start-up built need a restart (config.c). */
	if (config_diff_restart(&S->cfg, &nc, err, sizeof(err)) > 0) {
		log_warnx("SIGHUP: %s: these keys change only on restart; keeping the "
			  "old configuration", err);
		return;
	}
	config_diff(&S->cfg, &nc, err, sizeof(err));
	if (nc.socket_mode != S->cfg.socket_mode && chmod(nc.socket, nc.socket_mode) < 0)
		log_warn("SIGHUP: chmod '%s'", nc.socket);
	S->cfg = nc;
	coord_reload(&S->cfg);
	remote_reload(&S->cfg);
	log_set_level(log_level_parse(nc.log_level));
	log_info("SIGHUP: configuration reloaded from %s (%s)", S->config_path,
		 err[0] ? err : "no changes");
	warn_shared(S);
	metrics_reload(S);
}

/* --- start-up ----------------------------------------------------------- */

static dev_t listen_dev;
static ino_t listen_ino;

/* Does someone listen on the socket at path?  1, 0 (nobody: a stale one
 * from a crash, or none there), or -errno. */
static int socket_live(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	r = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 1 :
	    errno == ECONNREFUSED || errno == ENOENT ? 0 :
	    errno == EAGAIN || errno == EINPROGRESS ? 1 : -errno;
	close(fd);
	return r;
}

int srv_socket_check(const char *path, char *err, size_t errlen)
{
	struct stat st;
	int r;

	if (strchr(path, '{'))          /* "{rank}": known only in the cluster */
		return 0;
	if (lstat(path, &st) < 0)
		return 0;
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(err, errlen, "socket path '%s' exists and is not a socket; "
			 "ckptd never removes it", path);
		return -EEXIST;
	}
	if ((r = socket_live(path)) == 1) {
		snprintf(err, errlen, "socket '%s' is in use: another ckptd listens on it; "
			 "stop it or give this one another socket", path);
		return -EADDRINUSE;
	}
	if (r < 0)
		snprintf(err, errlen, "cannot check socket '%s': %s", path, strerror(-r));
	return r;
}

static int listen_unix(const char *path, unsigned mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	mode_t old;
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	/* Only a stale socket from a crash (one nobody listens on) is
	 * removed: never a live one, never anything that is not a socket. */
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return -EEXIST;
		if ((r = socket_live(path)) != 0)
			return r > 0 ? -EADDRINUSE : r;
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	old = umask(0177);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || chmod(path, mode) < 0 || listen(fd, 128) < 0 ||
	    lstat(path, &st) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	listen_dev = st.st_dev;
	listen_ino = st.st_ino;
	return fd;
}

/* Remove our socket at exit, unless someone replaced it meanwhile. */
static void unlink_own_socket(const char *path)
{
	struct stat st;

	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) &&
	    st.st_dev == listen_dev && st.st_ino == listen_ino)
		unlink(path);
}

int srv_init(struct srv *S, const struct config *cfg, const char *config_path)
{
	char err[512];
	int r;

	memset(S, 0, sizeof(*S));
	S->cfg = *cfg;
	S->config_path = config_path;
	S->started_ns = now_ns();
	S->loop = uv_default_loop();
	pthread_mutex_init(&S->nlock, NULL);

	/* a live socket is another daemon's: refused before the root is
	 * created, marked or locked */
	if ((r = srv_socket_check(cfg->socket, err, sizeof(err))) < 0) {
		log_warnx("%s", err);
		return r;
	}
	/* the root is locked before anything under it changes; a cluster
	 * locks it on its coordinator (coord.c) */
	r = root_open(cfg->root, strcmp(cfg->cluster, "mpi") != 0, &S->rootfd,
		      err, sizeof(err));
	if (r < 0) {
		log_warnx("%s", err);
		return r;
	}
	if (strcmp(cfg->cluster, "mpi") == 0) {
		/* joins the world; the coordinator alone recovers the shared root */
		if ((r = coord_init(S, &step_coord_hooks)) < 0)
			return r;
	} else {
		store_recover(S->rootfd);
	}
	S->can_clone = io_can_clone(S->rootfd);

	r = shm_pool_init(&S->pool, cfg->staging_bytes, cfg->chunk_bytes, cfg->lock_pool);
	if (r < 0) {
		log_warnx("cannot create a %llu-byte staging pool: %s",
			  (unsigned long long)cfg->staging_bytes, strerror(-r));
		return r;
	}
	if (!S->pool.locked && cfg->lock_pool)
		log_info("staging pool not locked in memory (raise LimitMEMLOCK to lock it)");
	S->gpu = strcmp(cfg->gpu, "off") != 0 && gpu_available() == 1;
	/* pinned: device-to-host copies at full speed; io_uring and O_DIRECT
	 * use the same pages unchanged */
	if (S->gpu && gpu_pool_register(S->pool.base, S->pool.bytes, S->pool.chunk_bytes) < 0)
		log_warnx("cannot pin the staging pool for CUDA (cuMemHostRegister): "
			  "GPU saves will be slower");

	if (cfg->memory_tier_bytes && (r = memt_new(cfg->memory_tier_bytes, cfg->lock_pool,
						    &S->memt)) < 0)
		return r;
	memt_fd_take_back(S->memt);     /* what systemd kept across a restart */

	region_release_on(S->loop);
	uv_async_init(S->loop, &S->wake, on_wake);
	S->wake.data = S;
	r = pipe_start(&S->pipe, &S->pool, &S->cfg, srv_notify, S);
	if (r < 0)
		return r;
	/* uploads from the one node that publishes (a cluster's coordinator) */
	r = remote_start(&S->cfg, S->rootfd, !coord_active() || coord_is_coordinator(),
			 err, sizeof(err));
	if (r < 0) {
		log_warnx("%s", err);
		return r;
	}

	S->listen_fd = listen_unix(S->cfg.socket, cfg->socket_mode);   /* {rank} done */
	if (S->listen_fd < 0) {
		log_warnx("cannot listen on '%s': %s", S->cfg.socket,
			  S->listen_fd == -EADDRINUSE ? "another ckptd is running there" :
			  S->listen_fd == -EEXIST ? "it exists and is not a socket (left alone)" :
			  strerror(-S->listen_fd));
		return S->listen_fd;
	}
	uv_poll_init(S->loop, &S->listen_poll, S->listen_fd);
	S->listen_poll.data = S;
	uv_poll_start(&S->listen_poll, UV_READABLE, on_accept);

	uv_signal_init(S->loop, &S->sig_term);
	uv_signal_init(S->loop, &S->sig_int);
	uv_signal_init(S->loop, &S->sig_hup);
	S->sig_term.data = S->sig_int.data = S->sig_hup.data = S;
	uv_signal_start(&S->sig_term, on_term, SIGTERM);
	uv_signal_start(&S->sig_int, on_term, SIGINT);
	uv_signal_start(&S->sig_hup, on_hup, SIGHUP);
	signal(SIGPIPE, SIG_IGN);

	uv_timer_init(S->loop, &S->tick);
	S->tick.data = S;
	uv_timer_start(&S->tick, on_tick, 1000, 1000);
	metrics_start(S);        /* a busy port is logged; saves matter more */
	return 0;
}

int srv_run(struct srv *S)
{
	char st[256];

	char tier[64] = "";

	if (S->memt)
		snprintf(tier, sizeof(tier), ", memory tier %llu MiB",
			 (unsigned long long)(S->cfg.memory_tier_bytes >> 20));
	log_info("ready: socket %s, root %s, pool %llu MiB in %llu KiB chunks%s%s, "
		 "I/O %s%s, %s", S->cfg.socket, S->cfg.root,
		 (unsigned long long)(S->pool.bytes >> 20),
		 (unsigned long long)(S->pool.chunk_bytes >> 10),
		 S->pool.locked ? " (locked)" : "", tier, S->pipe.backend_used,
		 S->cfg.direct_io ? " + O_DIRECT" : "", S->gpu ? "GPU" : "host-only");
	warn_shared(S);
	snprintf(st, sizeof(st), "READY=1\nSTATUS=serving %s", S->cfg.socket);
	notify_send(st);
	uv_run(S->loop, UV_RUN_DEFAULT);
	region_release_on(NULL);       /* the loop is done: release inline */

	/* every handle is closed: stop the workers and free what is left */
	remote_stop();
	memflush_all(S);        /* before leaving the world: nothing is lost */
	coord_finalize(S);
	pipe_stop(&S->pipe);
	job_free_all(S);
	memt_free(S->memt);
	if (S->gpu)
		gpu_shutdown(S->pool.base);     /* stops the pinning, lets the GPUs go */
	shm_pool_release(&S->pool);
	free(S->notices);
	close(S->rootfd);
	root_unlock();
	uv_loop_close(S->loop);
	return S->exit_code;
}
