/*
 * main.c - wires the modules together: command line, configuration, logs,
 * library set-up, then the server or a subcommand; teardown in reverse.
 *
 *   promptcache [CONFIG-FILE] [--key value ...]      run the proxy
 *   promptcache -t [CONFIG-FILE] [--key value ...]   check the configuration
 *   promptcache -T [CONFIG-FILE] [--key value ...]   print the effective configuration
 *   promptcache --healthcheck [URL]                  GET URL, exit 0 on 2xx (containers)
 *   promptcache migrate [CONFIG-FILE] [--key value ...] [--dry-run]
 *   promptcache report [CONFIG-FILE] [--key value ...] [--format table|json|csv] [--hours N]
 *   promptcache purge [CONFIG-FILE] [--key value ...] [--namespace NS] [--model M]
 *                     [--older-than T] [--tenant ID] [--key ID] [--all] [--dry-run]
 *   promptcache kv-size [MODEL] [--layers N --kv-heads N --head-dim N --dtype D] [--gpu-memory GiB]
 *   promptcache --version | --help | --sample-config | --config-doc | --metrics-doc
 *   promptcache --man 1|5                            the manual pages (pc_docgen.h)
 */
#include "pc_admin.h"
#include "pc_api.h"
#include "pc_conf.h"
#include "pc_dialect.h"
#include "pc_docgen.h"
#include "pc_httpd.h"
#include "pc_kvsize.h"
#include "pc_log.h"
#include "pc_migrate.h"
#include "pc_probe.h"
#include "pc_purge.h"
#include "pc_report.h"
#include "pc_server.h"
#include "pc_stats.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <event2/thread.h>

enum command {
    CMD_RUN,
    CMD_CHECK,
    CMD_DUMP,
    CMD_MIGRATE,
    CMD_REPORT,
    CMD_PURGE,
};

struct cli {
    enum command cmd;
    const char *config;
    bool dry_run;
    enum report_format format;
    int hours;
    struct purge_cli purge;
    int nopts;
    char **opts; /* --key value ... handed to conf_load */
};

static int print_buf(void (*fn)(struct pc_buf *))
{
    struct pc_buf b = PC_BUF_INIT;
    fn(&b);
    fwrite(b.data, 1, b.len, stdout);
    pc_buf_free(&b);
    return 0;
}

/* The value of --NAME VALUE or --NAME=VALUE at argv[*i] (advancing *i), or NULL. */
static const char *option_value(char **argv, int argc, int *i, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] == '\0' && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

/* report's own options (--format, --hours): 1 if argv[*i] was one, 0 if not, -1 on a bad value. */
static int report_option(char **argv, int argc, int *i, struct cli *cli)
{
    const char *v;
    int64_t h;
    if ((strcmp(argv[*i], "--format") == 0 || strcmp(argv[*i], "--hours") == 0) && *i + 1 >= argc) {
        fprintf(stderr, "promptcache report: %s needs a value\n", argv[*i]);
        return -1;
    }
    if ((v = option_value(argv, argc, i, "--format")) != NULL) {
        int f = report_format_parse(v);
        if (f < 0) {
            fprintf(stderr, "promptcache report: --format must be table, json or csv\n");
            return -1;
        }
        cli->format = (enum report_format)f;
    } else if ((v = option_value(argv, argc, i, "--hours")) != NULL) {
        if (pc_parse_i64(v, &h) < 0 || h < 1 || h > REPORT_HOURS_MAX) {
            fprintf(stderr, "promptcache report: --hours must be from 1 to %d\n", REPORT_HOURS_MAX);
            return -1;
        }
        cli->hours = (int)h;
    } else {
        return 0;
    }
    return 1;
}

/*
 * purge's own options (--namespace, --model, --older-than, --tenant, --key,
 * --all; --dry-run is shared with migrate): 1 if argv[*i] was one, 0 if not,
 * -1 on a bad value. --key is purge's entry id here, not a config key.
 */
