/* bench_cuda_dit.c — the vflow side of the CUDA DiT benchmarks (bench/bench_cuda.sh runs
 * it next to the PyTorch peer bench/bench_cuda_dit.py and prints the ratios).
 *
 *   bench_cuda_dit step [preset=wan-1.3b] [B=1] [T=13] [H=48] [W=84] [recompute=1]
 *                       [steps=8] [warmup=2] [phases=1] [device=cuda:0]
 *       one training step of the whole model on cuda:0 as one partition: zero grads,
 *       forward, rectified-flow loss, backward (recompute: only block inputs kept), AdamW
 *       over every parameter (f32 master and moments on the GPU, bf16 weights out).
 *       Latent (16, T, H, W) with patch 1x2x2: the defaults give 13·24·42 = 13104 tokens
 *       (a 49-frame 384x672 clip). Median step time -> tokens/s, MFU (REFERENCE's
 *       6·N·S + 12·L·d·S² + 12·L·d·S·S_txt, with the text K/V projections, over the
 *       989 TF/s dense bf16 peak of an H100 SXM), peak device memory (what the pool
 *       holds from the driver plus the backend's own scratch, like PyTorch's
 *       max_memory_reserved). phases=1 (the default) then times one more step op by op
 *       (kernels/phases.h: CUDA events around each op) and reports where it went:
 *       attention, GEMM, norm/elementwise, optimizer, transfers, memsets, and the idle
 *       time between ops; the timed steps before it run with the timer off.
 *   bench_cuda_dit swap [preset=wan-1.3b] [B=1] [T=13] [H=48] [W=84] [K=depth-4] [rank=32]
 *                       [steps=4] [warmup=1]
 *       block swap (models/dit.h vf_dit_part_set_swap): a LoRA step (rank-32 adapters on
 *       every block linear, recompute, one partition) with the whole frozen base on the
 *       device, then with the base of the last K blocks streamed from pinned host memory
 *       through the ring on the copy stream, same process. Median step times, their
 *       ratio, the copies' own time (each pass's K blocks copied alone, timed) and the
 *       share of it hidden behind compute: 1 − (swap − resident) / copies. Then the
 *       same step with the whole base resident and the block inputs offloaded to pinned
 *       host memory (vf_dit_part_set_offload): its median and ratio to the resident one.
 *   bench_cuda_dit attn [B=1] [L=13104] [Lk=L] [H=12] [D=128] [iters=20]
 *       attention forward and forward+backward alone: TFLOP/s with the usual counts
 *       (forward 4·B·H·Lq·Lk·D, backward 2.5x that).
 *
 * Both modes take attn=cudnn|hand (default: VFLOW_ATTN's choice, cuDNN where it can) and
 * print, before the JSON, a line attn_path=<cudnn|hand|cudnn+hand|cpu> naming the attention
 * path that ran (cudnn+hand: some shapes fell back to the hand kernels; the log says which).
 * The last line of each mode is one JSON object (what the script parses), with the same
 * attn_path and cudnn_version (0: none loaded). Needs a GPU; exits 77 without one (or
 * without CUDA in the build).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

#include "kernels/ops.h"
#include "kernels/phases.h"
#include "models/dit.h"
#include "models/dit_lora.h"
#include "runtime/philox.h"
#ifdef VFLOW_HAVE_CUDA
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cudnn_att.h"
#endif

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const char *arg(int argc, char **argv, const char *key, const char *def)
{
    size_t n = strlen(key);
    for (int i = 2; i < argc; i++)
        if (strncmp(argv[i], key, n) == 0 && argv[i][n] == '=') return argv[i] + n + 1;
    return def;
}
#define IARG(k, d) atoi(arg(argc, argv, k, d))

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The initial values are drawn on the host, chunk by chunk on every core: Philox is
 * counter based (an element's value depends on its index alone), so the chunking changes
 * no value, and a 1.4 B-parameter model's two draws take seconds instead of a minute. */
typedef struct fill_job {
    const vf_dit_layout *l; /* NULL: plain normals */
    uint64_t seed;
    float scale;
    float *p;
    int64_t n, next, chunk;
    pthread_mutex_t mu;
} fill_job;

