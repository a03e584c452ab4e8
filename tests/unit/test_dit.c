/* test_dit.c — the DiT model (models/dit*.c) and the Philox RNG (runtime/core/philox.c) on the
 * CPU backend.
 *
 *  - Philox4x32-10 known answers (Random123 kat_vectors) and call-order independence;
 *  - layout: names, offsets, partition ranges, init of a range alone == slice of the whole;
 *  - memory figures == the bytes actually allocated;
 *  - P = 2 and 3 partitions over depth 4, without recompute and with both kinds (the
 *    self-attention kept or rerun), and two micro-batches
 *    of different geometry in flight at once: loss and every gradient bitwise equal to one
 *    partition without recompute;
 *  - two micro-batches (grad_scale 1/2) == one batch of both, to rounding (1e-5);
 *  - whole-model central differences (4-point, f64 arithmetic on the f32 model) on a
 *    dozen parameters;
 *  - the rectified-flow pair is a pure function of (seed, step, sample id).
 * The gradient values themselves are checked against PyTorch in
 * tests/reference/test_dit_parity.py.
 */
#include "tests/vf_test.h"
#include "tests/unit/dit_testlib.h"

#include "models/dit.h"
#include "models/dit_weights.h"
#include "runtime/core/params.h"
#include "runtime/philox.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <unistd.h>

/* ------------------------------------------------------------------ Philox */

VF_TEST(philox_known_answers)
{
    /* Random123 kat_vectors, philox4x32 10 rounds: ctr, key -> out */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        vf_philox4x32_10(kat[i], kat[i] + 4, out);
        for (int k = 0; k < 4; k++) VF_CHECK_EQ_INT(out[k], kat[i][6 + k]);
    }
}

VF_TEST(philox_streams_are_pure_functions)
{
    vf_rng r;
    vf_rng_init(&r, 42, 7, 1234567890123ull, VF_RNG_NOISE);
    float all[103], parts[103], u[103];
    vf_rng_normal(&r, 0, 103, all);
    /* pieces, in reverse order, from a copy of the stream */
    vf_rng r2 = r;
    vf_rng_normal(&r2, 50, 53, parts + 50);
    vf_rng_normal(&r2, 3, 47, parts + 3);
    vf_rng_normal(&r2, 0, 3, parts);
    VF_CHECK(memcmp(all, parts, sizeof all) == 0);
    for (int i = 0; i < 103; i += 17) VF_CHECK(all[i] == (float)vf_rng_normal_at(&r, (uint64_t)i));
    vf_rng_uniform(&r, 0, 103, u);
    for (int i = 0; i < 103; i++) VF_CHECK(u[i] > 0.0f && u[i] < 1.0f);
    /* every key component changes the numbers */
    uint32_t base[4], other[4];
    vf_rng_u32(&r, 0, 4, base);
    vf_rng v[4];
    vf_rng_init(&v[0], 43, 7, 1234567890123ull, VF_RNG_NOISE);
    vf_rng_init(&v[1], 42, 8, 1234567890123ull, VF_RNG_NOISE);
    vf_rng_init(&v[2], 42, 7, 1234567890124ull, VF_RNG_NOISE);
    vf_rng_init(&v[3], 42, 7, 1234567890123ull, VF_RNG_TIMESTEP);
    for (int i = 0; i < 4; i++) {
        vf_rng_u32(&v[i], 0, 4, other);
        VF_CHECK_MSG(memcmp(base, other, sizeof base) != 0, "variant %d", i);
    }
    /* moments of 40000 normals */
    double s = 0, s2 = 0;
    for (int i = 0; i < 40000; i++) {
        double x = vf_rng_normal_at(&r, (uint64_t)i);
        s += x, s2 += x * x;
    }
    VF_CHECK(fabs(s / 40000) < 0.02);
    VF_CHECK(fabs(s2 / 40000 - 1) < 0.03);
}

/* ------------------------------------------------------------------ layout */

