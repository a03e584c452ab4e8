/* test_cuda_ops.c — every op of the CUDA backend against the CPU backend (the
 * reference) on fresh random inputs.
 *
 * vflow-test: labels=gpu timeout=600
 *
 * Both backends get the SAME inputs: values are drawn, rounded to bf16 once, and the
 * CPU backend computes in f32/f64 from those rounded values, so the difference measures
 * the CUDA kernels only (bf16 storage of their outputs, f32 accumulation), not the
 * input rounding. Pass criteria: relative error ‖gpu − cpu‖ / ‖cpu‖ ≤ 2e-2
 * for bf16 outputs, ≤ 1e-5 for f32 outputs (lse, norm statistics, optimizer state, loss,
 * sum of squares); NaN or Inf never passes. Overwritten outputs are poisoned with NaN
 * before the op (an element the kernel forgets stays NaN and fails), the gradients the
 * ops write too (ops.h); accumulated gradients start from the same random values on both
 * sides (the += is tested), and an op with a vf_grad_mode runs in both. Recorded units
 * (graph_begin/graph_end) run a sequence of ops eagerly, recorded and replayed on new
 * data, each time against the CPU.
 * Shapes are chosen to hit the fast paths (16-byte aligned rows) and the slow ones (odd
 * sizes, pointers 2 bytes off alignment). The attention, conv3d and memory/transport ops
 * are compared in test_cuda_attn.c, test_cuda_conv.c and test_cuda_mem.c (the same
 * harness, tests/gpu/cuda_ops_harness.h); every_op_compared here checks that every op of
 * kernels/ops_list.h is compared in one of the four.
 *
 * Exits 77 (skip) when vflow was built without CUDA or no CUDA device is usable.
 */
#include "tests/gpu/cuda_ops_harness.h"

/* ------------------------------------------------------------------ recorded units */

/* A GEMM with the GELU epilogue, a norm, and a backward with column sums (the scratch
 * partials): ops of the kinds a DiT block's unit holds */
static void unit_ops(vf_backend *be, void *y, void *pre, float *rstd, void *z, void *dz, void *dsh,
                     void *dsc, const void *x, const void *w, const void *b, const void *gw,
                     const void *sc, int64_t N, int64_t Cc, int64_t OC)
{
    be->matmul_gelu_fwd(be, y, pre, x, w, b, N, Cc, OC);
    be->rmsnorm_fwd(be, z, rstd, y, gw, N, OC, 1e-6f);
    be->modulate_bwd(be, dz, dsh, dsc, z, y, sc, 1, N, OC);
}

/* Runs the unit named key; returns how many times its ops were enqueued. */
static int unit_run(vf_backend *be, const uint64_t *key, int nkey, void *const *o, const void *const *in,
                    int64_t N, int64_t Cc, int64_t OC)
{
    int n = 0;
    do {
        if (be->graph_begin(be, key, nkey)) {
            unit_ops(be, o[0], o[1], o[2], o[3], o[4], o[5], o[6], in[0], in[1], in[2], in[3], in[4], N, Cc, OC);
            n++;
        }
    } while (be->graph_end(be));
    return n;
}

/* With VFLOW_CUDA_GRAPHS=1 the CUDA backend runs a unit eagerly the first time its key is
 * seen, records it the second and replays the recording after: each run here on new
 * input data in the same buffers must match the CPU, a unit of another key (other
 * output buffers) must not replay the first's recording, and the counts must show the
 * recordings and replays. */
VF_TEST(graph)
{
    const int64_t N = 96, Cc = 64, OC = 128;
    setenv("VFLOW_CUDA_GRAPHS", "1", 1);
    float *w = rnd(OC * Cc, -0.5, 0.5), *b = rnd(OC, -1, 1), *gw = rnd(OC, 0.5, 1.5), *sc = rnd(OC, -1, 1);
    dbuf dw = dbf(w, OC * Cc, 0), db = dbf(b, OC, 0), dgw = dbf(gw, OC, 0), dsc = dbf(sc, OC, 0);
    dbuf dx = dbf(NULL, N * Cc, 0);
    dbuf out[2][7];
    for (int k = 0; k < 2; k++) {
        out[k][0] = dbf(NULL, N * OC, 0), out[k][1] = dbf(NULL, N * OC, 0);
        out[k][2] = dnew(NULL, N, VF_DTYPE_F32, 0), out[k][3] = dbf(NULL, N * OC, 0);
        out[k][4] = dbf(NULL, N * OC, 0), out[k][5] = dbf(NULL, OC, 0), out[k][6] = dbf(NULL, OC, 0);
    }
    const int64_t sz[7] = {N * OC, N * OC, N, N * OC, N * OC, OC, OC};
    float *h[7];
    for (int i = 0; i < 7; i++) h[i] = nanv(sz[i]);
    int64_t rec0 = 0, rep0 = 0, rec1 = 0, rep1 = 0;
#ifdef VFLOW_HAVE_CUDA
    if (G->device.kind == VF_DEV_CUDA) vf_cuda_graph_counts(&rec0, &rep0);
#endif
    int enq[2] = {0, 0};
    for (int run = 0; run < 5; run++) {
        const int k = run == 3; /* run 3: the other key */
        float *x = rnd(N * Cc, -1, 1);
        G->upload(G, dx.p, x, N * Cc, G->act_dtype);
        unit_ops(C, h[0], h[1], (float *)h[2], h[3], h[4], h[5], h[6], x, w, b, gw, sc, N, Cc, OC);
        void *o[7];
        for (int i = 0; i < 7; i++) o[i] = out[k][i].p;
        const void *in[5] = {dx.p, dw.p, db.p, dgw.p, dsc.p};
        uint64_t key[9] = {0x756e6974, (uint64_t)k};
        for (int i = 0; i < 7; i++) key[2 + i] = (uint64_t)(uintptr_t)o[i];
        enq[k] += unit_run(G, key, 9, o, in, N, Cc, OC);
        char nm[64];
        static const char *const names[7] = {"gelu out", "pre", "rstd (f32)", "rmsnorm", "dz", "dshift", "dscale"};
        for (int i = 0; i < 7; i++) {
            snprintf(nm, sizeof nm, "unit run %d key %d: %s", run, k, names[i]);
            /* rstd is f32, but of the GELU output, which the GPU holds in bf16 and the
             * CPU in f32: its error is a bf16 rounding's averaged over the row */
            cmpd(nm, out[k][i], h[i], i == 2 ? 2e-3 : BF);
        }
        free(x);
    }
#ifdef VFLOW_HAVE_CUDA
    if (G->device.kind == VF_DEV_CUDA) {
        vf_cuda_graph_counts(&rec1, &rep1);
        fprintf(stderr, "  units recorded %lld, replayed %lld; ops enqueued by key 0: %d runs, key 1: %d\n",
                (long long)(rec1 - rec0), (long long)(rep1 - rep0), enq[0], enq[1]);
        VF_CHECK_MSG(rec1 - rec0 == 1 && rep1 - rep0 == 2 && enq[0] == 2 && enq[1] == 1,
                     "key 0 should run eagerly, be recorded, be replayed twice; key 1 run eagerly once");
    }
#endif
    (void)rec0, (void)rep0, (void)rec1, (void)rep1;
    unsetenv("VFLOW_CUDA_GRAPHS");
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 7; i++) dfree(out[k][i]);
    for (int i = 0; i < 7; i++) free(h[i]);
    dfree(dw), dfree(db), dfree(dgw), dfree(dsc), dfree(dx);
    free(w), free(b), free(gw), free(sc);
}

