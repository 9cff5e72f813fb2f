/*
 * test_jedit.c - the JSON span scanner and splices: values, members (the
 * last duplicate, escaped names), iteration, adding and removing members,
 * and that bytes outside the splices are kept exactly.
 */
#include "t.h"

#include "pc_jedit.h"

static struct jspan root_of(const char *s)
{
    struct jspan v = {0, 0};
    T_CHECK(jedit_value(s, strlen(s), 0, &v));
    return v;
}

static char *span_str(const char *s, const struct jspan *v)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "%.*s", (int)(v->end - v->start), s + v->start);
    return buf;
}

static void test_values(void)
{
    const char *s = "  {\"a\": [1, {\"b\": \"x]}\"}], \"c\" : -1.5e3 , \"d\":null}  ";
    struct jspan root = root_of(s);
    T_CHECK_INT(root.start, 2);
    T_CHECK(jedit_is_object(s, &root));
    struct jspan v;
    T_CHECK(jedit_member(s, &root, "a", NULL, &v));
    T_CHECK_STR(span_str(s, &v), "[1, {\"b\": \"x]}\"}]");
    T_CHECK(jedit_is_array(s, &v));
    T_CHECK_INT(jedit_count(s, &v), 2);
    T_CHECK(jedit_member(s, &root, "c", NULL, &v));
    T_CHECK_STR(span_str(s, &v), "-1.5e3");
    T_CHECK(jedit_member(s, &root, "d", NULL, &v));
    T_CHECK(jedit_is_null(s, &v));
    T_CHECK(!jedit_member(s, &root, "e", NULL, &v));
    T_CHECK_INT(jedit_count(s, &root), 3);
    /* Truncated or unbalanced text is not followed. */
    T_CHECK(!jedit_value("{\"a\":[1,2}", 9, 0, &v));
    T_CHECK(!jedit_value("\"abc", 4, 0, &v));
    T_CHECK(!jedit_value("   ", 3, 0, &v));
    /* Members without a comma between them are not followed past the first. */
    const char *bad = "{\"a\":1 \"usage\":null}";
    struct jspan b = root_of(bad);
    T_CHECK(!jedit_member(bad, &b, "usage", NULL, &v));
}

static void test_member_names(void)
{
    /* The last duplicate counts; escaped names are compared decoded. */
    const char *s = "{\"k\":1,\"\\u006b\":2,\"x\\\"y\":3,\"caf\\u00e9\":4}";
    struct jspan root = root_of(s), v, name;
    T_CHECK(jedit_member(s, &root, "k", &name, &v));
    T_CHECK_STR(span_str(s, &v), "2");
    T_CHECK_STR(span_str(s, &name), "\"\\u006b\"");
    T_CHECK(jedit_member(s, &root, "x\"y", NULL, &v));
    T_CHECK_STR(span_str(s, &v), "3");
    T_CHECK(jedit_member(s, &root, "caf\xc3\xa9", NULL, &v));
    T_CHECK_STR(span_str(s, &v), "4");
    struct pc_buf b = PC_BUF_INIT;
    struct jspan str = root_of("\"a\\n\\ud83d\\ude00\\/\"");
    T_CHECK(jedit_string("\"a\\n\\ud83d\\ude00\\/\"", &str, &b));
    T_CHECK_STR(pc_buf_cstr(&b), "a\n\xf0\x9f\x98\x80/");
    pc_buf_free(&b);
}

static void test_next(void)
{
    const char *s = "[ {\"t\":1} , \"two\",3 ]";
    struct jspan arr = root_of(s), el;
    size_t cur = 0;
    T_CHECK(jedit_next(s, &arr, &cur, NULL, &el));
    T_CHECK_STR(span_str(s, &el), "{\"t\":1}");
    T_CHECK(jedit_next(s, &arr, &cur, NULL, &el));
    T_CHECK_STR(span_str(s, &el), "\"two\"");
    T_CHECK(jedit_next(s, &arr, &cur, NULL, &el));
    T_CHECK_STR(span_str(s, &el), "3");
    T_CHECK(!jedit_next(s, &arr, &cur, NULL, &el));
    const char *empty = "[ ]";
    struct jspan e = root_of(empty);
    cur = 0;
    T_CHECK(!jedit_next(empty, &e, &cur, NULL, &el));
    T_CHECK_INT(jedit_count(empty, &e), 0);
}

static char *applied(const char *s, struct jedit *e)
{
    static char buf[512];
    struct pc_buf b = PC_BUF_INIT;
    jedit_apply(e, s, strlen(s), &b);
    snprintf(buf, sizeof buf, "%s", pc_buf_cstr(&b));
    pc_buf_free(&b);
    jedit_free(e);
    return buf;
}

static void test_add_member(void)
{
    const char *s = "{\"seed\": 123456789012345678901234567890, \"n\" : 1.0 }";
    struct jspan root = root_of(s);
    struct jedit e = JEDIT_INIT;
    jedit_add_member(&e, s, &root, "k", "\"v\"");
    /* Every byte of the client's text stays: big integers, spacing, "1.0". */
    T_CHECK_STR(applied(s, &e),
                "{\"seed\": 123456789012345678901234567890, \"n\" : 1.0 ,\"k\":\"v\"}");
    const char *empty = "{ }";
    root = root_of(empty);
    jedit_add_member(&e, empty, &root, "a", "true");
    jedit_add_member(&e, empty, &root, "b", "null");
    T_CHECK_STR(applied(empty, &e), "{ \"a\":true,\"b\":null}");
}

static void test_remove_member(void)
{
    const char *s = "{\"a\":1, \"usage\":null, \"b\":2}";
    struct jspan root = root_of(s), name, v;
    struct jedit e = JEDIT_INIT;
    T_CHECK(jedit_member(s, &root, "usage", &name, &v));
    jedit_remove_member(&e, s, &root, &name, &v);
    T_CHECK_STR(applied(s, &e), "{\"a\":1, \"b\":2}");
    const char *last = "{\"a\":1,\"usage\":null}";
    root = root_of(last);
    T_CHECK(jedit_member(last, &root, "usage", &name, &v));
    jedit_remove_member(&e, last, &root, &name, &v);
    T_CHECK_STR(applied(last, &e), "{\"a\":1}");
    const char *only = "{\"usage\":null}";
    root = root_of(only);
    T_CHECK(jedit_member(only, &root, "usage", &name, &v));
    jedit_remove_member(&e, only, &root, &name, &v);
    T_CHECK_STR(applied(only, &e), "{}");
}

static void test_apply_order(void)
{
    const char *s = "0123456789";
    struct jedit e = JEDIT_INIT;
    struct jspan mid = {4, 6};
    jedit_insert(&e, 8, "B", 1);
    jedit_replace(&e, &mid, "xy", 2);
    jedit_insert(&e, 0, "A", 1);
    jedit_insert(&e, 8, "C", 1); /* same place: in the order added */
    T_CHECK_STR(applied(s, &e), "A0123xy67BC89");
}

int main(void)
{
    T_RUN(test_values);
    T_RUN(test_member_names);
    T_RUN(test_next);
    T_RUN(test_add_member);
    T_RUN(test_remove_member);
    T_RUN(test_apply_order);
    T_DONE();
}
