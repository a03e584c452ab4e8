/* vae_res.c — Wan 2.2's residual-level shortcuts (vae_walk.h): the encoder's
 * average-down (diffusers' AvgDown3D) and the decoder's duplicate-up (DupUp3D), streamed
 * like the causal layers beside them, and the channel rule their grouping needs.
 *
 * Both are pure data movement plus a mean: the input's (ft, fs, fs) neighbourhood of
 * every output position is unfolded into channels, c·factor + it·fs² + ih·fs + iw
 * (factor = ft·fs²), and the encoder averages groups of g = C·factor/cout consecutive
 * unfolded channels, while the decoder repeats each input channel rep = cout·factor/C
 * times before folding. Time follows the causal convolutions: the encoder pairs frame 0
 * with a zero frame before it, then frames (1, 2), (3, 4), …; the decoder's frame 0 of
 * the stream gives only its last sub-frame. Either way a chunk gives as many frames as
 * the main path beside it, and any chunking equals the whole clip.
 */
#include "models/vae_walk.h"

#include <string.h>

/* The widths of Wan 2.2's level i: in -> out, its shortcut's (ft, fs). */
static void enc_level(const vf_vae_config *c, int i, int64_t *in, int64_t *out, int *ft, int *fs)
{
    int last = i == c->nlevels - 1;
    *in = (int64_t)c->dim * (i ? c->dim_mult[i - 1] : 1);
    *out = (int64_t)c->dim * c->dim_mult[i];
    *ft = !last && c->temporal_downsample[i] ? 2 : 1;
    *fs = last ? 1 : 2;
}

int vf_vae_residual_check(const vf_vae_config *c, vf_status *st)
{
    int rc = 0, L = c->nlevels;
    int64_t d = vf_vae_dec_base(c);
    if (!c->residual) return 0;
    for (int i = 0; i < L; i++) {
        int64_t in, out;
        int ft, fs;
        enc_level(c, i, &in, &out, &ft, &fs);
        if (in * ft * fs * fs % out)
            VF_FAIL(st, VF_EINVAL,
                    "vae config: residual encoder level %d: %lld channels x %d positions do not "
                    "average into %lld (dim_mult)", i, (long long)in, ft * fs * fs, (long long)out);
    }
    for (int i = 0; i + 1 < L; i++) {
        int64_t in = d * c->dim_mult[i ? L - i : L - 1], out = d * c->dim_mult[L - 1 - i];
        int factor = (vf_vae_dec_temporal(c, i) ? 2 : 1) * 4;
        if (out * factor % in)
            VF_FAIL(st, VF_EINVAL,
                    "vae config: residual decoder level %d: %lld channels do not repeat into "
                    "%lld x %d positions (dim_mult)", i, (long long)in, (long long)out, factor);
    }
fail:
    return rc;
}

/* out = inp permuted (shape/perm of ndim axes) on the device; nothing while measuring. */
static void perm(vf_vw_walk *w, int out, int in, int ndim, const int64_t *shape, const int *p)
{
    if (w->e) w->e->be->permute(w->e->be, vf_vw_bp(w, out), vf_vw_bp(w, in), ndim, shape, p);
}

