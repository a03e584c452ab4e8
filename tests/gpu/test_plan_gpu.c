/* test_plan_gpu.c — the planner's DiT figures on a GPU, measured two ways: the device
 * pool's accounting (the twin account "<account>@cuda:0" the pool charges) and
 * cudaMemGetInfo (what the driver says left the device).
 *
 * vflow-test: labels=gpu timeout=600
 *
 * A mid-size run on one device: the "small" preset (dim 256, 8 blocks, head dim 64) at
 * 2 x 8 x 64 x 64 latents (8,192 tokens per sample), cut into 2 partitions driven in one
 * process as the dit stage drives them: each partition's weights and gradients, as many
 * saved-activation stores as 1F1B keeps in flight with M = 4 (vf_train_1f1b), the
 * partition workspace, its boundary buffers and the micro-batch inputs; then one
 * micro-batch forward, loss and backward through both. Expected bytes are what the
 * planner uses (vf_dit_part_memory: params, grads, saved, workspace, xfer) plus the
 * inputs; measured: the pool account's peak and the drop of cudaMemGetInfo's free
 * bytes, each within 10%. Both with and without recompute. Exits 77 without CUDA or a
 * usable device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/vf_test.h"

#include "kernels/ops.h"
#include "models/dit.h"
#include "runtime/core/alloc.h"
#include "stages/train/dit_train.h"

#ifdef VFLOW_HAVE_CUDA
#include <cuda_runtime_api.h>

/* kernels/cuda/cuda_internal.h (not includable without the CUDA toolkit's headers in
 * every translation unit): give cached pool blocks back to the driver, pool size. */
void vf_cuda_pool_trim(int dev);
size_t vf_cuda_pool_reserved(int dev);

static vf_backend *G;

typedef struct find_acct {
    const char *name;
    vf_account *a;
} find_acct;

static void find_cb(vf_account *a, void *u)
{
    find_acct *f = u;
    if (strcmp(vf_account_name(a), f->name) == 0) f->a = a;
}

static int64_t device_free(void)
{
    size_t fr = 0, tot = 0;
    cudaDeviceSynchronize();
    cudaMemGetInfo(&fr, &tot);
    return (int64_t)fr;
}

