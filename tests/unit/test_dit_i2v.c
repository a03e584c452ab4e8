/* test_dit_i2v.c — the image-to-video DiT (Wan 2.1 I2V, Wan 2.2 I2V-A14B) on the CPU
 * backend.
 *
 *  - layout: in_dim input channels of patch_embedding, img_emb.proj.{0,1,3,4} and per block
 *    cross_attn.{k_img,v_img,norm_k_img}, only where the config has them (a text-to-video
 *    config keeps its tensors and offsets); the config checks;
 *  - whole-model central differences on the new tensors (img_emb, k_img, v_img, norm_k_img,
 *    patch_embedding's conditioning channels) and on the old ones they feed;
 *  - partitions and recompute bitwise equal to one partition, as for text-to-video;
 *  - the conditioning channels and the image features reach the prediction, and a batch
 *    without them is refused naming what is missing;
 *  - LoRA targets the image branch only where the model has it;
 *  - a text-to-video checkpoint for an image-to-video model is bad input naming the file,
 *    the tensor and both shapes.
 * Parity of the values with diffusers' WanTransformer3DModel(image_dim=…) is
 * tests/reference/test_wan_i2v_diffusers.py.
 */
#include "tests/vf_test.h"
#include "tests/unit/dit_testlib.h"

#include "models/dit.h"
#include "models/dit_lora.h"
#include "models/dit_weights.h"

#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

/* Wan 2.1 I2V in small: 5 conditioning channels after z = 4, 6 image rows of width 12. */
static vf_dit_config i2v_cfg(void)
{
    vf_dit_config c = small_cfg();
    c.depth = 2;
    c.text_emb = 1;
    c.in_dim = 9;
    c.img_dim = 12;
    c.img_len = 6;
    return c;
}