static void *fill_worker(void *arg)
{
    fill_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        const int64_t lo = j->next;
        j->next += j->chunk;
        pthread_mutex_unlock(&j->mu);
        if (lo >= j->n) return NULL;
        const int64_t cnt = lo + j->chunk < j->n ? j->chunk : j->n - lo;
        if (j->l) {
            vf_dit_init(j->l, j->seed, lo, cnt, j->p + lo);
        } else {
            vf_rng r;
            vf_rng_init(&r, j->seed, 0, 0, VF_RNG_TEST);
            vf_rng_normal(&r, (uint64_t)lo, cnt, j->p + lo);
            for (int64_t i = lo; i < lo + cnt; i++) j->p[i] *= j->scale;
        }
    }
}

static void fill(fill_job *j)
{
    long nt = sysconf(_SC_NPROCESSORS_ONLN);
    nt = nt < 1 ? 1 : nt > 64 ? 64 : nt;
    pthread_t th[64];
    j->next = 0;
    j->chunk = (int64_t)1 << 22;
    pthread_mutex_init(&j->mu, NULL);
    int started = 0;
    for (long i = 0; i < nt; i++)
        if (pthread_create(&th[started], NULL, fill_worker, j) == 0) started++;
    if (!started) fill_worker(j);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&j->mu);
}

static float *randn(int64_t n, uint64_t seed, float scale)
{
    float *p = malloc(sizeof(float) * (size_t)n);
    if (!p) return NULL;
    fill_job j = {.seed = seed, .scale = scale, .p = p, .n = n};
    fill(&j);
    return p;
}

/* the layout's initial values (vf_dit_init) of all n parameters */
static float *init_params(const vf_dit_layout *l, uint64_t seed, int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)n);
    if (!p) return NULL;
    fill_job j = {.l = l, .seed = seed, .p = p, .n = n};
    fill(&j);
    return p;
}

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); return 1; } while (0)

/* The attention path that ran on be, and the loaded cuDNN's version (0: none). */
static const char *attn_path(const vf_backend *be, int *cudnn_version)
{
    *cudnn_version = 0;
#ifdef VFLOW_HAVE_CUDA
    if (be->device.kind == VF_DEV_CUDA) {
        *cudnn_version = vf_cuda_cudnn_version();
        return vf_cuda_attn_path();
    }
#endif
    return "cpu";
}

/* Prints the attn_path line and returns the JSON fields naming it. */
static const char *attn_report(const vf_backend *be)
{
    static char json[96];
    int ver;
    const char *path = attn_path(be, &ver);
    printf("attn_path=%s\n", path);
    snprintf(json, sizeof json, "\"attn_path\":\"%s\",\"cudnn_version\":%d", path, ver);
    return json;
}

/* parameters applied once per video token / per text token (the FLOP model) */
static void param_split(const vf_dit_layout *l, double *n_tok, double *n_txt)
{
    *n_tok = *n_txt = 0;
    for (int i = 0; i < l->n; i++) {
        const char *nm = l->t[i].name;
        double n = (double)l->t[i].numel;
        if (strstr(nm, "modulation") || strncmp(nm, "time_", 5) == 0) continue; /* per sample */
        if (strstr(nm, "cross_attn.k.") || strstr(nm, "cross_attn.v.") || strncmp(nm, "text_", 5) == 0) *n_txt += n;
        else *n_tok += n;
    }
}

/* One line per phase of the op-by-op step: its time, its share of the span from the
 * first op to the last, its op count; idle = the span less the ops. */
static void print_phases(const vf_phase_times *t)
{
    double sum = 0;
    printf("phases of one step, op by op (%.1f ms from the first op to the last):\n", t->total_ms);
    for (int i = 0; i < VF_PHASE_N; i++) {
        sum += t->ms[i];
        if (t->calls[i])
            printf("  %-12s %9.1f ms %5.1f%%  (%lld ops)\n", vf_phase_name((vf_phase)i), t->ms[i],
                   t->total_ms > 0 ? 100 * t->ms[i] / t->total_ms : 0, (long long)t->calls[i]);
    }
    printf("  %-12s %9.1f ms %5.1f%%\n", "idle", t->total_ms - sum,
           t->total_ms > 0 ? 100 * (t->total_ms - sum) / t->total_ms : 0);
}

