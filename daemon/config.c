/* config.c - table-driven JSON configuration. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

enum cfg_type { CFG_STR, CFG_U32, CFG_U64, CFG_SIZE, CFG_BOOL, CFG_MODE, CFG_REMOTE };

struct cfg_key {
	const char   *key;
	enum cfg_type type;
	size_t        off;
	size_t        size;       /* for strings: buffer size */
	uint64_t      min, max;
	const char   *def;
	const char   *doc;
	const char   *choices;    /* for strings: "a|b|c" or NULL */
	int           restart;    /* RESTART: shapes what start-up built, a
				   * reload that changes it is rejected; or RELOAD */
};
#define RELOAD  0
#define RESTART 1

#define F(k) offsetof(struct config, k)
#define S(k) sizeof(((struct config *)0)->k)
#define GiB (1ull << 30)
#define MiB (1ull << 20)

static const struct cfg_key cfg_keys[] = {
	{"socket", CFG_STR, F(socket), S(socket), 1, 107, "/run/ckpt/ckptd.sock",
	 "Unix socket trainers and ckptctl connect to", NULL, RESTART},
	{"socket_mode", CFG_MODE, F(socket_mode), 0, 0, 0777, "0660",
	 "permissions of the socket (octal string); group = trainers", NULL, RELOAD},
	{"root", CFG_STR, F(root), S(root), 1, CONFIG_STR_MAX - 1, "/var/lib/ckpt",
	 "checkpoint root: <root>/<job>/iter_NNNNNNNNN/", NULL, RESTART},
	{"staging_bytes", CFG_SIZE, F(staging_bytes), 0, 4 * MiB, 1ull << 46, "1GiB",
	 "pinned staging pool; saves larger than it stream through it", NULL, RESTART},
	{"chunk_bytes", CFG_SIZE, F(chunk_bytes), 0, 64 << 10, 256 * MiB, "8MiB",
	 "staging chunk = unit of copy and of write (multiple of 4096)", NULL, RESTART},
	{"keep_last", CFG_U32, F(keep_last), 0, 0, 1000000, "3",
	 "committed checkpoints kept per job (0 = keep all)", NULL, RELOAD},
	{"incremental", CFG_BOOL, F(incremental), 0, 0, 1, "true",
	 "a file whose bytes did not change since the rank's newest committed step "
	 "is hard-linked to it instead of written again", NULL, RELOAD},
	{"incremental_max_shared", CFG_U32, F(incremental_max_shared), 0, 0, 1000000, "2",
	 "at most this many checkpoints (kept or in flight) share one copy of an "
	 "unchanged file; the next save writes it again.  Below keep_last, the kept "
	 "checkpoints hold two copies once more than this are kept (0 = no limit)",
	 NULL, RELOAD},
	{"memory_tier_bytes", CFG_SIZE, F(memory_tier_bytes), 0, 0, 1ull << 46, "0",
	 "RAM for the memory tier: each job's newest committed step, restored without "
	 "reading disk (0 = off)", NULL, RESTART},
	{"stage_threads", CFG_U32, F(stage_threads), 0, 1, 64, "2",
	 "threads copying trainer memory into the pool", NULL, RESTART},
	{"write_threads", CFG_U32, F(write_threads), 0, 1, 64, "2",
	 "threads writing and hashing files (one file each at a time)", NULL, RESTART},
	{"io_depth", CFG_U32, F(io_depth), 0, 1, 256, "4",
	 "writes in flight per writer thread", NULL, RESTART},
	{"direct_io", CFG_BOOL, F(direct_io), 0, 0, 1, "true",
	 "O_DIRECT writes where the file system allows", NULL, RESTART},
	{"file_digest", CFG_STR, F(file_digest), S(file_digest), 1, 15, "xxh3-128",
	 "each file's whole-content digest in the manifest: xxh3-128 (fast) or sha256 "
	 "(verify follows what each manifest says)", "xxh3-128|sha256", RELOAD},
	{"io_backend", CFG_STR, F(io_backend), S(io_backend), 1, 15, "auto",
	 "auto (io_uring, else pwrite), io_uring or pwrite", "auto|io_uring|pwrite", RESTART},
	{"lock_pool", CFG_BOOL, F(lock_pool), 0, 0, 1, "true",
	 "mlock the staging pool when permitted", NULL, RESTART},
	{"step_deadline_ms", CFG_U32, F(step_deadline_ms), 0, 100, 86400000, "600000",
	 "all ranks must ask to save a step within this time of the first", NULL, RELOAD},
	{"drain_timeout_ms", CFG_U32, F(drain_timeout_ms), 0, 0, 86400000, "300000",
	 "on SIGTERM, how long accepted saves may take to finish", NULL, RELOAD},
	{"verify_threads", CFG_U32, F(verify_threads), 0, 1, 64, "2",
	 "threads hashing files when a restore verifies a checkpoint", NULL, RELOAD},
	{"max_clients", CFG_U32, F(max_clients), 0, 1, 1000000, "1024",
	 "connections served at once; more are refused", NULL, RELOAD},
	{"max_clients_per_uid", CFG_U32, F(max_clients_per_uid), 0, 1, 1000000, "256",
	 "connections one user (uid) may hold at once, so that no user takes "
	 "every max_clients slot; root is exempt", NULL, RELOAD},
	{"ctl_idle_timeout_ms", CFG_U32, F(ctl_idle_timeout_ms), 0, 1000, 86400000, "300000",
	 "a ckptctl connection with no request in flight is closed after this "
	 "long without one", NULL, RELOAD},
	{"max_message_bytes", CFG_U32, F(max_message_bytes), 0, 4096, 16 << 20, "16MiB",
	 "largest protocol message accepted", NULL, RELOAD},
	{"max_regions", CFG_U32, F(max_regions), 0, 1, 1000000, "4096",
	 "shared-memory regions per client", NULL, RELOAD},
	{"max_tensors", CFG_U32, F(max_tensors), 0, 1, 10000000, "100000",
	 "registered tensors per client", NULL, RELOAD},
	{"max_blob_bytes", CFG_SIZE, F(max_blob_bytes), 0, 1, 16 * MiB, "4MiB",
	 "largest blob", NULL, RELOAD},
	{"max_blobs", CFG_U32, F(max_blobs), 0, 1, 10000, "64",
	 "blobs per client", NULL, RELOAD},
	{"max_client_blob_bytes", CFG_SIZE, F(max_client_blob_bytes), 0, 1, 1ull << 40, "256MiB",
	 "bytes of blobs one client may hold", NULL, RELOAD},
	{"max_total_blob_bytes", CFG_SIZE, F(max_total_blob_bytes), 0, 1, 1ull << 40, "1GiB",
	 "bytes of blobs all clients together may hold", NULL, RELOAD},
	{"max_reply_queue_bytes", CFG_SIZE, F(max_reply_queue_bytes), 0, 1 * MiB, 1ull << 40,
	 "256MiB", "replies waiting for slow clients, all together; above it the "
	 "client holding the most is dropped", NULL, RELOAD},
	{"msg_timeout_ms", CFG_U32, F(msg_timeout_ms), 0, 100, 3600000, "30000",
	 "a started message must be complete within this time", NULL, RELOAD},
	{"log_level", CFG_STR, F(log_level), S(log_level), 1, 15, "info",
	 "error, warn, info or debug", "error|warn|info|debug", RELOAD},
	{"cluster", CFG_STR, F(cluster), S(cluster), 1, 15, "none",
	 "none (one node) or mpi (one ckptd per node under mpirun)", "none|mpi", RESTART},
	{"coord_deadline_ms", CFG_U32, F(coord_deadline_ms), 0, 100, 86400000, "600000",
	 "multi-node: how long the coordinator waits for every node", NULL, RESTART},
	{"coord_peer_timeout_ms", CFG_U32, F(coord_peer_timeout_ms), 0, 100, 86400000, "30000",
	 "multi-node: a node silent (no heartbeat) this long is lost", NULL, RESTART},
	{"memory_replicas", CFG_U32, F(memory_replicas), 0, 0, 16, "0",
	 "multi-node: partner nodes (n+1..n+K) that keep each node's saves in RAM "
	 "(memory tier), phase REPLICATED", NULL, RESTART},
	{"persist_every", CFG_U32, F(persist_every), 0, 1, 1000000, "1",
	 "multi-node: write every Nth step to disk; the steps between commit in RAM "
	 "only (memory level, needs the memory tier)", NULL, RESTART},
	{"metrics_port", CFG_U32, F(metrics_port), 0, 0, 65535, "0",
	 "Prometheus metrics on 127.0.0.1:PORT (0 = off)", NULL, RELOAD},
	{"gpu", CFG_STR, F(gpu), S(gpu), 1, 15, "auto",
	 "auto (use CUDA when a GPU is present) or off", "auto|off", RESTART},
	{"remote", CFG_REMOTE, F(remote), 0, 0, 0, "null",
	 "object storage: {\"url\": \"s3://bucket/prefix\", \"endpoint\", \"region\", "
	 "\"credentials_file\", \"profile\", \"part_size\", \"threads\", "
	 "\"request_timeout_ms\", \"retries\"} (off by default)", NULL, RESTART},
	{"remote_every", CFG_U32, F(remote_every), 0, 1, 1000000, "1",
	 "upload every Nth committed step of a job",
	 NULL, RELOAD},
	{"remote_keep_last", CFG_U32, F(remote_keep_last), 0, 0, 1000000, "0",
	 "steps kept per job on the remote (0 = keep all)", NULL, RELOAD},
	{"remote_max_bytes_per_s", CFG_SIZE, F(remote_max_bytes_per_s), 0, 0, 1ull << 40,
	 "0", "upload bandwidth, all uploads together (0 = unlimited)", NULL, RELOAD},
};
#define NKEYS (sizeof(cfg_keys) / sizeof(cfg_keys[0]))

