/* s3.c - S3 requests over libcurl (SigV4 signing by curl) with retries;
 * replies parsed with libxml2. */
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "digest.h"
#include "rate.h"
#include "s3.h"

#define S3_MSG_MAX   512
#define S3_XML_MAX   (8u << 20)           /* a reply body we parse */

struct s3_conn {
	const struct s3_target *t;
	const volatile int     *stop;
	CURL     *curl;
	uint64_t  retries;
	char      msg[S3_MSG_MAX];
};

/* What one attempt of a request sends and what it got back. */
struct s3_req {
	const char *method, *key, *query;   /* query: "uploadId=..&partNumber=1" */
	const void *body; size_t len;
	const struct digest *meta;          /* x-amz-meta-ckpt-<alg> */
	int         check_etag;             /* the ETag must be the body's MD5 */
	/* response */
	int         fd;                     /* GET into fd (-1: into buf) */
	uint64_t    fd_off, max;
	char       *buf; size_t buflen, bufcap;
	long        status;
	char        etag[80];
	uint64_t    length;  int have_length;
	struct digest got;                  /* from x-amz-meta-ckpt-<alg> */
	size_t      sent;
	uint64_t    progress, progress_ns;
	int         timed_out, too_big, write_err;
	struct s3_conn *c;
};

int s3_global_init(void)
{
	xmlInitParser();
	return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -EIO;
}

int s3_conn_new(const struct s3_target *t, const volatile int *stop,
		struct s3_conn **out)
{
	struct s3_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	if (!(c->curl = curl_easy_init())) {
		free(c);
		return -ENOMEM;
	}
	c->t = t;
	c->stop = stop;
	*out = c;
	return 0;
}

void s3_conn_free(struct s3_conn *c)
{
	if (!c)
		return;
	curl_easy_cleanup(c->curl);
	free(c);
}

const char *s3_conn_msg(const struct s3_conn *c) { return c->msg; }
uint64_t s3_conn_retries(const struct s3_conn *c) { return c->retries; }
const struct s3_target *s3_conn_target(const struct s3_conn *c) { return c->t; }

int s3_key(const struct s3_target *t, const char *rel, char *buf, size_t len)
{
	int n = t->prefix[0] ? snprintf(buf, len, "%s/%s", t->prefix, rel)
			     : snprintf(buf, len, "%s", rel);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* --- hashing -------------------------------------------------------------- */

static void digest(const EVP_MD *md, const void *buf, size_t len, unsigned char *out)
{
	unsigned int n;
	EVP_Digest(buf, len, out, &n, md, NULL);
}

static void hex(const unsigned char *in, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", in[i]);
}

/* --- the bandwidth limit ------------------------------------------------------ */

/* One budget for every connection (max_send_bps is the total, rate.h). */
static struct rate rate = RATE_INIT;

/* Wait for n bytes' turn; how many bytes may go now (0: stopped). */
static size_t throttle(struct s3_req *q, size_t n)
{
	uint64_t bps = q->c->t->max_send_bps, now, at;
	size_t most;

	if (!bps || !n)
		return n;
	most = bps / 20 > 4096 ? (size_t)(bps / 20) : 4096;      /* ~50 ms */
	if (n > most)
		n = most;
	at = rate_reserve(&rate, now_ns(), n, bps);
	while ((now = now_ns()) < at) {
		if (q->c->stop && *q->c->stop)
			return 0;
		uint64_t ns = at - now < 20000000ull ? at - now : 20000000ull;
		struct timespec ts = { 0, (long)ns };
		nanosleep(&ts, NULL);
	}
	return n;
}

/* --- curl callbacks --------------------------------------------------------- */

static size_t on_read(char *dst, size_t size, size_t nmemb, void *arg)
{
	struct s3_req *q = arg;
	size_t n = size * nmemb, left = q->len - q->sent;

	if (n > left)
		n = left;
	if (!(n = throttle(q, n)) && left)
		return CURL_READFUNC_ABORT;
	memcpy(dst, (const char *)q->body + q->sent, n);
	q->sent += n;
	return n;
}

static size_t on_write(char *src, size_t size, size_t nmemb, void *arg)
{
	struct s3_req *q = arg;
	size_t n = size * nmemb;

	if (q->fd >= 0 && q->status / 100 == 2) {
		if (q->fd_off + n > q->max) {
			q->too_big = 1;
			return 0;
		}
		for (size_t done = 0; done < n; ) {
			ssize_t w = pwrite(q->fd, src + done, n - done, (off_t)(q->fd_off + done));
			if (w <= 0) {
				q->write_err = w < 0 ? errno : EIO;
				return 0;
			}
			done += (size_t)w;
		}
		q->fd_off += n;
		return n;
	}
	/* a reply body (XML), or an error's body on a GET to fd */
	size_t max = q->fd >= 0 || q->status / 100 != 2 ? S3_XML_MAX : q->max;
	if (q->buflen + n > max) {
		q->too_big = 1;
		return 0;
	}
	if (q->buflen + n + 1 > q->bufcap) {
		size_t cap = q->bufcap ? q->bufcap * 2 : 4096;
		while (cap < q->buflen + n + 1)
			cap *= 2;
		char *b = realloc(q->buf, cap);
		if (!b)
			return 0;
		q->buf = b;
		q->bufcap = cap;
	}
	memcpy(q->buf + q->buflen, src, n);
	q->buflen += n;
	q->buf[q->buflen] = '\0';
	return n;
}

static void header_value(const char *line, size_t n, char *out, size_t outlen)
{
	const char *v = memchr(line, ':', n), *end = line + n;
	size_t len;

	if (!v)
		return;
	for (v++; v < end && (*v == ' ' || *v == '"'); v++)
		;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' ||
			   end[-1] == '"'))
		end--;
	len = (size_t)(end - v) < outlen - 1 ? (size_t)(end - v) : outlen - 1;
	memcpy(out, v, len);
	out[len] = '\0';
}

