/* metrics.h — the driver's live picture of a run, and metrics.jsonl.
 *
 * Workers send their stages' counters over the control plane (ctl.h, "M" messages);
 * the monitor keeps the latest values per stage, derives rates between two samples and
 * writes one row per stage to metrics.jsonl for every sample. The progress display and
 * the final summary read the same picture. Row formats (one JSON object per line, "t"
 * = seconds since the run started):
 *
 *   periodic, per stage:
 *     {"t","type":"stage","stage","kind","worker","phase","items","items_in","items_out",
 *      "bytes","items_s","bytes_s","busy","fill":{"<input port>":0..1},"rss","live","peak",
 *      "dropped","gauges":{...}}
 *     items/bytes = received for a stage with inputs, sent for a source; busy = fraction
 *     of wall time not blocked in vf_recv/vf_send since the previous row; fill = items in
 *     flight / capacity of each input port's edges, as the producing port counts them (it
 *     alone knows what sits in sockets; the receiver's own view where it knows more);
 *     rss = VmRSS of the stage's worker process (bytes); live/peak = the stage's memory
 *     account.
 *   event (vf_metric_row): the stage's object with "stage" and "t" added in front.
 *   final, per stage: as periodic with "type":"final", "time_s" (run time of the stage),
 *     "rss_peak" (VmRSS high-water mark seen) and whole-run average rates and busy.
 *   end of run: {"t","type":"run","status":"done|failed|interrupted","elapsed_s","message"}.
 */
#ifndef VF_METRICS_H
#define VF_METRICS_H
#include "runtime/graph/graph.h"
#include "runtime/core/stage.h"
#include <stdio.h>
#include <sys/types.h>

typedef struct vf_mon_port {
    char name[VF_NAME_MAX];
    bool out;                    /* an output port */
    int64_t inflight, capacity;
} vf_mon_port;

typedef struct vf_mon_edge {
    int src, dst;
    char src_port[VF_NAME_MAX], dst_port[VF_NAME_MAX];
} vf_mon_edge;

typedef struct vf_mon_stage {
    char name[VF_NAME_MAX];
    char kind[VF_NAME_MAX];
    int worker;
    bool source;                 /* no connected input: counts what it sends */
    int phase;                   /* vf_stage_phase, as last sampled */
    bool done;                   /* its worker reported it done (outputs drained) */
    int64_t in, out, bytes_in, bytes_out, blocked_ns, run_ns, live, peak, dropped;
    int nports;
    vf_mon_port ports[VF_MAX_PORTS];
    int ngauges;
    vf_gauge gauges[VF_CTX_MAX_GAUGES];
    /* rates, from the two latest samples */
    bool have_prev;              /* a sample exists to take rates from */
    bool have_rate;              /* items_s / bytes_s / busy hold a measurement */
    int64_t prev_t_ns, prev_items, prev_bytes, prev_blocked;
    double items_s, bytes_s, busy;
} vf_mon_stage;

typedef struct vf_tb_log vf_tb_log; /* tb_log.h */
#define VF_MON_FAILURES 12
#define VF_MON_SUMMARY 32

/* A stage's line for the closing summary (vf_summary): the newest of its key. */
typedef struct vf_mon_line {
    int stage;
    char key[32];
    char line[VF_SUMMARY_LINE];
} vf_mon_line;

typedef struct vf_monitor {
    int nstages;
    vf_mon_stage *stages;        /* indexed like the graph's stages */
    int nworkers;
    char (*worker_names)[VF_NAME_MAX];
    pid_t *pids;                 /* per worker, 0 = not running */
    int64_t *rss;                /* per worker, last VmRSS read (bytes) */
    int64_t *rss_peak;           /* per worker, highest VmRSS seen */
    int nedges;
    vf_mon_edge *edges;          /* to find the producer of an input */
    int metrics_fd;              /* borrowed */
    int64_t t0_ns;               /* monotonic start of the run */
    vf_tb_log *tb;               /* owned: TensorBoard event file, NULL when off */
    /* event rows "event":"<what>_failed" (a failed checkpoint): the first ones, for the
     * summary, and their count */
    char failures[VF_MON_FAILURES][320];
    int nfailures;
    /* event rows "event":"summary": the newest line per (stage, key), in first-seen order */
    vf_mon_line lines[VF_MON_SUMMARY];
    int nlines;
} vf_monitor;

/* Sets up the picture of placed graph g; rows go to metrics_fd. */
int vf_monitor_init(vf_monitor *m, const vf_graph *g, int metrics_fd, vf_status *st);
void vf_monitor_fini(vf_monitor *m);
/* Applies a worker's "M" payload, refreshes its RSS and writes a row per stage it
 * hosts. Malformed lines are skipped (the payload comes from our own binary). */
void vf_monitor_sample(vf_monitor *m, int worker, const char *payload);
/* Writes an event row of stage `stage`. A text that is not a JSON object is written as
 * {"stage","t","bad_row":"<text>"} so that metrics.jsonl stays parseable. A row whose
 * "event" ends in "_failed" (with "step" and "error" when it has them) is also kept for
 * the summary, and so is the "line" of an "event":"summary" row (the newest per stage and
 * "key"; vf_summary). */
void vf_monitor_event(vf_monitor *m, int stage, const char *json_object);
/* Final rows: one per stage and the end-of-run row. */
void vf_monitor_final(vf_monitor *m, const char *status, const char *message);
/* The end-of-run table (per stage: items, time, rate, peak memory, worker RSS), the
 * stages' summary lines, then the failures the stages reported as "_failed" events (the
 * first VF_MON_FAILURES and their count). */
void vf_monitor_summary(const vf_monitor *m, FILE *out, const char *title);
double vf_monitor_elapsed(const vf_monitor *m);

/* Items a stage has processed (received, or sent for a source). */
int64_t vf_mon_items(const vf_mon_stage *s);
/* VmRSS and VmHWM (its peak) of a process in bytes, from one read of its status; 0, or
 * -1 (both -1) when it cannot be read. */
int vf_proc_mem(pid_t pid, int64_t *rss, int64_t *peak);
/* "1.5 GiB", "12.0 KiB", "17 B" */
void vf_fmt_bytes(double b, char *buf, size_t n);
/* "1.23k", "45.6M": for rates. */
void vf_fmt_count(double v, char *buf, size_t n);
const char *vf_mon_phase_name(int phase);

#endif /* VF_METRICS_H */