VF_TEST(i2v_layout)
{
    vf_status st = {0};
    vf_dit_config c = i2v_cfg(), t2v = small_cfg(), a14b = c;
    t2v.depth = 2, t2v.text_emb = 1;
    a14b.img_dim = 0, a14b.img_len = 0;
    vf_dit_layout *l = NULL, *lt = NULL, *la = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    VF_CHECK(vf_dit_layout_new(&t2v, &lt, &st) == 0);
    VF_CHECK(vf_dit_layout_new(&a14b, &la, &st) == 0);
    VF_CHECK_EQ_INT(l->total, vf_dit_param_count(&c));
    int k = vf_dit_layout_find(l, "patch_embedding.weight");
    VF_CHECK(k == 0 && l->t[k].shape[1] == 9 && la->t[k].shape[1] == 9 && lt->t[k].shape[1] == 4);
    static const struct { const char *name; int ndim; int64_t s0, s1; } want[] = {
        {"img_emb.proj.0.weight", 1, 12, 0}, {"img_emb.proj.0.bias", 1, 12, 0},
        {"img_emb.proj.1.weight", 2, 12, 12}, {"img_emb.proj.1.bias", 1, 12, 0},
        {"img_emb.proj.3.weight", 2, 32, 12}, {"img_emb.proj.3.bias", 1, 32, 0},
        {"img_emb.proj.4.weight", 1, 32, 0}, {"img_emb.proj.4.bias", 1, 32, 0},
        {"blocks.1.cross_attn.k_img.weight", 2, 32, 32}, {"blocks.1.cross_attn.k_img.bias", 1, 32, 0},
        {"blocks.0.cross_attn.v_img.weight", 2, 32, 32}, {"blocks.0.cross_attn.v_img.bias", 1, 32, 0},
        {"blocks.1.cross_attn.norm_k_img.weight", 1, 32, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int j = vf_dit_layout_find(l, want[i].name);
        VF_CHECK_MSG(j >= 0 && l->t[j].ndim == want[i].ndim && l->t[j].shape[0] == want[i].s0 &&
                         (want[i].ndim == 1 || l->t[j].shape[1] == want[i].s1),
                     "%s", want[i].name);
        VF_CHECK_MSG(vf_dit_layout_find(lt, want[i].name) < 0 && vf_dit_layout_find(la, want[i].name) < 0,
                     "%s in a model without an image branch", want[i].name);
    }
    /* the same indices in all three; the image branch and the channels are all that differ */
    VF_CHECK(l->n == lt->n && la->n == lt->n);
    VF_CHECK_EQ_INT(vf_dit_layout_count(l) - vf_dit_layout_count(lt), 8 + 5 * 2);
    VF_CHECK_EQ_INT(la->total - lt->total, 32LL * 5 * 4);
    VF_CHECK_EQ_INT(l->total - la->total, 2 * 12 + 12 * 12 + 12 + 32 * 12 + 32 + 2 * 32 +
                                              2 * (2 * (32 * 32 + 32) + 32));
    /* a text-to-video config: every image-branch entry empty, at the offset it would start */
    for (int i = 0; i < lt->n; i++)
        if (lt->t[i].numel == 0) VF_CHECK(lt->t[i].name[0] == 0 && lt->t[i].offset <= lt->total);
    /* init: LayerNorm and RMSNorm gains 1, the linears xavier */
    float *p = malloc(sizeof(float) * (size_t)l->total);
    vf_dit_init(l, 3, 0, l->total, p);
    const vf_dit_tensor *g0 = &l->t[vf_dit_layout_find(l, "img_emb.proj.4.weight")];
    const vf_dit_tensor *nk = &l->t[vf_dit_layout_find(l, "blocks.0.cross_attn.norm_k_img.weight")];
    const vf_dit_tensor *kw = &l->t[vf_dit_layout_find(l, "blocks.0.cross_attn.k_img.weight")];
    for (int64_t i = 0; i < g0->numel; i++) VF_CHECK(p[g0->offset + i] == 1.0f && p[nk->offset + i] == 1.0f);
    double mx = 0;
    for (int64_t i = 0; i < kw->numel; i++) mx = fmax(mx, fabs(p[kw->offset + i]));
    VF_CHECK(mx <= sqrt(6.0 / 64) && mx > 0.8 * sqrt(6.0 / 64));
    free(p);
    char s[256];
    vf_dit_config_str(&c, s, sizeof s);
    VF_CHECK(strstr(s, " in_dim=9 img_dim=12 img_len=6") != NULL);
    vf_dit_config_str(&t2v, s, sizeof s);
    VF_CHECK(strstr(s, "in_dim") == NULL);
    /* config checks */
    vf_dit_config bad = c;
    bad.in_dim = 3;
    vf_status_clear(&st);
    VF_CHECK(vf_dit_config_check(&bad, &st) == VF_EINVAL && strstr(st.msg, "in_dim"));
    bad = c, bad.img_len = 0;
    vf_status_clear(&st);
    VF_CHECK(vf_dit_config_check(&bad, &st) == VF_EINVAL && strstr(st.msg, "img_len"));
    bad = c, bad.text_emb = 0;
    vf_status_clear(&st);
    VF_CHECK(vf_dit_config_check(&bad, &st) == VF_EINVAL && strstr(st.msg, "text = embeddings"));
    bad = t2v, bad.img_len = 4;
    vf_status_clear(&st);
    VF_CHECK(vf_dit_config_check(&bad, &st) == VF_EINVAL && strstr(st.msg, "img_len"));
    vf_dit_layout_free(l);
    vf_dit_layout_free(lt);
    vf_dit_layout_free(la);
}

/* The element of tensor `name` with the largest gradient; for patch_embedding only among
 * the conditioning channels (channel ≥ z of the (dim, in_dim, pt, ph, pw) kernel). */
static int64_t largest_grad(const vf_dit_layout *l, const float *g, const char *name)
{
    const vf_dit_tensor *t = &l->t[vf_dit_layout_find(l, name)];
    const vf_dit_config *c = &l->cfg;
    const int64_t P = (int64_t)c->patch[0] * c->patch[1] * c->patch[2];
    const bool cond = strcmp(name, "patch_embedding.weight") == 0;
    int64_t best = -1;
    for (int64_t i = t->offset; i < t->offset + t->numel; i++) {
        if (cond && ((i - t->offset) / P) % vf_dit_in_dim(c) < c->z) continue;
        if (best < 0 || fabs(g[i]) > fabs(g[best])) best = i;
    }
    return best;
}

VF_TEST(i2v_gradient_matches_finite_differences)
{
    vf_status st = {0};
    vf_dit_config c = i2v_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    float *params = random_params(l, 31);
    mb m;
    mb_make(&m, &c, vf_dit_dims_of(&c, 2, 2, 4, 4), 7, 0);
    float *g = calloc((size_t)l->total, 4);
    double loss;
    int one[2] = {0, 2};
    run_parts(l, one, 1, false, params, g, &m, 1, 1.0f, &loss);
    const char *names[] = {"patch_embedding.weight", "img_emb.proj.0.weight", "img_emb.proj.0.bias",
                           "img_emb.proj.1.weight", "img_emb.proj.1.bias", "img_emb.proj.3.weight",
                           "img_emb.proj.3.bias", "img_emb.proj.4.weight", "img_emb.proj.4.bias",
                           "blocks.0.cross_attn.k_img.weight", "blocks.0.cross_attn.k_img.bias",
                           "blocks.1.cross_attn.v_img.weight", "blocks.1.cross_attn.v_img.bias",
                           "blocks.1.cross_attn.norm_k_img.weight", "blocks.0.cross_attn.q.weight",
                           "blocks.1.cross_attn.norm_q.weight", "blocks.0.cross_attn.o.weight",
                           "text_embedding.0.weight", "blocks.1.self_attn.k.weight"};
    int ok = 1;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        int64_t best = largest_grad(l, g, names[k]);
        if (!(fd_rel_error(l, params, &m, best, g[best], names[k]) < 1e-3) || g[best] == 0.0f) ok = 0;
    }
    VF_CHECK(ok);
    free(g), free(params);
    mb_free(&m);
    vf_dit_layout_free(l);
}

