/* fuzz_safet.c - libFuzzer target for the safetensors header reader, with
 * the input taken as a whole file.  Whatever parses must satisfy the
 * documented invariants, rebuilding its header must parse to the same
 * tensors, and the fast reader must agree with the jansson one. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safet.h"

static void check(const struct safet_header *h, uint64_t file_size)
{
	uint64_t pos = 0;

	if (h->data_start < 8 || h->data_start > file_size)
		abort();
	for (size_t i = 0; i < h->ntensors; i++) {
		const struct safet_tensor *t = &h->tensors[i];

		if (t->begin != pos || t->end < t->begin ||
		    t->ndim < 0 || t->ndim > SAFET_MAX_NDIM ||
		    !safet_dtype_size(t->dtype))
			abort();
		pos = t->end;
	}
	if (pos != file_size - h->data_start)
		abort();
}

/* Rebuild a header from what was parsed (in begin order) and parse it. */
static void rebuild(const struct safet_header *h)
{
	struct safet_entry *e = calloc(h->ntensors + 1, sizeof(*e));
	uint64_t *offs = calloc(h->ntensors + 1, sizeof(*offs));
	struct safet_header *h2 = NULL;
	uint8_t *hdr = NULL;
	size_t len = 0, need;
	char err[256];

	if (!e || !offs)
		goto out;
	for (size_t i = 0; i < h->ntensors; i++) {
		e[i].name = h->tensors[i].name;
		e[i].dtype = h->tensors[i].dtype;
		e[i].ndim = h->tensors[i].ndim;
		e[i].shape = h->tensors[i].shape;
		e[i].nbytes = h->tensors[i].end - h->tensors[i].begin;
	}
	/* Names we would never write (e.g. empty) are refused: fine. */
	if (safet_header_build(e, h->ntensors, NULL, 8, &hdr, &len, offs) < 0)
		goto out;
	if (safet_header_parse(hdr, len, len + offs[h->ntensors], &h2, &need,
			       err, sizeof(err)) < 0)
		abort();
	if (h2->ntensors != h->ntensors)
		abort();
	for (size_t i = 0; i < h->ntensors; i++)
		if (h2->tensors[i].begin != h->tensors[i].begin ||
		    h2->tensors[i].end != h->tensors[i].end ||
		    strcmp(h2->tensors[i].dtype, h->tensors[i].dtype))
			abort();
out:
	safet_header_free(h2);
	free(hdr);
	free(offs);
	free(e);
}

/* The fast reader and the jansson one agree on every input: the same
 * result, the same tensors, the same error. */
static void same_as_jansson(const uint8_t *data, size_t size, int ret,
			    const struct safet_header *h, const char *err)
{
	struct safet_header *j = NULL;
	size_t need = 0;
	char jerr[256] = "";
	int jret;

	safet_parse_fast = 0;
	jret = safet_header_parse(data, size, size, &j, &need, jerr, sizeof(jerr));
	safet_parse_fast = 1;
	if (jret != ret || (ret < 0 && ret != -EAGAIN && strcmp(err, jerr)))
		abort();
	if (ret == 0 && (j->ntensors != h->ntensors || j->data_start != h->data_start))
		abort();
	for (size_t i = 0; ret == 0 && i < h->ntensors; i++) {
		const struct safet_tensor *a = &h->tensors[i], *b = &j->tensors[i];
		if (strcmp(a->name, b->name) || strcmp(a->dtype, b->dtype) ||
		    a->ndim != b->ndim || a->begin != b->begin || a->end != b->end ||
		    memcmp(a->shape, b->shape, sizeof(a->shape[0]) * (size_t)a->ndim))
			abort();
	}
	safet_header_free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct safet_header *h = NULL;
	size_t need = 0;
	char err[256] = "";
	int ret;

	ret = safet_header_parse(data, size, size, &h, &need, err, sizeof(err));
	same_as_jansson(data, size, ret, h, err);
	if (ret == -EAGAIN)
		abort();                 /* the whole file was there */
	if (ret < 0)
		return 0;
	check(h, size);
	rebuild(h);
	safet_header_free(h);
	return 0;
}
