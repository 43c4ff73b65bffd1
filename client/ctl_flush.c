/* ctl_flush.c - `ckptctl flush`: ask ckptd to finish every accepted save
 * and wait for its answer, drawing progress from STATUS polled on a second
 * connection.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

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
	int64_t now = ckpt__now_ms();

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

int cmd_flush(struct ctl *c, const struct ctl_opts *o)
{
	const char *job = o->job;
	double timeout_s = o->timeout_s;
	bool as_json = o->json;
	int64_t ms = (int64_t)(timeout_s * 1000);
	int64_t deadline = ckpt__now_ms() + ms + 30 * 1000;
	struct fl_progress p = { .t0 = ckpt__now_ms() };
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
		st = ctl_status_get(&mon);
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
		int64_t next = ckpt__now_ms() + (progress ? 200 : 1000 * 1000);
		json_t *st;

		if (next > deadline)
			next = deadline;
		if (ctl_wait(c, PROTO_FLUSH, id, next, &rep))
			break;
		if (ckpt__now_ms() >= deadline)
			die(EXIT_FAIL, "ckptd did not answer FLUSH in time");
		if (!progress)
			continue;
		st = ctl_status_get(&mon);
		fl_update(&p, st);
		json_decref(st);
		fl_draw(&p, false);
	}
	if (progress) {
		json_t *st = ctl_status_get(&mon);

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
