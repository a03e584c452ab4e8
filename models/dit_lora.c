/* dit_lora.c — LoRA adapters on the DiT's block linears (dit_lora.h): target matching,
 * the adapter vector's layout and init, and the adapters' forward and backward inside a
 * partition.
 *
 * The adapter's backward recomputes u = A x from the linear's saved input instead of
 * keeping it: a rank-r matmul, cheaper than rank·rows saved per adapter and micro-batch,
 * and it keeps recompute and partitioning bit-exact (the same ops on the same values).
 */
#include "models/dit_lora.h"
#include "models/dit_internal.h"
#include "runtime/json.h"
#include "runtime/philox.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The candidates: a block's linears and their names without "blocks.N." and ".weight". */
static const struct {
    int k;
    const char *name;
} lin[] = {
    {BT_SQ_W, "self_attn.q"},  {BT_SK_W, "self_attn.k"},  {BT_SV_W, "self_attn.v"},
    {BT_SO_W, "self_attn.o"},  {BT_CQ_W, "cross_attn.q"}, {BT_CK_W, "cross_attn.k"},
    {BT_CV_W, "cross_attn.v"}, {BT_CO_W, "cross_attn.o"}, {BT_F1_W, "ffn.0"},
    {BT_F2_W, "ffn.2"},        {BT_CKI_W, "cross_attn.k_img"}, {BT_CVI_W, "cross_attn.v_img"},
};
enum { NLIN = sizeof lin / sizeof lin[0] };

static bool glob(const char *p, const char *s)
{
    if (!*p) return !*s;
    if (*p == '*') {
        for (;; s++) {
            if (glob(p + 1, s)) return true;
            if (!*s) return false;
        }
    }
    return *s && *p == *s && glob(p + 1, s + 1);
}

int vf_dit_lora_cfg_parse(const char *text, vf_dit_lora_cfg *out, vf_status *st)
{
    int rc = 0;
    memset(out, 0, sizeof *out);
    if (!text || !text[0]) return 0;
    vf_json *j = vf_json_parse(text, st);
    if (!j) return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "lora: not JSON: %s", text);
    const vf_json *r = vf_json_get(j, "rank"), *a = vf_json_get(j, "alpha"), *t = vf_json_get(j, "targets");
    if (j->type != VF_JSON_OBJ || !r || r->type != VF_JSON_INT || r->i < 1 || r->i > 4096)
        VF_FAIL(st, VF_EUSAGE, "lora: rank must be an integer in 1..4096");
    out->rank = (int)r->i;
    out->alpha = a ? vf_json_as_num(a) : (double)out->rank;
    if (a && (!vf_json_is_number(a) || !(out->alpha > 0)))
        VF_FAIL(st, VF_EUSAGE, "lora: alpha must be a positive number");
    if (!t || t->type != VF_JSON_ARR || vf_json_len(t) < 1 || vf_json_len(t) > VF_LORA_MAX_TARGETS)
        VF_FAIL(st, VF_EUSAGE, "lora: targets must list 1..%d patterns, e.g. {\"self_attn.q\", \"ffn.*\"}",
                VF_LORA_MAX_TARGETS);
    for (int i = 0; i < vf_json_len(t); i++) {
        const vf_json *e = vf_json_at(t, i);
        if (e->type != VF_JSON_STR || !e->s[0] || strlen(e->s) >= VF_DIT_NAME_MAX)
            VF_FAIL(st, VF_EUSAGE, "lora: target %d must be a non-empty pattern of < %d characters", i + 1,
                    VF_DIT_NAME_MAX);
        snprintf(out->targets[i], sizeof out->targets[i], "%s", e->s);
    }
    out->ntargets = vf_json_len(t);
    for (int i = 0; i < vf_json_len(j); i++) {
        const char *k = vf_json_key_at(j, i);
        if (strcmp(k, "rank") && strcmp(k, "alpha") && strcmp(k, "targets"))
            VF_FAIL(st, VF_EUSAGE, "lora: unknown key '%s' (keys: rank, alpha, targets)", k);
    }
fail:
    vf_json_free(j);
    return rc;
}

void vf_dit_lora_free(vf_dit_lora *lo)
{
    if (!lo) return;
    vf_dit_layout_free(lo->l);
    vf_free(lo->a_of);
    vf_free(lo->base_of);
    vf_free(lo);
}