/* The object metadata that carries a file's digest, by algorithm: a
 * hyphen, not the manifest key's underscore (proxies drop header names
 * with underscores). */
static const char *const meta_header[DIGEST_NALGS] = {
	[DIGEST_SHA256]   = "x-amz-meta-ckpt-sha256",
	[DIGEST_XXH3_128] = "x-amz-meta-ckpt-xxh3-128",
};

static size_t on_header(char *line, size_t size, size_t nmemb, void *arg)
{
	struct s3_req *q = arg;
	size_t n = size * nmemb;
	char v[80];

	if (n > 9 && strncmp(line, "HTTP/", 5) == 0) {
		/* a new response (after a 100 Continue, say): status from curl */
		q->etag[0] = q->got.hex[0] = '\0';
		q->have_length = 0;
		const char *sp = memchr(line, ' ', n);
		if (sp)
			q->status = strtol(sp + 1, NULL, 10);
	} else if (n > 5 && strncasecmp(line, "etag:", 5) == 0) {
		header_value(line, n, q->etag, sizeof(q->etag));
	} else if (n > 15 && strncasecmp(line, "content-length:", 15) == 0) {
		header_value(line, n, v, sizeof(v));
		q->length = strtoull(v, NULL, 10);
		q->have_length = 1;
	} else {
		for (int a = 0; a < DIGEST_NALGS; a++) {
			size_t hn = strlen(meta_header[a]);
			if (n > hn && line[hn] == ':' && strncasecmp(line, meta_header[a], hn) == 0) {
				header_value(line, n, q->got.hex, sizeof(q->got.hex));
				q->got.alg = a;
			}
		}
	}
	return n;
}

/* Stop requested, or no byte moved for timeout_ms: abort the transfer. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow,
		       curl_off_t ultotal, curl_off_t ulnow)
{
	struct s3_req *q = arg;
	uint64_t now = now_ns(), p = (uint64_t)dlnow + (uint64_t)ulnow;

	if (q->c->stop && *q->c->stop)
		return 1;
	if (p != q->progress || !q->progress_ns) {
		q->progress = p;
		q->progress_ns = now;
	} else if (now - q->progress_ns > (uint64_t)q->c->t->timeout_ms * 1000000ull) {
		q->timed_out = 1;
		return 1;
	}
	return 0;
}

/* --- XML -------------------------------------------------------------------- */

