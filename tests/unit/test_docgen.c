/*
 * test_docgen.c - the generated documentation: every key and form of conf's
 * tables reaches the Markdown reference and both manual pages, the Markdown
 * escapes what GitHub would misread, and the roff is plain ASCII with only
 * the requests the pages are meant to use, every font change closed on its
 * line, so that groff and mandoc render it alike.
 */
#include "pc_conf.h"
#include "pc_docgen.h"
#include "t.h"

static char *render(void (*fn)(struct pc_buf *))
{
    struct pc_buf b = PC_BUF_INIT;
    fn(&b);
    char *s = strdup(pc_buf_cstr(&b));
    pc_buf_free(&b);
    return s;
}

/* A key name as the manual writes it: dashes as minus signs. */
static void roff_name(const char *name, char *out, size_t n)
{
    size_t j = 0;
    for (const char *p = name; *p && j + 3 < n; p++) {
        if (*p == '-')
            out[j++] = '\\';
        out[j++] = *p;
    }
    out[j] = '\0';
}

static void test_config_md_every_key(void)
{
    char *md = render(docgen_config_md);
    size_t n = conf_doc_nkeys();
    T_CHECK(n >= 60);
    for (size_t i = 0; i < n; i++) {
        struct conf_key_doc d;
        conf_doc_key(i, &d);
        char want[256];
        snprintf(want, sizeof want, "\n#### `%s`\n\n`%s %s`", d.name, d.name, d.arg);
        T_CHECK(strstr(md, want) != NULL);
        snprintf(want, sizeof want, "[`%s`](#%s)", d.name, d.name);
        T_CHECK(strstr(md, want) != NULL);
        snprintf(want, sizeof want, "Also `--%s` and `%s`.", d.name, d.env);
        T_CHECK(strstr(md, want) != NULL);
        if (d.secret) {
            snprintf(want, sizeof want, "`%s-file PATH` (`--%s-file`, `%s`)", d.name, d.name,
                     d.env_file);
            T_CHECK(strstr(md, want) != NULL);
        }
        if (d.section != NULL) {
            snprintf(want, sizeof want, "\n### %s settings\n", d.section);
            T_CHECK(strstr(md, want) != NULL);
        }
    }
    /* what GitHub would misread is escaped, a word's underscore is not */
    T_CHECK(strstr(md, "3\\*3") != NULL && strstr(md, " 3*3") == NULL);
    T_CHECK(strstr(md, "PROMPTCACHE_<KEY>") == NULL);
    T_CHECK(strstr(md, "connections_refused_per_ip") != NULL);
    free(md);
}

/*
 * Every line is text (indented only in an example) or one of the requests
 * the pages use; fonts close on their line.
 */
static void check_roff(const char *page)
{
    static const char *const requests[] = {".\\\"", ".TH ", ".SH ", ".SS ", ".PP",     ".TP",
                                           ".IP",   ".RS",  ".RE",  ".nf",  ".fi",     ".br",
                                           ".in",   ".ti ", ".nh",  ".ad ", ".cflags "};
    int bad = 0, unclosed = 0, nonascii = 0;
    bool nofill = false; /* between .nf and .fi an example keeps its indentation */
    for (const char *l = page; *l;) {
        size_t n = strcspn(l, "\n");
        nofill = strncmp(l, ".nf", 3) == 0 || (nofill && strncmp(l, ".fi", 3) != 0);
        bool known = l[0] != '.' && l[0] != '\'' && (l[0] != ' ' || nofill);
        for (size_t i = 0; !known && i < sizeof requests / sizeof requests[0]; i++)
            known = strncmp(l, requests[i], strlen(requests[i])) == 0;
        bad += !known && n > 0;
        char font = 'R';
        for (size_t i = 0; i < n; i++) {
            nonascii += (unsigned char)l[i] >= 0x80;
            if (l[i] == '\\' && i + 2 < n && l[i + 1] == 'f')
                font = l[i + 2];
            if (l[i] == '\\')
                i++; /* an escaped backslash (\e is written so, never \\) */
        }
        unclosed += font != 'R' && strncmp(l, ".\\\"", 3) != 0;
        if (!known || font != 'R')
            fprintf(stderr, "    line: %.*s\n", (int)n, l);
        l += n + (l[n] == '\n');
    }
    T_CHECK_INT(bad, 0);
    T_CHECK_INT(unclosed, 0);
    T_CHECK_INT(nonascii, 0);
}