/* "1GiB", "512M", "4096" -> bytes.  0 or -EINVAL. */
static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mul = 1;
	if (errno || end == s || *s == '-')
		return -EINVAL;
	if (*end) {
		static const struct { const char *sfx; uint64_t mul; } t[] = {
			{"K", 1ull << 10}, {"KiB", 1ull << 10}, {"M", 1ull << 20},
			{"MiB", 1ull << 20}, {"G", 1ull << 30}, {"GiB", 1ull << 30},
			{"T", 1ull << 40}, {"TiB", 1ull << 40},
		};
		size_t i;
		for (i = 0; i < sizeof(t) / sizeof(t[0]); i++)
			if (strcmp(end, t[i].sfx) == 0)
				break;
		if (i == sizeof(t) / sizeof(t[0]))
			return -EINVAL;
		mul = t[i].mul;
	}
	if (v > UINT64_MAX / mul)
		return -EINVAL;
	*out = v * mul;
	return 0;
}

static int choice_ok(const char *choices, const char *v)
{
	size_t n = strlen(v);
	for (const char *p = choices; p; p = strchr(p, '|')) {
		if (*p == '|')
			p++;
		if (strncmp(p, v, n) == 0 && (p[n] == '|' || p[n] == '\0'))
			return 1;
	}
	return 0;
}