VF_TEST(layout_names_offsets_ranges)
{
    vf_status st = {0};
    vf_dit_config c = small_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    VF_CHECK_EQ_INT(l->total, vf_dit_param_count(&c));
    int64_t off = 0;
    for (int i = 0; i < l->n; i++) {
        VF_CHECK_EQ_INT(l->t[i].offset, off);
        off += l->t[i].numel;
        if (l->t[i].numel > 0) VF_CHECK_EQ_INT(vf_dit_layout_find(l, l->t[i].name), i);
    }
    VF_CHECK_EQ_INT(off, l->total);
    int i = vf_dit_layout_find(l, "blocks.3.self_attn.q.weight");
    VF_CHECK(i > 0 && l->t[i].block == 3 && l->t[i].shape[0] == 32 && l->t[i].shape[1] == 32);
    i = vf_dit_layout_find(l, "patch_embedding.weight");
    VF_CHECK(i == 0 && l->t[i].ndim == 5 && l->t[i].shape[1] == 4 && l->t[i].shape[4] == 2);
    VF_CHECK(vf_dit_layout_find(l, "head.head.weight") == l->n - 2);
    VF_CHECK(vf_dit_layout_find(l, "blocks.4.norm3.weight") == -1);
    /* partitions tile the vector: [0,1) [1,3) [3,4) */
    int bounds[4] = {0, 1, 3, 4};
    int64_t end = 0;
    for (int p = 0; p < 3; p++) {
        int64_t o, n;
        vf_dit_layout_range(l, bounds[p], bounds[p + 1], &o, &n);
        VF_CHECK_EQ_INT(o, end);
        end = o + n;
        for (int k = 0; k < l->n; k++) { /* every tensor of these blocks lies inside */
            const vf_dit_tensor *t = &l->t[k];
            bool mine = (t->block >= bounds[p] && t->block < bounds[p + 1]) ||
                        (p == 0 && t->block == VF_DIT_EMBED) || (p == 2 && t->block == c.depth);
            bool inside = t->offset >= o && t->offset + t->numel <= o + n;
            VF_CHECK_MSG(mine == inside, "%s in partition %d", t->name, p);
        }
    }
    VF_CHECK_EQ_INT(end, l->total);

    /* init: a range alone == the slice of the whole; seeded; Wan's fixed values */
    float *all = malloc(sizeof(float) * (size_t)l->total);
    float *again = malloc(sizeof(float) * (size_t)l->total);
    vf_dit_init(l, 5, 0, l->total, all);
    int64_t o, n;
    vf_dit_layout_range(l, 1, 3, &o, &n);
    vf_dit_init(l, 5, o + 7, n - 7, again);
    VF_CHECK(memcmp(all + o + 7, again, sizeof(float) * (size_t)(n - 7)) == 0);
    vf_dit_init(l, 6, 0, l->total, again);
    VF_CHECK(memcmp(all, again, sizeof(float) * (size_t)l->total) != 0);
    const vf_dit_tensor *hw = &l->t[vf_dit_layout_find(l, "head.head.weight")];
    const vf_dit_tensor *nq = &l->t[vf_dit_layout_find(l, "blocks.2.self_attn.norm_q.weight")];
    const vf_dit_tensor *qw = &l->t[vf_dit_layout_find(l, "blocks.2.self_attn.q.weight")];
    double lim = sqrt(6.0 / 64), mx = 0;
    for (int64_t k = 0; k < hw->numel; k++) VF_CHECK(all[hw->offset + k] == 0.0f);
    for (int64_t k = 0; k < nq->numel; k++) VF_CHECK(all[nq->offset + k] == 1.0f);
    for (int64_t k = 0; k < qw->numel; k++) mx = fmax(mx, fabs(all[qw->offset + k]));
    VF_CHECK(mx <= lim && mx > 0.8 * lim); /* xavier-uniform bound */
    free(all);
    free(again);
    vf_dit_layout_free(l);
}

/* Text embeddings: no byte table (its index stays, empty), everything else as with bytes. */
VF_TEST(text_embeddings_layout)
{
    vf_status st = {0};
    vf_dit_config c = small_cfg(), ce = c;
    ce.text_emb = 1;
    vf_dit_layout *l = NULL, *le = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0 && vf_dit_layout_new(&ce, &le, &st) == 0);
    VF_CHECK_EQ_INT(le->n, l->n);
    VF_CHECK_EQ_INT(l->total - le->total, (int64_t)VF_DIT_VOCAB * c.text_dim);
    VF_CHECK_EQ_INT(le->total, vf_dit_param_count(&ce));
    VF_CHECK(vf_dit_layout_find(l, "text_tokens.weight") >= 0 && vf_dit_layout_find(le, "text_tokens.weight") == -1);
    VF_CHECK(vf_dit_layout_find(le, "") == -1);
    int k = vf_dit_layout_find(le, "text_embedding.0.weight");
    VF_CHECK(k > 0 && le->t[k].shape[1] == c.text_dim);
    char a[256], b[256];
    vf_dit_config_str(&c, a, sizeof a);
    vf_dit_config_str(&ce, b, sizeof b);
    VF_CHECK(!strstr(a, "text=") && strstr(b, " text=embeddings"));
    vf_dit_layout_free(l);
    vf_dit_layout_free(le);
}

/* Original -> diffusers names: the table of docs/TRAINING.md's weights section, as convert_wan_transformer_to_diffusers
 * renames them (the reference test checks every name against diffusers itself). */
VF_TEST(weight_names)
{
    static const char *const pairs[][2] = {
        {"patch_embedding.weight", "patch_embedding.weight"},
        {"time_embedding.0.weight", "condition_embedder.time_embedder.linear_1.weight"},
        {"text_embedding.2.bias", "condition_embedder.text_embedder.linear_2.bias"},
        {"time_projection.1.weight", "condition_embedder.time_proj.weight"},
        {"blocks.3.self_attn.o.weight", "blocks.3.attn1.to_out.0.weight"},
        {"blocks.3.cross_attn.k.bias", "blocks.3.attn2.to_k.bias"},
        {"blocks.11.self_attn.norm_q.weight", "blocks.11.attn1.norm_q.weight"},
        {"blocks.0.norm3.weight", "blocks.0.norm2.weight"},
        {"blocks.0.ffn.0.weight", "blocks.0.ffn.net.0.proj.weight"},
        {"blocks.0.ffn.2.bias", "blocks.0.ffn.net.2.bias"},
        {"blocks.2.cross_attn.k_img.weight", "blocks.2.attn2.add_k_proj.weight"},
        {"blocks.2.cross_attn.v_img.bias", "blocks.2.attn2.add_v_proj.bias"},
        {"blocks.2.cross_attn.norm_k_img.weight", "blocks.2.attn2.norm_added_k.weight"},
        {"img_emb.proj.0.weight", "condition_embedder.image_embedder.norm1.weight"},
        {"img_emb.proj.1.bias", "condition_embedder.image_embedder.ff.net.0.proj.bias"},
        {"img_emb.proj.3.weight", "condition_embedder.image_embedder.ff.net.2.weight"},
        {"img_emb.proj.4.bias", "condition_embedder.image_embedder.norm2.bias"},
        {"blocks.7.modulation", "blocks.7.scale_shift_table"},
        {"head.modulation", "scale_shift_table"},
        {"head.head.weight", "proj_out.weight"},
    };
    char out[256];
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        vf_dit_name_to(VF_DIT_NAMES_DIFFUSERS, pairs[i][0], out, sizeof out);
        VF_CHECK_STR(out, pairs[i][1]);
        vf_dit_name_to(VF_DIT_NAMES_ORIGINAL, pairs[i][0], out, sizeof out);
        VF_CHECK_STR(out, pairs[i][0]);
    }
    vf_dit_name_to(VF_DIT_NAMES_COMFYUI, "head.head.bias", out, sizeof out);
    VF_CHECK_STR(out, "model.diffusion_model.head.head.bias");
}

