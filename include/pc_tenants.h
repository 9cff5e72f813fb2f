/*
 * pc_tenants.h - names for tenants (`tenant-names FILE`): a tenant is a hash
 * of its client credential, 16 hex characters in the access log, /stats and
 * `promptcache report`; the file gives those ids names that `report`, the
 * dashboard and the tenant label of /metrics show. No key is ever stored.
 *
 * File: one "IDENTIFIER NAME" per line, '#' comments, blank lines ignored.
 * IDENTIFIER is one of:
 *   0123456789abcdef            a tenant id, as the access log, report and /stats show it
 *   sha256:<64 hex> (or bare)   the SHA-256 of the key itself (printf %s "$KEY" | sha256sum):
 *                               matched when a request presents that key
 *   ...wxyz:0123456789abcdef    a key's last 4 characters and its id, as /stats shows a
 *                               tenant ("…wxyz"; "..." works as well): the id counts
 * NAME: 1 to 64 of A-Z a-z 0-9 space . _ - : / @ ( ) +, not "other" (the
 * label of everything unnamed). Several identifiers may share a name.
 *
 * A name given by key hash is learned when a request presents the key: the
 * process then knows the tenant id, and records "id -> first 16 hex of the
 * key's SHA-256" in Redis (TENANTS_KEY_FP, a hash; never the key) so the
 * report and every instance's dashboard find it too.
 *
 * A loaded table is immutable but for what it learns (under a mutex), shared
 * by reference like the price list (pc_pricing.h); a reload that changes
 * the file makes a new one.
 */
#ifndef PC_TENANTS_H
#define PC_TENANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_entry.h"
#include "pc_migrate.h"
#include "pc_util.h"

#define TENANTS_KEY_FP   PC_KEY_PREFIX "tk" /* hash: tenant id -> key fingerprint (16 hex) */
#define TENANT_NAME_MAX  64
#define TENANTS_FILE_MAX (1 << 20)
#define TENANTS_SEEN_MAX 64 /* tenants /stats lists, the first seen since the table was made */

struct tenants;

/* NULL with a message in err ("FILE:LINE: ..." or "FILE: ...") if the file is not valid. */
struct tenants *tenants_load(const char *path, char *err, size_t errlen);
struct tenants *tenants_ref(struct tenants *t);
void tenants_release(struct tenants **t);
/* Whether a and b were read from the same content (either may be NULL). */
bool tenants_same(const struct tenants *a, const struct tenants *b);
const char *tenants_path(const struct tenants *t);
size_t tenants_count(const struct tenants *t); /* identifiers in the file */

/* The name of tenant_id (TENANT_ID_LEN hex), or NULL; t may be NULL. Thread-safe. */
const char *tenants_name(struct tenants *t, const char *tenant_id);

/*
 * A request of tenant_id presented the credential secret (the key: a bearer
 * token without "Bearer ", an x-api-key...). Notes the tenant for /stats
 * (with the key's last 4 characters when the key is long enough not to be
 * given away by them) and, when the file names the key's hash, learns the
 * tenant's name. Returns true, with the key's fingerprint in fp, when the
 * caller should record it in Redis (TENANTS_KEY_FP): the first time this
 * table learns that tenant. t may be NULL (then false).
 */
bool tenants_note(struct tenants *t, const char *tenant_id, const char *secret, size_t len,
                  char fp[17]);

/* Name tenants by fingerprints read back from TENANTS_KEY_FP (each pair checked; false: ignored).
 */
bool tenants_learn_fp(struct tenants *t, const char *tenant_id, size_t idlen, const char *fp,
                      size_t fplen);

/* "tenants":[{"id":..,"key":"…wxyz"|null,"name":..|null}, ...] for /stats (t may be NULL). */
void tenants_render_json(struct tenants *t, struct pc_buf *out);

/*
 * Register the key tenant-names with the configuration (pc_conf.h): a
 * conf's tenants are the names its file gives, loaded with it and shared by
 * its copies; a reload takes them only when the file changed (what the
 * table learned stays while it has not).
 */
int tenants_add_conf_rules(void);

#endif
