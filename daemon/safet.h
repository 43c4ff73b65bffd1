/* safet.h - safetensors encoding: the header we write in front of each
 * shard, and a strict reader for verification.
 * Format: u64 little-endian N, then N bytes of JSON
 *   {"__metadata__": {...}, "<name>": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * then the data; offsets are relative to the end of the header, tensors
 * are contiguous without holes.  We pad the JSON with spaces so the data
 * starts at a multiple of `align` (O_DIRECT friendly); readers accept it. */
#ifndef CKPT_SAFET_H
#define CKPT_SAFET_H

#include <stddef.h>
#include <stdint.h>

#define SAFET_MAX_NDIM 8
#define SAFET_MAX_HEADER (100u << 20)   /* the format's own sanity limit */

/* Element size of a safetensors dtype name ("F64" "F32" "F16" "BF16" "I64"
 * "I32" "I16" "I8" "U8" "BOOL"), or 0 if unknown. */
size_t safet_dtype_size(const char *dtype);

struct safet_entry {
	const char    *name;
	const char    *dtype;
	int            ndim;                 /* 0..SAFET_MAX_NDIM */
	const int64_t *shape;
	uint64_t       nbytes;               /* must equal prod(shape)*size */
};

/* Build the header for entries laid out in the given order.  metadata is a
 * NULL-terminated key,value,... list of strings (may be NULL).  *out is
 * malloc'd, *out_len (a multiple of align, align a power of two >= 8) is the
 * file offset where data begins.  offsets[i] receives entry i's begin
 * relative to the data start (offsets must hold n+1; offsets[n] = total).
 * Returns 0 or -EINVAL (bad dtype/shape/nbytes/duplicate name)/-ENOMEM. */
int safet_header_build(const struct safet_entry *e, size_t n,
		       const char *const *metadata, size_t align,
		       uint8_t **out, size_t *out_len, uint64_t *offsets);

/* The same in two parts, so that a header whose entries stay the same from
 * save to save is not encoded again: the entries' text (comma-separated
 * "name":{...} members, *out malloc'd, offsets as above, also written on
 * -ENOMEM), then a header of that text after the metadata. */
int safet_entries_build(const struct safet_entry *e, size_t n, char **out,
			size_t *out_len, uint64_t *offsets);
int safet_header_join(const char *const *metadata, const char *entries,
		      size_t entries_len, size_t align, uint8_t **out, size_t *out_len);

/* An upper bound of the bytes one entry (name, dtype, ndim sizes and its
 * data offsets) takes in the header's JSON, so that a registration can be
 * refused before a group's header would pass SAFET_MAX_HEADER. */
size_t safet_entry_bound(const char *name, int ndim);
/* What a header takes beyond its entries, at most: braces, the metadata
 * ckptd writes, padding to 4096. */
#define SAFET_HEADER_OVERHEAD 8192

struct safet_tensor {
	char    *name;
	char     dtype[8];
	int      ndim;
	int64_t  shape[SAFET_MAX_NDIM];
	uint64_t begin, end;                 /* relative to data start */
};

struct safet_header {
	uint64_t data_start;                 /* 8 + N */
	size_t   ntensors;
	struct safet_tensor *tensors;        /* sorted by begin */
};

/* Parse and validate a header from buf (the first len bytes of a file of
 * file_size bytes; len must cover 8 + N, else -EAGAIN with *need set).
 * Checks: JSON object, dtypes known, shapes non-negative, end-begin equals
 * prod(shape)*size, no overlaps or holes, last end == file_size-data_start.
 * Returns 0 or -EINVAL with err filled. */
int safet_header_parse(const uint8_t *buf, size_t len, uint64_t file_size,
		       struct safet_header **out, size_t *need,
		       char *err, size_t errlen);
void safet_header_free(struct safet_header *h);

/* Tests: 0 reads every header through jansson, the reference reader the
 * fast one must agree with; how many headers the fast one read (counted
 * atomically: ckptctl verify reads on several threads). */
extern int safet_parse_fast;
extern unsigned long safet_parse_fast_count;

#endif