VF_TEST(presets_and_sizes)
{
    vf_status st = {0};
    vf_dit_config c;
    const char *names[] = {"tiny", "small", "dit-xl-2", "wan-1.3b", "wan-14b", "wan-i2v-14b",
                           "wan2.2-a14b", "wan2.2-i2v-a14b", "wan2.2-ti2v-5b"};
    for (int i = 0; i < 9; i++) {
        VF_CHECK(vf_dit_preset(names[i], &c, &st) == 0);
        VF_CHECK_MSG(vf_dit_config_check(&c, &st) == 0, "%s: %s", names[i], st.msg);
        vf_dit_dims d = vf_dit_dims_of(&c, 1, 21, 60, 104); /* 81 frames at 480x832 through Wan's VAE */
        vf_dit_mem m;
        vf_dit_part_memory(&c, 0, c.depth, &d, false, 2, 4, &m);
        fprintf(stderr, "  %-9s params %7.3f M  per-block activations at B=1, %lld tokens: "
                "%.2f GiB (recompute %.3f GiB)\n", names[i], vf_dit_param_count(&c) / 1e6,
                (long long)vf_dit_tokens(&c, &d),
                vf_dit_block_act_bytes(&c, 1, vf_dit_tokens(&c, &d), false, 2) / 1073741824.0,
                vf_dit_block_act_bytes(&c, 1, vf_dit_tokens(&c, &d), true, 2) / 1073741824.0);
    }
    /* Wan 2.1 T2V-1.3B's DiT minus its T5 projection width difference: the blocks alone
     * carry 30 · (4·1536² + 4·1536² + 2·1536·8960 + …) parameters */
    VF_CHECK(vf_dit_preset("wan-1.3b", &c, &st) == 0);
    int64_t n = vf_dit_param_count(&c);
    VF_CHECK(n > 1.3e9 && n < 1.5e9);
    VF_CHECK(vf_dit_preset("wan-14b", &c, &st) == 0);
    n = vf_dit_param_count(&c);
    VF_CHECK(n > 13e9 && n < 15e9);
    /* the image-to-video presets add, counted by hand from Wan 2.1's WanModel: 20 more
     * input channels of patch_embedding (5120 × 20 × 1·2·2); A14B nothing else; I2V-14B
     * also img_emb (LN 1280, Linear 1280→1280, Linear 1280→5120, LN 5120) and per block
     * k_img, v_img (5120² + 5120 each) and norm_k_img (5120) */
    /* a Wan 2.2 T2V-A14B expert is Wan 2.1 T2V 14B's shape, parameter for parameter */
    VF_CHECK(vf_dit_preset("wan2.2-a14b", &c, &st) == 0);
    VF_CHECK(vf_dit_param_count(&c) == n);
    const int64_t patch20 = 5120LL * 20 * 4;
    VF_CHECK(vf_dit_preset("wan2.2-i2v-a14b", &c, &st) == 0);
    VF_CHECK(vf_dit_param_count(&c) == n + patch20);
    VF_CHECK(vf_dit_preset("wan-i2v-14b", &c, &st) == 0);
    const int64_t img_emb = 2 * 1280 + (1280LL * 1280 + 1280) + (1280LL * 5120 + 5120) + 2 * 5120;
    const int64_t kv_img = 40 * (2 * (5120LL * 5120 + 5120) + 5120);
    VF_CHECK(vf_dit_param_count(&c) == n + patch20 + img_emb + kv_img);
    /* Wan 2.2 TI2V-5B: about 5.0e9 parameters (the published model's size) */
    VF_CHECK(vf_dit_preset("wan2.2-ti2v-5b", &c, &st) == 0);
    VF_CHECK(vf_dit_param_count(&c) > 4.9e9 && vf_dit_param_count(&c) < 5.1e9);
    VF_CHECK(vf_dit_preset("nope", &c, &st) == VF_ENOTFOUND);
    c.heads = 5;
    vf_status st2 = {0};
    VF_CHECK(vf_dit_config_check(&c, &st2) == VF_EINVAL && strstr(st2.msg, "heads"));
}

