-- Plan-only example (docs/PLANNING.md): full fine-tune of Wan-2.1 T2V-14B on one node of
-- 8 x 80 GB GPUs: 8 pipeline partitions (5 of the 40 blocks each, one per GPU), 1F1B
-- over 8 micro-batches of one 81x480x832 clip (32,760 video tokens), recompute, and the
-- AdamW state (f32 master + moments: 12 bytes per parameter) in 8 shards, shard k next to
-- partition k.
--
--   vflow plan pipelines/plan_wan14b_8x80.lua --budget cuda=80GiB,cpu=2TiB   # fits: 46.0-68.1 GiB per GPU, 4.5 GiB of host
--   vflow plan pipelines/plan_wan14b_8x80.lua --budget cuda=40GiB,cpu=2TiB   # exit 2: over; lists the fixes
--   vflow plan pipelines/plan_wan14b_8x80.lua --budget cuda=80GiB,cpu=512GiB --set offload=true   # fits: 25.4-47.5 GiB per GPU, 165 GiB of host
--
-- Each partition lends its bf16 weights and gradients to the shards, which update them in
-- place: 16 bytes of state per parameter on every GPU (the plan's "state per parameter").
-- offload = true puts the shards in host memory, leaving only bf16 weights, gradients and
-- activations on the GPUs: the shards read the partitions' bf16 gradients and write bf16
-- weights through bounded chunk buffers (one copy each way), their f32 master and moments
-- on the host.
-- It names cuda:0..7 and a cache that need not exist: `vflow plan` works anywhere,
-- `vflow run` needs the GPUs and the cache.
-- --set model=wan-i2v-14b plans Wan 2.1 I2V-14B instead (docs/PLANNING.md).
--   # on ONE 80 GB GPU: the optimizer on the host, 10 of the 40 blocks swapped (79.33 GiB)
--   vflow plan pipelines/plan_wan14b_8x80.lua --set gpus=1 --set stages=1 --set shards=1 \
--        --set micro_batches=1 --set offload=true --set swap_blocks=auto --budget cuda=80GiB,cpu=2TiB
-- Knobs (vf.args): model (wan-14b), stages (8), gpus (8), micro_batches (8), recompute (true),
-- recompute_attention (false), shards (8), offload (false), swap_blocks (0; a number or
-- "auto": block swap, README "Block swap"), frames (81), size (832x480, WxH), cache.
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "wan14b_8x80"

local T = 1 + ((a.frames or 81) - 1) // 4
local W, H = vf.size(a.size or "832x480", "size")
local h, w = H // 8, W // 8
local model = vf.models.dit(a.model or "wan-14b")  -- wan-i2v-14b: Wan 2.1 I2V-14B, the same shapes and the image branch
local P, G = a.stages or 8, a.gpus or 8
local M = a.micro_batches or 8

local devices = {}
for q = 1, P do devices[q] = "cuda:" .. ((q - 1) * G // P) end  -- partitions spread over the GPUs

local data = p:stage("latent_reader", {
  path = a.cache or "cache/wan480p.lmdb",
  batch = M,                                       -- one clip per micro-batch
  text_len = model.text_len,
  latent_shape = { model.z, T, h, w },
})
local dit = p:pipeline_parallel(model, {
  stages = P,
  micro_batches = M,
  recompute = a.recompute ~= false,
  recompute_attention = a.recompute_attention == true,
  swap_blocks = a.swap_blocks or 0,
  devices = devices,
})
local S = a.shards or 8
local opt = p:stage("adamw", { lr = 1e-5, shards = S, device = "cpu" })
if a.offload ~= true then   -- shard k on GPU k; offload = true keeps them in host memory
  for k, s in ipairs(opt.members) do s.params.device = "cuda:" .. ((k - 1) * G // S) end
end
local ckpt = p:stage("checkpoint", { dir = "runs/wan14b_8x80/ckpt", every = 250, keep = 2 })
p:train { data = data, model = dit, optimizer = opt, checkpoint = ckpt, steps = 10000 }
return p
