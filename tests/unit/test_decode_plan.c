/* test_decode_plan.c — the decode stage's pure parts: clip planner (stages/decode/decode_clip.h)
 * and manifests (formats/video_manifest.h): CSV quoting, JSONL escapes, globs, folders
 * with .txt captions, shards, and errors that name file:line; the decode group's tally of bad
 * files across instance processes (formats/run_tally.h). No videos needed.
 */
#include "tests/vf_test.h"

#include "stages/decode/decode_clip.h"
#include "formats/video_manifest.h"
#include "formats/run_tally.h"

#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[200];

static void setup(void)
{
    if (g_dir[0]) return;
    snprintf(g_dir, sizeof g_dir, "/tmp/vf_test_decode_plan_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); exit(1); }
}

static const char *path_in_dir(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

/* ------------------------------------------------------------ clip planner (pure) */

VF_TEST(clip_plan_stride)
{
    double t[100];
    for (int i = 0; i < 100; i++) t[i] = i / 25.0;
    vf_clip_opts o = {.frames = 8, .stride = 2};
    vf_clip_plan p;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_clip_plan_make(t, 100, 4.0, &o, &p, &st), 0);
    /* span 15, step 16: starts 0,16,...,80 -> 6 clips (80+14 = 94 < 100) */
    VF_CHECK_EQ_INT(p.nclips, 6);
    VF_CHECK_EQ_INT(p.idx[5 * 8 + 7], 94);
    vf_clip_plan_fini(&p);
    o.clips_per_video = 2; /* picks grid 1 and 4 of 6 (evenly spread) */
    VF_CHECK_EQ_INT(vf_clip_plan_make(t, 100, 4.0, &o, &p, &st), 0);
    VF_CHECK_EQ_INT(p.nclips, 2);
    VF_CHECK_EQ_INT(p.grid[0], 1);
    VF_CHECK_EQ_INT(p.grid[1], 4);
    VF_CHECK_EQ_INT(p.idx[8], 64);
    vf_clip_plan_fini(&p);
    o = (vf_clip_opts){.frames = 8, .stride = 1, .start_s = 1.0, .end_s = 2.0}; /* frames 25..49 */
    VF_CHECK_EQ_INT(vf_clip_plan_make(t, 100, 4.0, &o, &p, &st), 0);
    VF_CHECK_EQ_INT(p.nclips, 3);
    VF_CHECK_EQ_INT(p.idx[0], 25);
    VF_CHECK_EQ_INT(p.idx[2 * 8 + 7], 48);
    vf_clip_plan_fini(&p);
    o = (vf_clip_opts){.frames = 60, .stride = 2};
    VF_CHECK_EQ_INT(vf_clip_plan_make(t, 100, 4.0, &o, &p, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "too short") != NULL, "%s", st.msg);
    vf_clip_plan_fini(&p);
}

VF_TEST(clip_plan_fps)
{
    double t[120];
    for (int i = 0; i < 120; i++) t[i] = i / 30.0; /* 4 s at 30 fps */
    vf_clip_opts o = {.frames = 10, .fps = 15};
    vf_clip_plan p;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_clip_plan_make(t, 120, 4.0, &o, &p, &st), 0);
    VF_CHECK_EQ_INT(p.nclips, 6); /* 60 samples at 15 fps in 4 s */
    for (int j = 0; j < 10; j++) VF_CHECK_EQ_INT(p.idx[10 + j], 20 + 2 * j);
    vf_clip_plan_fini(&p);
    o.fps = 60; /* faster than the source: would repeat frames */
    VF_CHECK_EQ_INT(vf_clip_plan_make(t, 120, 4.0, &o, &p, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "repeat") != NULL, "%s", st.msg);
    vf_clip_plan_fini(&p);
    /* 24 -> 30 nearest-neighbour would repeat; 30 -> 24 drops every 5th frame */
    o.fps = 24;
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_clip_plan_make(t, 120, 4.0, &o, &p, &st), 0);
    VF_CHECK_EQ_INT(p.nclips, 9); /* 96 samples */
    for (int j = 0; j < 10; j++) /* nearest of j/24 s on a 1/30 s grid, ties to the earlier */
        VF_CHECK_EQ_INT(p.idx[j], (int64_t)floor(j * 30.0 / 24 + 0.5 - 1e-9));
    vf_clip_plan_fini(&p);
}

