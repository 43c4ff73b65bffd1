/* ctl_status.c - `ckptctl status` and `ckptctl top`: the daemon's STATUS
 * rendered for people (the daemon, its jobs, the saves in flight), once or
 * redrawn every interval.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <poll.h>
#include <unistd.h>

#include "ctl.h"

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
	if (jget_u64(c, "memory_replicas", 0) || jget_u64(c, "persist_every", 1) > 1) {
		fprintf(f, "  memory:   %llu partner node(s) hold each node's saves; steps to "
			"disk: every %llu", (unsigned long long)jget_u64(c, "memory_replicas", 0),
			(unsigned long long)jget_u64(c, "persist_every", 1));
		json_array_foreach(json_object_get(c, "memory_level_steps"), i, s)
			fprintf(f, "%s%s step %llu", i ? ", " : "; in memory only: ",
				jget_str(s, "job", "?"), (unsigned long long)jget_u64(s, "step", 0));
		fprintf(f, "\n");
	}
	json_array_foreach(json_object_get(c, "steps"), i, s)
		fprintf(f, "            %s step %llu: %llu/%llu ranks durable, nodes saving %s, "
			"durable %s\n", jget_str(s, "job", "?"),
			(unsigned long long)jget_u64(s, "step", 0),
			(unsigned long long)jget_u64(s, "ranks_durable", 0),
			(unsigned long long)jget_u64(s, "world_size", 0),
			fmt_nodes(json_object_get(s, "nodes_seen"), a, sizeof(a)),
			fmt_nodes(json_object_get(s, "nodes_durable"), b, sizeof(b)));
}

/* The object-store tier: totals, the upload in progress, the last error. */
static void status_remote(FILE *f, const json_t *r)
{
	const json_t *up = json_object_get(r, "uploading");
	char a[32], b[32], d[32];

	if (!json_is_object(r))
		return;
	fprintf(f, "  remote:   %s: %llu steps (%s) uploaded, %llu queued, lag %s, "
		"%llu failures, %llu retries\n", jget_str(r, "url", "?"),
		(unsigned long long)jget_u64(r, "steps_uploaded", 0),
		fmt_bytes(jget_u64(r, "bytes_uploaded", 0), a, sizeof(a)),
		(unsigned long long)jget_u64(r, "queued", 0),
		fmt_duration(jget_u64(r, "lag_seconds", 0), d, sizeof(d)),
		(unsigned long long)jget_u64(r, "failures", 0),
		(unsigned long long)jget_u64(r, "retries", 0));
	if (json_is_object(up))
		fprintf(f, "            uploading %s step %llu: %s / %s\n",
			jget_str(up, "job", "?"), (unsigned long long)jget_u64(up, "step", 0),
			fmt_bytes(jget_u64(up, "bytes_done", 0), a, sizeof(a)),
			fmt_bytes(jget_u64(up, "bytes_total", 0), b, sizeof(b)));
	if (*jget_str(r, "last_error", ""))
		fprintf(f, "            last error (%s): %s\n",
			fmt_age((int64_t)jget_u64(r, "last_error_unix", 0), d, sizeof(d)),
			jget_str(r, "last_error", ""));
}

static void status_daemon(FILE *f, const json_t *st)
{
	const json_t *pool = json_object_get(st, "pool"), *tier, *pin;
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
	if ((pin = json_object_get(st, "gpu_pin"))) {
		const char *ps = jget_str(pin, "state", "?");
		fprintf(f, "  gpu pin:  %s, %s of %s, %.1f s%s\n", ps,
			fmt_bytes(jget_u64(pin, "done", 0), a, sizeof(a)),
			fmt_bytes(jget_u64(pin, "bytes", 0), b, sizeof(b)),
			jget_u64(pin, "ms", 0) / 1e3,
			!strcmp(ps, "pinning") ? " (GPU saves wait for it)" :
			!strcmp(ps, "failed") ? " (GPU copies slower, see the log)" : "");
	}
	json_t *fl = json_object_get(st, "gpu_faults"), *fe;
	size_t fi;
	json_array_foreach(fl, fi, fe) {
		time_t at = (time_t)jget_u64(fe, "last_at", 0);
		char when[32] = "";
		struct tm tm;
		if (at && gmtime_r(&at, &tm))
			strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		fprintf(f, "  gpu%d:     context reset after %s (CUDA error %d) at %s, "
			"%llu reset(s)%s\n", (int)jget_u64(fe, "device", 0),
			jget_str(fe, "last_name", "?"), (int)jget_u64(fe, "last_error", 0), when,
			(unsigned long long)jget_u64(fe, "resets", 0),
			jget_u64(fe, "faulted", 0) ? "; faulted again, reset on its next use" : "");
	}
	if ((tier = json_object_get(st, "memory_tier"))) {
		used = jget_u64(tier, "held", 0);
		total = jget_u64(tier, "total", 0);
		frac = total ? (double)used / (double)total : 0.0;
		fprintf(f, "  memory:   %s %3.0f%%  %s / %s, %llu steps kept",
			fmt_bar(frac, 20, bar, sizeof(bar)), 100.0 * frac,
			fmt_bytes(used, a, sizeof(a)), fmt_bytes(total, b, sizeof(b)),
			(unsigned long long)jget_u64(tier, "steps", 0));
		if (jget_u64(tier, "spare", 0))
			fprintf(f, ", %s ready for the next saves",
				fmt_bytes(jget_u64(tier, "spare", 0), a, sizeof(a)));
		if (jget_u64(tier, "reserving", 0))
			fprintf(f, ", allocating %s",
				fmt_bytes(jget_u64(tier, "reserving", 0), b, sizeof(b)));
		fputc('\n', f);
	}
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
	status_remote(f, json_object_get(st, "remote"));
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
double step_progress(const json_t *s, uint64_t world, uint64_t *est)
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
		table_free(&t);
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
		json_t *st;
		int64_t until;

		/* ckptd closes a ckptctl connection idle for ctl_idle_timeout_ms
		 * (5 min by default): long intervals connect for each frame */
		if (n > 0 && interval_s >= 60) {
			ctl_close(c);
			ctl_connect(c);
		}
		st = ctl_status_get(c);

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
		until = ckpt__now_ms() + (int64_t)(interval_s * 1000);
		while (!watch_stop && ckpt__now_ms() < until) {
			int64_t left = until - ckpt__now_ms();
			poll(NULL, 0, left > 200 ? 200 : (int)left);
		}
	}
	return 0;
}

int cmd_status(struct ctl *c, const struct ctl_opts *o)
{
	json_t *st;

	if (o->watch)
		return status_watch(c, o->json, o->interval_s, o->count);
	st = ctl_status_get(c);
	if (o->json)
		print_json(st);
	else
		status_render(stdout, st);
	json_decref(st);
	return 0;
}