/* lua/model_dit.lua (what pipelines use) and vf_dit_preset (tools, tests) agree. */
VF_TEST(lua_presets_match_c_presets)
{
    const char *src = getenv("VFLOW_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/lua/model_dit.lua", src ? src : "..");
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    int rc = luaL_dofile(L, path);
    VF_CHECK_MSG(rc == LUA_OK && lua_istable(L, -1), "%s: %s", path,
                 rc == LUA_OK ? "not a table" : lua_tostring(L, -1));
    int n = 0;
    if (rc == LUA_OK && lua_istable(L, -1)) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            const char *name = lua_tostring(L, -2);
            vf_dit_config c;
            vf_status st = {0};
            VF_CHECK_MSG(vf_dit_preset(name, &c, &st) == 0, "preset %s missing in C", name);
            struct { const char *k; double v; } f[] = {
                {"dim", c.dim}, {"depth", c.depth}, {"heads", c.heads}, {"head_dim", c.head_dim},
                {"ffn", c.ffn}, {"z", c.z}, {"text_dim", c.text_dim}, {"text_len", c.text_len},
                {"freq_dim", c.freq_dim}, {"t_scale", c.t_scale}, {"eps", c.eps},
                {"in_dim", c.in_dim}, {"img_dim", c.img_dim}, {"img_len", c.img_len}};
            for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
                lua_getfield(L, -1, f[i].k);
                double v = lua_tonumber(L, -1);
                VF_CHECK_MSG(fabs(v - f[i].v) <= 1e-6 * fabs(v), "%s.%s: lua %g, C %g", name,
                             f[i].k, v, f[i].v);
                lua_pop(L, 1);
            }
            lua_getfield(L, -1, "text");
            const char *tm = lua_tostring(L, -1);
            VF_CHECK_MSG((tm && strcmp(tm, "embeddings") == 0) == (c.text_emb == 1),
                         "%s.text: lua %s, C text_emb %d", name, tm ? tm : "(bytes)", c.text_emb);
            lua_pop(L, 1);
            lua_getfield(L, -1, "time");
            const char *tt = lua_tostring(L, -1);
            VF_CHECK_MSG((tt && strcmp(tt, "token") == 0) == (c.t_tokens == 1),
                         "%s.time: lua %s, C t_tokens %d", name, tt ? tt : "(sample)", c.t_tokens);
            lua_pop(L, 1);
            lua_getfield(L, -1, "patch");
            for (int i = 0; i < 3; i++) {
                lua_geti(L, -1, i + 1);
                VF_CHECK_MSG(lua_tointeger(L, -1) == c.patch[i], "%s.patch[%d]", name, i);
                lua_pop(L, 1);
            }
            lua_pop(L, 2);
            n++;
        }
    }
    VF_CHECK_EQ_INT(n, 9);
    lua_close(L);
}

/* The stage-side view: the default `model` JSON, validated against the schema, is the C
 * tiny preset; a bad model table is refused naming the field; the xfer port spec bounds
 * an activation item. */
VF_TEST(model_params_and_ports)
{
    vf_status st = {0};
    vf_params *m = vf_params_from_json(VF_DIT_MODEL_DEFAULT, &st);
    VF_CHECK_MSG(m != NULL, "%s", st.msg);
    VF_CHECK_MSG(vf_params_validate(m, vf_dit_model_fields, "dit", "test: ", &st) == 0, "%s", st.msg);
    vf_dit_config c, tiny;
    VF_CHECK_MSG(vf_dit_config_from_params(m, &c, &st) == 0, "%s", st.msg);
    VF_CHECK(vf_dit_preset("tiny", &tiny, &st) == 0);
    VF_CHECK(memcmp(&c, &tiny, sizeof c) == 0);
    vf_params_free(m);
    m = vf_params_from_json("{\"dim\":60,\"heads\":4,\"head_dim\":16}", &st);
    VF_CHECK(m && vf_params_validate(m, vf_dit_model_fields, "dit", "test: ", &st) == 0);
    vf_status st2 = {0};
    VF_CHECK(vf_dit_config_from_params(m, &c, &st2) == VF_EINVAL && strstr(st2.msg, "dim"));
    vf_params_free(m);

    vf_port_specs ps;
    memset(&ps, 0, sizeof ps);
    vf_port_spec *p = vf_port_add(&ps, "act", VF_PORT_OUT, true);
    vf_dit_dims max = vf_dit_dims_of(&tiny, 4, 5, 16, 16);
    vf_dit_xfer_port(p, &tiny, &max, VF_DTYPE_F32);
    VF_CHECK_EQ_INT(p->ntensors, 4);
    VF_CHECK_STR(p->t[0].name, "x");
    VF_CHECK_EQ_INT(p->t[0].dims[1], 5 * 8 * 8);
    vf_dit_mem mem;
    vf_dit_part_memory(&tiny, 0, 2, &max, false, 4, 4, &mem);
    VF_CHECK(vf_port_max_item_bytes(p) >= mem.xfer - 4 * 64);
}