static int step_bench(int argc, char **argv, vf_backend *be)
{
    vf_status st = {0};
    vf_dit_config c;
    if (vf_dit_preset(arg(argc, argv, "preset", "wan-1.3b"), &c, &st)) DIE("%s", st.msg);
    vf_dit_dims d = vf_dit_dims_of(&c, IARG("B", "1"), IARG("T", "13"), IARG("H", "48"), IARG("W", "84"));
    const bool recompute = IARG("recompute", "1") != 0, phases = IARG("phases", "1") != 0;
    const int steps = IARG("steps", "8"), warmup = IARG("warmup", "2");
    vf_dit_layout *l = NULL;
    if (vf_dit_layout_new(&c, &l, &st)) DIE("%s", st.msg);
    /* the model runs on the timer's table: off, it costs a branch per op */
    vf_phases *ph = NULL;
    if (vf_phases_new(be, &ph, &st)) DIE("%s", st.msg);
    vf_backend *const dev = be; /* the CUDA context, for the peak figure */
    (void)dev;
    be = vf_phases_backend(ph);
    const int64_t P = l->total, L = d.L, nlat = (int64_t)d.B * c.z * d.T * d.H * d.W;
    /* weights, grads, optimizer state on the GPU */
    const size_t as = vf_dtype_size(be->act_dtype), gs = vf_dtype_size(be->grad_dtype);
    void *w = be->alloc(be, (size_t)P * as, &st), *g = be->alloc(be, (size_t)P * gs, &st);
    float *master = be->alloc(be, (size_t)P * 4, &st), *m = be->alloc(be, (size_t)P * 4, &st);
    float *v = be->alloc(be, (size_t)P * 4, &st);
    void *xt = be->alloc(be, (size_t)nlat * as, &st), *tg = be->alloc(be, (size_t)nlat * as, &st);
    if (!w || !g || !master || !m || !v || !xt || !tg) DIE("alloc: %s", st.msg);
    {
        float *h = init_params(l, 1, P);
        float *noise = randn(P, 2, 0.02f); /* the head starts at 0: give every block a gradient */
        if (!h || !noise) DIE("host memory for %lld parameters", (long long)P);
        for (int64_t i = 0; i < P; i++) h[i] += noise[i];
        be->upload(be, w, h, P, be->act_dtype);
        be->upload(be, master, h, P, VF_DTYPE_F32);
        be->memset0(be, m, (size_t)P * 4);
        be->memset0(be, v, (size_t)P * 4);
        free(noise);
        free(h);
        float *x = randn(nlat, 3, 1.0f), *y = randn(nlat, 4, 1.0f);
        be->upload(be, xt, x, nlat, be->act_dtype);
        be->upload(be, tg, y, nlat, be->act_dtype);
        free(x), free(y);
    }
    float *t = malloc(sizeof(float) * (size_t)d.B);
    int32_t *text = malloc(sizeof(int32_t) * (size_t)(d.B * c.text_len)), *tl = malloc(sizeof(int32_t) * (size_t)d.B);
    for (int i = 0; i < d.B; i++) {
        t[i] = 0.3f + 0.1f * (float)i;
        tl[i] = c.text_len * 3 / 4;
        for (int j = 0; j < c.text_len; j++) text[i * c.text_len + j] = 'a' + (i + j) % 26;
    }
    /* the Wan presets condition on umT5 embeddings (B, text_len, text_dim), as the model
     * takes them from the cache; the byte presets on caption bytes */
    float *emb = c.text_emb ? randn((int64_t)d.B * c.text_len * c.text_dim, 5, 1.0f) : NULL;
    vf_dit_batch b = {.dims = d, .x_t = xt, .t = t, .text = text, .text_emb = emb, .text_len = tl, .target = tg};
    vf_dit_part *p = NULL;
    vf_dit_saved *sv = NULL;
    if (vf_dit_part_new(be, l, 0, c.depth, &d, recompute, w, g, &p, &st) || vf_dit_saved_new(p, &sv, &st))
        DIE("partition: %s", st.msg);
    double *times = malloc(sizeof(double) * (size_t)(steps + warmup + 1)), loss = 0;
    vf_phase_times pt = {0};
    for (int s = 0; s < steps + warmup + phases; s++) {
        const bool timed = s == steps + warmup; /* the extra step, op by op */
        vf_phases_enable(ph, timed);
        double t0 = now_s();
        be->memset0(be, g, (size_t)P * gs);
        if (vf_dit_part_forward(p, &b, NULL, NULL, sv, &st) || vf_dit_part_loss(p, &b, sv, 1.0f, &loss, &st) ||
            vf_dit_part_backward(p, &b, sv, NULL, &st))
            DIE("step: %s", st.msg);
        be->adamw(be, master, m, v, g, w, P, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, s + 1);
        if (be->sync(be, &st)) DIE("step: %s", st.msg);
        times[s] = now_s() - t0;
        fprintf(stderr, "step %d: %.1f ms, loss %.4f%s\n", s, times[s] * 1e3, loss, timed ? " (op by op)" : "");
        if (timed && vf_phases_read(ph, &pt, &st)) DIE("phases: %s", st.msg);
    }
    qsort(times + warmup, (size_t)steps, sizeof *times, cmp_d);
    const double ts = times[warmup + steps / 2];
    double n_tok, n_txt;
    param_split(l, &n_tok, &n_txt);
    const double S = (double)L, St = c.text_len, Ly = c.depth, dm = c.dim;
    const double flops = d.B * (6 * n_tok * S + 6 * n_txt * St + 12 * Ly * dm * S * S + 12 * Ly * dm * S * St);
    double peak = 0;
#ifdef VFLOW_HAVE_CUDA
    vf_cuda_ctx *cc = dev->device.kind == VF_DEV_CUDA ? vf_cuda_ctx_of(dev) : NULL;
    if (dev->device.kind == VF_DEV_CUDA)
        peak = (double)vf_cuda_pool_reserved(cc->device) + (double)(VF_CUDA_LT_WS_BYTES + cc->scratch_bytes);
#endif
    printf("vflow dit step: %s B=%d tokens=%lld params=%.3fB recompute=%d: %.1f ms, %.0f tokens/s, MFU %.1f%%, "
           "peak %.2f GiB\n",
           arg(argc, argv, "preset", "wan-1.3b"), d.B, (long long)L, (double)P / 1e9, (int)recompute, ts * 1e3, d.B * S / ts,
           100 * flops / ts / 989e12, peak / 1073741824.0);
    char phj[1024] = "";
    if (phases) {
        print_phases(&pt);
        int k = snprintf(phj, sizeof phj, ",\"phases_ms\":");
        vf_phase_times_json(&pt, phj + k, sizeof phj - (size_t)k);
    }
    const char *aj = attn_report(be);
    printf("{\"bench\":\"dit_step\",\"step_ms\":%.3f,\"tokens_per_s\":%.1f,\"tflops\":%.1f,\"mfu\":%.4f,"
           "\"peak_bytes\":%.0f,\"tokens\":%lld,\"loss\":%.5f%s,%s}\n",
           ts * 1e3, d.B * S / ts, flops / ts / 1e12, flops / ts / 989e12, peak, (long long)L, loss, phj, aj);
    vf_dit_saved_free(sv);
    vf_dit_part_free(p);
    vf_dit_layout_free(l);
    vf_phases_free(ph);
    return 0;
}

