/* ctl_fmt.c - how ckptctl shows things: sizes, durations, ages, progress
 * bars, aligned tables, user names, JSON members with defaults.
 */
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"

/* "512 B", "1.5 KiB", "12.0 GiB". */
const char *fmt_bytes(uint64_t n, char *buf, size_t len)
{
	static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB", "PiB",
					    "EiB" };
	double v = (double)n;
	int u = -1;

	if (n < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)n);
		return buf;
	}
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

/* A duration with at most two units: "12s", "4m 3s", "2h 5m", "3d 4h". */
const char *fmt_duration(uint64_t s, char *buf, size_t len)
{
	if (s < 60)
		snprintf(buf, len, "%llus", (unsigned long long)s);
	else if (s < 3600)
		snprintf(buf, len, "%llum %llus", (unsigned long long)s / 60,
			 (unsigned long long)s % 60);
	else if (s < 86400)
		snprintf(buf, len, "%lluh %llum", (unsigned long long)s / 3600,
			 (unsigned long long)s % 3600 / 60);
	else
		snprintf(buf, len, "%llud %lluh", (unsigned long long)s / 86400,
			 (unsigned long long)s % 86400 / 3600);
	return buf;
}

/* "12s ago" for a unix time; clocks that disagree say "just now". */
const char *fmt_age(int64_t when, char *buf, size_t len)
{
	int64_t now = (int64_t)time(NULL);
	char d[32];

	if (when >= now) {
		snprintf(buf, len, "just now");
		return buf;
	}
	snprintf(buf, len, "%s ago", fmt_duration((uint64_t)(now - when), d,
						  sizeof(d)));
	return buf;
}

const char *fmt_time(int64_t when, char *buf, size_t len)
{
	time_t t = (time_t)when;
	struct tm tm;

	if (!localtime_r(&t, &tm) ||
	    !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%lld", (long long)when);
	return buf;
}

/* "[#######.............]" for a fraction 0..1, width cells inside. */
const char *fmt_bar(double frac, int width, char *buf, size_t len)
{
	int fill;

	if (!(frac >= 0))
		frac = 0;
	if (frac > 1)
		frac = 1;
	if (width > (int)len - 3)
		width = (int)len - 3;
	fill = (int)(frac * width + 0.5);
	buf[0] = '[';
	for (int i = 0; i < width; i++)
		buf[1 + i] = i < fill ? '#' : '.';
	buf[1 + width] = ']';
	buf[2 + width] = '\0';
	return buf;
}

void table_init(struct table *t, const char *spec)
{
	/* spec: "NAME,>NUM,..." - a leading '>' right-aligns the column. */
	char *save = NULL, *tok;

	memset(t, 0, sizeof(*t));
	snprintf(t->spec, sizeof(t->spec), "%s", spec);
	for (tok = strtok_r(t->spec, ",", &save);
	     tok && t->ncols < TABLE_MAX_COLS;
	     tok = strtok_r(NULL, ",", &save)) {
		t->right[t->ncols] = tok[0] == '>';
		t->head[t->ncols++] = tok + (tok[0] == '>');
	}
}

void table_row(struct table *t, ...)
{
	va_list ap;

	if (t->nrows == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 16;
		void *p = realloc(t->cells, ncap * sizeof(*t->cells));
		if (!p)
			die(EXIT_FAIL, "out of memory");
		t->cells = p;
		t->cap = ncap;
	}
	va_start(ap, t);
	for (int i = 0; i < t->ncols; i++) {
		const char *s = va_arg(ap, const char *);
		snprintf(t->cells[t->nrows][i], TABLE_CELL, "%s", s ? s : "-");
	}
	va_end(ap);
	t->nrows++;
}

void table_print(struct table *t, FILE *f, const char *indent)
{
	int w[TABLE_MAX_COLS];

	for (int i = 0; i < t->ncols; i++) {
		w[i] = (int)strlen(t->head[i]);
		for (size_t r = 0; r < t->nrows; r++) {
			int l = (int)strlen(t->cells[r][i]);
			if (l > w[i])
				w[i] = l;
		}
	}
	for (size_t r = 0; r <= t->nrows; r++) {
		fputs(indent, f);
		for (int i = 0; i < t->ncols; i++) {
			const char *s = r ? t->cells[r - 1][i] : t->head[i];

			if (t->right[i])
				fprintf(f, "%*s", w[i], s);
			else if (i == t->ncols - 1)
				fputs(s, f);          /* no trailing blanks */
			else
				fprintf(f, "%-*s", w[i], s);
			if (i < t->ncols - 1)
				fputs("  ", f);
		}
		fputc('\n', f);
	}
	table_free(t);
}

void table_free(struct table *t)
{
	free(t->cells);
	t->cells = NULL;
	t->nrows = t->cap = 0;
}

uint64_t jget_u64(const json_t *o, const char *key, uint64_t dflt)
{
	json_t *v = json_object_get(o, key);

	return json_is_integer(v) && json_integer_value(v) >= 0 ?
	       (uint64_t)json_integer_value(v) : dflt;
}

const char *jget_str(const json_t *o, const char *key, const char *dflt)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : dflt;
}

const char *fmt_u64(uint64_t v, char *buf, size_t len)
{
	snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
}

void print_json(const json_t *j)
{
	json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
}

const char *fmt_owner(uint64_t uid, char *buf, size_t len)
{
	struct passwd pw, *res = NULL;
	char tmp[1024];

	if (getpwuid_r((uid_t)uid, &pw, tmp, sizeof(tmp), &res) == 0 && res)
		snprintf(buf, len, "%s", res->pw_name);
	else
		snprintf(buf, len, "%llu", (unsigned long long)uid);
	return buf;
}
