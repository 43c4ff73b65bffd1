/* ckptctl.c - the operator's tool: looks at a running ckptd (status, top,
 * list), drives it (flush, prune) and verifies checkpoint directories
 * offline.
 *
 * It speaks the wire protocol directly (HELLO with role "ctl"); `verify`
 * needs no daemon at all.  Every command has --json.  Exit status: 0
 * success, 1 the operation failed (daemon error, failed flush, a checkpoint
 * that does not verify), 2 usage errors and an unreachable daemon.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt.h"
#include "layout.h"
#include "mfst.h"
#include "proto.h"
#include "verify.h"

#define EXIT_FAIL  1
#define EXIT_USAGE 2

#define CTL_REPLY_WAIT_MS     (60 * 1000)      /* status, list */
#define CTL_PRUNE_WAIT_MS     (10 * 60 * 1000) /* removing big directories */
#define CTL_FLUSH_DEFAULT_S   600
#define CTL_VERIFY_THREADS    4

static const char *ctl_socket;     /* -s, else $CKPT_SOCKET, else default */

static void die(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));

static void die(int code, const char *fmt, ...)
{
	va_list ap;

	fputs("ckptctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

/* --- formatting helpers -------------------------------------------------- */

/* "512 B", "1.5 KiB", "12.0 GiB". */
static const char *fmt_bytes(uint64_t n, char *buf, size_t len)
{
	static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB", "PiB",
					    "EiB" };
	double v = (double)n;
	int u = -1;

	if (n < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)n);
		return buf;
	}
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

/* A duration with at most two units: "12s", "4m 3s", "2h 5m", "3d 4h". */
static const char *fmt_duration(uint64_t s, char *buf, size_t len)
{
	if (s < 60)
		snprintf(buf, len, "%llus", (unsigned long long)s);
	else if (s < 3600)
		snprintf(buf, len, "%llum %llus", (unsigned long long)s / 60,
			 (unsigned long long)s % 60);
	else if (s < 86400)
		snprintf(buf, len, "%lluh %llum", (unsigned long long)s / 3600,
			 (unsigned long long)s % 3600 / 60);
	else
		snprintf(buf, len, "%llud %lluh", (unsigned long long)s / 86400,
			 (unsigned long long)s % 86400 / 3600);
	return buf;
}

/* "12s ago" for a unix time; clocks that disagree say "just now". */
static const char *fmt_age(int64_t when, char *buf, size_t len)
{
	int64_t now = (int64_t)time(NULL);
	char d[32];

	if (when >= now) {
		snprintf(buf, len, "just now");
		return buf;
	}
	snprintf(buf, len, "%s ago", fmt_duration((uint64_t)(now - when), d,
						  sizeof(d)));
	return buf;
}

static const char *fmt_time(int64_t when, char *buf, size_t len)
{
	time_t t = (time_t)when;
	struct tm tm;

	if (!localtime_r(&t, &tm) ||
	    !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%lld", (long long)when);
	return buf;
}

/* "[#######.............]" for a fraction 0..1, width cells inside. */
static const char *fmt_bar(double frac, int width, char *buf, size_t len)
{
	int fill;

	if (!(frac >= 0))
		frac = 0;
	if (frac > 1)
		frac = 1;
	if (width > (int)len - 3)
		width = (int)len - 3;
	fill = (int)(frac * width + 0.5);
	buf[0] = '[';
	for (int i = 0; i < width; i++)
		buf[1 + i] = i < fill ? '#' : '.';
	buf[1 + width] = ']';
	buf[2 + width] = '\0';
	return buf;
}

/* Aligned columns: collect rows of strings, then print with every column
 * as wide as its widest cell.  Columns named in `right` are numbers. */
#define TABLE_MAX_COLS 10
#define TABLE_CELL     64

struct table {
	int    ncols;
	const char *head[TABLE_MAX_COLS];
	bool   right[TABLE_MAX_COLS];
	char (*cells)[TABLE_MAX_COLS][TABLE_CELL];
	size_t nrows, cap;
	char   spec[256];       /* head[] points into it */
};

static void table_init(struct table *t, const char *spec)
{
	/* spec: "NAME,>NUM,..." - a leading '>' right-aligns the column. */
	char *save = NULL, *tok;

	memset(t, 0, sizeof(*t));
	snprintf(t->spec, sizeof(t->spec), "%s", spec);
	for (tok = strtok_r(t->spec, ",", &save);
	     tok && t->ncols < TABLE_MAX_COLS;
	     tok = strtok_r(NULL, ",", &save)) {
		t->right[t->ncols] = tok[0] == '>';
		t->head[t->ncols++] = tok + (tok[0] == '>');
	}
}

static void table_row(struct table *t, ...)
{
	va_list ap;

	if (t->nrows == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 16;
		void *p = realloc(t->cells, ncap * sizeof(*t->cells));
		if (!p)
			die(EXIT_FAIL, "out of memory");
		t->cells = p;
		t->cap = ncap;
	}
	va_start(ap, t);
	for (int i = 0; i < t->ncols; i++) {
		const char *s = va_arg(ap, const char *);
		snprintf(t->cells[t->nrows][i], TABLE_CELL, "%s", s ? s : "-");
	}
	va_end(ap);
	t->nrows++;
}

static void table_print(struct table *t, FILE *f, const char *indent)
{
	int w[TABLE_MAX_COLS];

	for (int i = 0; i < t->ncols; i++) {
		w[i] = (int)strlen(t->head[i]);
		for (size_t r = 0; r < t->nrows; r++) {
			int l = (int)strlen(t->cells[r][i]);
			if (l > w[i])
				w[i] = l;
		}
	}
	for (size_t r = 0; r <= t->nrows; r++) {
		fputs(indent, f);
		for (int i = 0; i < t->ncols; i++) {
			const char *s = r ? t->cells[r - 1][i] : t->head[i];

			if (t->right[i])
				fprintf(f, "%*s", w[i], s);
			else if (i == t->ncols - 1)
				fputs(s, f);          /* no trailing blanks */
			else
				fprintf(f, "%-*s", w[i], s);
			if (i < t->ncols - 1)
				fputs("  ", f);
		}
		fputc('\n', f);
	}
	free(t->cells);
	t->cells = NULL;
	t->nrows = t->cap = 0;
}

/* JSON members with defaults, so that a daemon that omits a field still
 * gives a readable view. */
static uint64_t jget_u64(const json_t *o, const char *key, uint64_t dflt)
{
	json_t *v = json_object_get(o, key);

	return json_is_integer(v) && json_integer_value(v) >= 0 ?
	       (uint64_t)json_integer_value(v) : dflt;
}

static const char *jget_str(const json_t *o, const char *key,
			    const char *dflt)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : dflt;
}