/* The remote's URL, endpoint and region are well-formed: "s3://" + a DNS
 * bucket name + an optional prefix of path-safe components. */
static int remote_validate(struct config_remote *r, char *err, size_t errlen)
{
	const char *b = r->url + 5, *slash;
	size_t blen, n;

	if (strncmp(r->url, "s3://", 5) != 0) {
		snprintf(err, errlen, "remote.url: expected \"s3://bucket[/prefix]\"");
		return -EINVAL;
	}
	slash = strchr(b, '/');
	blen = slash ? (size_t)(slash - b) : strlen(b);
	if (blen < 3 || blen > 63 || strspn(b, "abcdefghijklmnopqrstuvwxyz0123456789.-") < blen) {
		snprintf(err, errlen, "remote.url: the bucket must be 3-63 characters of a-z, "
			 "0-9, '.' and '-'");
		return -EINVAL;
	}
	if (slash) {
		const char *p = slash + 1;
		n = strlen(p);
		while (n && p[n - 1] == '/')      /* "s3://b/ckpt/" = "s3://b/ckpt" */
			r->url[(size_t)(p - r->url) + --n] = '\0';
		if (strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-/") < n ||
		    strstr(p, "//") || p[0] == '/' || strstr(p, "/./") || strstr(p, "/../") ||
		    strncmp(p, "./", 2) == 0 || strncmp(p, "../", 3) == 0) {
			snprintf(err, errlen, "remote.url: the prefix must be path components of "
				 "A-Z, a-z, 0-9, '_', '.' and '-'");
			return -EINVAL;
		}
	}
	if (!r->region[0] || strspn(r->region, "abcdefghijklmnopqrstuvwxyz0123456789-") <
	    strlen(r->region)) {
		snprintf(err, errlen, "remote.region: expected a region name like us-east-1");
		return -EINVAL;
	}
	if (!r->endpoint[0])
		snprintf(r->endpoint, sizeof(r->endpoint), "https://s3.%s.amazonaws.com", r->region);
	n = strlen(r->endpoint);
	while (n && r->endpoint[n - 1] == '/')
		r->endpoint[--n] = '\0';
	if ((strncmp(r->endpoint, "http://", 7) != 0 && strncmp(r->endpoint, "https://", 8) != 0) ||
	    strchr(strchr(r->endpoint, ':') + 3, '/') || strpbrk(r->endpoint, " ?#@")) {
		snprintf(err, errlen, "remote.endpoint: expected http(s)://host[:port]");
		return -EINVAL;
	}
	if (r->credentials_file[0] && r->credentials_file[0] != '/') {
		snprintf(err, errlen, "remote.credentials_file: must be an absolute path");
		return -EINVAL;
	}
	return 0;
}

