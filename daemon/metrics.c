/* metrics.c - Prometheus text exposition over loopback HTTP.  See metrics.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "gpu.h"
#include "job.h"
#include "log.h"
#include "metrics.h"
#include "remote.h"
#include "srv.h"
#include "status.h"

#define METRICS_MAX_CONNS   16
#define METRICS_REQ_MAX     4096
#define METRICS_TIMEOUT_MS  5000
#define METRICS_MAX_REASONS 32

/* Histogram bucket upper bounds, seconds: a 1 ms stall up to a 10 min
 * commit of a very large multi-node step. */
static const double bucket_le[] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600,
};
#define NBUCKETS (sizeof(bucket_le) / sizeof(bucket_le[0]))

static const char *const phase_name[METRICS_NPHASES] = {
	"staged", "durable", "committed",
};

struct hist {
	uint64_t bucket[NBUCKETS + 1];   /* not cumulative; last is +Inf */
	uint64_t count;
	double   sum;
};

struct mconn {
	struct mconn *next, *prev;
	uv_tcp_t      tcp;
	uv_timer_t    timer;
	uv_write_t    wr;
	uv_shutdown_t sh;
	char          req[METRICS_REQ_MAX];
	size_t        len;
	char         *resp;
	int           closing, nclosed;
};

static struct {
	struct srv  *srv;            /* borrowed while listening */
	uv_tcp_t    *listener;       /* NULL when off; freed when closed */
	unsigned     port;
	struct mconn *conns;
	unsigned     nconns;

	struct hist  phase[METRICS_NPHASES];
	uint64_t     bytes_committed;
	uint64_t     bytes_linked;
	uint64_t     bytes_cloned;
	struct { int err; uint64_t n; } failed[METRICS_MAX_REASONS];
	unsigned     nfailed;
	uint64_t     failed_other;
	uint64_t     scrapes;
} M;

/* --- hooks -------------------------------------------------------------- */

void metrics_observe(enum metrics_phase ph, uint64_t ns)
{
	struct hist *h;
	double s = (double)ns / 1e9;
	size_t i;

	if ((unsigned)ph >= METRICS_NPHASES)
		return;
	h = &M.phase[ph];
	for (i = 0; i < NBUCKETS && s > bucket_le[i]; i++)
		;
	h->bucket[i]++;
	h->count++;
	h->sum += s;
}

void metrics_committed(uint64_t bytes, uint64_t linked, uint64_t cloned)
{
	M.bytes_committed += bytes;
	M.bytes_linked += linked;
	M.bytes_cloned += cloned;
}

void metrics_failed(int err)
{
	unsigned i;

	if (err > 0)
		err = -err;
	for (i = 0; i < M.nfailed; i++)
		if (M.failed[i].err == err) {
			M.failed[i].n++;
			return;
		}
	if (M.nfailed == METRICS_MAX_REASONS) {
		M.failed_other++;
		return;
	}
	M.failed[M.nfailed].err = err;
	M.failed[M.nfailed++].n = 1;
}

/* --- exposition --------------------------------------------------------- */

/* "EIO" for -5; glibc knows the names, others get "E<number>". */
static const char *errno_name(int err, char *buf, size_t len)
{
	const char *n = err ? strerrorname_np(-err) : "unknown";

	if (n)
		return n;
	snprintf(buf, len, "E%d", -err);
	return buf;
}

/* A label value: backslash, double quote and newline escaped. */
static void put_label(FILE *f, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			fputc('\\', f);
		if (*v == '\n')
			fputs("\\n", f);
		else
			fputc(*v, f);
	}
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(FILE *f, const char *name, const char *type, const char *help,
		double v)
{
	head(f, name, type, help);
	fprintf(f, "%s %.17g\n", name, v);
}