static const char *fmt_u64(uint64_t v, char *buf, size_t len)
{
	snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
}

static void print_json(const json_t *j)
{
	json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
}

/* --- talking to ckptd ---------------------------------------------------- */

struct ctl {
	int      fd;
	uint64_t next_req;
	struct proto_reader rd;
};

/* The reply to one request.  status 0: json is the reply; else error is the
 * daemon's reason (and json may still hold counters). */
struct ctl_reply {
	int32_t status;
	json_t *json;
	char    error[512];
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The next message, waiting at most until deadline (monotonic ms).
 * Returns 1 with *m, or 0 when the deadline passed. */
static int ctl_next(struct ctl *c, struct proto_msg *m, int64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		const char *why = "malformed message";
		int64_t left;
		int r = proto_next(&c->rd, m, NULL, &why);

		if (r == 1)
			return 1;
		if (r < 0)
			die(EXIT_FAIL, "bad message from ckptd: %s", why);
		left = deadline - now_ms();
		if (left <= 0)
			return 0;
		r = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
		if (r < 0 && errno != EINTR)
			die(EXIT_FAIL, "poll: %s", strerror(errno));
		if (r <= 0)
			continue;
		r = proto_read(&c->rd, c->fd);
		if (r == 0)
			die(EXIT_FAIL, "ckptd closed the connection");
		if (r < 0 && r != -EINTR && r != -EAGAIN)
			die(EXIT_FAIL, "cannot read from ckptd: %s",
			    strerror(-r));
	}
}

/* Send a request (req is borrowed); returns its request id. */
static uint64_t ctl_send(struct ctl *c, uint16_t type, const json_t *req)
{
	uint64_t id = ++c->next_req;
	char *js = json_dumps(req, JSON_COMPACT);
	int r;

	if (!js)
		die(EXIT_FAIL, "out of memory");
	r = proto_send(c->fd, type, id, 0, js, strlen(js), NULL, 0, NULL, 0);
	free(js);
	if (r < 0)
		die(EXIT_FAIL, "cannot send %s to ckptd: %s",
		    proto_type_name(type), strerror(-r));
	return id;
}

/* Wait until deadline for the reply to request id, skipping EVENTs.
 * Returns 1 with *rep filled, 0 when the deadline passed. */
static int ctl_wait(struct ctl *c, uint16_t type, uint64_t id,
		    int64_t deadline, struct ctl_reply *rep)
{
	for (;;) {
		struct proto_msg m;
		const char *why;

		if (!ctl_next(c, &m, deadline))
			return 0;
		for (unsigned i = 0; i < m.nfds; i++)
			close(m.fds[i]);
		if (m.hdr.req_id != id || (m.hdr.type != (type | PROTO_REPLY) &&
					   m.hdr.type != PROTO_ERROR))
			continue;
		memset(rep, 0, sizeof(*rep));
		rep->status = m.hdr.status;
		rep->json = json_loadb(m.json, m.hdr.jlen, 0, NULL);
		if (m.hdr.type == PROTO_ERROR && rep->status == 0)
			rep->status = -EPROTO;
		if (rep->status == 0 && !json_is_object(rep->json))
			die(EXIT_FAIL, "ckptd sent a malformed %s reply",
			    proto_type_name(type));
		why = jget_str(rep->json, "error", NULL);
		snprintf(rep->error, sizeof(rep->error), "%s",
			 why ? why : ckpt_strerror(rep->status));
		return 1;
	}
}

/* Send a request and wait up to wait_ms for its reply.  Lost connections
 * and timeouts are fatal. */
static void ctl_request(struct ctl *c, uint16_t type, const json_t *req,
			int64_t wait_ms, struct ctl_reply *rep)
{
	int64_t deadline = now_ms() + wait_ms;
	uint64_t id = ctl_send(c, type, req);

	if (!ctl_wait(c, type, id, deadline, rep))
		die(EXIT_FAIL, "ckptd did not answer %s in time",
		    proto_type_name(type));
}

/* A request whose failure ends the program with the daemon's reason. */
static json_t *ctl_call(struct ctl *c, uint16_t type, json_t *req,
			int64_t wait_ms, const char *what)
{
	struct ctl_reply rep;

	ctl_request(c, type, req, wait_ms, &rep);
	json_decref(req);
	if (rep.status != 0)
		die(EXIT_FAIL, "%s: %s", what, rep.error);
	return rep.json;
}

static void ctl_connect(struct ctl *c)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	json_t *hello;

	memset(c, 0, sizeof(*c));
	proto_reader_init(&c->rd, PROTO_MAX_PAYLOAD);
	if (strlen(ctl_socket) >= sizeof(sa.sun_path))
		die(EXIT_USAGE, "cannot connect to %s: %s", ctl_socket,
		    strerror(ENAMETOOLONG));
	memcpy(sa.sun_path, ctl_socket, strlen(ctl_socket) + 1);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0 ||
	    connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die(EXIT_USAGE, "cannot connect to %s: %s (is ckptd running?)",
		    ctl_socket, strerror(errno));

	hello = json_pack("{s:i, s:i, s:s, s:I}", "version", PROTO_VERSION,
			  "features", PROTO_FEAT_EVENTS, "role", "ctl",
			  "pid", (json_int_t)getpid());
	json_decref(ctl_call(c, PROTO_HELLO, hello, CTL_REPLY_WAIT_MS,
			     "ckptd refused the connection"));
}

static void ctl_close(struct ctl *c)
{
	close(c->fd);
	proto_reader_release(&c->rd);
}

/* --- status -------------------------------------------------------------- */

static const char *fmt_owner(uint64_t uid, char *buf, size_t len)
{
	struct passwd pw, *res = NULL;
	char tmp[1024];

	if (getpwuid_r((uid_t)uid, &pw, tmp, sizeof(tmp), &res) == 0 && res)
		snprintf(buf, len, "%s", res->pw_name);
	else
		snprintf(buf, len, "%llu", (unsigned long long)uid);
	return buf;
}

