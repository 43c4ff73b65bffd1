/* proto.h - the ckpt wire protocol, shared by ckptd, libckpt and ckptctl.
 *
 * A message is a fixed 40-byte little-endian header followed by `len`
 * payload bytes: `jlen` bytes of UTF-8 JSON (an object), then
 * `len - jlen` bytes of opaque binary data (blob contents).  File
 * descriptors travel with SCM_RIGHTS on the same stream; the header says how
 * many (`nfds`) belong to the message.  Bulk tensor bytes never cross the
 * socket: they live in shared memory.
 *
 * Requests carry a non-zero req_id; the reply echoes it with type
 * (request type | PROTO_REPLY) and status 0 or -errno.  EVENT messages are
 * pushed by the daemon with req_id 0.  Opcodes are never reused.
 */
#ifndef CKPT_PROTO_H
#define CKPT_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PROTO_MAGIC        0x54504b43u   /* "CKPT" little-endian */
#define PROTO_VERSION      1
#define PROTO_HDR_SIZE     40
#define PROTO_MAX_PAYLOAD  (16u << 20)   /* hard ceiling; config may lower */
#define PROTO_MAX_FDS      8             /* per message */
#define PROTO_REPLY        0x8000u

/* Feature bits announced in HELLO. */
#define PROTO_FEAT_HOST_MEM  (1u << 0)
#define PROTO_FEAT_CUDA_IPC  (1u << 1)
#define PROTO_FEAT_EVENTS    (1u << 2)
/* A RESTORE's outcome comes as RESTORE_PART messages, then the reply: the
 * client that sets it in HELLO takes them, the daemon that echoes it sends
 * them (a client without it gets one reply, or -EMSGSIZE). */
#define PROTO_FEAT_RESTORE_PARTS (1u << 3)
/* The daemon takes TENSOR_REG's "global" object (ckpt_register_global):
 * {"shape": [global], "offset": [first index], "replica_index": i,
 *  "replica_count": n}. */
#define PROTO_FEAT_GLOBAL    (1u << 4)
/* The daemon takes TENSOR_REG's "frozen": true (CKPT_FROZEN): the tensor
 * goes in its group's frozen shard. */
#define PROTO_FEAT_FROZEN    (1u << 5)

enum proto_type {
	PROTO_HELLO      = 1,   /* {version, features, job, rank, world_size, pid} */
	PROTO_REGION_ADD = 2,   /* {region, size} + 1 fd (sealed memfd) */
	PROTO_REGION_DEL = 3,   /* {region} */
	PROTO_TENSOR_REG = 4,   /* {group, name, dtype, shape[], region, offset, frozen?} */
	PROTO_TENSOR_DEL = 5,   /* {group, name} */
	PROTO_BLOB_PUT   = 6,   /* {name} + binary data */
	PROTO_SAVE       = 7,   /* {step} -> {ticket, txid} */
	PROTO_RESTORE    = 8,   /* {step (-1 latest), partial} -> RESTORE_PARTs, {step, source, bytes, micros, counts} */
	PROTO_STATUS     = 9,   /* {} -> daemon status object */
	PROTO_FLUSH      = 10,  /* {job?, timeout_ms} -> {saves, failed} */
	PROTO_LIST       = 11,  /* {job?} -> {checkpoints: [...]} */
	PROTO_EVENT      = 12,  /* daemon -> client: {ticket, step, phase, error?, times} */
	PROTO_PRUNE      = 13,  /* {job, keep} -> {removed[]} */
	PROTO_ERROR      = 14,  /* daemon -> peer: reply to a message it could not parse */
	PROTO_CUDA_REGION_ADD = 15, /* {region, size, gpu, base, kind, key[, at, chunks]} [+ fds] */
	PROTO_RESTORE_PART = 16,  /* daemon -> client, before the RESTORE reply:
				   * {restored|missing|unexpected|skipped: [..]} or
				   * {blob, off, len} + bytes [off, off+blen) of it */
	PROTO_REMOTE     = 17,  /* {op: list|push|pull, job?, step?} -> {checkpoints} |
				   * {queued} | {step}: the object-store tier */
	PROTO_TYPE_MAX
};

