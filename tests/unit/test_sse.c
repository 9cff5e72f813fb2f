/*
 * test_sse.c - server-sent events (src/sse.c) and the dialects over them
 * (src/dialect/): the W3C parser's edge cases, assembling realistic OpenAI
 * chat / completions, Anthropic and Responses API streams into the
 * non-stream answers, rejecting cut-off and failed streams, synthesizing
 * streams that assemble back to the same answer, replay and the usage filter.
 *
 * Fixtures are written with ' for " and ` for \" (see q()) so the JSON stays
 * readable; a literal apostrophe in text is written \u0027.
 */
#include "pc_dialect.h"
#include "t.h"

/* --- helpers ------------------------------------------------------------- */

/* s with ' -> " and ` -> \" ; caller frees. */
static char *q(const char *s)
{
    struct pc_buf b = PC_BUF_INIT;
    for (; *s; s++) {
        if (*s == '\'')
            pc_buf_append_char(&b, '"');
        else if (*s == '`')
            pc_buf_append_str(&b, "\\\"");
        else
            pc_buf_append_char(&b, *s);
    }
    return pc_buf_cstr(&b);
}

static cJSON *json_q(const char *s)
{
    char *t = q(s);
    cJSON *j = cJSON_Parse(t);
    if (j == NULL)
        fprintf(stderr, "  bad fixture JSON: %s\n", t);
    free(t);
    return j;
}

static cJSON *assemble_q(enum api_endpoint e, const char *rec, struct api_usage *u)
{
    char *t = q(rec);
    cJSON *j = dialect_assemble(e, t, strlen(t), u);
    free(t);
    return j;
}

static bool complete_q(enum api_endpoint e, const char *rec)
{
    char *t = q(rec);
    bool ok = dialect_complete(e, t, strlen(t));
    free(t);
    return ok;
}

/* Whether got equals the JSON fixture want; prints both when not. */
static bool same_json(const cJSON *got, const char *want)
{
    cJSON *w = json_q(want);
    bool ok = got != NULL && w != NULL && cJSON_Compare(got, w, true);
    if (!ok) {
        char *g = got ? cJSON_PrintUnformatted(got) : NULL;
        char *x = w ? cJSON_PrintUnformatted(w) : NULL;
        fprintf(stderr, "  got:  %s\n  want: %s\n", g ? g : "(null)", x ? x : "(null)");
        cJSON_free(g);
        cJSON_free(x);
    }
    cJSON_Delete(w);
    return ok;
}

/* Events collected as "[event|data]" so two feedings can be compared. */
struct collect {
    struct pc_buf out;
    int n;
    int fail_at; /* callback returns -1 on this event number (1-based), 0 = never */
};

static int collect_cb(void *arg, const struct sse_event *ev)
{
    struct collect *c = arg;
    c->n++;
    pc_buf_append_char(&c->out, '[');
    pc_buf_append(&c->out, ev->event, ev->event_len);
    pc_buf_append_char(&c->out, '|');
    pc_buf_append(&c->out, ev->data, ev->data_len);
    pc_buf_append_char(&c->out, ']');
    return c->n == c->fail_at ? -1 : 0;
}

/* Feed s in pieces of step bytes (0 = all at once); returns the events seen. */
static char *parse_steps(const char *s, size_t len, size_t step, int *rc)
{
    struct sse_parser p;
    struct collect c = {PC_BUF_INIT, 0, 0};
    sse_parser_init(&p);
    *rc = 0;
    for (size_t i = 0; i < len && *rc == 0; i += step ? step : len)
        *rc = sse_parser_feed(&p, s + i, PC_MIN(step ? step : len, len - i), collect_cb, &c);
    sse_parser_free(&p);
    return pc_buf_cstr(&c.out);
}

static char *parse_all(const char *s)
{
    int rc;
    char *ev = parse_steps(s, strlen(s), 0, &rc);
    T_CHECK_INT(rc, 0);
    return ev;
}

/* --- fixtures -------------------------------------------------------------- */

/*
 * Recorded streams as the APIs send them, and the answers they stand for.
 * Kept away from clang-format, which cannot lay out macro-built string tables.
 */
/* clang-format off */
#define CHAT_HEAD \
    "data: {'id':'chatcmpl-AbC1','object':'chat.completion.chunk','created':1727000000," \
    "'model':'gpt-4o-mini-2024-07-18','service_tier':'default','system_fingerprint':'fp_0ba0d1'," \
    "'choices':["
#define CHAT_CHUNK(choice) CHAT_HEAD choice "],'usage':null}\n\n"
#define DONE "data: [DONE]\n\n"

/* Content answer, with stream_options.include_usage. */
static const char chat_stream[] =
    CHAT_CHUNK("{'index':0,'delta':{'role':'assistant','content':'','refusal':null},"
               "'logprobs':null,'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'content':'Hello'},'logprobs':null,'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'content':'! How can I'},'logprobs':null,'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'content':' help you today?'},'logprobs':null,"
               "'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{},'logprobs':null,'finish_reason':'stop'}")
    CHAT_HEAD "],'usage':{'prompt_tokens':19,'completion_tokens':10,'total_tokens':29,"
              "'prompt_tokens_details':{'cached_tokens':0,'audio_tokens':0},"
              "'completion_tokens_details':{'reasoning_tokens':0,'audio_tokens':0,"
              "'accepted_prediction_tokens':0,'rejected_prediction_tokens':0}}}\n\n"
    DONE;

static const char chat_answer[] =
    "{'id':'chatcmpl-AbC1','object':'chat.completion','created':1727000000,"
    "'model':'gpt-4o-mini-2024-07-18','choices':[{'index':0,'message':{'role':'assistant',"
    "'content':'Hello! How can I help you today?','refusal':null},'logprobs':null,"
    "'finish_reason':'stop'}],'usage':{'prompt_tokens':19,'completion_tokens':10,"
    "'total_tokens':29,'prompt_tokens_details':{'cached_tokens':0,'audio_tokens':0},"
    "'completion_tokens_details':{'reasoning_tokens':0,'audio_tokens':0,"
    "'accepted_prediction_tokens':0,'rejected_prediction_tokens':0}},"
    "'service_tier':'default','system_fingerprint':'fp_0ba0d1'}";

/* Two parallel tool calls, arguments split mid-token; usage with cached tokens. */
static const char chat_tools_stream[] =
    CHAT_CHUNK("{'index':0,'delta':{'role':'assistant','content':null,'tool_calls':[{'index':0,"
               "'id':'call_Paris','type':'function','function':{'name':'get_weather',"
               "'arguments':''}}],'refusal':null},'logprobs':null,'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'tool_calls':[{'index':0,'function':{'arguments':'{`lo'}}]},"
               "'logprobs':null,'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'tool_calls':[{'index':0,'function':{'arguments':"
               "'cation`: `Par'}}]},'logprobs':null,'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'tool_calls':[{'index':0,'function':{'arguments':'is`}'}}]},"
               "'logprobs':null,'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'tool_calls':[{'index':1,'id':'call_Time','type':'function',"
               "'function':{'name':'get_time','arguments':''}}]},'logprobs':null,"
               "'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'tool_calls':[{'index':1,'function':{'arguments':"
               "'{`tz`: `Europe/Paris`}'}}]},'logprobs':null,'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{},'logprobs':null,'finish_reason':'tool_calls'}")
    CHAT_HEAD "],'usage':{'prompt_tokens':1200,'completion_tokens':45,'total_tokens':1245,"
              "'prompt_tokens_details':{'cached_tokens':1024}}}\n\n"
    DONE;

static const char chat_tools_answer[] =
    "{'id':'chatcmpl-AbC1','object':'chat.completion','created':1727000000,"
    "'model':'gpt-4o-mini-2024-07-18','service_tier':'default',"
    "'system_fingerprint':'fp_0ba0d1','choices':[{'index':0,'message':{'role':'assistant',"
    "'content':null,'refusal':null,'tool_calls':["
    "{'id':'call_Paris','type':'function','function':{'name':'get_weather',"
    "'arguments':'{`location`: `Paris`}'}},"
    "{'id':'call_Time','type':'function','function':{'name':'get_time',"
    "'arguments':'{`tz`: `Europe/Paris`}'}}]},'logprobs':null,'finish_reason':'tool_calls'}],"
    "'usage':{'prompt_tokens':1200,'completion_tokens':45,'total_tokens':1245,"
    "'prompt_tokens_details':{'cached_tokens':1024}}}";

/* n=2, choices interleaved, logprobs requested, no usage chunk. */
#define LP(tok) \
    "{'content':[{'token':'" tok "','logprob':-0.5,'bytes':null,'top_logprobs':[]}],'refusal':null}"
static const char chat_n2_stream[] =
    CHAT_CHUNK("{'index':0,'delta':{'role':'assistant','content':''},'logprobs':null,"
               "'finish_reason':null}")
    CHAT_CHUNK("{'index':1,'delta':{'role':'assistant','content':''},'logprobs':null,"
               "'finish_reason':null}")
    CHAT_CHUNK("{'index':1,'delta':{'content':'Bonjour'},'logprobs':" LP("Bonjour") ","
               "'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'content':'Hi'},'logprobs':" LP("Hi") ",'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'content':' there'},'logprobs':" LP(" there") ","
               "'finish_reason':null}")
    CHAT_CHUNK("{'index':1,'delta':{},'logprobs':null,'finish_reason':'length'}")
    CHAT_CHUNK("{'index':0,'delta':{},'logprobs':null,'finish_reason':'stop'}")
    DONE;

static const char chat_n2_answer[] =
    "{'id':'chatcmpl-AbC1','object':'chat.completion','created':1727000000,"
    "'model':'gpt-4o-mini-2024-07-18','service_tier':'default',"
    "'system_fingerprint':'fp_0ba0d1','choices':["
    "{'index':0,'message':{'role':'assistant','content':'Hi there'},"
    "'logprobs':{'content':[{'token':'Hi','logprob':-0.5,'bytes':null,'top_logprobs':[]},"
    "{'token':' there','logprob':-0.5,'bytes':null,'top_logprobs':[]}],'refusal':null},"
    "'finish_reason':'stop'},"
    "{'index':1,'message':{'role':'assistant','content':'Bonjour'},"
    "'logprobs':{'content':[{'token':'Bonjour','logprob':-0.5,'bytes':null,'top_logprobs':[]}],"
    "'refusal':null},'finish_reason':'length'}]}";