VF_TEST(i2v_partitions_and_recompute_are_bitwise_equal)
{
    vf_status st = {0};
    vf_dit_config c = i2v_cfg();
    c.depth = 3;
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    float *params = random_params(l, 32);
    mb mbs[2];
    mb_make(&mbs[0], &c, vf_dit_dims_of(&c, 2, 2, 4, 6), 3, 0);
    mb_make(&mbs[1], &c, vf_dit_dims_of(&c, 1, 1, 4, 4), 3, 10);
    float *ref = calloc((size_t)l->total, 4);
    double ref_loss[2];
    const int splits[3][4] = {{0, 3}, {0, 1, 3}, {0, 1, 2, 3}};
    run_parts(l, splits[0], 1, false, params, ref, mbs, 2, 0.5f, ref_loss);
    const vf_dit_tensor *ie = &l->t[vf_dit_layout_find(l, "img_emb.proj.1.weight")];
    double gi = 0;
    for (int64_t i = 0; i < ie->numel; i++) gi += fabs(ref[ie->offset + i]);
    VF_CHECK(gi > 0 && isfinite(gi));
    check_splits_bitwise(l, params, mbs, splits, 3, ref, ref_loss);
    free(ref), free(params);
    mb_free(&mbs[0]), mb_free(&mbs[1]);
    vf_dit_layout_free(l);
}

