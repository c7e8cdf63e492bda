/* config.c: the edge's configuration: the command line (HELP lists it; a usage error names
 * what is wrong and exits 2) and the policy files it names, published to the engine (--policy,
 * reread on SIGHUP; --fallback-policy, hold.c). */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "edge.h"
#include "metrics.h"
#include "subscriber.h"

/* Publishes a policy file as `source` (the engine replaces that source's rules). */
int load_policy_file(edge_t *e, const char *path, const char *source_name) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        BUMP(e->policy_load_failures);
        elog("cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    static char body[1 << 20];
    size_t n = fread(body, 1, sizeof body, f);
    fclose(f);
    uint64_t generation = 0;
    lc_str source = cstr(source_name);
    lc_str none = {NULL, 0};
    /* A rule whose limit changes starts its engine counters again: totals taken before and
     * after keep the exported ones monotonic (metrics.h). */
    metrics_sample_rules(e->engine);
    lc_result r = lc_engine_publish(e->engine, source, none, (const uint8_t *)body, n, &generation);
    metrics_sample_rules(e->engine);
    if (r != LC_RESULT_OK) {
        char msg[512];
        size_t len = 0;
        lc_policy_check((const uint8_t *)body, n, (uint8_t *)msg, sizeof msg - 1, &len);
        msg[len < sizeof msg ? len : sizeof msg - 1] = 0;
        BUMP(e->policy_load_failures);
        elog("%s: %s %s (keeping the current policy)\n", path, lc_result_text(r), msg);
        return -1;
    }
    BUMP(e->policy_loads);
    elog("policy %s loaded (generation %llu)\n", path, (unsigned long long)generation);
    return 0;
}

int load_policy(edge_t *e) { return load_policy_file(e, e->policy_path, e->source); }

static const char HELP[] =
    "usage: edge --listen IP:PORT --next-hop IP:PORT (--policy FILE | --subscribe NOTIFIER-URI) [options]\n"
    "\n"
    "A stateless SIP edge proxy (UDP, TCP and TLS) enforcing RFC 7200 load-filtering policies with libloadctl.\n"
    "\n"
    "Required:\n"
    "  --listen IP:PORT            where to listen, UDP and TCP (IPv4, port 1-65535)\n"
    "  --next-hop IP:PORT          where every request is forwarded\n"
    "  --policy FILE and/or --subscribe NOTIFIER-URI (at least one)\n"
    "\n"
    "Policy:\n"
    "  --policy FILE               a local policy (SIGHUP rereads it)\n"
    "  --source NAME               the source name of --policy's rules (default edge)\n"
    "  --subscribe NOTIFIER-URI    subscribe to an RFC 7200 notifier (load-control event package); a sips:\n"
    "                              URI (or ;transport=tls) subscribes over TLS, and then only NOTIFYs on\n"
    "                              that connection count (others are answered 403)\n"
    "  --notifier IP:PORT          where the first SUBSCRIBE goes (default: the URI's host:port)\n"
    "  --notifier-name NAME        over TLS: the DNS name or IP address the notifier's certificate must\n"
    "                              carry (default: the URI's host)\n"
    "  --uri OWN-URI               this edge's URI (default sip:edge@LISTEN)\n"
    "  --expires S                 subscription length asked for (default: libloadctl's)\n"
    "  --startup-hold-ms N         hold requests up to N ms for the notifier's first answer (default 2000, 0: none)\n"
    "  --fallback-policy FILE      enforced until the notifier's first policy is in force; without it, new\n"
    "                              requests no rule matches are answered 503 (no Retry-After) meanwhile\n"
    "  --redirect-allow LIST       more agreed redirect targets (space-separated hosts/domains; * for all)\n"
    "  --no-emergency-exempt       filter emergency calls (urn:service:sos) like any other\n"
    "  --priority-namespaces LIST  exempt Resource-Priority namespaces (default \"ets wps\"; \"\" for none)\n"
    "  --priority-peers LIST       address blocks whose Resource-Priority counts (RFC 4412 11.3), e.g.\n"
    "                              \"192.0.2.0/24 198.51.100.7\" (default: none; emergency calls always count)\n"
    "  --to-tag-is-dialog          a To tag alone makes a request in-dialog (default: only dialogs this\n"
    "                              edge saw set up by a 2xx to an INVITE)\n"
    "  --retry-after SECONDS       Retry-After on the 503s of rules (default 0: none)\n"
    "  --sip-user-numbers MODE     user-phone | global | digits: which sip: user parts without\n"
    "                              ;user=phone are telephone numbers (default global: + and digits)\n"
    "\n";