static int attn_bench(int argc, char **argv, vf_backend *be)
{
    vf_status st = {0};
    const int64_t B = IARG("B", "1"), L = IARG("L", "13104"), Lk = atoi(arg(argc, argv, "Lk", arg(argc, argv, "L", "13104")));
    const int64_t H = IARG("H", "12"), D = IARG("D", "128");
    const int iters = IARG("iters", "20");
    const int64_t nq = B * L * H * D, nk = B * Lk * H * D;
    const size_t es = vf_dtype_size(be->act_dtype);
    void *q = be->alloc(be, (size_t)nq * es, &st), *k = be->alloc(be, (size_t)nk * es, &st);
    void *v = be->alloc(be, (size_t)nk * es, &st), *o = be->alloc(be, (size_t)nq * es, &st);
    void *go = be->alloc(be, (size_t)nq * es, &st), *gq = be->alloc(be, (size_t)nq * es, &st);
    void *gk = be->alloc(be, (size_t)nk * es, &st), *gv = be->alloc(be, (size_t)nk * es, &st);
    float *lse = be->alloc(be, sizeof(float) * (size_t)(B * H * L), &st);
    if (!q || !k || !v || !o || !go || !gq || !gk || !gv || !lse) DIE("alloc: %s", st.msg);
    float *h = randn(nq > nk ? nq : nk, 5, 1.0f);
    be->upload(be, q, h, nq, be->act_dtype), be->upload(be, go, h, nq, be->act_dtype);
    be->upload(be, k, h, nk, be->act_dtype), be->upload(be, v, h, nk, be->act_dtype);
    be->memset0(be, gq, (size_t)nq * es), be->memset0(be, gk, (size_t)nk * es), be->memset0(be, gv, (size_t)nk * es);
    free(h);
    const float scale = 1.0f / sqrtf((float)D);
    double tf = 0, tb = 0;
    for (int pass = 0; pass < 2; pass++) { /* pass 0 warms up */
        double t0 = now_s();
        for (int i = 0; i < iters; i++) be->attention_fwd(be, o, lse, q, k, v, B, L, Lk, H, D, scale);
        if (be->sync(be, &st)) DIE("%s", st.msg);
        double t1 = now_s();
        for (int i = 0; i < iters; i++)
            be->attention_bwd(be, gq, gk, gv, go, q, k, v, o, lse, B, L, Lk, H, D, scale);
        if (be->sync(be, &st)) DIE("%s", st.msg);
        tf = (t1 - t0) / iters;
        tb = (now_s() - t1) / iters;
    }
    const double ff = 4.0 * B * H * (double)L * Lk * D, fb = 2.5 * ff;
    printf("vflow attention B=%lld Lq=%lld Lk=%lld H=%lld D=%lld: fwd %.3f ms %.0f TF/s, bwd %.3f ms %.0f TF/s, "
           "fwd+bwd %.0f TF/s\n",
           (long long)B, (long long)L, (long long)Lk, (long long)H, (long long)D, tf * 1e3, ff / tf / 1e12, tb * 1e3,
           fb / tb / 1e12, (ff + fb) / (tf + tb) / 1e12);
    const char *aj = attn_report(be);
    printf("{\"bench\":\"attention\",\"lq\":%lld,\"lk\":%lld,\"heads\":%lld,\"head_dim\":%lld,\"fwd_ms\":%.4f,"
           "\"bwd_ms\":%.4f,\"fwd_tflops\":%.1f,\"fwdbwd_tflops\":%.1f,%s}\n",
           (long long)L, (long long)Lk, (long long)H, (long long)D, tf * 1e3, tb * 1e3, ff / tf / 1e12,
           (ff + fb) / (tf + tb) / 1e12, aj);
    return 0;
}

