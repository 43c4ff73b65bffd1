/* sha.c - SHA-256 through OpenSSL EVP, with hex output. */
#include <errno.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "sha.h"

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