/* "0,2,3" from an array of node numbers. */
static const char *fmt_nodes(const json_t *a, char *buf, size_t len)
{
	size_t i, n = 0;
	json_t *v;

	buf[0] = '\0';
	json_array_foreach(a, i, v)
		if (n < len)
			n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? "," : "",
					      (long long)json_integer_value(v));
	return n ? buf : "-";
}

/* Multi-node: this daemon's place in the cluster and, on the coordinator,
 * the steps not decided yet. */
static void status_cluster(FILE *f, const json_t *c)
{
	char a[128], b[128];
	size_t i;
	json_t *s;

	if (!json_is_object(c))
		return;
	fprintf(f, "  cluster:  node %llu of %llu (coordinator %llu), peers seen %s%s\n",
		(unsigned long long)jget_u64(c, "rank", 0),
		(unsigned long long)jget_u64(c, "size", 0),
		(unsigned long long)jget_u64(c, "coordinator", 0),
		fmt_nodes(json_object_get(c, "peers_seen"), a, sizeof(a)),
		json_is_true(json_object_get(c, "peer_lost")) ? ", PEER LOST" : "");
	json_array_foreach(json_object_get(c, "steps"), i, s)
		fprintf(f, "            %s step %llu: %llu/%llu ranks durable, nodes saving %s, "
			"durable %s\n", jget_str(s, "job", "?"),
			(unsigned long long)jget_u64(s, "step", 0),
			(unsigned long long)jget_u64(s, "ranks_durable", 0),
			(unsigned long long)jget_u64(s, "world_size", 0),
			fmt_nodes(json_object_get(s, "nodes_seen"), a, sizeof(a)),
			fmt_nodes(json_object_get(s, "nodes_durable"), b, sizeof(b)));
}

static void status_daemon(FILE *f, const json_t *st)
{
	const json_t *pool = json_object_get(st, "pool");
	uint64_t used = jget_u64(pool, "used", 0);
	uint64_t total = jget_u64(pool, "total", 0);
	double frac = total ? (double)used / (double)total : 0.0;
	char a[32], b[32], d[32], bar[40];

	fprintf(f, "%s, pid %llu, up %s%s\n", jget_str(st, "daemon", "ckptd"),
		(unsigned long long)jget_u64(st, "pid", 0),
		fmt_duration(jget_u64(st, "uptime_s", 0), d, sizeof(d)),
		json_is_true(json_object_get(st, "draining")) ?
		", DRAINING (finishing accepted saves, then exiting)" : "");
	fprintf(f, "  io:       %s, direct I/O %s, GPU %s\n",
		jget_str(st, "io_backend", "?"),
		json_is_true(json_object_get(st, "direct_io")) ? "on" : "off",
		json_is_true(json_object_get(st, "gpu")) ? "yes" : "no");
	fprintf(f, "  pool:     %s %3.0f%%  %s / %s, %llu waits%s\n",
		fmt_bar(frac, 20, bar, sizeof(bar)), 100.0 * frac,
		fmt_bytes(used, a, sizeof(a)), fmt_bytes(total, b, sizeof(b)),
		(unsigned long long)jget_u64(pool, "waits", 0),
		json_is_true(json_object_get(pool, "locked")) ? ", locked" :
		", not locked");
	fprintf(f, "  clients:  %llu\n",
		(unsigned long long)jget_u64(st, "clients", 0));
	fprintf(f, "  written:  %s, now %s/s\n",
		fmt_bytes(jget_u64(st, "bytes_written", 0), a, sizeof(a)),
		fmt_bytes((uint64_t)json_number_value(
			json_object_get(st, "write_rate_bps")), b, sizeof(b)));
	fprintf(f, "  saves:    %llu committed, %llu failed\n",
		(unsigned long long)jget_u64(st, "saves_committed", 0),
		(unsigned long long)jget_u64(st, "saves_failed", 0));
	status_cluster(f, json_object_get(st, "cluster"));
}

static void status_jobs(FILE *f, const json_t *jobs)
{
	struct table t;
	size_t i;
	json_t *j;

	if (json_array_size(jobs) == 0) {
		fprintf(f, "\nno jobs\n");
		return;
	}
	table_init(&t, "JOB,OWNER,>WORLD,>RANKS,>LAST STEP,AGE,>IN FLIGHT");
	json_array_foreach(jobs, i, j) {
		json_t *step = json_object_get(j, "last_committed_step");
		json_t *when = json_object_get(j, "last_committed_unix");
		char own[64], w[24], r[24], s[24], age[48], fl[24];

		table_row(&t, jget_str(j, "name", "?"),
			  fmt_owner(jget_u64(j, "owner_uid", 0), own,
				    sizeof(own)),
			  fmt_u64(jget_u64(j, "world_size", 0), w, sizeof(w)),
			  fmt_u64(jget_u64(j, "ranks_connected", 0), r,
				  sizeof(r)),
			  json_is_integer(step) ?
				fmt_u64(jget_u64(j, "last_committed_step", 0),
					s, sizeof(s)) : "-",
			  json_is_integer(when) ?
				fmt_age(json_integer_value(when), age,
					sizeof(age)) : "-",
			  fmt_u64(json_array_size(json_object_get(j, "in_flight")),
				  fl, sizeof(fl)));
	}
	fputc('\n', f);
	table_print(&t, f, "");
}

/* "3/8": ranks of the world that reached a phase. */
static const char *fmt_ranks(const json_t *s, const char *key,
			     uint64_t world, char buf[32])
{
	snprintf(buf, 32, "%llu/%llu", (unsigned long long)jget_u64(s, key, 0),
		 (unsigned long long)world);
	return buf;
}

/* How far an in-flight save is: bytes written of the bytes the whole world
 * will save (ranks that have not asked yet count as the average rank). */
static double step_progress(const json_t *s, uint64_t world, uint64_t *est)
{
	uint64_t total = jget_u64(s, "bytes_total", 0);
	uint64_t saved = jget_u64(s, "ranks_saved", 0);
	uint64_t done = jget_u64(s, "bytes_written", 0);

	*est = saved && world > saved ? total / saved * world : total;
	if (!*est)
		return 0;
	if (done > *est)
		done = *est;
	return (double)done / (double)*est;
}

