/* video_source.c — video extensions and same-stem captions of a folder of clips
 * (video_source.h). */
#include "formats/video_source.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Containers and raw streams libavformat opens by content; the extension only decides
 * what a folder listing takes, so one missing here is a file skipped, never misread. */
static const char *const video_ext[] = {
    "mp4", "m4v",  "mov", "qt",  "mkv", "webm", "avi", "flv",  "f4v",  "wmv", "asf",  "mpg",
    "mpeg", "mpe", "m2v", "ts",  "mts", "m2ts", "vob", "3gp",  "3g2",  "ogv", "ogg",  "gif",
    "mxf", "dv",   "nut", "y4m", "ivf", "h264", "264", "hevc", "h265", "265", "mjpeg", "mjpg",
    "rm",  "rmvb", "divx", NULL};

bool vf_source_is_video(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash + 1 : path, '.');
    if (!dot || dot[1] == 0) return false;
    for (int i = 0; video_ext[i]; i++)
        if (strcasecmp(dot + 1, video_ext[i]) == 0) return true;
    return false;
}

int vf_source_caption(const char *video_path, char **out, vf_status *st)
{
    int rc = 0;
    FILE *fp = NULL;
    char *txt = NULL, *buf = NULL;
    *out = NULL;
    const char *slash = strrchr(video_path, '/');
    const char *dot = strrchr(slash ? slash + 1 : video_path, '.');
    size_t stem = dot ? (size_t)(dot - video_path) : strlen(video_path);
    if (!(txt = malloc(stem + 5))) VF_FAIL(st, VF_ENOMEM, "decode: out of memory");
    memcpy(txt, video_path, stem);
    memcpy(txt + stem, ".txt", 5);
    if (!(fp = fopen(txt, "rb"))) {
        if (errno == ENOENT) goto fail; /* no caption: rc 0 */
        VF_FAIL(st, VF_EBADINPUT, "caption %s: %s", txt, strerror(errno));
    }
    if (!(buf = malloc(VF_CAPTION_FILE_MAX + 1))) VF_FAIL(st, VF_ENOMEM, "decode: out of memory");
    size_t n = fread(buf, 1, VF_CAPTION_FILE_MAX + 1, fp);
    if (ferror(fp)) VF_FAIL(st, VF_EBADINPUT, "caption %s: read error", txt);
    if (n > VF_CAPTION_FILE_MAX)
        VF_FAIL(st, VF_EBADINPUT, "caption %s: longer than %d bytes", txt, VF_CAPTION_FILE_MAX);
    size_t a = 0;
    while (a < n && isspace((unsigned char)buf[a])) a++;
    while (n > a && isspace((unsigned char)buf[n - 1])) n--;
    memmove(buf, buf + a, n - a);
    buf[n - a] = 0;
    *out = buf;
    buf = NULL;
    rc = 1;
fail:
    if (fp) fclose(fp);
    free(buf);
    free(txt);
    return rc;
}
