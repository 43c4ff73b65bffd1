/* config.h - ckptd's configuration: one table drives parsing, defaults,
 * validation and `ckptd --help-config`.  JSON file (jansson); unknown keys
 * are errors.  Parse into a fresh struct, validate, then swap. */
#ifndef CKPT_CONFIG_H
#define CKPT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define CONFIG_STR_MAX 512

/* "remote": the object-store tier (remote.h); url "" = off. */
struct config_remote {
	char     url[CONFIG_STR_MAX];      /* s3://bucket[/prefix] */
	char     endpoint[256];            /* http(s)://host[:port] */
	char     region[64];
	char     credentials_file[CONFIG_STR_MAX];   /* "" = environment */
	char     profile[64];
	uint64_t part_bytes;               /* multipart above this size */
	uint32_t threads;                  /* files uploaded at once */
	uint32_t request_timeout_ms;       /* a request with no progress fails */
	uint32_t retries;                  /* per request, with backoff */
};

struct config {
	char     socket[108];          /* sun_path limit */
	uint32_t socket_mode;
	char     root[CONFIG_STR_MAX];
	uint64_t staging_bytes;
	uint64_t chunk_bytes;
	uint32_t keep_last;
	int      incremental;          /* link files that did not change */
	uint32_t incremental_max_shared;   /* steps one copy may serve; 0 = any */
	uint32_t stage_threads;
	uint32_t write_threads;
	uint32_t io_depth;
	int      direct_io;
	char     io_backend[16];       /* auto | io_uring | pwrite */
	char     file_digest[16];      /* xxh3-128 | sha256 (digest.h) */
	int      lock_pool;
	uint64_t memory_tier_bytes;    /* 0 = off */
	uint32_t step_deadline_ms;
	uint32_t drain_timeout_ms;
	uint32_t verify_threads;
	uint32_t max_clients;
	uint32_t max_clients_per_uid;
	uint32_t ctl_idle_timeout_ms;
	uint32_t max_message_bytes;
	uint32_t max_regions;
	uint32_t max_tensors;
	uint64_t max_blob_bytes;
	uint32_t max_blobs;
	uint64_t max_client_blob_bytes;
	uint64_t max_total_blob_bytes;
	uint32_t msg_timeout_ms;
	uint64_t max_reply_queue_bytes;
	char     log_level[16];
	char     cluster[16];          /* none | mpi */
	uint32_t coord_deadline_ms;
	uint32_t coord_peer_timeout_ms;
	uint32_t memory_replicas;      /* partner nodes holding a copy (0 = none) */
	uint32_t persist_every;        /* every Nth step to disk, others in RAM */
	uint32_t metrics_port;         /* 0 = off; loopback only */
	char     gpu[16];              /* auto | off */
	struct config_remote remote;
	uint32_t remote_every;         /* upload every Nth committed step */
	uint32_t remote_keep_last;     /* steps kept on the remote (0 = all) */
	uint64_t remote_max_bytes_per_s;   /* upload bandwidth, 0 = unlimited */
};

/* Defaults for every key. */
void config_defaults(struct config *c);

/* Parse a JSON document (a file's contents) over defaults into *out.
 * Returns 0, or -EINVAL with err naming the key and the problem. *out is
 * untouched on failure. */
int config_parse(const char *json, size_t len, struct config *out,
		 char *err, size_t errlen);
/* Read and parse a file. */
int config_load(const char *path, struct config *out, char *err, size_t errlen);

/* Describe what differs, "keep_last 3 -> 1, log_level info -> debug", into
 * buf (empty when nothing does; cut at buflen). */
void config_diff(const struct config *a, const struct config *b, char *buf,
		 size_t buflen);

/* The same for the keys that change only on restart (marked in the
 * table); returns how many differ (0: a reload may apply b). */
int config_diff_restart(const struct config *a, const struct config *b, char *buf,
			size_t buflen);

/* Print every key with its type, default and documentation. */
void config_print_help(void);

#endif