/* The daemon's phase, except that a step whose saved ranks are all staged
 * but whose other ranks have not asked yet is waiting for them. */
static const char *step_phase(const json_t *s, uint64_t world)
{
	const char *phase = jget_str(s, "phase", "?");
	uint64_t saved = jget_u64(s, "ranks_saved", 0);

	if (strcmp(phase, "staging") == 0 && saved < world &&
	    jget_u64(s, "ranks_staged", 0) == saved)
		return "waiting for ranks";
	return phase;
}

static void status_in_flight(FILE *f, const json_t *jobs)
{
	struct table t;
	size_t i, k;
	json_t *j, *s;
	int n = 0;

	table_init(&t, "JOB,>STEP,PHASE,>SAVED,>STAGED,>DURABLE,>SIZE,PROGRESS");
	json_array_foreach(jobs, i, j) {
		uint64_t world = jget_u64(j, "world_size", 0);

		json_array_foreach(json_object_get(j, "in_flight"), k, s) {
			char st[24], sv[32], sg[32], du[32], sz[32], pr[48], bar[24];
			uint64_t est;
			double frac = step_progress(s, world, &est);

			snprintf(pr, sizeof(pr), "%s %.0f%%",
				 fmt_bar(frac, 10, bar, sizeof(bar)), 100 * frac);
			table_row(&t, jget_str(j, "name", "?"),
				  fmt_u64(jget_u64(s, "step", 0), st, sizeof(st)),
				  step_phase(s, world),
				  fmt_ranks(s, "ranks_saved", world, sv),
				  fmt_ranks(s, "ranks_staged", world, sg),
				  fmt_ranks(s, "ranks_durable", world, du),
				  fmt_bytes(est, sz, sizeof(sz)), pr);
			n++;
		}
	}
	if (!n) {
		free(t.cells);
		return;
	}
	fprintf(f, "\nin flight:\n");
	table_print(&t, f, "");
}

static void status_render(FILE *f, const json_t *st)
{
	status_daemon(f, st);
	status_jobs(f, json_object_get(st, "jobs"));
	status_in_flight(f, json_object_get(st, "jobs"));
}

static json_t *status_get(struct ctl *c)
{
	return ctl_call(c, PROTO_STATUS, json_object(), CTL_REPLY_WAIT_MS,
			"status");
}

/* Redraw in place on a terminal: home, each line cleared to its end, the
 * rest of the screen cleared. */
static void watch_frame_tty(const char *txt, size_t len, double interval_s)
{
	char when[32];
	time_t now = time(NULL);
	struct tm tm;

	localtime_r(&now, &tm);
	strftime(when, sizeof(when), "%H:%M:%S", &tm);
	fputs("\033[H", stdout);
	printf("ckptctl top - %s, every %gs (Ctrl-C quits)\033[K\n\033[K\n", when,
	       interval_s);
	for (size_t i = 0; i < len; i++) {
		if (txt[i] == '\n')
			fputs("\033[K", stdout);
		fputc(txt[i], stdout);
	}
	fputs("\033[J", stdout);
	fflush(stdout);
}

static volatile sig_atomic_t watch_stop;

static void on_watch_signal(int sig)
{
	(void)sig;
	watch_stop = 1;
}

/* status --watch / top: a frame every interval, count frames (0 = until
 * interrupted).  On a terminal the screen is redrawn in place; otherwise
 * each frame is printed after a "--- time" line (--json: one object per
 * line). */
static int status_watch(struct ctl *c, bool as_json, double interval_s,
			long count)
{
	bool tty = isatty(STDOUT_FILENO) && !as_json;
	struct sigaction sa = { .sa_handler = on_watch_signal };

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (tty)
		fputs("\033[H\033[2J", stdout);
	for (long n = 0; !watch_stop && (count <= 0 || n < count); n++) {
		json_t *st = status_get(c);
		int64_t until;

		if (as_json) {
			json_dumpf(st, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER);
			fputc('\n', stdout);
		} else if (tty) {
			char *txt = NULL;
			size_t len = 0;
			FILE *f = open_memstream(&txt, &len);

			if (!f)
				die(EXIT_FAIL, "out of memory");
			status_render(f, st);
			fclose(f);
			watch_frame_tty(txt, len, interval_s);
			free(txt);
		} else {
			char when[32];
			fmt_time((int64_t)time(NULL), when, sizeof(when));
			printf("%s--- %s\n", n ? "\n" : "", when);
			status_render(stdout, st);
		}
		fflush(stdout);
		json_decref(st);
		if (count > 0 && n + 1 >= count)
			break;
		until = now_ms() + (int64_t)(interval_s * 1000);
		while (!watch_stop && now_ms() < until) {
			int64_t left = until - now_ms();
			poll(NULL, 0, left > 200 ? 200 : (int)left);
		}
	}
	return 0;
}

static int cmd_status(struct ctl *c, bool as_json, bool watch,
		      double interval_s, long count)
{
	json_t *st;

	if (watch)
		return status_watch(c, as_json, interval_s, count);
	st = status_get(c);
	if (as_json)
		print_json(st);
	else
		status_render(stdout, st);
	json_decref(st);
	return 0;
}

/* --- flush ---------------------------------------------------------------- */

/* The saves a flush waits for, as seen by STATUS on a second connection:
 * those in flight when it started (of the job, when one is named). */
struct fl_step {
	char     job[72];
	uint64_t step;
	uint64_t est, written;
	bool     done;
};

struct fl_progress {
	struct fl_step *s;
	size_t n;
	bool   tty;
	int64_t t0, last_line;
	char   last[160];
};

static void fl_snapshot(struct fl_progress *p, const json_t *st,
			const char *job)
{
	size_t i, k;
	json_t *j, *s;

	json_array_foreach(json_object_get(st, "jobs"), i, j) {
		const char *name = jget_str(j, "name", "?");

		if (job && strcmp(job, name))
			continue;
		json_array_foreach(json_object_get(j, "in_flight"), k, s) {
			struct fl_step *a = realloc(p->s, (p->n + 1) * sizeof(*a));

			if (!a)
				die(EXIT_FAIL, "out of memory");
			p->s = a;
			memset(&a[p->n], 0, sizeof(*a));
			snprintf(a[p->n].job, sizeof(a[p->n].job), "%s", name);
			a[p->n].step = jget_u64(s, "step", 0);
			p->n++;
		}
	}
}