VF_TEST(memory_figures_are_the_allocations)
{
    vf_status st = {0};
    vf_dit_config c = small_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    vf_backend *be = vf_backend_cpu();
    vf_dit_dims d = vf_dit_dims_of(&c, 2, 2, 4, 6);
    float *params = calloc((size_t)l->total, 4), *grads = calloc((size_t)l->total, 4);
    int bounds[3][2] = {{0, 1}, {1, 3}, {0, 4}};
    for (int r = 0; r < 3; r++) { /* vf_dit_recompute: keep all, keep the attention, neither */
        for (int k = 0; k < 3; k++) {
            vf_dit_part *p = NULL;
            vf_dit_saved *s = NULL;
            int64_t off, n;
            vf_dit_layout_range(l, bounds[k][0], bounds[k][1], &off, &n);
            VF_CHECK(vf_dit_part_new(be, l, bounds[k][0], bounds[k][1], &d, r, params + off,
                                     grads + off, &p, &st) == 0);
            VF_CHECK(vf_dit_saved_new(p, &s, &st) == 0);
            vf_dit_mem m;
            vf_dit_part_memory(&c, bounds[k][0], bounds[k][1], &d, r, 4, 4, &m);
            VF_CHECK_EQ_INT(m.saved, vf_dit_saved_bytes(s));
            VF_CHECK_EQ_INT(m.workspace, vf_dit_part_workspace_bytes(p));
            VF_CHECK_EQ_INT(m.params, n * 4);
            VF_CHECK(m.saved_block == vf_dit_block_act_bytes(&c, 2, 12, r, 4));
            vf_dit_saved_free(s);
            vf_dit_part_free(p);
        }
    }
    /* recompute: the block input, the self-attention output and its lse (2 heads) kept;
     * or the block input only */
    VF_CHECK(vf_dit_block_act_bytes(&c, 2, 12, VF_DIT_RECOMPUTE, 4) == 2 * (2 * 12 * 32 * 4) + 2 * 2 * 12 * 4);
    VF_CHECK(vf_dit_block_act_bytes(&c, 2, 12, VF_DIT_RECOMPUTE_ALL, 4) == 2 * 12 * 32 * 4);
    VF_CHECK(vf_dit_block_act_bytes(&c, 2, 12, false, 4) > 20 * 2 * 12 * 32 * 4);
    /* a batch larger than the partition was sized for is refused */
    vf_dit_part *p = NULL;
    vf_dit_saved *s = NULL;
    VF_CHECK(vf_dit_part_new(be, l, 0, 4, &d, false, params, grads, &p, &st) == 0);
    VF_CHECK(vf_dit_saved_new(p, &s, &st) == 0);
    mb big;
    mb_make(&big, &c, vf_dit_dims_of(&c, 2, 4, 4, 6), 1, 0);
    vf_status st2 = {0};
    VF_CHECK(vf_dit_part_forward(p, &big.b, NULL, NULL, s, &st2) == VF_EINVAL);
    VF_CHECK(strstr(st2.msg, "exceeds") != NULL);
    mb_free(&big);
    /* dims whose token count is not their geometry's (made without vf_dit_dims_of) are refused */
    mb odd;
    mb_make(&odd, &c, (vf_dit_dims){2, 2, 4, 6}, 1, 0);
    vf_status st3 = {0};
    VF_CHECK(vf_dit_part_forward(p, &odd.b, NULL, NULL, s, &st3) == VF_EINVAL);
    VF_CHECK_MSG(strstr(st3.msg, "vf_dit_dims_of") != NULL, "%s", st3.msg);
    mb_free(&odd);
    vf_dit_saved_free(s);
    vf_dit_part_free(p);
    free(params);
    free(grads);
    vf_dit_layout_free(l);
}

VF_TEST(dims_carry_their_tokens)
{
    vf_dit_config c = small_cfg(); /* patch (1, 2, 2) */
    VF_ASSERT(c.patch[0] == 1 && c.patch[1] == 2 && c.patch[2] == 2);
    vf_dit_dims d = vf_dit_dims_of(&c, 3, 2, 4, 6);
    VF_CHECK(d.B == 3 && d.T == 2 && d.H == 4 && d.W == 6 && d.N == 0);
    VF_CHECK_EQ_INT(d.L, 2 * 2 * 3);
    /* the maximum takes the tokens of its largest geometry, and bounds B·L by N */
    vf_dit_dims bk[2] = {vf_dit_dims_of(&c, 4, 1, 2, 2), vf_dit_dims_of(&c, 1, 3, 8, 8)};
    vf_dit_dims m = vf_dit_dims_max(bk, 2);
    VF_CHECK(m.B == 4 && m.T == 3 && m.H == 8 && m.W == 8);
    VF_CHECK_EQ_INT(m.L, 3 * 4 * 4);
    VF_CHECK_EQ_INT(m.N, 48);
}

/* One micro-batch forward, loss and backward through partition [0, depth) sized for
 * max: the loss, the gradients (into grads, zeroed here) and the prediction (copied to
 * pred, B·z·T·H·W floats). */
static void step_at(const vf_dit_layout *l, const vf_dit_dims *max, float *params, float *grads, mb *m,
                    double *loss, float *pred)
{
    vf_status st = {0};
    const vf_dit_config *c = &l->cfg;
    vf_dit_part *p = NULL;
    vf_dit_saved *s = NULL;
    memset(grads, 0, sizeof(float) * (size_t)l->total);
    VF_CHECK(vf_dit_part_new(vf_backend_cpu(), l, 0, c->depth, max, false, params, grads, &p, &st) == 0);
    VF_CHECK(vf_dit_saved_new(p, &s, &st) == 0);
    VF_CHECK_MSG(vf_dit_part_forward(p, &m->b, NULL, NULL, s, &st) == 0, "%s", st.msg);
    const vf_dit_dims *d = &m->b.dims;
    memcpy(pred, vf_dit_saved_pred(s), sizeof(float) * (size_t)c->z * d->B * d->T * d->H * d->W);
    VF_CHECK(vf_dit_part_loss(p, &m->b, s, 1.0f, loss, &st) == 0);
    VF_CHECK_MSG(vf_dit_part_backward(p, &m->b, s, NULL, &st) == 0, "%s", st.msg);
    vf_dit_saved_free(s);
    vf_dit_part_free(p);
}

/* A partition sized once for several buckets (max B, max L and max B·L, below max B ×
 * max L) runs each bucket's micro-batch exactly as a partition built for that geometry
 * alone: prediction, loss and gradients bitwise; it holds less than max B × max L would
 * (the plan is the allocation there too); a batch of max B and max L is refused. */