static void render_hist(FILE *f)
{
	const char *name = "ckptd_save_phase_seconds";

	head(f, name, "histogram", "Time from SAVE accepted to each phase, per rank "
	     "(staged = the trainer's stall).");
	for (int p = 0; p < METRICS_NPHASES; p++) {
		const struct hist *h = &M.phase[p];
		uint64_t cum = 0;

		for (size_t i = 0; i < NBUCKETS; i++) {
			cum += h->bucket[i];
			fprintf(f, "%s_bucket{phase=\"%s\",le=\"%g\"} %llu\n", name,
				phase_name[p], bucket_le[i], (unsigned long long)cum);
		}
		cum += h->bucket[NBUCKETS];
		fprintf(f, "%s_bucket{phase=\"%s\",le=\"+Inf\"} %llu\n", name,
			phase_name[p], (unsigned long long)cum);
		fprintf(f, "%s_sum{phase=\"%s\"} %.9g\n", name, phase_name[p], h->sum);
		fprintf(f, "%s_count{phase=\"%s\"} %llu\n", name, phase_name[p],
			(unsigned long long)h->count);
	}
}

static void render_jobs(FILE *f, const struct status *st)
{
	static const struct { const char *name, *help; } fam[] = {
		{ "ckptd_job_last_committed_step", "Newest committed step of a job." },
		{ "ckptd_job_last_commit_timestamp_seconds",
		  "Unix time of a job's last commit by this ckptd (alert on its age)." },
		{ "ckptd_job_ranks_connected", "Trainer ranks of a job connected now." },
		{ "ckptd_job_world_size", "Ranks in a job." },
	};

	for (size_t k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
		head(f, fam[k].name, "gauge", fam[k].help);
		for (size_t i = 0; i < st->njobs; i++) {
			const struct status_job *j = &st->jobs[i];
			double v;
			if (k == 0 && !j->have_last)
				continue;
			if (k == 1 && !j->last_unix)
				continue;
			v = k == 0 ? (double)j->last_step : k == 1 ? (double)j->last_unix :
			    k == 2 ? (double)j->ranks_connected : (double)j->world_size;
			fprintf(f, "%s{job=\"", fam[k].name);
			put_label(f, j->name);
			fprintf(f, "\"} %.17g\n", v);
		}
	}
}

/* The object-store tier, from the same snapshot as ckptctl status. */
static void render_remote(FILE *f)
{
	static const struct { const char *key, *name, *type, *help; } fam[] = {
		{ "bytes_uploaded", "ckptd_remote_bytes_uploaded_total", "counter",
		  "Bytes sent to the object store." },
		{ "steps_uploaded", "ckptd_remote_uploads_total", "counter",
		  "Steps uploaded (manifest last) to the object store." },
		{ "failures", "ckptd_remote_failures_total", "counter",
		  "Uploads (or start-up checks) of the object store that failed." },
		{ "retries", "ckptd_remote_retries_total", "counter",
		  "Object-store requests retried after a transient failure." },
		{ "queued", "ckptd_remote_queued_steps", "gauge",
		  "Committed steps waiting for their upload." },
		{ "lag_seconds", "ckptd_remote_lag_seconds", "gauge",
		  "Age of the oldest committed step still waiting to reach the object "
		  "store (0: it has every step it should)." },
	};
	json_t *r = remote_status_json();

	if (!r)
		return;
	for (size_t k = 0; k < sizeof(fam) / sizeof(fam[0]); k++)
		one(f, fam[k].name, fam[k].type, fam[k].help,
		    (double)json_integer_value(json_object_get(r, fam[k].key)));
	json_decref(r);
}

