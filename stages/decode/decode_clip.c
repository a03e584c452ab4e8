/* decode_clip.c — clip grid and frame selection (see decode_clip.h). */
#include "stages/decode/decode_clip.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EPS 1e-9

/* First index i with times[i] >= t - 1e-6 (a microsecond of slack for rounding in
 * manifests written with few decimals). */
static int64_t lower_bound(const double *times, int64_t n, double t)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (times[mid] < t - 1e-6) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Frame in [a, b) whose time is nearest to t; ties go to the earlier frame. */
static int64_t nearest(const double *times, int64_t a, int64_t b, double t)
{
    int64_t lo = a, hi = b;
    while (lo < hi) { /* first frame with time >= t */
        int64_t mid = (lo + hi) / 2;
        if (times[mid] < t) lo = mid + 1;
        else hi = mid;
    }
    if (lo >= b) return b - 1;
    if (lo == a) return a;
    return (times[lo] - t < t - times[lo - 1] - EPS) ? lo : lo - 1;
}

void vf_clip_plan_fini(vf_clip_plan *p)
{
    free(p->grid);
    free(p->idx);
    memset(p, 0, sizeof *p);
}

int vf_clip_plan_make(const double *times, int64_t n, double duration_s,
                      const vf_clip_opts *o, vf_clip_plan *out, vf_status *st)
{
    int rc = 0;
    const int T = o->frames;
    memset(out, 0, sizeof *out);
    out->frames = T;
    int64_t *grid = NULL, *idx = NULL, nvalid = 0;
    if (T < 1 || (o->fps <= 0 && o->stride < 1))
        VF_FAIL(st, VF_EINVAL, "decode: frames and stride must be >= 1");
    int64_t a = o->start_s > 0 ? lower_bound(times, n, o->start_s) : 0;
    int64_t b = o->end_s > 0 ? lower_bound(times, n, o->end_s) : n;
    if (b > n) b = n;
    if (a >= b) {
        if (o->start_s > 0 || o->end_s > 0)
            VF_FAIL(st, VF_EBADINPUT, "no frame in the window [%.3f, %.3f) s (video lasts %.3f s)",
                    o->start_s > 0 ? o->start_s : 0.0, o->end_s > 0 ? o->end_s : duration_s, duration_s);
        VF_FAIL(st, VF_EBADINPUT, "no frames");
    }
    int64_t ngrid;
    if (o->fps <= 0) {
        int64_t span = vf_clip_span(o), step = (int64_t)T * o->stride, avail = b - a;
        if (avail < span)
            VF_FAIL(st, VF_EBADINPUT, "too short: %lld frames readable%s, %lld needed (a clip of %d frames at stride %d)",
                    (long long)avail, (o->start_s > 0 || o->end_s > 0) ? " in the window" : "",
                    (long long)span, T, o->stride);
        ngrid = (avail - span) / step + 1;
        grid = malloc(ngrid * sizeof *grid);
        if (!grid) VF_FAIL(st, VF_ENOMEM, "decode: clip plan of %lld clips", (long long)ngrid);
        for (int64_t m = 0; m < ngrid; m++) grid[m] = m;
        nvalid = ngrid;
    } else {
        double t0 = times[a];
        double tend = duration_s;
        if (o->end_s > 0 && o->end_s < tend) tend = o->end_s;
        /* grid clip m is inside the window iff its last sample time is before tend */
        double room = (tend - t0) * o->fps; /* samples that fit, fractional */
        ngrid = room > 0 ? (int64_t)floor((room + 1 - EPS) / T) : 0;
        while (ngrid > 0 && t0 + (ngrid * (double)T - 1) / o->fps >= tend - EPS) ngrid--;
        if (ngrid <= 0)
            VF_FAIL(st, VF_EBADINPUT, "too short: %.3f s%s, a clip of %d frames at %g fps needs %.3f s",
                    tend - t0, (o->start_s > 0 || o->end_s > 0) ? " in the window" : "", T, o->fps,
                    (T - 1) / o->fps + 1e-3);
        grid = malloc(ngrid * sizeof *grid);
        if (!grid) VF_FAIL(st, VF_ENOMEM, "decode: clip plan of %lld clips", (long long)ngrid);
        int64_t first_bad = -1, bad_frame = -1;
        for (int64_t m = 0; m < ngrid; m++) {
            int64_t prev = -1;
            bool ok = true;
            for (int j = 0; j < T && ok; j++) {
                int64_t k = nearest(times, a, b, t0 + (m * (double)T + j) / o->fps);
                if (k <= prev) {
                    ok = false;
                    if (first_bad < 0) { first_bad = m; bad_frame = k; }
                }
                prev = k;
            }
            if (ok) grid[nvalid++] = m;
        }
        if (nvalid == 0)
            VF_FAIL(st, VF_EBADINPUT,
                    "source frame rate too low for fps=%g: clip %lld would repeat frame %lld "
                    "(frames are never duplicated)", o->fps, (long long)first_bad, (long long)bad_frame);
    }
    int64_t nsel = nvalid;
    if (o->clips_per_video > 0 && o->clips_per_video < nvalid) {
        nsel = o->clips_per_video;
        for (int64_t k = 0; k < nsel; k++) /* evenly spread, in increasing order */
            grid[k] = grid[(int64_t)((k + 0.5) * nvalid / nsel)];
    }
    idx = malloc((size_t)nsel * T * sizeof *idx);
    if (!idx) VF_FAIL(st, VF_ENOMEM, "decode: clip plan of %lld clips", (long long)nsel);
    for (int64_t k = 0; k < nsel; k++) {
        int64_t m = grid[k];
        int64_t *row = idx + k * T;
        for (int j = 0; j < T; j++) {
            if (o->fps <= 0) row[j] = a + m * (int64_t)T * o->stride + (int64_t)j * o->stride;
            else row[j] = nearest(times, a, b, times[a] + (m * (double)T + j) / o->fps);
        }
    }
    out->nclips = nsel;
    out->grid = grid;
    out->idx = idx;
    return 0;
fail:
    free(grid);
    free(idx);
    return rc;
}
