/*
 * log.c - daemon log and access log (see pc_log.h). Owns the two file
 * descriptors and the paths they were opened from; lines are formatted on the
 * stack and written with one write(2) so concurrent workers never interleave
 * within a line.
 *
 * Reopening (SIGHUP, after logrotate renamed the files): the new file is
 * opened and dup3()'d onto the same descriptor number, which replaces the
 * open file atomically. Threads keep writing to the same number; a write in
 * progress finishes in the old file, the next one lands in the new file, and
 * no descriptor number is ever closed under a writer.
 *
 * The level may change at runtime (reload): it is read and written with
 * relaxed atomics, as it orders nothing else.
 *
 * Nothing here calls another module of the project: util.c logs its fatal
 * errors (out of memory, a bad object) through log_write, so this module
 * allocates and formats its time stamps with the C library alone.
 */
#include "pc_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int log_fd = STDERR_FILENO;
static int access_fd = -1;
static int log_level = PC_LOG_NOTICE; /* enum pc_log_level, atomic */
static char *log_path;                /* the files behind log_fd / access_fd, NULL if none */
static char *access_path;

#define PC_LOG_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LOG_STAMP_LEN    80 /* "2025-01-02T03:04:05.678Z": room for any year, as PC_ISO8601_LEN */

static const char level_char[] = {'E', 'W', 'N', 'I', 'D'};
static const char *const level_names[] = {"error", "warn", "notice", "info", "debug"};

/*
 * Open path for appending, creating it. Non-blocking, so that a FIFO nobody
 * reads fails at once (ENXIO) instead of holding the start or a SIGHUP
 * forever; the writes then block as on any log file.
 */
static int open_log(const char *path)
{
    int f = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0640);
    if (f < 0)
        return -1;
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(f);
        errno = e;
        return -1;
    }
    return f;
}

static int open_target(const char *key, const char *path, int *fd, char *errbuf, size_t errlen)
{
    if (strcmp(path, "stderr") == 0) {
        *fd = STDERR_FILENO;
        return 0;
    }
    if (strcmp(path, "stdout") == 0) {
        *fd = STDOUT_FILENO;
        return 0;
    }
    int f = open_log(path);
    if (f < 0) {
        snprintf(errbuf, errlen, "cannot open %s %s: %s%s", key, path, strerror(errno),
                 errno == ENXIO ? " (a FIFO nobody reads)" : "");
        return -1;
    }
    *fd = f;
    return 0;
}

/* A path that names a file (not stderr/stdout), kept for reopening; else NULL. */
static char *file_path(const char *path, int fd)
{
    if (fd <= STDERR_FILENO)
        return NULL;
    char *copy = strdup(path);
    if (copy == NULL)
        abort(); /* as pc_strdup would; there is no log to report it in yet */
    return copy;
}

int log_init(enum pc_log_level level, const char *path, const char *apath, char *errbuf,
             size_t errlen)
{
    log_set_level(level);
    if (path != NULL && *path != '\0') {
        if (open_target("log-file", path, &log_fd, errbuf, errlen) < 0)
            return -1;
        log_path = file_path(path, log_fd);
    }
    if (apath != NULL && *apath != '\0' && strcmp(apath, "off") != 0) {
        if (open_target("access-log", apath, &access_fd, errbuf, errlen) < 0)
            return -1;
        access_path = file_path(apath, access_fd);
    }
    return 0;
}

int log_check(const char *key, const char *path, char *errbuf, size_t errlen)
{
    if (path == NULL || *path == '\0' || strcmp(path, "stderr") == 0 ||
        strcmp(path, "stdout") == 0 || strcmp(path, "off") == 0)
        return 0;
    /* An existing file: opened for appending as a start would (a FIFO nobody reads fails),
     * nothing written. */
    int f = open(path, O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f >= 0) {
        close(f);
        return 0;
    }
    int err = errno;
    if (err == ENOENT) {
        /* Not there yet: a start creates it, if its directory lets it. Not created here (a
         * check run by another user would leave a file the proxy's user cannot write). */
        char *dir = strdup(path);
        if (dir == NULL)
            abort();
        char *slash = strrchr(dir, '/');
        const char *d = slash == NULL ? "." : slash == dir ? "/" : dir;
        if (slash != NULL && slash != dir)
            *slash = '\0';
        err = access(d, W_OK | X_OK) == 0 ? 0 : errno;
        free(dir);
        if (err == 0)
            return 0;
    }
    snprintf(errbuf, errlen, "%s %s: cannot open for appending: %s%s", key, path, strerror(err),
             err == ENXIO ? " (a FIFO nobody reads)" : "");
    return -1;
}