/* Median time of `steps` LoRA steps of partition p (after `warmup`); the adapters'
 * gradients are zeroed each step, the optimizer is left out (it does not touch the base). */
static int lora_steps(vf_backend *be, vf_dit_part *p, vf_dit_saved *sv, const vf_dit_batch *b, void *lg, size_t lgb,
                      int steps, int warmup, double *median, vf_status *st)
{
    double *times = malloc(sizeof(double) * (size_t)(steps + warmup)), loss;
    for (int s = 0; s < steps + warmup; s++) {
        double t0 = now_s();
        be->memset0(be, lg, lgb);
        if (vf_dit_part_forward(p, b, NULL, NULL, sv, st) || vf_dit_part_loss(p, b, sv, 1.0f, &loss, st) ||
            vf_dit_part_backward(p, b, sv, NULL, st) || be->sync(be, st)) {
            free(times);
            return -1;
        }
        times[s] = now_s() - t0;
        fprintf(stderr, "step %d: %.1f ms, loss %.4f\n", s, times[s] * 1e3, loss);
    }
    qsort(times + warmup, (size_t)steps, sizeof *times, cmp_d);
    *median = times[warmup + steps / 2];
    free(times);
    return 0;
}

static int swap_bench(int argc, char **argv, vf_backend *be)
{
    vf_status st = {0};
    vf_dit_config c;
    if (vf_dit_preset(arg(argc, argv, "preset", "wan-1.3b"), &c, &st)) DIE("%s", st.msg);
    const vf_dit_dims d = vf_dit_dims_of(&c, IARG("B", "1"), IARG("T", "13"), IARG("H", "48"), IARG("W", "84"));
    const int K = IARG("K", "0") > 0 ? IARG("K", "0") : c.depth - 4, steps = IARG("steps", "4");
    const int warmup = IARG("warmup", "1");
    vf_dit_layout *l = NULL;
    vf_dit_lora *lo = NULL;
    if (vf_dit_layout_new(&c, &l, &st)) DIE("%s", st.msg);
    vf_dit_lora_cfg lc = {.rank = IARG("rank", "32"), .alpha = IARG("rank", "32"), .ntargets = 1};
    snprintf(lc.targets[0], sizeof lc.targets[0], "*");
    if (vf_dit_lora_new(l, &lc, &lo, &st)) DIE("%s", st.msg);
    const size_t as = vf_dtype_size(be->act_dtype), gs = vf_dtype_size(be->grad_dtype);
    const int64_t P = l->total, LT = lo->l->total, nlat = (int64_t)d.B * c.z * d.T * d.H * d.W;
    int64_t hole, hole_n, blk_n;
    vf_dit_swap_split(l, 0, c.depth, K, &hole, &hole_n, &blk_n);
    void *w = be->alloc(be, (size_t)P * as, &st), *wr = be->alloc(be, (size_t)(P - hole_n) * as, &st);
    void *host = be->alloc_pinned(be, (size_t)hole_n * as, &st);
    void *lp = be->alloc(be, (size_t)LT * as, &st), *lg = be->alloc(be, (size_t)LT * gs, &st);
    void *xt = be->alloc(be, (size_t)nlat * as, &st), *tg = be->alloc(be, (size_t)nlat * as, &st);
    if (!w || !wr || !host || !lp || !lg || !xt || !tg) DIE("alloc: %s", st.msg);
    {
        float *h = randn(P, 1, 0.02f), *a = randn(LT, 6, 0.01f);
        be->upload(be, w, h, P, be->act_dtype);
        be->upload(be, wr, h, hole, be->act_dtype);
        be->upload(be, (char *)wr + (size_t)hole * as, h + hole + hole_n, P - hole - hole_n, be->act_dtype);
        vf_backend_cpu()->upload(vf_backend_cpu(), host, h + hole, hole_n, be->act_dtype);
        be->upload(be, lp, a, LT, be->act_dtype);
        float *x = randn(nlat, 3, 1.0f), *y = randn(nlat, 4, 1.0f);
        be->upload(be, xt, x, nlat, be->act_dtype);
        be->upload(be, tg, y, nlat, be->act_dtype);
        free(h), free(a), free(x), free(y);
    }
    float t[8];
    int32_t tl[8], *text = malloc(sizeof(int32_t) * (size_t)(d.B * c.text_len));
    for (int i = 0; i < d.B && i < 8; i++) {
        t[i] = 0.3f + 0.1f * (float)i, tl[i] = c.text_len * 3 / 4;
        for (int j = 0; j < c.text_len; j++) text[i * c.text_len + j] = 'a' + (i + j) % 26;
    }
    float *emb = c.text_emb ? randn((int64_t)d.B * c.text_len * c.text_dim, 5, 1.0f) : NULL;
    vf_dit_batch b = {.dims = d, .x_t = xt, .t = t, .text = text, .text_emb = emb, .text_len = tl, .target = tg};
    double ms[3];
    /* 0: the whole base resident, 1: K blocks swapped, 2: the base resident and the block
     * inputs offloaded to pinned host memory (vf_dit_part_set_offload) */
    static const char *const mode_name[] = {"resident", "swapped", "offloaded"};
    for (int mode = 0; mode < 3; mode++) {
        vf_dit_part *p = NULL;
        vf_dit_saved *sv = NULL;
        if (vf_dit_part_new(be, l, 0, c.depth, &d, 1, mode == 1 ? wr : w, NULL, &p, &st) ||
            vf_dit_part_set_lora(p, lo, lp, lg, &st) || (mode == 1 && vf_dit_part_set_swap(p, K, host, &st)) ||
            (mode == 2 && vf_dit_part_set_offload(p, &st)) || vf_dit_saved_new(p, &sv, &st) ||
            lora_steps(be, p, sv, &b, lg, (size_t)LT * gs, steps, warmup, &ms[mode], &st))
            DIE("swap bench, %s: %s", mode_name[mode], st.msg);
        vf_dit_saved_free(sv);
        vf_dit_part_free(p);
    }
    /* the copies alone: a forward's and a backward's K blocks through two buffers */
    void *q = be->swap_new(be, 2, &st), *ring[2] = {be->alloc(be, (size_t)blk_n * as, &st), NULL};
    ring[1] = ring[0] ? be->alloc(be, (size_t)blk_n * as, &st) : NULL;
    if (!q || !ring[1]) DIE("copy queue: %s", st.msg);
    double t0 = now_s();
    for (int j = 0; j < 2 * K; j++) {
        be->swap_in(be, q, j % 2, ring[j % 2], (char *)host + (size_t)(j % K) * blk_n * as, (size_t)blk_n * as);
        be->swap_wait(be, q, j % 2);
    }
    if (be->sync(be, &st)) DIE("copies: %s", st.msg);
    const double copy = now_s() - t0;
    be->swap_free(be, q);
    be->free(be, ring[0]), be->free(be, ring[1]);
    double hidden = 1.0 - (ms[1] - ms[0]) / copy;
    hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
    printf("vflow block swap: %s K=%d of %d blocks (%.1f MiB each), recompute, LoRA rank %d: resident %.1f ms, "
           "swapped %.1f ms (ratio %.3f); copies alone %.1f ms a step, %.0f %% hidden; activations offloaded "
           "%.1f ms (ratio %.3f)\n",
           arg(argc, argv, "preset", "wan-1.3b"), K, c.depth, (double)blk_n * (double)as / 1048576.0, lc.rank,
           ms[0] * 1e3, ms[1] * 1e3, ms[1] / ms[0], copy * 1e3, 100 * hidden, ms[2] * 1e3, ms[2] / ms[0]);
    printf("{\"bench\":\"swap\",\"K\":%d,\"depth\":%d,\"resident_ms\":%.3f,\"swap_ms\":%.3f,\"ratio\":%.4f,"
           "\"copy_ms\":%.3f,\"hidden\":%.4f,\"offload_ms\":%.3f,\"offload_ratio\":%.4f}\n", K, c.depth,
           ms[0] * 1e3, ms[1] * 1e3, ms[1] / ms[0], copy * 1e3, hidden, ms[2] * 1e3, ms[2] / ms[0]);
    free(text), free(emb);
    void *bufs[] = {w, wr, lp, lg, xt, tg};
    for (int i = 0; i < 6; i++) be->free(be, bufs[i]);
    be->free_pinned(be, host);
    vf_dit_lora_free(lo);
    vf_dit_layout_free(l);
    return 0;
}