VF_TEST(any_bucket_within_the_largest_geometry)
{
    vf_status st = {0};
    vf_dit_config c = small_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    float *params = random_params(l, 5);
    /* B·L = 3·1, 1·12, 2·8: the largest L and the largest B·L are other buckets' */
    vf_dit_dims bk[3] = {vf_dit_dims_of(&c, 3, 1, 2, 2), vf_dit_dims_of(&c, 1, 2, 4, 6), vf_dit_dims_of(&c, 2, 2, 4, 4)};
    vf_dit_dims max = vf_dit_dims_max(bk, 3);
    VF_CHECK(max.B == 3 && max.T == 2 && max.H == 4 && max.W == 6 && max.N == 16);
    float *ga = malloc(sizeof(float) * (size_t)l->total), *gb = malloc(sizeof(float) * (size_t)l->total);
    float *pa = malloc(4 * 3 * 4 * 2 * 4 * 6), *pb = malloc(4 * 3 * 4 * 2 * 4 * 6);
    for (int k = 0; k < 3; k++) {
        mb m;
        mb_make(&m, &c, bk[k], 9, 10 * k);
        double la, lb;
        step_at(l, &max, params, ga, &m, &la, pa);
        step_at(l, &bk[k], params, gb, &m, &lb, pb);
        size_t np = (size_t)c.z * bk[k].B * bk[k].T * bk[k].H * bk[k].W;
        VF_CHECK_MSG(memcmp(pa, pb, np * 4) == 0, "bucket %d: prediction differs", k);
        VF_CHECK_MSG(memcmp(&la, &lb, sizeof la) == 0, "bucket %d: loss %.17g vs %.17g", k, la, lb);
        VF_CHECK_MSG(memcmp(ga, gb, sizeof(float) * (size_t)l->total) == 0, "bucket %d: gradients differ", k);
        mb_free(&m);
    }
    vf_dit_mem mn, mf;
    vf_dit_dims full = max;
    full.N = 0;
    vf_dit_part_memory(&c, 0, c.depth, &max, false, 4, 4, &mn);
    vf_dit_part_memory(&c, 0, c.depth, &full, false, 4, 4, &mf);
    VF_CHECK(mn.saved < mf.saved && mn.workspace < mf.workspace);
    vf_dit_part *p = NULL;
    vf_dit_saved *s = NULL;
    VF_CHECK(vf_dit_part_new(vf_backend_cpu(), l, 0, c.depth, &max, false, params, ga, &p, &st) == 0);
    VF_CHECK(vf_dit_saved_new(p, &s, &st) == 0);
    VF_CHECK_EQ_INT(mn.saved, vf_dit_saved_bytes(s));
    VF_CHECK_EQ_INT(mn.workspace, vf_dit_part_workspace_bytes(p));
    mb big;
    mb_make(&big, &c, vf_dit_dims_of(&c, 3, 2, 4, 6), 1, 0);
    vf_status st2 = {0};
    VF_CHECK(vf_dit_part_forward(p, &big.b, NULL, NULL, s, &st2) == VF_EINVAL);
    VF_CHECK(strstr(st2.msg, "16 tokens in all") != NULL);
    mb_free(&big);
    vf_dit_saved_free(s);
    vf_dit_part_free(p);
    free(ga), free(gb), free(pa), free(pb), free(params);
    vf_dit_layout_free(l);
}

VF_TEST(safetensors_round_trip_by_partition)
{
    vf_status st = {0};
    vf_dit_config c = small_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    float *params = random_params(l, 21);
    char path[] = "/tmp/test_dit_XXXXXX";
    int fd = mkstemp(path);
    VF_CHECK(fd >= 0);
    vf_st_writer *w = vf_st_writer_new(&st);
    VF_CHECK(w && vf_dit_st_add(w, l, params, 0, l->total, &st) == 0);
    VF_CHECK_MSG(vf_st_writer_write_fd(w, fd, path, 0, NULL, &st) == 0, "%s", st.msg);
    vf_st_writer_free(w);
    close(fd);
    vf_st_file *f = NULL;
    VF_CHECK_MSG(vf_st_open(path, &f, &st) == 0, "%s", st.msg);
    VF_CHECK_EQ_INT(vf_st_count(f), vf_dit_layout_count(l));
    int64_t off, n;
    vf_dit_layout_range(l, 1, 3, &off, &n);
    float *part = calloc((size_t)n, 4);
    VF_CHECK_MSG(vf_dit_st_load(f, l, part, off, n, &st) == 0, "%s", st.msg);
    VF_CHECK(memcmp(part, params + off, (size_t)n * 4) == 0);
    /* a range that cuts a tensor is refused */
    vf_status st2 = {0};
    VF_CHECK(vf_dit_st_load(f, l, part, off + 1, n - 1, &st2) == VF_EINVAL);
    /* a model of another shape does not load */
    vf_dit_config c2 = c;
    c2.ffn = 96;
    vf_dit_layout *l2 = NULL;
    VF_CHECK(vf_dit_layout_new(&c2, &l2, &st) == 0);
    float *all2 = calloc((size_t)l2->total, 4);
    vf_status st3 = {0};
    VF_CHECK(vf_dit_st_load(f, l2, all2, 0, l2->total, &st3) != 0);
    VF_CHECK(strstr(st3.msg, "ffn.0.weight") != NULL);
    free(all2);
    vf_dit_layout_free(l2);
    vf_st_close(f);
    unlink(path);
    free(part);
    free(params);
    vf_dit_layout_free(l);
}

/* ------------------------------------------------------------------ determinism */

