/* dit_internal.h — what the DiT's source files share and nobody else sees: tensor indices
 * of the flat layout, the buffer structs of a partition and of its saved activations, and
 * the carver that lays them out (the same code sizes the allocations and answers
 * vf_dit_part_memory, so the planner's numbers are the allocated bytes).
 */
#ifndef VF_DIT_INTERNAL_H
#define VF_DIT_INTERNAL_H

#include "models/dit.h"
#include "models/dit_fp8.h"

#include <string.h>

/* Tensors of the embeddings, in flat order (indices 0..ET_COUNT-1). */
enum {
    ET_PATCH_W, ET_PATCH_B,          /* patch_embedding (dim, in_dim, pt, ph, pw), (dim) */
    ET_TOK,                          /* text_tokens (257, text_dim) */
    ET_TXT1_W, ET_TXT1_B,            /* text_embedding.0 (dim, text_dim) */
    ET_TXT2_W, ET_TXT2_B,            /* text_embedding.2 (dim, dim) */
    ET_TIME1_W, ET_TIME1_B,          /* time_embedding.0 (dim, freq_dim) */
    ET_TIME2_W, ET_TIME2_B,          /* time_embedding.2 (dim, dim) */
    ET_PROJ_W, ET_PROJ_B,            /* time_projection.1 (6·dim, dim) */
    /* img_emb (img_dim > 0; empty otherwise): LayerNorm, Linear, GELU, Linear, LayerNorm */
    ET_IMG0_W, ET_IMG0_B,            /* img_emb.proj.0 (img_dim) LayerNorm */
    ET_IMG1_W, ET_IMG1_B,            /* img_emb.proj.1 (img_dim, img_dim) */
    ET_IMG3_W, ET_IMG3_B,            /* img_emb.proj.3 (dim, img_dim) */
    ET_IMG4_W, ET_IMG4_B,            /* img_emb.proj.4 (dim) LayerNorm */
    ET_COUNT
};

/* Tensors of one block, in flat order (index ET_COUNT + i·BT_COUNT + k). */
enum {
    BT_SQ_W, BT_SQ_B, BT_SK_W, BT_SK_B, BT_SV_W, BT_SV_B, BT_SO_W, BT_SO_B, /* self_attn */
    BT_SNQ, BT_SNK,                                                         /* norm_q/k */
    BT_N3_W, BT_N3_B,                                                       /* norm3 */
    BT_CQ_W, BT_CQ_B, BT_CK_W, BT_CK_B, BT_CV_W, BT_CV_B, BT_CO_W, BT_CO_B, /* cross_attn */
    BT_CNQ, BT_CNK,
    BT_CKI_W, BT_CKI_B, BT_CVI_W, BT_CVI_B, BT_CNKI,                        /* k_img, v_img,
                                                                               norm_k_img (img_dim
                                                                               > 0; else empty) */
    BT_F1_W, BT_F1_B, BT_F2_W, BT_F2_B,                                     /* ffn.0, ffn.2 */
    BT_MOD,                                                                 /* (1, 6, dim) */
    BT_COUNT
};

/* Tensors of the head (index ET_COUNT + depth·BT_COUNT + k). */
enum { HT_MOD, HT_W, HT_B, HT_COUNT };

static inline int dit_tidx_block(int i, int k) { return ET_COUNT + i * BT_COUNT + k; }
static inline int dit_tidx_head(int depth, int k) { return ET_COUNT + depth * BT_COUNT + k; }

/* ---- carving one allocation into buffers (base NULL: only count bytes) */
typedef struct dit_carver {
    char *base;
    size_t off;
} dit_carver;

static inline void *dit_carve(dit_carver *c, size_t bytes)
{
    void *p = c->base ? c->base + c->off : NULL;
    c->off += (bytes + 63) & ~(size_t)63;
    return p;
}

