/* decode_av_read.c — seeking and decoding frames of an opened file (see decode_av.h):
 * the libav send/receive state machine (a packet refused with EAGAIN is kept until the
 * decoder has been drained), frames mapped back to their index by timestamp, and frames
 * proven unreadable reported instead of replaced. */
#include "stages/decode/decode_av_internal.h"

#include <errno.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ read */

/* Largest keyframe position (in f->keys) whose frame index is <= idx; -1 if none. */
static int64_t key_pos(const vf_decode_file *f, int64_t idx)
{
    int64_t lo = 0, hi = f->nkeys - 1, ans = -1;
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        if (f->keys[mid] <= idx) { ans = mid; lo = mid + 1; }
        else hi = mid - 1;
    }
    return ans;
}

static int reopen(vf_decode_file *f, vf_status *st)
{
    vf_decode_close_input(f);
    f->stats.seeks++;
    f->need_reopen = false;
    f->next = 0;
    return vf_decode_open_input(f, st);
}

/* Positions the decoder so the next frames it delivers are at or before idx:
 * `back` keyframes earlier than the one at/below idx; past the first keyframe, the
 * file is reopened from the start. */
static int seek_to(vf_decode_file *f, int64_t idx, int back, vf_status *st)
{
    int64_t kp = key_pos(f, idx) - back;
    if (kp < 0) return reopen(f, st);
    int e = av_seek_frame(f->fmt, f->vs, f->ts[f->keys[kp]], AVSEEK_FLAG_BACKWARD);
    if (e < 0) {
        if (f->timed_out) return vf_decode_timeout_fail(f, "seeking", st);
        return reopen(f, st); /* an unseekable container still plays from the start */
    }
    avcodec_flush_buffers(f->dec);
    if (f->pending) av_packet_unref(f->pkt);
    f->pending = false;
    f->stats.seeks++;
    f->demux_eof = false;
    f->next = -1;
    return 0;
}

/* Index of a decoded frame: by count in output order, or by timestamp — the indexed
 * frame nearest to it within half a frame interval (a decoder's timestamps may sit a
 * fraction of a tick off the packets', in any time base). -1: none that near. */
static int64_t frame_index(vf_decode_file *f, const AVFrame *fr, int64_t *counted)
{
    if (!f->info.has_pts) return (*counted)++;
    int64_t t = fr->best_effort_timestamp;
    if (t == AV_NOPTS_VALUE) t = fr->pts;
    if (t == AV_NOPTS_VALUE || f->n == 0) return -1;
    int64_t lo = 0, hi = f->n; /* first index with ts >= t */
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (f->ts[mid] < t) lo = mid + 1;
        else hi = mid;
    }
    int64_t best = -1;
    double bd = 0;
    for (int64_t c = lo - 1; c <= lo; c++) {
        if (c < 0 || c >= f->n) continue;
        double d = (double)(t > f->ts[c] ? t - f->ts[c] : f->ts[c] - t);
        if (best < 0 || d < bd) best = c, bd = d; /* ties: the earlier one */
    }
    /* half the interval to the neighbour on that side (the frame's own duration) */
    int64_t nb = (double)t >= (double)f->ts[best] ? best + 1 : best - 1;
    double half;
    if (nb >= 0 && nb < f->n) half = 0.5 * (double)(f->ts[nb] > f->ts[best] ? f->ts[nb] - f->ts[best] : f->ts[best] - f->ts[nb]);
    else half = 0.5 / (f->info.fps * av_q2d(f->tb));
    return bd <= half ? best : -1;
}

static void note_err(vf_decode_file *f, const char *what, int e)
{
    char eb[64], lg[160];
    f->errors++;
    vf_decode_log_take(lg, sizeof lg);
    if (e) av_strerror(e, eb, sizeof eb);
    snprintf(f->last_err, sizeof f->last_err, "%s%s%s%s%s", what, e ? ": " : "", e ? eb : "",
             lg[0] ? "; libav: " : "", lg);
}

