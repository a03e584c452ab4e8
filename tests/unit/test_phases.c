/* test_phases.c — the per-phase op timer (kernels/phases.h) on the CPU backend.
 *
 *  - the wrapper replaces every op of the table (a new op without a wrapper stops the
 *    build; this checks the table the build made);
 *  - each op is counted in its phase, once per call, and only while timing is on; a
 *    read starts a new round; the phases' sum fits in the round's span;
 *  - results through the wrapper are the backend's own, bit for bit: a tiny DiT training
 *    step (forward, loss, backward, AdamW) and a tiny VAE encode and decode, each run on
 *    the plain CPU table and on the timed wrapper, with the phases the model must use
 *    (attention, GEMM, convolution, ...) seen.
 * The same wrapper over the CUDA backend is checked in tests/gpu/test_cuda_phases.c.
 */
#include "tests/vf_test.h"

#include "kernels/phases.h"
#include "models/dit.h"
#include "models/vae.h"
#include "runtime/philox.h"

static float *randv(int64_t n, uint64_t seed)
{
    float *p = malloc(sizeof(float) * (size_t)n);
    vf_rng r;
    vf_rng_init(&r, seed, 0, 0, VF_RNG_TEST);
    vf_rng_normal(&r, 0, n, p);
    return p;
}

static vf_phases *wrap(vf_backend *be)
{
    vf_status st = {0};
    vf_phases *p = NULL;
    VF_CHECK_MSG(vf_phases_new(be, &p, &st) == 0, "%s", st.msg);
    return p;
}

VF_TEST(every_op_is_wrapped)
{
    vf_backend *cpu = vf_backend_cpu();
    vf_phases *p = wrap(cpu);
    vf_backend *w = vf_phases_backend(p);
    for (int i = 0; i < vf_nops; i++)
        VF_CHECK_MSG(vf_op_fn(w, &vf_ops[i]) != vf_op_fn(cpu, &vf_ops[i]) && vf_op_fn(w, &vf_ops[i]),
                     "op %s is not wrapped", vf_ops[i].name);
    VF_CHECK(w->ctx == cpu->ctx && w->act_dtype == cpu->act_dtype && w->device.kind == VF_DEV_CPU);
    VF_CHECK_STR(w->name, "cpu");
    vf_phases_free(p);
}