/* ------------------------------------------------------------------ dense */

static void matmul_case(int64_t N, int64_t Cc, int64_t OC, int off, int with_bias)
{
    char nm[96];
    float *x = rnd(N * Cc, -1, 1), *w = rnd(OC * Cc, -0.5, 0.5), *b = rnd(OC, -1, 1);
    float *out = nanv(N * OC);
    dbuf dx = dbf(x, N * Cc, off), dw = dbf(w, OC * Cc, off), db = dbf(b, OC, off), dout = dbf(NULL, N * OC, off);
    C->matmul_fwd(C, out, x, w, with_bias ? b : NULL, N, Cc, OC);
    G->matmul_fwd(G, dout.p, dx.p, dw.p, with_bias ? db.p : NULL, N, Cc, OC);
    snprintf(nm, sizeof nm, "matmul_fwd %lldx%lldx%lld off%d b%d", (long long)N, (long long)Cc, (long long)OC, off,
             with_bias);
    cmpd(nm, dout, out, BF);
    /* backward: dinp written (NaN-poisoned), then added (preset); dw, dbias accumulate */
    float *g = rnd(N * OC, -1, 1), *gx = nanv(N * Cc), *gw = rnd(OC * Cc, -1, 1), *gb = rnd(OC, -1, 1);
    dbuf dg = dbf(g, N * OC, off), dgx = dbf(NULL, N * Cc, off), dgw = dbf(gw, OC * Cc, off), dgb = dbf(gb, OC, off);
    C->matmul_bwd(C, gx, gw, with_bias ? gb : NULL, g, x, w, N, Cc, OC, VF_GRAD_WRITE);
    G->matmul_bwd(G, dgx.p, dgw.p, with_bias ? dgb.p : NULL, dg.p, dx.p, dw.p, N, Cc, OC, VF_GRAD_WRITE);
    snprintf(nm, sizeof nm, "matmul_bwd dinp %lldx%lldx%lld off%d", (long long)N, (long long)Cc, (long long)OC, off);
    cmpd(nm, dgx, gx, BF);
    C->matmul_bwd(C, gx, NULL, NULL, g, x, w, N, Cc, OC, VF_GRAD_ADD);
    G->matmul_bwd(G, dgx.p, NULL, NULL, dg.p, dx.p, dw.p, N, Cc, OC, VF_GRAD_ADD);
    cmpd("  matmul_bwd dinp added", dgx, gx, BF);
    snprintf(nm, sizeof nm, "matmul_bwd dw   %lldx%lldx%lld off%d", (long long)N, (long long)Cc, (long long)OC, off);
    cmpd(nm, dgw, gw, BF);
    snprintf(nm, sizeof nm, "matmul_bwd dbias %lldx%lldx%lld off%d", (long long)N, (long long)Cc, (long long)OC, off);
    cmpd(nm, dgb, gb, BF);
    dfree(dx), dfree(dw), dfree(db), dfree(dout), dfree(dg), dfree(dgx), dfree(dgw), dfree(dgb);
    free(x), free(w), free(b), free(out), free(g), free(gx), free(gw), free(gb);
}

VF_TEST(matmul)
{
    matmul_case(256, 128, 192, 0, 1);
    matmul_case(37, 72, 40, 0, 1);
    matmul_case(37, 72, 40, 1, 1);
    matmul_case(19, 13, 7, 1, 1);
    matmul_case(64, 64, 64, 0, 0);
    matmul_case(1, 96, 33, 0, 1);
}

/* A frozen FP8 weight (the device dequantises into a bf16 scratch, then the bf16 GEMM):
 * the forward and dinp, written and added, against the CPU's f32 dequantisation */
static void matmul_fp8_case(int64_t N, int64_t Cc, int64_t OC, int off, int with_bias)
{
    char nm[96];
    float *x = rnd(N * Cc, -1, 1), *w = rnd(OC * Cc, -0.5, 0.5), *b = rnd(OC, -1, 1);
    uint8_t *w8 = malloc((size_t)(OC * Cc));
    const float sc = vf_fp8_scale(w, OC * Cc);
    vf_fp8_quantise(w, OC * Cc, sc, w8);
    float *wbuf = nanv(OC * Cc), *out = nanv(N * OC);
    dbuf dx = dbf(x, N * Cc, off), db = dbf(b, OC, off), dout = dbf(NULL, N * OC, off);
    dbuf dwbuf = dbf(NULL, OC * Cc, 0);
    /* the bytes as they are (copy takes host memory on either backend), at an odd offset
     * where off is set */
    vf_status st = {0};
    void *w8base = G->alloc(G, (size_t)(OC * Cc + off + 8), &st);
    VF_CHECK_MSG(w8base != NULL, "alloc: %s", st.msg);
    uint8_t *dw8 = (uint8_t *)w8base + off;
    G->copy(G, dw8, w8, (size_t)(OC * Cc));
    C->matmul_fp8_fwd(C, out, x, w8, sc, with_bias ? b : NULL, wbuf, N, Cc, OC);
    G->matmul_fp8_fwd(G, dout.p, dx.p, dw8, sc, with_bias ? db.p : NULL, dwbuf.p, N, Cc, OC);
    snprintf(nm, sizeof nm, "matmul_fp8_fwd %lldx%lldx%lld off%d", (long long)N, (long long)Cc, (long long)OC, off);
    cmpd(nm, dout, out, BF);
    float *g = rnd(N * OC, -1, 1), *gx = nanv(N * Cc);
    dbuf dg = dbf(g, N * OC, off), dgx = dbf(NULL, N * Cc, off);
    C->matmul_fp8_bwd(C, gx, g, w8, sc, wbuf, N, Cc, OC, VF_GRAD_WRITE);
    G->matmul_fp8_bwd(G, dgx.p, dg.p, dw8, sc, dwbuf.p, N, Cc, OC, VF_GRAD_WRITE);
    cmpd("  matmul_fp8_bwd dinp", dgx, gx, BF);
    C->matmul_fp8_bwd(C, gx, g, w8, sc, wbuf, N, Cc, OC, VF_GRAD_ADD);
    G->matmul_fp8_bwd(G, dgx.p, dg.p, dw8, sc, dwbuf.p, N, Cc, OC, VF_GRAD_ADD);
    cmpd("  matmul_fp8_bwd dinp added", dgx, gx, BF);
    dfree(dx), dfree(db), dfree(dout), dfree(dwbuf), dfree(dg), dfree(dgx);
    G->free(G, w8base);
    free(x), free(w), free(b), free(w8), free(wbuf), free(out), free(g), free(gx);
}