/* The fps rule of decode_clip.h, written out by brute force: the window [a, b) of frames
 * whose times lie in [start, end) (a microsecond of slack), t0 = times[a], tend = the
 * smaller of the duration and end; grid clip m samples t0 + (m·T + j)/fps, is offered
 * while its last sample lies before tend, and is kept when the nearest frames (linear
 * scan, ties to the earlier) strictly increase. Returns the clips; grid, idx filled. */
static int64_t fps_reference(const double *t, int64_t n, double dur, const vf_clip_opts *o, int64_t *grid,
                             int64_t *idx)
{
    int64_t a = 0, b = n, T = o->frames, got = 0;
    if (o->start_s > 0)
        while (a < n && t[a] < o->start_s - 1e-6) a++;
    if (o->end_s > 0)
        for (b = 0; b < n && t[b] < o->end_s - 1e-6;) b++;
    if (a >= b) return 0;
    double tend = o->end_s > 0 && o->end_s < dur ? o->end_s : dur;
    for (int64_t m = 0; t[a] + (double)(m * T + T - 1) / o->fps < tend - 1e-9; m++) {
        int64_t prev = -1;
        bool ok = true;
        for (int64_t j = 0; j < T; j++) {
            double s = t[a] + (double)(m * T + j) / o->fps;
            int64_t best = a;
            for (int64_t i = a + 1; i < b; i++)
                if (fabs(t[i] - s) < fabs(t[best] - s) - 1e-9) best = i;
            ok = ok && best > prev;
            idx[got * T + j] = prev = best;
        }
        if (ok) grid[got++] = m;
    }
    return got;
}

VF_TEST(clip_plan_fps_counts_against_brute_force)
{
    /* sources: constant rates, one with jittered frame times, and one whose duration ends
     * half a nanosecond after a sample time of the 100 fps grid (0.11 s: at 4 frames a clip
     * the third clip's last sample lies within the planner's slack of the end, so it is
     * not offered) */
    struct { double fps; int n; bool jitter; double dur; } src[] = {
        {30, 120, false, 0}, {25, 101, false, 0}, {30000.0 / 1001, 90, false, 0}, {24, 50, false, 0},
        {60, 37, false, 0}, {30, 75, true, 0}, {200, 22, false, 0.1100000005},
    };
    const double targets[] = {8, 12.5, 15, 24, 30000.0 / 1001, 100};
    const int frames[] = {1, 4, 5, 10};
    const double win[][2] = {{0, 0}, {0.5, 0}, {0, 2.0}, {0.3, 2.6}, {0, 1.0 / 3}};
    int cases = 0, refused = 0;
    double t[200];
    int64_t grid[4000], idx[4000];
    for (size_t si = 0; si < sizeof src / sizeof src[0]; si++) {
        uint32_t x = 7;
        for (int i = 0; i < src[si].n; i++) {
            x = x * 1664525u + 1013904223u;
            t[i] = (i + (src[si].jitter ? 0.4 * ((x >> 8) / 16777216.0 - 0.5) : 0)) / src[si].fps;
        }
        double dur = src[si].dur > 0 ? src[si].dur : src[si].n / src[si].fps;
        for (size_t ti = 0; ti < sizeof targets / sizeof targets[0]; ti++)
            for (size_t fi = 0; fi < sizeof frames / sizeof frames[0]; fi++)
                for (size_t wi = 0; wi < sizeof win / sizeof win[0]; wi++) {
                    vf_clip_opts o = {.frames = frames[fi], .fps = targets[ti], .start_s = win[wi][0],
                                      .end_s = win[wi][1]};
                    int64_t want = fps_reference(t, src[si].n, dur, &o, grid, idx);
                    vf_clip_plan p;
                    vf_status st = {0};
                    int rc = vf_clip_plan_make(t, src[si].n, dur, &o, &p, &st);
                    cases++;
                    if (want == 0) {
                        VF_CHECK_MSG(rc == VF_EBADINPUT, "source %zu fps %g T %d window %zu: %lld clips, want none",
                                     si, o.fps, o.frames, wi, (long long)p.nclips);
                        refused++;
                    } else {
                        bool same = rc == 0 && p.nclips == want;
                        for (int64_t k = 0; same && k < want; k++) {
                            same = p.grid[k] == grid[k];
                            for (int j = 0; same && j < o.frames; j++) same = p.idx[k * o.frames + j] == idx[k * o.frames + j];
                        }
                        VF_CHECK_MSG(same, "source %zu fps %g T %d window %zu: rc %d, %lld clips, want %lld (%s)", si,
                                     o.fps, o.frames, wi, rc, (long long)p.nclips, (long long)want, st.msg);
                    }
                    vf_clip_plan_fini(&p);
                }
    }
    fprintf(stderr, "  %d fps plans against the brute-force rule, %d refused\n", cases, refused);
}