static int purge_option(char **argv, int argc, int *i, struct cli *cli)
{
    static const char *const filters[] = {"namespace", "model", "older-than", "tenant"};
    const char *a = argv[*i];
    if (strcmp(a, "--all") == 0) {
        cli->purge.all = true;
        return 1;
    }
    for (size_t f = 0; f <= PC_ARRAY_LEN(filters); f++) {
        const char *name = f < PC_ARRAY_LEN(filters) ? filters[f] : "key";
        char opt[32], err[256];
        snprintf(opt, sizeof opt, "--%s", name);
        if (strncmp(a, opt, strlen(opt)) != 0 || (a[strlen(opt)] != '\0' && a[strlen(opt)] != '='))
            continue;
        const char *v = option_value(argv, argc, i, opt);
        /* "--namespace --dry-run": an option is no value (it ran a purge for real). */
        if (v == NULL || (v == argv[*i] && strncmp(v, "--", 2) == 0)) {
            fprintf(stderr, "promptcache purge: %s needs a value\n", opt);
            return -1;
        }
        if (f == PC_ARRAY_LEN(filters)) {
            if (cli->purge.id != NULL) { /* one entry: the first would be left, unsaid */
                fprintf(stderr, "promptcache purge: --key given twice (one entry per run)\n");
                return -1;
            }
            if (!purge_key_valid(v)) { /* a usage error, said before Redis is asked anything */
                fprintf(stderr, "promptcache purge: --key must be an entry id: the hex "
                                "characters of X-Cache-Key\n");
                return -1;
            }
            cli->purge.id = v;
        } else if (purge_filter_set(&cli->purge.filter, name, v, pc_wall_ms(), err, sizeof err) <
                   0) {
            fprintf(stderr, "promptcache purge: --%s\n", err);
            return -1;
        }
        return 1;
    }
    return 0;
}

/* What purge is asked to delete must be said: a filter, --key, or --all, not a mix. */
static int purge_check(const struct cli *cli)
{
    const struct purge_cli *p = &cli->purge;
    bool filtered = purge_filter_narrow(&p->filter) || p->filter.tenant[0] != '\0';
    if (!filtered && p->id == NULL && !p->all) {
        fprintf(stderr, "promptcache purge: say what to delete: --key ID, one or more of "
                        "--namespace, --model, --older-than, --tenant, or --all\n");
        return 2;
    }
    if ((p->id != NULL) + filtered + p->all > 1) {
        fprintf(stderr, "promptcache purge: --key, the filters and --all do not go together\n");
        return 2;
    }
    return -1;
}

