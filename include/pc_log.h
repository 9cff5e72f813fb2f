/*
 * pc_log.h - the daemon log (human-readable lines on stderr or a file) and the
 * access log (one JSON object per line). Both are safe to call from any
 * thread: every line is written with a single write(2).
 *
 * Contract for callers: never pass credentials or prompt text.
 *
 * The bottom of the module graph: this module includes and calls no other
 * (util reports its fatal errors through it).
 */
#ifndef PC_LOG_H
#define PC_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum pc_log_level {
    PC_LOG_ERROR = 0,
    PC_LOG_WARN,
    PC_LOG_NOTICE,
    PC_LOG_INFO,
    PC_LOG_DEBUG,
};

/*
 * Open the logs. path NULL, "" or "stderr" logs to stderr; access_path NULL,
 * "" or "off" disables the access log, "stdout"/"stderr" use those streams,
 * anything else is a file opened for append. Returns 0, or -1 with errbuf set.
 */
int log_init(enum pc_log_level level, const char *path, const char *access_path, char *errbuf,
             size_t errlen);
/*
 * For -t: 0 if path (the value of key log-file or access-log) could be opened
 * as log_init opens it (stderr, stdout and off always can), else -1 with
 * errbuf set ("log-file PATH: cannot open for appending: REASON"). Writes
 * nothing and creates no file: a missing file needs a writable directory.
 */
int log_check(const char *key, const char *path, char *errbuf, size_t errlen);
void log_teardown(void);
/*
 * Reopen the log files (not stderr/stdout) by path, for log rotation: lines
 * written from now on go to whatever file the path names now. Safe while
 * other threads log. Returns 0, or -1 with errbuf set (that log keeps its
 * old file).
 */
int log_reopen(char *errbuf, size_t errlen);
/* Change the level at runtime (from any thread). */
void log_set_level(enum pc_log_level level);
/* Parse "error", "warn", "notice", "info", "debug"; -1 if unknown. */
int log_level_parse(const char *name);
bool log_enabled(enum pc_log_level level);

/* reqid may be NULL; it is printed in brackets so lines of one request can be grepped. */
void log_write(enum pc_log_level level, const char *reqid, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_error(...)  log_write(PC_LOG_ERROR, NULL, __VA_ARGS__)
#define log_warn(...)   log_write(PC_LOG_WARN, NULL, __VA_ARGS__)
#define log_notice(...) log_write(PC_LOG_NOTICE, NULL, __VA_ARGS__)
#define log_info(...)   log_write(PC_LOG_INFO, NULL, __VA_ARGS__)
#define log_debug(...)                                  \
    do {                                                \
        if (log_enabled(PC_LOG_DEBUG))                  \
            log_write(PC_LOG_DEBUG, NULL, __VA_ARGS__); \
    } while (0)

/* Append one line (a newline is added) to the access log, if it is enabled. */
void log_access(const char *line, size_t len);
bool log_access_enabled(void);

#endif