/* ------------------------------------------------------------ manifests */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

VF_TEST(manifest_csv_jsonl_glob)
{
    setup();
    char p[1024], q[1024];
    path_in_dir(p, sizeof p, "m.csv");
    write_file(p, "\xEF\xBB\xBFpath,text,start,end,fps,aspect_ratio\r\n"
                  "a.mp4,\"a cat, \"\"quoted\"\"\nsecond line\",1.5,,,0.56\r\n"
                  "\r\n"
                  "/abs/b.mkv,plain,,3,30000/1001,1.0\n"
                  "sub/c.webm,,,,,\n");
    vf_manifest m;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_manifest_load(p, 0, 1, &m, &st), 0);
    VF_CHECK_EQ_INT(m.n, 3);
    if (m.n == 3) {
        snprintf(q, sizeof q, "%s/a.mp4", g_dir);
        VF_CHECK_STR(m.rows[0].path, q);
        VF_CHECK_STR(m.rows[0].caption, "a cat, \"quoted\"\nsecond line");
        VF_CHECK_NEAR(m.rows[0].start_s, 1.5, 0);
        VF_CHECK_EQ_INT(m.rows[0].nextra, 1);
        VF_CHECK_STR(m.rows[0].extra[0].key, "aspect_ratio");
        VF_CHECK_STR(m.rows[0].extra[0].val, "0.56");
        VF_CHECK_STR(m.rows[1].path, "/abs/b.mkv");
        VF_CHECK_NEAR(m.rows[1].end_s, 3, 0);
        VF_CHECK_NEAR(m.rows[1].fps, 30000.0 / 1001, 1e-12);
        VF_CHECK_EQ_INT(m.rows[1].line, 5);
        VF_CHECK_STR(m.rows[2].caption, "");
    }
    vf_manifest_fini(&m);
    /* shards: rows 0 and 2 / row 1 */
    VF_CHECK_EQ_INT(vf_manifest_load(p, 1, 2, &m, &st), 0);
    VF_CHECK_EQ_INT(m.n, 1);
    VF_CHECK_EQ_INT(m.total, 3);
    if (m.n == 1) VF_CHECK_STR(m.rows[0].path, "/abs/b.mkv");
    vf_manifest_fini(&m);

    path_in_dir(p, sizeof p, "m.jsonl");
    write_file(p, "{\"path\": \"x.mp4\", \"text\": \"caf\\u00e9 \\\"q\\\"\", \"start\": 2, \"score\": 0.5, \"ok\": true}\n"
                  "\n{\"file_name\": \"/y.mp4\", \"caption\": null}\n");
    VF_CHECK_EQ_INT(vf_manifest_load(p, 0, 1, &m, &st), 0);
    VF_CHECK_EQ_INT(m.n, 2);
    if (m.n == 2) {
        VF_CHECK_STR(m.rows[0].caption, "caf\xC3\xA9 \"q\"");
        VF_CHECK_NEAR(m.rows[0].start_s, 2, 0);
        VF_CHECK_EQ_INT(m.rows[0].nextra, 2);
        VF_CHECK(m.rows[0].extra[0].is_num && !m.rows[0].extra[1].is_num);
        VF_CHECK_STR(m.rows[1].path, "/y.mp4");
        VF_CHECK_EQ_INT(m.rows[1].line, 3);
    }
    vf_manifest_fini(&m);

    /* errors name the file and line; exit code 2 class */
    path_in_dir(p, sizeof p, "bad.csv");
    write_file(p, "path,text\na.mp4,x\nb.mp4\n");
    VF_CHECK_EQ_INT(vf_manifest_load(p, 0, 1, &m, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "bad.csv:3") != NULL, "%s", st.msg);
    vf_manifest_fini(&m);
    vf_status_clear(&st);
    path_in_dir(p, sizeof p, "nopath.csv");
    write_file(p, "video,text\na.mp4,x\n");
    VF_CHECK_EQ_INT(vf_manifest_load(p, 0, 1, &m, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "no `path` column") != NULL, "%s", st.msg);
    vf_manifest_fini(&m);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_manifest_load("/nonexistent/list.csv", 0, 1, &m, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "/nonexistent/list.csv") != NULL, "%s", st.msg);
    VF_CHECK_EQ_INT(vf_exit_code(st.code), 2);
    vf_manifest_fini(&m);
    vf_status_clear(&st);
    path_in_dir(p, sizeof p, "bad.jsonl");
    write_file(p, "{\"path\": \"a.mp4\"}\n{\"path\": [1]}\n");
    VF_CHECK_EQ_INT(vf_manifest_load(p, 0, 1, &m, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "bad.jsonl:2") != NULL, "%s", st.msg);
    vf_manifest_fini(&m);

    /* glob: files only, sorted; a directory = all its files; no match = error */
    char d[400];
    path_in_dir(d, sizeof d, "g");
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/b.mp4", d); write_file(p, "x");
    snprintf(p, sizeof p, "%s/a.mp4", d); write_file(p, "x");
    snprintf(p, sizeof p, "%s/c.txt", d); write_file(p, "x");
    snprintf(p, sizeof p, "%s/sub", d); mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/*.mp4", d);
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_manifest_glob(p, 0, 1, &m, &st), 0);
    VF_CHECK_EQ_INT(m.n, 2);
    if (m.n == 2) { snprintf(q, sizeof q, "%s/a.mp4", d); VF_CHECK_STR(m.rows[0].path, q); }
    vf_manifest_fini(&m);
    /* a folder: its videos by extension, each caption from the same-stem .txt, the other
     * files skipped and counted */
    snprintf(p, sizeof p, "%s/a.txt", d); write_file(p, "  a cat\non a mat \n\n");
    snprintf(p, sizeof p, "%s/notes.md", d); write_file(p, "x");
    VF_CHECK_EQ_INT(vf_manifest_glob(d, 0, 1, &m, &st), 0);
    VF_CHECK_EQ_INT(m.n, 2);
    VF_CHECK_EQ_INT(m.skipped, 2); /* c.txt (no c video), notes.md; a.txt is a.mp4's caption */
    VF_CHECK_EQ_INT(m.captioned, 1);
    if (m.n == 2) {
        VF_CHECK_STR(m.rows[0].caption, "a cat\non a mat");
        VF_CHECK_STR(m.rows[1].caption, "");
    }
    vf_manifest_fini(&m);
    /* the same folder split over two instances: each counts the whole folder */
    VF_CHECK_EQ_INT(vf_manifest_glob(d, 1, 2, &m, &st), 0);
    VF_CHECK_EQ_INT(m.n, 1);
    VF_CHECK_EQ_INT(m.total, 2);
    VF_CHECK_EQ_INT(m.captioned, 1);
    vf_manifest_fini(&m);
    /* a folder without a video names what it holds */
    char e[400];
    path_in_dir(e, sizeof e, "novideo");
    mkdir(e, 0755);
    snprintf(p, sizeof p, "%s/a.txt", e); write_file(p, "x");
    VF_CHECK_EQ_INT(vf_manifest_glob(e, 0, 1, &m, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "holds no video files (1 other files") != NULL, "%s", st.msg);
    vf_manifest_fini(&m);
    vf_status_clear(&st);
    snprintf(p, sizeof p, "%s/*.avi", d);
    VF_CHECK_EQ_INT(vf_manifest_glob(p, 0, 1, &m, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "matches no files") != NULL, "%s", st.msg);
    vf_manifest_fini(&m);
}