VF_TEST(matmul_fp8)
{
    matmul_fp8_case(256, 128, 192, 0, 1);
    matmul_fp8_case(37, 72, 40, 1, 1);
    matmul_fp8_case(64, 64, 64, 0, 0);
}

/* GELU fused into a GEMM's epilogue (cuBLASLt GELU_AUX_BIAS, DGELU_BGRAD where it takes
 * the shape, the separate kernels where not): pre and out of the forward; the backward of
 * a layer over gelu(pre), dpre written, the biases' and weight's gradients accumulated */
static void matmul_gelu_case(int64_t N, int64_t Cc, int64_t OC, int off, int with_bias_pre)
{
    char nm[96];
    /* forward: (N, OC) -> pre, out (N, Cc) */
    float *x = rnd(N * OC, -1, 1), *w1 = rnd(Cc * OC, -0.5, 0.5), *b1 = rnd(Cc, -1, 1);
    float *pre = nanv(N * Cc), *out = nanv(N * Cc);
    dbuf dx = dbf(x, N * OC, off), dw1 = dbf(w1, Cc * OC, off), db1 = dbf(b1, Cc, off);
    dbuf dpre = dbf(NULL, N * Cc, off), dout = dbf(NULL, N * Cc, off);
    C->matmul_gelu_fwd(C, out, pre, x, w1, b1, N, OC, Cc);
    G->matmul_gelu_fwd(G, dout.p, dpre.p, dx.p, dw1.p, db1.p, N, OC, Cc);
    snprintf(nm, sizeof nm, "matmul_gelu_fwd %lldx%lldx%lld off%d", (long long)N, (long long)OC, (long long)Cc, off);
    cmpd(nm, dout, out, BF);
    cmpd("  pre-activation", dpre, pre, BF);
    /* backward of y = gelu(pre)·w2ᵀ + b2, from the CPU's (bf16-rounded) pre and out */
    for (int64_t i = 0; i < N * Cc; i++) pre[i] = bfr(pre[i]), out[i] = bfr(out[i]);
    float *w2 = rnd(OC * Cc, -0.5, 0.5), *g = rnd(N * OC, -1, 1), *gp = nanv(N * Cc);
    float *gbp = rnd(Cc, -1, 1), *gw = rnd(OC * Cc, -1, 1), *gb = rnd(OC, -1, 1);
    dbuf dpre2 = dbf(pre, N * Cc, off), dout2 = dbf(out, N * Cc, off), dw2 = dbf(w2, OC * Cc, off);
    dbuf dg = dbf(g, N * OC, off), dgp = dbf(NULL, N * Cc, off), dgbp = dbf(gbp, Cc, off);
    dbuf dgw = dbf(gw, OC * Cc, off), dgb = dbf(gb, OC, off);
    C->matmul_dgelu_bwd(C, gp, with_bias_pre ? gbp : NULL, gw, gb, g, out, w2, pre, N, Cc, OC);
    G->matmul_dgelu_bwd(G, dgp.p, with_bias_pre ? dgbp.p : NULL, dgw.p, dgb.p, dg.p, dout2.p, dw2.p, dpre2.p, N, Cc,
                        OC);
    snprintf(nm, sizeof nm, "matmul_dgelu_bwd dpre %lldx%lldx%lld off%d", (long long)N, (long long)Cc, (long long)OC,
             off);
    cmpd(nm, dgp, gp, BF);
    if (with_bias_pre) cmpd("  dbias_pre", dgbp, gbp, BF);
    cmpd("  dw", dgw, gw, BF);
    cmpd("  dbias", dgb, gb, BF);
    dfree(dx), dfree(dw1), dfree(db1), dfree(dpre), dfree(dout), dfree(dpre2), dfree(dout2), dfree(dw2), dfree(dg);
    dfree(dgp), dfree(dgbp), dfree(dgw), dfree(dgb);
    free(x), free(w1), free(b1), free(pre), free(out), free(w2), free(g), free(gp), free(gbp), free(gw), free(gb);
}

/* nb layers over one input in one call, weights and biases at one stride as in a flat
 * parameter vector, outputs at another */
static void matmul_batch_case(int64_t N, int64_t Cc, int64_t OC, int nb, int64_t gap, int off)
{
    char nm[96];
    const int64_t ws = OC * Cc + OC + gap, os = N * OC + gap, nw = nb * ws, no = nb * os;
    float *x = rnd(N * Cc, -1, 1), *wf = rnd(nw, -0.5, 0.5), *o = nanv(no);
    dbuf dx = dbf(x, N * Cc, off), dwf = dbf(wf, nw, off), dout = dbf(NULL, no, off);
    for (int i = 0; i < nb; i++) /* the gaps between outputs stay NaN on both sides */
        C->matmul_fwd(C, o + i * os, x, wf + i * ws, wf + i * ws + OC * Cc, N, Cc, OC);
    const size_t es = vf_dtype_size(G->act_dtype);
    G->matmul_batch_fwd(G, dout.p, dx.p, dwf.p, (char *)dwf.p + OC * Cc * es, N, Cc, OC, nb, ws, os);
    snprintf(nm, sizeof nm, "matmul_batch_fwd %dx %lldx%lldx%lld gap%lld off%d", nb, (long long)N, (long long)Cc,
             (long long)OC, (long long)gap, off);
    if (sync_ok(nm)) { /* compare the outputs only */
        float *got = dget(dout), *a = malloc(sizeof(float) * nb * N * OC), *b = malloc(sizeof(float) * nb * N * OC);
        for (int i = 0; i < nb; i++) {
            memcpy(a + i * N * OC, got + i * os, sizeof(float) * N * OC);
            memcpy(b + i * N * OC, o + i * os, sizeof(float) * N * OC);
        }
        CLOSE(nm, a, b, nb * N * OC, BF);
        free(got), free(a), free(b);
    }
    float *g = rnd(no, -1, 1), *gx = nanv(N * Cc), *gwf = rnd(nw, -1, 1);
    dbuf dg = dbf(g, no, off), dgx = dbf(NULL, N * Cc, off), dgwf = dbf(gwf, nw, off);
    C->matmul_batch_bwd(C, gx, gwf, gwf + OC * Cc, g, x, wf, N, Cc, OC, nb, ws, os, VF_GRAD_WRITE);
    G->matmul_batch_bwd(G, dgx.p, dgwf.p, (char *)dgwf.p + OC * Cc * es, dg.p, dx.p, dwf.p, N, Cc, OC, nb, ws, os,
                        VF_GRAD_WRITE);
    cmpd("  matmul_batch_bwd dinp", dgx, gx, BF);
    cmpd("  matmul_batch_bwd dw, dbias (and the gaps untouched)", dgwf, gwf, BF);
    C->matmul_batch_bwd(C, gx, NULL, NULL, g, x, wf, N, Cc, OC, nb, ws, os, VF_GRAD_ADD);
    G->matmul_batch_bwd(G, dgx.p, NULL, NULL, dg.p, dx.p, dwf.p, N, Cc, OC, nb, ws, os, VF_GRAD_ADD);
    cmpd("  matmul_batch_bwd dinp added", dgx, gx, BF);
    dfree(dx), dfree(dwf), dfree(dout), dfree(dg), dfree(dgx), dfree(dgwf);
    free(x), free(wf), free(o), free(g), free(gx), free(gwf);
}

