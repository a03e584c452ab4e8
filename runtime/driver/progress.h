/* progress.h — what `vflow run` shows while it runs.
 *
 * On a TTY: one line redrawn in place (every VF_PROGRESS_TTY_MS) with, per stage, its
 * items, rate and gauges, cut to the terminal width. Otherwise (CI logs, pipes): a plain
 * line every VF_PROGRESS_PLAIN_MS. Messages the driver prints meanwhile call
 * vf_progress_clear first so that they do not mix with the live line.
 */
#ifndef VF_PROGRESS_H
#define VF_PROGRESS_H
#include "runtime/driver/metrics.h"
#include <stdio.h>

#define VF_PROGRESS_TTY_MS 250
#define VF_PROGRESS_PLAIN_MS 5000

typedef struct vf_progress {
    FILE *out;           /* borrowed (stdout) */
    bool tty;
    bool line_open;      /* a live line is on screen */
    int64_t last_ns;
} vf_progress;

void vf_progress_init(vf_progress *p, FILE *out, bool tty);
/* Redraws when due (or now with force). */
void vf_progress_tick(vf_progress *p, const vf_monitor *m, bool force);
/* Erases the live line (TTY) so another message can be printed. */
void vf_progress_clear(vf_progress *p);
/* Formats the status line of m into buf (no newline). */
void vf_progress_line(const vf_monitor *m, char *buf, size_t n);

#endif /* VF_PROGRESS_H */
