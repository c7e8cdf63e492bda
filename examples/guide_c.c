/* The C fragments of docs/c.md that are not whole programs, in functions that give them their
 * inputs: make example compiles and runs this, and tests/docs/samples.py checks that the guide
 * shows each fragment as it stands here. */
#define _DEFAULT_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include <loadctl.h>

struct request {
    int served;
};

static void serve(struct request *r) { r->served++; }

/* One limit across processes: the table in shared memory (here without the fork). */
static int shared_cells(void) {
    /* In the parent, before forking: 64-byte aligned shared memory, formatted once. */
    size_t len = lc_cell_table_bytes(4096);          /* cells for 4,096 rate/window rules */
    void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    lc_cell_table_format(mem, len);
    /* In each child, after the fork: */
    lc_engine *engine;
    lc_engine_new_shared(NULL, mem, len, &engine);   /* then publish and classify as usual */
    int ok = engine != NULL;
    lc_engine_free(engine);
    munmap(mem, len);
    return ok;
}

/* PRSM from C: classify, observe, schedule, serve. */
static int prsm(lc_worker *worker, const uint8_t *buf, size_t len, uint64_t now_ns, struct request *req) {
    lc_detector *det = NULL;
    lc_scheduler *sched = NULL;
    lc_scheduler_config sc = {LC_DISCIPLINE_PRIORITY, 4096, 4096};
    lc_detector_new(NULL, &det); /* defaults: 262,144 transactions, T1 500 ms, 16 stripes */
    lc_scheduler_new(&sc, &sched);

    /* Receiving thread, per request `req` (raw bytes buf/len). */
    lc_decision d;
    lc_class cls;
    if (lc_classify_sip(worker, buf, len, LC_TRANSPORT_UDP, &d) == LC_RESULT_OK && d.verdict == LC_VERDICT_ACCEPT &&
        lc_detector_observe_sip(det, buf, len, now_ns, &cls) == LC_RESULT_OK &&
        lc_scheduler_push(sched, (uintptr_t)req, cls) == LC_RESULT_QUEUE_FULL) {
        bool forgotten;
        lc_detector_forget_sip(det, buf, len, &forgotten); /* its next copy is an original again */
        /* answer 503 (or discard) and release req */
    }

    /* Serving threads. */
    uintptr_t item;
    while (lc_scheduler_pop(sched, &item, &cls) == LC_RESULT_OK) {
        serve((struct request *)item);
    }
    lc_scheduler_free(sched);
    lc_detector_free(det);
    return req->served;
}

/* One scan per request: the detector, overload control's category and classification. */
static int one_scan(lc_engine *engine, lc_worker *worker, lc_detector *det, const uint8_t *buf, size_t len,
                    uint64_t now_ns) {
    lc_scanned_sip scan; /* on the stack; it points into buf: keep buf unchanged until the last call */
    if (lc_sip_scan(buf, len, &scan) != LC_RESULT_OK) {
        return 0; /* malformed: the LC_RESULT_SIP_* code each *_sip call would give */
    }
    lc_sip_options o = {0};
    o.transport = LC_TRANSPORT_UDP;
    lc_class cls;
    lc_oc_category cat;
    lc_decision d;
    if (lc_detector_observe_scanned(det, &scan, now_ns, &cls) != LC_RESULT_OK ||
        lc_oc_category_scanned(engine, &scan, &o, &cat) != LC_RESULT_OK ||
        lc_classify_scanned(worker, &scan, &o, &d) != LC_RESULT_OK) {
        return 0;
    }
    return cls == LC_CLASS_ORIGINAL && cat == LC_OC_CATEGORY_REDUCIBLE && d.verdict == LC_VERDICT_ACCEPT;
}

static const char INVITE[] = "INVITE sip:bob@example.com SIP/2.0\r\n"
                             "Via: SIP/2.0/UDP 192.0.2.4:5060;branch=z9hG4bK74bf9\r\n"
                             "From: <sip:alice@example.net>;tag=9fxced76sl\r\n"
                             "To: <sip:bob@example.com>\r\n"
                             "Call-ID: 3848276298220188511@example.net\r\n"
                             "CSeq: 1 INVITE\r\n"
                             "Content-Length: 0\r\n\r\n";

int main(void) {
    lc_engine *engine = NULL;
    lc_worker *worker = NULL;
    struct request req = {0};
    if (!shared_cells() || lc_engine_new(NULL, &engine) != LC_RESULT_OK ||
        lc_worker_attach(engine, -1, &worker) != LC_RESULT_OK) {
        fprintf(stderr, "guide_c: setup failed\n");
        return 1;
    }
    /* No policy: the INVITE is accepted, observed as an original and served once. */
    int served = prsm(worker, (const uint8_t *)INVITE, strlen(INVITE), 1000000, &req);
    lc_detector *det = NULL;
    int scanned = lc_detector_new(NULL, &det) == LC_RESULT_OK &&
                  one_scan(engine, worker, det, (const uint8_t *)INVITE, strlen(INVITE), 1000000);
    lc_detector_free(det);
    lc_worker_free(worker);
    lc_engine_free(engine);
    if (served != 1) {
        fprintf(stderr, "guide_c: served %d requests, expected 1\n", served);
        return 1;
    }
    if (!scanned) {
        fprintf(stderr, "guide_c: the scanned INVITE was not an accepted, reducible original\n");
        return 1;
    }
    printf("guide_c: the guide's fragments ran\n");
    return 0;
}