VF_TEST(matmul_fused)
{
    matmul_gelu_case(256, 192, 128, 0, 1); /* aligned: the epilogues */
    matmul_gelu_case(64, 64, 64, 0, 0);    /* DGELU without the bias gradient */
    matmul_gelu_case(37, 72, 40, 1, 1);    /* unaligned: the separate kernels */
    matmul_gelu_case(19, 13, 7, 0, 1);     /* a width cuBLASLt's aux cannot take */
    matmul_batch_case(300, 128, 128, 3, 0, 0); /* the DiT's q, k, v: flat layout, no gap */
    matmul_batch_case(70, 64, 64, 2, 8, 0);    /* k, v; strides with a gap */
    matmul_batch_case(37, 72, 40, 3, 3, 1);    /* unaligned strides: layer by layer */
}

/* ------------------------------------------------------------------ elementwise */

static void elementwise_case(int64_t n, int off)
{
    char nm[64];
    float *a = rnd(n, -3, 3), *b = rnd(n, -3, 3), *out = nanv(n);
    dbuf da = dbf(a, n, off), db = dbf(b, n, off), dout = dbf(NULL, n, off);
    C->add(C, out, a, b, n);
    G->add(G, dout.p, da.p, db.p, n);
    snprintf(nm, sizeof nm, "add n%lld off%d", (long long)n, off);
    cmpd(nm, dout, out, BF);
    float *y = dup(b, n);
    C->axpy(C, y, a, -0.75f, n);
    G->axpy(G, db.p, da.p, -0.75f, n);
    snprintf(nm, sizeof nm, "axpy n%lld off%d", (long long)n, off);
    cmpd(nm, db, y, BF);
    static const char *const act_name[3] = {"gelu", "silu", "gelu_erf"};
    for (int act = 0; act < 3; act++) {
        float *o = nanv(n), *gd = rnd(n, -1, 1), *gi = rnd(n, -1, 1);
        dbuf dgd = dbf(gd, n, off), dgi = dbf(gi, n, off), dout2 = dbf(NULL, n, off);
        for (int64_t i = 0; i < n; i++) gi[i] = NAN; /* written */
        G->upload(G, dgi.p, gi, n, G->act_dtype);
        if (act == 0) {
            C->gelu_fwd(C, o, a, n), G->gelu_fwd(G, dout2.p, da.p, n);
            C->gelu_bwd(C, gi, gd, a, n), G->gelu_bwd(G, dgi.p, dgd.p, da.p, n);
        } else if (act == 2) {
            C->gelu_erf_fwd(C, o, a, n), G->gelu_erf_fwd(G, dout2.p, da.p, n);
            C->gelu_erf_bwd(C, gi, gd, a, n), G->gelu_erf_bwd(G, dgi.p, dgd.p, da.p, n);
        } else {
            C->silu_fwd(C, o, a, n), G->silu_fwd(G, dout2.p, da.p, n);
            C->silu_bwd(C, gi, gd, a, n, VF_GRAD_WRITE), G->silu_bwd(G, dgi.p, dgd.p, da.p, n, VF_GRAD_WRITE);
        }
        snprintf(nm, sizeof nm, "%s_fwd n%lld off%d", act_name[act], (long long)n, off);
        cmpd(nm, dout2, o, BF);
        snprintf(nm, sizeof nm, "%s_bwd n%lld off%d", act_name[act], (long long)n, off);
        cmpd(nm, dgi, gi, BF);
        if (act == 1) {
            C->silu_bwd(C, gi, gd, a, n, VF_GRAD_ADD), G->silu_bwd(G, dgi.p, dgd.p, da.p, n, VF_GRAD_ADD);
            cmpd("  silu_bwd added", dgi, gi, BF);
        }
        /* in place forward (out == inp) */
        dbuf dip = dbf(a, n, off);
        if (act == 0) G->gelu_fwd(G, dip.p, dip.p, n);
        else if (act == 2) G->gelu_erf_fwd(G, dip.p, dip.p, n);
        else G->silu_fwd(G, dip.p, dip.p, n);
        snprintf(nm, sizeof nm, "%s_fwd in place n%lld", act_name[act], (long long)n);
        cmpd(nm, dip, o, BF);
        dfree(dgd), dfree(dgi), dfree(dout2), dfree(dip);
        free(o), free(gd), free(gi);
    }
    dfree(da), dfree(db), dfree(dout);
    free(a), free(b), free(out), free(y);
}

VF_TEST(elementwise)
{
    elementwise_case(1000, 0);
    elementwise_case(1000, 1);
    elementwise_case(13, 0);
    elementwise_case(100003, 0);
}

/* ------------------------------------------------------------------ norms */

