/* dit_fp8.c — the frozen base in FP8 (dit_fp8.h): its layout (which tensors, where each
 * lies), loading it, and the block linears that run on it.
 *
 * The FP8 bytes and the packed rest are two device buffers laid out in flat order, so a
 * partition's tensors keep their order and the offsets are a prefix sum; the scales stay
 * on the host because the matmul_fp8 ops take the scale as an argument (a recorded unit
 * bakes it in, which is right: a frozen base's scale never changes).
 */
#include "models/dit_internal.h"

#include <stdio.h>
#include <stdlib.h>

bool vf_dit_fp8_tensor(const vf_dit_layout *l, int idx)
{
    if (idx < ET_COUNT || idx >= dit_tidx_head(l->cfg.depth, 0) || l->t[idx].numel == 0) return false;
    switch ((idx - ET_COUNT) % BT_COUNT) {
    case BT_SQ_W: case BT_SK_W: case BT_SV_W: case BT_SO_W:
    case BT_CQ_W: case BT_CK_W: case BT_CV_W: case BT_CO_W:
    case BT_CKI_W: case BT_CVI_W: case BT_F1_W: case BT_F2_W:
        return true;
    default:
        return false;
    }
}

static bool inside(const vf_dit_tensor *t, int64_t off, int64_t n)
{
    return t->numel > 0 && t->offset >= off && t->offset + t->numel <= off + n;
}

void vf_dit_fp8_memory(const vf_dit_layout *l, int64_t off, int64_t n, size_t act_size, vf_dit_fp8_mem *out)
{
    memset(out, 0, sizeof *out);
    int64_t rest = 0, big = 0;
    for (int i = 0; i < l->n; i++) {
        const vf_dit_tensor *t = &l->t[i];
        if (!inside(t, off, n)) continue;
        if (vf_dit_fp8_tensor(l, i)) {
            out->nfp8 += t->numel;
            if (t->numel > big) big = t->numel;
        } else {
            rest += t->numel;
        }
    }
    out->fp8 = out->nfp8;
    out->rest = rest * (int64_t)act_size;
    out->scratch = big * (int64_t)act_size;
    out->host = (int64_t)l->n * (int64_t)(sizeof(int64_t) + sizeof(float));
}

void vf_dit_fp8_free(vf_dit_fp8 *fb)
{
    if (!fb) return;
    if (fb->rest) fb->be->free(fb->be, fb->rest);
    if (fb->w8) fb->be->free(fb->be, fb->w8);
    if (fb->wbuf) fb->be->free(fb->be, fb->wbuf);
    if (fb->host8) fb->be->free_pinned(fb->be, fb->host8);
    free(fb->at);
    free(fb->scale);
    free(fb);
}

int vf_dit_fp8_new(vf_backend *be, const vf_dit_layout *l, int64_t off, int64_t n, vf_dit_fp8 **out,
                   vf_status *st)
{
    return vf_dit_fp8_new_swap(be, l, off, n, 0, 0, out, st);
}

/* With K swapped blocks ending at b1: where their FP8 bytes begin in w8 (*hole) and one
 * block's bytes (*blk); they are the last FP8 bytes of the range. */
static int swap_hole(const vf_dit_fp8 *fb, int b1, int K, int64_t *hole, int64_t *blk, vf_status *st)
{
    const int first = dit_tidx_block(b1 - K, BT_SQ_W), next = dit_tidx_block(b1 - K + 1, BT_SQ_W);
    if (K <= 0 || b1 - K < 0 || b1 > fb->l->cfg.depth || fb->at[first] < 0 ||
        fb->at[dit_tidx_block(b1 - 1, BT_SQ_W)] < 0)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "dit fp8 base: swap of blocks [%d, %d) outside its range", b1 - K, b1);
    *hole = fb->at[first];
    *blk = (K > 1 ? fb->at[next] : fb->mem.fp8) - *hole;
    VF_ASSERT(*blk * K == fb->mem.fp8 - *hole); /* blocks of one shape, the swapped ones last */
    return 0;
}

int vf_dit_fp8_new_swap(vf_backend *be, const vf_dit_layout *l, int64_t off, int64_t n, int b1, int K,
                        vf_dit_fp8 **out, vf_status *st)
{
    int rc = 0;
    *out = NULL;
    vf_dit_fp8 *fb = calloc(1, sizeof *fb);
    if (!fb) VF_FAIL(st, VF_ENOMEM, "dit fp8 base: out of memory");
    fb->be = be, fb->l = l, fb->off = off, fb->n = n;
    const size_t as = vf_dtype_size(be->act_dtype);
    vf_dit_fp8_memory(l, off, n, as, &fb->mem);
    fb->at = malloc(sizeof *fb->at * (size_t)l->n);
    fb->scale = malloc(sizeof *fb->scale * (size_t)l->n);
    if (!fb->at || !fb->scale) VF_FAIL(st, VF_ENOMEM, "dit fp8 base: out of memory");
    int64_t a8 = 0, ar = 0;
    for (int i = 0; i < l->n; i++) {
        const vf_dit_tensor *t = &l->t[i];
        fb->scale[i] = 1.0f;
        fb->at[i] = -1;
        if (!inside(t, off, n)) continue;
        int64_t *next = vf_dit_fp8_tensor(l, i) ? &a8 : &ar;
        fb->at[i] = *next;
        *next += t->numel;
    }
    int64_t n8 = fb->mem.fp8; /* FP8 bytes on the device */
    if (K) {
        VF_TRY(swap_hole(fb, b1, K, &fb->hole8, &fb->blk8, st));
        n8 = fb->hole8;
        fb->host8 = be->alloc_pinned(be, (size_t)(fb->mem.fp8 - fb->hole8), st);
        if (!fb->host8)
            VF_FAIL(st, st && st->code ? st->code : VF_ENOMEM, "dit fp8 base: no host memory for the %lld FP8 "
                    "bytes of %d swapped blocks", (long long)(fb->mem.fp8 - fb->hole8), K);
    }
    /* a range with no FP8 tensor or no other tensor still gets its (one-element) buffer */
    fb->rest = be->alloc(be, (size_t)(fb->mem.rest ? fb->mem.rest : (int64_t)as), st);
    fb->w8 = fb->rest ? be->alloc(be, (size_t)(n8 ? n8 : 1), st) : NULL;
    fb->wbuf = fb->w8 ? be->alloc(be, (size_t)(fb->mem.scratch ? fb->mem.scratch : (int64_t)as), st) : NULL;
    if (!fb->wbuf)
        VF_FAIL(st, st && st->code ? st->code : VF_ENOMEM,
                "dit fp8 base: no device memory for %lld FP8 bytes, %lld other bytes and %lld of scratch",
                (long long)fb->mem.fp8, (long long)fb->mem.rest, (long long)fb->mem.scratch);
    *out = fb;
    return 0;
fail:
    vf_dit_fp8_free(fb);
    return rc;
}

