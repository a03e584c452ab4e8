/* test_decode_bucket_config.c — the Open-Sora form of decode's buckets
 * (stages/decode/decode_bucket.h, vf_bucket_config_parse): the bucket list a table
 * resolution -> length -> {keep, batch} expands into, computed again here from the
 * resolutions' pixel areas and the ratio list; the resolution a video's size reaches;
 * the check-time errors naming the entry; and the keep decisions (the same on every
 * call, matching values of a Python implementation of the hash, and kept at a rate
 * close to p over many clips).
 */
#include "tests/vf_test.h"

#include "stages/decode/decode_bucket.h"

#include <math.h>

static int parse(const char *json, int stride, int patch, vf_buckets *b, vf_status *st)
{
    vf_status js = {0};
    vf_json *j = vf_json_parse(json, &js);
    if (!j) {
        fprintf(stderr, "bad test JSON: %s\n", js.msg);
        exit(1);
    }
    int rc = vf_bucket_config_parse(j, stride, patch, b, st);
    vf_json_free(j);
    return rc;
}

/* Open-Sora's bucket_config example, as the Lua sugar hands it over (string length keys) */
static const char *CFG =
    "{\"480p\":{\"1\":[1.0,64],\"49\":[0.5,8],\"97\":[0.3,4]},"
    "\"256\":{\"49\":[1.0,16]}}";

/* The expected expansion, written again: W x H the multiples of m nearest to
 * sqrt(A * w/h) x sqrt(A * h/w), one per ratio, a repeated size once. */
typedef struct { int w, h, res; } want_b;

static int expand(const double *areas, int nres, int m, want_b *out)
{
    static const double ratios[5][2] = {{9, 16}, {3, 4}, {1, 1}, {4, 3}, {16, 9}};
    int n = 0;
    for (int r = 0; r < nres; r++)
        for (int a = 0; a < 5; a++) {
            double x = sqrt(areas[r] * ratios[a][0] / ratios[a][1]);
            double y = sqrt(areas[r] * ratios[a][1] / ratios[a][0]);
            int w = (int)floor(x / m + 0.5) * m, h = (int)floor(y / m + 0.5) * m;
            if (w < m) w = m;
            if (h < m) h = m;
            bool seen = false;
            for (int j = 0; j < n; j++) seen |= out[j].w == w && out[j].h == h;
            if (!seen) out[n++] = (want_b){w, h, r};
        }
    return n;
}

