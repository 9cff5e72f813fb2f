/*
 * fuzz_conf.c - libFuzzer target for the configuration loader (src/conf.c):
 * conf_load over a config file's bytes, plus command-line options.
 *
 * Input: the file's bytes, optionally followed by "\0ARGV\0" and options,
 * one per line ("--key", "value", "--key=value" ...). The file is handed to
 * conf_load by path through a memfd, so the real reader runs. Checked,
 * aborting on violation:
 *   - conf_load returns the number of error lines it appended, and every
 *     line names where it comes from ("FILE:LINE: " or "command line: ");
 *   - a configuration that loads is dumped (conf_write_effective) into a
 *     file that loads again without errors, and whose dump is the same
 *     (the effective dump is valid config syntax and a fixed point);
 *   - --help, the sample and the dump never crash.
 * Seed corpus: tests/fuzz/corpus/conf/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pc_conf.h"
#include "pc_server.h"
#include "pc_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ARGS 64
static const char argv_mark[] = "\0ARGV\0";

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_conf: %s\n%s\n", what, detail != NULL ? detail : "");
    abort();
}

/* A file of the process whose content is set per input; its path for conf_load. */
static int conf_file(char *path, size_t n)
{
    static int fd = -1;
    if (fd < 0)
        fd = memfd_create("fuzz-conf", 0);
    if (fd < 0)
        abort();
    snprintf(path, n, "/proc/self/fd/%d", fd);
    return fd;
}

static void set_file(const char *bytes, size_t len, char *path, size_t n)
{
    int fd = conf_file(path, n);
    if (ftruncate(fd, 0) < 0 || (len > 0 && pwrite(fd, bytes, len, 0) != (ssize_t)len))
        abort();
}

/* Options: the lines after the mark (copied, NUL-terminated). */
static int split_args(const char *p, size_t len, char **argv, char *store)
{
    int argc = 0;
    memcpy(store, p, len);
    store[len] = '\0';
    for (char *s = store; argc < MAX_ARGS && s <= store + len;) {
        char *nl = memchr(s, '\n', (size_t)(store + len - s));
        if (nl != NULL)
            *nl = '\0';
        argv[argc++] = s;
        if (nl == NULL)
            break;
        s = nl + 1;
    }
    return argc;
}

static int count_lines(const struct pc_buf *b)
{
    int n = 0;
    for (size_t i = 0; i < b->len; i++)
        n += b->data[i] == '\n';
    return n;
}

/* Every error line starts with where it comes from. */
static void check_errors(const struct pc_buf *errs, const char *path, int nerr)
{
    if (count_lines(errs) != nerr)
        fail("error count and error lines differ", pc_buf_cstr((struct pc_buf *)errs));
    size_t plen = strlen(path);
    for (size_t i = 0; i < errs->len;) {
        const char *line = errs->data + i;
        bool file = strncmp(line, path, plen) == 0 && line[plen] == ':';
        if (!file && strncmp(line, "command line: ", 14) != 0)
            fail("an error line does not say where", line);
        const char *nl = memchr(line, '\n', errs->len - i);
        i = nl != NULL ? (size_t)(nl - errs->data) + 1 : errs->len;
    }
}

/* The dump of a valid conf loads again, cleanly, to the same dump. */
static void check_dump(const struct conf *c, char *path, size_t n)
{
    struct pc_buf d1 = PC_BUF_INIT, d2 = PC_BUF_INIT, errs = PC_BUF_INIT;
    conf_write_effective(c, &d1);
    set_file(d1.data, d1.len, path, n);
    struct conf *c2 = conf_create();
    if (conf_load(c2, path, 0, NULL, &errs) != 0)
        fail("the effective dump does not load again", pc_buf_cstr(&errs));
    conf_write_effective(c2, &d2);
    if (d1.len != d2.len || memcmp(d1.data, d2.data, d1.len) != 0)
        fail("the effective dump is not a fixed point", pc_buf_cstr(&d1));
    conf_destroy(&c2);
    pc_buf_free(&d1);
    pc_buf_free(&d2);
    pc_buf_free(&errs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool once;
    char path[64], *argv[MAX_ARGS];
    const char *mark = memmem(data, size, argv_mark, sizeof(argv_mark) - 1);
    size_t flen = mark != NULL ? (size_t)(mark - (const char *)data) : size;
    char *store = pc_malloc(size + 1);
    int argc = 0;
    if (mark != NULL) {
        size_t skip = flen + sizeof(argv_mark) - 1;
        argc = split_args((const char *)data + skip, size - skip, argv, store);
    }
    set_file((const char *)data, flen, path, sizeof(path));
    if (server_add_conf_rules() < 0) /* the modules' checks, as main registers them */
        fail("server_add_conf_rules", "a rule names no key");
    struct conf *c = conf_create();
    struct pc_buf errs = PC_BUF_INIT;
    int nerr = conf_load(c, path, argc, argv, &errs);
    check_errors(&errs, path, nerr);
    if (nerr == 0)
        check_dump(c, path, sizeof(path));
    if (!once) { /* input-independent: once is enough */
        struct pc_buf b = PC_BUF_INIT;
        conf_write_help(&b);
        conf_write_sample(&b);
        pc_buf_free(&b);
        once = true;
    }
    conf_destroy(&c);
    pc_buf_free(&errs);
    free(store);
    return 0;
}