static void test_man5_every_key(void)
{
    char *page = render(docgen_man5);
    T_CHECK(strncmp(page, ".\\\"", 3) == 0 && strstr(page, "\n.TH PROMPTCACHE.CONF 5 ") != NULL);
    check_roff(page);
    size_t n = conf_doc_nkeys();
    for (size_t i = 0; i < n; i++) {
        struct conf_key_doc d;
        conf_doc_key(i, &d);
        char name[128], want[256];
        roff_name(d.name, name, sizeof name);
        snprintf(want, sizeof want, "\n.TP\n\\fB%s\\fR ", name);
        T_CHECK(strstr(page, want) != NULL);
        if (d.section != NULL) {
            snprintf(want, sizeof want, "\n.SS %s\n", d.section);
            T_CHECK(strstr(page, want) != NULL);
        }
    }
    /* the introduction's example stays an example */
    T_CHECK(strstr(page, ".nf\npromptcache [CONFIG\\-FILE]") == NULL);
    T_CHECK(strstr(page, "\n.nf\npromptcache [CONFIG-FILE] [\\-\\-key value ...]\n") != NULL);
    free(page);
}

static void test_man1_forms_and_options(void)
{
    char *page = render(docgen_man1);
    T_CHECK(strstr(page, "\n.TH PROMPTCACHE 1 ") != NULL);
    check_roff(page);
    size_t nf;
    const struct conf_form *f = conf_forms(&nf);
    T_CHECK(nf >= 8);
    for (size_t i = 0; i < nf; i++) {
        /* the form's first word, as the synopsis writes it: -t, migrate, --healthcheck... */
        char word[64], want[256];
        size_t w = strcspn(f[i].synopsis, " \n");
        snprintf(word, sizeof word, "%.*s", (int)w, f[i].synopsis);
        if (word[0] == '[')
            continue; /* the bare form: [CONFIG-FILE] */
        char lit[128];
        roff_name(word, lit, sizeof lit);
        snprintf(want, sizeof want, ".ti -12n\n\\fBpromptcache\\fR \\fB%s\\fR", lit);
        T_CHECK(strstr(page, want) != NULL);
        snprintf(want, sizeof want, ".TP\n\\fBpromptcache\\fR \\fB%s\\fR", lit);
        T_CHECK(strstr(page, want) != NULL);
    }
    size_t n = conf_doc_nkeys();
    for (size_t i = 0; i < n; i++) {
        struct conf_key_doc d;
        conf_doc_key(i, &d);
        char name[128], want[256];
        roff_name(d.name, name, sizeof name);
        snprintf(want, sizeof want, "\n.TP\n\\fB\\-\\-%s\\fR ", name);
        T_CHECK(strstr(page, want) != NULL);
        if (d.secret) {
            snprintf(want, sizeof want, "\n.TP\n\\fB\\-\\-%s\\-file\\fR \\fIPATH\\fR\n", name);
            T_CHECK(strstr(page, want) != NULL);
            T_CHECK(strstr(page, d.env_file) != NULL);
        }
        if (d.reload) { /* SIGNALS names the keys a SIGHUP reloads */
            snprintf(want, sizeof want, "\\fB%s\\fR", name);
            const char *sig = strstr(page, "\n.SH SIGNALS\n");
            T_CHECK(sig != NULL && strstr(sig, want) != NULL);
        }
    }
    free(page);
}

/* --help prints the same forms as the manual's synopsis. */
static void test_help_forms(void)
{
    struct pc_buf b = PC_BUF_INIT;
    conf_write_help(&b);
    const char *h = pc_buf_cstr(&b);
    size_t nf;
    const struct conf_form *f = conf_forms(&nf);
    for (size_t i = 0; i < nf; i++) {
        char first[160];
        snprintf(first, sizeof first, "promptcache %.*s", (int)strcspn(f[i].synopsis, "\n"),
                 f[i].synopsis);
        T_CHECK(strstr(h, first) != NULL);
        T_CHECK(f[i].detail != NULL && f[i].detail[0] != '\0');
    }
    T_CHECK(strncmp(h, "Usage: promptcache [CONFIG-FILE] [--KEY VALUE ...]     run the proxy\n",
                    69) == 0);
    T_CHECK(strstr(h, "\n       promptcache -t [CONFIG-FILE] [--KEY VALUE ...]  check the "
                      "configuration and exit\n") != NULL);
    T_CHECK(strstr(h, "\n                         [--older-than DATE|2h] [--tenant ID]") != NULL);
    pc_buf_free(&b);
}

int main(void)
{
    T_RUN(test_config_md_every_key);
    T_RUN(test_man5_every_key);
    T_RUN(test_man1_forms_and_options);
    T_RUN(test_help_forms);
    T_DONE();
}