VF_TEST(config_expand)
{
    vf_buckets b;
    vf_status st = {0};
    VF_CHECK_EQ_INT(parse(CFG, 8, 2, &b, &st), 0);
    VF_CHECK_EQ_INT(b.nres, 2);
    VF_CHECK_STR(b.res_name[0], "480p"); /* largest area first */
    VF_CHECK_STR(b.res_name[1], "256");
    const double areas[2] = {409920, 65536};
    want_b w[16];
    int n = expand(areas, 2, 16, w);
    VF_CHECK_EQ_INT(b.n, n);
    VF_CHECK_EQ_INT(n, 10);
    for (int i = 0; i < n && i < b.n; i++) {
        VF_CHECK_MSG(b.b[i].w == w[i].w && b.b[i].h == w[i].h && b.b[i].res == w[i].res,
                     "bucket %d: %dx%d (res %d), want %dx%d (res %d)", i, b.b[i].w, b.b[i].h, b.b[i].res, w[i].w,
                     w[i].h, w[i].res);
    }
    /* a few by hand: 480p 16:9 is 848x480 (854 is no multiple of 16), 256 1:1 is 256x256 */
    VF_CHECK_EQ_INT(b.b[4].w, 848);
    VF_CHECK_EQ_INT(b.b[4].h, 480);
    VF_CHECK_EQ_INT(b.b[0].w, 480);
    VF_CHECK_EQ_INT(b.b[0].h, 848);
    VF_CHECK_EQ_INT(b.b[7].w, 256);
    VF_CHECK_EQ_INT(b.b[7].h, 256);
    /* lengths, keep and batch travel to every bucket of the resolution */
    for (int i = 0; i < 5; i++) {
        VF_CHECK_EQ_INT(b.b[i].nlens, 3);
        for (int k = 0; k < 3; k++) {
            int f = b.b[i].frames[k];
            VF_CHECK_MSG(f == 1 || f == 49 || f == 97, "length %d", f);
            VF_CHECK_NEAR(b.b[i].keep[k], f == 1 ? 1.0 : f == 49 ? 0.5 : 0.3, 1e-12);
            VF_CHECK_EQ_INT(b.b[i].batch[k], f == 1 ? 64 : f == 49 ? 8 : 4);
        }
    }
    VF_CHECK_EQ_INT(b.b[9].nlens, 1);
    VF_CHECK_EQ_INT(b.b[9].frames[0], 49);
    VF_CHECK_EQ_INT(b.b[9].batch[0], 16);
    VF_CHECK_NEAR(b.b[9].keep[0], 1.0, 1e-12);

    /* every resolution name, at stride x patch 16 and 64 (where ratios collapse) */
    static const struct { const char *name; double area; } R[] = {
        {"144p", 36864}, {"256", 65536}, {"240p", 102240}, {"360p", 230400}, {"512", 262144}, {"480p", 409920},
        {"720p", 921600}, {"1024", 1048576}, {"1080p", 2073600}, {"2k", 3686400}, {"2048", 4194304}};
    for (size_t r = 0; r < sizeof R / sizeof R[0]; r++)
        for (int m = 16; m <= 64; m *= 4) {
            char json[128];
            snprintf(json, sizeof json, "{\"%s\":{\"17\":[1,1]}}", R[r].name);
            VF_CHECK_EQ_INT(vf_bucket_res_area(R[r].name), (int64_t)R[r].area);
            VF_CHECK_EQ_INT(parse(json, m / 2, 2, &b, &st), 0);
            n = expand(&R[r].area, 1, m, w);
            VF_CHECK_MSG(b.n == n, "%s at %d: %d buckets, want %d", R[r].name, m, b.n, n);
            for (int i = 0; i < n && i < b.n; i++)
                VF_CHECK_MSG(b.b[i].w == w[i].w && b.b[i].h == w[i].h, "%s at %d: bucket %d %dx%d, want %dx%d",
                             R[r].name, m, i, b.b[i].w, b.b[i].h, w[i].w, w[i].h);
        }
    /* 144p at 64: 3:4, 1:1 and 4:3 all round to 192x192, listed once */
    VF_CHECK_EQ_INT(parse("{\"144p\":{\"17\":[1,1]}}", 8, 8, &b, &st), 0);
    VF_CHECK_EQ_INT(b.n, 3);
    VF_CHECK_EQ_INT(vf_bucket_res_area("470p"), 0);
}