VF_TEST(partitions_and_recompute_are_bitwise_equal)
{
    vf_status st = {0};
    vf_dit_config c = small_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    float *params = random_params(l, 11);
    size_t gbytes = sizeof(float) * (size_t)l->total;
    mb mbs[2];
    mb_make(&mbs[0], &c, vf_dit_dims_of(&c, 2, 2, 4, 6), 3, 0);
    mb_make(&mbs[1], &c, vf_dit_dims_of(&c, 3, 1, 4, 4), 3, 10); /* other geometry, other RoPE grid */

    float *ref = calloc((size_t)l->total, 4);
    double ref_loss[2];
    int one[2] = {0, 4};
    run_parts(l, one, 1, false, params, ref, mbs, 2, 0.5f, ref_loss);
    double gn = 0;
    int64_t nonzero = 0;
    for (int64_t i = 0; i < l->total; i++) gn += (double)ref[i] * ref[i], nonzero += ref[i] != 0;
    VF_CHECK(gn > 0 && isfinite(gn));
    VF_CHECK(nonzero > l->total * 9 / 10); /* unused byte-token rows stay zero */

    const int splits[3][4] = {{0, 4}, {0, 2, 4}, {0, 1, 3, 4}};
    check_splits_bitwise(l, params, mbs, splits, 3, ref, ref_loss);
    (void)gbytes;
    free(ref);
    free(params);
    mb_free(&mbs[0]);
    mb_free(&mbs[1]);
    vf_dit_layout_free(l);
}

VF_TEST(micro_batch_split_agrees_to_rounding)
{
    vf_status st = {0};
    vf_dit_config c = small_cfg();
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    float *params = random_params(l, 12);
    vf_dit_dims d4 = vf_dit_dims_of(&c, 4, 2, 4, 4), d2 = vf_dit_dims_of(&c, 2, 2, 4, 4);
    mb whole, halves[2];
    mb_make(&whole, &c, d4, 9, 0);
    mb_make(&halves[0], &c, d2, 9, 0);
    mb_make(&halves[1], &c, d2, 9, 2); /* samples 2, 3: the same pairs as in `whole` */
    float *g1 = calloc((size_t)l->total, 4), *g2 = calloc((size_t)l->total, 4);
    double l1, l2[2];
    int one[2] = {0, 4}, two[3] = {0, 2, 4};
    run_parts(l, one, 1, false, params, g1, &whole, 1, 1.0f, &l1);
    run_parts(l, two, 2, true, params, g2, halves, 2, 0.5f, l2);
    VF_CHECK_NEAR(0.5 * (l2[0] + l2[1]), l1, 1e-6);
    double num = 0, den = 0;
    for (int64_t i = 0; i < l->total; i++) {
        double e = (double)g1[i] - g2[i];
        num += e * e, den += (double)g1[i] * g1[i];
    }
    fprintf(stderr, "  split vs whole: relative gradient difference %.3g\n", sqrt(num / den));
    VF_CHECK(sqrt(num / den) <= 1e-5);
    free(g1), free(g2), free(params);
    mb_free(&whole), mb_free(&halves[0]), mb_free(&halves[1]);
    vf_dit_layout_free(l);
}

/* ------------------------------------------------------------------ finite differences */

VF_TEST(gradient_matches_finite_differences)
{
    vf_status st = {0};
    vf_dit_config c = small_cfg();
    c.depth = 2;
    vf_dit_layout *l = NULL;
    VF_CHECK(vf_dit_layout_new(&c, &l, &st) == 0);
    float *params = random_params(l, 13);
    mb m;
    mb_make(&m, &c, vf_dit_dims_of(&c, 2, 2, 4, 4), 5, 0);
    float *g = calloc((size_t)l->total, 4);
    double loss;
    int one[2] = {0, 2};
    run_parts(l, one, 1, false, params, g, &m, 1, 1.0f, &loss);
    /* per tensor of interest, the element with the largest gradient (a tiny gradient would
     * only measure f32 rounding of the loss) */
    const char *names[] = {"patch_embedding.weight", "text_tokens.weight",
                           "text_embedding.0.weight", "time_embedding.0.bias",
                           "time_projection.1.weight", "blocks.0.self_attn.q.weight",
                           "blocks.0.self_attn.norm_k.weight", "blocks.0.norm3.bias",
                           "blocks.1.cross_attn.k.weight", "blocks.1.cross_attn.norm_q.weight",
                           "blocks.1.ffn.0.bias", "blocks.1.modulation", "head.modulation",
                           "head.head.weight"};
    int worst_ok = 1;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const vf_dit_tensor *t = &l->t[vf_dit_layout_find(l, names[k])];
        int64_t best = t->offset;
        for (int64_t i = t->offset; i < t->offset + t->numel; i++)
            if (fabs(g[i]) > fabs(g[best])) best = i;
        if (!(fd_rel_error(l, params, &m, best, g[best], names[k]) < 1e-3)) worst_ok = 0;
    }
    VF_CHECK(worst_ok);
    free(g), free(params);
    mb_free(&m);
    vf_dit_layout_free(l);
}

/* ------------------------------------------------------------------ rectified flow */