struct proto_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t flags;     /* no flags are defined: must be 0 */
	uint32_t len;       /* payload bytes after the header */
	uint32_t jlen;      /* of which JSON (first jlen bytes) */
	int32_t  status;    /* replies: 0 or -errno */
	uint64_t req_id;
	uint32_t nfds;      /* fds sent with this message */
	uint32_t reserved;  /* must be 0 */
};
_Static_assert(sizeof(struct proto_hdr) == PROTO_HDR_SIZE, "wire header size");

/* Fill a header (host to little-endian on the wire; x86/arm64 LE only). */
void proto_hdr_init(struct proto_hdr *h, uint16_t type, uint64_t req_id,
		    int32_t status, uint32_t jlen, uint32_t blen, uint32_t nfds);

/* Check a received header against the limits.  Returns 0, or -EPROTO (bad
 * magic, reserved/flags set, jlen > len), -EPROTONOSUPPORT (version),
 * -EMSGSIZE (len > max_payload), -EBADMSG (unknown type, nfds > max).
 * On failure msg (may be NULL) gets a human-readable reason; untouched on
 * success. */
int proto_hdr_check(const struct proto_hdr *h, uint32_t max_payload,
		    char *msg, size_t msglen);

const char *proto_type_name(uint16_t type);

/* Incremental reader for a stream socket: owns a growing buffer and the fds
 * that arrived with it.  One per connection. */
struct proto_reader {
	uint8_t *buf;
	size_t   cap, used;
	int      fds[PROTO_MAX_FDS * 4];
	unsigned nfds;
	uint32_t max_payload;
};

/* A complete message, borrowed from the reader until the next call. */
struct proto_msg {
	struct proto_hdr hdr;
	const char *json;         /* NUL-terminated copy position (jlen bytes) */
	const uint8_t *bin;       /* len - jlen bytes */
	size_t blen;
	int fds[PROTO_MAX_FDS];   /* owned by the caller after proto_next() */
	unsigned nfds;
};

void proto_reader_init(struct proto_reader *r, uint32_t max_payload);
void proto_reader_release(struct proto_reader *r);  /* closes pending fds */

/* recvmsg() once from fd into the reader (non-blocking sockets welcome).
 * Returns bytes read (>0), 0 on EOF, -EAGAIN, or -errno.  Rejects fds that
 * would overflow the reader's fd queue (closes them, returns -EMFILE). */
int proto_read(struct proto_reader *r, int fd);

/* Extract the next complete message.  Returns 1 and fills *m, 0 if more
 * bytes are needed, or a negative error from proto_hdr_check() (the
 * connection is then unusable: the caller replies PROTO_ERROR and closes).
 * -EBADF: the header announced more fds than arrived with it.
 * The fds in m->fds are the caller's to close.  m->json is NUL-terminated.
 * When the header is bad, *bad (if not NULL) is filled so that the caller
 * can echo req_id.  On failure msg (may be NULL) says why. */
int proto_next(struct proto_reader *r, struct proto_msg *m,
	       struct proto_hdr *bad, char *msg, size_t msglen);

/* Send one whole message (blocking until written; EINTR retried; handles
 * partial writes; fds go with the first byte).  json may be NULL (jlen 0),
 * bin may be NULL (blen 0).  Returns 0 or -errno. */
int proto_send(int fd, uint16_t type, uint64_t req_id, int32_t status,
	       const char *json, size_t jlen, const void *bin, size_t blen,
	       const int *fds, unsigned nfds);

/* Build a message into one heap buffer for asynchronous sending (the daemon
 * queues these).  *out is malloc'd; returns its length or -errno. */
ssize_t proto_pack(uint16_t type, uint64_t req_id, int32_t status,
		   const char *json, size_t jlen, const void *bin, size_t blen,
		   uint32_t nfds, uint8_t **out);

#endif