VF_TEST(ops_counted_in_their_phase)
{
    vf_status st = {0};
    vf_phases *p = wrap(vf_backend_cpu());
    vf_backend *w = vf_phases_backend(p);
    const int64_t N = 96, C = 64, OC = 80, L = 48, H = 2, D = 32;
    float *x = randv(N * C, 1), *wt = randv(OC * C, 2), *o = calloc((size_t)(N * OC), 4);
    float *q = randv(L * H * D, 3), *k = randv(L * H * D, 4), *v = randv(L * H * D, 5);
    float *ao = calloc((size_t)(L * H * D), 4), *lse = calloc((size_t)(L * H), 4);
    float *ms = randv(OC * C, 6), *m1 = calloc((size_t)(OC * C), 4), *m2 = calloc((size_t)(OC * C), 4);
    float *ln = calloc((size_t)(N * C), 4), *mu = calloc((size_t)N, 4), *rs = calloc((size_t)N, 4);
    vf_phase_times t;

    w->matmul_fwd(w, o, x, wt, NULL, N, C, OC); /* timing off: not counted */
    VF_CHECK(vf_phases_read(p, &t, &st) == 0);
    VF_CHECK(t.calls[VF_PHASE_GEMM] == 0 && t.total_ms == 0);

    vf_phases_enable(p, true);
    w->matmul_fwd(w, o, x, wt, NULL, N, C, OC);
    w->matmul_fwd(w, o, x, wt, NULL, N, C, OC);
    w->attention_fwd(w, ao, lse, q, k, v, 1, L, L, H, D, 0.2f);
    w->layernorm_fwd(w, ln, mu, rs, x, NULL, NULL, N, C, 1e-6f);
    w->adamw(w, ms, m1, m2, wt, NULL, OC * C, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1);
    w->upload(w, o, x, N, VF_DTYPE_F32);
    w->memset0(w, o, 16);
    VF_CHECK(w->sync(w, &st) == 0);
    VF_CHECK(vf_phases_read(p, &t, &st) == 0);
    const int64_t want[VF_PHASE_N] = {[VF_PHASE_ATTENTION] = 1, [VF_PHASE_GEMM] = 2, [VF_PHASE_ELEMENTWISE] = 1,
                                      [VF_PHASE_OPTIMIZER] = 1, [VF_PHASE_TRANSFER] = 1, [VF_PHASE_MEMSET] = 1};
    double sum = 0;
    for (int ph = 0; ph < VF_PHASE_N; ph++) {
        VF_CHECK_MSG(t.calls[ph] == want[ph], "%s: %lld calls, want %lld", vf_phase_name((vf_phase)ph),
                     (long long)t.calls[ph], (long long)want[ph]);
        VF_CHECK(t.ms[ph] >= 0);
        sum += t.ms[ph];
    }
    VF_CHECK(t.ms[VF_PHASE_GEMM] > 0 && t.ms[VF_PHASE_ATTENTION] > 0);
    VF_CHECK_MSG(sum <= t.total_ms + 1e-9 && t.total_ms > 0, "sum %g, total %g", sum, t.total_ms);

    /* a read starts a new round; turning timing off stops counting */
    VF_CHECK(vf_phases_read(p, &t, &st) == 0);
    VF_CHECK(t.calls[VF_PHASE_GEMM] == 0 && t.total_ms == 0);
    vf_phases_enable(p, false);
    w->matmul_fwd(w, o, x, wt, NULL, N, C, OC);
    VF_CHECK(vf_phases_read(p, &t, &st) == 0 && t.calls[VF_PHASE_GEMM] == 0);
    VF_CHECK_STR(vf_phase_name(VF_PHASE_ELEMENTWISE), "elementwise");
    vf_phases_free(p);
    free(x), free(wt), free(o), free(q), free(k), free(v), free(ao), free(lse);
    free(ms), free(m1), free(m2), free(ln), free(mu), free(rs);
}

/* One training step of the tiny DiT on be: the loss, and the new weights in w. */
static double dit_step_rc(vf_backend *be, const vf_dit_layout *l, float *w, bool recompute)
{
    vf_status st = {0};
    const vf_dit_config *c = &l->cfg;
    const vf_dit_dims d = vf_dit_dims_of(c, 2, 3, 8, 8);
    const int64_t P = l->total, nlat = (int64_t)d.B * c->z * d.T * d.H * d.W;
    float *g = calloc((size_t)P, 4), *master = malloc(sizeof(float) * (size_t)P);
    float *m = calloc((size_t)P, 4), *v = calloc((size_t)P, 4);
    float *x = randv(nlat, 11), *y = randv(nlat, 12);
    memcpy(master, w, sizeof(float) * (size_t)P);
    float t[2] = {0.3f, 0.7f};
    int32_t *text = malloc(sizeof(int32_t) * 2 * (size_t)c->text_len), tl[2] = {5, c->text_len};
    for (int i = 0; i < 2 * c->text_len; i++) text[i] = 'a' + i % 26;
    vf_dit_batch b = {.dims = d, .x_t = x, .t = t, .text = text, .text_len = tl, .target = y};
    vf_dit_part *part = NULL;
    vf_dit_saved *sv = NULL;
    double loss = -1;
    VF_CHECK(vf_dit_part_new(be, l, 0, c->depth, &d, recompute, w, g, &part, &st) == 0);
    VF_CHECK(vf_dit_saved_new(part, &sv, &st) == 0);
    VF_CHECK_MSG(vf_dit_part_forward(part, &b, NULL, NULL, sv, &st) == 0, "%s", st.msg);
    VF_CHECK(vf_dit_part_loss(part, &b, sv, 1.0f, &loss, &st) == 0);
    VF_CHECK_MSG(vf_dit_part_backward(part, &b, sv, NULL, &st) == 0, "%s", st.msg);
    be->adamw(be, master, m, v, g, w, P, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, 1);
    vf_dit_saved_free(sv);
    vf_dit_part_free(part);
    free(g), free(master), free(m), free(v), free(x), free(y), free(text);
    return loss;
}

