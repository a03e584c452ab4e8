-- Precompute VAE latents of a folder or manifest of videos into an LMDB cache.
--   vflow run pipelines/precompute_latents.lua --set manifest=data/samples/manifest.csv \
--        --set cache=cache/latents.lmdb --set frames=17 --set size=64
-- Knobs (vf.args): manifest | source (glob), cache, frames, stride | fps, size, workers,
-- clips_per_video, max_bad_fraction, micro_batch, chunk, vae (preset name), weights (VAE
-- safetensors file or diffusers directory), device, text_dim (width of the text embeddings
-- named by the manifest column text_emb; docs/PRECOMPUTE.md), text_len, tensorboard (false: no
-- event files in <run dir>/tb/), first_frame (true: image-to-video, each entry also holds "y",
-- the latent of [first frame, zeros]; docs/PRECOMPUTE.md), image_dim / image_len (Wan 2.1 I2V:
-- the CLIP image features the manifest column clip_emb names, 1280 / 257), ti2v (true: image-to-video
-- by the first frame, Wan 2.2 TI2V: the entries are of kind first_frame). Other params: --set decode.PARAM=v (every decode instance),
-- --set vae_encode.PARAM=v, --set latent_cache.PARAM=v.
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline(a.name or "precompute", { tensorboard = a.tensorboard })

local W, H = vf.size(a.size or 64, "size")
local clips = p:stage("decode", {
  manifest = a.manifest or (a.source == nil and "data/samples/manifest.csv" or nil), -- both: refused
  source = a.source,
  frames = a.frames or 17,
  stride = a.stride or 1,
  fps = a.fps, -- target frame rate: sample by timestamp instead of stride
  size = { W, H },
  clips_per_video = a.clips_per_video or 0,
  max_bad_fraction = a.max_bad_fraction, -- per decode instance (default 0.1)
  workers = a.workers or 2,
  text_dim = a.text_dim, -- > 0: every row names its caption's embedding (column text_emb)
  text_len = a.text_len,
  image_dim = a.image_dim, -- > 0: every row names its first frame's CLIP features (column clip_emb)
  image_len = a.image_len,
})
local cache_path = a.cache or "cache/latents.lmdb"
local vae = p:stage("vae_encode", {
  model = vf.models.vae(a.vae or "tiny"),
  weights = a.weights,
  micro_batch = a.micro_batch or 2,
  chunk = a.chunk or 4,
  device = a.device or "cpu",
  first_frame = a.first_frame, -- image-to-video: also the first-frame latent "y"
  ti2v = a.ti2v, -- image-to-video by the first frame: the latents' frame 0 is the image's
  skip_cached = cache_path, -- a rerun drops clips the cache holds before encoding them
})
local cache = p:stage("latent_cache", { path = cache_path })

p:connect(clips, vae, { capacity = 4 })
p:connect(vae, cache, { capacity = 8 })
return p
