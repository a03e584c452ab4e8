/* progress.c — the live progress line and the plain periodic lines. See progress.h. */
#include "runtime/driver/progress.h"

#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

void vf_progress_init(vf_progress *p, FILE *out, bool tty)
{
    memset(p, 0, sizeof *p);
    p->out = out;
    p->tty = tty;
    p->last_ns = vf_now_ns();
}

static void cat(char *buf, size_t n, size_t *len, const char *s)
{
    size_t l = strlen(s);
    if (*len + l >= n) l = n - 1 - *len;
    memcpy(buf + *len, s, l);
    *len += l;
    buf[*len] = 0;
}

void vf_progress_line(const vf_monitor *m, char *buf, size_t n)
{
    size_t len = 0;
    char tmp[256];
    buf[0] = 0;
    snprintf(tmp, sizeof tmp, "[%.1fs]", vf_monitor_elapsed(m));
    cat(buf, n, &len, tmp);
    for (int i = 0; i < m->nstages; i++) {
        const vf_mon_stage *s = &m->stages[i];
        char items[32], rate[32];
        vf_fmt_count((double)vf_mon_items(s), items, sizeof items);
        vf_fmt_count(s->items_s, rate, sizeof rate);
        const char *mark = s->phase == VF_PHASE_DONE     ? " done"
                           : s->phase == VF_PHASE_FAILED ? " FAILED"
                                                         : "";
        if (s->phase == VF_PHASE_RUN && s->have_rate)
            snprintf(tmp, sizeof tmp, "%s %s %s (%s/s)", i ? " |" : "", s->name, items, rate);
        else
            snprintf(tmp, sizeof tmp, "%s %s %s%s", i ? " |" : "", s->name, items, mark);
        cat(buf, n, &len, tmp);
        for (int k = 0; k < s->ngauges; k++) {
            snprintf(tmp, sizeof tmp, " %s=%.4g", s->gauges[k].key, s->gauges[k].value);
            cat(buf, n, &len, tmp);
        }
    }
}

static int term_width(FILE *out)
{
    struct winsize ws;
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 10) return ws.ws_col;
    return 100;
}

void vf_progress_tick(vf_progress *p, const vf_monitor *m, bool force)
{
    int64_t now = vf_now_ns();
    int64_t every = (int64_t)(p->tty ? VF_PROGRESS_TTY_MS : VF_PROGRESS_PLAIN_MS) * 1000000;
    if (!force && now - p->last_ns < every) return;
    p->last_ns = now;
    char line[1024];
    vf_progress_line(m, line, sizeof line);
    if (p->tty) {
        /* Cut to the width so the line never wraps: a wrapped line cannot be redrawn
         * in place with a carriage return. */
        int w = term_width(p->out) - 1;
        if ((int)strlen(line) > w) line[w] = 0;
        fprintf(p->out, "\r\033[K%s", line);
        p->line_open = true;
    } else {
        fprintf(p->out, "vflow: %s\n", line);
    }
    fflush(p->out);
}

void vf_progress_clear(vf_progress *p)
{
    if (p->tty && p->line_open) {
        fputs("\r\033[K", p->out);
        fflush(p->out);
    }
    p->line_open = false;
}
