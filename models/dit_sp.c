/* dit_sp.c — Ulysses self-attention over the ranks of a sequence-parallel partition
 * (dit_sp.h): permute to the all-to-all's chunks, exchange, permute into place.
 *
 * Tokens to heads: local (B, Lr, H, Dh), seen as (B, Lr, N, Hg, Dh), is permuted to
 * (N, B, Lr, Hg, Dh) so chunk j holds what rank j attends with (heads group j of our
 * tokens); after the exchange chunk i holds rank i's tokens of our heads group, and
 * (N, B, Lr, Hg, Dh) permuted to (B, N, Lr, Hg, Dh) is the whole sequence in order.
 * Heads to tokens is the inverse. Attention runs one sample at a time, so the keys of a
 * sample are the first L rows of its N·Lr: the pads are never attended to.
 */
#include "models/dit_sp.h"

#include <stdbool.h>
#include <string.h>

int vf_dit_sp_init(vf_dit_sp *sp, vf_a2a *a2a, int n, int rank, int64_t L, int64_t H, vf_status *st)
{
    memset(sp, 0, sizeof *sp);
    if (n >= 1 && H % n != 0)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "sequence parallelism: the model's %lld heads are not divisible by sp = %d", (long long)H,
                             n);
    if (n < 1 || rank < 0 || rank >= n || L < 1 || (n > 1 && !a2a))
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "sequence parallelism: rank %d of sp = %d over %lld tokens%s", rank, n, (long long)L,
                             n > 1 && !a2a ? " without an all-to-all group" : "");
    sp->a2a = a2a, sp->n = n, sp->rank = rank, sp->L = L;
    sp->Lr = (L + n - 1) / n;
    return 0;
}

void vf_dit_sp_range(const vf_dit_sp *sp, int64_t *lo, int64_t *count)
{
    int64_t a = (int64_t)sp->rank * sp->Lr, b = a + sp->Lr;
    if (a > sp->L) a = sp->L;
    if (b > sp->L) b = sp->L;
    *lo = a, *count = b - a;
}

int64_t vf_dit_sp_elems(const vf_dit_sp *sp, int64_t B, int64_t H, int64_t Dh) { return B * sp->Lr * H * Dh; }

/* One trade of layouts: permute src into the all-to-all's chunks (N, B, Lr, Hg, Dh) in
 * work, exchange in place, permute into dst. Tokens to heads: local (B, Lr, H, Dh) seen as
 * (B, Lr, N, Hg, Dh) in, the heads layout (B, N·Lr, Hg, Dh) out; heads to tokens the
 * inverse. work is neither src nor dst; dst may be src. */
static int trade(vf_backend *be, const vf_dit_sp *sp, bool heads, void *dst, const void *src, void *work, int64_t B,
                 int64_t H, int64_t Dh, vf_status *st)
{
    int64_t N = sp->n, Hg = H / N;
    const int64_t local[5] = {B, sp->Lr, N, Hg, Dh}, whole[5] = {B, N, sp->Lr, Hg, Dh};
    const int64_t chunks[5] = {N, B, sp->Lr, Hg, Dh};
    static const int local_to_chunks[5] = {2, 0, 1, 3, 4}, swap01[5] = {1, 0, 2, 3, 4};
    static const int chunks_to_local[5] = {1, 2, 0, 3, 4};
    be->permute(be, work, src, 5, heads ? local : whole, heads ? local_to_chunks : swap01);
    if (N > 1) {
        size_t chunk = (size_t)(B * sp->Lr * Hg * Dh) * vf_dtype_size(be->act_dtype);
        int rc = vf_a2a_run(sp->a2a, work, work, chunk, st);
        if (rc) return rc;
    }
    be->permute(be, dst, work, 5, chunks, heads ? swap01 : chunks_to_local);
    return 0;
}

static int to_heads(vf_backend *be, const vf_dit_sp *sp, void *dst, const void *src, void *work, int64_t B,
                    int64_t H, int64_t Dh, vf_status *st)
{
    return trade(be, sp, true, dst, src, work, B, H, Dh, st);
}

