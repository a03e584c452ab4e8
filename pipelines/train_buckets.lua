-- Train a video DiT on a bucketed latent cache: clips of several resolutions and lengths,
-- each batch from one bucket with that bucket's batch size (docs/TRAINING.md, "Buckets").
-- The DiT sizes its buffers once for the largest micro-batch over the buckets; `vflow plan`
-- lists every bucket's own peak and refuses one that does not fit the budget.
--
--   vflow plan pipelines/train_buckets.lua --set cache=cache/buckets.lmdb
--   vflow run  pipelines/train_buckets.lua --set cache=cache/buckets.lmdb --set steps=10
--   vflow run  pipelines/train_buckets.lua --set cache=cache/buckets.lmdb --set steps=10 --set admission=shrink --run-dir runs/shrink
--
-- (5 s a step on the CPU backend of a shared 2-core VM, 2026-11-27: the buckets' clips are
-- 256x144 and 144x256 at 17 and 33 frames; a GPU, --set device=cuda:0, is where such a
-- run belongs)
--
-- Knobs (vf.args), beside train_dit.lua's model, steps, stages, micro_batches, recompute,
-- shards, lr, every, keep, seed, device:
--   cache          bucketed LMDB latent cache (entries with "bucket" metadata)  (cache/buckets.lmdb)
--   batch          batch of a bucket that neither the cache nor `buckets` sizes  (4)
--   admission      a bucket over the budget: "refuse" (exit 2) or "shrink"       (refuse)
--   only           train on this bucket alone ("WxHxF"), e.g. to measure it      (all)
-- The cache's summary names its buckets and their batch sizes. To plan before the cache
-- exists, declare them on the reader, the same way (a batch per length, or one number):
--   buckets = { { w = 256, h = 144, frames = {17, 33}, batch = {4, 2} },
--               { w = 144, h = 256, frames = {17, 33}, batch = {4, 2} } }
-- (or on the command line: --set 'latent_reader.buckets=[{"w":256,"h":144,"frames":[17],"batch":4}]').
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline(a.run or "train_buckets")

local overrides = {}
for _, k in ipairs { "dim", "depth", "heads", "head_dim", "ffn", "text_len" } do
  if a[k] ~= nil then overrides[k] = a[k] end
end
local model = vf.models.dit(a.model or "tiny", overrides)
local seed = a.seed or 0

local data = p:stage("latent_reader", {
  path = a.cache or "cache/buckets.lmdb",
  batch = a.batch or 4,
  seed = seed,
  text_len = model.text_len,
  admission = a.admission or "refuse",
  only = a.only or "",
})
local dit = p:pipeline_parallel(model, {
  stages = a.stages or 2,
  micro_batches = a.micro_batches or 2,
  recompute = a.recompute == true,
  devices = a.device or "cpu",
})
local opt = p:stage("adamw", {
  lr = a.lr or 1e-3,
  weight_decay = 0.01,
  clip_grad = 1.0,
  shards = a.shards or 1,
  device = a.device or "cpu",
})
local ckpt = p:stage("checkpoint", { every = a.every or 50, keep = a.keep or 2 })
p:train { data = data, model = dit, optimizer = opt, checkpoint = ckpt, steps = a.steps or 200, seed = seed }
return p