static void norm_case(int64_t N, int64_t Cc, int off)
{
    char nm[80];
    const float eps = 1e-6f;
    float *x = rnd(N * Cc, -2, 3), *w = rnd(Cc, 0.5, 1.5), *b = rnd(Cc, -1, 1);
    float *o = nanv(N * Cc), *mean = nanv(N), *rstd = nanv(N);
    dbuf dx = dbf(x, N * Cc, off), dw = dbf(w, Cc, off), db = dbf(b, Cc, off), dout = dbf(NULL, N * Cc, off);
    dbuf dmean = dnew(NULL, N, VF_DTYPE_F32, 0), drstd = dnew(NULL, N, VF_DTYPE_F32, 0);
    for (int affine = 0; affine < 2; affine++) {
        C->layernorm_fwd(C, o, mean, rstd, x, affine ? w : NULL, affine ? b : NULL, N, Cc, eps);
        G->layernorm_fwd(G, dout.p, dmean.p, drstd.p, dx.p, affine ? dw.p : NULL, affine ? db.p : NULL, N, Cc, eps);
        snprintf(nm, sizeof nm, "layernorm_fwd %lldx%lld off%d aff%d", (long long)N, (long long)Cc, off, affine);
        cmpd(nm, dout, o, BF);
        cmpd("  mean (f32)", dmean, mean, F32);
        cmpd("  rstd (f32)", drstd, rstd, F32);
        float *g = rnd(N * Cc, -1, 1), *gx = rnd(N * Cc, -1, 1), *gw = rnd(Cc, -1, 1), *gb = rnd(Cc, -1, 1);
        dbuf dg = dbf(g, N * Cc, off), dgx = dbf(gx, N * Cc, off), dgw = dbf(gw, Cc, off), dgb = dbf(gb, Cc, off);
        /* both backends get the same saved statistics (the CPU's) */
        dbuf dm2 = dnew(mean, N, VF_DTYPE_F32, 0), dr2 = dnew(rstd, N, VF_DTYPE_F32, 0);
        C->layernorm_bwd(C, gx, affine ? gw : NULL, affine ? gb : NULL, g, x, affine ? w : NULL, mean, rstd, N, Cc);
        G->layernorm_bwd(G, dgx.p, affine ? dgw.p : NULL, affine ? dgb.p : NULL, dg.p, dx.p, affine ? dw.p : NULL,
                         dm2.p, dr2.p, N, Cc);
        snprintf(nm, sizeof nm, "layernorm_bwd dinp %lldx%lld aff%d", (long long)N, (long long)Cc, affine);
        cmpd(nm, dgx, gx, BF);
        if (affine) {
            cmpd("  layernorm_bwd dw", dgw, gw, BF);
            cmpd("  layernorm_bwd db", dgb, gb, BF);
        }
        dfree(dg), dfree(dgx), dfree(dgw), dfree(dgb), dfree(dm2), dfree(dr2);
        free(g), free(gx), free(gw), free(gb);
    }
    for (int affine = 0; affine < 2; affine++) {
        C->rmsnorm_fwd(C, o, rstd, x, affine ? w : NULL, N, Cc, eps);
        G->rmsnorm_fwd(G, dout.p, drstd.p, dx.p, affine ? dw.p : NULL, N, Cc, eps);
        snprintf(nm, sizeof nm, "rmsnorm_fwd %lldx%lld off%d aff%d", (long long)N, (long long)Cc, off, affine);
        cmpd(nm, dout, o, BF);
        cmpd("  rstd (f32)", drstd, rstd, F32);
        float *g = rnd(N * Cc, -1, 1), *gx = nanv(N * Cc), *gw = rnd(Cc, -1, 1); /* dinp written */
        dbuf dg = dbf(g, N * Cc, off), dgx = dbf(NULL, N * Cc, off), dgw = dbf(gw, Cc, off);
        dbuf dr2 = dnew(rstd, N, VF_DTYPE_F32, 0);
        C->rmsnorm_bwd(C, gx, affine ? gw : NULL, g, x, affine ? w : NULL, rstd, N, Cc);
        G->rmsnorm_bwd(G, dgx.p, affine ? dgw.p : NULL, dg.p, dx.p, affine ? dw.p : NULL, dr2.p, N, Cc);
        snprintf(nm, sizeof nm, "rmsnorm_bwd dinp %lldx%lld aff%d", (long long)N, (long long)Cc, affine);
        cmpd(nm, dgx, gx, BF);
        if (affine) cmpd("  rmsnorm_bwd dw", dgw, gw, BF);
        dfree(dg), dfree(dgx), dfree(dgw), dfree(dr2);
        free(g), free(gx), free(gw);
    }
    dfree(dx), dfree(dw), dfree(db), dfree(dout), dfree(dmean), dfree(drstd);
    free(x), free(w), free(b), free(o), free(mean), free(rstd);
}

VF_TEST(norms)
{
    norm_case(33, 64, 0);
    norm_case(33, 64, 1);
    norm_case(7, 50, 0);
    norm_case(300, 1536, 0);
    /* channel RMSNorm (B, C, S) */
    const int64_t B = 2, Cc = 12, S = 77;
    float *x = rnd(B * Cc * S, -2, 2), *w = rnd(Cc, 0.5, 1.5), *o = nanv(B * Cc * S);
    dbuf dx = dbf(x, B * Cc * S, 0), dw = dbf(w, Cc, 0), dout = dbf(NULL, B * Cc * S, 0);
    C->rmsnorm_ch_fwd(C, o, x, w, B, Cc, S, 1e-12f);
    G->rmsnorm_ch_fwd(G, dout.p, dx.p, dw.p, B, Cc, S, 1e-12f);
    cmpd("rmsnorm_ch_fwd 2x12x77", dout, o, BF);
    dfree(dx), dfree(dw), dfree(dout);
    free(x), free(w), free(o);
}

/* ------------------------------------------------------------------ adaLN */

