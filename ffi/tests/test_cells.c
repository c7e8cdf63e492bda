/* Shared cell tables across processes, as a forking SIP server uses them: the parent maps
 * shared memory and formats a table, forks, and every child creates its own engine on the
 * table, publishes the same policy and classifies. The children run in lock-step simulated
 * time (a process-shared barrier per 10 ms step), so the totals are deterministic.
 * Built with -std=c11 -Wall -Wextra -Wpedantic -Werror and run under ASan+UBSan and under
 * valgrind (see the Makefile's c-test target). */
#define _DEFAULT_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loadctl.h"
#include "check.h"

#define CHILDREN 4
#define STEPS 1000                 /* 10 s of 10 ms steps */
#define STEP_NS 10000000ULL
#define BASE_NS 1000000000000ULL   /* simulated monotonic time of step 0 */
#define TABLE_CELLS 15

/* What the processes share besides the table. */
struct shared {
    pthread_barrier_t barrier;
    uint32_t admitted[CHILDREN];
    lc_ticket ticket;
};

static struct shared *shared;
static void *table; /* 64-byte aligned, lc_cell_table_bytes(TABLE_CELLS) long */
static size_t table_len;

static const char *policy(const char *accept) {
    static char buf[1024];
    snprintf(buf, sizeof buf,
             "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" "
             "xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"0\" state=\"full\">"
             "<rule id=\"r\"><conditions><lc:call-identity><lc:sip><lc:to>"
             "<many-tel prefix=\"+1\"/></lc:to></lc:sip></lc:call-identity></conditions>"
             "<actions><lc:accept>%s</lc:accept></actions></rule></ruleset>",
             accept);
    return buf;
}

static lc_result publish(lc_engine *e, const char *body) {
    uint64_t generation = 0;
    return lc_engine_publish(e, str("n"), NONE, (const uint8_t *)body, strlen(body), &generation);
}

static lc_verdict classify(lc_worker *w, uint64_t now, lc_decision *d) {
    lc_request r;
    memset(&r, 0, sizeof r);
    r.method = str("INVITE");
    r.to = str("<tel:+15550000>");
    r.request_uri = str("tel:+15550000");
    r.transport = LC_TRANSPORT_UDP;
    r.initial = true;
    r.has_time = true;
    r.monotonic_ns = now;
    r.unix_ns = 1700000000000000000LL;
    if (lc_classify(w, &r, d) != LC_RESULT_OK) {
        return (lc_verdict)255;
    }
    return d->verdict;
}

/* An engine for this process: on the shared table, or on its own. */
static lc_engine *engine(int on_table) {
    lc_engine *e = NULL;
    if (on_table) {
        CHECK_RESULT(lc_engine_new_shared(NULL, table, table_len, &e), LC_RESULT_OK);
    } else {
        CHECK_RESULT(lc_engine_new(NULL, &e), LC_RESULT_OK);
    }
    return e;
}

/* Child `i`: one request per 10 ms step for 10 s at a 100/s rule; records its admissions. */
static void rate_child(int i, int on_table) {
    lc_engine *e = engine(on_table);
    lc_worker *w = NULL;
    CHECK_RESULT(publish(e, policy("<lc:rate>100</lc:rate>")), LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    uint32_t admitted = 0;
    for (int step = 0; step < STEPS; step++) {
        lc_decision d;
        if (classify(w, BASE_NS + (uint64_t)step * STEP_NS, &d) == LC_VERDICT_ACCEPT) {
            admitted++;
        }
        pthread_barrier_wait(&shared->barrier);
    }
    shared->admitted[i] = admitted;
    lc_worker_free(w);
    lc_engine_free(e);
}

/* Forks `n` children running `body(i, arg)`; returns how many exited unsuccessfully. */
static int run_children(int n, void (*body)(int, int), int arg) {
    pid_t pids[CHILDREN];
    pthread_barrierattr_t attr;
    pthread_barrierattr_init(&attr);
    pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&shared->barrier, &attr, (unsigned)n);
    pthread_barrierattr_destroy(&attr);
    fflush(NULL);
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            body(i, arg);
            _exit(failures ? 1 : 0);
        }
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int status = 0;
        if (pids[i] < 0 || waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            bad++;
        }
    }
    pthread_barrier_destroy(&shared->barrier);
    return bad;
}

static uint32_t sum_admitted(void) {
    uint32_t sum = 0;
    for (int i = 0; i < CHILDREN; i++) {
        sum += shared->admitted[i];
    }
    return sum;
}

static uint32_t in_use(void) {
    uint32_t n = UINT32_MAX;
    CHECK_RESULT(lc_cell_table_in_use(table, table_len, &n), LC_RESULT_OK);
    return n;
}

static void test_one_rate_across_processes(void) {
    CHECK_RESULT(lc_cell_table_format(table, table_len), LC_RESULT_OK);
    /* 4 processes offer 400/s together to a 100/s rule for 10 s: 100 · 10 + the 10-call
     * burst (100 ms of tolerance) pass, ± 1 %. */
    CHECK(run_children(CHILDREN, rate_child, 1) == 0);
    uint32_t together = sum_admitted();
    printf("4 processes on one table admitted %u (expected 1010 +- 1%%)\n", together);
    CHECK(together >= 1000 && together <= 1020);
    for (int i = 0; i < CHILDREN; i++) {
        CHECK(shared->admitted[i] > 0);
    }
    /* Every child freed its engine: no cell is in use any more. */
    CHECK(in_use() == 0);

    /* The same load on per-process engines: each admits its whole 100/s. */
    CHECK(run_children(CHILDREN, rate_child, 0) == 0);
    uint32_t apart = sum_admitted();
    printf("4 processes on their own engines admitted %u\n", apart);
    CHECK(apart >= 3900);
}

