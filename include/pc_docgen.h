/*
 * pc_docgen.h - the documentation the binary writes about itself, from the
 * tables that also drive it: the config keys and the command line's forms
 * (pc_conf.h), the known models of kv-size (pc_kvsize.h).
 *
 *   promptcache --config-doc   the key reference of doc/configuration.md (Markdown)
 *   promptcache --man 1        doc/promptcache.1, promptcache(1) (roff, man macros)
 *   promptcache --man 5        doc/promptcache.conf.5, promptcache.conf(5)
 *
 * `make docs` writes them into doc/, `make docs-check` fails when the
 * committed files differ, so a key added to the table reaches the manuals
 * and the Markdown reference with the binary that knows it.
 */
#ifndef PC_DOCGEN_H
#define PC_DOCGEN_H

#include "pc_util.h"

/* The Markdown reference of every config key, by section (no page head). */
void docgen_config_md(struct pc_buf *out);

/* promptcache(1): synopsis, commands, options, environment, signals, files. */
void docgen_man1(struct pc_buf *out);

/* promptcache.conf(5): the file's syntax and every key in full. */
void docgen_man5(struct pc_buf *out);

#endif
