/* s3.h - the S3 requests ckptd's remote tier makes (PUT, multipart, GET,
 * HEAD, DELETE, list), over libcurl with its AWS SigV4 signing and libxml2
 * for the replies.  Every body is sent from memory with Content-MD5 and a
 * signed x-amz-content-sha256, and a returned ETag that is an MD5 must be
 * the one we sent: a server that ignores the headers is still checked.
 * Transient failures (5xx, 429, connection errors, time-outs) are retried
 * with exponential backoff; the last error is in the connection's msg.
 *
 * One s3_conn per thread (it holds a curl handle and its connection);
 * the shared s3_target is read-only once made. */
#ifndef CKPT_S3_H
#define CKPT_S3_H

#include <stddef.h>
#include <stdint.h>

struct s3_target {
	char     endpoint[256];     /* "http://127.0.0.1:9000", no trailing '/' */
	char     bucket[64];
	char     prefix[256];       /* "" or "a/b" (no leading or trailing '/') */
	char     region[64];
	char     key_id[128];       /* credentials: never logged */
	char     secret[256];
	char     token[2048];       /* session token or "" */
	uint64_t max_send_bps;      /* shared by all connections, 0 = unlimited */
	unsigned timeout_ms;        /* a request making no progress this long fails */
	unsigned retries;           /* attempts after the first */
};

struct s3_conn;

/* 0 and *out (new), or -ENOMEM.  t is borrowed and must outlive the conn.
 * stop (may be NULL) is polled during transfers: non-zero aborts them
 * with -ECANCELED. */
int  s3_conn_new(const struct s3_target *t, const volatile int *stop,
		 struct s3_conn **out);
void s3_conn_free(struct s3_conn *c);             /* NULL-safe */
/* The last failure, e.g. "PUT a/b: 403 InvalidAccessKeyId: The AWS Access
 * Key Id you provided does not exist" (never a credential). */
const char *s3_conn_msg(const struct s3_conn *c);
/* Requests retried and bytes sent (bodies) since the conn was made. */
uint64_t s3_conn_retries(const struct s3_conn *c);

const struct s3_target *s3_conn_target(const struct s3_conn *c);

/* The full object key of rel: "<prefix>/<rel>" or rel.  -ENAMETOOLONG. */
int  s3_key(const struct s3_target *t, const char *rel, char *buf, size_t len);

/* Every function below takes full keys and returns 0 or -errno:
 * -ENOENT (404: no such key or upload), -EACCES (401/403), -EIO (other
 * failures, a missing bucket -- 404 NoSuchBucket -- among them),
 * -ECANCELED (stopped), -EBADMSG (the server's ETag is not the MD5 we
 * sent). */

/* PUT key with body buf[len]; digest d (may be NULL) is stored as the
 * object's metadata: x-amz-meta-ckpt-sha256 or x-amz-meta-ckpt-xxh3-128. */
struct digest;
int  s3_put(struct s3_conn *c, const char *key, const void *buf, size_t len,
	    const struct digest *d);

/* Multipart upload: create (id gets the upload id), parts numbered from 1
 * (etag[80] gets the part's ETag), complete with every part's ETag in
 * order, abort. */
int  s3_mpu_create(struct s3_conn *c, const char *key, const struct digest *d,
		   char *id, size_t idlen);
int  s3_mpu_part(struct s3_conn *c, const char *key, const char *id, int partno,
		 const void *buf, size_t len, char etag[80]);
int  s3_mpu_complete(struct s3_conn *c, const char *key, const char *id,
		     char (*etags)[80], int nparts);
int  s3_mpu_abort(struct s3_conn *c, const char *key, const char *id);

/* GET key: into fd from offset 0 (sizes up to max), or into a malloc'd
 * buffer of at most max bytes (*out, *outlen; NUL-terminated). -EFBIG if
 * larger than max. */
int  s3_get_fd(struct s3_conn *c, const char *key, int fd, uint64_t max,
	       uint64_t *size);
int  s3_get_buf(struct s3_conn *c, const char *key, size_t max, char **out,
		size_t *outlen);

/* HEAD key: *size and *d (the object's digest metadata as s3_put stores
 * it; hex "" if none; d may be NULL). */
int  s3_head(struct s3_conn *c, const char *key, uint64_t *size, struct digest *d);
int  s3_delete(struct s3_conn *c, const char *key);

/* List keys under prefix (ListObjectsV2, all pages).  With delimiter '/',
 * the common prefixes are reported with size UINT64_MAX.  cb returns
 * non-zero to stop (that value is returned). */
typedef int (*s3_list_cb)(void *arg, const char *key, uint64_t size);
int  s3_list(struct s3_conn *c, const char *prefix, int delimit, s3_list_cb cb,
	     void *arg);
/* Multipart uploads in progress under prefix: cb(arg, key, upload id). */
typedef int (*s3_uploads_cb)(void *arg, const char *key, const char *id);
int  s3_list_uploads(struct s3_conn *c, const char *prefix, s3_uploads_cb cb,
		     void *arg);

/* Once at start-up, before threads (curl_global_init). */
int  s3_global_init(void);

#endif
