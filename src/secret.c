/*
 * secret.c - secrets read from files (see pc_secret.h). Owns nothing beyond
 * one call: the file is opened, checked, read and closed; the caller owns
 * the buffer that receives the secret. Also the opening of every file a
 * reload reads again (secret_open_regular).
 */
#include "pc_secret.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int secret_has_ctl(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < ' ' || s[i] == 0x7f)
            return 1;
    return 0;
}

void secret_buf_free(struct pc_buf *b)
{
    if (b->data != NULL)
        memset(b->data, 0, b->cap);
    pc_buf_free(b);
}

/* Group or world access is worth a warning: a secret file should be 0600 or 0400. */
static void check_mode(const char *path, const struct stat *st, char *warn, size_t warnlen)
{
    warn[0] = '\0';
    if ((st->st_mode & (S_IRWXG | S_IRWXO)) != 0)
        snprintf(warn, warnlen,
                 "%s is accessible to its group or to other users (mode %04o); "
                 "chmod 600 it",
                 path, (unsigned)(st->st_mode & 07777));
}

/* Read at most SECRET_FILE_MAX + 1 bytes of fd into out. */
static int read_capped(int fd, struct pc_buf *out, char *err, size_t errlen, const char *path)
{
    char chunk[4096];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
            memset(chunk, 0, sizeof chunk);
            return -1;
        }
        if (n == 0)
            break;
        pc_buf_append(out, chunk, (size_t)n);
        if (out->len > SECRET_FILE_MAX)
            break;
    }
    memset(chunk, 0, sizeof chunk);
    if (out->len > SECRET_FILE_MAX) {
        snprintf(err, errlen, "%s is too large for a secret (more than %d bytes)", path,
                 SECRET_FILE_MAX);
        return -1;
    }
    return 0;
}

/* Strip trailing CR/LF and check what is left. */
static int finish(struct pc_buf *out, const char *path, char *err, size_t errlen)
{
    while (out->len > 0 && (out->data[out->len - 1] == '\n' || out->data[out->len - 1] == '\r'))
        out->data[--out->len] = '\0';
    if (out->len == 0) {
        snprintf(err, errlen, "%s is empty", path);
        return -1;
    }
    if (secret_has_ctl(out->data, out->len)) {
        snprintf(err, errlen,
                 "%s holds a control character or a line break inside the secret "
                 "(it must hold the secret alone, on one line)",
                 path);
        return -1;
    }
    pc_buf_cstr(out);
    return 0;
}

int secret_open_regular(const char *path, struct stat *st)
{
    /* O_NONBLOCK: opening a FIFO with no writer must not block; it is refused below. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return -2;
    }
    return fd;
}

int secret_read_file(const char *path, struct pc_buf *out, char *err, size_t errlen, char *warn,
                     size_t warnlen)
{
    pc_buf_reset(out);
    warn[0] = '\0';
    if (*path == '\0') {
        snprintf(err, errlen, "empty file name");
        return -1;
    }
    struct stat st;
    int fd = secret_open_regular(path, &st);
    if (fd == -2)
        snprintf(err, errlen, "%s is not a regular file", path);
    else if (fd < 0)
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    if (fd < 0)
        return -1;
    int rc = -1;
    if (st.st_size > SECRET_FILE_MAX)
        snprintf(err, errlen, "%s is too large for a secret (%lld bytes, at most %d)", path,
                 (long long)st.st_size, SECRET_FILE_MAX);
    else if (read_capped(fd, out, err, errlen, path) == 0 && finish(out, path, err, errlen) == 0)
        rc = 0;
    if (rc == 0)
        check_mode(path, &st, warn, warnlen);
    else
        secret_buf_free(out);
    close(fd);
    return rc;
}