/* Child 0 fills a window of 2, child 1 finds it full, completes child 0's first ticket, and
 * then child 0 is admitted again. */
static void window_child(int i, int unused) {
    (void)unused;
    lc_engine *e = engine(1);
    lc_worker *w = NULL;
    lc_decision d;
    CHECK_RESULT(publish(e, policy("<lc:win>2</lc:win>")), LC_RESULT_OK);
    CHECK_RESULT(lc_worker_attach(e, -1, &w), LC_RESULT_OK);
    pthread_barrier_wait(&shared->barrier); /* both published */
    if (i == 0) {
        CHECK(classify(w, BASE_NS, &d) == LC_VERDICT_ACCEPT);
        CHECK(d.has_ticket);
        shared->ticket = d.ticket;
        CHECK(classify(w, BASE_NS, &d) == LC_VERDICT_ACCEPT);
        CHECK(classify(w, BASE_NS, &d) == LC_VERDICT_REJECT);
    }
    pthread_barrier_wait(&shared->barrier); /* the window is full */
    if (i == 1) {
        CHECK(classify(w, BASE_NS, &d) == LC_VERDICT_REJECT);
        CHECK(d.status == 503);
        CHECK_RESULT(lc_complete(w, &shared->ticket), LC_RESULT_OK);
    }
    pthread_barrier_wait(&shared->barrier); /* a slot was given back by the other process */
    if (i == 0) {
        CHECK(classify(w, BASE_NS, &d) == LC_VERDICT_ACCEPT);
        CHECK(classify(w, BASE_NS, &d) == LC_VERDICT_REJECT);
    }
    lc_worker_free(w);
    lc_engine_free(e);
}

static void test_window_across_processes(void) {
    CHECK_RESULT(lc_cell_table_format(table, table_len), LC_RESULT_OK);
    CHECK(run_children(2, window_child, 0) == 0);
    CHECK(in_use() == 0);
}

static void test_bad_regions_and_a_full_table(void) {
    lc_engine *e = NULL;
    CHECK(lc_cell_table_bytes(0) == 0);
    CHECK(lc_cell_table_bytes(1) == 128);
    CHECK(lc_cell_table_bytes(TABLE_CELLS) == 64 * (TABLE_CELLS + 1));
    CHECK_RESULT(lc_cell_table_format(NULL, table_len), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_cell_table_format((char *)table + 8, table_len - 64),
                 LC_RESULT_CELL_TABLE_INVALID);
    CHECK_RESULT(lc_cell_table_format(table, 64), LC_RESULT_CELL_TABLE_INVALID);
    CHECK_RESULT(lc_engine_new_shared(NULL, NULL, table_len, &e), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_engine_new_shared(NULL, table, table_len, NULL), LC_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lc_cell_table_in_use(table, table_len, NULL), LC_RESULT_NULL_PARAMETER);
    /* Not formatted (zeroes), or formatted at another size. */
    memset(table, 0, table_len);
    CHECK_RESULT(lc_engine_new_shared(NULL, table, table_len, &e), LC_RESULT_CELL_TABLE_INVALID);
    CHECK_RESULT(lc_cell_table_format(table, table_len), LC_RESULT_OK);
    CHECK_RESULT(lc_engine_new_shared(NULL, table, table_len - 64, &e),
                 LC_RESULT_CELL_TABLE_INVALID);
    CHECK(e == NULL);

    /* A table of one cell: a policy with two rate rules does not fit and changes nothing. */
    size_t small = lc_cell_table_bytes(1);
    CHECK_RESULT(lc_cell_table_format(table, small), LC_RESULT_OK);
    CHECK_RESULT(lc_engine_new_shared(NULL, table, small, &e), LC_RESULT_OK);
    const char *two =
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" "
        "xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"0\" state=\"full\">"
        "<rule id=\"a\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"+1\"/>"
        "</lc:to></lc:sip></lc:call-identity></conditions><actions><lc:accept><lc:rate>5</lc:rate>"
        "</lc:accept></actions></rule>"
        "<rule id=\"b\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"+2\"/>"
        "</lc:to></lc:sip></lc:call-identity></conditions><actions><lc:accept><lc:rate>5</lc:rate>"
        "</lc:accept></actions></rule></ruleset>";
    CHECK_RESULT(publish(e, two), LC_RESULT_CELL_TABLE_FULL);
    lc_stats stats;
    CHECK_RESULT(lc_engine_stats(e, &stats), LC_RESULT_OK);
    CHECK(stats.generation == 0);
    uint32_t n = UINT32_MAX;
    CHECK_RESULT(lc_cell_table_in_use(table, small, &n), LC_RESULT_OK);
    CHECK(n == 0);
    CHECK_RESULT(publish(e, policy("<lc:rate>5</lc:rate>")), LC_RESULT_OK);
    CHECK_RESULT(lc_cell_table_in_use(table, small, &n), LC_RESULT_OK);
    CHECK(n == 1);
    CHECK(strstr(lc_result_text(LC_RESULT_CELL_TABLE_FULL), "cell") != NULL);
    lc_engine_free(e);
    CHECK_RESULT(lc_cell_table_in_use(table, small, &n), LC_RESULT_OK);
    CHECK(n == 0);
}

int main(void) {
    size_t shared_len = 4096;
    table_len = lc_cell_table_bytes(TABLE_CELLS);
    char *region = mmap(NULL, shared_len + table_len, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    shared = (struct shared *)region;
    table = region + shared_len;

    test_bad_regions_and_a_full_table();
    test_one_rate_across_processes();
    test_window_across_processes();

    munmap(region, shared_len + table_len);
    printf("test_cells: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