/* "remote": an object of its own small table; NULL (the default) = off. */
static int remote_set(json_t *v, struct config_remote *r, char *err, size_t errlen)
{
	static const struct { const char *key; size_t off, size; } strs[] = {
		{"url", offsetof(struct config_remote, url), sizeof(r->url)},
		{"endpoint", offsetof(struct config_remote, endpoint), sizeof(r->endpoint)},
		{"region", offsetof(struct config_remote, region), sizeof(r->region)},
		{"credentials_file", offsetof(struct config_remote, credentials_file),
		 sizeof(r->credentials_file)},
		{"profile", offsetof(struct config_remote, profile), sizeof(r->profile)},
	};
	static const struct { const char *key; size_t off; uint64_t min, max; } nums[] = {
		{"part_size", offsetof(struct config_remote, part_bytes), 5 * MiB, 5 * GiB},
		{"threads", offsetof(struct config_remote, threads), 1, 64},
		{"request_timeout_ms", offsetof(struct config_remote, request_timeout_ms),
		 100, 3600000},
		{"retries", offsetof(struct config_remote, retries), 0, 100},
	};
	const char *key;
	json_t *e;

	memset(r, 0, sizeof(*r));
	strcpy(r->region, "us-east-1");
	strcpy(r->profile, "default");
	r->part_bytes = 64 * MiB;
	r->threads = 4;
	r->request_timeout_ms = 30000;
	r->retries = 5;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v)) {
		snprintf(err, errlen, "remote: wrong type (expected an object with \"url\")");
		return -EINVAL;
	}
	json_object_foreach(v, key, e) {
		size_t i;
		for (i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
			if (strcmp(key, strs[i].key) == 0)
				break;
		if (i < sizeof(strs) / sizeof(strs[0])) {
			if (!json_is_string(e) || strlen(json_string_value(e)) >= strs[i].size) {
				snprintf(err, errlen, "remote.%s: expected a string of at most "
					 "%zu characters", key, strs[i].size - 1);
				return -EINVAL;
			}
			strcpy((char *)r + strs[i].off, json_string_value(e));
			continue;
		}
		for (i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
			if (strcmp(key, nums[i].key) == 0)
				break;
		if (i == sizeof(nums) / sizeof(nums[0])) {
			snprintf(err, errlen, "remote: unknown key \"%s\"", key);
			return -EINVAL;
		}
		uint64_t n = 0;
		int neg = json_is_integer(e) && json_integer_value(e) < 0;
		if (json_is_integer(e) && !neg)
			n = (uint64_t)json_integer_value(e);
		else if (!neg && (!json_is_string(e) || parse_size(json_string_value(e), &n) < 0)) {
			snprintf(err, errlen, "remote.%s: expected a number", key);
			return -EINVAL;
		}
		if (neg || n < nums[i].min || n > nums[i].max) {
			snprintf(err, errlen, "remote.%s: must be between %llu and %llu", key,
				 (unsigned long long)nums[i].min, (unsigned long long)nums[i].max);
			return -EINVAL;
		}
		if (nums[i].off == offsetof(struct config_remote, part_bytes))
			r->part_bytes = n;
		else
			*(uint32_t *)((char *)r + nums[i].off) = (uint32_t)n;
	}
	return remote_validate(r, err, errlen);
}

/* Set one key from a JSON value (or from its default text when v is NULL). */
static int cfg_set(const struct cfg_key *k, json_t *v, const char *text,
		   struct config *c, char *err, size_t errlen)
{
	char *dst = (char *)c + k->off;
	uint64_t n = 0;

	switch (k->type) {
	case CFG_REMOTE:
		return remote_set(v, (struct config_remote *)dst, err, errlen);
	case CFG_STR:
		if (v && !json_is_string(v))
			goto bad_type;
		if (v)
			text = json_string_value(v);
		if (strlen(text) < k->min || strlen(text) > k->max ||
		    strlen(text) >= k->size) {
			snprintf(err, errlen, "%s: length must be %llu..%llu", k->key,
				 (unsigned long long)k->min, (unsigned long long)k->max);
			return -EINVAL;
		}
		if (k->choices && !choice_ok(k->choices, text)) {
			snprintf(err, errlen, "%s: \"%s\" is not one of %s", k->key,
				 text, k->choices);
			return -EINVAL;
		}
		strcpy(dst, text);
		return 0;
	case CFG_BOOL:
		if (v && !json_is_boolean(v))
			goto bad_type;
		*(int *)dst = v ? json_is_true(v) : strcmp(text, "true") == 0;
		return 0;
	case CFG_MODE:
		if (v && !json_is_string(v))
			goto bad_type;
		if (v)
			text = json_string_value(v);
		{
			char *end;
			unsigned long m = strtoul(text, &end, 8);
			if (*text == '\0' || *end || m > k->max) {
				snprintf(err, errlen, "%s: \"%s\" is not an octal mode",
					 k->key, text);
				return -EINVAL;
			}
			*(uint32_t *)dst = (uint32_t)m;
		}
		return 0;
	case CFG_U32:
	case CFG_U64:
	case CFG_SIZE:
		if (v && json_is_integer(v)) {
			if (json_integer_value(v) < 0)
				goto bad_range;
			n = (uint64_t)json_integer_value(v);
		} else if ((v && json_is_string(v) && k->type != CFG_U32) || !v) {
			if (parse_size(v ? json_string_value(v) : text, &n) < 0) {
				snprintf(err, errlen, "%s: cannot read \"%s\" as a size "
					 "(like 4096, 64MiB, 2GiB)", k->key,
					 v ? json_string_value(v) : text);
				return -EINVAL;
			}
		} else if (v && json_is_string(v) && parse_size(json_string_value(v), &n) == 0) {
			/* sizes like "16MiB" are fine for u32 byte counts too */
		} else {
			goto bad_type;
		}
		if (n < k->min || n > k->max)
			goto bad_range;
		if (k->type == CFG_U64 || k->type == CFG_SIZE)
			*(uint64_t *)dst = n;
		else
			*(uint32_t *)dst = (uint32_t)n;
		return 0;
	}
bad_type:
	snprintf(err, errlen, "%s: wrong type (expected %s)", k->key,
		 k->type == CFG_STR || k->type == CFG_MODE ? "a string" :
		 k->type == CFG_BOOL ? "true or false" : "a number");
	return -EINVAL;
bad_range:
	snprintf(err, errlen, "%s: must be between %llu and %llu", k->key,
		 (unsigned long long)k->min, (unsigned long long)k->max);
	return -EINVAL;
}

void config_defaults(struct config *c)
{
	char err[256];
	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < NKEYS; i++)
		if (cfg_set(&cfg_keys[i], NULL, cfg_keys[i].def, c, err, sizeof(err)) < 0)
			fatalx("built-in default broken: %s", err);
}