/* Pulls the next decoded frame into f->frm: 0 ok, VF_EOS decoder drained, negative on
 * timeout or stall. The send/receive state machine of libavcodec: receive until it says
 * EAGAIN (it wants input), then feed the next video packet; a packet the decoder will
 * not take yet (EAGAIN: frames are waiting) is kept and offered again after the next
 * receive, never dropped or re-sent in a loop; at the end of the file the decoder is
 * flushed (a NULL packet) and drained to EOF. Demux and decode errors are noted and
 * decoding goes on: whether they cost a wanted frame is decided by the caller. */
static int pull_frame(vf_decode_file *f, vf_status *st)
{
    for (;;) {
        double now = vf_decode_now_s();
        if (f->deadline > 0 && now > f->deadline) return vf_decode_timeout_fail(f, "decoding", st);
        if (vf_decode_stalled(f, now)) return vf_decode_timeout_fail(f, "decoding", st);
        int e = avcodec_receive_frame(f->dec, f->frm);
        if (e == 0) {
            f->progress = vf_decode_now_s();
            return 0;
        }
        if (e == AVERROR_EOF) return VF_EOS;
        if (e != AVERROR(EAGAIN)) {
            note_err(f, "decode error", e);
            if (f->demux_eof && ++f->eof_errors > 64) return VF_EOS; /* a decoder that will not drain */
            continue;
        }
        if (f->demux_eof) return VF_EOS; /* cannot happen after a flush packet; be safe */
        if (!f->pending) {
            e = av_read_frame(f->fmt, f->pkt);
            if (e < 0) {
                if (f->timed_out) return vf_decode_timeout_fail(f, "reading", st);
                if (e != AVERROR_EOF) note_err(f, "read error", e);
                f->demux_eof = true;
                f->eof_errors = 0;
                avcodec_send_packet(f->dec, NULL);
                continue;
            }
            if (f->pkt->stream_index != f->vs) {
                av_packet_unref(f->pkt);
                continue;
            }
            f->pending = true;
        }
        e = avcodec_send_packet(f->dec, f->pkt);
        if (e == AVERROR(EAGAIN)) continue; /* keep the packet: receive first, then offer it again */
        if (e < 0) note_err(f, "decode error", e);
        av_packet_unref(f->pkt);
        f->pending = false;
    }
}

/* True when the frame is to be dropped. A flagged frame kept (err_detect conceal, as
 * ffmpeg keeps it) marks the file damaged instead. */
static bool frame_damaged(vf_decode_file *f, const AVFrame *fr)
{
    bool flagged = (fr->flags & AV_FRAME_FLAG_CORRUPT) || fr->decode_error_flags != 0;
    if (!flagged) return false;
    if (f->o.err_detect >= VF_DECODE_ERR_CAREFUL) return true;
    if (!f->info.damaged) {
        int64_t ts = fr->best_effort_timestamp;
        if (ts != AV_NOPTS_VALUE)
            snprintf(f->info.damage, sizeof f->info.damage,
                     "frame at %.3f s decoded with errors (concealed)", ts * av_q2d(f->tb));
        else
            snprintf(f->info.damage, sizeof f->info.damage, "a frame decoded with errors (concealed)");
        f->info.damaged = true;
    }
    return false;
}

/* Fails the read: frames [from, to) are proven unreadable. */
static int lost(vf_decode_file *f, int64_t from, int64_t to, vf_status *st)
{
    f->lost_from = from;
    f->lost_to = to;
    f->next = -1;
    f->need_reopen = !f->info.has_pts;
    const char *why = f->last_err[0] ? f->last_err : "the decoder did not deliver them";
    if (to - from == 1)
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "frame %lld (%.3f s) unreadable: %s",
                             (long long)from, f->times[from], why);
    return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__, "frames %lld..%lld (%.3f..%.3f s) unreadable: %s",
                         (long long)from, (long long)(to - 1), f->times[from], f->times[to - 1], why);
}