void log_teardown(void)
{
    if (log_fd > STDERR_FILENO)
        close(log_fd);
    if (access_fd > STDERR_FILENO)
        close(access_fd);
    log_fd = STDERR_FILENO;
    access_fd = -1;
    free(log_path);
    free(access_path);
    log_path = access_path = NULL;
}

/* Open path anew and put it in place of fd (same number). */
static int reopen_one(const char *path, int fd, char *errbuf, size_t errlen)
{
    int f = open_log(path);
    if (f < 0) {
        snprintf(errbuf, errlen, "cannot reopen %s: %s%s (still writing to the old file)", path,
                 strerror(errno), errno == ENXIO ? ", a FIFO nobody reads" : "");
        return -1;
    }
    int rc = 0;
    if (dup3(f, fd, O_CLOEXEC) < 0) {
        snprintf(errbuf, errlen, "cannot reopen %s: %s (still writing to the old file)", path,
                 strerror(errno));
        rc = -1;
    }
    close(f);
    return rc;
}

int log_reopen(char *errbuf, size_t errlen)
{
    int rc = 0;
    if (log_path != NULL && reopen_one(log_path, log_fd, errbuf, errlen) < 0)
        rc = -1;
    if (access_path != NULL && reopen_one(access_path, access_fd, errbuf, errlen) < 0)
        rc = -1;
    return rc;
}

void log_set_level(enum pc_log_level level)
{
    __atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
}

int log_level_parse(const char *name)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
        if (strcmp(name, level_names[i]) == 0)
            return (int)i;
    return -1;
}