VF_TEST(i2v_inputs_reach_the_prediction)
{
    vf_status st = {0};
    vf_dit_config c = i2v_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    float *params = random_params(l, 33);
    vf_dit_dims d = vf_dit_dims_of(&c, 2, 2, 4, 4);
    mb m;
    mb_make(&m, &c, d, 8, 0);
    size_t n = (size_t)c.z * 2 * 4 * 4 * 2;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    VF_CHECK_MSG(predict(l, params, &m.b, a, n, &st) == 0, "%s", st.msg);
    /* the last conditioning element of sample 1 (the second frame), and one image feature of
     * sample 0, each change sample's prediction and only that sample's */
    size_t per = n / 2, nc = (size_t)(c.in_dim - c.z) * 2 * 4 * 4;
    const float c0 = m.cond[2 * nc - 1];
    m.cond[2 * nc - 1] += 1.0f;
    VF_CHECK(predict(l, params, &m.b, b, n, &st) == 0);
    VF_CHECK(memcmp(a, b, per * 4) == 0 && memcmp(a + per, b + per, per * 4) != 0);
    m.cond[2 * nc - 1] = c0;
    m.img[5] += 1.0f;
    VF_CHECK(predict(l, params, &m.b, b, n, &st) == 0);
    VF_CHECK(memcmp(a, b, per * 4) != 0 && memcmp(a + per, b + per, per * 4) == 0);
    /* a batch without them */
    vf_dit_batch nb = m.b;
    nb.cond = NULL;
    vf_status_clear(&st);
    VF_CHECK(predict(l, params, &nb, b, n, &st) == VF_EINVAL && strstr(st.msg, "cond") && strstr(st.msg, "9"));
    nb = m.b, nb.img = NULL;
    vf_status_clear(&st);
    VF_CHECK(predict(l, params, &nb, b, n, &st) == VF_EINVAL && strstr(st.msg, "img") && strstr(st.msg, "12"));
    free(a), free(b), free(params);
    mb_free(&m);
    vf_dit_layout_free(l);
}

VF_TEST(i2v_lora_targets_the_image_branch)
{
    vf_status st = {0};
    vf_dit_config c = i2v_cfg(), t2v = c;
    t2v.in_dim = 0, t2v.img_dim = 0, t2v.img_len = 0;
    vf_dit_layout *l = NULL, *lt = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0 && vf_dit_layout_new(&t2v, &lt, &st) == 0);
    vf_dit_lora_cfg lc = {.rank = 2, .alpha = 2, .ntargets = 1};
    snprintf(lc.targets[0], sizeof lc.targets[0], "cross_attn.*");
    vf_dit_lora *lo = NULL;
    VF_CHECK(vf_dit_lora_new(l, &lc, &lo, &st) == 0);
    VF_CHECK_EQ_INT(lo->l->n, 2 * 6 * c.depth); /* q, k, v, o, k_img, v_img */
    char mod[64];
    int seen = 0;
    for (int i = 0; i < lo->l->n; i += 2) {
        vf_dit_lora_module(lo, i, mod, sizeof mod);
        seen += strcmp(mod, "blocks.1.cross_attn.k_img") == 0 || strcmp(mod, "blocks.0.cross_attn.v_img") == 0;
    }
    VF_CHECK_EQ_INT(seen, 2);
    VF_CHECK_STR(lo->l->t[vf_dit_layout_find(lo->l, "diffusion_model.blocks.0.cross_attn.k_img.lora_A.weight")].name,
                 "diffusion_model.blocks.0.cross_attn.k_img.lora_A.weight");
    vf_dit_lora_free(lo);
    /* the same pattern on a text-to-video model: its four */
    VF_CHECK(vf_dit_lora_new(lt, &lc, &lo, &st) == 0);
    VF_CHECK_EQ_INT(lo->l->n, 2 * 4 * c.depth);
    vf_dit_lora_free(lo);
    /* k_img alone: none there */
    snprintf(lc.targets[0], sizeof lc.targets[0], "cross_attn.k_img");
    VF_CHECK(vf_dit_lora_new(lt, &lc, &lo, &st) == VF_EUSAGE && strstr(st.msg, "cross_attn.k_img"));
    VF_CHECK(vf_dit_lora_new(l, &lc, &lo, &st) == 0 && lo->l->n == 2 * c.depth);
    vf_dit_lora_free(lo);
    vf_dit_layout_free(l);
    vf_dit_layout_free(lt);
}