/* Refusal and reasoning_content (vLLM, DeepSeek) pieces. */
static const char chat_extras_stream[] =
    CHAT_CHUNK("{'index':0,'delta':{'role':'assistant','content':null,'refusal':null},"
               "'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'reasoning_content':'Think'},'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'reasoning_content':'ing.'},'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'refusal':'I can\\u0027t'},'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'refusal':' help.'},'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{},'finish_reason':'stop'}")
    DONE;

/* Tool-call deltas without "index", as some OpenAI-compatible servers send them. */
static const char chat_noindex_stream[] =
    CHAT_CHUNK("{'index':0,'delta':{'role':'assistant','tool_calls':[{'id':'a','type':"
               "'function','function':{'name':'f','arguments':'{'}}]},'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'tool_calls':[{'function':{'arguments':'}'}}]},"
               "'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{'tool_calls':[{'id':'b','function':{'name':'g',"
               "'arguments':'[]'}}]},'finish_reason':'tool_calls'}")
    DONE;

/* Azure: content-filter chunks with an empty id/model and created 0, first and last. */
static const char chat_azure_stream[] =
    "data: {'choices':[],'created':0,'id':'','model':'','object':'',"
    "'prompt_filter_results':[{'prompt_index':0,'content_filter_results':"
    "{'hate':{'filtered':false,'severity':'safe'}}}]}\n\n"
    CHAT_CHUNK("{'index':0,'delta':{'role':'assistant','content':'Hi'},'finish_reason':null}")
    CHAT_CHUNK("{'index':0,'delta':{},'finish_reason':'stop'}")
    "data: {'choices':[{'content_filter_offsets':{'check_offset':0,'start_offset':0,"
    "'end_offset':2},'content_filter_results':{},'finish_reason':null,'index':0}],"
    "'created':0,'id':'','model':'','object':''}\n\n"
    DONE;

/* An error chunk before [DONE]. */
static const char chat_error_stream[] =
    CHAT_CHUNK("{'index':0,'delta':{'content':'Hi'},'finish_reason':null}")
    "data: {'error':{'message':'The server had an error','type':'server_error'}}\n\n"
    DONE;

#define CMPL_HEAD \
    "data: {'id':'cmpl-9xYz','object':'text_completion','created':1727000100," \
    "'model':'gpt-3.5-turbo-instruct','choices':["
#define CMPL_CHUNK(choice) CMPL_HEAD choice "],'usage':null}\n\n"

static const char cmpl_stream[] =
    CMPL_CHUNK("{'text':'\\n\\nThis','index':0,'logprobs':null,'finish_reason':null}")
    CMPL_CHUNK("{'text':' is a','index':0,'logprobs':null,'finish_reason':null}")
    CMPL_CHUNK("{'text':' test.','index':0,'logprobs':null,'finish_reason':null}")
    CMPL_CHUNK("{'text':'','index':0,'logprobs':null,'finish_reason':'length'}")
    CMPL_HEAD "],'usage':{'prompt_tokens':5,'completion_tokens':7,'total_tokens':12}}\n\n"
    DONE;

static const char cmpl_answer[] =
    "{'id':'cmpl-9xYz','object':'text_completion','created':1727000100,"
    "'model':'gpt-3.5-turbo-instruct','choices':[{'text':'\\n\\nThis is a test.','index':0,"
    "'logprobs':null,'finish_reason':'length'}],"
    "'usage':{'prompt_tokens':5,'completion_tokens':7,'total_tokens':12}}";

/* Completions logprobs: every array inside concatenates. */
static const char cmpl_lp_stream[] =
    CMPL_CHUNK("{'text':'A','index':0,'logprobs':{'tokens':['A'],'token_logprobs':[-1],"
               "'top_logprobs':null,'text_offset':[0]},'finish_reason':null}")
    CMPL_CHUNK("{'text':'B','index':0,'logprobs':{'tokens':['B'],'token_logprobs':[-2],"
               "'top_logprobs':null,'text_offset':[1]},'finish_reason':'stop'}")
    DONE;

#define AN(name, json) "event: " name "\ndata: " json "\n\n"
#define AN_START(i, block) \
    AN("content_block_start", "{'type':'content_block_start','index':" #i ",'content_block':" \
       block "}")