int vf_dit_lora_new(const vf_dit_layout *base, const vf_dit_lora_cfg *c, vf_dit_lora **out,
                    vf_status *st)
{
    int rc = 0;
    const vf_dit_config *mc = &base->cfg;
    const int depth = mc->depth, R = c->rank;
    vf_dit_lora *lo = NULL;
    *out = NULL;
    if (R < 1) VF_FAIL(st, VF_EUSAGE, "lora: rank must be at least 1");
    bool picked[NLIN] = {0};
    for (int t = 0; t < c->ntargets; t++) {
        bool any = false;
        for (int j = 0; j < NLIN; j++) /* a linear the model lacks (k_img of a T2V model) is none */
            if (glob(c->targets[t], lin[j].name) && base->t[dit_tidx_block(0, lin[j].k)].numel > 0)
                picked[j] = any = true;
        if (!any)
            VF_FAIL(st, VF_EUSAGE,
                    "lora: target \"%s\" matches no linear of the model (self_attn.{q,k,v,o}, "
                    "cross_attn.{q,k,v,o}, ffn.{0,2}%s; names without \"blocks.N.\")",
                    c->targets[t], mc->img_dim > 0 ? ", cross_attn.{k_img,v_img}" : "");
    }
    int per = 0;
    for (int j = 0; j < NLIN; j++) per += picked[j];
    lo = vf_calloc(sizeof *lo, st);
    if (!lo) VF_FAIL(st, VF_ENOMEM, "lora: out of memory");
    lo->cfg = *c;
    lo->scale = (float)(c->alpha / (double)R);
    lo->nbase = base->n;
    lo->l = vf_calloc(sizeof *lo->l, st);
    lo->a_of = vf_alloc(sizeof *lo->a_of * (size_t)base->n, st);
    if (!lo->l || !lo->a_of) VF_FAIL(st, VF_ENOMEM, "lora: out of memory");
    for (int i = 0; i < base->n; i++) lo->a_of[i] = -1;
    vf_dit_layout *l = lo->l;
    l->cfg = *mc;
    l->n = 2 * per * depth;
    l->t = vf_calloc(sizeof *l->t * (size_t)(l->n ? l->n : 1), st);
    l->block_start = vf_calloc(sizeof *l->block_start * (size_t)(depth + 2), st);
    lo->base_of = vf_calloc(sizeof *lo->base_of * (size_t)(l->n ? l->n : 1), st);
    if (!l->t || !l->block_start || !lo->base_of) VF_FAIL(st, VF_ENOMEM, "lora: out of memory");
    int n = 0;
    int64_t off = 0;
    for (int b = 0; b < depth; b++) {
        l->block_start[b] = off;
        /* flat order of the base tensors within a block */
        for (int k = 0; k < BT_COUNT; k++) {
            int j = 0;
            while (j < NLIN && lin[j].k != k) j++;
            if (j == NLIN || !picked[j]) continue;
            int bi = dit_tidx_block(b, k);
            const vf_dit_tensor *w = &base->t[bi];
            int64_t O = w->shape[0], I = w->shape[1];
            lo->a_of[bi] = n;
            for (int ab = 0; ab < 2; ab++) {
                vf_dit_tensor *t = &l->t[n];
                snprintf(t->name, sizeof t->name, VF_LORA_PREFIX "blocks.%d.%s.lora_%c.weight", b, lin[j].name,
                         ab ? 'B' : 'A');
                t->ndim = 2;
                t->shape[0] = ab ? O : R;
                t->shape[1] = ab ? R : I;
                t->numel = t->shape[0] * t->shape[1];
                t->offset = off;
                t->block = b;
                off += t->numel;
                lo->base_of[n++] = bi;
            }
        }
    }
    l->block_start[depth] = off;
    l->block_start[depth + 1] = off;
    l->total = off;
    *out = lo;
    return 0;
fail:
    vf_dit_lora_free(lo);
    return rc;
}

void vf_dit_lora_module(const vf_dit_lora *lo, int i, char *buf, size_t n)
{
    const char *s = lo->l->t[i].name + strlen(VF_LORA_PREFIX);
    const char *e = strstr(s, ".lora_");
    size_t k = e ? (size_t)(e - s) : strlen(s);
    if (k >= n) k = n - 1;
    memcpy(buf, s, k);
    buf[k] = 0;
}

void vf_dit_lora_init(const vf_dit_lora *lo, uint64_t seed, int64_t off, int64_t n, float *dst)
{
    const vf_dit_layout *l = lo->l;
    for (int i = 0; i < l->n; i++) {
        const vf_dit_tensor *t = &l->t[i];
        int64_t a = t->offset > off ? t->offset : off;
        int64_t b = t->offset + t->numel < off + n ? t->offset + t->numel : off + n;
        if (a >= b) continue;
        float *o = dst + (a - off);
        bool is_b = i % 2 == 1;
        if (is_b) {
            memset(o, 0, sizeof *o * (size_t)(b - a));
            continue;
        }
        double bound = 1.0 / sqrt((double)t->shape[1]);
        vf_rng r;
        vf_rng_init(&r, seed, 0, (uint64_t)i, VF_RNG_LORA);
        vf_rng_uniform(&r, (uint64_t)(a - t->offset), b - a, o);
        for (int64_t j = 0; j < b - a; j++) o[j] = (float)((2.0 * o[j] - 1.0) * bound);
    }
}

/* ------------------------------------------------------------------ in a partition */