/* Column text_emb: a path relative to the manifest like `path`, absolute in the row, not
 * an extra column; empty = none; JSONL takes a string only. */
VF_TEST(manifest_text_emb_column)
{
    setup();
    char p[1024], q[1024];
    path_in_dir(p, sizeof p, "t.csv");
    write_file(p, "path,text,text_emb,score\na.mp4,x,emb/a.safetensors,1\nb.mp4,y,,2\n");
    vf_manifest m;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_manifest_load(p, 0, 1, &m, &st), 0);
    VF_CHECK_EQ_INT(m.n, 2);
    if (m.n == 2) {
        snprintf(q, sizeof q, "%s/emb/a.safetensors", g_dir);
        VF_CHECK_STR(m.rows[0].text_emb, q);
        VF_CHECK_EQ_INT(m.rows[0].nextra, 1); /* score only */
        VF_CHECK(m.rows[1].text_emb == NULL);
    }
    vf_manifest_fini(&m);
    path_in_dir(p, sizeof p, "t.jsonl");
    write_file(p, "{\"path\": \"a.mp4\", \"text_emb\": \"/e/a.safetensors\"}\n{\"path\": \"b.mp4\", \"text_emb\": 3}\n");
    VF_CHECK_EQ_INT(vf_manifest_load(p, 0, 1, &m, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "t.jsonl:2") && strstr(st.msg, "text_emb"), "%s", st.msg);
    vf_manifest_fini(&m);
    write_file(p, "{\"path\": \"a.mp4\", \"text_emb\": \"/e/a.safetensors\"}\n");
    vf_status_clear(&st);
    VF_CHECK_EQ_INT(vf_manifest_load(p, 0, 1, &m, &st), 0);
    if (m.n == 1) VF_CHECK_STR(m.rows[0].text_emb, "/e/a.safetensors");
    vf_manifest_fini(&m);
}