#define AN_DELTA(i, delta) \
    AN("content_block_delta", "{'type':'content_block_delta','index':" #i ",'delta':" delta "}")
#define AN_STOP(i) AN("content_block_stop", "{'type':'content_block_stop','index':" #i "}")
#define AN_PING AN("ping", "{'type': 'ping'}")
#define AN_END AN("message_stop", "{'type':'message_stop'}")
#define AN_MSG AN("message_start", "{'type':'message_start','message':{'id':'m'}}")

/* thinking + text + tool_use with split partial_json, pings, usage merge. */
static const char an_stream[] =
    AN("message_start",
       "{'type':'message_start','message':{'id':'msg_01XFDUDYJgAACzvnptvVoYEL','type':'message',"
       "'role':'assistant','model':'claude-sonnet-4-20250514','content':[],'stop_reason':null,"
       "'stop_sequence':null,'usage':{'input_tokens':472,'cache_creation_input_tokens':100,"
       "'cache_read_input_tokens':2000,'output_tokens':2,'service_tier':'standard'}}}")
    AN_START(0, "{'type':'thinking','thinking':'','signature':''}")
    AN_PING
    AN_DELTA(0, "{'type':'thinking_delta','thinking':'The user wants '}")
    AN_DELTA(0, "{'type':'thinking_delta','thinking':'the weather.'}")
    AN_DELTA(0, "{'type':'signature_delta','signature':'EqQBCgIYAhIM1gbcDa9GJwZA'}")
    AN_STOP(0)
    AN_START(1, "{'type':'text','text':''}")
    AN_DELTA(1, "{'type':'text_delta','text':'Let me check '}")
    AN_DELTA(1, "{'type':'text_delta','text':'the weather in Paris.'}")
    AN_STOP(1)
    AN_START(2, "{'type':'tool_use','id':'toolu_01T1x1fJ34qAmk2tNTrN7Up6','name':'get_weather',"
                "'input':{}}")
    AN_DELTA(2, "{'type':'input_json_delta','partial_json':''}")
    AN_DELTA(2, "{'type':'input_json_delta','partial_json':'{`location`: `Pa'}")
    AN_PING
    AN_DELTA(2, "{'type':'input_json_delta','partial_json':'ris`, `unit`: [`c`]}'}")
    AN_STOP(2)
    AN("message_delta", "{'type':'message_delta','delta':{'stop_reason':'tool_use',"
                        "'stop_sequence':null},'usage':{'output_tokens':89}}")
    AN_END;

static const char an_answer[] =
    "{'id':'msg_01XFDUDYJgAACzvnptvVoYEL','type':'message','role':'assistant',"
    "'model':'claude-sonnet-4-20250514','content':["
    "{'type':'thinking','thinking':'The user wants the weather.',"
    "'signature':'EqQBCgIYAhIM1gbcDa9GJwZA'},"
    "{'type':'text','text':'Let me check the weather in Paris.'},"
    "{'type':'tool_use','id':'toolu_01T1x1fJ34qAmk2tNTrN7Up6','name':'get_weather',"
    "'input':{'location':'Paris','unit':['c']}}],"
    "'stop_reason':'tool_use','stop_sequence':null,'usage':{'input_tokens':472,"
    "'cache_creation_input_tokens':100,'cache_read_input_tokens':2000,'output_tokens':89,"
    "'service_tier':'standard'}}";

/* Without event: lines the data's type decides; a tool_use without deltas keeps {}. */
static const char an_typed_stream[] =
    "data: {'type':'message_start','message':{'id':'m','type':'message','role':'assistant',"
    "'model':'c','content':[],'stop_reason':null,'stop_sequence':null,"
    "'usage':{'input_tokens':3,'output_tokens':1}}}\n\n"
    "data: {'type':'content_block_start','index':0,'content_block':"
    "{'type':'tool_use','id':'t','name':'now','input':{}}}\n\n"
    "data: {'type':'content_block_stop','index':0}\n\n"
    "data: {'type':'message_delta','delta':{'stop_reason':'tool_use','stop_sequence':null},"
    "'usage':{'output_tokens':5}}\n\n"
    "data: {'type':'message_stop'}\n\n";

/* An error event mid-stream, even with a message_stop after it. */
static const char an_error_stream[] =
    AN("message_start", "{'type':'message_start','message':{'id':'m','type':'message',"
                        "'role':'assistant','model':'c','content':[],'usage':{}}}")
    AN("error", "{'type':'error','error':{'type':'overloaded_error','message':'Overloaded'}}")
    AN_END;

/* Chat recordings dialect_assemble must refuse. */
static const char *const chat_bad[] = {
    "data: not json\n\n" DONE,
    "data: [1,2]\n\n" DONE,
    "data: {'id':'x','choices':{}}\n\n" DONE,
    DONE, /* no chunk at all */
    "data: {'id':'x','choices':[{'index':-1,'delta':{}}]}\n\n" DONE,
    "data: {'id':'x','choices':[{'index':'0','delta':{}}]}\n\n" DONE,
    "data: {'id':'x','choices':[{'index':0,'delta':{'tool_calls':{}}}]}\n\n" DONE,
    /* a number cJSON would turn into infinity (and print back as null) */
    "data: {'id':'x','choices':[{'index':0,'delta':{'content':'a'}}],'n':1e999}\n\n" DONE,
    /* duplicate member names: cJSON keeps the first, JavaScript clients the last */
    "data: {'id':'x','choices':[{'index':0,'delta':{'content':'a','content':'b'}}]}\n\n" DONE,
    "\x01\x02\xff garbage",
    "",
};

/* Anthropic recordings dialect_assemble must refuse. */
static const char *const an_bad[] = {
    /* block before message_start */
    AN_START(0, "{'type':'text','text':''}") AN("message_stop", "{}"),
    /* event name and type disagree */
    AN_MSG AN("message_stop", "{'type':'ping'}"),
    /* invalid partial_json */
    AN_MSG AN_START(0, "{'type':'tool_use','input':{}}")
    AN_DELTA(0, "{'type':'input_json_delta','partial_json':'{`a`'}") AN_END,
    /* message_delta whose delta is not an object */
    AN_MSG AN("message_delta", "{'type':'message_delta','delta':[1]}") AN_END,
    /* tool input with an infinite number */
    AN_MSG AN_START(0, "{'type':'tool_use','input':{}}")
    AN_DELTA(0, "{'type':'input_json_delta','partial_json':'[1e999]'}") AN_END,
    /* delta for a block never started */
    AN_MSG AN_DELTA(3, "{'type':'text_delta','text':'x'}") AN_END,
};
/* clang-format on */

/* --- parser -------------------------------------------------------------- */

static void test_parser_basics(void)
{
    char *ev = parse_all("data: a\n\nevent: x\ndata: b\ndata: c\n\n");
    T_CHECK_STR(ev, "[|a][x|b\nc]");
    free(ev);
    ev = parse_all("event: x\r\ndata: a\r\n\r\ndata: b\r\rdata:c\n\r\n");
    T_CHECK_STR(ev, "[x|a][|b][|c]");
    free(ev);
    /* comments, unknown fields, id/retry, no space, two spaces, bare field name */
    ev = parse_all(": keep-alive\n\n:\nfoo: bar\nid: 7\nretry: 100\ndata:x\n\n"
                   "data:  y\n\ndata\n\n");
    T_CHECK_STR(ev, "[|x][| y][|]");
    free(ev);
    /* blank lines without data dispatch nothing and forget the event name */
    ev = parse_all("\n\n\nevent: lone\n\ndata: z\n\n");
    T_CHECK_STR(ev, "[|z]");
    free(ev);
    /* empty data line still dispatches, with empty data; empty + line joins */
    ev = parse_all("data:\ndata:\n\ndata: \ndata: q\n\n");
    T_CHECK_STR(ev, "[|\n][|\nq]");
    free(ev);
    /* colon inside the value, event field given twice */
    ev = parse_all("event: a\nevent: b\ndata: {\"k\":\"v:w\"}\n\n");
    T_CHECK_STR(ev, "[b|{\"k\":\"v:w\"}]");
    free(ev);
}

/* A byte order mark opening the stream is dropped, in any split; elsewhere, or half of one, is
 * text. */
static void test_parser_bom(void)
{
    static const char bom[] = "\xEF\xBB\xBF"
                              "data: a\n\ndata: b\n\n";
    static const char half[] = "\xEF\xBB"
                               "data: a\n\n:\xEF\xBB\xBF\n\n";
    for (size_t step = 0; step <= 4; step++) {
        int rc;
        char *ev = parse_steps(bom, sizeof(bom) - 1, step, &rc);
        T_CHECK_INT(rc, 0);
        T_CHECK_STR(ev, "[|a][|b]");
        free(ev);
        ev = parse_steps(half, sizeof(half) - 1, step, &rc);
        T_CHECK_INT(rc, 0);
        T_CHECK_STR(ev, ""); /* "\xEF\xBBdata" is no field this parser knows */
        free(ev);
    }
    char *ev = parse_all("data: a\n\n\xEF\xBB\xBF"
                         "data: b\n\n");
    T_CHECK_STR(ev, "[|a]"); /* only the stream's first bytes can be a mark */
    free(ev);
}

static void test_parser_no_trailing_blank(void)
{
    struct sse_parser p;
    struct collect c = {PC_BUF_INIT, 0, 0};
    sse_parser_init(&p);
    T_CHECK_INT(sse_parser_feed(&p, "data: a\n", 8, collect_cb, &c), 0);
    T_CHECK_INT(c.n, 0);
    T_CHECK_INT(sse_parser_feed(&p, "data: b", 7, collect_cb, &c), 0);
    T_CHECK_INT(c.n, 0);
    T_CHECK_INT(sse_parser_feed(&p, "\r", 1, collect_cb, &c), 0);
    T_CHECK_INT(c.n, 0);
    /* the LF of a CRLF split across feeds is not a second line end */
    T_CHECK_INT(sse_parser_feed(&p, "\n", 1, collect_cb, &c), 0);
    T_CHECK_INT(c.n, 0);
    T_CHECK_INT(sse_parser_feed(&p, "\n", 1, collect_cb, &c), 0);
    T_CHECK_INT(c.n, 1);
    T_CHECK_STR(pc_buf_cstr(&c.out), "[|a\nb]");
    sse_parser_free(&p);
    pc_buf_free(&c.out);
}

static void test_parser_split_everywhere(void)
{
    const char *s = ": hi\r\nevent: message_start\r\ndata: {\"a\":1}\r\n\r\ndata: x\rdata: y\r\r"
                    "data: z\n\nevent: e\ndata\r\n\ndata: tail\n";
    size_t n = strlen(s);
    int rc;
    char *whole = parse_steps(s, n, 0, &rc);
    T_CHECK_STR(whole, "[message_start|{\"a\":1}][|x\ny][|z][e|]");
    for (size_t step = 1; step <= 7; step++) {
        char *got = parse_steps(s, n, step, &rc);
        T_CHECK_INT(rc, 0);
        T_CHECK_STR(got, whole);
        free(got);
    }
    for (size_t cut = 0; cut <= n; cut++) {
        struct sse_parser p;
        struct collect c = {PC_BUF_INIT, 0, 0};
        sse_parser_init(&p);
        T_CHECK_INT(sse_parser_feed(&p, s, cut, collect_cb, &c), 0);
        T_CHECK_INT(sse_parser_feed(&p, s + cut, n - cut, collect_cb, &c), 0);
        T_CHECK_STR(pc_buf_cstr(&c.out), whole);
        sse_parser_free(&p);
        pc_buf_free(&c.out);
    }
    free(whole);
}

static void test_parser_limits(void)
{
    struct sse_parser p;
    struct collect c = {PC_BUF_INIT, 0, 0};
    sse_parser_init(&p);
    p.max_event = 16;
    T_CHECK_INT(sse_parser_feed(&p, "data: short\n\n", 13, collect_cb, &c), 0);
    T_CHECK_INT(c.n, 1);
    /* one event over the cap, whether the bytes come at once or one by one */
    const char *big = "data: 0123456789\ndata: 0123456789\n\n";
    T_CHECK_INT(sse_parser_feed(&p, big, strlen(big), collect_cb, &c), -1);
    sse_parser_free(&p);
    sse_parser_init(&p);
    p.max_event = 16;
    int rc = 0;
    for (size_t i = 0; big[i] && rc == 0; i++)
        rc = sse_parser_feed(&p, big + i, 1, collect_cb, &c);
    T_CHECK_INT(rc, -1);
    T_CHECK_INT(c.n, 1);
    sse_parser_free(&p);
    /* a callback error stops the feed */
    sse_parser_init(&p);
    c.fail_at = 2;
    T_CHECK_INT(sse_parser_feed(&p, "data: 1\n\ndata: 2\n\ndata: 3\n\n", 27, collect_cb, &c), -1);
    T_CHECK_INT(c.n, 2);
    sse_parser_free(&p);
    pc_buf_free(&c.out);
}

/* --- Responses API ------------------------------------------------------- */

#define RS_HEAD                                                               \
    "'id':'resp_1','object':'response','created_at':1741290958,'error':null," \
    "'incomplete_details':null,'instructions':'Be brief.','model':'gpt-4.1-2025-04-14',"

/* A live stream: a message in two deltas (with obfuscation), then a function call. */
static const char rs_stream[] =
    "event: response.created\n"
    "data: {'type':'response.created','sequence_number':0,'response':{" RS_HEAD
    "'status':'in_progress','output':[],'usage':null}}\n\n"
    "event: response.in_progress\n"
    "data: {'type':'response.in_progress','sequence_number':1,'response':{" RS_HEAD
    "'status':'in_progress','output':[],'usage':null}}\n\n"
    "event: response.output_item.added\n"
    "data: {'type':'response.output_item.added','sequence_number':2,'output_index':0,'item':{"
    "'id':'msg_1','type':'message','status':'in_progress','content':[],'role':'assistant'}}\n\n"
    "event: response.content_part.added\n"
    "data: {'type':'response.content_part.added','sequence_number':3,'item_id':'msg_1',"
    "'output_index':0,'content_index':0,'part':{'type':'output_text','annotations':[],"
    "'logprobs':[],'text':''}}\n\n"
    "event: response.output_text.delta\n"
    "data: {'type':'response.output_text.delta','sequence_number':4,'item_id':'msg_1',"
    "'output_index':0,'content_index':0,'delta':'Hi','logprobs':[],'obfuscation':'x9'}\n\n"
    "event: response.output_text.delta\n"
    "data: {'type':'response.output_text.delta','sequence_number':5,'item_id':'msg_1',"
    "'output_index':0,'content_index':0,'delta':' there','logprobs':[],'obfuscation':'k'}\n\n"
    "event: response.output_text.done\n"
    "data: {'type':'response.output_text.done','sequence_number':6,'item_id':'msg_1',"
    "'output_index':0,'content_index':0,'text':'Hi there','logprobs':[]}\n\n"
    "event: response.content_part.done\n"
    "data: {'type':'response.content_part.done','sequence_number':7,'item_id':'msg_1',"
    "'output_index':0,'content_index':0,'part':{'type':'output_text','annotations':[],"
    "'logprobs':[],'text':'Hi there'}}\n\n"
    "event: response.output_item.done\n"
    "data: {'type':'response.output_item.done','sequence_number':8,'output_index':0,'item':{"
    "'id':'msg_1','type':'message','status':'completed','content':[{'type':'output_text',"
    "'annotations':[],'logprobs':[],'text':'Hi there'}],'role':'assistant'}}\n\n"
    "event: response.output_item.added\n"
    "data: {'type':'response.output_item.added','sequence_number':9,'output_index':1,'item':{"
    "'id':'fc_1','type':'function_call','status':'in_progress','arguments':'',"
    "'call_id':'call_1','name':'get_weather'}}\n\n"
    "event: response.function_call_arguments.delta\n"
    "data: {'type':'response.function_call_arguments.delta','sequence_number':10,"
    "'item_id':'fc_1','output_index':1,'delta':'{`city`:`Paris`}'}\n\n"
    "event: response.function_call_arguments.done\n"
    "data: {'type':'response.function_call_arguments.done','sequence_number':11,"
    "'item_id':'fc_1','output_index':1,'arguments':'{`city`:`Paris`}'}\n\n"
    "event: response.output_item.done\n"
    "data: {'type':'response.output_item.done','sequence_number':12,'output_index':1,'item':{"
    "'id':'fc_1','type':'function_call','status':'completed','arguments':'{`city`:`Paris`}',"
    "'call_id':'call_1','name':'get_weather'}}\n\n"
    "event: response.completed\n"
    "data: {'type':'response.completed','sequence_number':13,'response':{" RS_HEAD
    "'status':'completed','output':[{'id':'msg_1','type':'message','status':'completed',"
    "'content':[{'type':'output_text','annotations':[],'logprobs':[],'text':'Hi there'}],"
    "'role':'assistant'},{'id':'fc_1','type':'function_call','status':'completed',"
    "'arguments':'{`city`:`Paris`}','call_id':'call_1','name':'get_weather'}],"
    "'usage':{'input_tokens':36,'input_tokens_details':{'cached_tokens':12},"
    "'output_tokens':9,'output_tokens_details':{'reasoning_tokens':0},'total_tokens':45}}}\n\n";

static const char rs_answer[] =
    "{" RS_HEAD "'status':'completed','output':[{'id':'msg_1','type':'message',"
    "'status':'completed','content':[{'type':'output_text','annotations':[],'logprobs':[],"
    "'text':'Hi there'}],'role':'assistant'},{'id':'fc_1','type':'function_call',"
    "'status':'completed','arguments':'{`city`:`Paris`}','call_id':'call_1',"
    "'name':'get_weather'}],'usage':{'input_tokens':36,'input_tokens_details':{"
    "'cached_tokens':12},'output_tokens':9,'output_tokens_details':{'reasoning_tokens':0},"
    "'total_tokens':45}}";

/* Reasoning with a summary and text, a refusal, annotations, an unknown item, incomplete. */
static const char rs_rich_answer[] =
    "{" RS_HEAD "'status':'incomplete','output':[{'id':'rs_1','type':'reasoning','summary':["
    "{'type':'summary_text','text':'The user wants the weather; a search helps, and the "
    "answer must cite it.'}],'content':[{'type':'reasoning_text','text':'thinking...'}]},"
    "{'id':'ws_1','type':'web_search_call','status':'completed','action':{'type':'search',"
    "'query':'weather paris'}},{'id':'msg_2','type':'message','status':'incomplete',"
    "'role':'assistant','content':[{'type':'output_text','text':'It is sunny in Paris today, "
    "says the forecast \u00e9t\u00e9 \u2600 and more text to cut into several pieces.',"
    "'annotations':[{'type':'url_citation','start_index':0,'end_index':5,"
    "'url':'https://example.com','title':'Weather'}]},{'type':'refusal','refusal':'No more.'}]}],"
    "'usage':{'input_tokens':3,'output_tokens':4,'total_tokens':7}}";

/* --- assembly ------------------------------------------------------------ */

static void test_assemble_chat(void)
{
    struct api_usage u;
    cJSON *a = assemble_q(API_CHAT, chat_stream, &u);
    T_CHECK(same_json(a, chat_answer));
    T_CHECK(u.present);
    T_CHECK_INT(u.prompt, 19);
    T_CHECK_INT(u.completion, 10);
    T_CHECK_INT(u.cached, 0);
    cJSON_Delete(a);
    T_CHECK(complete_q(API_CHAT, chat_stream));
}

static void test_assemble_chat_tools(void)
{
    struct api_usage u;
    cJSON *a = assemble_q(API_CHAT, chat_tools_stream, &u);
    T_CHECK(same_json(a, chat_tools_answer));
    T_CHECK_INT(u.prompt, 1200);
    T_CHECK_INT(u.completion, 45);
    T_CHECK_INT(u.cached, 1024);
    cJSON_Delete(a);
}

static void test_assemble_chat_n2(void)
{
    struct api_usage u;
    cJSON *a = assemble_q(API_CHAT, chat_n2_stream, &u);
    T_CHECK(same_json(a, chat_n2_answer));
    T_CHECK(!u.present);
    cJSON_Delete(a);
}

static void test_assemble_chat_refusal_and_extras(void)
{
    const char *s = chat_extras_stream;
    cJSON *a = assemble_q(API_CHAT, s, NULL);
    T_CHECK(same_json(a, "{'id':'chatcmpl-AbC1','object':'chat.completion','created':1727000000,"
                         "'model':'gpt-4o-mini-2024-07-18','service_tier':'default',"
                         "'system_fingerprint':'fp_0ba0d1','choices':[{'index':0,'message':"
                         "{'role':'assistant','content':null,'refusal':'I can\\u0027t help.',"
                         "'reasoning_content':'Thinking.'},'finish_reason':'stop'}]}"));
    cJSON_Delete(a);
}

/* Servers that omit tool-call indexes: a new id starts a call, anything else continues it. */
static void test_assemble_chat_tools_no_index(void)
{
    const char *s = chat_noindex_stream;
    cJSON *a = assemble_q(API_CHAT, s, NULL);
    T_CHECK(same_json(a, "{'id':'chatcmpl-AbC1','object':'chat.completion','created':1727000000,"
                         "'model':'gpt-4o-mini-2024-07-18','service_tier':'default',"
                         "'system_fingerprint':'fp_0ba0d1','choices':[{'index':0,'message':"
                         "{'role':'assistant','content':null,'tool_calls':["
                         "{'id':'a','type':'function','function':{'name':'f','arguments':'{}'}},"
                         "{'id':'b','type':'function','function':{'name':'g','arguments':'[]'}}]},"
                         "'finish_reason':'tool_calls'}]}"));
    cJSON_Delete(a);
}

static void test_assemble_chat_azure(void)
{
    const char *s = chat_azure_stream;
    cJSON *a = assemble_q(API_CHAT, s, NULL);
    /*
     * prompt_filter_results is carried over, as in Azure's JSON answers, and
     * so are the choice's filter members (the openai SDK's stream helper
     * keeps a choice's other members too).
     */
    T_CHECK(same_json(a, "{'id':'chatcmpl-AbC1','object':'chat.completion','created':1727000000,"
                         "'model':'gpt-4o-mini-2024-07-18','service_tier':'default',"
                         "'system_fingerprint':'fp_0ba0d1','choices':[{'index':0,'message':"
                         "{'role':'assistant','content':'Hi'},'finish_reason':'stop',"
                         "'content_filter_offsets':{'check_offset':0,'start_offset':0,"
                         "'end_offset':2},'content_filter_results':{}}],"
                         "'prompt_filter_results':[{'prompt_index':0,'content_filter_results':"
                         "{'hate':{'filtered':false,'severity':'safe'}}}]}"));
    cJSON_Delete(a);
}

/*
 * Top-level members keep their last non-blank value, compared exactly: a
 * number one bit apart, a type change and a boolean flip all count.
 */
static void test_assemble_chat_top_changes(void)
{
    const char *s =
        "data: {'id':'a','object':'chat.completion.chunk','created':1,'model':'m1',"
        "'service_tier':'x','system_fingerprint':true,'choices':[{'index':0,'delta':"
        "{'role':'assistant','content':'H'}}]}\n\n"
        "data: {'id':'b','created':1,'model':null,'service_tier':5,'system_fingerprint':false,"
        "'choices':[{'index':0,'delta':{'content':'i'}}]}\n\n"
        "data: {'id':'','created':1.0000000000000002,'model':'m2','service_tier':5,"
        "'choices':[{'index':0,'delta':{},'finish_reason':'stop'}]}\n\n" DONE;
    cJSON *a = assemble_q(API_CHAT, s, NULL);
    T_CHECK(same_json(a, "{'id':'b','object':'chat.completion','created':1.0000000000000002,"
                         "'model':'m2','service_tier':5,'system_fingerprint':false,"
                         "'choices':[{'index':0,'message':{'role':'assistant','content':'Hi'},"
                         "'finish_reason':'stop'}]}"));
    const cJSON *created = cJSON_GetObjectItem(a, "created"); /* same_json is approximate */
    T_CHECK(cJSON_IsNumber(created) && created->valuedouble == 1.0000000000000002);
    cJSON_Delete(a);
}

static void test_assemble_completions(void)
{
    struct api_usage u;
    cJSON *a = assemble_q(API_COMPLETIONS, cmpl_stream, &u);
    T_CHECK(same_json(a, cmpl_answer));
    T_CHECK_INT(u.prompt, 5);
    T_CHECK_INT(u.completion, 7);
    cJSON_Delete(a);
    const char *s = cmpl_lp_stream;
    a = assemble_q(API_COMPLETIONS, s, NULL);
    T_CHECK(same_json(a, "{'id':'cmpl-9xYz','object':'text_completion','created':1727000100,"
                         "'model':'gpt-3.5-turbo-instruct','choices':[{'text':'AB','index':0,"
                         "'logprobs':{'tokens':['A','B'],'token_logprobs':[-1,-2],"
                         "'top_logprobs':null,'text_offset':[0,1]},'finish_reason':'stop'}]}"));
    cJSON_Delete(a);
}

static void test_assemble_anthropic(void)
{
    struct api_usage u;
    cJSON *a = assemble_q(API_MESSAGES, an_stream, &u);
    T_CHECK(same_json(a, an_answer));
    T_CHECK(u.present);
    T_CHECK_INT(u.prompt, 472 + 100 + 2000);
    T_CHECK_INT(u.completion, 89);
    T_CHECK_INT(u.cached, 2000);
    T_CHECK_INT(u.cache_write, 100);
    cJSON_Delete(a);
    T_CHECK(complete_q(API_MESSAGES, an_stream));
    /* without event: lines the data's type decides; a tool_use without deltas keeps {} */
    const char *s = an_typed_stream;
    a = assemble_q(API_MESSAGES, s, NULL);
    T_CHECK(same_json(a, "{'id':'m','type':'message','role':'assistant','model':'c',"
                         "'content':[{'type':'tool_use','id':'t','name':'now','input':{}}],"
                         "'stop_reason':'tool_use','stop_sequence':null,"
                         "'usage':{'input_tokens':3,'output_tokens':5}}"));
    cJSON_Delete(a);
}

/* Everything up to, but not including, the last event of s. */
static char *drop_last_event(const char *s)
{
    size_t n = strlen(s) - 2;
    while (n > 0 && !(s[n - 1] == '\n' && s[n - 2] == '\n'))
        n--;
    return pc_strndup(s, n);
}

static void check_cut(enum api_endpoint e, const char *stream)
{
    char *full = q(stream);
    char *cut = drop_last_event(full);
    struct api_usage u = {true, 1, 1, 1, 0, 0, 0, 0};
    T_CHECK(dialect_complete(e, full, strlen(full)));
    T_CHECK(!dialect_complete(e, cut, strlen(cut)));
    cJSON *a = dialect_assemble(e, cut, strlen(cut), &u);
    T_CHECK(a == NULL);
    T_CHECK(!u.present);
    cJSON_Delete(a);
    /* the terminator without its blank line is not dispatched either */
    a = dialect_assemble(e, full, strlen(full) - 1, NULL);
    T_CHECK(a == NULL);
    cJSON_Delete(a);
    T_CHECK(!dialect_complete(e, full, strlen(full) - 1));
    /* cut anywhere else */
    for (size_t n = 0; n + 1 < strlen(full); n += 37) {
        a = dialect_assemble(e, full, n, NULL);
        T_CHECK(a == NULL);
        cJSON_Delete(a);
    }
    struct pc_buf out = PC_BUF_INIT;
    T_CHECK_INT(dialect_replay(e, cut, strlen(cut), true, &out), -1);
    T_CHECK_INT(out.len, 0);
    pc_buf_free(&out);
    free(cut);
    free(full);
}

static void test_cut_off(void)
{
    check_cut(API_CHAT, chat_stream);
    check_cut(API_CHAT, chat_tools_stream);
    check_cut(API_COMPLETIONS, cmpl_stream);
    check_cut(API_MESSAGES, an_stream);
}

static void test_errors_and_garbage(void)
{
    T_CHECK(assemble_q(API_MESSAGES, an_error_stream, NULL) == NULL);
    T_CHECK(!complete_q(API_MESSAGES, an_error_stream));
    T_CHECK(assemble_q(API_CHAT, chat_error_stream, NULL) == NULL);
    T_CHECK(!complete_q(API_CHAT, chat_error_stream));
    for (size_t i = 0; i < PC_ARRAY_LEN(chat_bad); i++) {
        cJSON *a = assemble_q(API_CHAT, chat_bad[i], NULL);
        T_CHECK(a == NULL);
        cJSON_Delete(a);
    }
    for (size_t i = 0; i < PC_ARRAY_LEN(an_bad); i++) {
        cJSON *a = assemble_q(API_MESSAGES, an_bad[i], NULL);
        T_CHECK(a == NULL);
        cJSON_Delete(a);
    }
}

/* --- synthesis ----------------------------------------------------------- */

/* synthesize(answer) then assemble: must give answer back. */
static void check_round_trip(enum api_endpoint e, const char *answer)
{
    cJSON *want = json_q(answer);
    struct pc_buf out = PC_BUF_INIT;
    T_CHECK_INT(dialect_synthesize(e, want, true, &out), 0);
    T_CHECK(dialect_complete(e, out.data, out.len));
    struct api_usage u1, u2;
    cJSON *got = dialect_assemble(e, out.data, out.len, &u1);
    T_CHECK(got != NULL && cJSON_Compare(got, want, true));
    if (got == NULL || !cJSON_Compare(got, want, true))
        fprintf(stderr, "  stream was:\n%s\n", pc_buf_cstr(&out));
    cJSON *again = dialect_assemble(e, out.data, out.len, &u2);
    T_CHECK(u1.present == u2.present && u1.prompt == u2.prompt);
    cJSON_Delete(again);
    cJSON_Delete(got);
    cJSON_Delete(want);
    pc_buf_free(&out);
}

static void test_round_trip(void)
{
    check_round_trip(API_CHAT, chat_answer);
    check_round_trip(API_CHAT, chat_tools_answer);
    check_round_trip(API_CHAT, chat_n2_answer);
    check_round_trip(API_COMPLETIONS, cmpl_answer);
    check_round_trip(API_MESSAGES, an_answer);
    /* legacy function_call, annotations, a refusal */
    check_round_trip(
        API_CHAT,
        "{'id':'c','object':'chat.completion','created':1,'model':'gpt-4','choices':["
        "{'index':0,'message':{'role':'assistant','content':null,'function_call':{'name':'f',"
        "'arguments':'{`a`: `0123456789012345678901234567890123456789012345678901234567890`}'}},"
        "'logprobs':null,'finish_reason':'function_call'},"
        "{'index':1,'message':{'role':'assistant','content':'','refusal':'No.',"
        "'annotations':[]},'logprobs':null,'finish_reason':'stop'}],"
        "'usage':{'prompt_tokens':1,'completion_tokens':2,'total_tokens':3},"
        "'system_fingerprint':null}");
    /* Anthropic: redacted thinking, server tool, citations, stop sequence, no blocks */
    check_round_trip(
        API_MESSAGES,
        "{'id':'msg_2','type':'message','role':'assistant','model':'claude-3-7-sonnet-20250219',"
        "'content':[{'type':'redacted_thinking','data':'EmwKAhgBEgy3'},"
        "{'type':'server_tool_use','id':'srvtoolu_1','name':'web_search',"
        "'input':{'query':'weather paris'}},"
        "{'type':'web_search_tool_result','tool_use_id':'srvtoolu_1','content':[]},"
        "{'type':'text','text':'It is sunny.','citations':[{'type':'web_search_result_location',"
        "'url':'https://example.com','title':'Weather','cited_text':'sunny'}]}],"
        "'stop_reason':'stop_sequence','stop_sequence':'###','usage':{'input_tokens':10,"
        "'cache_creation_input_tokens':0,'cache_read_input_tokens':0,'output_tokens':20,"
        "'server_tool_use':{'web_search_requests':1}}}");
    check_round_trip(API_MESSAGES, "{'id':'m','type':'message','role':'assistant','model':'c',"
                                   "'content':[],'stop_reason':'max_tokens','stop_sequence':null,"
                                   "'usage':{'input_tokens':1,'output_tokens':0}}");
}

/* Round trip through a recorded stream: assemble(synth(assemble(s))) == assemble(s). */
static void test_round_trip_streams(void)
{
    static const struct {
        enum api_endpoint e;
        const char *s;
    } cases[] = {
        {API_CHAT, chat_stream},        {API_CHAT, chat_tools_stream}, {API_CHAT, chat_n2_stream},
        {API_COMPLETIONS, cmpl_stream}, {API_MESSAGES, an_stream},
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(cases); i++) {
        cJSON *a = assemble_q(cases[i].e, cases[i].s, NULL);
        struct pc_buf out = PC_BUF_INIT;
        T_CHECK_INT(dialect_synthesize(cases[i].e, a, true, &out), 0);
        cJSON *b = dialect_assemble(cases[i].e, out.data, out.len, NULL);
        T_CHECK(a != NULL && b != NULL && cJSON_Compare(a, b, true));
        cJSON_Delete(a);
        cJSON_Delete(b);
        pc_buf_free(&out);
    }
}

/* Every content piece of a synthesized chat stream: 1..~67 bytes, starting on a UTF-8 boundary. */
struct pieces {
    int n, bad, role_first, usage_chunks, done;
};

static int piece_cb(void *arg, const struct sse_event *ev)
{
    struct pieces *p = arg;
    if (ev->data_len == 6 && memcmp(ev->data, "[DONE]", 6) == 0) {
        p->done++;
        return 0;
    }
    cJSON *j = cJSON_Parse(ev->data);
    cJSON *choices = cJSON_GetObjectItem(j, "choices");
    if (cJSON_GetArraySize(choices) == 0 && cJSON_GetObjectItem(j, "usage") != NULL)
        p->usage_chunks++;
    cJSON *delta = cJSON_GetObjectItem(cJSON_GetArrayItem(choices, 0), "delta");
    if (p->n == 0 && cJSON_GetObjectItem(delta, "role") != NULL &&
        cJSON_IsString(cJSON_GetObjectItem(delta, "content")))
        p->role_first = 1;
    const char *c = cJSON_GetStringValue(cJSON_GetObjectItem(delta, "content"));
    if (c != NULL && *c != '\0') {
        size_t len = strlen(c);
        if (len > 64 + 3 || ((unsigned char)c[0] & 0xC0) == 0x80)
            p->bad++;
    }
    p->n++;
    cJSON_Delete(j);
    return 0;
}

static void test_synth_shape(void)
{
    struct pc_buf text = PC_BUF_INIT;
    for (int i = 0; i < 40; i++)
        pc_buf_append_str(&text, "h\xc3\xa9llo w\xc3\xb6rld \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e "
                                 "\xf0\x9f\x98\x80 ");
    cJSON *ans = json_q("{'id':'c','object':'chat.completion','created':1,'model':'m',"
                        "'choices':[{'index':0,'message':{'role':'assistant','content':''},"
                        "'logprobs':null,'finish_reason':'stop'}],"
                        "'usage':{'prompt_tokens':1,'completion_tokens':2,'total_tokens':3}}");
    cJSON *msg =
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ans, "choices"), 0), "message");
    cJSON_ReplaceItemInObject(msg, "content", cJSON_CreateString(pc_buf_cstr(&text)));
    for (int usage = 0; usage <= 1; usage++) {
        struct pc_buf out = PC_BUF_INIT;
        T_CHECK_INT(dialect_synthesize(API_CHAT, ans, usage, &out), 0);
        struct pieces p = {0, 0, 0, 0, 0};
        struct sse_parser ps;
        sse_parser_init(&ps);
        T_CHECK_INT(sse_parser_feed(&ps, out.data, out.len, piece_cb, &p), 0);
        sse_parser_free(&ps);
        T_CHECK(p.n > (int)(text.len / 64));
        T_CHECK_INT(p.bad, 0);
        T_CHECK_INT(p.role_first, 1);
        T_CHECK_INT(p.usage_chunks, usage);
        T_CHECK_INT(p.done, 1);
        T_CHECK(out.len > 14 && memcmp(out.data + out.len - 14, "data: [DONE]\n\n", 14) == 0);
        pc_buf_free(&out);
    }
    cJSON_Delete(ans);
    pc_buf_free(&text);
}