int vf_decode_read(vf_decode_file *f, const int64_t *idx, int n, uint8_t *out, vf_status *st)
{
    int rc = 0;
    const size_t fb = (size_t)f->o.out_w * f->o.out_h * 3;
    if (n <= 0) return 0;
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= f->n || (i && idx[i] <= idx[i - 1]))
            VF_FAIL(st, VF_EINVAL, "decode: frame list not increasing within [0, %lld)", (long long)f->n);
    f->errors = 0;
    f->last_err[0] = 0;
    f->lost_from = -1;
    memset(&f->stats, 0, sizeof f->stats);
    vf_decode_log_take(NULL, 0);
    f->progress = vf_decode_now_s();
    int64_t counted = f->next > 0 ? f->next : 0;
    /* prev: the index last delivered, when the decoder is known to deliver prev + 1
     * next (continuing, or from the file's start); gaps after it are unreadable frames */
    bool known = f->next >= 0;
    int64_t prev = f->next - 1;
    if (!f->info.has_pts) {
        if (f->need_reopen || f->next < 0 || idx[0] < f->next) {
            VF_TRY(reopen(f, st));
            counted = 0;
            known = true, prev = -1;
        }
    } else {
        int64_t kp = key_pos(f, idx[0]);
        bool key_between = kp >= 0 && f->keys[kp] > f->next;
        if (f->next < 0 || idx[0] < f->next || key_between) {
            VF_TRY(seek_to(f, idx[0], 0, st));
            known = f->next == 0; /* a reopen starts at frame 0; a seek lands near a keyframe */
            prev = -1;
        }
    }
    int w = 0, back = 0;
    bool fresh = !known; /* just sought: the first frame tells where we landed */
    while (w < n) {
        rc = pull_frame(f, st);
        if (rc == VF_EOS) {
            rc = 0;
            break;
        }
        if (rc < 0) goto fail;
        f->stats.frames_decoded++;
        if (frame_damaged(f, f->frm)) {
            /* dropped at err_detect careful: in count mode it takes no number (the next
             * frame is the next readable one); by timestamp its slot is unreadable */
            note_err(f, "frame flagged corrupt by the decoder", 0);
            int64_t p = f->info.has_pts ? frame_index(f, f->frm, &counted) : -1;
            av_frame_unref(f->frm);
            if (p >= 0 && known && p > prev) return lost(f, prev + 1, p + 1, st);
            continue;
        }
        if ((int64_t)f->frm->width * f->frm->height > f->o.max_pixels) {
            av_frame_unref(f->frm);
            VF_FAIL(st, VF_EBADINPUT, "frame size %dx%d exceeds max_pixels=%lld", f->frm->width,
                    f->frm->height, (long long)f->o.max_pixels);
        }
        int64_t p = frame_index(f, f->frm, &counted);
        if (p < 0 || p >= f->n) {
            note_err(f, "decoded frame with a timestamp not in the index", 0);
            av_frame_unref(f->frm);
            if (p >= f->n) break; /* more frames than packets (count mode): not indexed */
            continue;
        }
        if (known && p <= prev) { /* a repeat of a frame already passed (timestamp jitter) */
            av_frame_unref(f->frm);
            continue;
        }
        if (fresh) {
            fresh = false;
            if (p > idx[w]) { /* landed after the wanted frame: start from an earlier keyframe */
                av_frame_unref(f->frm);
                if (++back > SEEK_RETRIES) {
                    /* from the first byte: what still comes after idx[w] is all there is */
                    VF_TRY(reopen(f, st));
                    counted = 0;
                    known = true, prev = -1;
                    continue;
                }
                VF_TRY(seek_to(f, idx[w], back, st));
                if (f->next == 0) { /* it went back to the first byte */
                    counted = 0;
                    known = true, prev = -1;
                } else {
                    fresh = true;
                }
                continue;
            }
            known = true;
            prev = p - 1;
        }
        if (known && p > prev + 1) {
            av_frame_unref(f->frm);
            return lost(f, prev + 1, p, st);
        }
        prev = p;
        f->next = p + 1;
        if (p < idx[w]) {
            av_frame_unref(f->frm);
            continue;
        }
        rc = vf_decode_scaler_run(f->scaler, f->frm, out + (size_t)w * fb, st);
        av_frame_unref(f->frm);
        if (rc < 0) goto fail;
        w++;
    }
    if (w < n) /* the stream ended before idx[w]: nothing after the last frame is readable */
        return lost(f, known ? prev + 1 : idx[w], f->n, st);
    return 0;
fail:
    f->next = -1;
    if (!f->info.has_pts) f->need_reopen = true;
    return rc;
}
