/* log.c - stderr logging with optional syslog priority prefixes. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static int log_lvl = LOG_LVL_INFO;
static int log_prefix;       /* "<N>" prefixes for journald */

void log_init(int level)
{
	log_lvl = level;
	log_prefix = getenv("JOURNAL_STREAM") != NULL ||
		     getenv("NOTIFY_SOCKET") != NULL;
}

void log_set_level(int level) { log_lvl = level; }

int log_level_parse(const char *s)
{
	static const struct { const char *name; int lvl; } t[] = {
		{"error", LOG_LVL_ERR}, {"warn", LOG_LVL_WARN},
		{"info", LOG_LVL_INFO}, {"debug", LOG_LVL_DEBUG},
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (strcmp(s, t[i].name) == 0)
			return t[i].lvl;
	return -1;
}

static void log_emit(int lvl, int with_errno, int saved, const char *fmt, va_list ap)
{
	char msg[2048];
	if (lvl > log_lvl)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (log_prefix)
		fprintf(stderr, "<%d>", lvl);
	if (with_errno)
		fprintf(stderr, "ckptd: %s: %s\n", msg, strerror(saved));
	else
		fprintf(stderr, "ckptd: %s\n", msg);
}

#define LOG_BODY(lvl, with_errno) do { int saved = errno; va_list ap; \
	va_start(ap, fmt); log_emit(lvl, with_errno, saved, fmt, ap); va_end(ap); \
	errno = saved; } while (0)

void log_warn(const char *fmt, ...)  { LOG_BODY(LOG_LVL_WARN, 1); }
void log_warnx(const char *fmt, ...) { LOG_BODY(LOG_LVL_WARN, 0); }
void log_info(const char *fmt, ...)  { LOG_BODY(LOG_LVL_INFO, 0); }
void log_debug(const char *fmt, ...) { LOG_BODY(LOG_LVL_DEBUG, 0); }
void fatal(const char *fmt, ...)     { LOG_BODY(LOG_LVL_ERR, 1); exit(1); }
void fatalx(const char *fmt, ...)    { LOG_BODY(LOG_LVL_ERR, 0); exit(1); }