static void test_synth_anthropic_events(void)
{
    cJSON *ans = json_q(an_answer);
    struct pc_buf out = PC_BUF_INIT;
    T_CHECK_INT(dialect_synthesize(API_MESSAGES, ans, false, &out), 0);
    const char *s = pc_buf_cstr(&out);
    T_CHECK(strncmp(s, "event: message_start\ndata: {\"type\":\"message_start\",", 51) == 0);
    T_CHECK(strstr(s, "\"content\":[],\"stop_reason\":null,\"stop_sequence\":null") != NULL);
    /* the prompt's usage and a provisional output count: the final one is message_delta's */
    T_CHECK(strstr(s, "\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":100,"
                      "\"cache_read_input_tokens\":2000,\"output_tokens\":1,") != NULL);
    T_CHECK(strstr(s, "event: content_block_start\ndata: {\"type\":\"content_block_start\","
                      "\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":"
                      "\"toolu_01T1x1fJ34qAmk2tNTrN7Up6\",\"name\":\"get_weather\","
                      "\"input\":{}}}\n\n") != NULL);
    T_CHECK(strstr(s, "\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":") != NULL);
    T_CHECK(strstr(s, "\"delta\":{\"type\":\"thinking_delta\",\"thinking\":") != NULL);
    T_CHECK(strstr(s, "\"delta\":{\"type\":\"signature_delta\",\"signature\":"
                      "\"EqQBCgIYAhIM1gbcDa9GJwZA\"}") != NULL);
    T_CHECK(strstr(s, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":"
                      "{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},"
                      "\"usage\":{\"output_tokens\":89}}\n\n") != NULL);
    size_t n = strlen(s);
    const char *end = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    T_CHECK(n > strlen(end) && strcmp(s + n - strlen(end), end) == 0);
    cJSON_Delete(ans);
    pc_buf_free(&out);
}

static void test_synth_rejects(void)
{
    struct pc_buf out = PC_BUF_INIT;
    pc_buf_append_str(&out, "keep");
    cJSON *chat = json_q(chat_answer), *an = json_q(an_answer);
    cJSON *emb = json_q("{'object':'list','data':[{'object':'embedding','index':0,"
                        "'embedding':[0.1,0.2]}],'model':'text-embedding-3-small'}");
    T_CHECK_INT(dialect_synthesize(API_EMBEDDINGS, emb, false, &out), -1);
    T_CHECK_INT(dialect_synthesize(API_NONE, chat, false, &out), -1);
    T_CHECK_INT(dialect_synthesize(API_CHAT, an, false, &out), -1);
    T_CHECK_INT(dialect_synthesize(API_MESSAGES, chat, false, &out), -1);
    T_CHECK_INT(dialect_synthesize(API_CHAT, NULL, false, &out), -1);
    T_CHECK_INT(out.len, 4);
    T_CHECK(dialect_assemble(API_EMBEDDINGS, "data: [DONE]\n\n", 14, NULL) == NULL);
    T_CHECK(!dialect_complete(API_EMBEDDINGS, "data: [DONE]\n\n", 14));
    T_CHECK_INT(dialect_replay(API_EMBEDDINGS, "data: [DONE]\n\n", 14, true, &out), -1);
    T_CHECK_INT(out.len, 4);
    cJSON_Delete(chat);
    cJSON_Delete(an);
    cJSON_Delete(emb);
    pc_buf_free(&out);
}

/* --- replay -------------------------------------------------------------- */

static void test_replay(void)
{
    char *rec = q(chat_stream);
    struct pc_buf out = PC_BUF_INIT;
    T_CHECK_INT(dialect_replay(API_CHAT, rec, strlen(rec), true, &out), 0);
    T_CHECK_STR(pc_buf_cstr(&out), rec);
    out.len = 0;
    T_CHECK_INT(dialect_replay(API_CHAT, rec, strlen(rec), false, &out), 0);
    T_CHECK(strstr(pc_buf_cstr(&out), "prompt_tokens") == NULL);
    T_CHECK(strstr(out.data, "\"usage\":null") != NULL); /* left as recorded */
    T_CHECK(dialect_complete(API_CHAT, out.data, out.len));
    cJSON *a = dialect_assemble(API_CHAT, out.data, out.len, NULL);
    T_CHECK(a != NULL && cJSON_GetObjectItem(a, "usage") == NULL);
    cJSON_Delete(a);
    free(rec);

    /* Anthropic passes through byte for byte, pings included */
    rec = q(an_stream);
    out.len = 0;
    T_CHECK_INT(dialect_replay(API_MESSAGES, rec, strlen(rec), false, &out), 0);
    T_CHECK_STR(pc_buf_cstr(&out), rec);
    free(rec);

    /* CRLF framing, comments and multi-line data are re-framed, not lost */
    const char *crlf = ": OPENROUTER PROCESSING\r\n\r\ndata: {\"choices\":[],\r\ndata: \"x\":1}"
                       "\r\n\r\ndata: [DONE]\r\n\r\n";
    out.len = 0;
    T_CHECK_INT(dialect_replay(API_CHAT, crlf, strlen(crlf), false, &out), 0);
    T_CHECK_STR(pc_buf_cstr(&out), "data: {\"choices\":[],\ndata: \"x\":1}\n\ndata: [DONE]\n\n");
    out.len = 0;
    T_CHECK_INT(dialect_replay(API_CHAT, "data: nope\n\ndata: [DONE]\n\n", 26, true, &out), -1);
    T_CHECK_INT(out.len, 0);
    pc_buf_free(&out);
}

/*
 * A chat recording as a JSON answer: only with its usage (a JSON answer always
 * has it); without, it serves stream clients only.
 */
static void test_answer_json_needs_usage(void)
{
    char *rec = q(chat_stream);
    struct pc_buf out = PC_BUF_INIT, bare = PC_BUF_INIT;
    T_CHECK_INT(dialect_answer(API_CHAT, true, rec, strlen(rec), false, DIALECT_USAGE_OFF, &out),
                0);
    T_CHECK(strstr(pc_buf_cstr(&out), "\"prompt_tokens\":19") != NULL);
    T_CHECK_INT(dialect_replay(API_CHAT, rec, strlen(rec), false, &bare), 0); /* no usage chunk */
    out.len = 0;
    T_CHECK_INT(dialect_answer(API_CHAT, true, bare.data, bare.len, false, DIALECT_USAGE_OFF, &out),
                DIALECT_OTHER_MODE_ONLY);
    T_CHECK_INT(out.len, 0);
    T_CHECK_INT(dialect_answer(API_CHAT, true, bare.data, bare.len, true, DIALECT_USAGE_OFF, &out),
                0);
    free(rec);
    /* Anthropic streams always carry usage: nothing is asked of them. */
    rec = q(an_stream);
    out.len = 0;
    T_CHECK_INT(
        dialect_answer(API_MESSAGES, true, rec, strlen(rec), false, DIALECT_USAGE_OFF, &out), 0);
    free(rec);
    pc_buf_free(&out);
    pc_buf_free(&bare);
}

/* --- Responses API -------------------------------------------------------- */

static void test_responses_assemble(void)
{
    struct api_usage u;
    cJSON *a = assemble_q(API_RESPONSES, rs_stream, &u);
    T_CHECK(same_json(a, rs_answer));
    T_CHECK(u.present);
    T_CHECK_INT(u.prompt, 36);
    T_CHECK_INT(u.completion, 9);
    T_CHECK_INT(u.cached, 12);
    T_CHECK(complete_q(API_RESPONSES, rs_stream));
    cJSON_Delete(a);
    check_cut(API_RESPONSES, rs_stream);
    /* response.incomplete ends a stream as well; extra bytes after the end are ignored */
    a = assemble_q(API_RESPONSES,
                   "event: response.incomplete\ndata: {'type':'response.incomplete',"
                   "'response':{'object':'response','status':'incomplete','output':[]}}\n\n"
                   "data: [DONE]\n\n",
                   NULL);
    T_CHECK(same_json(a, "{'object':'response','status':'incomplete','output':[]}"));
    cJSON_Delete(a);
}

static void test_responses_refused(void)
{
    static const char *const bad[] = {
        /* failed, or an error event */
        "event: response.failed\ndata: {'type':'response.failed','response':{'status':'failed',"
        "'error':{'code':'server_error'}}}\n\n",
        "event: error\ndata: {'type':'error','code':'x','message':'m'}\n\n"
        "event: response.completed\ndata: {'type':'response.completed','response':{}}\n\n",
        /* the event name and the type disagree; no type; not an object; no response */
        "event: response.created\ndata: {'type':'response.completed','response':{}}\n\n",
        "data: {'response':{}}\n\n",
        "data: [1]\n\n",
        "event: response.completed\ndata: {'type':'response.completed'}\n\n",
        /* never finished */
        "event: response.created\ndata: {'type':'response.created','response':{}}\n\n",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++) {
        cJSON *a = assemble_q(API_RESPONSES, bad[i], NULL);
        T_CHECK(a == NULL);
        T_CHECK(!complete_q(API_RESPONSES, bad[i]));
        cJSON_Delete(a);
    }
    /* the final response must be one a stream can be made of */
    static const char *const unusable[] = {"{}", "{'status':'completed'}", "{'output':[]}",
                                           "{'status':'completed','output':[1]}",
                                           "{'status':1,'output':[]}"};
    for (size_t i = 0; i < PC_ARRAY_LEN(unusable); i++) {
        char rec[256];
        snprintf(rec, sizeof(rec), "data: {'type':'response.completed','response':%s}\n\n",
                 unusable[i]);
        cJSON *a = assemble_q(API_RESPONSES, rec, NULL);
        T_CHECK(a == NULL);
        cJSON_Delete(a);
    }
    /* without the event line the type alone names it */
    cJSON *a = assemble_q(
        API_RESPONSES,
        "data: {'type':'response.completed','response':{'status':'x','output':[]}}\n\n", NULL);
    T_CHECK(same_json(a, "{'status':'x','output':[]}"));
    cJSON_Delete(a);
}

/* Events of a synthesized stream, checked as the openai SDK's stream helper reads them. */
struct rs_check {
    cJSON *snapshot; /* the helper's accumulated response */
    int events, bad;
    struct pc_buf text; /* output_text deltas */
};

static void rs_check_delta(struct rs_check *c, const cJSON *j, const char *type)
{
    cJSON *out = cJSON_GetArrayItem(cJSON_GetObjectItem(c->snapshot, "output"),
                                    cJSON_GetObjectItem(j, "output_index")->valueint);
    if (out == NULL) {
        c->bad++;
        return;
    }
    if (strcmp(type, "response.output_text.delta") == 0) {
        cJSON *part = cJSON_GetArrayItem(cJSON_GetObjectItem(out, "content"),
                                         cJSON_GetObjectItem(j, "content_index")->valueint);
        const char *pt = cJSON_GetStringValue(cJSON_GetObjectItem(part, "type"));
        c->bad += pt == NULL || strcmp(pt, "output_text") != 0;
        pc_buf_append_str(&c->text, cJSON_GetStringValue(cJSON_GetObjectItem(j, "delta")));
    }
}

static int rs_check_cb(void *arg, const struct sse_event *ev)
{
    struct rs_check *c = arg;
    cJSON *j = cJSON_Parse(ev->data);
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(j, "type"));
    const cJSON *seq = cJSON_GetObjectItem(j, "sequence_number");
    if (type == NULL || strcmp(type, ev->event) != 0 || !cJSON_IsNumber(seq) ||
        seq->valueint != c->events) {
        c->bad++;
    } else if (c->events == 0) {
        const char *st =
            cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "response"), "status"));
        c->bad +=
            strcmp(type, "response.created") != 0 || st == NULL || strcmp(st, "in_progress") != 0;
        c->snapshot = cJSON_Duplicate(cJSON_GetObjectItem(j, "response"), true);
    } else if (strcmp(type, "response.output_item.added") == 0) {
        cJSON_AddItemToArray(cJSON_GetObjectItem(c->snapshot, "output"),
                             cJSON_Duplicate(cJSON_GetObjectItem(j, "item"), true));
    } else if (strcmp(type, "response.content_part.added") == 0) {
        cJSON *out = cJSON_GetArrayItem(cJSON_GetObjectItem(c->snapshot, "output"),
                                        cJSON_GetObjectItem(j, "output_index")->valueint);
        cJSON *content = cJSON_GetObjectItem(out, "content");
        if (!cJSON_IsArray(content))
            c->bad++;
        else
            cJSON_AddItemToArray(content, cJSON_Duplicate(cJSON_GetObjectItem(j, "part"), true));
    } else if (strstr(type, ".delta") != NULL) {
        rs_check_delta(c, j, type);
    }
    c->events++;
    cJSON_Delete(j);
    return 0;
}