/* Cross-key rules that the table cannot express. */
static int config_validate(struct config *c, char *err, size_t errlen)
{
	if (c->chunk_bytes % 4096) {
		snprintf(err, errlen, "chunk_bytes: must be a multiple of 4096");
		return -EINVAL;
	}
	if (c->staging_bytes < c->chunk_bytes * 2) {
		snprintf(err, errlen, "staging_bytes: must hold at least two chunks (%llu bytes)",
			 (unsigned long long)c->chunk_bytes * 2);
		return -EINVAL;
	}
	/* a pool larger than the machine could never be backed: refused
	 * here, not by the OOM killer at the first large save */
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	uint64_t ram = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;
	if (ram && c->staging_bytes > ram) {
		snprintf(err, errlen, "staging_bytes: %llu MiB is more than this machine's "
			 "memory (%llu MiB); the pool lives in RAM",
			 (unsigned long long)(c->staging_bytes >> 20),
			 (unsigned long long)(ram >> 20));
		return -EINVAL;
	}
	if (ram && c->memory_tier_bytes > ram) {   /* a typo ("64TiB") likewise */
		snprintf(err, errlen, "memory_tier_bytes: %llu MiB is more than this machine's "
			 "memory (%llu MiB); the tier lives in RAM",
			 (unsigned long long)(c->memory_tier_bytes >> 20),
			 (unsigned long long)(ram >> 20));
		return -EINVAL;
	}
	if (c->root[0] != '/' || c->socket[0] != '/') {
		snprintf(err, errlen, "%s: must be an absolute path",
			 c->root[0] != '/' ? "root" : "socket");
		return -EINVAL;
	}
	/* the memory levels live in the memory tier, across the nodes of a
	 * cluster: without them a memory-level step could not be restored */
	if ((c->memory_replicas || c->persist_every > 1) && strcmp(c->cluster, "mpi")) {
		snprintf(err, errlen, "%s: needs \"cluster\": \"mpi\" (replicas and memory-level "
			 "steps live on partner nodes)", c->memory_replicas ? "memory_replicas" :
			 "persist_every");
		return -EINVAL;
	}
	if ((c->memory_replicas || c->persist_every > 1) && !c->memory_tier_bytes) {
		snprintf(err, errlen, "%s: needs the memory tier (memory_tier_bytes > 0)",
			 c->memory_replicas ? "memory_replicas" : "persist_every");
		return -EINVAL;
	}
	if (log_level_parse(c->log_level) < 0) {
		snprintf(err, errlen, "log_level: unknown level");
		return -EINVAL;
	}
	return 0;
}

