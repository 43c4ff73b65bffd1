/* sha.h - SHA-256 through OpenSSL EVP, with hex output. */
#ifndef CKPT_SHA_H
#define CKPT_SHA_H

#include <stddef.h>
#include <stdint.h>

#define SHA_HEX_LEN 64

struct sha_ctx { void *md; };       /* EVP_MD_CTX */

/* Once, before threads hash: OpenSSL without its exit-time cleanup, which
 * would pull the digests from under threads still hashing at exit(). */
void sha_setup(void);
int  sha_init(struct sha_ctx *s);   /* 0 or -ENOMEM */
void sha_update(struct sha_ctx *s, const void *data, size_t len);
/* Writes 64 lowercase hex chars + NUL into hex[65]; releases the context. */
void sha_final_hex(struct sha_ctx *s, char hex[SHA_HEX_LEN + 1]);
void sha_release(struct sha_ctx *s);   /* for abandoned contexts; NULL-safe */

#endif