/* Paths are normalised: the same file reached by two spellings (or a symlink) gets one
 * path, hence one source identity and one cache key; a missing file is cleaned lexically. */
VF_TEST(manifest_paths_normalised)
{
    setup();
    char base[1024], p[1300], q[1300], real[1300];
    if (!realpath(g_dir, base)) { VF_CHECK(!"realpath of the test dir"); return; }
    snprintf(p, sizeof p, "%s/n", base); mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/n/samples", base); mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/n/bad", base); mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/n/samples/v.mp4", base); write_file(p, "x");
    snprintf(p, sizeof p, "%s/n/bad/x.mp4", base); write_file(p, "x");
    snprintf(real, sizeof real, "%s/n/bad/x.mp4", base);
    snprintf(q, sizeof q, "%s/n/samples/link.mp4", base);
    VF_CHECK_EQ_INT(symlink(real, q), 0);
    snprintf(p, sizeof p, "%s/n/samples/m.csv", base);
    snprintf(q, sizeof q,
             "path,text\n"
             "../bad/x.mp4,a\n"             /* exists: realpath */
             "./v.mp4,b\n"
             "sub/..//./v.mp4,c\n"          /* sub/ does not exist: lexical gives v.mp4 */
             "%s/n/samples/../bad/x.mp4,d\n" /* absolute with .. */
             "link.mp4,e\n"                 /* symlink to bad/x.mp4 */
             "../bad/./gone/../none.mp4,f\n" /* missing file: lexical */
             "../../../../../../../../../../../../../../..//tmp/../zz.mp4,g\n",
             base);
    write_file(p, q);
    vf_manifest m;
    vf_status st = {0};
    VF_CHECK_EQ_INT(vf_manifest_load(p, 0, 1, &m, &st), 0);
    VF_CHECK_EQ_INT(m.n, 7);
    if (m.n == 7) {
        char v[1300], none[1300];
        snprintf(v, sizeof v, "%s/n/samples/v.mp4", base);
        snprintf(none, sizeof none, "%s/n/bad/none.mp4", base);
        VF_CHECK_STR(m.rows[0].path, real);
        VF_CHECK_STR(m.rows[1].path, v);
        VF_CHECK_STR(m.rows[2].path, v);
        VF_CHECK_STR(m.rows[3].path, real);
        VF_CHECK_STR(m.rows[4].path, real);
        VF_CHECK_STR(m.rows[5].path, none);
        VF_CHECK_STR(m.rows[6].path, "/zz.mp4");
    }
    vf_manifest_fini(&m);
    /* a glob spelled through .. lists the same paths as the plain one */
    snprintf(p, sizeof p, "%s/n/samples/../bad/./*.mp4", base);
    VF_CHECK_EQ_INT(vf_manifest_glob(p, 0, 1, &m, &st), 0);
    VF_CHECK_EQ_INT(m.n, 1);
    if (m.n == 1) VF_CHECK_STR(m.rows[0].path, real);
    vf_manifest_fini(&m);
}