static void adaln_case(int64_t B, int64_t L, int64_t Cc, int off)
{
    char nm[80];
    const int64_t n = B * L * Cc;
    float *x = rnd(n, -2, 2), *sh = rnd(B * Cc, -1, 1), *sc = rnd(B * Cc, -1, 1), *y = rnd(n, -2, 2);
    float *o = nanv(n);
    dbuf dx = dbf(x, n, off), dsh = dbf(sh, B * Cc, off), dsc = dbf(sc, B * Cc, off), dy = dbf(y, n, off);
    dbuf dout = dbf(NULL, n, off);
    C->modulate_fwd(C, o, x, sh, sc, B, L, Cc);
    G->modulate_fwd(G, dout.p, dx.p, dsh.p, dsc.p, B, L, Cc);
    snprintf(nm, sizeof nm, "modulate_fwd %lldx%lldx%lld off%d", (long long)B, (long long)L, (long long)Cc, off);
    cmpd(nm, dout, o, BF);
    C->gated_add_fwd(C, o, x, sc, y, B, L, Cc);
    G->gated_add_fwd(G, dout.p, dx.p, dsc.p, dy.p, B, L, Cc);
    snprintf(nm, sizeof nm, "gated_add_fwd %lldx%lldx%lld off%d", (long long)B, (long long)L, (long long)Cc, off);
    cmpd(nm, dout, o, BF);
    /* the backwards write every gradient: NaN-poisoned */
    float *g = rnd(n, -1, 1), *gx = nanv(n), *gsh = nanv(B * Cc), *gsc = nanv(B * Cc), *gy = nanv(n);
    dbuf dg = dbf(g, n, off), dgx = dbf(NULL, n, off), dgsh = dbf(NULL, B * Cc, off), dgsc = dbf(NULL, B * Cc, off);
    dbuf dgy = dbf(NULL, n, off);
    C->modulate_bwd(C, gx, gsh, gsc, g, x, sc, B, L, Cc);
    G->modulate_bwd(G, dgx.p, dgsh.p, dgsc.p, dg.p, dx.p, dsc.p, B, L, Cc);
    cmpd("modulate_bwd dx", dgx, gx, BF);
    cmpd("modulate_bwd dshift", dgsh, gsh, BF);
    cmpd("modulate_bwd dscale", dgsc, gsc, BF);
    G->upload(G, dgx.p, gy, n, G->act_dtype); /* NaN again */
    C->gated_add_bwd(C, gx, gsc, gy, g, sc, y, B, L, Cc);
    G->gated_add_bwd(G, dgx.p, dgsc.p, dgy.p, dg.p, dsc.p, dy.p, B, L, Cc);
    cmpd("gated_add_bwd dx", dgx, gx, BF);
    cmpd("gated_add_bwd dgate", dgsc, gsc, BF);
    cmpd("gated_add_bwd dy", dgy, gy, BF);
    C->gated_add_bwd(C, NULL, gsc, gy, g, sc, y, B, L, Cc); /* dx absent, as the DiT block does */
    G->gated_add_bwd(G, NULL, dgsc.p, dgy.p, dg.p, dsc.p, dy.p, B, L, Cc);
    cmpd("gated_add_bwd (dx NULL) dy", dgy, gy, BF);

    /* LayerNorm + modulate: forward (and its statistics), backward from the CPU's
     * statistics with dx written, then added; dshift, dscale written */
    const float eps = 1e-6f;
    float *mean = nanv(B * L), *rstd = nanv(B * L);
    dbuf dmean = dnew(NULL, B * L, VF_DTYPE_F32, 0), drstd = dnew(NULL, B * L, VF_DTYPE_F32, 0);
    C->ln_modulate_fwd(C, o, mean, rstd, x, sh, sc, B, L, Cc, eps);
    G->ln_modulate_fwd(G, dout.p, dmean.p, drstd.p, dx.p, dsh.p, dsc.p, B, L, Cc, eps);
    snprintf(nm, sizeof nm, "ln_modulate_fwd %lldx%lldx%lld off%d", (long long)B, (long long)L, (long long)Cc, off);
    cmpd(nm, dout, o, BF);
    cmpd("  mean (f32)", dmean, mean, F32);
    cmpd("  rstd (f32)", drstd, rstd, F32);
    dbuf dm2 = dnew(mean, B * L, VF_DTYPE_F32, 0), dr2 = dnew(rstd, B * L, VF_DTYPE_F32, 0);
    float *lx = nanv(n), *lsh = nanv(B * Cc), *lsc = nanv(B * Cc);
    dbuf dlx = dbf(NULL, n, off), dlsh = dbf(NULL, B * Cc, off), dlsc = dbf(NULL, B * Cc, off);
    C->ln_modulate_bwd(C, lx, lsh, lsc, g, x, mean, rstd, sc, B, L, Cc, eps, VF_GRAD_WRITE);
    G->ln_modulate_bwd(G, dlx.p, dlsh.p, dlsc.p, dg.p, dx.p, dm2.p, dr2.p, dsc.p, B, L, Cc, eps, VF_GRAD_WRITE);
    cmpd("  ln_modulate_bwd dx", dlx, lx, BF);
    cmpd("  ln_modulate_bwd dshift", dlsh, lsh, BF);
    cmpd("  ln_modulate_bwd dscale", dlsc, lsc, BF);
    C->ln_modulate_bwd(C, lx, NULL, NULL, g, x, mean, rstd, sc, B, L, Cc, eps, VF_GRAD_ADD);
    G->ln_modulate_bwd(G, dlx.p, NULL, NULL, dg.p, dx.p, dm2.p, dr2.p, dsc.p, B, L, Cc, eps, VF_GRAD_ADD);
    cmpd("  ln_modulate_bwd dx added", dlx, lx, BF);
    dfree(dx), dfree(dsh), dfree(dsc), dfree(dy), dfree(dout), dfree(dg), dfree(dgx), dfree(dgsh), dfree(dgsc),
        dfree(dgy), dfree(dmean), dfree(drstd), dfree(dm2), dfree(dr2), dfree(dlx), dfree(dlsh), dfree(dlsc);
    free(x), free(sh), free(sc), free(y), free(o), free(g), free(gx), free(gsh), free(gsc), free(gy), free(mean);
    free(rstd), free(lx), free(lsh), free(lsc);
}

VF_TEST(adaln)
{
    adaln_case(2, 100, 64, 0);
    adaln_case(2, 100, 64, 1);
    adaln_case(3, 17, 30, 0);
    adaln_case(1, 2000, 256, 0);
}

/* ------------------------------------------------------------------ RoPE */