static xmlDocPtr xml_parse(const char *buf, size_t len)
{
	if (!buf || !len)
		return NULL;
	return xmlReadMemory(buf, (int)len, NULL, NULL,
			     XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
}

static int is_elem(xmlNodePtr n, const char *name)
{
	return n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0;
}

/* The text of the first child element called name, copied into out. */
static int child_text(xmlNodePtr parent, const char *name, char *out, size_t len)
{
	for (xmlNodePtr n = parent->children; n; n = n->next) {
		if (!is_elem(n, name))
			continue;
		xmlChar *t = xmlNodeGetContent(n);
		snprintf(out, len, "%s", t ? (const char *)t : "");
		xmlFree(t);
		return 0;
	}
	out[0] = '\0';
	return -ENOENT;
}

/* "403 AccessDenied: Access Denied" from an S3 error body, or the status;
 * code[64] gets the error's code ("" without one). */
static void error_text(const struct s3_req *q, char *code, char *out, size_t len)
{
	xmlDocPtr d = xml_parse(q->buf, q->buflen);
	xmlNodePtr r = d ? xmlDocGetRootElement(d) : NULL;
	char msg[256];

	code[0] = '\0';
	if (r && is_elem(r, "Error")) {
		child_text(r, "Code", code, 64);
		child_text(r, "Message", msg, sizeof(msg));
		snprintf(out, len, "%ld %s%s%s", q->status, code, msg[0] ? ": " : "", msg);
	} else {
		snprintf(out, len, "HTTP %ld", q->status);
	}
	xmlFreeDoc(d);
}

/* --- one request, with retries ----------------------------------------------- */

static int transient_status(long st)
{
	return st >= 500 || st == 429 || st == 408;
}

static void backoff(struct s3_conn *c, unsigned attempt)
{
	uint64_t ms = 200ull << (attempt < 5 ? attempt : 5);
	if (ms > 5000)
		ms = 5000;
	ms = ms / 2 + (uint64_t)rand() % (ms / 2 + 1);     /* jitter */
	for (uint64_t slept = 0; slept < ms && !(c->stop && *c->stop); slept += 20)
		usleep(20000);
}

static struct curl_slist *add_header(struct curl_slist *h, const char *name,
				     const char *value)
{
	char line[2200];
	snprintf(line, sizeof(line), "%s: %s", name, value);
	return curl_slist_append(h, line);
}

static int attempt(struct s3_conn *c, struct s3_req *q, const char *md5_b64,
		   const char *sha_hex, char *why, size_t whylen)
{
	const struct s3_target *t = c->t;
	CURL *h = c->curl;
	struct curl_slist *hdr = NULL;
	char url[2048], sigv4[128], code[64];
	CURLcode cr;

	q->status = 0;
	q->buflen = 0;
	q->sent = 0;
	q->fd_off = 0;
	q->etag[0] = q->got.hex[0] = '\0';
	q->have_length = q->timed_out = q->too_big = q->write_err = 0;
	q->progress = q->progress_ns = 0;
	if (q->fd >= 0 && ftruncate(q->fd, 0) < 0)
		return -errno;

	snprintf(url, sizeof(url), "%s/%s/%s%s%s", t->endpoint, t->bucket, q->key,
		 q->query ? "?" : "", q->query ? q->query : "");
	snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", t->region);
	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
	curl_easy_setopt(h, CURLOPT_USERNAME, t->key_id);
	curl_easy_setopt(h, CURLOPT_PASSWORD, t->secret);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)t->timeout_ms);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, q);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, q);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, q);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");

	hdr = add_header(hdr, "x-amz-content-sha256", sha_hex);
	/* no "Expect:" to turn off 100-continue: curl 7.88 would sign the
	 * empty header it does not send */
	if (t->token[0])
		hdr = add_header(hdr, "x-amz-security-token", t->token);
	if (strcmp(q->method, "PUT") == 0) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, q);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->len);
		hdr = add_header(hdr, "Content-MD5", md5_b64);
		if (q->meta)
			hdr = add_header(hdr, meta_header[q->meta->alg], q->meta->hex);
	} else if (strcmp(q->method, "POST") == 0) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->body ? q->body : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->len);
		hdr = curl_slist_append(hdr, "Content-Type: application/xml");
		if (q->len)
			hdr = add_header(hdr, "Content-MD5", md5_b64);
		if (q->meta)
			hdr = add_header(hdr, meta_header[q->meta->alg], q->meta->hex);
	} else if (strcmp(q->method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (strcmp(q->method, "DELETE") == 0) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);

	cr = curl_easy_perform(h);
	curl_slist_free_all(hdr);
	if (cr == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &q->status);

	if (c->stop && *c->stop) {
		snprintf(why, whylen, "stopped");
		return -ECANCELED;
	}
	if (q->write_err) {
		snprintf(why, whylen, "cannot write the download: %s", strerror(q->write_err));
		return -q->write_err;
	}
	if (q->too_big) {
		snprintf(why, whylen, "the reply is larger than expected");
		return -EFBIG;
	}
	if (cr != CURLE_OK) {
		snprintf(why, whylen, "%s", q->timed_out ?
			 "no progress within the time-out" : curl_easy_strerror(cr));
		return -EAGAIN;                    /* transport: worth another try */
	}
	if (q->status / 100 != 2) {
		error_text(q, code, why, whylen);
		if (transient_status(q->status))
			return -EAGAIN;
		/* a missing bucket is the store failing, not an absent object:
		 * callers read -ENOENT as "not there" (HEAD has no body to say) */
		if (q->status == 404)
			return strcmp(code, "NoSuchBucket") == 0 ? -EIO : -ENOENT;
		if (q->status == 401 || q->status == 403)
			return -EACCES;
		return -EIO;
	}
	/* CompleteMultipartUpload may fail with 200 and an <Error> body */
	if (strcmp(q->method, "POST") == 0 && q->buflen) {
		xmlDocPtr d = xml_parse(q->buf, q->buflen);
		xmlNodePtr r = d ? xmlDocGetRootElement(d) : NULL;
		int err = r && is_elem(r, "Error");
		xmlFreeDoc(d);
		if (err) {
			error_text(q, code, why, whylen);
			return -EAGAIN;
		}
	}
	if (q->check_etag && strlen(q->etag) == 32 && strspn(q->etag, "0123456789abcdef") == 32) {
		unsigned char md5[16];
		char want[33];
		digest(EVP_md5(), q->body, q->len, md5);
		hex(md5, 16, want);
		if (strcmp(want, q->etag) != 0) {
			snprintf(why, whylen, "the server stored other bytes (ETag %s, sent MD5 %s)",
				 q->etag, want);
			return -EAGAIN;              /* damaged on the way: send again */
		}
	}
	return 0;
}

