/* The command line and the policy files (config.c). */
#ifndef LOADCTL_EDGE_CONFIG_H
#define LOADCTL_EDGE_CONFIG_H

#include "edge.h"
#include "tls.h"

/* What the command line says beyond the settings edge_t keeps. */
typedef struct {
    const char *listen_at, *next_hop; /* as given, for the log */
    const char *subscribe, *own_uri;  /* --subscribe NOTIFIER-URI (NULL: none), --uri */
    unsigned expires;
    long hold_ms;
    const char *redirect_allow, *priority_namespaces, *priority_peers;
    int emergency_exempt, overload_control, to_tag_is_dialog;
    const char *oc_algorithms, *log_oc;
    long linger_us, oc_timeout_ms;
    double oc_target_pct;
    long user_numbers; /* an lc_sip_user_numbers value */
    const char *metrics_at;
    struct sockaddr_in metrics_addr;
    /* TLS: the certificates (tls.h), --tls-listen, --tls-next-hop, and whether the notifier
     * URI asks for TLS (sips:) with the name its certificate must carry. */
    tls_settings tls;
    const char *tls_listen_at, *tls_next_hop_at;
    int sub_tls;
    char notifier_name[256];
} options_t;

int options_parse(int argc, char **argv, edge_t *e, options_t *o);
int load_policy_file(edge_t *e, const char *path, const char *source_name);
int load_policy(edge_t *e);

#endif
