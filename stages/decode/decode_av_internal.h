/* decode_av_internal.h — the open file's state, shared by opening and indexing
 * (decode_av.c) and seeking and decoding (decode_av_read.c). Private to those two. */
#ifndef VF_DECODE_AV_INTERNAL_H
#define VF_DECODE_AV_INTERNAL_H

#include "stages/decode/decode_av.h"
#include "stages/decode/decode_scale.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <stdbool.h>

#define SEEK_RETRIES 3

struct vf_decode_file {
    char *path;
    vf_decode_opts o;
    vf_decode_info info;
    AVFormatContext *fmt;
    AVCodecContext *dec;
    int vs;                  /* video stream index */
    AVRational tb;           /* its time base */
    int64_t n;               /* indexed frames */
    int64_t *ts;             /* (n) presentation timestamps, sorted (pts mode) */
    double *times;           /* (n) seconds from frame 0 */
    int64_t *keys;           /* presentation indices of keyframes, sorted */
    int64_t nkeys;
    vf_decode_orient orient;
    vf_decode_scaler *scaler;
    AVPacket *pkt;
    AVFrame *frm;
    /* decoder position */
    int64_t next;            /* index the decoder delivers next; -1 unknown (seek first) */
    bool need_reopen;        /* count mode: restart from the file's first byte */
    bool demux_eof;
    double deadline;         /* CLOCK_MONOTONIC seconds; 0 none */
    double progress;         /* when the decoder last delivered a frame (stall watchdog) */
    bool timed_out;
    bool stalled;            /* the interrupt callback ended I/O for lack of progress */
    int64_t lost_from, lost_to; /* frames the last read proved unreadable; from < 0: none */
    int64_t errors;          /* decoder errors during the current read */
    char last_err[256];
    bool pending;            /* f->pkt holds a packet the decoder has not taken yet */
    int eof_errors;          /* decode errors while draining after the end of the file */
    char damaged[240];       /* first truncation/damage report of the demuxer during the scan */
    vf_decode_stats stats;
};

/* no frame for stall_s: the progress watchdog's test */
bool vf_decode_stalled(const vf_decode_file *f, double now);
/* CLOCK_MONOTONIC seconds */
double vf_decode_now_s(void);
/* the last libav log line captured for this thread's file, moved into buf */
void vf_decode_log_take(char *buf, size_t n);
/* a deadline or stall ends the file: the reason in st, VF_ETIMEOUT */
int vf_decode_timeout_fail(vf_decode_file *f, const char *when, vf_status *st);
/* (re)opening the demuxer and decoder of f->path; closing them */
int vf_decode_open_input(vf_decode_file *f, vf_status *st);
void vf_decode_close_input(vf_decode_file *f);

#endif