static void check_rs_synth(const char *answer, const char *text)
{
    cJSON *resp = json_q(answer);
    struct pc_buf out = PC_BUF_INIT;
    T_CHECK_INT(dialect_synthesize(API_RESPONSES, resp, false, &out), 0);
    struct rs_check c = {NULL, 0, 0, PC_BUF_INIT};
    struct sse_parser p;
    sse_parser_init(&p);
    T_CHECK_INT(sse_parser_feed(&p, out.data, out.len, rs_check_cb, &c), 0);
    sse_parser_free(&p);
    T_CHECK_INT(c.bad, 0);
    T_CHECK(c.events > 4);
    T_CHECK_STR(pc_buf_cstr(&c.text), text);
    if (c.bad != 0)
        fprintf(stderr, "  stream was:\n%s\n", pc_buf_cstr(&out));
    cJSON_Delete(c.snapshot);
    pc_buf_free(&c.text);
    pc_buf_free(&out);
    cJSON_Delete(resp);
}

static void test_responses_synth(void)
{
    check_round_trip(API_RESPONSES, rs_answer);
    check_round_trip(API_RESPONSES, rs_rich_answer);
    check_rs_synth(rs_answer, "Hi there");
    check_rs_synth(rs_rich_answer, "It is sunny in Paris today, says the forecast \u00e9t\u00e9 "
                                   "\u2600 and more text to cut into several pieces.");
    /* an incomplete response ends with response.incomplete */
    cJSON *rich = json_q(rs_rich_answer);
    struct pc_buf out = PC_BUF_INIT;
    T_CHECK_INT(dialect_synthesize(API_RESPONSES, rich, false, &out), 0);
    T_CHECK(strstr(pc_buf_cstr(&out), "event: response.incomplete\n") != NULL);
    T_CHECK(strstr(out.data, "response.reasoning_summary_text.delta") != NULL);
    T_CHECK(strstr(out.data, "response.refusal.done") != NULL);
    T_CHECK(strstr(out.data, "response.output_text.annotation.added") != NULL);
    cJSON_Delete(rich);
    /* not a response: no output array, no status, an item that is not an object */
    static const char *const bad[] = {
        "{'status':'completed'}",
        "{'output':[]}",
        "{'status':'completed','output':[1]}",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++) {
        cJSON *b = json_q(bad[i]);
        out.len = 0;
        T_CHECK_INT(dialect_synthesize(API_RESPONSES, b, false, &out), -1);
        T_CHECK_INT(out.len, 0);
        cJSON_Delete(b);
    }
    pc_buf_free(&out);
}