/* Update from a STATUS reply: a tracked step that left in_flight finished. */
static void fl_update(struct fl_progress *p, const json_t *st)
{
	for (size_t t = 0; t < p->n; t++) {
		struct fl_step *x = &p->s[t];
		bool seen = false;
		size_t i, k;
		json_t *j, *s;

		if (x->done)
			continue;
		json_array_foreach(json_object_get(st, "jobs"), i, j) {
			if (strcmp(jget_str(j, "name", ""), x->job))
				continue;
			json_array_foreach(json_object_get(j, "in_flight"), k, s) {
				if (jget_u64(s, "step", 0) != x->step)
					continue;
				step_progress(s, jget_u64(j, "world_size", 0),
					      &x->est);
				x->written = jget_u64(s, "bytes_written", 0);
				if (x->written > x->est)
					x->written = x->est;
				seen = true;
			}
		}
		if (!seen) {
			x->done = true;
			x->written = x->est;
		}
	}
}

static void fl_draw(struct fl_progress *p, bool final)
{
	uint64_t total = 0, written = 0;
	size_t ndone = 0;
	double frac;
	char a[32], b[32], d[32], bar[48], line[160];
	int64_t now = now_ms();

	if (!p->n)
		return;
	for (size_t i = 0; i < p->n; i++) {
		total += p->s[i].est;
		written += p->s[i].written;
		ndone += p->s[i].done;
	}
	frac = total ? (double)written / (double)total :
	       (double)ndone / (double)p->n;
	if (final && ndone == p->n)
		frac = 1;
	fmt_bytes(written, a, sizeof(a));
	fmt_bytes(total, b, sizeof(b));
	fmt_duration((uint64_t)((now - p->t0) / 1000), d, sizeof(d));
	if (p->tty) {
		fprintf(stderr, "\rflush %s %3.0f%%  %s / %s  %zu/%zu saves  %s\033[K%s",
			fmt_bar(frac, 30, bar, sizeof(bar)), 100 * frac, a, b,
			ndone, p->n, d, final ? "\n" : "");
		fflush(stderr);
		return;
	}
	/* plain lines: only when something changed, at most once a second */
	snprintf(line, sizeof(line), "flush: %.0f%% (%s of %s written), %zu of %zu "
		 "saves finished", 100 * frac, a, b, ndone, p->n);
	if (strcmp(line, p->last) == 0 || (!final && now - p->last_line < 1000))
		return;
	fprintf(stderr, "%s\n", line);
	snprintf(p->last, sizeof(p->last), "%s", line);
	p->last_line = now;
}

static int cmd_flush(struct ctl *c, const char *job, double timeout_s,
		     bool as_json)
{
	int64_t ms = (int64_t)(timeout_s * 1000);
	int64_t deadline = now_ms() + ms + 30 * 1000;
	struct fl_progress p = { .t0 = now_ms() };
	struct ctl_reply rep;
	struct ctl mon;
	json_t *req = json_pack("{s:I}", "timeout_ms", (json_int_t)ms);
	bool progress = !as_json;
	uint64_t id;

	if (job)
		json_object_set_new(req, "job", json_string(job));
	if (progress) {
		/* what is in flight now: that is what the flush waits for */
		json_t *st;

		ctl_connect(&mon);
		st = status_get(&mon);
		fl_snapshot(&p, st, job);
		json_decref(st);
		p.tty = isatty(STDERR_FILENO) && (!getenv("TERM") ||
			strcmp(getenv("TERM"), "dumb") != 0);
		if (!p.n) {
			ctl_close(&mon);
			progress = false;
		} else if (!p.tty) {
			fprintf(stderr, "flush: waiting for %zu save%s in flight\n",
				p.n, p.n == 1 ? "" : "s");
		}
	}
	/* The daemon enforces the timeout; we wait a little longer for its
	 * answer. */
	id = ctl_send(c, PROTO_FLUSH, req);
	json_decref(req);
	for (;;) {
		int64_t next = now_ms() + (progress ? 200 : 1000 * 1000);
		json_t *st;

		if (next > deadline)
			next = deadline;
		if (ctl_wait(c, PROTO_FLUSH, id, next, &rep))
			break;
		if (now_ms() >= deadline)
			die(EXIT_FAIL, "ckptd did not answer FLUSH in time");
		if (!progress)
			continue;
		st = status_get(&mon);
		fl_update(&p, st);
		json_decref(st);
		fl_draw(&p, false);
	}
	if (progress) {
		json_t *st = status_get(&mon);

		fl_update(&p, st);
		json_decref(st);
		fl_draw(&p, true);
		ctl_close(&mon);
	}
	free(p.s);
	if (as_json) {
		json_t *o = json_is_object(rep.json) ? json_incref(rep.json) :
			    json_object();

		json_object_set_new(o, "ok", json_boolean(rep.status == 0));
		if (rep.status != 0) {
			json_object_set_new(o, "error", json_string(rep.error));
			json_object_set_new(o, "status", json_integer(rep.status));
		}
		print_json(o);
		json_decref(o);
	} else if (json_object_get(rep.json, "committed")) {
		printf("flushed: %llu committed, %llu failed\n",
		       (unsigned long long)jget_u64(rep.json, "committed", 0),
		       (unsigned long long)jget_u64(rep.json, "failed", 0));
	}
	json_decref(rep.json);
	if (rep.status != 0) {
		if (!as_json)
			fprintf(stderr, "ckptctl: flush: %s\n", rep.error);
		return EXIT_FAIL;
	}
	return 0;
}

/* --- list, prune ----------------------------------------------------------- */