static int64_t rows_max(const dit_plan *pl)
{
    int64_t r = pl->N > pl->Nt ? pl->N : pl->Nt;
    return r > pl->Ni ? r : pl->Ni;
}

static size_t al64(size_t b) { return (b + 63) & ~(size_t)63; }

int64_t vf_dit_lora_workspace(const vf_dit_config *c, int rank, const vf_dit_dims *max,
                              size_t act_size, size_t grad_size)
{
    dit_plan pl;
    dit_plan_init(&pl, c, 0, 1, max, false, act_size, grad_size);
    int64_t rows = rows_max(&pl), wide = c->ffn > c->dim ? c->ffn : c->dim;
    return (int64_t)(al64((size_t)(rows * rank) * act_size) + al64((size_t)(rows * rank) * grad_size) +
                     al64((size_t)(rows * wide) * (act_size > grad_size ? act_size : grad_size)));
}

int vf_dit_part_set_lora(vf_dit_part *p, const vf_dit_lora *lo, void *lparams, void *lgrads,
                         vf_status *st)
{
    if (p->grads)
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "dit partition: LoRA needs a frozen base (no base gradient buffer)");
    const dit_plan *pl = &p->pl;
    int64_t n;
    vf_dit_layout_range(lo->l, pl->b0, pl->b1, &p->loff0, &n);
    int64_t rows = rows_max(pl), R = lo->cfg.rank, wide = pl->c.ffn > pl->c.dim ? pl->c.ffn : pl->c.dim;
    size_t bu = al64((size_t)(rows * R) * pl->as), bdu = al64((size_t)(rows * R) * pl->gs);
    size_t bt = al64((size_t)(rows * wide) * (pl->as > pl->gs ? pl->as : pl->gs));
    if (p->lmem) p->be->free(p->be, p->lmem);
    p->lmem = p->be->alloc(p->be, bu + bdu + bt, st);
    if (!p->lmem) return st && st->code ? st->code : VF_ENOMEM;
    p->lu = p->lmem;
    p->ldu = (char *)p->lmem + bu;
    p->lt = (char *)p->lmem + bu + bdu;
    p->lora = lo;
    p->lparams = lparams;
    p->lgrads = lgrads;
    return 0;
}

static int lora_of(const vf_dit_part *p, int blk, int k)
{
    return p->lora ? p->lora->a_of[dit_tidx_block(blk, k)] : -1;
}

bool dit_lora_on(const vf_dit_part *p, int blk, int k) { return lora_of(p, blk, k) >= 0; }

static void *lw(const vf_dit_part *p, int i)
{
    return p->lparams + (size_t)(p->lora->l->t[i].offset - p->loff0) * p->pl.as;
}

static void *lg(const vf_dit_part *p, int i)
{
    return p->lgrads ? p->lgrads + (size_t)(p->lora->l->t[i].offset - p->loff0) * p->pl.gs : NULL;
}

void dit_lora_grads(const vf_dit_part *p, int blk, int k, void **ga, int64_t *na, void **gb, int64_t *nb)
{
    int a = lora_of(p, blk, k);
    *ga = *gb = NULL, *na = *nb = 0;
    if (a < 0) return;
    *ga = lg(p, a), *na = p->lora->l->t[a].numel;
    *gb = lg(p, a + 1), *nb = p->lora->l->t[a + 1].numel;
}

void dit_lora_fwd(vf_dit_part *p, int blk, int k, void *y, const void *x, int64_t rows,
                  int64_t in, int64_t out)
{
    int a = lora_of(p, blk, k);
    if (a < 0) return;
    vf_backend *be = p->be;
    int64_t R = p->lora->cfg.rank;
    be->matmul_fwd(be, p->lu, x, lw(p, a), NULL, rows, in, R);
    be->matmul_fwd(be, p->lt, p->lu, lw(p, a + 1), NULL, rows, R, out);
    be->axpy(be, y, p->lt, p->lora->scale, rows * out);
}

void dit_lora_bwd(vf_dit_part *p, int blk, int k, void *dx, const void *dy, const void *x,
                  int64_t rows, int64_t in, int64_t out)
{
    int a = lora_of(p, blk, k);
    if (a < 0) return;
    vf_backend *be = p->be;
    int64_t R = p->lora->cfg.rank;
    be->matmul_fwd(be, p->lu, x, lw(p, a), NULL, rows, in, R);          /* u = A x */
    be->memset0(be, p->lt, (size_t)(rows * out) * p->pl.gs);
    be->axpy(be, p->lt, dy, p->lora->scale, rows * out);                /* s · dy */
    be->matmul_bwd(be, p->ldu, lg(p, a + 1), NULL, p->lt, p->lu, lw(p, a + 1), rows, R, out,
                   VF_GRAD_WRITE);
    be->matmul_bwd(be, dx, lg(p, a), NULL, p->ldu, x, lw(p, a), rows, in, R, VF_GRAD_ADD);
}