/* In two parts: C99 compilers need support string literals up to 4,095 bytes only. */
static const char HELP_MORE[] =
    "Transport:\n"
    "  --transport udp|tcp|both    (default both)\n"
    "  --max-connections N         inbound TCP connections (default 1024)\n"
    "  --max-connections-per-source N\n"
    "                              inbound TCP and TLS connections from one IP address (default: no\n"
    "                              limit but --max-connections)\n"
    "  --tcp-idle-s S              close silent inbound connections after S s (default 300, 0: never)\n"
    "  --linger-us N               UDP read linger under dense traffic, 0-100000 (default 200)\n"
    "  --workers N                 UDP workers, each with its own socket on the port (SO_REUSEPORT),\n"
    "                              thread and engine shard, and as many TCP/TLS workers, 1-256\n"
    "                              (default: one per CPU the edge may use)\n"
    "  --no-pin                    leave the workers' threads unpinned (default: worker k on the k-th CPU)\n"
    "\n"
    "TLS (OpenSSL; TLS 1.2 or later):\n"
    "  --tls-listen IP:PORT        also take SIP over TLS here; what comes over TLS goes on over TLS\n"
    "  --tls-next-hop IP:PORT      where requests received over TLS are forwarded (needs --tls-listen)\n"
    "  --tls-next-hop-name NAME    the DNS name or IP address its certificate must carry (default: its IP)\n"
    "  --tls-cert FILE             this edge's certificate chain (PEM), shown to clients and to the next\n"
    "                              hop and notifier when they ask\n"
    "  --tls-key FILE              its private key (PEM)\n"
    "  --tls-ca FILE               the CA certificates (PEM) peers' certificates must chain to: required\n"
    "                              for --tls-next-hop and a sips: notifier, whose certificates are always\n"
    "                              verified; clients are asked for one, verified when presented\n"
    "  --tls-require-client-cert   a TLS client without a valid certificate is refused (mutual TLS)\n"
    "\n"
    "Overload control (RFC 7339 / RFC 7415):\n"
    "  --overload-control          take part, as client of the next hop and server to upstream clients\n"
    "  --oc-algorithms A           loss | loss,rate | rate,loss (default loss,rate; needs --overload-control)\n"
    "  --oc-occupancy-target PCT   busy share above which this edge reports overload (default 80)\n"
    "  --oc-timeout-ms N           no response within N ms counts as a timeout (default 32000)\n"
    "  --log-oc FILE               append a line per response sent with this edge's oc values (oc-sent|...)\n"
    "\n"
    "Operation:\n"
    "  --metrics IP:PORT           serve GET /metrics (Prometheus text format 0.0.4) over HTTP\n"
    "  --help                      this text\n"
    "  --version                   the edge's and libloadctl's version\n"
    "\n"
    "Signals: SIGHUP rereads --policy and the --tls-* files, SIGUSR1 prints the metrics on stdout, SIGINT/SIGTERM\n"
    "unsubscribe and exit.\n";

/* --sip-user-numbers VALUE: the lc_engine_config.sip_user_numbers value it names (the names of
 * `loadctl --sip-user-numbers`); -1 for another name. */
static long sip_user_numbers(const char *name) {
    if (strcmp(name, "global") == 0) return LC_SIP_USER_NUMBERS_GLOBAL;
    if (strcmp(name, "user-phone") == 0) return LC_SIP_USER_NUMBERS_USER_PHONE;
    if (strcmp(name, "digits") == 0) return LC_SIP_USER_NUMBERS_DIGITS;
    return -1;
}

static int usage_error(const char *fmt, const char *arg) __attribute__((format(printf, 1, 0)));
static int usage_error(const char *fmt, const char *arg) {
    char what[1024];
    snprintf(what, sizeof what, fmt, arg);
    elog("%s (edge --help lists the options)", what);
    return 2;
}

/* A whole decimal number within [min, max], else -1. */
static int number(const char *s, long min, long max, long *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < min || v > max) return -1;
    *out = v;
    return 0;
}

/* Reads the command line: the edge's settings into `e`, the rest of what it says into `o`. -1
 * when the edge is to start, else the exit status (0 after --help or --version, 2 after a
 * usage error, logged). */