static void rope_case(int64_t B, int64_t L, int64_t H, int64_t D)
{
    char nm[64];
    const int64_t n = B * L * H * D, P = D / 2;
    float *x = rnd(n, -2, 2), *cs = malloc(sizeof(float) * (size_t)(L * P + 1)), *sn = malloc(sizeof(float) * (size_t)(L * P + 1));
    for (int64_t i = 0; i < L * P; i++) {
        double a = 6.28 * unif();
        cs[i] = (float)cos(a);
        sn[i] = (float)sin(a);
    }
    float *o = nanv(n);
    dbuf dx = dbf(x, n, 0), dout = dbf(NULL, n, 0);
    dbuf dcs = dnew(cs, L * P, VF_DTYPE_F32, 0), dsn = dnew(sn, L * P, VF_DTYPE_F32, 0);
    C->rope_fwd(C, o, x, cs, sn, B, L, H, D);
    G->rope_fwd(G, dout.p, dx.p, dcs.p, dsn.p, B, L, H, D);
    snprintf(nm, sizeof nm, "rope_fwd %lldx%lldx%lldx%lld", (long long)B, (long long)L, (long long)H, (long long)D);
    cmpd(nm, dout, o, BF);
    G->rope_fwd(G, dx.p, dx.p, dcs.p, dsn.p, B, L, H, D); /* in place */
    cmpd("  rope_fwd in place", dx, o, BF);
    float *g = rnd(n, -1, 1), *gx = nanv(n); /* written */
    dbuf dg = dbf(g, n, 0), dgx = dbf(NULL, n, 0);
    C->rope_bwd(C, gx, g, cs, sn, B, L, H, D);
    G->rope_bwd(G, dgx.p, dg.p, dcs.p, dsn.p, B, L, H, D);
    snprintf(nm, sizeof nm, "rope_bwd %lldx%lldx%lldx%lld", (long long)B, (long long)L, (long long)H, (long long)D);
    cmpd(nm, dgx, gx, BF);

    /* RMSNorm over the row (H·D, with gain) then RoPE, as one op */
    const int64_t N = B * L, Cc = H * D;
    float *xr = rnd(n, -2, 2), *w = rnd(Cc, 0.5, 1.5), *rstd = nanv(N);
    dbuf dxr = dbf(xr, n, 0), dw = dbf(w, Cc, 0), drstd = dnew(NULL, N, VF_DTYPE_F32, 0);
    C->rmsnorm_rope_fwd(C, o, rstd, xr, w, cs, sn, B, L, H, D, 1e-6f);
    G->rmsnorm_rope_fwd(G, dout.p, drstd.p, dxr.p, dw.p, dcs.p, dsn.p, B, L, H, D, 1e-6f);
    snprintf(nm, sizeof nm, "rmsnorm_rope_fwd %lldx%lldx%lldx%lld", (long long)B, (long long)L, (long long)H,
             (long long)D);
    cmpd(nm, dout, o, BF);
    cmpd("  rstd (f32)", drstd, rstd, F32);
    float *gw = rnd(Cc, -1, 1);
    dbuf dr2 = dnew(rstd, N, VF_DTYPE_F32, 0), dgw = dbf(gw, Cc, 0);
    for (int64_t i = 0; i < n; i++) gx[i] = NAN;
    G->upload(G, dgx.p, gx, n, G->act_dtype);
    C->rmsnorm_rope_bwd(C, gx, gw, g, xr, w, rstd, cs, sn, B, L, H, D);
    G->rmsnorm_rope_bwd(G, dgx.p, dgw.p, dg.p, dxr.p, dw.p, dr2.p, dcs.p, dsn.p, B, L, H, D);
    cmpd("  rmsnorm_rope_bwd dinp", dgx, gx, BF);
    cmpd("  rmsnorm_rope_bwd dw", dgw, gw, BF);
    dfree(dx), dfree(dout), dfree(dcs), dfree(dsn), dfree(dg), dfree(dgx), dfree(dxr), dfree(dw), dfree(drstd);
    dfree(dr2), dfree(dgw);
    free(x), free(cs), free(sn), free(o), free(g), free(gx), free(xr), free(w), free(rstd), free(gw);
}

VF_TEST(rope)
{
    rope_case(2, 30, 3, 16);
    rope_case(1, 11, 2, 7);
    rope_case(1, 64, 4, 128);
    rope_case(1, 50, 12, 128); /* the DiT's heads: 1536 wide rows */
}

/* ------------------------------------------------------------------ layout, conv3d, embed */

VF_TEST(permute)
{
    const int64_t s4[4] = {3, 5, 7, 9};
    const int p4[4] = {0, 2, 1, 3};
    const int64_t s6[6] = {2, 3, 2, 4, 3, 5};
    const int p6[6] = {0, 2, 4, 1, 3, 5};
    for (int c = 0; c < 2; c++) {
        int nd = c ? 6 : 4;
        const int64_t *s = c ? s6 : s4;
        const int *p = c ? p6 : p4;
        int64_t n = 1;
        for (int i = 0; i < nd; i++) n *= s[i];
        float *x = rnd(n, -1, 1), *o = nanv(n);
        dbuf dx = dbf(x, n, 0), dout = dbf(NULL, n, 0);
        C->permute(C, o, x, nd, s, p);
        G->permute(G, dout.p, dx.p, nd, s, p);
        cmpd(c ? "permute 6d" : "permute 4d", dout, o, 1e-7);
        dfree(dx), dfree(dout);
        free(x), free(o);
    }
}

VF_TEST(embed)
{
    const int64_t N = 300, Cc = 40, V = 20;
    float *table = rnd(V * Cc, -1, 1), *o = nanv(N * Cc);
    int32_t tok[300];
    float tokf[300];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)(unif() * V), tokf[i] = (float)tok[i];
    dbuf dt = dbf(table, V * Cc, 0), dout = dbf(NULL, N * Cc, 0), dtok = {0};
    if (G->device.kind == VF_DEV_CPU) dtok.p = tok; /* harness check: host token ids */
    else dtok = dnew(tokf, N, VF_DTYPE_I32, 0);
    C->embed_fwd(C, o, tok, table, N, Cc);
    G->embed_fwd(G, dout.p, dtok.p, dt.p, N, Cc);
    cmpd("embed_fwd (repeated tokens)", dout, o, 1e-7);
    float *g = rnd(N * Cc, -1, 1), *gt = rnd(V * Cc, -1, 1);
    dbuf dg = dbf(g, N * Cc, 0), dgt = dbf(gt, V * Cc, 0);
    C->embed_bwd(C, gt, g, tok, N, Cc);
    G->embed_bwd(G, dgt.p, dg.p, dtok.p, N, Cc);
    cmpd("embed_bwd", dgt, gt, BF);
    dfree(dt), dfree(dout), dfree(dg), dfree(dgt);
    if (dtok.base) dfree(dtok);
    free(table), free(o), free(g), free(gt);
}

/* ------------------------------------------------------------------ loss, optimizer */

VF_TEST(loss_optimizer)
{
    const int64_t n = 100003;
    float *p = rnd(n, -2, 2), *t = rnd(n, -2, 2), *gp = rnd(n, -1, 1);
    dbuf dp = dbf(p, n, 0), dt = dbf(t, n, 0), dgp = dbf(gp, n, 0);
    double lc = C->mse_fwd_bwd(C, gp, p, t, n, n, 0.5f);
    double lg = G->mse_fwd_bwd(G, dgp.p, dp.p, dt.p, n, n, 0.5f);
    fprintf(stderr, "  mse loss: gpu %.12g cpu %.12g\n", lg, lc);
    VF_CHECK(isfinite(lg) && fabs(lg - lc) <= 1e-5 * fabs(lc));
    cmpd("mse dpred", dgp, gp, BF);
    VF_CHECK(G->mse_fwd_bwd(G, NULL, dp.p, dt.p, n, n, 1.0f) == lg); /* deterministic, dpred optional */
    double sg = G->sumsq(G, dgp.p, n);
    float *gpr = dget(dgp);
    double sc = C->sumsq(C, gpr, n); /* the same bf16 values on both sides */
    fprintf(stderr, "  sumsq: gpu %.12g cpu %.12g\n", sg, sc);
    VF_CHECK(isfinite(sg) && fabs(sg - sc) <= 1e-9 * sc);
    free(gpr);

    float *mw = rnd(n, -1, 1), *m = rnd(n, -0.1, 0.1), *v = rnd(n, 0, 0.01), *gr = rnd(n, -1, 1);
    dbuf dmw = dnew(mw, n, VF_DTYPE_F32, 0), dm = dnew(m, n, VF_DTYPE_F32, 0), dv = dnew(v, n, VF_DTYPE_F32, 0);
    dbuf dgr = dbf(gr, n, 0), dwo = dbf(NULL, n, 0);
    float *wo = nanv(n);
    for (int step = 1; step <= 3; step++) {
        C->adamw(C, mw, m, v, gr, wo, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, step);
        G->adamw(G, dmw.p, dm.p, dv.p, dgr.p, dwo.p, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, step);
    }
    cmpd("adamw master (f32)", dmw, mw, F32);
    cmpd("adamw m (f32)", dm, m, F32);
    cmpd("adamw v (f32)", dv, v, F32);
    cmpd("adamw weights_out (bf16)", dwo, wo, BF);
    dfree(dp), dfree(dt), dfree(dgp), dfree(dmw), dfree(dm), dfree(dv), dfree(dgr), dfree(dwo);
    free(p), free(t), free(gp), free(mw), free(m), free(v), free(gr), free(wo);
}

