/*
 * pc_jskim.h - parsing a JSON text the proxy only looks at near its top.
 *
 * A miss's answer is parsed to read its usage block and check its shape
 * (dialect_usage, api_answer_check), which look no deeper than a
 * few levels below the root. The rest (a chat answer's content, every float
 * of an embedding) only has to be valid. jskim_parse checks all of the value
 * but builds cJSON nodes only down to a given depth, so the deep parts cost
 * a scan instead of allocations, copies and strtod calls.
 *
 *   text ─▶ jskim_parse(text, len, depth) ─▶ cJSON tree cut at depth
 *                                          └▶ NULL: cJSON refuses it too
 *                                             (or memory ran out)
 *
 * Accepted text is exactly what cJSON_ParseWithLength accepts (its quirks
 * included: bytes up to 0x20 are white space, text after the first value is
 * ignored, an invalid \u escape reads as U+0000, numbers are what strtod
 * takes from the run of [0-9+-.eE] with '.' as the locale's decimal point,
 * 1000 levels of nesting at most), so
 * whether an answer is usable does not depend on which parser read it.
 *
 * The root is at depth 0, its members and elements at depth 1, and so on.
 * Nodes above the cut depth are as cJSON builds them. At the cut depth,
 * arrays and objects come out empty and strings as ""; numbers, booleans
 * and null are kept. Nothing below the cut depth is built.
 */
#ifndef PC_JSKIM_H
#define PC_JSKIM_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* The tree of text cut at depth (free with cJSON_Delete), or NULL if text is not JSON. */
cJSON *jskim_parse(const char *text, size_t len, unsigned depth);
/* The same; *end (may be NULL) gets the offset just past the value, where text may go on. */
cJSON *jskim_parse_end(const char *text, size_t len, unsigned depth, size_t *end);

#endif