VF_TEST(rectified_flow_pairs_are_keyed_by_sample)
{
    vf_dit_rf rf = {77, 0.0f, 1.0f};
    float x0[40], xt[40], tg[40], xt2[40], tg2[40];
    for (int i = 0; i < 40; i++) x0[i] = (float)i / 10;
    float t = vf_dit_rf_sample(&rf, 5, 1000, 40, x0, xt, tg);
    float t2 = vf_dit_rf_sample(&rf, 5, 1000, 40, x0, xt2, tg2);
    VF_CHECK(t == t2 && memcmp(xt, xt2, sizeof xt) == 0 && memcmp(tg, tg2, sizeof tg) == 0);
    VF_CHECK(t > 0 && t < 1);
    for (int i = 0; i < 40; i++) {
        float noise = tg[i] + x0[i];
        VF_CHECK_NEAR(xt[i], (1 - t) * x0[i] + t * noise, 1e-5);
    }
    /* the first elements do not depend on how many are drawn */
    vf_dit_rf_sample(&rf, 5, 1000, 7, x0, xt2, NULL);
    VF_CHECK(memcmp(xt, xt2, 7 * sizeof(float)) == 0);
    VF_CHECK(vf_dit_rf_sample(&rf, 6, 1000, 40, x0, xt2, NULL) != t ||
             memcmp(xt, xt2, sizeof xt) != 0);
    /* logit-normal: logit(t) ~ N(0.5, 2) over many sample ids */
    rf.t_mean = 0.5f, rf.t_std = 2.0f;
    double s = 0, s2 = 0;
    for (int i = 0; i < 4000; i++) {
        double tt = vf_dit_rf_sample(&rf, 1, (uint64_t)i, 0, NULL, NULL, NULL);
        double u = log(tt / (1 - tt));
        s += u, s2 += u * u;
    }
    double mean = s / 4000, sd = sqrt(s2 / 4000 - mean * mean);
    VF_CHECK(fabs(mean - 0.5) < 0.1 && fabs(sd - 2.0) < 0.1);
}

/* The timestep distributions against their closed-form CDFs, each derived here from the
 * definition (models/dit.h) by inverting the range and the shift:
 *   P(t ≤ x) = F(g⁻¹((x − lo)/(hi − lo))),  g⁻¹(y) = y / (k − (k − 1)·y),
 *   F = Φ((logit(·) − mean)/std) (logit-normal) or the identity (uniform);
 * a Kolmogorov–Smirnov distance over 20000 sample ids below 1.95/√n (α = 0.001; the
 * draws are Philox's, so the figure is fixed). A shift or range applied otherwise (the
 * inverse shift) is 0.61–0.85 away. */
static double t_cdf(const vf_dit_rf *rf, double x)
{
    double lo = rf->t_min, hi = rf->t_max, k = rf->shift;
    double y = (x - lo) / (hi - lo);
    if (y <= 0) return 0;
    if (y >= 1) return 1;
    double s = y / (k - (k - 1) * y);
    if (rf->sampling == VF_DIT_T_UNIFORM) return s;
    return 0.5 * erfc(-((log(s / (1 - s)) - rf->t_mean) / rf->t_std) / sqrt(2.0));
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

VF_TEST(timestep_distributions_follow_their_cdf)
{
    const vf_dit_rf cases[] = {
        {.seed = 3, .t_mean = 0, .t_std = 1, .sampling = VF_DIT_T_LOGIT_NORMAL, .shift = 1, .t_min = 0, .t_max = 1},
        {.seed = 3, .t_mean = 0.5f, .t_std = 1.2f, .sampling = VF_DIT_T_LOGIT_NORMAL, .shift = 3, .t_min = 0.2, .t_max = 0.9},
        {.seed = 4, .sampling = VF_DIT_T_UNIFORM, .shift = 5, .t_min = 0, .t_max = 1},
        {.seed = 5, .sampling = VF_DIT_T_UNIFORM, .shift = 12, .t_min = 0.875, .t_max = 1},
        {.seed = 6, .t_mean = -0.3f, .t_std = 0.8f, .sampling = VF_DIT_T_LOGIT_NORMAL, .shift = 0.5, .t_min = 0, .t_max = 0.875},
    };
    enum { N = 20000 };
    static float t[N];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const vf_dit_rf *rf = &cases[c];
        for (int i = 0; i < N; i++) {
            t[i] = vf_dit_rf_t(rf, 7, (uint64_t)i);
            VF_CHECK(t[i] >= rf->t_min && t[i] <= rf->t_max);
        }
        qsort(t, N, sizeof t[0], cmp_f);
        double d = 0;
        for (int i = 0; i < N; i++) {
            double f = t_cdf(rf, t[i]);
            d = fmax(d, fmax(fabs(f - (double)i / N), fabs(f - (double)(i + 1) / N)));
        }
        VF_CHECK_MSG(d < 1.95 / sqrt((double)N), "case %zu: KS distance %.4f", c, d);
    }
    /* the default is bitwise the logit-normal draw alone, and a zeroed struct's shift and
     * range read as none */
    vf_dit_rf a = {.seed = 9, .t_mean = 0.25f, .t_std = 1.5f}, b = a;
    b.shift = 1, b.t_min = 0, b.t_max = 1;
    for (uint64_t i = 0; i < 100; i++) {
        vf_rng r;
        vf_rng_init(&r, 9, 2, i, VF_RNG_TIMESTEP);
        float want = (float)(1.0 / (1.0 + exp(-(0.25 + 1.5 * vf_rng_normal_at(&r, 0)))));
        VF_CHECK(vf_dit_rf_t(&a, 2, i) == want && vf_dit_rf_t(&b, 2, i) == want);
    }
    VF_CHECK(vf_dit_t_sampling_parse("uniform") == VF_DIT_T_UNIFORM &&
             vf_dit_t_sampling_parse("logit_normal") == VF_DIT_T_LOGIT_NORMAL && vf_dit_t_sampling_parse("sigma") < 0);
}

int main(void) { return vf_test_main(); }