/* A file of the model laid out by l, into path. */
static void save(const vf_dit_layout *l, uint64_t seed, const char *path)
{
    vf_status st = {0};
    float *p = random_params(l, seed);
    vf_st_writer *w = vf_st_writer_new(&st);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    VF_CHECK(fd >= 0 && w && vf_dit_st_add(w, l, p, 0, l->total, &st) == 0);
    VF_CHECK_MSG(vf_st_writer_write_fd(w, fd, path, 0, NULL, &st) == 0, "%s", st.msg);
    close(fd);
    vf_st_writer_free(w);
    free(p);
}

VF_TEST(i2v_weights_of_another_kind_are_bad_input)
{
    vf_status st = {0};
    vf_dit_config c = i2v_cfg(), t2v = c, a14b = c;
    t2v.in_dim = 0, t2v.img_dim = 0, t2v.img_len = 0;
    a14b.img_dim = 0, a14b.img_len = 0;
    vf_dit_layout *l = NULL, *lt = NULL, *la = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0 && vf_dit_layout_new(&t2v, &lt, &st) == 0 &&
             vf_dit_layout_new(&a14b, &la, &st) == 0);
    char dir[] = "/tmp/test_dit_i2v_XXXXXX", pt[128], pi[128], pa[128];
    VF_CHECK(mkdtemp(dir) != NULL);
    snprintf(pt, sizeof pt, "%s/t2v.safetensors", dir);
    snprintf(pi, sizeof pi, "%s/i2v.safetensors", dir);
    snprintf(pa, sizeof pa, "%s/a14b.safetensors", dir);
    save(lt, 1, pt);
    save(l, 2, pi);
    save(la, 3, pa);
    struct { const char *path; const vf_dit_layout *l; const char *words[4]; } cases[] = {
        {pt, l, {"t2v.safetensors", "patch_embedding.weight", "[32, 4, 1, 2, 2]", "[32, 9, 1, 2, 2]"}},
        {pi, lt, {"i2v.safetensors", "cross_attn.k_img", "I2V", NULL}},
        {pi, la, {"i2v.safetensors", "cross_attn.k_img", "I2V", NULL}},
        {pa, l, {"a14b.safetensors", "img_emb.proj.0.weight", "missing", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vf_dit_wsrc *w = NULL;
        vf_status_clear(&st);
        VF_CHECK(vf_dit_wsrc_open(cases[i].path, &w, &st) == 0);
        int rc = w ? vf_dit_wsrc_check(w, cases[i].l, &st) : -1;
        bool ok = rc == VF_EBADINPUT && !strchr(st.msg, '\n');
        for (int k = 0; k < 4 && cases[i].words[k]; k++) ok = ok && strstr(st.msg, cases[i].words[k]);
        VF_CHECK_MSG(ok, "case %zu: rc %d: %s", i, rc, st.msg);
        fprintf(stderr, "  case %zu: %s\n", i, st.msg);
        vf_dit_wsrc_close(w);
    }
    /* each loads into its own model, bit for bit */
    vf_dit_wsrc *w = NULL;
    float *got = malloc(sizeof(float) * (size_t)l->total), *want = random_params(l, 2);
    VF_CHECK(vf_dit_wsrc_open(pi, &w, &st) == 0 && vf_dit_wsrc_check(w, l, &st) == 0);
    VF_CHECK(vf_dit_wsrc_read(w, l, got, 0, l->total, &st) == 0);
    VF_CHECK(memcmp(got, want, sizeof(float) * (size_t)l->total) == 0);
    vf_dit_wsrc_close(w);
    free(got), free(want);
    unlink(pt), unlink(pi), unlink(pa), rmdir(dir);
    vf_dit_layout_free(l);
    vf_dit_layout_free(lt);
    vf_dit_layout_free(la);
}

int main(void) { return vf_test_main(); }