/* Returns -1 to continue with cli filled in, or an exit status. */
static int parse_cli(int argc, char **argv, struct cli *cli)
{
    int i = 1;
    /* kv-size needs no configuration: it has options and --help of its own. */
    if (i < argc && strcmp(argv[i], "kv-size") == 0)
        return kvsize_cli(argc - 2, argv + 2);
    if (i < argc && strcmp(argv[i], "migrate") == 0) {
        cli->cmd = CMD_MIGRATE;
        i++;
    } else if (i < argc && strcmp(argv[i], "report") == 0) {
        cli->cmd = CMD_REPORT;
        i++;
    } else if (i < argc && strcmp(argv[i], "purge") == 0) {
        cli->cmd = CMD_PURGE;
        i++;
    }
    cli->hours = REPORT_HOURS_DEFAULT;
    if (cli->cmd == CMD_RUN && i < argc && strcmp(argv[i], "--healthcheck") == 0) {
        if (argc > i + 2) {
            fprintf(stderr, "promptcache: --healthcheck takes one URL\n");
            return 2;
        }
        return probe_cli(i + 1 < argc ? argv[i + 1] : PROBE_DEFAULT_URL);
    }
    for (int j = i; j < argc; j++) {
        if (strcmp(argv[j], "--version") == 0 || strcmp(argv[j], "-v") == 0) {
            printf("promptcache %s\n", PC_VERSION);
            return 0;
        }
        if (strcmp(argv[j], "--help") == 0 || strcmp(argv[j], "-h") == 0)
            return print_buf(conf_write_help);
        if (strcmp(argv[j], "--sample-config") == 0)
            return print_buf(conf_write_sample);
        if (strcmp(argv[j], "--metrics-doc") == 0)
            return print_buf(admin_metrics_doc);
        if (strcmp(argv[j], "--config-doc") == 0)
            return print_buf(docgen_config_md);
        if (strcmp(argv[j], "--man") == 0) {
            const char *s = j + 1 < argc ? argv[j + 1] : "";
            if (strcmp(s, "1") != 0 && strcmp(s, "5") != 0) {
                fprintf(stderr,
                        "promptcache: --man takes 1 (promptcache) or 5 (the config file)\n");
                return 2;
            }
            return print_buf(s[0] == '1' ? docgen_man1 : docgen_man5);
        }
    }
    cli->opts = pc_calloc((size_t)argc, sizeof(char *));
    for (; i < argc; i++) {
        int own = cli->cmd == CMD_REPORT  ? report_option(argv, argc, &i, cli)
                  : cli->cmd == CMD_PURGE ? purge_option(argv, argc, &i, cli)
                                          : 0;
        if (own < 0)
            return 2;
        if (own > 0)
            continue;
        if (strcmp(argv[i], "-t") == 0 && cli->cmd == CMD_RUN) {
            cli->cmd = CMD_CHECK;
        } else if (strcmp(argv[i], "-T") == 0 && cli->cmd == CMD_RUN) {
            cli->cmd = CMD_DUMP;
        } else if (strcmp(argv[i], "--dry-run") == 0 &&
                   (cli->cmd == CMD_MIGRATE || cli->cmd == CMD_PURGE)) {
            cli->dry_run = true;
            cli->purge.dry_run = true;
        } else if (argv[i][0] != '-' && cli->config == NULL && cli->nopts == 0) {
            cli->config = argv[i];
        } else {
            cli->opts[cli->nopts++] = argv[i];
        }
    }
    return cli->cmd == CMD_PURGE ? purge_check(cli) : -1;
}

/* Every line of text on stderr, each starting with "promptcache: warning: ". */
static void print_warnings(const char *text)
{
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        fprintf(stderr, "promptcache: warning: %.*s\n", (int)n, p);
        p += n + (p[n] == '\n');
    }
}

/*
 * Load the configuration, then hide the secrets given on the command line
 * from ps and /proc/PID/cmdline (conf_load keeps its own copies for reloads).
 */
static struct conf *load_conf(const struct cli *cli, int argc, char **argv)
{
    struct conf *c = conf_create();
    struct pc_buf errs = PC_BUF_INIT;
    int n = conf_load(c, cli->config, cli->nopts, cli->opts, &errs);
    conf_scrub_argv(argc - 1, argv + 1);
    if (cli->cmd != CMD_RUN || n > 0) /* a running proxy logs them (log-file, if any) */
        print_warnings(conf_warnings(c));
    if (n > 0) {
        fwrite(errs.data, 1, errs.len, stderr);
        fprintf(stderr, "promptcache: %d configuration error%s\n", n, n == 1 ? "" : "s");
        conf_destroy(&c);
    }
    pc_buf_free(&errs);
    return c;
}

static void log_lines_warn(const char *text)
{
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        log_warn("%.*s", (int)n, p);
        p += n + (p[n] == '\n');
    }
}

static void print_sources(const struct conf *c)
{
    struct pc_buf b = PC_BUF_INIT;
    conf_write_sources(c, &b);
    fwrite(b.data, 1, b.len, stdout);
    pc_buf_free(&b);
}

/*
 * -t: the configuration loaded; a PROMPTCACHE_* variable that is no key is an error too, and
 * so is a log file a start could not open (the start would fail on it).
 */
