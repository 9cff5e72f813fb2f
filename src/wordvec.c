/*
 * wordvec.c - the memory-mapped word-vector file (format in pc_wordvec.h).
 * Owns the mapping: wordvec_open maps the file read-only and validates every
 * size, offset and index in it before anything is looked up, so a lookup can
 * never read outside the mapping; wordvec_close unmaps it. After open the
 * view is immutable and lookups take no lock.
 */
#include "pc_wordvec.h"
#include "pc_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define WORDVEC_OBJ_MAGIC 0x57564543u /* "WVEC" */

struct wordvec {
    unsigned magic;
    const unsigned char *base; /* the mapping */
    size_t size;
    const struct wordvec_header *h;
    const char *words;
    const struct wordvec_entry *entries;
    const uint32_t *table;
    const unsigned char *vectors;
    uint64_t record; /* bytes per vector record */
    char source[sizeof(((struct wordvec_header *)0)->source)];
};

static void wv_err(char *err, size_t errlen, const char *fmt, ...) PC_PRINTF(3, 4);
static void wv_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Section [off, off+len) is aligned, inside the file and starts at or after min. */
static bool section_ok(uint64_t off, uint64_t len, uint64_t min, uint64_t size)
{
    return off % WORDVEC_ALIGN == 0 && off >= min && off <= size && len <= size - off;
}

static int check_header(const struct wordvec_header *h, size_t size, char *err, size_t errlen)
{
    if (memcmp(h->magic, WORDVEC_MAGIC, 8) != 0)
        return wv_err(err, errlen, "not a promptcache word-vector file (bad magic)"), -1;
    if (h->byte_order != WORDVEC_BYTE_ORDER)
        return wv_err(err, errlen, "written on a host of another byte order"), -1;
    if (h->version != WORDVEC_VERSION)
        return wv_err(err, errlen, "format version %u, this build reads %d", h->version,
                      WORDVEC_VERSION),
               -1;
    if (h->file_size != size)
        return wv_err(err, errlen, "truncated or extended: %zu bytes, header says %llu", size,
                      (unsigned long long)h->file_size),
               -1;
    bool ok = h->dim >= 1 && h->dim <= WORDVEC_MAX_DIM && h->count >= 1 &&
              h->count <= WORDVEC_MAX_COUNT && h->nbuckets >= 2 * (uint64_t)h->count &&
              h->nbuckets <= 4 * WORDVEC_MAX_COUNT && (h->nbuckets & (h->nbuckets - 1)) == 0 &&
              (h->qtype == WORDVEC_F32 || h->qtype == WORDVEC_I8) && h->max_len >= 1 &&
              h->max_len <= WORDVEC_MAX_LEN && memchr(h->source, '\0', sizeof h->source) != NULL;
    if (!ok)
        return wv_err(err, errlen, "corrupt header (dimensions, counts or type)"), -1;
    return 0;
}

static int check_sections(const struct wordvec_header *h, size_t size, char *err, size_t errlen)
{
    uint64_t rec = wordvec_record_size(h->qtype, h->dim);
    bool ok =
        section_ok(h->words_off, h->words_len, sizeof *h, size) &&
        section_ok(h->entries_off, (uint64_t)h->count * sizeof(struct wordvec_entry),
                   h->words_off + h->words_len, size) &&
        section_ok(h->table_off, (uint64_t)h->nbuckets * 4,
                   h->entries_off + (uint64_t)h->count * sizeof(struct wordvec_entry), size) &&
        section_ok(h->vectors_off, (uint64_t)h->count * rec,
                   h->table_off + (uint64_t)h->nbuckets * 4, size) &&
        size % 8 == 0;
    if (!ok)
        return wv_err(err, errlen, "corrupt header (section offsets)"), -1;
    uint64_t sum = wordvec_checksum((const unsigned char *)h + sizeof *h, size - sizeof *h);
    if (sum != h->checksum)
        return wv_err(err, errlen, "checksum mismatch (corrupt file)"), -1;
    return 0;
}

/* Every entry inside the words section, every bucket a valid index. */
static int check_index(const struct wordvec *wv, char *err, size_t errlen)
{
    const struct wordvec_header *h = wv->h;
    for (uint32_t i = 0; i < h->count; i++) {
        const struct wordvec_entry *e = &wv->entries[i];
        if (e->len == 0 || e->len > h->max_len || e->off > h->words_len ||
            e->len > h->words_len - e->off)
            return wv_err(err, errlen, "corrupt word entry %u", i), -1;
    }
    for (uint32_t b = 0; b < h->nbuckets; b++)
        if (wv->table[b] > h->count)
            return wv_err(err, errlen, "corrupt hash table bucket %u", b), -1;
    return 0;
}