bool log_enabled(enum pc_log_level level)
{
    return (int)level <= __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

/* 0, or the errno of the write that failed (the rest of the line is dropped). */
static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/*
 * A log that cannot be written (a full disk, /dev/full, a closed pipe): its
 * lines are lost, and a line nobody reads cannot say so. The first failure
 * is said once where it can be read (a failing log file on stderr, a failing
 * access log in the daemon log), and so is the first line written again,
 * with the count lost in between. Never blocks, never retries.
 */
struct sink_health {
    int err;       /* atomic: errno of the failure under way, 0 while lines are written */
    uint64_t lost; /* atomic: lines lost since it began */
};

static struct sink_health log_health, access_health;

static const char *sink_name(const char *path, int fd)
{
    return path != NULL ? path : fd == STDOUT_FILENO ? "stdout" : "stderr";
}

static void log_stamp(char out[LOG_STAMP_LEN]);

/* The failing daemon log's own message: straight to stderr, unless it is stderr. */
static void say_on_stderr(const char *name, int err)
{
    if (log_fd == STDERR_FILENO)
        return;
    char line[1024], ts[LOG_STAMP_LEN];
    log_stamp(ts);
    int n = snprintf(line, sizeof(line),
                     "%s %d E cannot write to log-file %.512s: %s; its lines are lost until it "
                     "can\n",
                     ts, (int)getpid(), name, strerror(err));
    if (n > 0)
        (void)write_all(STDERR_FILENO, line, PC_LOG_MIN((size_t)n, sizeof(line) - 1));
}

/*
 * After a write to a log (rc: write_all's result): its first failure is said
 * once (the daemon log's on stderr, the access log's in the daemon log), and
 * the first line written again says how many were lost.
 */
static void sink_result(struct sink_health *h, const char *key, const char *name, int rc)
{
    if (rc != 0) {
        __atomic_add_fetch(&h->lost, 1, __ATOMIC_RELAXED);
        if (__atomic_exchange_n(&h->err, rc, __ATOMIC_ACQ_REL) != 0)
            return;
        if (h == &log_health)
            say_on_stderr(name, rc);
        else
            log_write(PC_LOG_ERROR, NULL,
                      "cannot write to %s %s: %s; its lines are lost until it can", key, name,
                      strerror(rc));
        return;
    }
    if (__atomic_load_n(&h->err, __ATOMIC_RELAXED) == 0 ||
        __atomic_exchange_n(&h->err, 0, __ATOMIC_ACQ_REL) == 0)
        return;
    unsigned long long lost = __atomic_exchange_n(&h->lost, 0, __ATOMIC_RELAXED);
    log_write(PC_LOG_NOTICE, NULL, "%s %s: written again (%llu line%s lost)", key, name, lost,
              lost == 1 ? "" : "s");
}

static void log_file_result(int rc)
{
    sink_result(&log_health, "log-file", sink_name(log_path, log_fd), rc);
}

static void access_result(int rc)
{
    sink_result(&access_health, "access-log", sink_name(access_path, access_fd), rc);
}

/* The time now as pc_iso8601 writes it (UTC, milliseconds). */
static void log_stamp(char out[LOG_STAMP_LEN])
{
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    time_t secs = (time_t)(ms / 1000);
    gmtime_r(&secs, &tm);
    snprintf(out, LOG_STAMP_LEN, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

/*
 * src[0..n) into out (room for outlen bytes and a newline), each control
 * character as \xNN: a client's string in a message (a model name, an
 * upstream's error text) can neither end the line and write one of its own
 * nor move a terminal's cursor. Cut where out is full. Returns the length.
 */
static size_t log_escape(const char *src, size_t n, char *out, size_t outlen)
{
    static const char hexd[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        bool ctl = c < 0x20 || c == 0x7f;
        if (o + (ctl ? 4 : 1) > outlen)
            break;
        if (!ctl) {
            out[o++] = (char)c;
            continue;
        }
        out[o++] = '\\';
        out[o++] = 'x';
        out[o++] = hexd[c >> 4];
        out[o++] = hexd[c & 15];
    }
    return o;
}

void log_write(enum pc_log_level level, const char *reqid, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    char line[2048], msg[2048];
    char ts[LOG_STAMP_LEN];
    log_stamp(ts);
    int n = snprintf(line, sizeof(line), "%s %d %c ", ts, (int)getpid(), level_char[level]);
    if (reqid != NULL && n > 0 && (size_t)n < sizeof(line))
        n += snprintf(line + n, sizeof(line) - (size_t)n, "[%s] ", reqid);
    if (n < 0)
        return;
    n = (int)PC_LOG_MIN((size_t)n, sizeof(line) - 1);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (m > 0) /* truncated at the buffers' size, with room for the newline */
        n += (int)log_escape(msg, PC_LOG_MIN((size_t)m, sizeof(msg) - 1), line + n,
                             sizeof(line) - 1 - (size_t)n);
    line[n++] = '\n';
    log_file_result(write_all(log_fd, line, (size_t)n));
}

bool log_access_enabled(void)
{
    return access_fd >= 0;
}

void log_access(const char *line, size_t len)
{
    if (access_fd < 0)
        return;
    char stackbuf[1024];
    if (len + 1 <= sizeof(stackbuf)) {
        memcpy(stackbuf, line, len);
        stackbuf[len] = '\n';
        access_result(write_all(access_fd, stackbuf, len + 1));
        return;
    }
    char *tmp = malloc(len + 1);
    if (tmp == NULL) {
        log_write(PC_LOG_ERROR, NULL, "out of memory allocating %zu bytes", len + 1);
        abort(); /* as pc_malloc would */
    }
    memcpy(tmp, line, len);
    tmp[len] = '\n';
    int rc = write_all(access_fd, tmp, len + 1);
    free(tmp);
    access_result(rc);
}