static int cmd_list(struct ctl *c, const char *job, bool as_json)
{
	json_t *req = json_object(), *rep, *cp;
	uint64_t bytes = 0;
	struct table t;
	size_t i;

	if (job)
		json_object_set_new(req, "job", json_string(job));
	rep = ctl_call(c, PROTO_LIST, req, CTL_REPLY_WAIT_MS, "list");
	if (as_json) {
		print_json(rep);
		json_decref(rep);
		return 0;
	}
	table_init(&t, "JOB,>STEP,LATEST,>FILES,>SIZE,CREATED,AGE");
	json_array_foreach(json_object_get(rep, "checkpoints"), i, cp) {
		int64_t when = (int64_t)jget_u64(cp, "created_unix", 0);
		char st[24], fl[24], sz[32], cr[32], age[48];

		bytes += jget_u64(cp, "bytes", 0);
		table_row(&t, jget_str(cp, "job", "?"),
			  fmt_u64(jget_u64(cp, "step", 0), st, sizeof(st)),
			  json_is_true(json_object_get(cp, "latest")) ? "*" : "",
			  fmt_u64(jget_u64(cp, "files", 0), fl, sizeof(fl)),
			  fmt_bytes(jget_u64(cp, "bytes", 0), sz, sizeof(sz)),
			  fmt_time(when, cr, sizeof(cr)),
			  fmt_age(when, age, sizeof(age)));
	}
	if (t.nrows) {
		char b[32];
		size_t n = t.nrows;

		table_print(&t, stdout, "");
		printf("%zu checkpoint%s, %s\n", n, n == 1 ? "" : "s",
		       fmt_bytes(bytes, b, sizeof(b)));
	} else {
		printf(job ? "no checkpoints of job %s\n" : "no checkpoints\n",
		       job);
	}
	free(t.cells);
	json_decref(rep);
	return 0;
}

static int cmd_prune(struct ctl *c, const char *job, long keep, bool as_json)
{
	json_t *rep, *removed, *s;
	size_t i;

	rep = ctl_call(c, PROTO_PRUNE, json_pack("{s:s, s:I}", "job", job,
						 "keep", (json_int_t)keep),
		       CTL_PRUNE_WAIT_MS, "prune");
	removed = json_object_get(rep, "removed");
	if (as_json) {
		print_json(rep);
	} else if (json_array_size(removed) == 0) {
		printf("nothing to remove: %s has at most %ld checkpoints\n",
		       job, keep);
	} else {
		printf("removed steps:");
		json_array_foreach(removed, i, s)
			printf(" %lld", (long long)json_integer_value(s));
		putchar('\n');
	}
	json_decref(rep);
	return 0;
}

/* --- verify (offline) ---------------------------------------------------- */

struct vres {
	bool     ok;
	uint64_t step, files, bytes;
	char     err[512];
};

static void verify_one(int dirfd, bool quick, struct vres *v)
{
	struct mfst *m = NULL;
	int r;

	memset(v, 0, sizeof(*v));
	r = verify_checkpoint(dirfd, quick ? VERIFY_STRUCTURE : VERIFY_FULL,
			      CTL_VERIFY_THREADS, &m, v->err, sizeof(v->err));
	if (r < 0) {
		if (!v->err[0])
			snprintf(v->err, sizeof(v->err), "%s", strerror(-r));
		return;
	}
	v->ok = true;
	v->step = m->step;
	v->files = m->nfiles;
	for (size_t i = 0; i < m->nfiles; i++)
		v->bytes += m->files[i].size;
	mfst_free(m);
}

static json_t *vres_json(const char *dir, const struct vres *v)
{
	if (!v->ok)
		return json_pack("{s:s, s:b, s:s}", "dir", dir, "ok", 0,
				 "error", v->err);
	return json_pack("{s:s, s:b, s:I, s:I, s:I}", "dir", dir, "ok", 1,
			 "step", (json_int_t)v->step,
			 "files", (json_int_t)v->files,
			 "bytes", (json_int_t)v->bytes);
}

static void vres_print(const char *dir, const struct vres *v, bool quick,
		       const char *note)
{
	char b[32];

	fflush(stdout);         /* keep stdout and stderr lines in order */
	if (v->ok)
		printf("ok: %s step %llu, %llu files, %s %s%s\n", dir,
		       (unsigned long long)v->step,
		       (unsigned long long)v->files,
		       fmt_bytes(v->bytes, b, sizeof(b)),
		       quick ? "checked (structure only)" : "verified", note);
	else
		fprintf(stderr, "FAILED: %s: %s%s\n", dir, v->err, note);
}

static bool has_entry(int dirfd, const char *name)
{
	struct stat st;

	return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Every iter_* of a job directory, newest first: a table, then the reason
 * of each failure on stderr. */
static int verify_job(int jobfd, const char *dir, bool quick, bool as_json)
{
	json_t *all = json_array();
	uint64_t *steps = NULL, latest = 0, newest_ok = UINT64_MAX;
	bool has_latest = layout_latest_read(jobfd, &latest) == 0;
	int n = layout_list_steps(jobfd, &steps), bad = 0;
	struct table t;
	char **why = NULL;

	if (n < 0)
		die(EXIT_FAIL, "cannot list %s: %s", dir, strerror(-n));
	table_init(&t, ">STEP,LATEST,RESULT,>FILES,>SIZE");
	if (n > 0 && !(why = calloc((size_t)n, sizeof(*why))))
		die(EXIT_FAIL, "out of memory");
	for (int i = 0; i < n; i++) {
		char name[LAYOUT_ITER_LEN + 1], path[PATH_MAX];
		char st[24], fl[24], sz[32];
		bool is_latest = has_latest && steps[i] == latest;
		struct vres v;
		int fd;

		layout_iter_name(steps[i], name, sizeof(name));
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		fd = openat(jobfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
			    O_CLOEXEC);
		if (fd < 0) {
			memset(&v, 0, sizeof(v));
			snprintf(v.err, sizeof(v.err), "cannot open: %s",
				 strerror(errno));
		} else {
			verify_one(fd, quick, &v);
			close(fd);
		}
		bad += !v.ok;
		if (v.ok && newest_ok == UINT64_MAX)
			newest_ok = steps[i];
		if (as_json) {
			json_array_append_new(all, vres_json(path, &v));
			continue;
		}
		if (!v.ok && asprintf(&why[i], "FAILED: %s: %s", path, v.err) < 0)
			why[i] = NULL;
		table_row(&t, fmt_u64(steps[i], st, sizeof(st)),
			  is_latest ? "*" : "",
			  v.ok ? (quick ? "ok (structure)" : "verified") : "FAILED",
			  v.ok ? fmt_u64(v.files, fl, sizeof(fl)) : "-",
			  v.ok ? fmt_bytes(v.bytes, sz, sizeof(sz)) : "-");
	}
	if (as_json) {
		print_json(all);
	} else if (n == 0) {
		fprintf(stderr, "FAILED: %s: no checkpoints in this job "
			"directory\n", dir);
	} else {
		printf("%s\n", dir);
		table_print(&t, stdout, "");
		fflush(stdout);
		for (int i = 0; i < n; i++)
			if (why[i])
				fprintf(stderr, "%s\n", why[i]);
		if (n == bad)
			printf("0 of %d checkpoints %s: nothing to restore from\n",
			       n, quick ? "passed" : "verified");
		else
			printf("%d of %d checkpoints %s; newest good: step %llu\n",
			       n - bad, n, quick ? "passed" : "verified",
			       (unsigned long long)newest_ok);
	}
	for (int i = 0; i < n; i++)
		free(why[i]);
	free(why);
	free(t.cells);
	json_decref(all);
	free(steps);
	return bad || n == 0 ? EXIT_FAIL : 0;
}

static int cmd_verify(const char *dir, bool quick, bool as_json)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;
	struct vres v;

	if (fd < 0) {
		fprintf(stderr, "FAILED: %s: cannot open: %s\n", dir,
			strerror(errno));
		return EXIT_FAIL;
	}
	if (!has_entry(fd, MFST_NAME) && has_entry(fd, LAYOUT_LATEST)) {
		rc = verify_job(fd, dir, quick, as_json);
		close(fd);
		return rc;
	}
	if (!has_entry(fd, MFST_NAME)) {
		uint64_t *steps = NULL;
		int n = layout_list_steps(fd, &steps);

		free(steps);
		if (n > 0) {
			rc = verify_job(fd, dir, quick, as_json);
			close(fd);
			return rc;
		}
	}
	verify_one(fd, quick, &v);
	close(fd);
	if (as_json) {
		json_t *j = vres_json(dir, &v);
		print_json(j);
		json_decref(j);
	} else {
		vres_print(dir, &v, quick, "");
	}
	return v.ok ? 0 : EXIT_FAIL;
}