char *metrics_render(struct srv *S, size_t *len)
{
	struct status st;
	char *buf = NULL, eb[16];
	size_t n = 0;
	FILE *f;

	if (status_take(S, &st) < 0)
		return NULL;
	if (!(f = open_memstream(&buf, &n))) {
		status_release(&st);
		return NULL;
	}
	head(f, "ckptd_build_info", "gauge", "ckptd's version, I/O back-end and GPU use.");
	fprintf(f, "ckptd_build_info{version=\"%s\",io_backend=\"%s\",gpu=\"%s\"} 1\n",
		CKPT_VERSION, st.io_backend, st.gpu ? "true" : "false");
	one(f, "ckptd_start_time_seconds", "gauge", "Unix time ckptd started.",
	    (double)st.start_unix);
	one(f, "ckptd_draining", "gauge", "1 while SIGTERM drains accepted saves.",
	    st.draining ? 1 : 0);

	one(f, "ckptd_saves_committed_total", "counter",
	    "Steps published (all ranks durable, manifest written, renamed).",
	    (double)st.saves_committed);
	head(f, "ckptd_saves_failed_total", "counter",
	     "Steps that failed or were aborted, by reason (errno name).");
	for (unsigned i = 0; i < M.nfailed; i++) {
		fprintf(f, "ckptd_saves_failed_total{reason=\"%s\"} %llu\n",
			errno_name(M.failed[i].err, eb, sizeof(eb)),
			(unsigned long long)M.failed[i].n);
	}
	if (M.failed_other)
		fprintf(f, "ckptd_saves_failed_total{reason=\"other\"} %llu\n",
			(unsigned long long)M.failed_other);
	one(f, "ckptd_bytes_written_total", "counter",
	    "Bytes written to checkpoint files (committed or not).",
	    (double)st.bytes_written);
	one(f, "ckptd_bytes_committed_total", "counter",
	    "Bytes of checkpoints published.", (double)M.bytes_committed);
	one(f, "ckptd_bytes_linked_total", "counter",
	    "Bytes of published checkpoints that were unchanged since the step before "
	    "and hard-linked to it instead of written (incremental saves).",
	    (double)M.bytes_linked);
	one(f, "ckptd_bytes_cloned_total", "counter",
	    "Bytes of published checkpoints, in files that changed, that were unchanged "
	    "since the step before and cloned from it (reflinks) instead of written.",
	    (double)M.bytes_cloned);
	render_hist(f);

	one(f, "ckptd_pool_used_bytes", "gauge", "Staging pool bytes in use.",
	    (double)st.pool_used);
	one(f, "ckptd_pool_size_bytes", "gauge", "Staging pool size.",
	    (double)st.pool_size);
	one(f, "ckptd_pool_locked", "gauge", "1 if the staging pool is locked in RAM.",
	    st.pool_locked ? 1 : 0);
	one(f, "ckptd_pool_waits_total", "counter",
	    "Times staging waited for pool space (backpressure).", (double)st.pool_waits);
	one(f, "ckptd_memory_tier_bytes", "gauge",
	    "Memory tier bytes held (committed steps and saves being captured).",
	    (double)st.memt.held);
	one(f, "ckptd_memory_tier_size_bytes", "gauge", "Memory tier budget (0: off).",
	    (double)st.memt.budget);
	one(f, "ckptd_memory_tier_steps", "gauge",
	    "Committed steps held in the memory tier (at most one per job).",
	    (double)st.memt.steps);
	one(f, "ckptd_memory_tier_spare_bytes", "gauge",
	    "Memory tier bytes allocated for the next captures (counted in ckptd_memory_tier_bytes).",
	    (double)st.memt.spare);
	one(f, "ckptd_memory_tier_reserving_bytes", "gauge",
	    "Memory tier bytes being allocated now, ahead of a job's saves.",
	    (double)st.memt.reserving);
	one(f, "ckptd_memory_tier_copied_bytes_total", "counter",
	    "Bytes of saves copied into the memory tier.", (double)st.memt.copied);
	one(f, "ckptd_memory_tier_shared_bytes_total", "counter",
	    "Bytes of saves not copied into the memory tier: unchanged files and chunks "
	    "it held already, kept once.", (double)st.memt.shared);

	head(f, "ckptd_clients", "gauge", "Connections, by role.");
	fprintf(f, "ckptd_clients{role=\"trainer\"} %u\n", st.clients_by_role[STATUS_TRAINER]);
	fprintf(f, "ckptd_clients{role=\"ctl\"} %u\n", st.clients_by_role[STATUS_CTL]);
	fprintf(f, "ckptd_clients{role=\"handshake\"} %u\n",
		st.clients_by_role[STATUS_HANDSHAKE]);
	one(f, "ckptd_reply_queue_bytes", "gauge",
	    "Replies queued for clients that have not read them yet.",
	    (double)st.reply_queue_bytes);
	one(f, "ckptd_jobs", "gauge", "Jobs known to this ckptd since it started.",
	    (double)st.njobs);
	one(f, "ckptd_inflight_steps", "gauge", "Steps accepted and not yet finished.",
	    (double)st.inflight_steps);
	one(f, "ckptd_inflight_bytes", "gauge",
	    "Bytes of the rank saves in those steps.", (double)st.inflight_bytes);
	render_jobs(f, &st);
	render_remote(f);
	if (st.gpu)
		one(f, "ckptd_gpu_context_resets_total", "counter",
		    "GPU contexts reset after a sticky CUDA error.", (double)gpu_context_resets());
	one(f, "ckptd_metrics_scrapes_total", "counter", "Scrapes of this endpoint.",
	    (double)M.scrapes);

	status_release(&st);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	*len = n;
	return buf;
}

