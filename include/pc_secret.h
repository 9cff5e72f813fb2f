/*
 * pc_secret.h - reading a secret (an API key, a token, a password) from a
 * file, as the config's KEY-file options and PROMPTCACHE_KEY_FILE variables
 * do. The file holds the secret alone; trailing line breaks are removed.
 *
 * Contract: neither the secret nor any part of the file's content ever
 * appears in an error or warning text.
 */
#ifndef PC_SECRET_H
#define PC_SECRET_H

#include <stddef.h>
#include <sys/stat.h>

#include "pc_util.h"

#define SECRET_FILE_MAX (64 * 1024) /* bytes; a secret is far smaller */

/*
 * Read the secret in the file at path into out (reset first; its memory is
 * wiped by secret_buf_free). Returns 0, or -1 with a message in err when the
 * file is missing, unreadable, not a regular file, larger than
 * SECRET_FILE_MAX, empty once trailing line breaks are removed, or holds a
 * control character (such as a line break inside the secret). On success
 * warn receives a message (else "") when the file is readable or writable by
 * its group or by others.
 */
int secret_read_file(const char *path, struct pc_buf *out, char *err, size_t errlen, char *warn,
                     size_t warnlen);

/*
 * Open path for reading, as every file that a reload (SIGHUP) reads again
 * should be: a regular file only, and the open never blocks. A FIFO with no
 * writer would block the reload (and with it the main thread, which then
 * never sees SIGTERM); a pipe read at start (/dev/stdin, <(...)) reads as
 * empty the second time. Returns the descriptor (O_CLOEXEC; O_NONBLOCK,
 * which a regular file ignores) and fills st; -1 with errno when open or
 * fstat fails; -2 when path is not a regular file.
 */
int secret_open_regular(const char *path, struct stat *st);

/* Whether s holds a control character (which no header or AUTH may carry). */
int secret_has_ctl(const char *s, size_t n);

/* Wipe and free a buffer that held a secret. */
void secret_buf_free(struct pc_buf *b);

#endif
