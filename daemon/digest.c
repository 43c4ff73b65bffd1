/* digest.c - a file's digest, SHA-256 or XXH3-128, behind one table. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "csum.h"
#include "digest.h"

/* Large reads keep the syscall count low on multi-GiB shards. */
#define DIGEST_BUF (8u << 20)

static const struct {
	const char *name, *key;
	size_t      hex_len;
} algs[DIGEST_NALGS] = {
	[DIGEST_SHA256]   = { "sha256",   "sha256",   SHA_HEX_LEN },
	[DIGEST_XXH3_128] = { "xxh3-128", "xxh3_128", 32 },
};

const char *digest_name(int alg)  { return algs[alg].name; }
const char *digest_key(int alg)   { return algs[alg].key; }
size_t digest_hex_len(int alg)    { return algs[alg].hex_len; }

int digest_by_name(const char *name)
{
	for (int a = 0; name && a < DIGEST_NALGS; a++)
		if (strcmp(name, algs[a].name) == 0)
			return a;
	return -EINVAL;
}

int digest_by_key(const char *key)
{
	for (int a = 0; key && a < DIGEST_NALGS; a++)
		if (strcmp(key, algs[a].key) == 0)
			return a;
	return -EINVAL;
}

int digest_valid(const struct digest *d)
{
	size_t n;

	if (!d || d->alg < 0 || d->alg >= DIGEST_NALGS)
		return 0;
	n = algs[d->alg].hex_len;
	for (size_t i = 0; i < n; i++)
		if (!((d->hex[i] >= '0' && d->hex[i] <= '9') ||
		      (d->hex[i] >= 'a' && d->hex[i] <= 'f')))
			return 0;
	return d->hex[n] == '\0';
}

int digest_eq(const struct digest *a, const struct digest *b)
{
	return a->alg == b->alg && strcmp(a->hex, b->hex) == 0;
}

int digest_init(struct digest_ctx *c, int alg)
{
	struct sha_ctx s;
	int r;

	if (!c || alg < 0 || alg >= DIGEST_NALGS)
		return -EINVAL;
	if (alg == DIGEST_SHA256) {
		if ((r = sha_init(&s)) < 0)
			return r;
		c->st = s.md;
	} else {
		XXH3_state_t *x = XXH3_createState();
		if (!x)
			return -ENOMEM;
		XXH3_128bits_reset(x);
		c->st = x;
	}
	c->alg = alg;
	return 0;
}

void digest_update(struct digest_ctx *c, const void *data, size_t len)
{
	struct sha_ctx s = { c->st };

	if (!len)
		return;
	if (c->alg == DIGEST_SHA256)
		sha_update(&s, data, len);
	else
		XXH3_128bits_update(c->st, data, len);   /* fails only on NULL */
}

void digest_final(struct digest_ctx *c, struct digest *out)
{
	static const char digits[] = "0123456789abcdef";
	struct sha_ctx s = { c->st };
	XXH128_canonical_t can;

	out->alg = c->alg;
	if (c->alg == DIGEST_SHA256) {
		sha_final_hex(&s, out->hex);        /* releases it */
		c->st = NULL;
		return;
	}
	XXH128_canonicalFromHash(&can, XXH3_128bits_digest(c->st));
	for (size_t i = 0; i < sizeof(can.digest); i++) {
		out->hex[2 * i] = digits[can.digest[i] >> 4];
		out->hex[2 * i + 1] = digits[can.digest[i] & 15];
	}
	out->hex[2 * sizeof(can.digest)] = '\0';
	digest_release(c);
}

void digest_range(const void *data, size_t len, struct range_hash *out)
{
	XXH128_hash_t h = XXH3_128bits(data, len);

	out->lo = h.low64;
	out->hi = h.high64;
}

int range_hash_eq(const struct range_hash *a, const struct range_hash *b)
{
	return a->lo == b->lo && a->hi == b->hi;
}

void digest_release(struct digest_ctx *c)
{
	struct sha_ctx s;

	if (!c || !c->st)
		return;
	if (c->alg == DIGEST_SHA256) {
		s.md = c->st;
		sha_release(&s);
	} else {
		XXH3_freeState(c->st);
	}
	c->st = NULL;
}

int digest_fd_csum(int fd, int alg, struct digest *out, uint64_t *size,
		   struct csum_stream *cs)
{
	struct digest_ctx c = { 0 };
	uint64_t total = 0;
	uint8_t *buf;
	ssize_t r;
	int ret;

	if (fd < 0 || !out || !size)
		return -EINVAL;
	buf = malloc(DIGEST_BUF);
	if (!buf)
		return -ENOMEM;
	if ((ret = digest_init(&c, alg)) < 0)
		goto out_free_buf;
	for (;;) {
		r = read(fd, buf, DIGEST_BUF);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			digest_release(&c);
			goto out_free_buf;
		}
		if (r == 0)
			break;
		digest_update(&c, buf, (size_t)r);
		if (cs)
			csum_stream_update(cs, buf, (size_t)r);
		total += (uint64_t)r;
	}
	digest_final(&c, out);
	*size = total;
	ret = 0;
out_free_buf:
	free(buf);
	return ret;
}

int digest_file(int dirfd, const char *name, int alg, struct digest *out,
		uint64_t *size)
{
	struct stat st;
	int fd, ret;

	if (!name || !out || !size)
		return -EINVAL;
	/* O_NONBLOCK: a FIFO planted in place of a file cannot hang us */
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		goto out_close;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	ret = digest_fd_csum(fd, alg, out, size, NULL);
out_close:
	close(fd);
	return ret;
}
