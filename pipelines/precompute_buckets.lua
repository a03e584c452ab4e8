-- Precompute VAE latents of videos of mixed aspect ratios and lengths into one LMDB cache,
-- bucketed: each video goes to the bucket nearest its aspect ratio, each clip to the
-- longest bucket length its frames allow (docs/PRECOMPUTE.md, "Buckets").
--   vflow run pipelines/precompute_buckets.lua --set source=data/samples \
--        --set cache=cache/buckets.lmdb
-- Knobs (vf.args): manifest | source (glob or dir), cache, buckets ("WxH,WxH,..."; default
-- 256x144,144x256,192x192), lengths (clip lengths of every bucket, "17,33"), batch (the
-- training batch of each length, "4,2", or one number), stride | fps, clips_per_video,
-- workers, max_bad_fraction, micro_batch, chunk, vae (preset), weights, device, text_dim,
-- text_len, tensorboard. Instead of buckets/lengths/batch, bucket_config: Open-Sora's table
-- as Lua text (--set 'bucket_config={["256"]={[17]={1.0,4},[33]={0.5,2}}}'), with seed. Other params: --set decode.PARAM=v, --set vae_encode.PARAM=v,
-- --set latent_cache.PARAM=v.
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline(a.name or "precompute_buckets", { tensorboard = a.tensorboard })

-- "17,33" or 17 -> {17, 33}
local function numbers(v, what)
  local out = {}
  for tok in tostring(v):gmatch("[^,%s]+") do
    local n = math.tointeger(tonumber(tok))
    if not n then vf.fail("precompute_buckets: %s: '%s' is not an integer", what, tok) end
    out[#out + 1] = n
  end
  if #out == 0 then vf.fail("precompute_buckets: %s is empty", what) end
  return out
end

local lengths = numbers(a.lengths or "17,33", "lengths")
local batch = numbers(a.batch or "4,2", "batch")
if #batch == 1 then batch = batch[1] end
local config
if a.bucket_config ~= nil then
  local chunk, err = load("return " .. tostring(a.bucket_config), "bucket_config", "t", {})
  if not chunk then vf.fail("precompute_buckets: bucket_config is not a Lua table: %s", err) end
  config = chunk()
  if type(config) ~= "table" then vf.fail("precompute_buckets: bucket_config is not a Lua table") end
end
local buckets = {}
for spec in tostring(a.buckets or "256x144,144x256,192x192"):gmatch("[^,%s]+") do
  local w, h = spec:match("^(%d+)x(%d+)$")
  if not w then vf.fail("precompute_buckets: bucket '%s' is not WxH", spec) end
  buckets[#buckets + 1] = { w = tonumber(w), h = tonumber(h), frames = lengths, batch = batch }
end

local clips = p:stage("decode", {
  manifest = a.manifest or (a.source == nil and "data/samples/manifest.csv" or nil), -- both: refused
  source = a.source,
  buckets = config == nil and buckets or nil,
  bucket_config = config,
  seed = a.seed,
  stride = a.stride or 1,
  fps = a.fps,
  clips_per_video = a.clips_per_video or 0,
  max_bad_fraction = a.max_bad_fraction,
  workers = a.workers or 2,
  text_dim = a.text_dim,
  text_len = a.text_len,
})
local cache_path = a.cache or "cache/buckets.lmdb"
local vae = p:stage("vae_encode", {
  model = vf.models.vae(a.vae or "tiny"),
  weights = a.weights,
  micro_batch = a.micro_batch or 2,
  chunk = a.chunk or 4,
  device = a.device or "cpu",
  skip_cached = cache_path,
})
-- the cache warns about a bucket no video reached ("<W>x<H>x<F>"); bucket_config's buckets
-- are expanded by the decoder, so its clip counts per bucket are in the decoders' log
local names = {}
for _, b in ipairs(config == nil and buckets or {}) do
  for _, f in ipairs(b.frames) do names[#names + 1] = string.format("%dx%dx%d", b.w, b.h, f) end
end
local cache = p:stage("latent_cache", { path = cache_path, buckets = #names > 0 and names or nil })

p:connect(clips, vae, { capacity = 4 })
p:connect(vae, cache, { capacity = 8 })
return p