/*
 * What a Responses stream carries whole (a done item, the finished response) is the
 * upstream's text: numbers as written (1.0, digits past 2^53), white space dropped; and a
 * stream's final response is the JSON answer as it wrote it.
 */
static void test_responses_as_written(void)
{
    static const char resp[] =
        "{\n  \"id\": \"resp_w\", \"object\": \"response\", \"status\": \"completed\",\n"
        "  \"output\": [{\"id\": \"msg_w\", \"type\": \"message\", \"status\": \"completed\", "
        "\"role\": \"assistant\", \"content\": [{\"type\": \"output_text\", \"text\": \"a "
        "b\\u00e9\","
        " \"annotations\": [], \"logprobs\": [{\"token\": \"a\", \"logprob\": -0.0}]}]}],\n"
        "  \"temperature\": 1.0, \"top_p\": 1E0, \"seed\": 12345678901234567890,\n"
        "  \"usage\": {\"input_tokens\": 1, \"output_tokens\": 2}\n}";
    struct pc_buf out = PC_BUF_INIT, json = PC_BUF_INIT;
    T_CHECK_INT(
        dialect_answer(API_RESPONSES, false, resp, strlen(resp), true, DIALECT_USAGE_OFF, &out), 0);
    const char *s = pc_buf_cstr(&out);
    const char *done = strstr(s, "data: {\"type\":\"response.completed\"");
    T_CHECK(done != NULL);
    if (done != NULL) {
        T_CHECK(strstr(done, "\"temperature\":1.0,\"top_p\":1E0,\"seed\":12345678901234567890,") !=
                NULL);
        T_CHECK(strstr(done, "\"text\":\"a b\\u00e9\"") != NULL);
        T_CHECK(strchr(strchr(done, '{'), '\n') == strstr(done, "}\n\n") + 1); /* one line */
    }
    const char *item = strstr(s, "data: {\"type\":\"response.output_item.done\"");
    T_CHECK(item != NULL && strstr(item, "\"logprob\":-0.0}") != NULL);
    /* and back: the JSON answer of that stream is the final event's response */
    T_CHECK_INT(
        dialect_answer(API_RESPONSES, true, out.data, out.len, false, DIALECT_USAGE_OFF, &json), 0);
    T_CHECK(strstr(pc_buf_cstr(&json), "\"temperature\":1.0,\"top_p\":1E0,") != NULL);
    cJSON *a = cJSON_Parse(pc_buf_cstr(&json)), *b = cJSON_Parse(resp);
    T_CHECK(a != NULL && cJSON_Compare(a, b, true));
    cJSON_Delete(a);
    cJSON_Delete(b);
    pc_buf_free(&out);
    pc_buf_free(&json);
}