static void one_config(bool recompute, bool warm)
{
    vf_status st = {0};
    vf_dit_config c;
    VF_CHECK(vf_dit_preset("small", &c, &st) == 0);
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    if (!l) return;
    const int P = 2, M = 4, bounds[3] = {0, c.depth / 2, c.depth};
    const vf_dit_dims d = vf_dit_dims_of(&c, 2, 8, 64, 64);
    const size_t as = vf_dtype_size(G->act_dtype), gs = vf_dtype_size(G->grad_dtype);
    const int64_t L = vf_dit_tokens(&c, &d), N = d.B * L, D = c.dim, Nt = (int64_t)d.B * c.text_len;
    const int64_t nlat = (int64_t)c.z * d.T * d.H * d.W * d.B;

    /* a fresh account per config: its device twin is what the pool charges */
    char name[64];
    /* the warm-up's own name: the workspaces it grows (cuDNN's, cuBLASLt's) stay charged
     * to the account it ran under, which the measured pass must not read */
    snprintf(name, sizeof name, "plan_gpu_%s%s", warm ? "warm_" : "", recompute ? "rc" : "norc");
    vf_account *acct = vf_account_new(name);
    vf_account *prev = vf_account_set_current(acct);
    vf_cuda_pool_trim(0); /* blocks cached by an earlier config would hide from cudaMemGetInfo */
    int64_t free0 = device_free(), res0 = (int64_t)vf_cuda_pool_reserved(0);

    int64_t expect = 0;
    void *bufs[256];
    int nb = 0;
#define ALLOC(bytes) (expect += (int64_t)(bytes), bufs[nb++] = G->alloc(G, (size_t)(bytes), &st))
    vf_dit_part *pp[2] = {0};
    vf_dit_saved *sv[2][8] = {{0}};
    int nsv[2] = {0};
    vf_dit_xfer fx[2], gx[2];
    void *xt = ALLOC(nlat * as), *tg = ALLOC(nlat * as);
    for (int i = 0; i < P; i++) {
        vf_dit_mem m;
        vf_dit_part_memory(&c, bounds[i], bounds[i + 1], &d, recompute, as, gs, &m);
        int64_t off, n;
        vf_dit_layout_range(l, bounds[i], bounds[i + 1], &off, &n);
        void *w = ALLOC(n * (int64_t)as), *g = ALLOC(n * (int64_t)gs);
        VF_CHECK_EQ_INT(n * (int64_t)as, m.params);
        VF_CHECK_EQ_INT(n * (int64_t)gs, m.grads);
        VF_CHECK(w && g && vf_dit_part_new(G, l, bounds[i], bounds[i + 1], &d, recompute, w, g, &pp[i], &st) == 0);
        if (!pp[i]) break;
        expect += m.workspace;
        VF_CHECK_EQ_INT((int64_t)vf_dit_part_workspace_bytes(pp[i]), m.workspace);
        vf_1f1b_op ops[2 * M];
        nsv[i] = vf_train_1f1b(P, i, M, ops);
        for (int k = 0; k < nsv[i]; k++) {
            VF_CHECK(vf_dit_saved_new(pp[i], &sv[i][k], &st) == 0);
            expect += m.saved;
            VF_CHECK_EQ_INT((int64_t)vf_dit_saved_bytes(sv[i][k]), m.saved);
        }
        /* boundary: activations out, their gradients in (the dit stage's item buffers) */
        fx[i].x = ALLOC(N * D * (int64_t)as), fx[i].e = ALLOC(d.B * D * (int64_t)as);
        fx[i].e0 = ALLOC(6 * d.B * D * (int64_t)as), fx[i].ctx = ALLOC(Nt * D * (int64_t)as);
        gx[i].x = ALLOC(N * D * (int64_t)gs), gx[i].e = ALLOC(d.B * D * (int64_t)gs);
        gx[i].e0 = ALLOC(6 * d.B * D * (int64_t)gs), gx[i].ctx = ALLOC(Nt * D * (int64_t)gs);
        int64_t raw = (N * D + d.B * D + 6 * d.B * D + Nt * D) * (int64_t)as; /* 64-byte aligned pieces */
        VF_CHECK(m.xfer >= raw && m.xfer <= raw + 4 * 64);
    }
#undef ALLOC
    for (int i = 0; i < nb; i++) VF_CHECK(bufs[i] != NULL);

    /* one micro-batch through both partitions: the workspaces really get used */
    float *host = calloc((size_t)nlat, sizeof *host), t[2] = {0.3f, 0.7f};
    int32_t *text = calloc((size_t)Nt, sizeof *text);
    for (int64_t i = 0; i < nlat; i++) host[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
    G->upload(G, xt, host, nlat, G->act_dtype);
    G->upload(G, tg, host, nlat, G->act_dtype);
    vf_dit_batch b = {.dims = d, .x_t = xt, .t = t, .text = text, .text_len = NULL, .target = tg};
    double loss = 0;
    int rc = pp[0] && pp[1] ? 0 : -1;
    if (!rc) rc = vf_dit_part_forward(pp[0], &b, NULL, &fx[0], sv[0][0], &st);
    if (!rc) rc = vf_dit_part_forward(pp[1], &b, &fx[0], NULL, sv[1][0], &st);
    if (!rc) rc = vf_dit_part_loss(pp[1], &b, sv[1][0], 1.0f, &loss, &st);
    if (!rc) rc = vf_dit_part_backward(pp[1], &b, sv[1][0], &gx[1], &st);
    if (!rc) rc = vf_dit_part_backward(pp[0], &b, sv[0][0], &gx[1], &st);
    if (!rc) rc = G->sync(G, &st);
    VF_CHECK_MSG(rc == 0, "%s", st.msg);
    int64_t used = free0 - device_free(), reserved = (int64_t)vf_cuda_pool_reserved(0) - res0;

    char twin[96];
    snprintf(twin, sizeof twin, "%s@cuda:0", name);
    find_acct f = {twin, NULL};
    vf_account_each(find_cb, &f);
    int64_t peak = f.a ? vf_account_peak(f.a) : -1;
    printf("%srecompute=%d: expected %.1f MiB, pool account peak %.1f MiB (%.3f), pool reserved +%.1f MiB, "
           "cudaMemGetInfo %.1f MiB (%.3f), saved stores %d+%d, loss %.4f\n",
           warm ? "(warm-up) " : "", recompute, expect / 1048576.0, peak / 1048576.0, (double)peak / (double)expect,
           reserved / 1048576.0, used / 1048576.0, (double)used / (double)expect, nsv[0], nsv[1], loss);
    if (warm) goto out;
    VF_CHECK_MSG(f.a != NULL, "no device account %s", twin);
    VF_CHECK_MSG(peak >= 0.9 * (double)expect && peak <= 1.1 * (double)expect, "pool peak %lld vs expected %lld",
                 (long long)peak, (long long)expect);
    VF_CHECK_MSG(used >= 0.9 * (double)expect && used <= 1.1 * (double)expect, "cudaMemGetInfo %lld vs expected %lld",
                 (long long)used, (long long)expect);

out:
    for (int i = 0; i < P; i++) {
        for (int k = 0; k < nsv[i]; k++) vf_dit_saved_free(sv[i][k]);
        vf_dit_part_free(pp[i]);
    }
    for (int i = 0; i < nb; i++)
        if (bufs[i]) G->free(G, bufs[i]);
    free(host);
    free(text);
    vf_dit_layout_free(l);
    vf_account_set_current(prev);
}

/* the first pass loads the kernels' modules (device memory cudaMemGetInfo would count) */
VF_TEST(warm_up) { one_config(true, true); }
VF_TEST(dit_memory_on_gpu_recompute) { one_config(true, false); }
VF_TEST(dit_memory_on_gpu_full) { one_config(false, false); }

int main(void)
{
    vf_status st = {0};
    G = vf_backend_cuda(0, &st);
    if (!G) {
        printf("skip: %s\n", st.msg[0] ? st.msg : "no CUDA device");
        return 77;
    }
    return vf_test_main();
}
#else
int main(void)
{
    printf("skip: built without CUDA\n");
    return 77;
}
#endif
