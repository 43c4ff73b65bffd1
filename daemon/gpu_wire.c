/* gpu_wire.c - the CUDA parts of a request (CUDA_REGION_ADD, SAVE's
 * "cuda" object) decoded and checked into plain structs.  See gpu_wire.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "errbuf.h"
#include "gpu_wire.h"
#include "hex.h"

static int u64(const json_t *j, const char *k, uint64_t *out)
{
	json_t *v = json_object_get(j, k);
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -EINVAL;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

int gpu_wire_region(const json_t *j, unsigned nfds, struct gpu_region_desc *d,
		    char *msg, size_t msglen)
{
	const char *kind = json_string_value(json_object_get(j, "kind"));
	json_t *chunks = json_object_get(j, "chunks");
	uint64_t sum = 0;

	memset(d, 0, sizeof(*d));
	if (u64(j, "region", &d->region) < 0 || u64(j, "size", &d->size) < 0 ||
	    u64(j, "base", &d->base) < 0 || !d->size)
		return errbuf_fail(msg, msglen, -EINVAL,
				   "CUDA_REGION_ADD needs \"region\", \"size\" > 0 and \"base\"");
	if (hex_gpu_uuid_parse(json_string_value(json_object_get(j, "gpu")), d->uuid) < 0)
		return errbuf_fail(msg, msglen, -EINVAL,
				   "CUDA_REGION_ADD needs \"gpu\": a GPU UUID (GPU-xxxxxxxx-...)");
	if (hex_decode(json_string_value(json_object_get(j, "key")), d->key,
		      GPU_HANDLE_BYTES) < 0)
		return errbuf_fail(msg, msglen, -EINVAL,
				   "CUDA_REGION_ADD needs \"key\": %d hex digits",
				   2 * GPU_HANDLE_BYTES);
	if (kind && !strcmp(kind, "ipc")) {
		d->kind = GPU_MEM_IPC;
		if (nfds)
			return errbuf_fail(msg, msglen, -EINVAL,
					   "a cudaMalloc (\"ipc\") region carries no file descriptors");
		if (chunks || json_object_get(j, "at"))
			return errbuf_fail(msg, msglen, -EINVAL,
					   "\"chunks\" and \"at\" are for \"vmm\" regions");
		return 0;
	}
	if (!kind || strcmp(kind, "vmm"))
		return errbuf_fail(msg, msglen, -EINVAL,
				   "\"kind\" must be \"ipc\" (cudaMalloc) or \"vmm\" (cuMemCreate)");
	d->kind = GPU_MEM_VMM;
	if (u64(j, "at", &d->at) < 0)
		return errbuf_fail(msg, msglen, -EINVAL, "a \"vmm\" region needs \"at\"");
	if (!json_is_array(chunks) || json_array_size(chunks) == 0 ||
	    json_array_size(chunks) > PROTO_MAX_FDS)
		return errbuf_fail(msg, msglen, -EINVAL,
				   "\"chunks\" must list 1..%d chunk sizes", PROTO_MAX_FDS);
	d->nchunks = (unsigned)json_array_size(chunks);
	if (d->nchunks != nfds)
		return errbuf_fail(msg, msglen, -EINVAL,
				   "%u chunk sizes but %u file descriptors", d->nchunks, nfds);
	for (unsigned i = 0; i < d->nchunks; i++) {
		json_t *v = json_array_get(chunks, i);
		if (!json_is_integer(v) || json_integer_value(v) <= 0)
			return errbuf_fail(msg, msglen, -EINVAL,
					   "chunks[%u] is not a positive size", i);
		d->chunk[i] = (uint64_t)json_integer_value(v);
		if (d->chunk[i] > d->size - sum)
			return errbuf_fail(msg, msglen, -EINVAL,
					   "the chunks run past the region's %llu bytes",
					   (unsigned long long)d->size);
		sum += d->chunk[i];
	}
	if (d->at > d->size - sum)
		return errbuf_fail(msg, msglen, -EINVAL,
				   "the chunks run past the region's %llu bytes",
				   (unsigned long long)d->size);
	return 0;
}

int gpu_wire_save(const json_t *j, struct gpu_save_desc *d, char *msg, size_t msglen)
{
	json_t *slot = json_object_get(j, "slot"), *seq = json_object_get(j, "seq");

	memset(d, 0, sizeof(*d));
	if (!json_is_object(j))
		return errbuf_fail(msg, msglen, -EINVAL, "\"cuda\" must be an object");
	if (hex_gpu_uuid_parse(json_string_value(json_object_get(j, "gpu")), d->uuid) < 0)
		return errbuf_fail(msg, msglen, -EINVAL, "\"cuda\" needs \"gpu\": a GPU UUID");
	if (!json_is_integer(slot) || json_integer_value(slot) < 0 ||
	    json_integer_value(slot) >= GPU_RING_SLOTS)
		return errbuf_fail(msg, msglen, -EINVAL,
				   "\"cuda\" needs \"slot\" in 0..%d", GPU_RING_SLOTS - 1);
	d->slot = (unsigned)json_integer_value(slot);
	if (!json_is_integer(seq) || json_integer_value(seq) < 0 ||
	    json_integer_value(seq) > UINT32_MAX)
		return errbuf_fail(msg, msglen, -EINVAL,
				   "\"cuda\" needs \"seq\": the gate's sequence number, 0..%u",
				   UINT32_MAX);
	d->seq = (uint32_t)json_integer_value(seq);
	if (hex_decode(json_string_value(json_object_get(j, "ready")), d->ready,
		      GPU_HANDLE_BYTES) < 0)
		return errbuf_fail(msg, msglen, -EINVAL,
				   "\"cuda\" needs \"ready\": an event handle in %d hex digits",
				   2 * GPU_HANDLE_BYTES);
	return 0;
}
