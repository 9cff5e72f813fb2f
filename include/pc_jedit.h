/*
 * pc_jedit.h - editing a JSON text in place: a small scanner that finds the
 * byte spans of values, members and array elements, and a list of splices
 * applied in one pass. Used where the proxy adds fields to a client's body
 * (KV-cache hints, stream_options) or removes one from an upstream event
 * (usage: null): every byte outside the splices is kept as the client wrote
 * it, so numbers keep their digits (cJSON would round integers beyond 2^53)
 * and the upstream sees the client's own spelling.
 *
 *   body ─▶ jedit_value / jedit_member / jedit_next ─▶ spans
 *        ─▶ jedit_insert / jedit_replace / jedit_add_member ─▶ struct jedit
 *        ─▶ jedit_apply ─▶ new body
 *
 * The scanner checks structure (brackets, strings, literals, numbers' bytes)
 * but is not a validator: callers pass text a JSON parser has accepted, and
 * anything the scanner cannot follow makes it fail (then no edit is made).
 * White space is what cJSON skips (any byte up to 0x20 but NUL), so text
 * the proxy's parser accepted is followed the same way.
 * Member names are compared after decoding their escapes, so "a\u0062" is
 * the member b, as a JSON parser sees it; of duplicate names, the last one
 * counts (as in api_member).
 */
#ifndef PC_JEDIT_H
#define PC_JEDIT_H

#include <stdbool.h>
#include <stddef.h>

#include "pc_util.h"

/* A value's bytes: text[start..end). */
struct jspan {
    size_t start;
    size_t end;
};

/*
 * text[p] is '"': the offset just past the quote that closes the string, or 0
 * if none does (escapes are not checked, only skipped).
 */
size_t jedit_string_end(const char *text, size_t len, size_t p);

/* The value starting at or after pos (white space skipped); false if none can be read. */
bool jedit_value(const char *text, size_t len, size_t pos, struct jspan *v);
/* Whether v is an object / an array / a string / the literal null. */
bool jedit_is_object(const char *text, const struct jspan *v);
bool jedit_is_array(const char *text, const struct jspan *v);
bool jedit_is_string(const char *text, const struct jspan *v);
bool jedit_is_null(const char *text, const struct jspan *v);
bool jedit_is_true(const char *text, const struct jspan *v);

/*
 * The value of the last member named key in object obj (key and val may be
 * NULL if not wanted: key receives the span of the member's name, quotes
 * included). False if obj is not an object or has no such member.
 */
bool jedit_member(const char *text, const struct jspan *obj, const char *key, struct jspan *name,
                  struct jspan *val);

/*
 * Iterate over an array's elements or an object's member values: start with
 * *cursor = 0; each call fills elem (and, for an object, name) and returns
 * true, or returns false after the last one.
 */
bool jedit_next(const char *text, const struct jspan *container, size_t *cursor, struct jspan *name,
                struct jspan *elem);
/* Number of elements (array) or members (object). */
size_t jedit_count(const char *text, const struct jspan *container);

/* The decoded text of a string value into out (appended); false if not a string. */
bool jedit_string(const char *text, const struct jspan *v, struct pc_buf *out);

/* A list of splices on one text; offsets refer to the original text. */
struct jedit_op {
    size_t at;  /* where the removed bytes start */
    size_t del; /* bytes removed */
    char *ins;  /* bytes inserted there (owned) */
    size_t ins_len;
};

struct jedit {
    struct jedit_op *v;
    size_t n;
    size_t cap;
};

#define JEDIT_INIT \
    {              \
        NULL, 0, 0 \
    }

void jedit_insert(struct jedit *e, size_t at, const char *s, size_t n);
void jedit_replace(struct jedit *e, const struct jspan *span, const char *s, size_t n);
/*
 * Add "key":value_json as the last member of object obj (with the comma it
 * needs); nothing if obj's members cannot all be followed. The key is
 * written as given: a plain ASCII name.
 */
void jedit_add_member(struct jedit *e, const char *text, const struct jspan *obj, const char *key,
                      const char *value_json);
/* The same when the caller knows how many members obj has (jedit_members). */
void jedit_add_member_counted(struct jedit *e, const struct jspan *obj, size_t members,
                              const char *key, const char *value_json);
/*
 * Every member of object obj, in order, into names/vals (up to max); *n is
 * set. False if obj is not an object, has more than max members, or cannot
 * all be followed.
 */
bool jedit_members(const char *text, const struct jspan *obj, struct jspan *names,
                   struct jspan *vals, size_t max, size_t *n);
/* Whether the member name at span name decodes to key. */
bool jedit_name_is(const char *text, const struct jspan *name, const char *key);
/* Remove a member (name, value and one adjoining comma) given its name and value spans. */
void jedit_remove_member(struct jedit *e, const char *text, const struct jspan *obj,
                         const struct jspan *name, const struct jspan *val);
/*
 * Append text with every splice made to out. Splices must not overlap;
 * they may be added in any order (equal positions keep their order).
 */
void jedit_apply(const struct jedit *e, const char *text, size_t len, struct pc_buf *out);
void jedit_free(struct jedit *e);

#endif
