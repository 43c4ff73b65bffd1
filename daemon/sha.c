/* sha.c - SHA-256 through OpenSSL EVP, with hex output. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "csum.h"
#include "sha.h"

/* Large reads keep the syscall count low on multi-GiB shards. */
#define SHA_BUF (8u << 20)

void sha_setup(void)
{
	OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
}

int sha_init(struct sha_ctx *s)
{
	EVP_MD_CTX *c;

	if (!s)
		return -EINVAL;
	c = EVP_MD_CTX_new();
	if (!c)
		return -ENOMEM;
	if (EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(c);
		return -ENOMEM;
	}
	s->md = c;
	return 0;
}

void sha_update(struct sha_ctx *s, const void *data, size_t len)
{
	/* SHA-256 updates cannot fail once the context is initialised. */
	if (len)
		EVP_DigestUpdate(s->md, data, len);
}

void sha_final_hex(struct sha_ctx *s, char hex[SHA_HEX_LEN + 1])
{
	static const char digits[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	EVP_DigestFinal_ex(s->md, md, &n);
	for (unsigned int i = 0; i < n && i < SHA_HEX_LEN / 2; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 15];
	}
	hex[SHA_HEX_LEN] = '\0';
	sha_release(s);
}

void sha_release(struct sha_ctx *s)
{
	if (!s)
		return;
	EVP_MD_CTX_free(s->md);   /* NULL-safe */
	s->md = NULL;
}

int sha_fd(int fd, char hex[SHA_HEX_LEN + 1], uint64_t *size)
{
	return sha_fd_csum(fd, hex, size, NULL);
}

int sha_fd_csum(int fd, char hex[SHA_HEX_LEN + 1], uint64_t *size,
		struct csum_stream *cs)
{
	struct sha_ctx s;
	uint64_t total = 0;
	uint8_t *buf;
	ssize_t r;
	int ret;

	if (fd < 0 || !hex || !size)
		return -EINVAL;
	buf = malloc(SHA_BUF);
	if (!buf)
		return -ENOMEM;
	ret = sha_init(&s);
	if (ret < 0)
		goto out_free_buf;
	for (;;) {
		r = read(fd, buf, SHA_BUF);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			sha_release(&s);
			goto out_free_buf;
		}
		if (r == 0)
			break;
		sha_update(&s, buf, (size_t)r);
		if (cs)
			csum_stream_update(cs, buf, (size_t)r);
		total += (uint64_t)r;
	}
	sha_final_hex(&s, hex);
	*size = total;
	ret = 0;
out_free_buf:
	free(buf);
	return ret;
}

int sha_file(int dirfd, const char *name, char hex[SHA_HEX_LEN + 1],
	     uint64_t *size)
{
	struct stat st;
	int fd, ret;

	if (!name || !hex || !size)
		return -EINVAL;
	/* O_NONBLOCK so a FIFO planted in place of a file cannot hang us;
	 * it has no effect on regular files. */
	fd = openat(dirfd, name,
		    O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
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
	ret = sha_fd(fd, hex, size);
out_close:
	close(fd);
	return ret;
}
