/* dit_red.c — the grains of the backward pass's sums over tokens, and the hops that carry
 * their running sums from rank to rank (dit_red.h).
 */
#include "models/dit_red.h"
#include "models/dit_sp.h"

#include <string.h>

static void add_cut(int64_t *c, int *n, int64_t x)
{
    int i = 0;
    while (i < *n && c[i] < x) i++;
    if (i < *n && c[i] == x) return;
    if (*n >= VF_DIT_GRAINS_MAX - 1) return; /* never with NMAX 8: 28 cuts at most */
    memmove(c + i + 1, c + i, sizeof *c * (size_t)(*n - i));
    c[i] = x;
    (*n)++;
}

void dit_grains_of(const vf_dit_part *p, int64_t B, int64_t L, dit_grains *g)
{
    memset(g, 0, sizeof *g);
    g->B = B, g->L = L;
    g->on = p->be->device.kind == VF_DEV_CPU;
    g->pass = g->on && p->sp && p->sp->n > 1;
    int64_t whole = L, lo = 0, cnt = L, H = p->pl.c.heads;
    if (p->sp) {
        whole = p->sp->L;
        vf_dit_sp_range(p->sp, &lo, &cnt);
    }
    int64_t cut[VF_DIT_GRAINS_MAX];
    int nc = 0;
    if (g->on) {
        for (int64_t N = 2; N <= VF_DIT_GRAIN_NMAX; N++) {
            if (H % N) continue;
            int64_t r = (whole + N - 1) / N;
            for (int64_t j = 1; j < N; j++)
                if (j * r > lo && j * r < lo + cnt) add_cut(cut, &nc, j * r - lo);
        }
    }
    g->at[0] = 0;
    for (int i = 0; i < nc; i++) g->at[i + 1] = cut[i];
    g->at[nc + 1] = L; /* the pads ride with the last segment: they add exact zeros */
    g->n = nc + 1;
}

void dit_grains_off(int64_t B, int64_t L, dit_grains *g)
{
    memset(g, 0, sizeof *g);
    g->B = B, g->L = L, g->n = 1, g->at[1] = L;
}

int dit_grains_count(const dit_grains *g) { return g->n * (int)g->B; }

dit_grain dit_grain_at(const dit_grains *g, int k)
{
    int s = k / (int)g->B, bb = k % (int)g->B;
    return (dit_grain){.b = bb, .row = bb * g->L + g->at[s], .rows = g->at[s + 1] - g->at[s], .tok = g->at[s]};
}

static int64_t total_bytes(const vf_dit_part *p, const dit_acc *a, int na)
{
    int64_t t = 0;
    for (int i = 0; i < na; i++)
        if (a[i].p) t += a[i].n;
    return t * (int64_t)p->pl.gs;
}

/* Copies bytes [off, off + n) of the concatenation of a's buffers to (out) or from buf. */
static void span(const vf_dit_part *p, const dit_acc *a, int na, int64_t off, int64_t n, char *buf, bool out)
{
    for (int i = 0; i < na && n > 0; i++) {
        if (!a[i].p) continue;
        int64_t sz = a[i].n * (int64_t)p->pl.gs;
        if (off >= sz) {
            off -= sz;
            continue;
        }
        int64_t k = sz - off < n ? sz - off : n;
        if (out) memcpy(buf, (char *)a[i].p + off, (size_t)k);
        else memcpy((char *)a[i].p + off, buf, (size_t)k);
        buf += k, n -= k, off = 0;
    }
}

static void zero(const vf_dit_part *p, const dit_acc *a, int na)
{
    for (int i = 0; i < na; i++)
        if (a[i].p) memset(a[i].p, 0, (size_t)a[i].n * p->pl.gs);
}

/* One hop: rank `from` hands the sums to rank `to`; every rank takes part (an all-to-all
 * of which only that chunk carries anything). */
static void hop(vf_dit_part *p, const dit_acc *a, int na, int from, int to)
{
    const vf_dit_sp *sp = p->sp;
    const int n = sp->n, me = sp->rank;
    const int64_t total = total_bytes(p, a, na);
    int64_t chunk = (int64_t)vf_dit_sp_chunk_bytes(n, sp->L, p->pl.B, &p->pl.c, p->pl.as);
    if (chunk > p->spw_bytes / n) chunk = p->spw_bytes / n;
    if (chunk < 1) { /* never with a model's sizes; no hop rather than no end */
        p->sp_rc = vf_status_set(&p->sp_st, VF_EINVAL, __FILE__, __LINE__,
                                 "sequence parallelism: no all-to-all chunk to pass the sums over tokens in");
        return;
    }
    char *stage = p->spw[0];
    for (int64_t off = 0; off < total && !p->sp_rc; off += chunk) {
        int64_t k = total - off < chunk ? total - off : chunk;
        if (me == from) span(p, a, na, off, k, stage + (int64_t)to * k, true);
        vf_status st = {0};
        int rc = vf_a2a_run(sp->a2a, stage, stage, (size_t)k, &st);
        if (rc) {
            p->sp_rc = rc;
            p->sp_st = st;
            return;
        }
        if (me == to) span(p, a, na, off, k, stage + (int64_t)from * k, false);
    }
    if (me == from) zero(p, a, na);
}

void dit_red_enter(vf_dit_part *p, const dit_grains *g, const dit_acc *a, int na, bool ring)
{
    if (!g->on) return;
    if (!ring) zero(p, a, na);
    if (!g->pass || !total_bytes(p, a, na)) return;
    const int n = p->sp->n, me = p->sp->rank;
    for (int h = ring ? 0 : 1; h <= me; h++) hop(p, a, na, (h + n - 1) % n, h);
}

void dit_red_leave(vf_dit_part *p, const dit_grains *g, const dit_acc *a, int na, bool ring)
{
    (void)ring;
    if (!g->pass || !total_bytes(p, a, na)) return;
    const int n = p->sp->n, me = p->sp->rank;
    for (int h = me + 1; h < n; h++) hop(p, a, na, h - 1, h);
}