/* --- command line -------------------------------------------------------- */

struct cmd_help {
	const char *name, *synopsis, *text;
};

static const struct cmd_help cmd_helps[] = {
	{ "status", "status [--json] [--watch [--interval S] [--count N]]",
	  "Show the daemon at a glance: version, uptime, I/O back-end, staging\n"
	  "pool usage, clients, bytes written and the write rate, saves\n"
	  "committed and failed; then every job (owner, world size, ranks\n"
	  "connected, last committed step and its age) and the saves in flight\n"
	  "(phase, ranks saved/staged/durable, size, progress).\n"
	  "  --json         print the daemon's status object as it is\n"
	  "  -w, --watch    refresh until interrupted (same as 'ckptctl top');\n"
	  "                 with --json, one object per line\n"
	  "  -i, --interval S   seconds between refreshes (default 1)\n"
	  "  -n, --count N  stop after N refreshes\n"
	  "example:\n"
	  "  ckptctl status\n"
	  "  ckptctl status --json | jq '.jobs[].last_committed_step'\n" },
	{ "top", "top [--interval S] [--count N] [--json]",
	  "Live view: 'status' redrawn in place every interval on a terminal\n"
	  "(a new block per refresh when not a terminal).  Ctrl-C quits.\n"
	  "  -i, --interval S   seconds between refreshes (default 1)\n"
	  "  -n, --count N      stop after N refreshes\n"
	  "  --json             one status object per line\n" },
	{ "flush", "flush [--job J] [--timeout S] [--json]",
	  "Wait until every save accepted so far (of job J, or of all jobs) is\n"
	  "committed or failed: run it before maintenance.  On a terminal a\n"
	  "progress bar (bytes written of the saves in flight) is drawn on\n"
	  "stderr; otherwise plain progress lines, at most one a second.\n"
	  "Exits 0 only if none failed and all finished in time.\n"
	  "  --job J       only this job\n"
	  "  --timeout S   give up after S seconds (default 600)\n"
	  "  --json        no progress; print {\"committed\":n, \"failed\":n, \"ok\":b}\n"
	  "example:\n"
	  "  ckptctl flush --timeout 300 && systemctl stop ckptd\n" },
	{ "list", "list [--job J] [--json]",
	  "List the committed checkpoints on disk, newest first per job;\n"
	  "'*' marks each job's latest.  Only jobs of your user (root: all).\n"
	  "  --job J   only this job\n"
	  "  --json    print the daemon's reply as it is\n" },
	{ "verify", "verify DIR [--quick] [--json]",
	  "Verify a checkpoint directory (iter_NNNNNNNNN) without the daemon:\n"
	  "manifest, file sizes, SHA-256 and safetensors headers.  Given a\n"
	  "job directory, verify each of its checkpoints, newest first, and\n"
	  "name the newest good one.  Exits 1 if any checkpoint fails.\n"
	  "  --quick   structure and sizes only, no hashing\n"
	  "  --json    machine-readable results\n"
	  "example:\n"
	  "  ckptctl verify /var/lib/ckpt/llama/iter_000001200\n" },
	{ "prune", "prune --job J --keep N [--json]",
	  "Remove all but the newest N committed checkpoints of job J (the\n"
	  "latest is always kept; only checkpoints of the job's own run).\n"
	  "  --json    print {\"removed\":[steps]}\n" },
	{ "help", "help [COMMAND]", "Show help for a command.\n" },
};
#define NCMDS (sizeof(cmd_helps) / sizeof(cmd_helps[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: ckptctl [-s SOCKET] COMMAND [options]\n\n"
		"Operate the node-local checkpoint daemon ckptd.\n\ncommands:\n");
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(f, "  %s\n", cmd_helps[i].synopsis);
	fprintf(f, "\noptions:\n"
		"  -s, --socket SOCKET   ckptd's socket (default $CKPT_SOCKET, "
		"else %s)\n"
		"  -h, --help            this help; 'ckptctl help COMMAND' for "
		"one command\n"
		"      --version         print the version\n"
		"\nexit status: 0 ok, 1 the operation failed, 2 usage error or "
		"ckptd unreachable.\n"
		"See ckptctl(1), ckptd(8) and ckptd.json(5).\n",
		CKPT_DEFAULT_SOCKET);
}