static int to_tokens(vf_backend *be, const vf_dit_sp *sp, void *dst, const void *src, void *work, int64_t B,
                     int64_t H, int64_t Dh, vf_status *st)
{
    return trade(be, sp, false, dst, src, work, B, H, Dh, st);
}

static int check_backend(const vf_backend *be, vf_status *st)
{
    if (be->device.kind == VF_DEV_CPU) return 0;
    return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                         "sequence parallelism: the all-to-all over shared memory takes the CPU backend, not %s",
                         be->name);
}

int vf_dit_sp_attention_fwd(vf_backend *be, const vf_dit_sp *sp, void *out, const void *q, const void *k,
                            const void *v, int64_t B, int64_t H, int64_t Dh, float scale, vf_dit_sp_saved *sv,
                            void *work, vf_status *st)
{
    int rc = check_backend(be, st);
    if (rc) return rc;
    if ((rc = to_heads(be, sp, sv->q, q, work, B, H, Dh, st)) || (rc = to_heads(be, sp, sv->k, k, work, B, H, Dh, st)) ||
        (rc = to_heads(be, sp, sv->v, v, work, B, H, Dh, st)))
        return rc;
    int64_t Lq = (int64_t)sp->n * sp->Lr, Hg = H / sp->n, row = Hg * Dh;
    size_t as = vf_dtype_size(be->act_dtype);
    for (int64_t b = 0; b < B; b++) {
        size_t off = (size_t)(b * Lq * row) * as;
        be->attention_fwd(be, (char *)sv->o + off, sv->lse + b * Hg * Lq, (const char *)sv->q + off,
                          (const char *)sv->k + off, (const char *)sv->v + off, 1, Lq, sp->L, Hg, Dh, scale);
    }
    return to_tokens(be, sp, out, sv->o, work, B, H, Dh, st);
}

int vf_dit_sp_attention_bwd(vf_backend *be, const vf_dit_sp *sp, void *dq, void *dk, void *dv, const void *dout,
                            int64_t B, int64_t H, int64_t Dh, float scale, const vf_dit_sp_saved *sv,
                            void *const work[2], vf_status *st)
{
    int rc = check_backend(be, st);
    if (rc) return rc;
    /* dout in the heads layout (work[1]), its pad rows zero: a pad's query reaches the
     * real keys' gradients only through them */
    if ((rc = to_heads(be, sp, work[1], dout, work[0], B, H, Dh, st))) return rc;
    int64_t Lq = (int64_t)sp->n * sp->Lr, Hg = H / sp->n, row = Hg * Dh;
    size_t as = vf_dtype_size(be->act_dtype);
    for (int64_t b = 0; b < B; b++) {
        size_t off = (size_t)(b * Lq * row) * as, tail = (size_t)(sp->L * row) * as;
        size_t pad = (size_t)((Lq - sp->L) * row) * as;
        if (pad) be->memset0(be, (char *)work[1] + off + tail, pad);
        /* the heads-layout gradients go where the local ones will be: in place below */
        be->attention_bwd(be, (char *)dq + off, (char *)dk + off, (char *)dv + off, (const char *)work[1] + off,
                          (const char *)sv->q + off, (const char *)sv->k + off, (const char *)sv->v + off,
                          (const char *)sv->o + off, sv->lse + b * Hg * Lq, 1, Lq, sp->L, Hg, Dh, scale);
        if (pad) {
            be->memset0(be, (char *)dk + off + tail, pad);
            be->memset0(be, (char *)dv + off + tail, pad);
        }
    }
    if ((rc = to_tokens(be, sp, dq, dq, work[0], B, H, Dh, st)) || (rc = to_tokens(be, sp, dk, dk, work[0], B, H, Dh, st)))
        return rc;
    return to_tokens(be, sp, dv, dv, work[0], B, H, Dh, st);
}
