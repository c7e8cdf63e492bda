/* dialogs.h: the dialogs established through this edge, so that "in a dialog" means a dialog the
 * edge saw set up, not any request with a To tag. */
#ifndef EDGE_DIALOGS_H
#define EDGE_DIALOGS_H

#include <stddef.h>
#include <stdint.h>

typedef struct dialogs dialogs_t;

/* A table of `slots` dialogs (a power of two, at least 4), or NULL when out of memory. */
dialogs_t *dialogs_new(size_t slots);
void dialogs_free(dialogs_t *d);

/* A response from the next hop: a 2xx to an INVITE, or a 1xx with a To tag (an early dialog),
 * sets up the dialog its Call-ID, From tag and To tag name (RFC 3261 §12.1). Any other response
 * is ignored. Call it only for the next hop's responses. */
void dialogs_answered(dialogs_t *d, const char *msg, size_t len, uint64_t now_ns);

/* Whether a request belongs to a dialog in the table, from its Call-ID, From and To header
 * values (NULL when absent; the tags may be either way round); a hit keeps the dialog for
 * another DIALOG_IDLE_S. */
int dialogs_known(dialogs_t *d, const char *call_id, size_t call_id_len, const char *from, size_t from_len, const char *to,
                  size_t to_len, uint64_t now_ns);

/* Dialogs counted in the table now (for the metrics). */
size_t dialogs_count(const dialogs_t *d, uint64_t now_ns);

/* How long a dialog with no request through the edge is kept: 12 hours (a call without session
 * timers sends nothing until its BYE, and a BYE needs no dialog to pass). */
#define DIALOG_IDLE_S (12u * 3600u)

#endif