/* --- HTTP --------------------------------------------------------------- */

static void conn_closed(uv_handle_t *h)
{
	struct mconn *c = h->data;

	if (++c->nclosed < 2)
		return;
	if (c->prev)
		c->prev->next = c->next;
	else
		M.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	M.nconns--;
	free(c->resp);
	free(c);
}

static void conn_close(struct mconn *c)
{
	if (c->closing)
		return;
	c->closing = 1;
	uv_timer_stop(&c->timer);
	uv_close((uv_handle_t *)&c->tcp, conn_closed);
	uv_close((uv_handle_t *)&c->timer, conn_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	conn_close(req->data);
}

static void on_written(uv_write_t *req, int status)
{
	struct mconn *c = req->data;

	if (status < 0 || c->closing ||
	    uv_shutdown(&c->sh, (uv_stream_t *)&c->tcp, on_shutdown) < 0)
		conn_close(c);
}

static void respond(struct mconn *c, int code, const char *ctype,
		    const char *body, size_t blen, int head_only)
{
	const char *reason = code == 200 ? "OK" : code == 400 ? "Bad Request" :
			     code == 404 ? "Not Found" : code == 405 ?
			     "Method Not Allowed" : "Internal Server Error";
	uv_buf_t b;
	int n;

	n = asprintf(&c->resp, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
		     "Content-Length: %zu\r\nConnection: close\r\n%s\r\n",
		     code, reason, ctype, blen, code == 405 ? "Allow: GET, HEAD\r\n" : "");
	if (n < 0) {
		c->resp = NULL;
		conn_close(c);
		return;
	}
	if (!head_only && blen) {
		char *all = realloc(c->resp, (size_t)n + blen);
		if (!all) {
			conn_close(c);
			return;
		}
		memcpy(all + n, body, blen);
		c->resp = all;
		n += (int)blen;
	}
	uv_read_stop((uv_stream_t *)&c->tcp);
	b = uv_buf_init(c->resp, (unsigned)n);
	c->wr.data = c;
	c->sh.data = c;
	if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0)
		conn_close(c);
}

