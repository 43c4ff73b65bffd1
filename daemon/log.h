/* log.h - ckptd logging, OpenBSD style, to stderr (journald keeps it).
 * Under systemd (JOURNAL_STREAM set) lines carry "<N>" priority prefixes. */
#ifndef CKPT_LOG_H
#define CKPT_LOG_H

#include <stdnoreturn.h>

enum log_level { LOG_LVL_ERR = 3, LOG_LVL_WARN = 4, LOG_LVL_INFO = 6, LOG_LVL_DEBUG = 7 };

void log_init(int level);          /* also decides on prefixes */
void log_set_level(int level);
int  log_level_parse(const char *s); /* "error".."debug" -> level, -1 bad */

#define LOG_FMT __attribute__((format(printf, 1, 2)))
void log_warn(const char *fmt, ...) LOG_FMT;    /* appends strerror(errno) */
void log_warnx(const char *fmt, ...) LOG_FMT;
void log_info(const char *fmt, ...) LOG_FMT;
void log_debug(const char *fmt, ...) LOG_FMT;
noreturn void fatal(const char *fmt, ...) LOG_FMT;   /* with strerror(errno), exit 1 */
noreturn void fatalx(const char *fmt, ...) LOG_FMT;

#endif