/* Offload against a shard on the GPU: the host shard of bf16 partitions (the CPU
 * backend's bf16 form) takes the same bf16 gradients and state and must leave the same
 * f32 master and moments and the same bf16 weights, bit for bit. */
VF_TEST(offload_shard_same_bits_as_gpu_shard)
{
    const int64_t n = 100003;
    vf_status st = {0};
    vf_backend *H = vf_backend_cpu_for(VF_DTYPE_BF16, &st);
    VF_CHECK(H != NULL);
    if (!H) return;
    float *mw = rnd(n, -1, 1), *m = rnd(n, -0.1, 0.1), *v = rnd(n, 0, 0.01), *gr = rnd(n, -1, 1);
    dbuf dmw = dnew(mw, n, VF_DTYPE_F32, 0), dm = dnew(m, n, VF_DTYPE_F32, 0), dv = dnew(v, n, VF_DTYPE_F32, 0);
    dbuf dgr = dbf(gr, n, 0), dwo = dbf(NULL, n, 0);
    uint16_t *hg = malloc(sizeof(uint16_t) * n), *hw = malloc(sizeof(uint16_t) * n);
    for (int64_t i = 0; i < n; i++) hg[i] = vf_f32_to_bf16(gr[i]); /* rnd's values are bf16 already */
    for (int step = 1; step <= 3; step++) {
        H->adamw(H, mw, m, v, hg, hw, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, step);
        G->adamw(G, dmw.p, dm.p, dv.p, dgr.p, dwo.p, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, step);
    }
    VF_CHECK(sync_ok("offload adamw"));
    float *gmw = dget(dmw), *gm = dget(dm), *gv = dget(dv), *gw = dget(dwo);
    int64_t diff = 0;
    for (int64_t i = 0; i < n; i++)
        diff += memcmp(&gmw[i], &mw[i], 4) || memcmp(&gm[i], &m[i], 4) || memcmp(&gv[i], &v[i], 4) ||
                vf_f32_to_bf16(gw[i]) != hw[i];
    fprintf(stderr, "  offload: host bf16 shard vs GPU shard, 3 steps: %lld of %lld elements differ\n",
            (long long)diff, (long long)n);
    VF_CHECK(diff == 0);
    dfree(dmw), dfree(dm), dfree(dv), dfree(dgr), dfree(dwo);
    free(mw), free(m), free(v), free(gr), free(hg), free(hw), free(gmw), free(gm), free(gv), free(gw);
}

/* ------------------------------------------------------------------ coverage */

/* Which comparison above covers which ops of kernels/ops_list.h (the sibling files' are
 * in cuda_ops_harness.h). Each op must appear in one (every_op_compared fails naming the
 * op otherwise), and the first field names the comparison's VF_TEST, so dropping a
 * comparison without its entry breaks the build. */
#define VF_CUDA_OP_CASES(X)                                                         \
    X(graph, "graph_begin graph_end")                                               \
    X(matmul, "matmul_fwd matmul_bwd")                                              \
    X(matmul_fused, "matmul_gelu_fwd matmul_dgelu_bwd matmul_batch_fwd matmul_batch_bwd") \
    X(matmul_fp8, "matmul_fp8_fwd matmul_fp8_bwd")                                  \
    X(elementwise, "add axpy gelu_fwd gelu_bwd gelu_erf_fwd gelu_erf_bwd silu_fwd silu_bwd") \
    X(norms, "layernorm_fwd layernorm_bwd rmsnorm_fwd rmsnorm_bwd rmsnorm_ch_fwd")  \
    X(adaln, "modulate_fwd modulate_bwd ln_modulate_fwd ln_modulate_bwd gated_add_fwd gated_add_bwd") \
    X(rope, "rope_fwd rope_bwd rmsnorm_rope_fwd rmsnorm_rope_bwd")                  \
    X(permute, "permute")                                                           \
    X(embed, "embed_fwd embed_bwd")                                                 \
    X(loss_optimizer, "mse_fwd_bwd adamw sumsq")

static bool covers(const char *list, const char *op)
{
    size_t n = strlen(op);
    for (const char *p = list; (p = strstr(p, op)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return true;
    return false;
}

VF_TEST(every_op_compared)
{
    VF_CUDA_OP_CASES(VF_CASE_FN)
#define VF_CASE_OPS(fn, ops) ops,
    static const char *const lists[] = {VF_CUDA_OP_CASES(VF_CASE_OPS) VF_CUDA_OP_CASES_ATTN(VF_CASE_OPS)
                                            VF_CUDA_OP_CASES_CONV(VF_CASE_OPS) VF_CUDA_OP_CASES_MEM(VF_CASE_OPS)};
#undef VF_CASE_OPS
    const int nl = (int)(sizeof lists / sizeof lists[0]);
    for (int i = 0; i < vf_nops; i++) {
        bool found = false;
        for (int k = 0; k < nl && !found; k++) found = covers(lists[k], vf_ops[i].name);
        VF_CHECK_MSG(found, "op %s (%s) has no CUDA-vs-CPU comparison: add a case and list it in VF_CUDA_OP_CASES",
                     vf_ops[i].name, vf_ops[i].family);
    }
    /* and every name listed is an op of the table */
    for (int k = 0; k < nl; k++) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", lists[k]);
        for (char *t = strtok(buf, " "); t; t = strtok(NULL, " "))
            VF_CHECK_MSG(vf_op_find(t) != NULL, "VF_CUDA_OP_CASES names '%s', which is no op of kernels/ops_list.h", t);
    }
}

int main(void) { return vf_cuda_ops_main(); }