static void test_responses_replay(void)
{
    char *rec = q(rs_stream);
    struct pc_buf out = PC_BUF_INIT;
    T_CHECK_INT(dialect_replay(API_RESPONSES, rec, strlen(rec), false, &out), 0);
    T_CHECK_STR(pc_buf_cstr(&out), rec);
    pc_buf_free(&out);
    free(rec);
}

/* ---- the usage filter --------------------------------------------------------------- */

/* The filter's output for in, fed in pieces of step bytes. */
static char *filtered(const char *in, size_t step)
{
    struct sse_usage_filter f;
    struct pc_buf out = PC_BUF_INIT;
    sse_usage_filter_init(&f);
    size_t n = strlen(in);
    for (size_t i = 0; i < n; i += step)
        sse_usage_filter_feed(&f, in + i, PC_MIN(step, n - i), &out);
    sse_usage_filter_end(&f, &out);
    sse_usage_filter_free(&f);
    return pc_buf_cstr(&out);
}

/*
 * An event longer than SSE_FILTER_MAX_PENDING: never held beyond the cap,
 * passed on as it comes, byte for byte, and filtering resumes after its
 * blank line (the usage-only chunk after it is still dropped), with LF and
 * CRLF line ends.
 */
static void test_usage_filter_bound(void)
{
    static const char usage_chunk[] =
        "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9}}";
    static const char *const nl[] = {"\n", "\r\n"};
    size_t big = 3 * SSE_FILTER_MAX_PENDING;
    char *piece = pc_malloc(64 * 1024);
    memset(piece, 'x', 64 * 1024);
    for (size_t k = 0; k < PC_ARRAY_LEN(nl); k++) {
        struct sse_usage_filter f;
        struct pc_buf out = PC_BUF_INIT, want = PC_BUF_INIT;
        sse_usage_filter_init(&f);
        sse_usage_filter_feed(&f, "data: \"", 7, &out);
        pc_buf_append(&want, "data: \"", 7);
        for (size_t sent = 0; sent < big; sent += 64 * 1024) {
            sse_usage_filter_feed(&f, piece, 64 * 1024, &out);
            pc_buf_append(&want, piece, 64 * 1024);
            T_CHECK(f.pending.len <= SSE_FILTER_MAX_PENDING);
        }
        T_CHECK(out.len >= big - SSE_FILTER_MAX_PENDING); /* passed on while unfinished */
        struct pc_buf tail = PC_BUF_INIT;
        pc_buf_append_str(&tail, "\"");
        for (int blank = 0; blank < 2; blank++)
            pc_buf_append_str(&tail, nl[k]);
        pc_buf_append(&want, tail.data, tail.len);
        pc_buf_append_str(&tail, usage_chunk);
        pc_buf_append_str(&tail, nl[k]);
        pc_buf_append_str(&tail, nl[k]);
        pc_buf_append_str(&tail, "data: [DONE]");
        pc_buf_append_str(&tail, nl[k]);
        pc_buf_append_str(&tail, nl[k]);
        pc_buf_append_str(&want, "data: [DONE]");
        pc_buf_append_str(&want, nl[k]);
        pc_buf_append_str(&want, nl[k]);
        for (size_t i = 0; i < tail.len; i++) /* byte by byte: line ends split across feeds */
            sse_usage_filter_feed(&f, tail.data + i, 1, &out);
        sse_usage_filter_end(&f, &out);
        T_CHECK_INT(out.len, want.len);
        T_CHECK(out.len == want.len && memcmp(out.data, want.data, out.len) == 0);
        sse_usage_filter_free(&f);
        pc_buf_free(&out);
        pc_buf_free(&want);
        pc_buf_free(&tail);
    }
    free(piece);
}