static void handle_request(struct mconn *c)
{
	char method[16] = "", path[256] = "";
	int head_only;

	c->req[c->len] = '\0';
	if (sscanf(c->req, "%15s %255s", method, path) != 2) {
		respond(c, 400, "text/plain", "bad request\n", 12, 0);
		return;
	}
	path[strcspn(path, "?#")] = '\0';
	head_only = strcmp(method, "HEAD") == 0;
	if (strcmp(method, "GET") && !head_only) {
		respond(c, 405, "text/plain", "only GET and HEAD\n", 18, 0);
		return;
	}
	if (strcmp(path, "/metrics") == 0) {
		size_t len = 0;
		char *txt;

		M.scrapes++;
		txt = metrics_render(M.srv, &len);
		if (!txt) {
			respond(c, 500, "text/plain", "out of memory\n", 14, 0);
			return;
		}
		respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", txt, len,
			head_only);
		free(txt);
	} else if (strcmp(path, "/") == 0) {
		static const char idx[] = "ckptd " CKPT_VERSION ": metrics at /metrics\n";
		respond(c, 200, "text/plain; charset=utf-8", idx, sizeof(idx) - 1, head_only);
	} else {
		respond(c, 404, "text/plain", "not found; try /metrics\n", 24, head_only);
	}
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	struct mconn *c = h->data;

	*buf = uv_buf_init(c->req + c->len, (unsigned)(sizeof(c->req) - 1 - c->len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct mconn *c = s->data;

	if (nread < 0) {
		conn_close(c);
		return;
	}
	c->len += (size_t)nread;
	c->req[c->len] = '\0';
	if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n"))
		handle_request(c);
	else if (c->len >= sizeof(c->req) - 1)
		respond(c, 400, "text/plain", "request too large\n", 18, 0);
}

static void on_timeout(uv_timer_t *t)
{
	conn_close(t->data);
}

static void on_connection(uv_stream_t *server, int status)
{
	struct mconn *c;

	if (status < 0)
		return;
	c = calloc(1, sizeof(*c));
	if (!c)
		return;
	uv_tcp_init(server->loop, &c->tcp);
	uv_timer_init(server->loop, &c->timer);
	c->tcp.data = c->timer.data = c;
	c->next = M.conns;
	if (M.conns)
		M.conns->prev = c;
	M.conns = c;
	M.nconns++;
	if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
		conn_close(c);
		return;
	}
	if (M.nconns > METRICS_MAX_CONNS) {
		/* full: drop the oldest that has not sent its request, so idle
		 * connections cannot lock the scraper out */
		struct mconn *old = NULL;
		for (struct mconn *o = c->next; o; o = o->next)
			if (!o->closing && !o->resp)
				old = o;
		conn_close(old ? old : c);
		if (!old)
			return;
	}
	uv_timer_start(&c->timer, on_timeout, METRICS_TIMEOUT_MS, 0);
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
		conn_close(c);
}

static void listener_closed(uv_handle_t *h)
{
	free(h);
}

int metrics_start(struct srv *S)
{
	struct sockaddr_in sa;
	uv_tcp_t *l;
	int r;

	if (M.listener || S->cfg.metrics_port == 0)
		return 0;
	if (!(l = calloc(1, sizeof(*l))))
		return -ENOMEM;
	uv_ip4_addr("127.0.0.1", (int)S->cfg.metrics_port, &sa);
	uv_tcp_init(S->loop, l);
	r = uv_tcp_bind(l, (const struct sockaddr *)&sa, 0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)l, 64, on_connection);
	if (r < 0) {
		uv_close((uv_handle_t *)l, listener_closed);
		log_warnx("metrics: cannot listen on 127.0.0.1:%u: %s; metrics are off",
			  S->cfg.metrics_port, uv_strerror(r));
		return r;        /* libuv errors are -errno on Unix */
	}
	M.srv = S;
	M.port = S->cfg.metrics_port;
	M.listener = l;
	log_info("metrics: http://127.0.0.1:%u/metrics", M.port);
	return 0;
}

void metrics_stop(void)
{
	if (M.listener) {
		uv_close((uv_handle_t *)M.listener, listener_closed);
		M.listener = NULL;
	}
	for (struct mconn *c = M.conns; c; c = c->next)
		conn_close(c);
}

int metrics_reload(struct srv *S)
{
	if (M.listener && M.port == S->cfg.metrics_port)
		return 0;
	metrics_stop();
	return metrics_start(S);
}