static double dit_step(vf_backend *be, const vf_dit_layout *l, float *w) { return dit_step_rc(be, l, w, true); }

VF_TEST(dit_step_same_bits_through_the_timer)
{
    vf_status st = {0};
    vf_dit_config c;
    VF_CHECK(vf_dit_preset("tiny", &c, &st) == 0);
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    float *w1 = malloc(sizeof(float) * (size_t)l->total), *w2 = malloc(sizeof(float) * (size_t)l->total);
    vf_dit_init(l, 1, 0, l->total, w1);
    float *noise = randv(l->total, 9); /* every block gets a gradient */
    for (int64_t i = 0; i < l->total; i++) w1[i] += 0.02f * noise[i];
    memcpy(w2, w1, sizeof(float) * (size_t)l->total);

    double plain = dit_step(vf_backend_cpu(), l, w1);
    vf_phases *p = wrap(vf_backend_cpu());
    vf_phases_enable(p, true);
    double timed = dit_step(vf_phases_backend(p), l, w2);
    vf_phase_times t;
    VF_CHECK(vf_phases_read(p, &t, &st) == 0);
    VF_CHECK_MSG(memcmp(&plain, &timed, sizeof plain) == 0, "loss %.17g vs %.17g", plain, timed);
    VF_CHECK(memcmp(w1, w2, sizeof(float) * (size_t)l->total) == 0);
    /* per block: the forward's self- and cross-attention, the recompute's cross-attention
     * only (the self-attention's output and lse are kept), the self-attention's backward,
     * and the cross-attention's once a grain (models/dit_red.h: each of the 2 samples' L
     * tokens cut at ⌈L/N⌉·j for every N ≤ 8 dividing the heads) */
    const vf_dit_dims d = vf_dit_dims_of(&c, 2, 3, 8, 8);
    bool cut[4096] = {false};
    int64_t segs = 1;
    for (int64_t N = 2; N <= 8; N++)
        for (int64_t j = 1; j < N && c.heads % N == 0; j++) {
            int64_t at = (d.L + N - 1) / N * j;
            if (at < d.L && at < 4096 && !cut[at]) cut[at] = true, segs++;
        }
    VF_CHECK(segs > 1); /* the tiny model's heads have divisors: the test sees grains */
    VF_CHECK_EQ_INT(t.calls[VF_PHASE_ATTENTION], (4 + 2 * segs) * c.depth);
    VF_CHECK(t.calls[VF_PHASE_GEMM] > t.calls[VF_PHASE_ATTENTION]);
    VF_CHECK(t.calls[VF_PHASE_ELEMENTWISE] > 0 && t.calls[VF_PHASE_OPTIMIZER] == 1);
    VF_CHECK(t.calls[VF_PHASE_CONV] == 0);
    double sum = 0;
    for (int ph = 0; ph < VF_PHASE_N; ph++) sum += t.ms[ph];
    VF_CHECK_MSG(sum <= t.total_ms + 1e-9 && sum > 0.5 * t.total_ms, "sum %g, total %g", sum, t.total_ms);
    vf_phases_free(p);
    free(noise), free(w1), free(w2);
    vf_dit_layout_free(l);
}

/* Memsets of one DiT training step, counted by the timer on the CPU backend: none per
 * block (every backward op writes the gradient it is the first writer of: ops.h), so a
 * deeper model does not do more, and a handful per step (the loss gradient and the three
 * sums every block adds to: de, de0, dctx). */