static int request(struct s3_conn *c, struct s3_req *q)
{
	unsigned char md5[16], sha[32];
	char md5_b64[32], sha_hex[65], why[S3_MSG_MAX - 64];
	int r = 0;

	q->c = c;
	digest(EVP_md5(), q->body ? q->body : "", q->len, md5);
	EVP_EncodeBlock((unsigned char *)md5_b64, md5, 16);
	digest(EVP_sha256(), q->body ? q->body : "", q->len, sha);
	hex(sha, 32, sha_hex);
	for (unsigned a = 0; a <= c->t->retries; a++) {
		if (a) {
			c->retries++;
			backoff(c, a - 1);
		}
		r = attempt(c, q, md5_b64, sha_hex, why, sizeof(why));
		if (r != -EAGAIN)
			break;
	}
	if (r < 0) {
		/* a request on the bucket itself (a listing) has no key */
		const char *k = q->key, *qs = "";
		if (!k[0]) {
			k = c->t->bucket;
			qs = q->query ? q->query : "";
		}
		if (snprintf(c->msg, sizeof(c->msg), "%s %s%s%s: %s%s", q->method, k,
			     qs[0] ? "?" : "", qs, why,
			     r == -EAGAIN ? " (retries exhausted)" : "") >= (int)sizeof(c->msg))
			strcpy(c->msg + sizeof(c->msg) - 4, "...");   /* a long query */
		if (r == -EAGAIN)
			r = -EIO;
	}
	return r;
}

#define REQ(m, k) { .method = (m), .key = (k), .fd = -1 }

/* --- objects ------------------------------------------------------------------ */

int s3_put(struct s3_conn *c, const char *key, const void *buf, size_t len,
	   const struct digest *d)
{
	struct s3_req q = REQ("PUT", key);
	int r;

	q.body = buf;
	q.len = len;
	q.meta = d;
	q.check_etag = 1;
	r = request(c, &q);
	free(q.buf);
	return r;
}