/* ------------------------------------------------------------ the group's tally */

/* A child process as a decode instance: opens the tally as shard k of 2, adds `files`
 * tried of which `bad` are bad, exits 0 when the tally was shared, else 1. */
static int tally_child(const char *dir, int k, int files, int bad)
{
    pid_t pid = fork();
    if (pid == 0) {
        vf_decode_tally t;
        char why[512];
        vf_decode_tally_open(&t, dir, "clips/", k, 2, why, sizeof why);
        for (int i = 0; i < files; i++) vf_decode_tally_add(&t, i < bad);
        int ok = t.shared;
        vf_decode_tally_close(&t);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

VF_TEST(decode_tally_across_processes)
{
    setup();
    char dir[400];
    path_in_dir(dir, sizeof dir, "tally");
    mkdir(dir, 0755);
    /* two instances of one run (children of this process) add to one tally */
    VF_CHECK_EQ_INT(tally_child(dir, 0, 5, 1), 0);
    VF_CHECK_EQ_INT(tally_child(dir, 1, 7, 2), 0);
    vf_decode_tally t;
    char why[512];
    pid_t pid = fork();
    if (pid == 0) { /* a third instance of the same run reads the sums */
        int64_t tried = -1, bad = -1;
        vf_decode_tally_open(&t, dir, "clips/", 0, 2, why, sizeof why);
        vf_decode_tally_sum(&t, &tried, &bad);
        vf_decode_tally_close(&t);
        _exit(tried == 12 && bad == 3 ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    VF_CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the run's instances sum to 12 tried, 3 bad");
    /* this process is another run's instance (another parent): its tally starts at zero */
    int64_t tried = -1, bad = -1;
    vf_decode_tally_open(&t, dir, "clips/", 1, 2, why, sizeof why);
    VF_CHECK(t.shared);
    vf_decode_tally_sum(&t, &tried, &bad);
    VF_CHECK_EQ_INT(tried, 0);
    VF_CHECK_EQ_INT(bad, 0);
    vf_decode_tally_add(&t, true);
    vf_decode_tally_sum(&t, &tried, &bad);
    VF_CHECK_EQ_INT(tried, 1);
    VF_CHECK_EQ_INT(bad, 1);
    vf_decode_tally_close(&t);
    /* a run dir it cannot write: this instance's own counts, and why */
    vf_decode_tally_open(&t, "/proc/nonexistent", "clips/", 1, 2, why, sizeof why);
    VF_CHECK(!t.shared && strstr(why, "this instance's files only"));
    vf_decode_tally_add(&t, true);
    vf_decode_tally_sum(&t, &tried, &bad);
    VF_CHECK_EQ_INT(tried, 1);
    vf_decode_tally_close(&t);
}

int main(void)
{
    int r = vf_test_main();
    if (g_dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    }
    return r;
}
