/* vae_walk.h — the layer walker shared by the streaming VAE encoder (vae_enc.c) and
 * decoder (vae_dec.c); private to models/vae*.c.
 *
 * One walker drives a network in two modes. Measuring (ws == NULL): it runs the
 * structure with the worst frame count each layer can see for a chunk and records how
 * large each work buffer, the causal caches and the attention statistics must be; that
 * gives both the memory hook's numbers and the allocation (vf_vw_alloc), so declared and
 * allocated bytes cannot drift apart. Running: the same walk calls the backend ops on a
 * chunk's frames; buffer choice is a pure function of the structure (pick: lowest free
 * index), so a buffer is never used above its measured size (VF_ASSERTed).
 *
 * Activations are channel-first (B, C, n, H, W), n the frames of this chunk at that
 * depth. Every causal conv gets its input as [cache (2 frames) | n frames] and keeps the
 * last two for the next chunk. Parameters are taken in table order (vae.c).
 *
 * Device calls per chunk depend on the structure only, never on the frame size or the
 * widths: frames of every (b, c) plane move in one strided copy (copy2d), and padding is
 * the convolution's own (ops.h), never a padded copy. Every convolution goes through
 * vf_vw_conv, so a measuring walk also knows each one's shape and the largest cuDNN
 * workspace the CUDA backend may take for them (vf_conv3d_workspace_bound).
 */
#ifndef VF_VAE_WALK_H
#define VF_VAE_WALK_H

#include "models/vae.h"

#define VF_VW_NBUF 6
#define VF_VW_IN VF_VW_NBUF /* index of the input buffer; pick never returns it */

typedef struct vf_vw_lstate {
    int64_t cache_off; /* elements into the cache block */
    int pending;       /* temporal resample: frames waiting in its cache */
    int started;       /* temporal resample: frame 0 went through */
} vf_vw_lstate;

/* Device buffers of one encoder or decoder; sized by a measuring walk. */
typedef struct vf_vw_ws {
    vf_vae *m;
    vf_backend *be;
    size_t es;
    void *buf[VF_VW_NBUF];
    int64_t cap[VF_VW_NBUF]; /* elements */
    float *lse;              /* attention log-sum-exp, device f32 */
    int64_t lse_cap;
    void *cache;             /* every causal cache, one block */
    int64_t cache_elems;
    int nstate;
    vf_vw_lstate *ls;
    void *in;                /* the chunk's input */
    int64_t in_elems;
    int64_t bytes;           /* allocated on the device */
} vf_vw_ws;

typedef struct vf_vw_act {
    int buf;
    int64_t C, n, H, W;
} vf_vw_act;

typedef struct vf_vw_walk {
    vf_vw_ws *e;                /* NULL while measuring */
    const vf_vae_config *c;
    int64_t B;
    int pi, si;                 /* next parameter / layer state */
    /* measuring */
    int64_t need[VF_VW_NBUF], need_lse, cache_elems;
    int64_t conv_ws;            /* the largest vf_conv3d_workspace_bound of its convolutions */
    vf_vw_lstate *ls_out;       /* when set, cache offsets are recorded here */
    vf_conv3d_shape *shapes;    /* when set, the first shapes_cap convolutions' shapes */
    int nconv, shapes_cap;      /* convolutions walked; capacity of shapes */
} vf_vw_walk;

static inline unsigned vf_vw_bit(int b) { return 1u << b; }

/* w as a measuring walk of B clips for config c (every count zero), recording cache
 * offsets into ls and the first cap convolution shapes into shapes where given. */
void vf_vw_measuring(vf_vw_walk *w, const vf_vae_config *c, int64_t B, vf_vw_lstate *ls,
                     vf_conv3d_shape *shapes, int cap);

int vf_vw_pick(vf_vw_walk *w, unsigned busy, int64_t elems);
char *vf_vw_bp(vf_vw_walk *w, int b);
/* Next parameter in table order; the suffix check catches a walk that drifted from the
 * table. NULL while measuring. */
const void *vf_vw_param(vf_vw_walk *w, const char *suffix);
/* Next layer state, with cache_elems of causal cache. NULL while measuring. */
vf_vw_lstate *vf_vw_state(vf_vw_walk *w, int64_t cache_elems);
/* Device address of a layer's cache. */
char *vf_vw_cache(vf_vw_walk *w, const vf_vw_lstate *s);
/* dst[b, c, td0 + t] = src[b, c, ts0 + t] for t < nt; frames of hw elements, Td / Ts
 * frames per (b, c) plane. One device call whatever BC. */
void vf_vw_copy_frames(vf_vw_walk *w, char *dst, int64_t Td, int64_t td0, const char *src,
                       int64_t Ts, int64_t ts0, int64_t nt, int64_t BC, int64_t hw);

/* conv3d_fwd of shape s from buffer in to buffer out (VF_VW_IN allowed for in) with
 * weight wt and bias (params of the walk); measuring, it records the shape and its
 * workspace bound instead. */
void vf_vw_conv(vf_vw_walk *w, int out, int in, const void *wt, const void *bias,
                const vf_conv3d_shape *s);
/* silu(rmsnorm_ch(x) * gamma) (silu optional) into a new buffer; x stays. */
vf_vw_act vf_vw_norm_silu(vf_vw_walk *w, vf_vw_act x, unsigned busy, int silu);
/* Causal conv 3x3x3 (spatial padding 1) of a (consumed), with its 2-frame cache. */
vf_vw_act vf_vw_conv3(vf_vw_walk *w, vf_vw_act a, int64_t cout, unsigned busy);
/* Pointwise conv (no time context, no cache); x stays. */
vf_vw_act vf_vw_conv1x1(vf_vw_walk *w, vf_vw_act x, int64_t cout, unsigned busy);
/* Wan's ResidualBlock; x stays, unless it is the result. */
vf_vw_act vf_vw_resblock(vf_vw_walk *w, vf_vw_act x, int64_t cout, unsigned busy);
/* Middle block attention: one head over the H·W positions of each frame, residual added. */
vf_vw_act vf_vw_attn(vf_vw_walk *w, vf_vw_act x, unsigned busy);

/* Wan 2.2's encoder level shortcut (vae_res.c): x (kept) unfolded by (ft, fs, fs) and
 * averaged in groups into cout channels, frame 0 paired with a zero frame; returns x
 * itself when that is the identity. */
vf_vw_act vf_vw_avg_down(vf_vw_walk *w, vf_vw_act x, int64_t cout, int ft, int fs, unsigned busy);
/* Wan 2.2's decoder level shortcut: x (kept) channels repeated and folded into
 * (ft, fs, fs) neighbourhoods of cout channels; the stream's frame 0 keeps its last
 * sub-frame only. */
vf_vw_act vf_vw_dup_up(vf_vw_walk *w, vf_vw_act x, int64_t cout, int ft, int fs, unsigned busy);

/* Allocates ws's buffers from a measuring walk m (cache offsets recorded into ws->ls,
 * which the caller sized to m->si) plus an input of in_elems; ws->m/be/es set by the
 * caller. On failure the caller frees with vf_vw_free. */
int vf_vw_alloc(vf_vw_ws *ws, const vf_vw_walk *m, int64_t in_elems, vf_status *st);
void vf_vw_free(vf_vw_ws *ws);
/* Zeroes every cache and layer state (a new clip). */
void vf_vw_reset(vf_vw_ws *ws);
/* Device bytes a measuring walk asks for (buffers, caches, lse, input of in_elems). */
int64_t vf_vw_bytes(const vf_vw_walk *m, size_t elem, int64_t in_elems);

#endif /* VF_VAE_WALK_H */
