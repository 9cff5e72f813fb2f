/*
 * embed/embedders.h - the embedders, one line each: X(ID, NAME), where NAME
 * is the `embedder` value and embed_ID_ops the operations table of
 * src/embed/ID.c. The config table reads the names from here (conf.c:
 * validation, -t, --help, the manual and the sample config) and embed.c
 * builds the table behind embed_create from the same lines, so the value
 * struct conf holds is a position in this list. No includes: anything may
 * read it.
 *
 * Adding an embedder: its file, src/embed/ID.c, and its line here.
 */
#ifndef PC_EMBED_EMBEDDERS_H
#define PC_EMBED_EMBEDDERS_H

#define EMBEDDER_LIST(X)                    \
    X(builtin, "builtin") /* the default */ \
    X(hash, "hash")                         \
    X(openai, "openai")                     \
    /* one line per embedder, in the order of the values conf holds */

#endif
