/* image_read.h — reads one still image (PNG, JPEG, WebP, BMP, … whatever libavformat
 * probes as an image) as packed RGB24: the input image of image-to-video sampling.
 *
 * The pixels are the decoder's, converted to RGB24 without resampling (an alpha channel
 * is dropped, as PIL's convert("RGB") drops it), so the size is the file's own: callers
 * that need another size say so rather than resize behind the user's back.
 */
#ifndef VF_FORMATS_IMAGE_READ_H
#define VF_FORMATS_IMAGE_READ_H

#include "runtime/vflow.h"

#include <stdint.h>

/* Largest image accepted, in pixels (width · height). */
#define VF_IMAGE_MAX_PIXELS (8192 * 8192)

/* Reads the first picture of the file at path into *rgb (caller frees with free();
 * height rows of width·3 bytes) and its size into *width, *height. VF_EBADINPUT with
 * "PATH: what is wrong" for a missing or unreadable file, one libav cannot decode as a
 * picture, or one larger than VF_IMAGE_MAX_PIXELS; VF_ENOMEM when out of memory. */
int vf_image_read(const char *path, uint8_t **rgb, int *width, int *height, vf_status *st);

#endif