/* Each bad entry is refused naming it (and what is wrong with it). */
VF_TEST(config_errors)
{
    static const struct { const char *json; const char *want[2]; } cases[] = {
        {"{\"470p\":{\"17\":[1,1]}}", {"unknown resolution \"470p\"", "known: 144p"}},
        {"{\"480p\":{\"18\":[1,1]}}", {"bucket_config[\"480p\"][18]", "length 18 is not 1 + 4k"}},
        {"{\"480p\":{\"17\":[1.5,1]}}", {"bucket_config[\"480p\"][17]", "keep probability 1.5 is outside [0, 1]"}},
        {"{\"480p\":{\"17\":[-0.1,1]}}", {"bucket_config[\"480p\"][17]", "outside [0, 1]"}},
        {"{\"480p\":{\"17\":[1,0]}}", {"bucket_config[\"480p\"][17]", "batch 0"}},
        {"{\"480p\":{\"17\":[1,2.5]}}", {"bucket_config[\"480p\"][17]", "batch 2.5"}},
        {"{\"480p\":{\"17\":[1]}}", {"bucket_config[\"480p\"][17]", "must be {keep, batch}"}},
        {"{\"480p\":{\"17\":1}}", {"bucket_config[\"480p\"][17]", "must be {keep, batch}"}},
        {"{\"480p\":{\"x\":[1,1]}}", {"bucket_config[\"480p\"]", "length 'x'"}},
        {"{\"480p\":[]}", {"bucket_config[\"480p\"]", "length -> {keep, batch}"}},
        {"{\"480p\":5}", {"bucket_config[\"480p\"]", "length -> {keep, batch}"}},
        {"{}", {"bucket_config is empty", "480p"}},
        {"[1,2]", {"bucket_config must be a table", "480p"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vf_buckets b;
        vf_status st = {0};
        int rc = parse(cases[i].json, 8, 2, &b, &st);
        VF_CHECK_MSG(rc == VF_EUSAGE, "case %zu: rc %d (%s)", i, rc, st.msg);
        for (int k = 0; k < 2; k++)
            VF_CHECK_MSG(strstr(st.msg, cases[i].want[k]) != NULL, "case %zu: '%s' lacks '%s'", i, st.msg,
                         cases[i].want[k]);
    }
}

VF_TEST(config_pick)
{
    vf_buckets b;
    vf_status st = {0};
    VF_CHECK_EQ_INT(parse(CFG, 8, 2, &b, &st), 0);
    /* 854x480 reaches 480p; its nearest ratio there is 16:9 (bucket 4) */
    VF_CHECK_EQ_INT(vf_bucket_pick_area(&b, 854.0 / 480, 854.0 * 480), 4);
    VF_CHECK_EQ_INT(vf_bucket_pick_area(&b, 480.0 / 854, 854.0 * 480), 0);
    /* 80 % of 480p's 409920 pixels is 327936: 600x548 (328800) reaches it, 640x360 does not */
    VF_CHECK_EQ_INT(vf_bucket_pick_area(&b, 600.0 / 548, 600.0 * 548), 2);
    VF_CHECK_EQ_INT(vf_bucket_pick_area(&b, 640.0 / 360, 640.0 * 360), 9);
    VF_CHECK_EQ_INT(vf_bucket_pick_area(&b, 3.0 / 4, 640.0 * 360), 6);
    /* below 80 % of 256's 65536 (52428.8): no resolution */
    VF_CHECK_EQ_INT(vf_bucket_pick_area(&b, 1.0, 229.0 * 229), 7);
    VF_CHECK_EQ_INT(vf_bucket_pick_area(&b, 1.0, 228.0 * 228), -1);
    VF_CHECK_EQ_INT(vf_bucket_pick_area(&b, 16.0 / 9, 160.0 * 90), -1);
}

VF_TEST(config_keep)
{
    /* values of an independent Python implementation of the hash (FNV-1a 64 of
     * "<seed>\n<path>\n<clip>\n<frames>", then splitmix64's finalizer, top 53 bits) */
    VF_CHECK_NEAR(vf_bucket_keep_u(0, "a.mp4", 0, 49), 0.6459171445791599, 1e-15);
    VF_CHECK_NEAR(vf_bucket_keep_u(7, "/data/v/x.mp4", 3, 17), 0.25672592115042703, 1e-15);
    VF_CHECK_NEAR(vf_bucket_keep_u(123456789, "clip.mkv", 12, 97), 0.6498879426451907, 1e-15);
    /* the rate of keeps over many clips is close to p, the same on a second pass, and
     * another seed decides differently */
    static const double ps[] = {0.05, 0.3, 0.5, 0.9};
    const int N = 20000;
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        int kept = 0, same = 0, other = 0;
        for (int c = 0; c < N; c++) {
            char path[64];
            snprintf(path, sizeof path, "videos/v%04d.mp4", c / 10);
            bool k = vf_bucket_keep(0, path, c % 10, 49, ps[i]);
            kept += k;
            same += k == vf_bucket_keep(0, path, c % 10, 49, ps[i]);
            other += k != vf_bucket_keep(1, path, c % 10, 49, ps[i]);
        }
        double rate = (double)kept / N, sd = sqrt(ps[i] * (1 - ps[i]) / N);
        VF_CHECK_MSG(fabs(rate - ps[i]) < 4 * sd, "p %.2f: kept %.4f (4 sd = %.4f)", ps[i], rate, 4 * sd);
        VF_CHECK_EQ_INT(same, N);
        VF_CHECK_MSG(other > N * ps[i] * (1 - ps[i]), "p %.2f: seed 1 differs on only %d clips", ps[i], other);
    }
    VF_CHECK(vf_bucket_keep(0, "a.mp4", 0, 49, 1.0));
    VF_CHECK(!vf_bucket_keep(0, "a.mp4", 0, 49, 0.0));
    /* the length enters the decision: a clip's decisions at 49 and 97 are not the same draw */
    int differ = 0;
    for (int c = 0; c < 1000; c++) differ += vf_bucket_keep(0, "a.mp4", c, 49, 0.5) != vf_bucket_keep(0, "a.mp4", c, 97, 0.5);
    VF_CHECK_MSG(differ > 400 && differ < 600, "49 and 97 differ on %d of 1000 clips", differ);
}

int main(void) { return vf_test_main(); }
