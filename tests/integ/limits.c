/* limits.c - saves a rank at the daemon's configured limits and restores it
 * bit-exactly: the rule "anything a save accepts, restore returns".
 *
 *   limits save    -s SOCK -j JOB [--step S] [--blobs N] [--blob-bytes B]
 *                  [--tensors N] [--name-len L]
 *   limits restore -s SOCK -j JOB [--expect S] (same sizes) [--partial]
 *                  [--drop N]   (registers N fewer tensors than were saved
 *                                and N new ones: a partial restore)
 *
 * N tensors of 8 bytes each (U8 [8]) whose names are L bytes long (the
 * index, then padding), and N blobs of B bytes; every byte is a function of
 * (index, offset, step), so a restore checks them all.  restore prints
 * "restored step S tensors N blobs N bytes N missing N unexpected N".
 * Exit status: 0 ok, 1 a ckpt call failed, 3 data mismatch.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

static struct {
	const char *sock, *job;
	uint64_t step;
	int64_t expect;
	size_t blobs, blob_bytes, tensors, name_len, drop;
	int partial;
} o = { .step = 1, .expect = -1, .name_len = 16 };

static uint8_t byte_of(uint64_t kind, uint64_t idx, uint64_t off, uint64_t step)
{
	uint64_t x = (kind << 56) ^ (idx << 32) ^ (off * 0x9e3779b97f4a7c15ull) ^ step;

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return (uint8_t)(x ^ (x >> 31));
}

/* name of tensor i: "t<i>-" then 'x' up to name_len bytes */
static void tensor_name(size_t i, char *buf)
{
	int n = snprintf(buf, o.name_len + 1, "t%zu-", i);

	if ((size_t)n < o.name_len)
		memset(buf + n, 'x', o.name_len - (size_t)n);
	buf[o.name_len] = '\0';
}

static int die(ckpt_client *c, const char *what, int r)
{
	fprintf(stderr, "limits: %s: %s%s%s\n", what, ckpt_strerror(r),
		*ckpt_last_error(c) ? ": " : "", ckpt_last_error(c));
	return 1;
}

/* Register tensors [first, first + n) at base, filled for step (or zeroed). */
static int setup(ckpt_client *c, uint8_t *base, size_t first, size_t n, uint64_t step,
		 int fill)
{
	char *name = malloc(o.name_len + 1);
	int64_t shape[1] = { 8 };
	int r = 0;

	if (!name)
		return die(c, "malloc", -ENOMEM);
	for (size_t i = 0; i < n && r == 0; i++) {
		uint8_t *p = base + 8 * i;
		for (size_t b = 0; b < 8; b++)
			p[b] = fill ? byte_of(1, first + i, b, step) : 0;
		tensor_name(first + i, name);
		if ((r = ckpt_register(c, "model", name, p, CKPT_U8, 1, shape)) < 0)
			die(c, "ckpt_register", r);
	}
	free(name);
	return r < 0 ? 1 : 0;
}

static int do_save(ckpt_client *c)
{
	uint8_t *base = ckpt_alloc(c, 8 * o.tensors + 4096);
	uint8_t *blob = malloc(o.blob_bytes + 1);
	uint64_t ticket;
	int r;

	if (!base || !blob)
		return die(c, "ckpt_alloc", -ENOMEM);
	if (setup(c, base, 0, o.tensors, o.step, 1))
		return 1;
	for (size_t i = 0; i < o.blobs; i++) {
		char name[32];
		for (size_t b = 0; b < o.blob_bytes; b++)
			blob[b] = byte_of(2, i, b, o.step);
		snprintf(name, sizeof(name), "blob%04zu", i);
		if ((r = ckpt_put_blob(c, name, blob, o.blob_bytes)) < 0)
			return die(c, "ckpt_put_blob", r);
	}
	if ((r = ckpt_save(c, o.step, &ticket)) < 0)
		return die(c, "ckpt_save", r);
	if ((r = ckpt_wait(c, ticket, CKPT_COMMITTED, -1)) < 0)
		return die(c, "ckpt_wait", r);
	free(blob);
	printf("saved step %" PRIu64 " tensors %zu blobs %zu\n", o.step, o.tensors, o.blobs);
	return 0;
}

/* Tensor i's name as ckptd reports it: group "model", the right length,
 * and an index in [lo, hi) seen only once (seen[]). */
static int name_ok(const char *group, const char *name, size_t lo, size_t hi,
		   uint8_t *seen)
{
	char *want = malloc(o.name_len + 1);
	size_t i;
	int ok;

	if (!want || strcmp(group, "model") || sscanf(name, "t%zu-", &i) != 1 ||
	    i < lo || i >= hi || seen[i]) {
		free(want);
		return 0;
	}
	tensor_name(i, want);
	ok = !strcmp(name, want);
	seen[i] = 1;
	free(want);
	return ok;
}

