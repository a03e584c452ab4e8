/* video_source.h — a folder of clips as users keep it (musubi-tuner, diffusion-pipe):
 * video files recognised by their extension, each with its caption in a same-stem `.txt`
 * beside it (clip1.mp4 + clip1.txt). video_manifest.c lists a `source` directory with
 * these; the other files of the folder are skipped and counted, never decoded. */
#ifndef VF_VIDEO_SOURCE_H
#define VF_VIDEO_SOURCE_H
#include "runtime/vflow.h"

/* Largest caption file read (a caption past it is refused): the item's metadata bound. */
#define VF_CAPTION_FILE_MAX (60 * 1024)

/* True when `path` ends in an extension of a video container or stream libav reads
 * (.mp4, .mkv, .webm, .mov, .avi, …; case-insensitive). */
bool vf_source_is_video(const char *path);

/* The caption of a video: the text of the same-stem `.txt` beside it (clip1.mp4 ->
 * clip1.txt), surrounding whitespace trimmed. 1: *out is a new string the caller frees;
 * 0: no such file (*out NULL); VF_EBADINPUT: the file cannot be read or is longer than
 * VF_CAPTION_FILE_MAX (st names it); VF_ENOMEM. */
int vf_source_caption(const char *video_path, char **out, vf_status *st);
#endif
