/* gpu_wire.h - decoding the CUDA parts of the protocol (CUDA_REGION_ADD,
 * SAVE's "cuda" object) into plain structs.  Pure: no CUDA, no sockets, so
 * it is unit-tested against libckpt's encoder.  See proto/PROTOCOL.md. */
#ifndef CKPT_GPU_WIRE_H
#define CKPT_GPU_WIRE_H

#include <jansson.h>
#include <stdint.h>

#include "gpu.h"
#include "proto.h"

struct gpu_region_desc {
	uint64_t region, size, base;
	uint8_t  uuid[GPU_UUID_BYTES];
	enum gpu_mem_kind kind;
	uint8_t  key[GPU_HANDLE_BYTES];
	uint64_t at;                        /* VMM: offset of chunk[0] */
	unsigned nchunks;                   /* VMM: == fds sent */
	uint64_t chunk[PROTO_MAX_FDS];
};

struct gpu_save_desc {
	uint8_t  uuid[GPU_UUID_BYTES];
	unsigned slot;
	uint32_t seq;                       /* the gate opens at this value */
	uint8_t  ready[GPU_HANDLE_BYTES];
};

/* 0, or -EINVAL with msg.  nfds: descriptors that came with the message. */
int gpu_wire_region(const json_t *j, unsigned nfds, struct gpu_region_desc *d,
		    char *msg, size_t msglen);
/* j is SAVE's "cuda" object. */
int gpu_wire_save(const json_t *j, struct gpu_save_desc *d, char *msg, size_t msglen);

#endif
