/* csum.h - CRC32C checksums of a file's fixed-size chunks: computed while
 * the bytes stream to disk, recorded in the manifest next to the file's
 * digest (digest.h), and checked on any byte range read back later (a whole-file
 * hash cannot check a range).
 *
 * CRC32C (Castagnoli, as iSCSI, ext4 and RFC 3720): SSE4.2's crc32
 * instruction where the CPU has it, a table otherwise; both give the same
 * values. */
#ifndef CKPT_CSUM_H
#define CKPT_CSUM_H

#include <stddef.h>
#include <stdint.h>

/* The chunk size this ckpt writes (a manifest records its own): the unit
 * a restore of a byte range reads and checks.  1 MiB keeps column and
 * block reshards from reading much beyond what they need, for about 11
 * bytes of manifest per MiB of checkpoint. */
#define CSUM_CHUNK_BYTES (1u << 20)

/* CRC32C of buf, continuing from crc (0 to start); the result is the
 * standard one (pre- and post-inverted), so it chains: crc(a+b) ==
 * csum_crc32c(csum_crc32c(0, a), b). */
uint32_t csum_crc32c(uint32_t crc, const void *buf, size_t len);

/* Copy len bytes from src to dst (not overlapping) and return their
 * CRC32C, continuing from crc, as csum_crc32c(crc, src, len) would: the
 * CRC is of the bytes as they were copied, and the source is read once.
 * Large copies use streaming stores (the destination is not cached). */
uint32_t csum_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len);

/* The table code alone, for tests that compare it with the CPU's. */
uint32_t csum__crc32c_sw(uint32_t crc, const void *buf, size_t len);

/* Number of chunks of a file: ceil(size / chunk_bytes) (0 for 0 bytes). */
uint64_t csum_count(uint64_t size, uint64_t chunk_bytes);

/* A file's chunk checksums built from its bytes in order. */
struct csum_stream {
	uint64_t  chunk_bytes;
	uint64_t  pos;            /* bytes seen */
	uint64_t  size;           /* the file's size, as announced */
	uint32_t  cur;            /* CRC of the chunk being filled */
	uint32_t *crcs;           /* [csum_count(size, chunk_bytes)] */
};

/* Allocates the table for a file of size bytes.  0 or -ENOMEM (-EINVAL
 * for chunk_bytes 0). */
int  csum_stream_init(struct csum_stream *s, uint64_t chunk_bytes, uint64_t size);
/* Feed the next bytes.  Bytes past the announced size are ignored. */
void csum_stream_update(struct csum_stream *s, const void *buf, size_t len);
/* Hands over the table (*crcs, new, csum_count entries; the caller frees)
 * once exactly size bytes were seen: 0, or -EIO if fewer were. */
int  csum_stream_finish(struct csum_stream *s, uint32_t **crcs);
void csum_stream_release(struct csum_stream *s);       /* NULL-safe */

#endif