static void test_usage_filter(void)
{
    const char *in =
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],"
        "\"usage\":null}\n\n"
        ": keep-alive comment\n\n"
        "data: {\"id\":\"c\",\"usage\": null ,\"choices\":[{\"index\":0,\"delta\":{},"
        "\"finish_reason\":\"stop\"}]}\r\n\r\n"
        "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,"
        "\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\n"
        "data: [DONE]\n\n";
    const char *want =
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
        ": keep-alive comment\n\n"
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},"
        "\"finish_reason\":\"stop\"}]}\r\n\r\n"
        "data: [DONE]\n\n";
    size_t steps[] = {1, 2, 3, 7, 64, 100000};
    char *got;
    for (size_t i = 0; i < PC_ARRAY_LEN(steps); i++) {
        got = filtered(in, steps[i]);
        T_CHECK_STR(got, want);
        free(got);
    }
    /* Names are read decoded: an escaped "usage" is the member usage. */
    got = filtered("data: {\"choices\":[{\"index\":0}],\"us\\u0061ge\":null}\n\n", 4);
    T_CHECK_STR(got, "data: {\"choices\":[{\"index\":0}]}\n\n");
    free(got);
    /*
     * Left as they came: duplicate names (escaped or not), and anything but a
     * data line holding one whole object.
     */
    const char *kept[] = {
        "data: {\"usage\":null,\"choices\":[{\"index\":0}],\"usage\":null}\n\n",
        "data: {\"usage\":null,\"us\\u0061ge\":null,\"choices\":[{\"index\":0}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1},\"choices\":[{\"index\":0}]}\n\n",
        "data: {\"usage\":null} {\"x\":1}\n\n",
        "data: {\"usage\":null,\"choices\":[{\"index\":0}]\n\n",
        "data: {\"usage\":null,\"choices\":[{\"index\":0}]}}\n\n",
        "data: {\"usage\":null,\"choices\":[{\"index\":0}] \"x\":1}\n\n",
        "data: {\"usage\":null}\ndata: {\"usage\":null}\n\n",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(kept); i++) {
        got = filtered(kept[i], 1 + i % 3);
        T_CHECK_STR(got, kept[i]);
        free(got);
    }
    /* White space after the object stays. */
    got = filtered("data:{\"usage\":null,\"choices\":[{\"index\":0}]} \t\r\n\r\n", 1);
    T_CHECK_STR(got, "data:{\"choices\":[{\"index\":0}]} \t\r\n\r\n");
    free(got);
    /* The usage-only chunk is known by its last "choices", whatever comes before. */
    got = filtered("data: {\"choices\":[{\"index\":0}],\"usage\":{\"prompt_tokens\":1},"
                   "\"choices\":[]}\n\ndata: [DONE]\n\n",
                   6);
    T_CHECK_STR(got, "data: [DONE]\n\n");
    free(got);
    /* A usage the chunk carries as data stays; so does a cut-off last event. */
    const char *keep = "data: {\"choices\":[{\"index\":0}],\"usage\":{\"prompt_tokens\":1}}\n\n"
                       "data: {\"choices\":[],\"us";
    got = filtered(keep, 5);
    T_CHECK_STR(got, keep);
    free(got);
}

/* The usage of a stream read as it passes: the same as its assembled answer's, fed in any pieces.
 */
static void scan_usage(enum api_endpoint e, const char *rec, size_t step, size_t max_event,
                       struct api_usage *u)
{
    struct sse_usage_scan s;
    sse_usage_scan_init(&s);
    s.p.max_event = max_event;
    size_t len = strlen(rec);
    for (size_t at = 0; at < len; at += step)
        sse_usage_scan_feed(&s, rec + at, PC_MIN(step, len - at));
    const cJSON *usage = sse_usage_scan_result(&s);
    cJSON *resp = cJSON_CreateObject();
    if (usage != NULL)
        cJSON_AddItemReferenceToObject(resp, "usage", (cJSON *)usage);
    dialect_usage(e, resp, u);
    cJSON_Delete(resp);
    sse_usage_scan_free(&s);
}

static void test_usage_scan(void)
{
    /* Anthropic: message_start's input counts, message_delta's final (cumulative) output. */
    const char *an =
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\","
        "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude\",\"content\":[],"
        "\"stop_reason\":null,\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":5,"
        "\"cache_read_input_tokens\":288,\"output_tokens\":1}}}\n\n"
        "event: ping\ndata: {\"type\":\"ping\"}\n\n"
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
        "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
        "\"delta\":{\"type\":\"text_delta\",\"text\":\"the \\\"usage\\\" is\"}}\n\n"
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
        "\"end_turn\"},\"usage\":{\"input_tokens\":12,\"cache_read_input_tokens\":null,"
        "\"output_tokens\":40}}\n\n"
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    struct api_usage want, got;
    cJSON *resp = dialect_assemble(API_MESSAGES, an, strlen(an), &want);
    T_CHECK(resp != NULL);
    cJSON_Delete(resp);
    T_CHECK(want.present && want.prompt == 305 && want.completion == 40 && want.cached == 288 &&
            want.cache_write == 5);
    size_t steps[] = {1, 3, 17, 100000};
    for (size_t i = 0; i < PC_ARRAY_LEN(steps); i++) {
        scan_usage(API_MESSAGES, an, steps[i], 0, &got);
        T_CHECK(memcmp(&got, &want, sizeof(got)) == 0);
    }
    /* An event over the bound: the framing is lost, nothing is reported. */
    scan_usage(API_MESSAGES, an, 7, 64, &got);
    T_CHECK(!got.present);
    /* OpenAI: the usage chunk (the others' "usage": null changes nothing). */
    const char *oa =
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],"
        "\"usage\":null}\n\n"
        "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,"
        "\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\n"
        "data: [DONE]\n\n";
    scan_usage(API_CHAT, oa, 5, 0, &got);
    T_CHECK(got.present && got.prompt == 9 && got.completion == 3 && got.cached == 8);
    /* Responses: response.completed's response.usage. */
    const char *rs = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":"
                     "{\"id\":\"r\",\"status\":\"in_progress\",\"usage\":null}}\n\n"
                     "event: response.completed\ndata: {\"type\":\"response.completed\","
                     "\"response\":{\"id\":\"r\",\"status\":\"completed\",\"usage\":{"
                     "\"input_tokens\":20,\"input_tokens_details\":{\"cached_tokens\":16},"
                     "\"output_tokens\":7}}}\n\n";
    scan_usage(API_RESPONSES, rs, 11, 0, &got);
    T_CHECK(got.present && got.prompt == 20 && got.completion == 7 && got.cached == 16);
    /* No usage at all. */
    scan_usage(API_CHAT, "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", 2, 0, &got);
    T_CHECK(!got.present);
}

/* Whether the end scan, fed rec[0..len) step bytes at a time, saw the stream end. */
static bool scan_end(enum api_endpoint e, const char *rec, size_t len, size_t step)
{
    struct sse_end_scan s;
    sse_end_scan_init(&s, dialect_of(e)->classify);
    for (size_t at = 0; at < len; at += step)
        sse_end_scan_feed(&s, rec + at, PC_MIN(step, len - at));
    bool ended = sse_end_scan_ended(&s);
    sse_end_scan_free(&s);
    return ended;
}

/* A stream ended by its sender: the terminator or an error event, whole; any cut before is not. */
static void test_end_scan(void)
{
    const struct {
        enum api_endpoint e;
        const char *rec;
    } cases[] = {
        {API_CHAT, chat_stream},
        {API_COMPLETIONS, cmpl_stream},
        {API_MESSAGES, an_stream},
        /* an error event, the API's last */
        {API_CHAT, CHAT_CHUNK("{'index':0,'delta':{'content':'Hi'},'finish_reason':"
                              "null}") "data: "
                                       "{'error':{'message':'The server had an "
                                       "error','type':'server_error'}}\n\n"},
        {API_MESSAGES,
         AN("message_start", "{'type':'message_start','message':{'id':'m','type':'message',"
                             "'role':'assistant','model':'c','content':[],'usage':{}}}")
             AN("error", "{'type':'error','error':{'type':'overloaded_error','message':'O'}}")},
    };
    size_t steps[] = {1, 5, 64, 100000};
    for (size_t i = 0; i < PC_ARRAY_LEN(cases); i++) {
        char *full = q(cases[i].rec);
        size_t len = strlen(full);
        for (size_t k = 0; k < PC_ARRAY_LEN(steps); k++) {
            T_CHECK(scan_end(cases[i].e, full, len, steps[k]));
            /* the last event without its blank line is not dispatched: not ended */
            T_CHECK(!scan_end(cases[i].e, full, len - 1, steps[k]));
        }
        char *cut = drop_last_event(full);
        T_CHECK(!scan_end(cases[i].e, cut, strlen(cut), 3));
        for (size_t n = 0; n + 1 < len; n += 29)
            T_CHECK(!scan_end(cases[i].e, full, n, 7));
        free(cut);
        free(full);
    }
    /* the recordings with more after their error event end there */
    char *err = q(chat_error_stream);
    T_CHECK(scan_end(API_CHAT, err, strlen(err), 9));
    free(err);
    err = q(an_error_stream);
    T_CHECK(scan_end(API_MESSAGES, err, strlen(err), 9));
    free(err);
    /* events after the end change nothing; nor does a bad event before it */
    const char *more = "data: {\"choices\":[]}\n\ndata: [DONE]\n\ndata: {\n\n";
    T_CHECK(scan_end(API_CHAT, more, strlen(more), 4));
    const char *bad = "data: not json\n\ndata: [DONE]\n\n";
    T_CHECK(scan_end(API_CHAT, bad, strlen(bad), 100));
    T_CHECK(!scan_end(API_CHAT, "", 0, 1));
    /* an event over the bound: not judged (failed), never "ended" */
    struct sse_end_scan s;
    sse_end_scan_init(&s, dialect_of(API_CHAT)->classify);
    s.p.max_event = 8;
    const char *big = "data: {\"choices\":[{\"index\":0}]}\n\ndata: [DONE]\n\n";
    sse_end_scan_feed(&s, big, strlen(big));
    T_CHECK(s.failed && !sse_end_scan_ended(&s));
    sse_end_scan_free(&s);
}

int main(void)
{
    T_RUN(test_parser_basics);
    T_RUN(test_parser_bom);
    T_RUN(test_parser_no_trailing_blank);
    T_RUN(test_parser_split_everywhere);
    T_RUN(test_parser_limits);
    T_RUN(test_assemble_chat);
    T_RUN(test_assemble_chat_tools);
    T_RUN(test_assemble_chat_n2);
    T_RUN(test_assemble_chat_refusal_and_extras);
    T_RUN(test_assemble_chat_tools_no_index);
    T_RUN(test_assemble_chat_azure);
    T_RUN(test_assemble_chat_top_changes);
    T_RUN(test_assemble_completions);
    T_RUN(test_assemble_anthropic);
    T_RUN(test_cut_off);
    T_RUN(test_errors_and_garbage);
    T_RUN(test_round_trip);
    T_RUN(test_round_trip_streams);
    T_RUN(test_synth_shape);
    T_RUN(test_synth_anthropic_events);
    T_RUN(test_synth_rejects);
    T_RUN(test_replay);
    T_RUN(test_answer_json_needs_usage);
    T_RUN(test_usage_filter);
    T_RUN(test_usage_filter_bound);
    T_RUN(test_usage_scan);
    T_RUN(test_end_scan);
    T_RUN(test_responses_assemble);
    T_RUN(test_responses_refused);
    T_RUN(test_responses_synth);
    T_RUN(test_responses_as_written);
    T_RUN(test_responses_replay);
    T_DONE();
}
