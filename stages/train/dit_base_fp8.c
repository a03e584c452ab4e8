/* dit_base_fp8.c — the `dit` stage's frozen base in FP8 (param base_dtype = "fp8", LoRA
 * only): the param's check, the plan's bytes, and loading the base into the model's FP8
 * store (models/dit_fp8.h).
 *
 * A file that ships FP8 (ComfyUI's fp8_scaled, diffusers/quanto's weight_scale) keeps
 * its bytes and scales: requantising a dequantised weight would round it a second time.
 * Every other tensor arrives in f32 (read, or the seeded init) and the model's store
 * quantises the block linears by vf_fp8_quantise's rule. With block swap the swapped
 * blocks' FP8 bytes go to the base's pinned host copy (vf_dit_fp8_new_swap).
 */
#include "stages/train/dit_stage.h"
#include "models/dit_experts.h"

#include <string.h>

int vf_dit_base_dtype(const vf_params *prm, bool lora, bool *fp8, vf_status *st)
{
    const char *v = vf_param_str(prm, "base_dtype");
    *fp8 = strcmp(v, "fp8") == 0;
    if (!*fp8 && v[0])
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "dit: base_dtype \"%s\": use \"fp8\" (a frozen base held in FP8) or \"\" (the model's dtype)",
                             v);
    if (*fp8 && !lora)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "dit: base_dtype \"fp8\" needs LoRA (p:train's lora option): a full fine-tune trains "
                             "every weight, and FP8 holds only a frozen base");
    return 0;
}

void vf_dit_base_fp8_plan(vf_mem_plan *out, vf_device dev, const vf_dit_layout *l, int64_t off, int64_t n,
                          int b1, int swap, size_t as)
{
    vf_dit_fp8_mem m, blk;
    vf_dit_fp8_memory(l, off, n, as, &m);
    int64_t host = 0, ring = 0;
    if (swap) { /* the last `swap` blocks' linears: one block's FP8 bytes each */
        int64_t boff, bn;
        vf_dit_layout_range(l, b1 - 1, b1, &boff, &bn);
        vf_dit_fp8_memory(l, boff, bn, as, &blk);
        host = blk.fp8 * swap;
        ring = blk.fp8 * (swap < 2 ? swap : 2);
    }
    vf_mem_plan_add(out, dev, VF_MEM_WEIGHTS, "frozen base: block linears in FP8 (1 B/param)", m.fp8 - host);
    if (swap) {
        vf_mem_plan_add(out, dev, VF_MEM_WEIGHTS, "block swap ring (FP8 bytes of the blocks in flight)", ring);
        vf_mem_plan_add_pinned(out, VF_MEM_WEIGHTS, "block swap: swapped blocks' FP8 bytes (pinned host)", host);
    }
    vf_mem_plan_add(out, dev, VF_MEM_WEIGHTS, "frozen base: norms, biases, embeddings, head", m.rest);
    vf_mem_plan_add(out, dev, VF_MEM_WORKSPACE, "FP8 base: one linear's weight dequantised", m.scratch);
    vf_mem_plan_add(out, (vf_device){VF_DEV_CPU, 0}, VF_MEM_OTHER, "FP8 base: per-tensor scales and offsets (host)", m.host);
}

int vf_dit_base_fp8_load(vf_stage *s, dit_part_state *h, const vf_params *prm, vf_status *st)
{
    int rc = 0;
    vf_dit_wsrc *w = NULL;
    float *host = vf_alloc(sizeof(float) * (size_t)vf_dit_largest_in(h->l, h->boff, h->bn), st);
    if (!host) VF_FAIL(st, VF_ENOMEM, "%s: no host staging for the base weights", vf_stage_name(s));
    rc = vf_dit_fp8_new_swap(h->be, h->l, h->boff, h->bn, h->splits[h->p + 1], h->swap, &h->fp8, st);
    if (rc) {
        vf_status_prefix(st, "%s: the FP8 base", vf_stage_name(s));
        goto fail;
    }
    if (vf_param_str(prm, "weights")[0]) {
        VF_TRY(vf_dit_wsrc_open_expert(vf_param_str(prm, "weights"), vf_param_str(prm, "expert"), &w, st));
        VF_TRY(vf_dit_wsrc_check(w, h->l, st));
    }
    const uint64_t seed = (uint64_t)vf_param_int(prm, "seed");
    for (int i = 0; i < h->l->n; i++) {
        const vf_dit_tensor *t = &h->l->t[i];
        if (t->numel == 0 || t->offset < h->boff || t->offset + t->numel > h->boff + h->bn) continue;
        if (w && vf_dit_fp8_tensor(h->l, i)) {
            bool shipped = false;
            float scale = 1.0f;
            VF_TRY(vf_dit_wsrc_read_fp8(w, h->l, i, (uint8_t *)host, &scale, &shipped, st));
            if (shipped) {
                VF_TRY(vf_dit_fp8_put_bytes(h->fp8, i, (const uint8_t *)host, scale, st));
                continue;
            }
        }
        if (w) VF_TRY(vf_dit_wsrc_read(w, h->l, host, t->offset, t->numel, st));
        else vf_dit_init(h->l, seed, t->offset, t->numel, host);
        VF_TRY(vf_dit_fp8_put(h->fp8, i, host, st));
    }
fail:
    vf_dit_wsrc_close(w);
    vf_free(host);
    return rc;
}