/* Sizes a partition is planned with. */
typedef struct dit_plan {
    vf_dit_config c;
    int b0, b1, nb;
    bool first, last;
    int recompute;           /* vf_dit_recompute */
    bool att_kept;           /* the self-attention's output and lse kept (VF_DIT_RECOMPUTE) */
    bool offload;            /* activation offload (dit_offload.c): the saved store keeps on
                                the device only the partition's input and the head's input */
    int64_t B, L, N, Nt;     /* max samples, tokens per sample, B·L, B·text_len */
    int sp;                  /* ranks of sequence parallelism (dit_plan_sp): L and N are
                                then one rank's, Lw and Nw the whole sequences' */
    int64_t Lw, Nw;          /* whole sequences at the first partition's patchify */
    int64_t Ni, Nc;          /* B·img_len image rows (0 without images); Nt + Ni context rows */
    int64_t R;               /* rows of the time embedding: B, or N with t_tokens */
    bool img;                /* the image branch (img_dim > 0) */
    int in_dim;              /* channels patch_embedding takes */
    int64_t P;               /* patch volume pt·ph·pw */
    size_t as, gs;           /* element sizes: activations/weights, gradients */
} dit_plan;

void dit_plan_init(dit_plan *pl, const vf_dit_config *c, int b0, int b1,
                   const vf_dit_dims *max, int recompute, size_t as, size_t gs);
/* A rank of sp = n (n > 1) over the whole-sequence plan pl made of max: L, N, R become the
 * rank's (vf_dit_sp_rank_max), Lw, Nw stay the whole sequences' the ends work on. */
void dit_plan_sp(dit_plan *pl, int n, const vf_dit_dims *max);

/* Everything one block's backward reads (input x and output live in vf_dit_saved.xs).
 * q, k, v are carved one after another with one stride (the q/k/v projections run as one
 * batched GEMM), and so are ck, cv. The adaLN's normalised inputs are not kept: the fused
 * LayerNorm+modulate backward forms them again from x and mean/rstd. */
typedef struct dit_blk_saved {
    void *eb;                                   /* (6, B, dim) modulation + e0, chunk-major;
                                                   NULL with t_tokens (dit_work.ebt) */
    void *m1, *q, *k, *v, *qr, *kr, *o;         /* (N, dim) self-attention path */
    void *x1, *h3, *cq, *cqr, *ca, *x2, *m2, *f2;       /* (N, dim) cross-attn and MLP */
    void *ck, *cv, *ckr;                        /* (Nt, dim) cross-attention keys/values */
    void *f1, *g;                               /* (N, ffn) MLP pre/post activation */
    float *mean1, *rstd1, *rstdq, *rstdk, *mean3, *rstd3, *rstdcq, *mean2, *rstd2; /* (N) */
    float *rstdck;                              /* (Nt) */
    float *lse2;                                /* (B, heads, L) */
    void *a;                                    /* (N, dim) self-attention output */
    float *lse1;                                /* (B, heads, L) its log-sum-exp */
    /* image branch (NULL without): keys, values of the image rows, the image attention's
     * output and the sum of both attentions that `o` takes */
    void *cik, *cikr, *civ;                     /* (Ni, dim) */
    float *rstdcik;                             /* (Ni) */
    void *cia, *cs;                             /* (N, dim) */
    float *lse3;                                /* (B, heads, L) */
} dit_blk_saved;

/* with_att: carve a and lse1 too (not for the recompute area, whose block takes them
 * from the saved store's dit_att_kept) */
void dit_carve_blk_saved(dit_carver *cv, const dit_plan *pl, dit_blk_saved *s, bool with_att);

/* What a recomputed block keeps of its forward besides its input: the self-attention's
 * output and log-sum-exp, so the backward's recompute does not run the attention again
 * (its backward reads both as they were). The cross-attention (a few hundred keys) is
 * recomputed. */
typedef struct dit_att_kept {
    void *a;        /* (N, dim) */
    float *lse;     /* (B, heads, L) */
} dit_att_kept;

