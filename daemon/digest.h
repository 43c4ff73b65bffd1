/* digest.h - a file's whole-content digest, as its manifest entry records
 * it: SHA-256 (formats 1 and 2, and on request) or XXH3-128 (the default
 * from format 3: "file_digest" in ckptd.json).  One interface, one table;
 * which algorithm a file has is the manifest's to say, never the
 * config's, so every reader follows the manifest.
 *
 * XXH3-128 runs at ~13 GB/s per core on hashed-while-cached blocks here
 * (Debian's libxxhash), SHA-256 at ~1.4: at node write speed (26 GB/s)
 * SHA-256 alone would need ~18 cores, XXH3-128 two.  Both catch accidental
 * damage (with the chunk CRC32Cs, csum.h); neither is a defence against
 * someone who can write the manifest, so nothing is lost against the
 * threat the digest is for.  The hex form of XXH3-128 is its canonical
 * (big-endian) one, what `xxh128sum` and Python's xxhash print. */
#ifndef CKPT_DIGEST_H
#define CKPT_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "sha.h"

/* SHA-256 is 0: a zeroed entry, and anything written before format 3,
 * means SHA-256. */
enum digest_alg { DIGEST_SHA256 = 0, DIGEST_XXH3_128 = 1, DIGEST_NALGS };

#define DIGEST_HEX_MAX SHA_HEX_LEN           /* the longest: SHA-256 */

/* A file's digest: its algorithm and lowercase hex. */
struct digest {
	int  alg;                             /* enum digest_alg */
	char hex[DIGEST_HEX_MAX + 1];
};

/* The config value ("sha256", "xxh3-128"), the manifest's per-file key
 * ("sha256", "xxh3_128": a JSON key and a Python identifier) and the hex
 * length of alg.  alg must be valid. */
const char *digest_name(int alg);
const char *digest_key(int alg);
size_t      digest_hex_len(int alg);
/* alg of a config value or of a manifest key, or -EINVAL. */
int  digest_by_name(const char *name);
int  digest_by_key(const char *key);
/* Is d well-formed: a known alg and exactly its number of lowercase hex
 * digits? */
int  digest_valid(const struct digest *d);
/* Same algorithm and same hex. */
int  digest_eq(const struct digest *a, const struct digest *b);

struct digest_ctx {
	int   alg;
	void *st;                             /* EVP_MD_CTX or XXH3_state_t */
};

int  digest_init(struct digest_ctx *c, int alg);   /* 0, -EINVAL or -ENOMEM */
void digest_update(struct digest_ctx *c, const void *data, size_t len);
/* Fills out (alg and hex); releases the context. */
void digest_final(struct digest_ctx *c, struct digest *out);
void digest_release(struct digest_ctx *c);         /* NULL-safe, idempotent */

/* A range of a file as incremental saves compare it (wr.c, prior.h):
 * XXH3-128 of its bytes, raw.  Kept in memory only, never in a manifest. */
struct range_hash {
	uint64_t lo, hi;
};
void digest_range(const void *data, size_t len, struct range_hash *out);
int  range_hash_eq(const struct range_hash *a, const struct range_hash *b);

/* The digest (alg) of an open file from its current offset to EOF, every
 * byte fed to cs too (NULL: none); fd stays open.  Fills out and *size
 * (bytes read).  0 or -errno. */
struct csum_stream;
int  digest_fd_csum(int fd, int alg, struct digest *out, uint64_t *size,
		    struct csum_stream *cs);
/* The same for dirfd/name (O_NOFOLLOW, a regular file).  For tests and
 * tools; the daemon hashes as it writes. */
int  digest_file(int dirfd, const char *name, int alg, struct digest *out,
		 uint64_t *size);

#endif