vf_vw_act vf_vw_avg_down(vf_vw_walk *w, vf_vw_act x, int64_t cout, int ft, int fs, unsigned busy)
{
    int64_t hw = x.H * x.W, BC = w->B * x.C, Ho = x.H / fs, Wo = x.W / fs;
    int64_t factor = (int64_t)ft * fs * fs, g = x.C * factor / cout;
    unsigned bx = busy | vf_vw_bit(x.buf);
    /* temporal pairs: one pending frame kept; before frame 0 it is the zeroed cache */
    vf_vw_lstate *s = ft > 1 ? vf_vw_state(w, BC * hw) : NULL;
    int64_t pend = ft > 1 ? 1 : 0;
    if (w->e && s && s->started) pend = s->pending;
    /* frames [pending | x]: the first m·ft pair up, a last odd one waits in the cache */
    int64_t L = pend + x.n, m = L / ft, Lu = m * ft, M = m * Ho * Wo;
    int src = x.buf;
    if (ft > 1) {
        src = vf_vw_pick(w, bx, BC * Lu * hw);
        if (w->e) {
            char *cache = vf_vw_cache(w, s), *P = vf_vw_bp(w, src);
            int64_t from_cache = pend < Lu ? pend : Lu;
            vf_vw_copy_frames(w, P, Lu, 0, cache, 1, 0, from_cache, BC, hw);
            vf_vw_copy_frames(w, P, Lu, pend, vf_vw_bp(w, x.buf), x.n, 0, Lu - pend, BC, hw);
            if (L > Lu)
                vf_vw_copy_frames(w, cache, 1, 0, vf_vw_bp(w, x.buf), x.n, x.n - 1, 1, BC, hw);
            s->pending = (int)(L - Lu);
            s->started = 1;
        }
    }
    if (factor == 1 && g == 1) return x; /* identity: the block input itself */
    /* (B·C·Lu, Ho, fs, Wo, fs) -> (B·C·Lu, fs, fs, Ho, Wo) */
    int a = src;
    if (fs > 1) {
        a = vf_vw_pick(w, bx | vf_vw_bit(src), BC * Lu * hw);
        int64_t shp[5] = {BC * Lu, Ho, fs, Wo, fs};
        int p[5] = {0, 2, 4, 1, 3};
        perm(w, a, src, 5, shp, p);
    }
    /* (B·C, m, factor, Ho·Wo) -> (B·C, factor, m, Ho·Wo): channels c·factor + sub */
    int b = vf_vw_pick(w, bx | vf_vw_bit(a), BC * Lu * hw);
    {
        int64_t shp[4] = {BC, m, factor, Ho * Wo};
        int p[4] = {0, 2, 1, 3};
        perm(w, b, a, 4, shp, p);
    }
    /* (B·cout, g, M) -> (g, B·cout, M), then the mean of the g slices */
    int gs = vf_vw_pick(w, bx | vf_vw_bit(b), BC * Lu * hw);
    {
        int64_t shp[3] = {w->B * cout, g, M};
        int p[3] = {1, 0, 2};
        perm(w, gs, b, 3, shp, p);
    }
    int o = vf_vw_pick(w, bx | vf_vw_bit(gs), w->B * cout * M);
    if (w->e) {
        vf_backend *be = w->e->be;
        int64_t n = w->B * cout * M;
        be->memset0(be, vf_vw_bp(w, o), (size_t)n * w->e->es);
        for (int64_t k = 0; k < g; k++)
            be->axpy(be, vf_vw_bp(w, o), vf_vw_bp(w, gs) + k * n * (int64_t)w->e->es,
                     (float)(1.0 / (double)g), n);
    }
    return (vf_vw_act){o, cout, m, Ho, Wo};
}

vf_vw_act vf_vw_dup_up(vf_vw_walk *w, vf_vw_act x, int64_t cout, int ft, int fs, unsigned busy)
{
    int64_t hw = x.H * x.W, M = x.n * hw, factor = (int64_t)ft * fs * fs;
    int64_t rep = cout * factor / x.C, BCo = w->B * cout, elems = BCo * factor * M;
    unsigned bx = busy | vf_vw_bit(x.buf);
    vf_vw_lstate *s = ft > 1 ? vf_vw_state(w, 0) : NULL;
    int64_t first = w->e && s ? !s->started : 0;
    int64_t nout = ft * x.n - first * (ft - 1);
    /* repeat_interleave: (B·C, M) -> (B·C, rep, M) = (B·cout, factor, M) */
    int r = vf_vw_pick(w, bx, elems);
    if (w->e) {
        vf_backend *be = w->e->be;
        size_t es = w->e->es;
        for (int64_t k = 0; k < rep; k++)
            be->copy2d(be, vf_vw_bp(w, r) + k * M * (int64_t)es, (size_t)(rep * M) * es,
                       vf_vw_bp(w, x.buf), (size_t)M * es, (size_t)M * es, (size_t)(w->B * x.C));
    }
    /* (B·cout, ft·fs², n, hw) -> (B·cout, n, ft·fs², hw) */
    int a = vf_vw_pick(w, bx | vf_vw_bit(r), elems);
    {
        int64_t shp[4] = {BCo, factor, x.n, hw};
        int p[4] = {0, 2, 1, 3};
        perm(w, a, r, 4, shp, p);
    }
    /* (B·cout·n·ft, fs, fs, h, w) -> (.., h, fs, w, fs): frames t·ft + it of (h·fs, w·fs) */
    /* with a temporal factor the stream's first chunk is compacted from r into o (frame 0
     * keeps one sub-frame): o is never r, in every pass, so the copy never overlaps and the
     * buffers picked are the same whether or not the chunk is the first */
    int o = vf_vw_pick(w, bx | vf_vw_bit(a) | (ft > 1 ? vf_vw_bit(r) : 0u), elems);
    {
        int64_t shp[5] = {BCo * x.n * ft, fs, fs, x.H, x.W};
        int p[5] = {0, 3, 1, 4, 2};
        perm(w, first ? r : o, a, 5, shp, p);
    }
    if (w->e && first) /* frame 0 of the stream: only its last sub-frame */
        vf_vw_copy_frames(w, vf_vw_bp(w, o), nout, 0, vf_vw_bp(w, r), ft * x.n, ft - 1, nout, BCo,
                          hw * fs * fs);
    if (w->e && s) s->started = 1;
    return (vf_vw_act){o, cout, nout, x.H * fs, x.W * fs};
}