static int cmd_help(const char *name)
{
	if (!name) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < NCMDS; i++) {
		if (strcmp(cmd_helps[i].name, name) == 0) {
			printf("usage: ckptctl %s\n\n%s", cmd_helps[i].synopsis,
			       cmd_helps[i].text);
			return 0;
		}
	}
	die(EXIT_USAGE, "unknown command '%s' (try 'ckptctl --help')", name);
}

/* Options of a command: what any of them may take. */
struct opts {
	const char *job, *dir;
	double timeout_s, interval_s;
	long keep, count;
	bool json, quick, watch;
};

static long parse_long(const char *cmd, const char *opt, const char *s,
		       long min)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min)
		die(EXIT_USAGE, "%s: %s wants a whole number >= %ld, not '%s'",
		    cmd, opt, min, s);
	return v;
}

static double parse_seconds(const char *cmd, const char *opt, const char *s,
			    double min)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= min) || v > 86400.0 * 365)
		die(EXIT_USAGE, "%s: %s wants seconds (>= %g), not '%s'", cmd,
		    opt, min, s);
	return v;
}

/* Is word in the blank-separated list? */
static bool word_in(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = list; (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n]))
			return true;
	return false;
}

/* Parse the options of cmd; "allowed" lists the long options it takes. */
static void parse_opts(const char *cmd, const char *allowed, int argc,
		       char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "job", required_argument, NULL, 'j' },
		{ "timeout", required_argument, NULL, 't' },
		{ "keep", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'J' },
		{ "quick", no_argument, NULL, 'q' },
		{ "watch", no_argument, NULL, 'w' },
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	memset(o, 0, sizeof(*o));
	o->timeout_s = CTL_FLUSH_DEFAULT_S;
	o->interval_s = 1;
	o->keep = -1;
	optind = 0;         /* glibc: restart scanning, permuting operands */
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "hwi:n:j:", lo, NULL)) != -1) {
		const char *name = NULL;

		for (int i = 0; lo[i].name; i++)
			if (lo[i].val == ch)
				name = lo[i].name;
		if (ch == 'h')
			exit(cmd_help(cmd));
		if (!name || !word_in(allowed, name))
			die(EXIT_USAGE, "%s: unknown or incomplete option '%s' "
			    "(try 'ckptctl help %s')", cmd, argv[optind - 1],
			    cmd);
		switch (ch) {
		case 'j': o->job = optarg; break;
		case 't':
			o->timeout_s = parse_seconds(cmd, "--timeout", optarg, 0);
			break;
		case 'k': o->keep = parse_long(cmd, "--keep", optarg, 1); break;
		case 'J': o->json = true; break;
		case 'q': o->quick = true; break;
		case 'w': o->watch = true; break;
		case 'i':
			o->interval_s = parse_seconds(cmd, "--interval", optarg, 0.1);
			break;
		case 'n': o->count = parse_long(cmd, "--count", optarg, 1); break;
		}
	}
	if (optind < argc && strcmp(cmd, "verify") == 0)
		o->dir = argv[optind++];
	if (optind < argc)
		die(EXIT_USAGE, "%s: unexpected argument '%s'", cmd,
		    argv[optind]);
}

static int run_daemon_cmd(const char *cmd, const struct opts *o)
{
	struct ctl c;
	int rc;

	ctl_connect(&c);
	if (strcmp(cmd, "status") == 0 || strcmp(cmd, "top") == 0)
		rc = cmd_status(&c, o->json, o->watch, o->interval_s, o->count);
	else if (strcmp(cmd, "flush") == 0)
		rc = cmd_flush(&c, o->job, o->timeout_s, o->json);
	else if (strcmp(cmd, "list") == 0)
		rc = cmd_list(&c, o->job, o->json);
	else
		rc = cmd_prune(&c, o->job, o->keep, o->json);
	ctl_close(&c);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *cmd;
	struct opts o;
	int ch;

	opterr = 0;
	while ((ch = getopt_long(argc, argv, "+s:h", lo, NULL)) != -1) {
		switch (ch) {
		case 's': ctl_socket = optarg; break;
		case 'h': usage(stdout); return 0;
		case 'V':
			printf("ckptctl %s (protocol %d)\n", CKPT_VERSION,
			       PROTO_VERSION);
			return 0;
		default:
			die(EXIT_USAGE, "unknown or incomplete option '%s' (try "
			    "'ckptctl --help')", argv[optind - 1]);
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!ctl_socket || !*ctl_socket)
		ctl_socket = getenv("CKPT_SOCKET");
	if (!ctl_socket || !*ctl_socket)
		ctl_socket = CKPT_DEFAULT_SOCKET;

	cmd = argv[optind];
	argc -= optind;
	argv += optind;
	if (strcmp(cmd, "help") == 0) {
		if (argc > 2)
			die(EXIT_USAGE, "help: one command at most");
		if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))
			return cmd_help("help");
		return cmd_help(argc > 1 ? argv[1] : NULL);
	}
	if (strcmp(cmd, "status") == 0) {
		parse_opts(cmd, "json watch interval count", argc, argv, &o);
	} else if (strcmp(cmd, "top") == 0) {
		parse_opts(cmd, "json interval count", argc, argv, &o);
		o.watch = true;
	} else if (strcmp(cmd, "flush") == 0) {
		parse_opts(cmd, "job timeout json", argc, argv, &o);
	} else if (strcmp(cmd, "list") == 0) {
		parse_opts(cmd, "job json", argc, argv, &o);
	} else if (strcmp(cmd, "prune") == 0) {
		parse_opts(cmd, "job keep json", argc, argv, &o);
		if (!o.job || o.keep < 1)
			die(EXIT_USAGE, "prune: needs --job J and --keep N "
			    "(N >= 1)");
	} else if (strcmp(cmd, "verify") == 0) {
		parse_opts(cmd, "quick json", argc, argv, &o);
		if (!o.dir)
			die(EXIT_USAGE, "verify: which directory? (ckptctl "
			    "verify DIR)");
		return cmd_verify(o.dir, o.quick, o.json);
	} else {
		die(EXIT_USAGE, "unknown command '%s' (try 'ckptctl --help')",
		    cmd);
	}
	return run_daemon_cmd(cmd, &o);
}
