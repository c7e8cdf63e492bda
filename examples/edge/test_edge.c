/* Drives the edge over UDP on loopback: 503 for a throttled prefix, 302 with Contact for a
 * redirect rule, forwarding with Via handling both ways, SIGHUP reload (and an invalid file
 * kept out), garbage ignored, clean exit on SIGTERM.
 *
 *   test_edge ./edge */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        checks++;                                                                    \
        if (!(cond)) {                                                               \
            failures++;                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

static void pause_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *POLICY_FILE = "target/edge-test-policy.xml";

static void write_policy(const char *rules) {
    FILE *f = fopen(POLICY_FILE, "w");
    if (!f) {
        perror("policy file");
        exit(1);
    }
    fprintf(f, "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">%s</ruleset>", rules);
    fclose(f);
}

static const char *HOTLINE = "<rule id=\"hotline\"><conditions><call-identity><sip><to><many-tel prefix=\"+1-212\"/></to></sip></call-identity>"
                             "<method>INVITE</method></conditions><actions><accept><rate>0</rate></accept></actions></rule>";
static const char *TICKETS = "<rule id=\"tickets\"><conditions><call-identity><sip><request-uri><one id=\"sip:tickets@arena.example.com\"/></request-uri></sip></call-identity>"
                             "</conditions><actions><accept alt-action=\"redirect\" alt-target=\"sip:portal@arena.example.com\"><rate>0</rate></accept></actions></rule>";

static int udp_socket(struct sockaddr_in *bound) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(s, (struct sockaddr *)&a, sizeof a);
    socklen_t l = sizeof *bound;
    getsockname(s, (struct sockaddr *)bound, &l);
    return s;
}

static int recv_msg(int s, char *buf, size_t cap, struct sockaddr_in *from) {
    struct pollfd p = {s, POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) return -1;
    socklen_t l = sizeof *from;
    ssize_t n = recvfrom(s, buf, cap - 1, 0, (struct sockaddr *)from, &l);
    if (n < 0) return -1;
    buf[n] = 0;
    return (int)n;
}

static void invite(char *out, size_t cap, const char *ruri, const char *to, int port, const char *callid) {
    snprintf(out, cap,
             "INVITE %s SIP/2.0\r\n"
             "Via: SIP/2.0/UDP 127.0.0.1:%d;branch=z9hG4bK-%s;rport\r\n"
             "Max-Forwards: 70\r\n"
             "From: \"Caller\" <sip:caller@example.org>;tag=abc\r\n"
             "To: %s\r\n"
             "Call-ID: %s\r\n"
             "CSeq: 1 INVITE\r\n"
             "Contact: <sip:caller@127.0.0.1:%d>\r\n"
             "Content-Length: 0\r\n\r\n",
             ruri, port, callid, to, callid, port);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_edge PATH-TO-EDGE\n");
        return 2;
    }
    struct sockaddr_in client_addr, hop_addr, edge_addr;
    int client = udp_socket(&client_addr);
    int hop = udp_socket(&hop_addr);
    /* Pick a free port for the edge. */
    int probe = udp_socket(&edge_addr);
    close(probe);
    char listen_arg[64], hop_arg[64];
    snprintf(listen_arg, sizeof listen_arg, "127.0.0.1:%d", ntohs(edge_addr.sin_port));
    snprintf(hop_arg, sizeof hop_arg, "127.0.0.1:%d", ntohs(hop_addr.sin_port));
    char rules[2048];
    snprintf(rules, sizeof rules, "%s%s", HOTLINE, TICKETS);
    write_policy(rules);
    pid_t pid = fork();
    if (pid == 0) {
        execl(argv[1], argv[1], "--listen", listen_arg, "--next-hop", hop_arg, "--policy", POLICY_FILE, (char *)NULL);
        perror("exec edge");
        _exit(127);
    }
    pause_ms(300);
    int cport = ntohs(client_addr.sin_port);
    char msg[4096], buf[8192];
    struct sockaddr_in from;

    /* 1. Throttled prefix: 503 with our headers copied and a To tag added. */
    invite(msg, sizeof msg, "sip:+12125551234@gw.example.com;user=phone", "<tel:+1-212-555-1234>", cport, "call-1");
    sendto(client, msg, strlen(msg), 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);
    CHECK(recv_msg(client, buf, sizeof buf, &from) > 0);
    CHECK(strncmp(buf, "SIP/2.0 503 ", 12) == 0);
    CHECK(strstr(buf, "Call-ID: call-1\r\n") != NULL && strstr(buf, "branch=z9hG4bK-call-1") != NULL);
    CHECK(strstr(buf, ";tag=lc-edge") != NULL && strstr(buf, "CSeq: 1 INVITE") != NULL);

    /* 2. Redirect rule: 302 with the target as Contact. */
    invite(msg, sizeof msg, "sip:tickets@arena.example.com", "<sip:tickets@arena.example.com>", cport, "call-2");
    sendto(client, msg, strlen(msg), 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);
    CHECK(recv_msg(client, buf, sizeof buf, &from) > 0);
    CHECK(strncmp(buf, "SIP/2.0 302 ", 12) == 0);
    CHECK(strstr(buf, "Contact: <sip:portal@arena.example.com>\r\n") != NULL);

    /* 3. Anything else is forwarded with our Via on top; the response comes back without it. */
    invite(msg, sizeof msg, "sip:bob@example.net", "<sip:bob@example.net>", cport, "call-3");
    sendto(client, msg, strlen(msg), 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);
    CHECK(recv_msg(hop, buf, sizeof buf, &from) > 0);
    CHECK(strncmp(buf, "INVITE sip:bob@example.net SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:", 63) == 0);
    CHECK(strstr(buf, "branch=z9hG4bK-lc") != NULL);
    CHECK(strstr(buf, "branch=z9hG4bK-call-3;rport;received=127.0.0.1") != NULL);
    CHECK(strstr(buf, "Max-Forwards: 69\r\n") != NULL);
    /* The next hop answers 200 OK to the edge (Vias as received). */
    char *via1 = strstr(buf, "Via: ");
    char *via2 = via1 ? strstr(via1 + 5, "Via: ") : NULL;
    char *via_end = via2 ? strstr(via2, "\r\n") : NULL;
    if (via1 && via_end) {
        char resp[4096];
        int n = snprintf(resp, sizeof resp, "SIP/2.0 200 OK\r\n%.*s\r\nFrom: <sip:caller@example.org>;tag=abc\r\nTo: <sip:bob@example.net>;tag=b1\r\n"
                                            "Call-ID: call-3\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
                         (int)(via_end - via1), via1);
        sendto(hop, resp, (size_t)n, 0, (struct sockaddr *)&from, sizeof from);
        CHECK(recv_msg(client, buf, sizeof buf, &from) > 0);
        CHECK(strncmp(buf, "SIP/2.0 200 OK", 14) == 0);
        CHECK(strstr(buf, "z9hG4bK-lc") == NULL && strstr(buf, "branch=z9hG4bK-call-3") != NULL);
    } else {
        CHECK(!"two Vias in the forwarded request");
    }

    /* 4. Garbage and responses nobody asked for are ignored; the edge keeps serving. */
    sendto(client, "\x01\x02garbage", 9, 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);
    sendto(client, "SIP/2.0 200 OK\r\n\r\n", 18, 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);

    /* 5. An invalid policy file is refused on SIGHUP; a valid one replaces the policy. */
    write_policy("<rule id=\"broken\"><actions><accept><rate>-1</rate></accept></actions></rule>");
    kill(pid, SIGHUP);
    pause_ms(200);
    invite(msg, sizeof msg, "sip:+12125551234@gw.example.com;user=phone", "<tel:+1-212-555-1234>", cport, "call-4");
    sendto(client, msg, strlen(msg), 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);
    CHECK(recv_msg(client, buf, sizeof buf, &from) > 0 && strncmp(buf, "SIP/2.0 503 ", 12) == 0);
    write_policy(TICKETS);
    kill(pid, SIGHUP);
    pause_ms(200);
    invite(msg, sizeof msg, "sip:+12125551234@gw.example.com;user=phone", "<tel:+1-212-555-1234>", cport, "call-5");
    sendto(client, msg, strlen(msg), 0, (struct sockaddr *)&edge_addr, sizeof edge_addr);
    CHECK(recv_msg(hop, buf, sizeof buf, &from) > 0 && strstr(buf, "Call-ID: call-5") != NULL);

    /* 6. Clean exit. */
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(client);
    close(hop);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
