/* metrics.h - Prometheus metrics: counters and phase-latency histograms fed
 * by small hooks in step.c, gauges read from the server when scraped, and a
 * tiny HTTP/1.0-style server on 127.0.0.1:metrics_port (libuv TCP on the
 * loop thread; off when the port is 0).
 *
 * Everything here runs on the loop thread.  The state is one per process
 * (one ckptd per process), like the logger's. */
#ifndef CKPT_METRICS_H
#define CKPT_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct srv;

enum metrics_phase {
	METRICS_STAGED = 0,     /* SAVE accepted -> rank's data in the pool */
	METRICS_DURABLE,        /* SAVE accepted -> rank's files fsynced */
	METRICS_COMMITTED,      /* SAVE accepted -> step published */
	METRICS_NPHASES
};

/* Listen on 127.0.0.1:S->cfg.metrics_port when it is non-zero.  S is
 * borrowed until metrics_stop().  Returns 0 (also when off) or -errno; on
 * failure nothing listens. */
int  metrics_start(struct srv *S);
/* Close the listener and every scrape connection (the loop can then end).
 * Safe to call when not started.  Counters are kept. */
void metrics_stop(void);
/* SIGHUP: follow a changed metrics_port (stop, then start on the new one). */
int  metrics_reload(struct srv *S);

/* Hooks (loop thread). */
void metrics_observe(enum metrics_phase ph, uint64_t ns);
/* One rank's save published: its bytes, and of them those linked or
 * cloned from the step before (incremental saves) rather than written. */
void metrics_committed(uint64_t bytes, uint64_t linked, uint64_t cloned);
void metrics_failed(int err);             /* one step failed: -errno */

/* The exposition text.  Returns a new buffer (caller frees) or NULL. */
char *metrics_render(struct srv *S, size_t *len);

#endif