/* The structured report: every left-out tensor named exactly once. */
static int check_report(ckpt_client *c, uint64_t got, size_t keep)
{
	struct ckpt_restore_info info;
	uint8_t *seen = calloc(o.tensors + o.drop + 1, 1);
	const char *g, *n;
	int r, bad = 0;

	if ((r = ckpt_restore_info(c, &info)) < 0)
		return die(c, "ckpt_restore_info", r);
	if (info.step != got || info.source != CKPT_FROM_DISK ||
	    info.bytes != 8 * keep + o.blobs * o.blob_bytes ||
	    info.n_missing != (int)o.drop || info.n_unexpected != (int)o.drop) {
		fprintf(stderr, "limits: restore info step %" PRIu64 " source %d bytes %"
			PRIu64 " missing %d unexpected %d\n", info.step, info.source,
			info.bytes, info.n_missing, info.n_unexpected);
		return 3;
	}
	for (int i = 0; i < info.n_missing; i++) {     /* registered, never saved */
		if ((r = ckpt_restore_missing(c, i, &g, &n)) < 0)
			return die(c, "ckpt_restore_missing", r);
		bad += !name_ok(g, n, o.tensors, o.tensors + o.drop, seen);
	}
	for (int i = 0; i < info.n_unexpected; i++) {  /* saved, not registered */
		if ((r = ckpt_restore_unexpected(c, i, &g, &n)) < 0)
			return die(c, "ckpt_restore_unexpected", r);
		bad += !name_ok(g, n, keep, o.tensors, seen);
	}
	if (ckpt_restore_missing(c, info.n_missing, &g, &n) != -ENOENT ||
	    ckpt_restore_unexpected(c, -1, &g, &n) != -ENOENT)
		bad++;
	free(seen);
	if (bad) {
		fprintf(stderr, "limits: %d tensor names wrong in the restore report\n", bad);
		return 3;
	}
	printf("restored step %" PRIu64 " tensors %zu blobs %zu bytes %" PRIu64
	       " missing %d unexpected %d\n", got, keep, o.blobs, info.bytes,
	       info.n_missing, info.n_unexpected);
	return 0;
}

static int do_restore(ckpt_client *c)
{
	size_t keep = o.tensors - o.drop, bad = 0;
	uint8_t *base = ckpt_alloc(c, 8 * (o.tensors + o.drop) + 4096);
	uint8_t *blob = malloc(o.blob_bytes + 1);
	uint64_t got;
	size_t len;
	int r;

	if (!base || !blob)
		return die(c, "ckpt_alloc", -ENOMEM);
	if (setup(c, base, 0, keep, 0, 0) ||
	    setup(c, base + 8 * keep, o.tensors, o.drop, 0, 0))   /* never saved */
		return 1;
	r = ckpt_restore(c, CKPT_LATEST, o.partial ? CKPT_PARTIAL : 0, &got);
	if (r < 0)
		return die(c, "ckpt_restore", r);
	if (o.expect >= 0 && got != (uint64_t)o.expect) {
		fprintf(stderr, "limits: restored step %" PRIu64 ", expected %" PRId64 "\n",
			got, o.expect);
		return 3;
	}
	for (size_t i = 0; i < keep; i++)
		for (size_t b = 0; b < 8; b++)
			bad += base[8 * i + b] != byte_of(1, i, b, got);
	for (size_t i = 0; i < o.blobs; i++) {
		char name[32];
		snprintf(name, sizeof(name), "blob%04zu", i);
		if ((r = ckpt_get_blob(c, name, blob, o.blob_bytes + 1, &len)) < 0)
			return die(c, "ckpt_get_blob", r);
		bad += len != o.blob_bytes;
		for (size_t b = 0; b < o.blob_bytes && len == o.blob_bytes; b++)
			bad += blob[b] != byte_of(2, i, b, got);
	}
	free(blob);
	if (bad) {
		fprintf(stderr, "limits: %zu bytes differ after the restore\n", bad);
		return 3;
	}
	return check_report(c, got, keep);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"sock", 1, 0, 's'}, {"job", 1, 0, 'j'}, {"step", 1, 0, 'S'},
		{"expect", 1, 0, 'e'}, {"blobs", 1, 0, 'b'}, {"blob-bytes", 1, 0, 'B'},
		{"tensors", 1, 0, 't'}, {"name-len", 1, 0, 'n'}, {"drop", 1, 0, 'd'},
		{"partial", 0, 0, 'p'}, {0, 0, 0, 0},
	};
	ckpt_client *c = NULL;
	const char *cmd;
	int opt, r;

	if (argc < 2) {
		fprintf(stderr, "usage: limits save|restore -s SOCK -j JOB ...\n");
		return 2;
	}
	cmd = argv[1];
	optind = 2;
	while ((opt = getopt_long(argc, argv, "s:j:", lo, NULL)) != -1) {
		switch (opt) {
		case 's': o.sock = optarg; break;
		case 'j': o.job = optarg; break;
		case 'S': o.step = strtoull(optarg, NULL, 0); break;
		case 'e': o.expect = strtoll(optarg, NULL, 0); break;
		case 'b': o.blobs = strtoull(optarg, NULL, 0); break;
		case 'B': o.blob_bytes = strtoull(optarg, NULL, 0); break;
		case 't': o.tensors = strtoull(optarg, NULL, 0); break;
		case 'n': o.name_len = strtoull(optarg, NULL, 0); break;
		case 'd': o.drop = strtoull(optarg, NULL, 0); break;
		case 'p': o.partial = 1; break;
		default: return 2;
		}
	}
	if (!o.job || o.name_len < 8 || o.drop > o.tensors) {
		fprintf(stderr, "limits: need -j JOB, --name-len >= 8, --drop <= --tensors\n");
		return 2;
	}
	if ((r = ckpt_connect(o.sock, o.job, 0, 1, &c)) < 0)
		return die(NULL, "ckpt_connect", r);
	if (!strcmp(cmd, "save"))
		r = do_save(c);
	else if (!strcmp(cmd, "restore"))
		r = do_restore(c);
	else
		r = 2;
	ckpt_close(c);
	return r;
}