int config_parse(const char *json, size_t len, struct config *out,
		 char *err, size_t errlen)
{
	struct config c;
	json_error_t jerr;
	json_t *root, *v;
	const char *key;
	int r = -EINVAL;

	config_defaults(&c);
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		snprintf(err, errlen, "line %d column %d: %s", jerr.line, jerr.column,
			 jerr.text);
		return -EINVAL;
	}
	if (!json_is_object(root)) {
		snprintf(err, errlen, "the configuration must be a JSON object");
		goto out;
	}
	json_object_foreach(root, key, v) {
		size_t i;
		if (key[0] == '_')      /* "_comment" and friends */
			continue;
		for (i = 0; i < NKEYS; i++)
			if (strcmp(key, cfg_keys[i].key) == 0)
				break;
		if (i == NKEYS) {
			snprintf(err, errlen, "unknown key \"%s\"", key);
			goto out;
		}
		if (cfg_set(&cfg_keys[i], v, NULL, &c, err, errlen) < 0)
			goto out;
	}
	if (config_validate(&c, err, errlen) < 0)
		goto out;
	*out = c;
	r = 0;
out:
	json_decref(root);
	return r;
}

int config_load(const char *path, struct config *out, char *err, size_t errlen)
{
	struct stat st;
	char *buf;
	ssize_t n;
	int fd, r;

	/* O_NONBLOCK: a FIFO put there would block the open (a reload on the
	 * loop, ckptd -n) until something wrote into it */
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
		return r;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 20)) {
		snprintf(err, errlen, "'%s': not a regular file of at most 1 MiB", path);
		close(fd);
		return -EINVAL;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	n = read(fd, buf, (size_t)st.st_size);
	close(fd);
	if (n != st.st_size) {
		snprintf(err, errlen, "cannot read '%s'", path);
		free(buf);
		return -EIO;
	}
	r = config_parse(buf, (size_t)n, out, err, errlen);
	free(buf);
	return r;
}