static struct wordvec *wv_map(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        wv_err(err, errlen, "%s: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    struct stat st;
    void *base = MAP_FAILED;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        wv_err(err, errlen, "%s: not a regular file", path);
    else if ((size_t)st.st_size < sizeof(struct wordvec_header))
        wv_err(err, errlen, "%s: truncated (%lld bytes)", path, (long long)st.st_size);
    else if ((base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED)
        wv_err(err, errlen, "%s: mmap: %s", path, strerror(errno));
    close(fd);
    if (base == MAP_FAILED) {
        errno = EINVAL;
        return NULL;
    }
    struct wordvec *wv = pc_calloc(1, sizeof *wv);
    wv->magic = WORDVEC_OBJ_MAGIC;
    wv->base = base;
    wv->size = (size_t)st.st_size;
    wv->h = base;
    return wv;
}

struct wordvec *wordvec_open(const char *path, char *err, size_t errlen)
{
    struct wordvec *wv = wv_map(path, err, errlen);
    if (wv == NULL)
        return NULL;
    char why[200];
    const struct wordvec_header *h = wv->h;
    if (check_header(h, wv->size, why, sizeof why) < 0 ||
        check_sections(h, wv->size, why, sizeof why) < 0) {
        wv_err(err, errlen, "%s: %s", path, why);
        wordvec_close(&wv);
        errno = EINVAL;
        return NULL;
    }
    wv->words = (const char *)wv->base + h->words_off;
    wv->entries = (const struct wordvec_entry *)(wv->base + h->entries_off);
    wv->table = (const uint32_t *)(wv->base + h->table_off);
    wv->vectors = wv->base + h->vectors_off;
    wv->record = wordvec_record_size(h->qtype, h->dim);
    memcpy(wv->source, h->source, sizeof wv->source);
    if (check_index(wv, why, sizeof why) < 0) {
        wv_err(err, errlen, "%s: %s", path, why);
        wordvec_close(&wv);
        errno = EINVAL;
        return NULL;
    }
    return wv;
}

void wordvec_close(struct wordvec **wvp)
{
    struct wordvec *wv = *wvp;
    if (wv == NULL)
        return;
    PC_CHECK_OBJ(wv, WORDVEC_OBJ_MAGIC);
    munmap((void *)wv->base, wv->size);
    wv->magic = 0;
    free(wv);
    *wvp = NULL;
}

int wordvec_dim(const struct wordvec *wv)
{
    return (int)wv->h->dim;
}

uint32_t wordvec_count(const struct wordvec *wv)
{
    return wv->h->count;
}

const char *wordvec_source(const struct wordvec *wv)
{
    return wv->source;
}

/* Linear probing; at most nbuckets probes even if the table had no empty bucket. */
int32_t wordvec_find(const struct wordvec *wv, const char *w, size_t n)
{
    if (n == 0 || n > wv->h->max_len)
        return -1;
    uint32_t mask = wv->h->nbuckets - 1;
    uint32_t b = wordvec_hash(w, n) & mask;
    for (uint32_t probes = 0; probes <= mask; probes++, b = (b + 1) & mask) {
        uint32_t slot = wv->table[b];
        if (slot == 0)
            return -1;
        const struct wordvec_entry *e = &wv->entries[slot - 1];
        if (e->len == n && memcmp(wv->words + e->off, w, n) == 0)
            return (int32_t)(slot - 1);
    }
    return -1;
}

const char *wordvec_word(const struct wordvec *wv, uint32_t i, size_t *n)
{
    *n = wv->entries[i].len;
    return wv->words + wv->entries[i].off;
}

void wordvec_add(const struct wordvec *wv, uint32_t i, float scale, float *acc)
{
    const unsigned char *r = wv->vectors + (uint64_t)i * wv->record;
    int dim = (int)wv->h->dim;
    if (wv->h->qtype == WORDVEC_I8) {
        float s;
        memcpy(&s, r, 4);
        s *= scale;
        const int8_t *q = (const int8_t *)(r + 4);
        for (int d = 0; d < dim; d++)
            acc[d] += s * (float)q[d];
        return;
    }
    for (int d = 0; d < dim; d++) {
        float v;
        memcpy(&v, r + 4 * (size_t)d, 4);
        acc[d] += scale * v;
    }
}