/* Carves k at the plan's largest geometry (dit_mem.c). */
void dit_carve_att_kept(dit_carver *cv, const dit_plan *pl, dit_att_kept *k);

/* Embedding activations (first partition). */
typedef struct dit_emb_saved {
    void *patches;      /* (N, z·P) patchified x_t, vector order (z, pt, ph, pw) */
    int32_t *tok;       /* (Nt) token ids with pads, device; NULL with text embeddings */
    void *sinus;        /* (R, freq_dim) */
    void *te1, *te1s;   /* (R, dim) time MLP pre/post SiLU */
    void *se;           /* (R, dim) SiLU(e) */
    void *temb;         /* (Nt, text_dim) text embeddings (zero-padded) or byte-token rows */
    void *t1, *t1g;     /* (Nt, dim) text MLP pre/post GELU */
    void *xin;          /* (B, in_dim, T, H, W) x_t with cond's channels after it (in_dim > z) */
    /* img_emb (image branch): its input, LN, Linear, GELU, Linear; the LN into ctx */
    void *ii, *in0, *i1, *i1g;  /* (Ni, img_dim) */
    void *i3;                   /* (Ni, dim) */
    float *imean0, *irstd0, *imean4, *irstd4; /* (Ni) */
} dit_emb_saved;

/* Head activations and loss (last partition). */
typedef struct dit_head_saved {
    void *hm;           /* (N, dim) LN(x), modulated */
    float *mean, *rstd; /* (N) */
    void *eh;           /* (2, R, dim) head modulation + e */
    void *pred_tok;     /* (N, P·z) head output, vector order (pt, ph, pw, z) */
    void *pred;         /* (B, z, T, H, W) unpatchified; NULL with sp > 1 (a rank
                           predicts its tokens only) */
    void *target_tok;   /* (N, P·z) target in head order */
    void *dpred_tok;    /* (N, P·z) grad dtype: ∂loss/∂pred_tok · grad_scale */
} dit_head_saved;

struct vf_dit_saved {
    vf_dit_part *p;
    void *mem;
    size_t bytes;
    vf_dit_dims dims;       /* geometry of the micro-batch held */
    int state;              /* 0 empty, 1 forward done, 2 loss done */
    void **xs;              /* nb + 1 entries: (N, dim) input of block b0+i; xs[nb] = output */
    void *e, *e0, *ctx;     /* conditioning, (B, dim), (B, 6, dim), (Nc, dim): text rows, then
                               image rows; with t_tokens e (R, dim), e0 (6, R, dim) */
    dit_blk_saved *blk;     /* nb entries (NULL with recompute) */
    dit_att_kept *att;      /* nb entries where att_kept (else NULL) */
    dit_emb_saved em;
    dit_head_saved hd;
    /* activation offload (dit_offload.c; NULL without): pinned host memory holding the
     * inputs of blocks 1 … nb−1 (xs[1 … nb−1] are then NULL) and, where att_kept, every
     * block's kept self-attention result (att[i] then NULL) */
    char *host;
};

void dit_carve_saved(dit_carver *cv, const dit_plan *pl, vf_dit_saved *s);