static int check_result(const struct cli *cli, const struct conf *c, const struct pc_buf *env,
                        int nenv)
{
    char err[2][1200];
    int nlog = (log_check("log-file", c->log_file, err[0], sizeof(err[0])) < 0 ? 1 : 0);
    if (log_check("access-log", c->access_log, err[nlog], sizeof(err[nlog])) < 0)
        nlog++;
    if (nenv + nlog > 0) {
        if (env->len > 0) /* data is NULL while empty */
            fwrite(env->data, 1, env->len, stderr);
        for (int i = 0; i < nlog; i++)
            fprintf(stderr, "%s\n", err[i]);
        fprintf(stderr, "promptcache: %d configuration error%s\n", nenv + nlog,
                nenv + nlog == 1 ? "" : "s");
        return 1;
    }
    printf("configuration OK%s%s\n", cli->config ? ": " : "", cli->config ? cli->config : "");
    return 0;
}

static void *json_malloc(size_t n)
{
    return pc_malloc(n);
}

/* httpd's own refusals in the shape of the API that was called (pc_api.h). */
static void http_error_body(const char *path, int status, const char *message, struct pc_buf *out)
{
    dialect_error_body(dialect_of_path(path, false), status, message, out);
}

/*
 * Process-wide HTTP limits: the proxy's own health endpoints stay reachable at
 * the connection limits (pc_httpd.h).
 */
static void set_http_limits(const struct conf *c)
{
    static const char *const health[] = {"/healthz", "/readyz", "/metrics", NULL};
    static struct httpd_net *exempt; /* for the life of the process */
    const struct conf_list *ex = &c->max_connections_per_ip_exempt;
    size_t n = 0;
    free(exempt);
    exempt = pc_calloc(PC_MAX(ex->n, (size_t)1), sizeof(*exempt));
    for (size_t i = 0; i < ex->n; i++)
        if (httpd_net_parse(ex->v[i], &exempt[n]) == 0) /* checked by conf already */
            n++;
    struct httpd_limits l = {
        .max_connections_per_ip = (size_t)c->max_connections_per_ip,
        .exempt = exempt,
        .nexempt = n,
        .reserve_paths = health,
        .error_body = http_error_body,
    };
    httpd_set_limits(&l);
}

int main(int argc, char **argv)
{
    if (server_add_conf_rules() < 0) {
        fprintf(stderr, "promptcache: a module's configuration rule names no key\n");
        return 1;
    }
    struct cli cli = {0};
    int status = parse_cli(argc, argv, &cli);
    if (status >= 0) {
        free(cli.opts);
        return status;
    }
    if (cli.cmd == CMD_RUN)
        server_hold_sighup(); /* before anything takes time: the configuration, its files */
    struct conf *c = load_conf(&cli, argc, argv);
    if (c == NULL) {
        free(cli.opts);
        return 1;
    }
    struct pc_buf env = PC_BUF_INIT;
    int nenv = conf_env_unknown(&env);
    if (cli.cmd != CMD_RUN && cli.cmd != CMD_CHECK)
        print_warnings(pc_buf_cstr(&env));
    if (cli.cmd == CMD_CHECK) {
        status = check_result(&cli, c, &env, nenv);
    } else if (cli.cmd == CMD_DUMP) {
        print_sources(c);
        status = 0;
    } else if (cli.cmd == CMD_MIGRATE) {
        status = migrate_cli(c, cli.dry_run);
    } else if (cli.cmd == CMD_REPORT) {
        status = report_cli(c, cli.format, cli.hours);
    } else if (cli.cmd == CMD_PURGE) {
        status = purge_cli(c, &cli.purge);
    } else {
        char err[256];
        if (log_init(c->log_level, c->log_file, c->access_log, err, sizeof(err)) < 0) {
            fprintf(stderr, "promptcache: %s\n", err);
            status = 1;
        } else {
            log_lines_warn(conf_warnings(c));
            log_lines_warn(pc_buf_cstr(&env));
            cJSON_Hooks hooks = {json_malloc, free};
            cJSON_InitHooks(&hooks);
            signal(SIGPIPE, SIG_IGN);
            set_http_limits(c);
            evthread_use_pthreads();
            curl_global_init(CURL_GLOBAL_DEFAULT);
            status = server_run(c);
            curl_global_cleanup();
            log_teardown();
        }
    }
    pc_buf_free(&env);
    conf_destroy(&c);
    free(cli.opts);
    return status;
}