int options_parse(int argc, char **argv, edge_t *e, options_t *o) {
    const char *notifier_at = NULL, *transport = "both", *next_hop_name = NULL, *notifier_name = NULL;
    long max_conns = 1024, per_source = 0, idle_s = 300;
    long retry_after = 0, expires_l = 0;
    int oc_option = 0;
    memset(o, 0, sizeof *o);
    o->hold_ms = 2000;
    o->emergency_exempt = 1;
    o->oc_algorithms = "loss,rate";
    o->linger_us = 200;
    e->pin = 1;
    /* One worker per CPU this process may run on (taskset, cgroup cpusets). */
    CPU_ZERO(&e->cpus);
    long workers = sched_getaffinity(0, sizeof e->cpus, &e->cpus) == 0 ? CPU_COUNT(&e->cpus) : sysconf(_SC_NPROCESSORS_ONLN);
    o->oc_timeout_ms = 32000;
    o->oc_target_pct = 80;
    o->user_numbers = LC_SIP_USER_NUMBERS_GLOBAL;
    e->source = "edge";
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) {
            fputs(HELP, stdout);
            fputs(HELP_MORE, stdout);
            return 0;
        }
        if (strcmp(opt, "--version") == 0) {
            printf("loadctl-edge, libloadctl %s\n", lc_version());
            return 0;
        }
        if (strcmp(opt, "--no-emergency-exempt") == 0) {
            o->emergency_exempt = 0;
            continue;
        }
        if (strcmp(opt, "--to-tag-is-dialog") == 0) {
            o->to_tag_is_dialog = 1;
            continue;
        }
        if (strcmp(opt, "--overload-control") == 0) {
            o->overload_control = 1;
            continue;
        }
        if (strcmp(opt, "--no-pin") == 0) {
            e->pin = 0;
            continue;
        }
        if (strcmp(opt, "--tls-require-client-cert") == 0) {
            o->tls.require_client_cert = 1;
            continue;
        }
        if (strncmp(opt, "--", 2) != 0) return usage_error("unexpected argument '%s'", opt);
        /* Every other option takes a value; another option in its place is a value forgotten. */
        static const char *const WITH_VALUE[] = {"--listen", "--next-hop", "--policy", "--source", "--subscribe", "--notifier",
                                                 "--uri", "--expires", "--startup-hold-ms", "--linger-us", "--workers", "--transport",
                                                 "--max-connections", "--max-connections-per-source", "--tcp-idle-s", "--redirect-allow", "--priority-namespaces", "--priority-peers",
                                                 "--oc-occupancy-target", "--oc-timeout-ms", "--oc-algorithms", "--retry-after",
                                                 "--metrics", "--fallback-policy", "--sip-user-numbers", "--log-oc",
                                                 "--tls-listen", "--tls-cert", "--tls-key", "--tls-ca", "--tls-next-hop",
                                                 "--tls-next-hop-name", "--notifier-name"};
        int known = 0;
        for (size_t k = 0; k < sizeof WITH_VALUE / sizeof *WITH_VALUE; k++) known |= strcmp(opt, WITH_VALUE[k]) == 0;
        if (!known) return usage_error("unknown option %s", opt);
        if (i + 1 >= argc) return usage_error("%s needs a value", opt);
        if (strncmp(argv[i + 1], "--", 2) == 0 && argv[i + 1][2]) {
            elog("%s needs a value, not the option %s (edge --help lists the options)", opt, argv[i + 1]);
            return 2;
        }
        const char *val = argv[++i];
        int bad = 0;
        if (strcmp(opt, "--listen") == 0) o->listen_at = val;
        else if (strcmp(opt, "--next-hop") == 0) o->next_hop = val;
        else if (strcmp(opt, "--policy") == 0) e->policy_path = val;
        else if (strcmp(opt, "--source") == 0) e->source = val;
        else if (strcmp(opt, "--subscribe") == 0) o->subscribe = val;
        else if (strcmp(opt, "--notifier") == 0) notifier_at = val;
        else if (strcmp(opt, "--uri") == 0) o->own_uri = val;
        else if (strcmp(opt, "--expires") == 0) bad = number(val, 1, 4294967295l, &expires_l);
        else if (strcmp(opt, "--startup-hold-ms") == 0) bad = number(val, 0, 3600000, &o->hold_ms);
        else if (strcmp(opt, "--linger-us") == 0) bad = number(val, 0, 100000, &o->linger_us);
        else if (strcmp(opt, "--workers") == 0) bad = number(val, 1, 256, &workers);
        else if (strcmp(opt, "--transport") == 0) transport = val;
        else if (strcmp(opt, "--max-connections") == 0) bad = number(val, 1, 1000000, &max_conns);
        else if (strcmp(opt, "--max-connections-per-source") == 0) bad = number(val, 1, 1000000, &per_source);
        else if (strcmp(opt, "--tcp-idle-s") == 0) bad = number(val, 0, 86400 * 365, &idle_s);
        else if (strcmp(opt, "--redirect-allow") == 0) o->redirect_allow = val;
        else if (strcmp(opt, "--priority-namespaces") == 0) o->priority_namespaces = val;
        else if (strcmp(opt, "--priority-peers") == 0) o->priority_peers = val;
        else if (strcmp(opt, "--oc-occupancy-target") == 0) {
            char *end = NULL;
            o->oc_target_pct = strtod(val, &end);
            bad = !*val || *end || !(o->oc_target_pct >= 0.0001 && o->oc_target_pct <= 100);
            oc_option = 1;
        } else if (strcmp(opt, "--oc-timeout-ms") == 0) {
            bad = number(val, 1, 3600000, &o->oc_timeout_ms);
            oc_option = 1;
        } else if (strcmp(opt, "--oc-algorithms") == 0) {
            o->oc_algorithms = val;
            bad = strcmp(val, "loss") && strcmp(val, "loss,rate") && strcmp(val, "rate,loss");
            oc_option = 1;
        } else if (strcmp(opt, "--log-oc") == 0) {
            o->log_oc = val;
            oc_option = 1;
        } else if (strcmp(opt, "--retry-after") == 0) bad = number(val, 0, 86400, &retry_after);
        else if (strcmp(opt, "--metrics") == 0) o->metrics_at = val;
        else if (strcmp(opt, "--fallback-policy") == 0) e->fallback_path = val;
        else if (strcmp(opt, "--sip-user-numbers") == 0) bad = (o->user_numbers = sip_user_numbers(val)) < 0;
        else if (strcmp(opt, "--tls-listen") == 0) o->tls_listen_at = val;
        else if (strcmp(opt, "--tls-cert") == 0) o->tls.cert = val;
        else if (strcmp(opt, "--tls-key") == 0) o->tls.key = val;
        else if (strcmp(opt, "--tls-ca") == 0) o->tls.ca = val;
        else if (strcmp(opt, "--tls-next-hop") == 0) o->tls_next_hop_at = val;
        else if (strcmp(opt, "--tls-next-hop-name") == 0) bad = !*(next_hop_name = val) || strlen(val) >= sizeof e->tls_next_hop_name;
        else if (strcmp(opt, "--notifier-name") == 0) bad = !*(notifier_name = val) || strlen(val) >= sizeof o->notifier_name;
        if (bad) {
            elog("%s: invalid value '%s' (edge --help lists the options)", opt, val);
            return 2;
        }
    }
    o->expires = (unsigned)expires_l;
    e->udp_on = strcmp(transport, "udp") == 0 || strcmp(transport, "both") == 0;
    e->tcp_on = strcmp(transport, "tcp") == 0 || strcmp(transport, "both") == 0;
    if (!e->udp_on && !e->tcp_on) return usage_error("--transport: '%s' is not udp, tcp or both", transport);
    if (oc_option && !o->overload_control)
        return usage_error("%s", "--oc-algorithms, --oc-occupancy-target, --oc-timeout-ms and --log-oc need --overload-control");
    if (!o->subscribe && (notifier_at || o->own_uri || expires_l || e->fallback_path))
        return usage_error("%s", "--notifier, --uri, --expires and --fallback-policy need --subscribe");
    if (!o->listen_at) return usage_error("%s", "--listen IP:PORT is required");
    if (!o->next_hop) return usage_error("%s", "--next-hop IP:PORT is required");
    if (!e->policy_path && !o->subscribe) return usage_error("%s", "--policy FILE or --subscribe NOTIFIER-URI is required");
    if (parse_addr(o->listen_at, &e->listen_addr)) return usage_error("--listen: '%s' is not IPv4-ADDRESS:PORT (port 1-65535)", o->listen_at);
    if (parse_addr(o->next_hop, &e->next_hop)) return usage_error("--next-hop: '%s' is not IPv4-ADDRESS:PORT (port 1-65535)", o->next_hop);
    if (o->metrics_at && parse_addr(o->metrics_at, &o->metrics_addr)) return usage_error("--metrics: '%s' is not IPv4-ADDRESS:PORT (port 1-65535)", o->metrics_at);
    if (retry_after > 0) snprintf(e->retry_hdr, sizeof e->retry_hdr, "Retry-After: %ld\r\n", retry_after);
    e->max_conns = (unsigned)max_conns;
    e->max_conns_per_source = (unsigned)per_source;
    e->nudp = (unsigned)(workers < 1 ? 1 : workers > 256 ? 256 : workers);
    e->idle_ns = (uint64_t)idle_s * 1000000000ull;
    /* TLS. Every certificate a TLS peer of this edge presents is verified (--tls-ca), except a
     * client's when none is required. */
    o->sub_tls = o->subscribe && uri_wants_tls(o->subscribe);
    if (!o->tls.cert != !o->tls.key) return usage_error("%s", "--tls-cert and --tls-key go together");
    if (o->tls_listen_at) {
        if (!o->tls.cert) return usage_error("%s", "--tls-listen needs --tls-cert and --tls-key");
        if (!o->tls_next_hop_at)
            return usage_error("%s", "--tls-listen needs --tls-next-hop (where requests received over TLS go, over TLS)");
        if (parse_addr(o->tls_listen_at, &e->tls_listen_addr))
            return usage_error("--tls-listen: '%s' is not IPv4-ADDRESS:PORT (port 1-65535)", o->tls_listen_at);
        e->tls_on = 1;
    } else if (o->tls_next_hop_at || next_hop_name || o->tls.require_client_cert) {
        return usage_error("%s", "--tls-next-hop, --tls-next-hop-name and --tls-require-client-cert need --tls-listen");
    }
    if (o->tls_next_hop_at && parse_addr(o->tls_next_hop_at, &e->tls_next_hop))
        return usage_error("--tls-next-hop: '%s' is not IPv4-ADDRESS:PORT (port 1-65535)", o->tls_next_hop_at);
    if (o->tls_next_hop_at && !o->tls.ca)
        return usage_error("%s", "--tls-next-hop needs --tls-ca: the next hop's certificate is always verified");
    if (o->tls.require_client_cert && !o->tls.ca)
        return usage_error("%s", "--tls-require-client-cert needs --tls-ca (what client certificates must chain to)");
    if (notifier_name && !o->sub_tls)
        return usage_error("%s", "--notifier-name needs a TLS notifier URI (sips:, or ;transport=tls)");
    if (o->sub_tls && !o->tls.ca)
        return usage_error("%s", "a TLS notifier URI (sips:) needs --tls-ca: the notifier's certificate is always verified");
    if ((o->tls.cert || o->tls.ca) && !e->tls_on && !o->sub_tls)
        return usage_error("%s", "--tls-cert, --tls-key and --tls-ca need --tls-listen or a TLS notifier URI (sips:)");
    if (e->tls_on) {
        if (next_hop_name) snprintf(e->tls_next_hop_name, sizeof e->tls_next_hop_name, "%s", next_hop_name);
        else inet_ntop(AF_INET, &e->tls_next_hop.sin_addr, e->tls_next_hop_name, sizeof e->tls_next_hop_name);
    }
    if (o->sub_tls) {
        if (notifier_name) snprintf(o->notifier_name, sizeof o->notifier_name, "%s", notifier_name);
        else uri_host(o->subscribe, o->notifier_name, sizeof o->notifier_name);
        if (!o->notifier_name[0]) return usage_error("no host in the notifier URI %s (give --notifier-name)", o->subscribe);
    }
    if (o->subscribe && !o->sub_tls && !e->udp_on) {
        elog("the subscriber speaks UDP unless its notifier URI is sips: (TLS): --subscribe needs --transport udp or both\n");
        return 2;
    }
    if (o->subscribe && (notifier_at ? parse_addr(notifier_at, &e->notifier_addr) : uri_addr(o->subscribe, &e->notifier_addr))) {
        elog("no address for the notifier %s (give --notifier IP:PORT)\n", o->subscribe);
        return 2;
    }
    return -1;
}