/* Scratch owned by the partition (one micro-batch at a time uses it). */
typedef struct dit_work {
    void *fx;                       /* (N, dim) act: forward scratch (the cross-attention's
                                       output projection), g[0] where it fits: the forward
                                       of a block never overlaps a backward */
    void *tmp;                      /* (N, max(z, in_dim)·P) act: patchify staging; with
                                       sp > 1 (Nw, in_dim·P) in the first partition's ends'
                                       area, NULL elsewhere */
    void *whole;                    /* sp > 1 in the first partition (NULL else): (Nw,
                                       in_dim·P) act, in the ends' area: the whole clips'
                                       patches a rank takes its rows of */
    void *xin;                      /* sp > 1 in the first partition with in_dim > z (NULL
                                       else): (Nw, in_dim·P) act, in the ends' area: x_t
                                       and cond's channels concatenated */
    void *gx;                       /* (N, dim) grad: ping-pong partner of the dx buffer */
    void *g[6];                     /* (N, dim) grad scratch; g[2..5] NULL where they live
                                       in the block's dead activations (dit_bwd_slots) */
    void *gf[2];                    /* (N, ffn) grad scratch: one buffer (gf[1] is gf[0]):
                                       the unfused MLP backward's GELU runs in place, the
                                       fused one writes gf[1] only */
    void *gc[3];                    /* (Nt, dim) grad scratch */
    void *gi[3];                    /* (Ni, dim) grad scratch of the image branch */
    void *deb;                      /* (6, R, dim) grad: one block's modulation gradient */
    /* t_tokens only (NULL else): one block's modulation + e0 (a (6, N, dim) a block would
     * otherwise keep: the backward forms it again from e0), zeros for the broadcast add
     * of a table, and a table's gradient */
    void *ebt;                      /* (6, R, dim) act */
    void *zeros;                    /* (6, dim) act, zero */
    void *dmod;                     /* (6, dim) grad */
    /* first partition */
    void *dse, *dte1s, *dte1;       /* (R, dim) grad */
    void *dt1;                      /* (Nt, dim) grad */
    void *dtemb;                    /* (Nt, text_dim) grad; NULL with text embeddings */
    void *di3;                      /* (Ni, dim) grad: img_emb's second Linear output */
    void *dia, *dib;                /* (Ni, img_dim) grad: img_emb's hidden gradients */
    /* last partition */
    void *dhm;                      /* (N, dim) grad */
    void *deh;                      /* (2, R, dim) grad */
    /* first and last: boundary gradients when no caller buffers are given */
    vf_dit_xfer dint;
    float *rcos, *rsin;             /* (L, head_dim/2) f32 RoPE tables */
    dit_blk_saved rc;               /* recompute: one block's activations */
} dit_work;

void dit_carve_work(dit_carver *cv, const dit_plan *pl, dit_work *w);
/* The first partition's whole-sequence buffers (w->tmp, w->whole) of a rank of sp > 1,
 * allocated apart from the workspace; nothing elsewhere (the last partition's targets
 * come cut to the rank's rows). */
void dit_carve_ends(dit_carver *cv, const dit_plan *pl, dit_work *w);

/* Where a block backward's late scratch lives (dit_block.c). The backward consumes the
 * block's activations (the saved ones die with it; the recompute area is rebuilt for the
 * next block), and the MLP's come first: f1 and g are dead once the MLP's backward has
 * read them, so the scratch first used by the attention sections goes there. f1 and g
 * are carved one after the other, one region of 2 x (N, ffn) activations: g[2..4] one
 * after another from its start (the batched q/k/v backward reads them with one stride),
 * g[5] after them. The GELU's gradient (gf[1]) is not among them: the fused GELU
 * backward writes it while it still reads g. What does not fit (a gradient dtype wider
 * than the activations', an ffn below 1.5 x dim) has a buffer of its own. Pure function of
 * the plan: the carving and the backward agree. */
typedef struct dit_bwd_slots {
    int buf[4];     /* g[2 + i]: -1 its own buffer, 0 in the region of the saved f1 and g */
    size_t at[4];   /* its byte offset from f1 */
} dit_bwd_slots;
void dit_bwd_place(const dit_plan *pl, dit_bwd_slots *o);

/* A frozen base in FP8 (dit_fp8.h): for each tensor of the layout (l->n entries) its
 * place, -1 outside the range: an FP8 tensor's byte offset in w8, another's element
 * offset in the packed rest; the FP8 tensors' scales. */