int s3_mpu_create(struct s3_conn *c, const char *key, const struct digest *dg,
		  char *id, size_t idlen)
{
	struct s3_req q = REQ("POST", key);
	xmlDocPtr d;
	xmlNodePtr root;
	int r;

	q.query = "uploads=";
	q.meta = dg;
	q.max = S3_XML_MAX;
	if ((r = request(c, &q)) < 0)
		goto out;
	d = xml_parse(q.buf, q.buflen);
	root = d ? xmlDocGetRootElement(d) : NULL;
	if (!root || child_text(root, "UploadId", id, idlen) < 0 || !id[0]) {
		snprintf(c->msg, sizeof(c->msg), "POST %s?uploads: no UploadId in the reply", key);
		r = -EIO;
	}
	xmlFreeDoc(d);
out:
	free(q.buf);
	return r;
}

static void query_upload(char *out, size_t len, CURL *h, const char *id, int partno)
{
	char *e = curl_easy_escape(h, id, 0);
	if (partno)
		snprintf(out, len, "partNumber=%d&uploadId=%s", partno, e ? e : "");
	else
		snprintf(out, len, "uploadId=%s", e ? e : "");
	curl_free(e);
}

int s3_mpu_part(struct s3_conn *c, const char *key, const char *id, int partno,
		const void *buf, size_t len, char etag[80])
{
	struct s3_req q = REQ("PUT", key);
	char query[1024];
	int r;

	query_upload(query, sizeof(query), c->curl, id, partno);
	q.query = query;
	q.body = buf;
	q.len = len;
	q.check_etag = 1;
	if ((r = request(c, &q)) == 0)
		snprintf(etag, 80, "%s", q.etag);
	free(q.buf);
	return r;
}

int s3_mpu_complete(struct s3_conn *c, const char *key, const char *id,
		    char (*etags)[80], int nparts)
{
	struct s3_req q = REQ("POST", key);
	char query[1024], *body;
	size_t cap = 128 + (size_t)nparts * 160, n;
	int r;

	if (!(body = malloc(cap)))
		return -ENOMEM;
	n = (size_t)snprintf(body, cap, "<CompleteMultipartUpload>");
	for (int i = 0; i < nparts; i++)
		n += (size_t)snprintf(body + n, cap - n, "<Part><PartNumber>%d</PartNumber>"
				      "<ETag>\"%s\"</ETag></Part>", i + 1, etags[i]);
	n += (size_t)snprintf(body + n, cap - n, "</CompleteMultipartUpload>");
	query_upload(query, sizeof(query), c->curl, id, 0);
	q.query = query;
	q.body = body;
	q.len = n;
	q.max = S3_XML_MAX;
	r = request(c, &q);
	free(q.buf);
	free(body);
	return r;
}

int s3_mpu_abort(struct s3_conn *c, const char *key, const char *id)
{
	struct s3_req q = REQ("DELETE", key);
	char query[1024];
	int r;

	query_upload(query, sizeof(query), c->curl, id, 0);
	q.query = query;
	r = request(c, &q);
	free(q.buf);
	return r == -ENOENT ? 0 : r;
}

int s3_get_fd(struct s3_conn *c, const char *key, int fd, uint64_t max,
	      uint64_t *size)
{
	struct s3_req q = REQ("GET", key);
	int r;

	q.fd = fd;
	q.max = max;
	if ((r = request(c, &q)) == 0 && size)
		*size = q.fd_off;
	free(q.buf);
	return r;
}

int s3_get_buf(struct s3_conn *c, const char *key, size_t max, char **out,
	       size_t *outlen)
{
	struct s3_req q = REQ("GET", key);
	int r;

	q.max = max;
	if ((r = request(c, &q)) < 0) {
		free(q.buf);
		return r;
	}
	if (!q.buf && !(q.buf = calloc(1, 1)))
		return -ENOMEM;
	*out = q.buf;
	*outlen = q.buflen;
	return 0;
}

int s3_head(struct s3_conn *c, const char *key, uint64_t *size, struct digest *d)
{
	struct s3_req q = REQ("HEAD", key);
	int r;

	if ((r = request(c, &q)) == 0) {
		if (size)
			*size = q.length;
		if (d)
			*d = q.got;
	} else if (r == -ENOENT) {
		c->msg[0] = '\0';
	}
	free(q.buf);
	return r;
}

int s3_delete(struct s3_conn *c, const char *key)
{
	struct s3_req q = REQ("DELETE", key);
	int r = request(c, &q);

	free(q.buf);
	return r == -ENOENT ? 0 : r;
}