static void cfg_format(const struct cfg_key *k, const struct config *c, char *buf,
		       size_t len)
{
	const char *p = (const char *)c + k->off;

	switch (k->type) {
	case CFG_STR:  snprintf(buf, len, "%s", p); break;
	case CFG_BOOL: snprintf(buf, len, "%s", *(const int *)p ? "true" : "false"); break;
	case CFG_MODE: snprintf(buf, len, "%04o", *(const uint32_t *)p); break;
	case CFG_U32:  snprintf(buf, len, "%u", *(const uint32_t *)p); break;
	case CFG_U64:
	case CFG_SIZE: snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)p); break;
	case CFG_REMOTE: {
		const struct config_remote *r = (const void *)p;
		snprintf(buf, len, "%s", r->url[0] ? r->url : "off");
		if (r->url[0])     /* any change is one (never the credentials) */
			snprintf(buf + strlen(buf), len - strlen(buf), " %s %s %s/%s %llu %u %u %u",
				 r->endpoint, r->region, r->credentials_file, r->profile,
				 (unsigned long long)r->part_bytes, r->threads,
				 r->request_timeout_ms, r->retries);
		break;
	}
	}
}

static int diff(const struct config *a, const struct config *b, char *buf,
		size_t buflen, int restart_only)
{
	size_t n = 0;
	int count = 0;

	if (buflen)
		buf[0] = '\0';
	for (size_t i = 0; i < NKEYS; i++) {
		char va[CONFIG_STR_MAX], vb[CONFIG_STR_MAX];
		if (restart_only && !cfg_keys[i].restart)
			continue;
		cfg_format(&cfg_keys[i], a, va, sizeof(va));
		cfg_format(&cfg_keys[i], b, vb, sizeof(vb));
		if (strcmp(va, vb) == 0)
			continue;
		count++;
		if (n < buflen)
			n += (size_t)snprintf(buf + n, buflen - n, "%s%s %s -> %s",
					      n ? ", " : "", cfg_keys[i].key, va, vb);
	}
	return count;
}

void config_diff(const struct config *a, const struct config *b, char *buf,
		 size_t buflen)
{
	diff(a, b, buf, buflen, 0);
}

int config_diff_restart(const struct config *a, const struct config *b, char *buf,
			size_t buflen)
{
	return diff(a, b, buf, buflen, 1);
}

void config_print_help(void)
{
	int w = 0;

	for (size_t i = 0; i < NKEYS; i++)          /* the longest key */
		if ((int)strlen(cfg_keys[i].key) > w)
			w = (int)strlen(cfg_keys[i].key);
	for (size_t i = 0; i < NKEYS; i++)
		printf("  %-*s default %-22s %s%s\n", w, cfg_keys[i].key, cfg_keys[i].def,
		       cfg_keys[i].doc, cfg_keys[i].restart ? " (restart)" : "");
}