struct vf_dit_fp8 {
    vf_backend *be;
    const vf_dit_layout *l;
    int64_t off, n;
    vf_dit_fp8_mem mem;
    int64_t *at;                    /* l->n entries, host */
    float *scale;                   /* l->n entries, host (1 for the others) */
    void *rest;                     /* packed non-FP8 tensors, act dtype, device */
    uint8_t *w8;                    /* FP8 bytes, device */
    void *wbuf;                     /* dequantisation scratch, act dtype, device */
    /* block swap (vf_dit_fp8_new_swap; host8 NULL: none): the FP8 bytes from offset
     * hole8 on (the last blocks' linears, the end of w8) live in pinned host memory
     * host8, blk8 bytes a block; w8 then holds the bytes before hole8 only */
    uint8_t *host8;
    int64_t hole8, blk8;
};
#define DIT_SWAP_RING 2 /* ring buffers of block swap: one computes while the next copies */
/* device records of activation offload: a block reads one and writes the next while the
 * record before them is copied out (forward), or computes on one while two come in */
#define DIT_OFFLOAD_RING 3

struct vf_dit_part {
    vf_backend *be;
    uint64_t uid;                   /* unique in the process: the blocks' recorded units
                                       (ops.h graph_begin) name their partition by it, so a
                                       recording of a freed partition never replays for a
                                       new one made at its address */
    const vf_dit_layout *l;
    dit_plan pl;
    char *params, *grads;           /* at element layout offset `off0` */
    int64_t off0, nparams;
    void *wmem;
    void *emem;                     /* the ends' whole sequences (dit_carve_ends), or NULL */
    size_t ebytes;
    size_t wbytes;
    dit_work w;
    float *host;                    /* host staging: sinusoid, tokens or text embeddings,
                                       RoPE tables */
    int64_t host_n;
    int rope_grid[3];               /* grid the RoPE tables hold (-1: none) */
    /* LoRA adapters (dit_lora.h; lora NULL: none): the partition's range of the adapter
     * vector at element loff0, and the adapters' scratch */
    const struct vf_dit_lora *lora;
    char *lparams, *lgrads;
    int64_t loff0;
    void *lmem;
    void *lu, *ldu, *lt;            /* (rows, rank) act, (rows, rank) grad, (rows, max(dim,
                                       ffn)) grad; rows = max(N, Nt) */
    /* the frozen base in FP8 (dit_fp8.h; NULL: params hold the whole range): params is
     * then its packed rest, and the block linears run on its bytes */
    const struct vf_dit_fp8 *fp8;
    /* sequence parallelism (dit_sp.c; sp NULL: one rank): the ranks' group, the
     * self-attention's scratch, and the first error of a pass's all-to-alls (the block's
     * ops return none: the pass reports it when its blocks are done) */
    const struct vf_dit_sp *sp;
    void *spg;                  /* the backend's device group (ops.h a2a_open), or NULL */
    void *spw[5];
    int64_t spw_bytes;          /* bytes of each spw buffer */
    void *redw;                 /* the grains' scratch (dit_red_ops.c; CPU backend), or NULL */
    int sp_rc;
    vf_status sp_st;
    /* Block swap (dit_swap.c; nswap 0: none): the weights of the last nswap blocks live in
     * host memory swap_host and stream into a ring of device buffers; `params` holds the
     * rest of the range packed, without the hole [hole, hole + hole_n) (elements from off0)
     * the swapped blocks leave. blk_w is the ring buffer of block blk_cur while it
     * computes (between dit_swap_enter and dit_swap_leave), else NULL. With gradients (a
     * full fine-tune) `grads` is packed the same way, the hole's gradients live in host
     * memory swap_ghost, and each ring buffer has a gradient buffer gring[i] beside it:
     * blk_g is the entered block's in a backward pass, else NULL. */
    int nswap, nring;
    const char *swap_host;
    char *swap_ghost;
    size_t swap_bytes;              /* bytes of one swapped block (its FP8 bytes with an
                                       FP8 base, else blk_n weights) */
    size_t swap_gbytes;             /* bytes of one swapped block's gradient (0: none) */
    int64_t hole, hole_n, blk_n;
    void *ring[DIT_SWAP_RING];
    void *gring[DIT_SWAP_RING];
    void *swapq;
    char *blk_w, *blk_g;
    int blk_cur;
    bool swap_bwd;                  /* the pass in flight walks the blocks in reverse */
    int swap_used, swap_issued;     /* uses of the pass entered, copies of it enqueued */
    /* Activation offload (dit_offload.c; offq NULL: none): a ring of DIT_OFFLOAD_RING
     * device records, each a block input and (att_kept) its kept self-attention result,
     * and a copy queue of their own. off_n: tokens B·L of the pass in flight; off_issued:
     * records of the backward pass enqueued host to device. */
    void *offq;
    void *oring[DIT_OFFLOAD_RING];
    dit_att_kept oatt[DIT_OFFLOAD_RING];
    void *omem;
    int64_t off_n;
    int off_issued;
};

