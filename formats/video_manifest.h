/* video_manifest.h — the list of videos a decode instance reads (stage kind `decode`,
 * stages/decode/), as users write it.
 *
 * Three sources:
 *  - CSV with a header row (RFC 4180 quoting: "a, ""b""" and newlines inside quotes).
 *    Columns: `path` (or `file_name`), optional `text` (or `caption`), `start`, `end`
 *    (seconds), `fps` (frame rate to assume for files without timestamps) and
 *    `text_emb` (a safetensors file holding the caption's text embedding, one tensor
 *    (L, D); relative to the manifest like `path`; see stages/decode/decode.c),
 *    `clip_emb` (the same for the CLIP image features of the row's first frame, one
 *    tensor (L, D), for image-to-video: tools/encode_images.py writes them); every
 *    other column (Open-Sora's num_frames, height, aspect_ratio, ...) passes through to
 *    the items' metadata as text.
 *  - JSONL (`.jsonl`, or a first character `{`): one flat object per line with the same
 *    keys; string, number and boolean values; other keys pass through.
 *  - a glob pattern (`source`, with * ? [] {} wildcards), matches sorted; or a folder
 *    (`source` = a directory): its video files, recognised by extension
 *    (video_source.h), the other files skipped and counted. Either way a video's
 *    caption is the same-stem `.txt` beside it (clip1.mp4 + clip1.txt), "" without one.
 * Relative paths in a manifest are relative to the manifest's directory; every path is
 * made absolute and normalised (realpath when the file exists, else lexically: "a/./b",
 * "a//b", "a/x/../b" -> "a/b"), so one file reached by two paths has one identity. Rows are dealt to instances round-robin: row i goes to shard
 * i % nshards, so each file is read by exactly one decode instance.
 */
#ifndef VF_VIDEO_MANIFEST_H
#define VF_VIDEO_MANIFEST_H
#include "runtime/vflow.h"

typedef struct vf_manifest_extra {
    char *key, *val;
    bool is_num;              /* a JSON number: val is its text */
} vf_manifest_extra;

typedef struct vf_manifest_row {
    char *path;               /* absolute, normalised */
    char *caption;            /* "" when none */
    char *text_emb;           /* absolute path of the text embedding file; NULL when none */
    char *clip_emb;           /* absolute path of the CLIP image features file; NULL when none */
    double start_s, end_s;    /* <= 0: not given */
    double fps;               /* <= 0: not given */
    int line;                 /* line of the manifest (1-based; 0 for a glob) */
    int nextra;
    vf_manifest_extra *extra;
} vf_manifest_row;

typedef struct vf_manifest {
    char *origin;             /* manifest path or glob pattern, for messages */
    int64_t total;            /* rows in the whole manifest (all shards) */
    int64_t n;                /* rows of this shard */
    int64_t skipped;          /* a folder's files that are neither videos nor their captions */
    int64_t captioned;        /* videos (all shards) with a same-stem .txt caption */
    vf_manifest_row *rows;
} vf_manifest;

/* Loads this shard's rows of a CSV / JSONL manifest. Errors (missing file, no `path`
 * column, a malformed row) are VF_EBADINPUT with "file:line: what". The caller owns
 * *out and calls vf_manifest_fini, also after a failure. */
int vf_manifest_load(const char *path, int shard, int nshards, vf_manifest *out,
                     vf_status *st);
/* Same from a glob pattern or a directory; no match (a directory: no video file) and a
 * caption file that cannot be read are VF_EBADINPUT. */
int vf_manifest_glob(const char *pattern, int shard, int nshards, vf_manifest *out,
                     vf_status *st);
void vf_manifest_fini(vf_manifest *m);

/* The manifest at `path` is a regular file this process can read; otherwise VF_EBADINPUT
 * "manifest PATH: why". A check before any worker starts, so a missing manifest does not
 * leave an empty cache behind. */
int vf_manifest_check(const char *path, vf_status *st);

/* Heap bytes vf_manifest_load / _glob will hold for `src` (an estimate from the file
 * size and line count, or the matches of the glob), for the memory hook. */
int64_t vf_manifest_bytes(const char *manifest, const char *glob_pattern, int nshards);
#endif