int main(int argc, char **argv)
{
    vf_status st = {0};
    if (argc < 2 || (strcmp(argv[1], "step") && strcmp(argv[1], "attn") && strcmp(argv[1], "swap"))) {
        fprintf(stderr, "usage: bench_cuda_dit step|attn|swap [key=value ...]\n");
        return 2;
    }
    /* device=cpu runs the same code on the CPU backend (a check of the harness, with a
     * small preset: the CPU is no competitor here) */
    vf_device dev;
    if (vf_device_parse(arg(argc, argv, "device", "cuda:0"), &dev, &st)) DIE("%s", st.msg);
    vf_backend *be = vf_backend_for(dev, &st);
    if (!be) {
        printf("skip: %s\n", st.msg);
        return 77;
    }
    const char *attn = arg(argc, argv, "attn", NULL);
    if (attn && be->device.kind == VF_DEV_CUDA) {
#ifdef VFLOW_HAVE_CUDA
        if (vf_cuda_attn_use(attn, &st)) DIE("attn=%s: %s", attn, st.msg);
#endif
    }
    if (strcmp(argv[1], "swap") == 0) return swap_bench(argc, argv, be);
    return strcmp(argv[1], "step") == 0 ? step_bench(argc, argv, be) : attn_bench(argc, argv, be);
}