/* Tensor `idx` of a buffer laid out as params is (packed, element size es): with block
 * swap the swapped blocks' tensors are in the ring buffer blk of the entered block, the
 * rest packed around the hole they leave. */
static inline void *dit_swapped_at(const vf_dit_part *p, int idx, char *packed, char *blk, size_t es)
{
    int64_t rel = p->l->t[idx].offset - p->off0;
    if (p->nswap && rel >= p->hole) {
        if (rel < p->hole + p->hole_n) {
            VF_ASSERT(blk);
            int64_t at = p->hole + (int64_t)(p->blk_cur - (p->pl.b1 - p->nswap)) * p->blk_n;
            return blk + (size_t)(rel - at) * es;
        }
        rel -= p->hole_n;
    }
    return packed + (size_t)rel * es;
}
/* Weight / gradient of tensor `idx` (must lie in the partition's range; with block swap
 * a swapped block's tensor only while that block is entered, its gradient only in a
 * backward pass). */
static inline void *dit_w(const vf_dit_part *p, int idx)
{
    if (p->fp8) { /* the packed rest; an FP8 tensor is reached through dit_fp8_lin_* only
                   * (with block swap too: the rest stays resident) */
        VF_ASSERT(!vf_dit_fp8_tensor(p->l, idx) && p->fp8->at[idx] >= 0);
        return (char *)p->fp8->rest + (size_t)p->fp8->at[idx] * p->pl.as;
    }
    return dit_swapped_at(p, idx, p->params, p->blk_w, p->pl.as);
}
static inline void *dit_g(const vf_dit_part *p, int idx)
{
    /* a frozen base (LoRA) has no weight gradients */
    return p->grads ? dit_swapped_at(p, idx, p->grads, p->blk_g, p->pl.gs) : NULL;
}
/* Offset pointer into a buffer of element size es. */
static inline void *dit_at(const void *base, int64_t elems, size_t es)
{
    return (char *)base + (size_t)elems * es;
}

/* dit_block.c: one block, forward into s, backward consuming s (it reads s, and its late
 * scratch overwrites the activations it has read: dit_bwd_place); each one unit of the
 * backend's recording (ops.h graph_begin). att_kept: s->a and s->lse1 already hold the
 * self-attention's result (the backward's recompute), which is then not run again. dx
 * receives the input gradient (written: no memset needed); de0 (B, 6, dim) and dctx
 * (Nc, dim) accumulate (t_tokens: de0 (6, R, dim); the backward reads e0). */
void dit_block_fwd(vf_dit_part *p, int blk, const vf_dit_dims *d, const void *x, void *out,
                   const void *e0, const void *ctx, dit_blk_saved *s, bool att_kept);
void dit_block_bwd(vf_dit_part *p, int blk, const vf_dit_dims *d, const void *dout, void *dx,
                   void *de0, void *dctx, const void *x, const void *e0, const void *ctx,
                   const dit_blk_saved *s);