static int check_idx(const vf_dit_fp8 *fb, int idx, vf_status *st)
{
    if (idx < 0 || idx >= fb->l->n || fb->at[idx] < 0)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__, "dit fp8 base: tensor %d is not in its range", idx);
    return 0;
}

int vf_dit_fp8_put_bytes(vf_dit_fp8 *fb, int idx, const uint8_t *bytes, float scale, vf_status *st)
{
    int rc = check_idx(fb, idx, st);
    if (rc) return rc;
    if (!vf_dit_fp8_tensor(fb->l, idx))
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "dit fp8 base: %s is not a tensor the base holds in FP8", fb->l->t[idx].name);
    fb->scale[idx] = scale;
    if (fb->host8 && fb->at[idx] >= fb->hole8) { /* a swapped block's: its host copy */
        memcpy(fb->host8 + (fb->at[idx] - fb->hole8), bytes, (size_t)fb->l->t[idx].numel);
        return 0;
    }
    /* copy takes host memory on either backend */
    fb->be->copy(fb->be, fb->w8 + fb->at[idx], bytes, (size_t)fb->l->t[idx].numel);
    return fb->be->sync(fb->be, st);
}

int vf_dit_fp8_put(vf_dit_fp8 *fb, int idx, float *host, vf_status *st)
{
    int rc = check_idx(fb, idx, st);
    if (rc) return rc;
    const vf_dit_tensor *t = &fb->l->t[idx];
    if (!vf_dit_fp8_tensor(fb->l, idx)) {
        const size_t as = vf_dtype_size(fb->be->act_dtype);
        fb->be->upload(fb->be, (char *)fb->rest + (size_t)fb->at[idx] * as, host, t->numel, fb->be->act_dtype);
        return 0;
    }
    const float sc = vf_fp8_scale(host, t->numel);
    vf_fp8_quantise(host, t->numel, sc, (uint8_t *)host); /* in place: vflow.h allows it */
    return vf_dit_fp8_put_bytes(fb, idx, (const uint8_t *)host, sc, st);
}

int vf_dit_part_set_fp8(vf_dit_part *p, const vf_dit_fp8 *fb, vf_status *st)
{
    if (p->grads)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "dit partition: an FP8 base must be frozen (no base gradient buffer)");
    if (fb->l != p->l || fb->off != p->off0 || fb->n != p->nparams || fb->be != p->be)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "dit partition: the FP8 base is of another range or backend than the partition");
    p->fp8 = fb;
    p->params = NULL;
    return 0;
}

/* ------------------------------------------------------------------ the block linears */

/* FP8 bytes of tensor i: in w8, or for a swapped block (entered: dit_swap_enter) in the
 * ring buffer that holds its bytes now. */
static const uint8_t *fp8_w(const vf_dit_part *p, int i)
{
    const vf_dit_fp8 *fb = p->fp8;
    if (!fb->host8 || fb->at[i] < fb->hole8) return fb->w8 + fb->at[i];
    VF_ASSERT(p->blk_w);
    const int64_t at = fb->hole8 + (int64_t)(p->blk_cur - (p->pl.b1 - p->nswap)) * fb->blk8;
    return (const uint8_t *)p->blk_w + (fb->at[i] - at);
}

void dit_lin_fwd(vf_dit_part *p, int blk, int k, void *out, const void *in, int64_t rows, int64_t C,
                 int64_t OC)
{
    vf_backend *be = p->be;
    const int i = dit_tidx_block(blk, k);
    const void *bias = dit_w(p, i + 1);
    if (p->fp8)
        be->matmul_fp8_fwd(be, out, in, fp8_w(p, i), p->fp8->scale[i], bias, p->fp8->wbuf, rows, C, OC);
    else
        be->matmul_fwd(be, out, in, dit_w(p, i), bias, rows, C, OC);
}

void dit_lin_bwd(vf_dit_part *p, int blk, int k, void *dinp, const void *dout, const void *in, int64_t rows,
                 int64_t C, int64_t OC, vf_grad_mode mode)
{
    vf_backend *be = p->be;
    const int i = dit_tidx_block(blk, k);
    if (p->fp8)
        be->matmul_fp8_bwd(be, dinp, dout, fp8_w(p, i), p->fp8->scale[i], p->fp8->wbuf, rows, C, OC, mode);
    else
        be->matmul_bwd(be, dinp, dit_g(p, i), dit_g(p, i + 1), dout, in, dit_w(p, i), rows, C, OC, mode);
}