VF_TEST(dit_step_memsets_do_not_grow_with_depth)
{
    vf_status st = {0};
    int64_t n[2][2];
    for (int rc = 0; rc < 2; rc++)
        for (int k = 0; k < 2; k++) {
            vf_dit_config c;
            VF_CHECK(vf_dit_preset("tiny", &c, &st) == 0);
            c.depth = 2 + 3 * k;
            vf_dit_layout *l = NULL;
            VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
            float *w = malloc(sizeof(float) * (size_t)l->total);
            vf_dit_init(l, 1, 0, l->total, w);
            vf_phases *p = wrap(vf_backend_cpu());
            vf_phases_enable(p, true);
            dit_step_rc(vf_phases_backend(p), l, w, rc);
            vf_phase_times t;
            VF_CHECK(vf_phases_read(p, &t, &st) == 0);
            n[rc][k] = t.calls[VF_PHASE_MEMSET];
            vf_phases_free(p);
            free(w);
            vf_dit_layout_free(l);
        }
    for (int rc = 0; rc < 2; rc++) {
        fprintf(stderr, "  recompute %d: %lld memsets a step at depth 2, %lld at depth 5\n", rc,
                (long long)n[rc][0], (long long)n[rc][1]);
        VF_CHECK_MSG(n[rc][1] == n[rc][0], "recompute %d: memsets grow with depth (%lld per block)", rc,
                     (long long)(n[rc][1] - n[rc][0]) / 3);
        VF_CHECK_MSG(n[rc][0] <= 4, "recompute %d: %lld memsets a step", rc, (long long)n[rc][0]);
    }
}

/* Encodes and decodes a tiny clip on be; returns the frames decoded from the latent mean. */
static float *vae_roundtrip(vf_backend *be, int64_t *n_out)
{
    vf_status st = {0};
    vf_vae_config c;
    vf_vae_config_tiny(&c);
    vf_vae *m = NULL, *dm = NULL;
    vf_vae_enc *e = NULL;
    vf_vae_dec *d = NULL;
    const int B = 1, T = 5, H = 32, W = 32, sf = vf_vae_space_factor(&c);
    const int64_t Tl = vf_vae_latent_frames(&c, T), nl = (int64_t)B * c.z_dim * Tl * (H / sf) * (W / sf);
    const int64_t nx = (int64_t)B * 3 * vf_vae_decoded_frames(&c, Tl) * H * W;
    float *x = randv((int64_t)B * 3 * T * H * W, 21), *mean = calloc((size_t)nl, 4), *lv = calloc((size_t)nl, 4);
    float *out = calloc((size_t)nx, 4);
    VF_CHECK_MSG(vf_vae_new(&c, be, &m, &st) == 0 && vf_vae_init_seeded(m, 3, &st) == 0, "%s", st.msg);
    VF_CHECK_MSG(vf_vae_dec_model_new(&c, be, &dm, &st) == 0 && vf_vae_init_seeded(dm, 4, &st) == 0, "%s", st.msg);
    VF_CHECK_MSG(vf_vae_enc_new(m, B, 4, H, W, &e, &st) == 0, "%s", st.msg);
    VF_CHECK_MSG(vf_vae_encode_f32(e, B, T, x, mean, lv, &st) >= 0, "%s", st.msg);
    VF_CHECK_MSG(vf_vae_dec_new(dm, B, 1, H / sf, W / sf, &d, &st) == 0, "%s", st.msg);
    VF_CHECK_MSG(vf_vae_decode_f32(d, B, Tl, mean, out, &st) >= 0, "%s", st.msg);
    vf_vae_dec_free(d);
    vf_vae_enc_free(e);
    vf_vae_free(dm);
    vf_vae_free(m);
    free(x), free(mean), free(lv);
    *n_out = nx;
    return out;
}

VF_TEST(vae_same_bits_through_the_timer)
{
    vf_status st = {0};
    int64_t n1 = 0, n2 = 0;
    float *a = vae_roundtrip(vf_backend_cpu(), &n1);
    vf_phases *p = wrap(vf_backend_cpu());
    vf_phases_enable(p, true);
    float *b = vae_roundtrip(vf_phases_backend(p), &n2);
    vf_phase_times t;
    VF_CHECK(vf_phases_read(p, &t, &st) == 0);
    VF_CHECK(n1 == n2 && n1 > 0 && memcmp(a, b, sizeof(float) * (size_t)n1) == 0);
    VF_CHECK(t.calls[VF_PHASE_CONV] > 0 && t.calls[VF_PHASE_ELEMENTWISE] > 0 && t.calls[VF_PHASE_TRANSFER] > 0);
    VF_CHECK(t.ms[VF_PHASE_CONV] > 0);
    vf_phases_free(p);
    free(a), free(b);
}

int main(void) { return vf_test_main(); }