/* Rows of the time embedding for dims d (B, or B·L with t_tokens), and the tokens each
 * row's modulation is broadcast over (L, or 1): the (B, L) the adaLN ops take. */
static inline void dit_time_rows(const dit_plan *pl, const vf_dit_dims *d, int64_t *rows,
                                 int64_t *per)
{
    *rows = pl->c.t_tokens ? (int64_t)d->B * d->L : d->B;
    *per = pl->c.t_tokens ? 1 : d->L;
}

/* dit_lora.c: the adapter of block blk's linear k (a BT_*_W index), if targeted.
 * Forward: y (rows, out) += s · B (A x). Backward (after the base's matmul_bwd):
 * dx += s · Aᵀ Bᵀ dy… as the chain rule gives, dA and dB accumulate. No-ops when the
 * linear has no adapter. */
void dit_lora_fwd(vf_dit_part *p, int blk, int k, void *y, const void *x, int64_t rows,
                  int64_t in, int64_t out);
void dit_lora_bwd(vf_dit_part *p, int blk, int k, void *dx, const void *dy, const void *x,
                  int64_t rows, int64_t in, int64_t out);
/* Whether block blk's linear k has an adapter (where one has, the block runs that linear
 * unfused: the adapter's terms join its gradient between the fused op's steps). */
bool dit_lora_on(const vf_dit_part *p, int blk, int k);
/* The gradients of block blk's linear k's adapter: A's (*ga, *na elements) and B's; NULL
 * and 0 when it has none. */
void dit_lora_grads(const vf_dit_part *p, int blk, int k, void **ga, int64_t *na, void **gb, int64_t *nb);

/* dit_fp8.c: block blk's linear k (a BT_*_W index; its bias is k + 1) on the FP8 base
 * where the partition has one, else on its weights: out (rows, OC) = in·Wᵀ + b; and the
 * backward, dinp = or += dout·W (mode) with W's and b's gradients accumulated where the
 * partition has gradients (never with an FP8 base). */
void dit_lin_fwd(vf_dit_part *p, int blk, int k, void *out, const void *in, int64_t rows,
                 int64_t C, int64_t OC);
void dit_lin_bwd(vf_dit_part *p, int blk, int k, void *dinp, const void *dout, const void *in,
                 int64_t rows, int64_t C, int64_t OC, vf_grad_mode mode);
/* dit_sp.c: a block's self-attention, (B, L, heads, head_dim) of this rank's tokens: over
 * the ranks' all-to-all with p->sp (a failure kept in p->sp_rc), else the backend's op. */
void dit_self_att_fwd(vf_dit_part *p, void *out, float *lse, const void *q, const void *k, const void *v,
                      int64_t B, int64_t L, float scale);
void dit_self_att_bwd(vf_dit_part *p, void *dq, void *dk, void *dv, const void *dout, const void *q,
                      const void *k, const void *v, const void *out, const float *lse, int64_t B, int64_t L,
                      float scale);
/* The pass's first all-to-all error into st (and cleared), or 0. */
int dit_sp_error(vf_dit_part *p, vf_status *st);
/* With p->sp: the RoPE rows of this rank's tokens of grid g (pads: angle 0) into
 * p->w.rcos/rsin; 1 done, 0 without sp. */
int dit_sp_rope(vf_dit_part *p, const int g[3]);
void dit_sp_free(vf_dit_part *p);
/* With p->sp at the ends. patches: this rank's rows (B, Lr, in_dim·P) of b's whole clips'
 * patches (patchified in w.whole, their inputs concatenated in w.xin), pad rows zero, into
 * patches (the caller's). loss_targets: the rank's rows of the targets
 * (vf_dit_sp_target_rows) into sv->hd.target_tok, a pad's row its prediction's. */