/* --- listing ---------------------------------------------------------------- */

/* GET on the bucket itself with a query; the parsed reply in *doc. */
static int bucket_get(struct s3_conn *c, const char *query, xmlDocPtr *doc)
{
	struct s3_req q = REQ("GET", "");
	int r;

	q.query = query;
	q.max = S3_XML_MAX;
	if ((r = request(c, &q)) == 0 && !(*doc = xml_parse(q.buf, q.buflen))) {
		snprintf(c->msg, sizeof(c->msg), "GET ?%.200s: the reply is not XML", query);
		r = -EIO;
	}
	free(q.buf);
	return r;
}

int s3_list(struct s3_conn *c, const char *prefix, int delimit, s3_list_cb cb,
	    void *arg)
{
	char token[1024] = "", query[3072], trunc[8];
	int r = 0;

	do {
		char *p = curl_easy_escape(c->curl, prefix, 0);
		char *tk = curl_easy_escape(c->curl, token, 0);
		xmlDocPtr d = NULL;
		/* parameters in byte order: curl signs the query as given */
		snprintf(query, sizeof(query), "%s%s%s%slist-type=2&prefix=%s",
			 token[0] ? "continuation-token=" : "", token[0] && tk ? tk : "",
			 token[0] ? "&" : "", delimit ? "delimiter=%2F&" : "", p ? p : "");
		curl_free(p);
		curl_free(tk);
		if ((r = bucket_get(c, query, &d)) < 0)
			return r;
		xmlNodePtr root = xmlDocGetRootElement(d);
		for (xmlNodePtr n = root ? root->children : NULL; n && !r; n = n->next) {
			char key[1024], size[32];
			if (is_elem(n, "Contents") && child_text(n, "Key", key, sizeof(key)) == 0) {
				child_text(n, "Size", size, sizeof(size));
				r = cb(arg, key, strtoull(size, NULL, 10));
			} else if (is_elem(n, "CommonPrefixes") &&
				   child_text(n, "Prefix", key, sizeof(key)) == 0) {
				r = cb(arg, key, UINT64_MAX);
			}
		}
		if (root) {
			child_text(root, "IsTruncated", trunc, sizeof(trunc));
			child_text(root, "NextContinuationToken", token, sizeof(token));
		}
		xmlFreeDoc(d);
		if (!root || strcmp(trunc, "true") != 0)
			token[0] = '\0';
	} while (!r && token[0]);
	return r;
}

int s3_list_uploads(struct s3_conn *c, const char *prefix, s3_uploads_cb cb,
		    void *arg)
{
	char kmark[1024] = "", umark[512] = "", query[3072], trunc[8];
	int r = 0;

	do {
		char *p = curl_easy_escape(c->curl, prefix, 0);
		char *k = curl_easy_escape(c->curl, kmark, 0);
		char *u = curl_easy_escape(c->curl, umark, 0);
		xmlDocPtr d = NULL;
		snprintf(query, sizeof(query), "%s%s%sprefix=%s%s%s%suploads=",
			 kmark[0] ? "key-marker=" : "", kmark[0] && k ? k : "",
			 kmark[0] ? "&" : "", p ? p : "",
			 umark[0] ? "&upload-id-marker=" : "", umark[0] && u ? u : "",
			 "&");
		curl_free(p);
		curl_free(k);
		curl_free(u);
		if ((r = bucket_get(c, query, &d)) < 0)
			return r;
		xmlNodePtr root = xmlDocGetRootElement(d);
		for (xmlNodePtr n = root ? root->children : NULL; n && !r; n = n->next) {
			char key[1024], id[512];
			if (is_elem(n, "Upload") && child_text(n, "Key", key, sizeof(key)) == 0 &&
			    child_text(n, "UploadId", id, sizeof(id)) == 0)
				r = cb(arg, key, id);
		}
		trunc[0] = '\0';
		if (root) {
			child_text(root, "IsTruncated", trunc, sizeof(trunc));
			child_text(root, "NextKeyMarker", kmark, sizeof(kmark));
			child_text(root, "NextUploadIdMarker", umark, sizeof(umark));
		}
		xmlFreeDoc(d);
	} while (!r && strcmp(trunc, "true") == 0 && kmark[0]);
	return r;
}
