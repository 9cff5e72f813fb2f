/*
 * pc_verify.h - the grey-zone verifier of the semantic cache: asks a small
 * OpenAI-compatible chat model (semantic-verify-url, semantic-verify-model)
 * whether two requests ask the same thing, with a one-token answer at
 * temperature 0. Anything but a clear yes within semantic-verify-timeout is
 * a no: a wrong answer served with confidence costs more than a miss.
 */
#ifndef PC_VERIFY_H
#define PC_VERIFY_H

#include <stdbool.h>
#include <stddef.h>

struct conf;
struct event_base;
struct stats;
struct upstream;
struct verify;
struct verify_op;

enum verify_answer {
    VERIFY_YES = 0,
    VERIFY_NO,
    VERIFY_FAILED, /* error, timeout or an answer that is neither yes nor no */
};

typedef void verify_fn(void *arg, enum verify_answer a);

/*
 * Bytes of a request the requests' question shows, whole: a longer one is not asked about (the
 * model would say yes to a difference it never saw). The semantic stage matches texts of
 * SEMANTIC_TEXT_MAX (4092) bytes at most, which fit.
 */
#define VERIFY_TEXT_MAX 4096

/*
 * Bytes of each answer the answers' question shows (each request is cut to fewer): answers
 * compared by the model must be no longer, or it would judge their beginnings only.
 */
#define VERIFY_ANSWER_MAX 8192

/* The endpoint URL: as given if it ends in /chat/completions, else + /v1/chat/completions. */
void verify_url(const char *configured, char *out, size_t outlen);
/*
 * The request body asking about a and b (for tests and the note's token count): 0, or -1 (no
 * body) when either is longer than VERIFY_TEXT_MAX bytes.
 */
int verify_body(const char *model, const char *a, const char *b, char **out, size_t *len);
/* The body asking whether answers a and b say the same (semantic-verify-answers model). */
void verify_answers_body(const char *model, const char *a, const char *b, char **out, size_t *len);
/* The answer of a chat completion: yes, no, or failed. */
enum verify_answer verify_parse(const char *content);

/* NULL when no verifier is configured (semantic-verify-url empty). */
struct verify *verify_create(const struct conf *c, struct event_base *base, struct upstream *up,
                             struct stats *st);
void verify_destroy(struct verify **v);

/*
 * NULL (no callback) if the call cannot start, or a text is longer than VERIFY_TEXT_MAX (counted
 * in semantic_verify_errors): treat as VERIFY_FAILED.
 */
struct verify_op *verify_ask(struct verify *v, const char *a, const char *b, verify_fn *cb,
                             void *arg);
/* The same for two answers to one request (the error bound's model comparator). */
struct verify_op *verify_ask_answers(struct verify *v, const char *a, const char *b, verify_fn *cb,
                                     void *arg);
void verify_cancel(struct verify_op **op);

#endif