int dit_sp_patches(vf_dit_part *p, const vf_dit_batch *b, void *patches, vf_status *st);
void dit_sp_loss_targets(vf_dit_part *p, const vf_dit_dims *d, vf_dit_saved *sv, const void *target);
/* dit_swap.c: block swap around the block loops. pass: a forward (backward = false) or
 * backward pass of the blocks begins; the first ring's copies are enqueued. enter: block
 * blk is about to compute (a swapped block: its copy is waited for and blk_w points at
 * it); leave: it is done (its ring buffer takes the pass's next copy). No-ops without
 * swap or for a resident block. */
void dit_swap_pass(vf_dit_part *p, bool backward);
void dit_swap_enter(vf_dit_part *p, int blk);
void dit_swap_leave(vf_dit_part *p, int blk);
/* Frees the ring and the copy queue (vf_dit_part_free). */
void dit_swap_free(vf_dit_part *p);

/* dit_offload.c: activation offload around each block of a pass (no-ops are the
 * caller's: call them only where p->pl.offload). Forward: fwd_enter points *x at block
 * i's input, *y (block i + 1 < nb) and s's kept attention result at ring slots, waiting
 * for those slots' copies out; fwd_leave enqueues record i's copy out. Backward:
 * bwd_pass enqueues the first records back (n: tokens B·L of the micro-batch), bwd_enter
 * waits for record i and points *x and s at it, bwd_leave enqueues the next.
 * saved_new/saved_free: the host store of one vf_dit_saved (pinned, sv->host). */
void dit_offload_free(vf_dit_part *p);
int dit_offload_saved_new(vf_dit_part *p, vf_dit_saved *sv, vf_status *st);
void dit_offload_saved_free(vf_dit_part *p, vf_dit_saved *sv);
void dit_offload_fwd_enter(vf_dit_part *p, const vf_dit_saved *sv, int i, int64_t n, const void **x,
                           void **y, dit_blk_saved *s);
void dit_offload_fwd_leave(vf_dit_part *p, vf_dit_saved *sv, int i);
void dit_offload_bwd_pass(vf_dit_part *p, vf_dit_saved *sv, int64_t n);
void dit_offload_bwd_enter(vf_dit_part *p, const vf_dit_saved *sv, int i, const void **x, dit_blk_saved *s);
void dit_offload_bwd_leave(vf_dit_part *p, vf_dit_saved *sv);

/* dit_embed.c: embeddings (first partition) and head (last partition). patchify: b's
 * x_t, with cond's channels after it concatenated into xin (B, in_dim, T, H, W) where
 * in_dim > z (else xin is unused), patchified into patches (B, L, in_dim·P), L the
 * tokens of b's T, H, W; buffers the caller's, p->w.tmp the staging. fwd, bwd: with p->sp
 * a rank's tokens' patches only (b->dims.L its Lr). */
int dit_embed_patchify(vf_dit_part *p, const vf_dit_batch *b, void *xin, void *patches, vf_status *st);
int dit_embed_fwd(vf_dit_part *p, const vf_dit_batch *b, vf_dit_saved *sv, vf_status *st);
void dit_embed_bwd(vf_dit_part *p, const vf_dit_dims *d, vf_dit_saved *sv, void *dx, void *de,
                   void *de0, void *dctx);
void dit_head_fwd(vf_dit_part *p, const vf_dit_dims *d, vf_dit_saved *sv);
void dit_head_bwd(vf_dit_part *p, const vf_dit_dims *d, vf_dit_saved *sv, void *dx, void *de);
/* (B, ch, T, H, W) -> (N, ch·P) tokens; head_order: vector order (pt, ph, pw, ch) instead
 * of (ch, pt, ph, pw). Uses p->w.tmp. */
void dit_patchify(vf_dit_part *p, const vf_dit_dims *d, int ch, void *out, const void *lat,
                  bool head_order);
/* Makes sure p->w.rcos/rsin hold the tables of grid d. */
void dit_rope_prepare(vf_dit_part *p, const vf_dit_dims *d);

#endif /* VF_DIT_INTERNAL_H */
