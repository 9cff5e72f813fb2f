/*
 * jcall.c - JSON-over-HTTP calls of the proxy's own (see pc_jcall.h). Owns
 * the struct jcall: its xfer, its deadline timer and the body collected so
 * far. Ends exactly once: on the xfer's completion, on the deadline, or on
 * cancel (then silently).
 */
#include "pc_jcall.h"
#include "pc_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#define JCALL_MAGIC       0x4a43414cu /* "JCAL" */
#define JCALL_MAX_HEADERS 8

struct jcall {
    unsigned magic;
    struct xfer *x;
    struct event *deadline;
    jcall_fn *cb;
    void *arg;
    int status;
    size_t max_response;
    bool too_large;
    struct pc_buf body;
};

static void jcall_free(struct jcall *j)
{
    xfer_abort(&j->x);
    if (j->deadline != NULL)
        event_free(j->deadline);
    pc_buf_free(&j->body);
    j->magic = 0;
    free(j);
}

/* Hand the outcome to the caller and free (the callback may start new calls). */
static void jcall_finish(struct jcall *j, const char *err)
{
    cJSON *json = NULL;
    if (err == NULL && j->body.len > 0)
        json = cJSON_ParseWithLength(j->body.data, j->body.len);
    if (err == NULL && json == NULL)
        err = "the answer is not JSON";
    jcall_fn *cb = j->cb;
    void *arg = j->arg;
    int status = j->status;
    jcall_free(j);
    cb(arg, status, json, err);
    cJSON_Delete(json);
}

static void on_head(void *arg, int status, const struct xfer_header *h, size_t nh)
{
    (void)h;
    (void)nh;
    struct jcall *j = arg;
    PC_CHECK_OBJ(j, JCALL_MAGIC);
    j->status = status;
}

static int on_data(void *arg, const char *data, size_t len)
{
    struct jcall *j = arg;
    PC_CHECK_OBJ(j, JCALL_MAGIC);
    if (j->body.len + len > j->max_response) {
        j->too_large = true;
        return XFER_CONTINUE; /* dropped; on_done reports it */
    }
    pc_buf_append(&j->body, data, len);
    return XFER_CONTINUE;
}

static void on_done(void *arg, enum xfer_result result, const char *errmsg)
{
    struct jcall *j = arg;
    PC_CHECK_OBJ(j, JCALL_MAGIC);
    j->x = NULL;
    if (result != XFER_OK)
        jcall_finish(j, errmsg != NULL ? errmsg : "failed");
    else if (j->too_large)
        jcall_finish(j, "the answer is too large");
    else
        jcall_finish(j, NULL);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct jcall *j = arg;
    PC_CHECK_OBJ(j, JCALL_MAGIC);
    j->status = 0;
    jcall_finish(j, "timed out");
}

static const struct xfer_ops jcall_ops = {on_head, on_data, on_done};

struct jcall *jcall_post(struct upstream *up, struct event_base *base, const struct jcall_req *r,
                         jcall_fn *cb, void *arg)
{
    struct xfer_header hdrs[JCALL_MAX_HEADERS + 1];
    size_t nh = 0;
    for (size_t i = 0; i < r->nheaders && nh < JCALL_MAX_HEADERS; i++)
        hdrs[nh++] = r->headers[i];
    hdrs[nh++] = (struct xfer_header){"Content-Type", "application/json"};
    struct jcall *j = pc_calloc(1, sizeof(*j));
    j->magic = JCALL_MAGIC;
    j->cb = cb;
    j->arg = arg;
    j->max_response = r->max_response;
    double secs = (double)r->timeout_ms / 1000.0;
    struct xfer_req xr = {
        .method = "POST",
        .url = r->url,
        .headers = hdrs,
        .nheaders = nh,
        .body = r->body,
        .body_len = r->body_len,
        .timeout = secs,
        .connect_timeout = secs,
    };
    j->deadline = event_new(base, -1, 0, on_deadline, j);
    j->x = xfer_start(up, &xr, &jcall_ops, j);
    if (j->deadline == NULL || j->x == NULL) {
        jcall_free(j);
        return NULL;
    }
    struct timeval tv = pc_timeval_ms(r->timeout_ms);
    event_add(j->deadline, &tv);
    return j;
}

void jcall_cancel(struct jcall **jp)
{
    struct jcall *j = *jp;
    if (j == NULL)
        return;
    *jp = NULL;
    PC_CHECK_OBJ(j, JCALL_MAGIC);
    jcall_free(j);
}

int64_t jcall_count(const cJSON *v)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
        return 0;
    return (int64_t)fmin(v->valuedouble, 1e15); /* exact as a double, far beyond any count */
}
