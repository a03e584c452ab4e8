-- Plan-only example (docs/PLANNING.md): full fine-tune of Wan-2.1 T2V-14B at 81x720x1280
-- (latents (16, 21, 90, 160): 75,600 video tokens a clip) on one node of 8 x 80 GB GPUs,
-- pipeline parallelism composed with Ulysses sequence parallelism: `stages` partitions of
-- the 40 blocks, each run as `sp` ranks on GPUs of their own, each rank holding 1/sp of
-- every clip's tokens; 1F1B over micro-batches of one clip, recompute, the AdamW state in
-- 8 shards, shard k on GPU k.
--
--   vflow plan pipelines/plan_wan14b_720p_sp.lua --budget cuda=80GiB,cpu=2TiB   # fits: 63.5-72.0 GiB per GPU
--   vflow plan pipelines/plan_wan14b_720p_sp.lua --budget cuda=80GiB,cpu=2TiB --set sp=1 \
--        --set stages=8                                                           # exit 2: PP alone, 115.4 GiB on cuda:0
--   vflow plan pipelines/plan_wan14b_720p_sp.lua --budget cuda=80GiB,cpu=2TiB --set stages=4 --set sp=2   # exit 2
--
-- Partition q's rank k runs on cuda:(k·stages + q). With sp = 1 and stages = 8 this is
-- pipelines/plan_wan14b_8x80.lua at 720p.
-- It names cuda:0..7 and a cache that need not exist: `vflow plan` works anywhere; `vflow
-- run` refuses sp > 1 on GPUs before it starts anything (the CPU backend runs it).
-- Knobs (vf.args): stages (2), sp (4), gpus (8), micro_batches (8), recompute (true),
-- recompute_attention (false), offload_activations (false), shards (8), frames (81),
-- size (1280x720, WxH), cache.
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "wan14b_720p_sp"

local T = 1 + ((a.frames or 81) - 1) // 4
local W, H = vf.size(a.size or "1280x720", "size")
local model = vf.models.dit "wan-14b"
local P, SP, G = a.stages or 2, a.sp or 4, a.gpus or 8
local M = a.micro_batches or 8

local devices = {}
for l = 0, SP - 1 do
  for q = 0, P - 1 do devices[l * P + q + 1] = "cuda:" .. ((l * P + q) * G // (P * SP)) end
end

local data = p:stage("latent_reader", {
  path = a.cache or "cache/wan720p.lmdb",
  batch = M,                                       -- one clip per micro-batch
  text_len = model.text_len,
  latent_shape = { model.z, T, H // 8, W // 8 },
})
local dit = p:pipeline_parallel(model, {
  stages = P,
  sp = SP,
  micro_batches = M,
  recompute = a.recompute ~= false,
  recompute_attention = a.recompute_attention == true,
  offload_activations = a.offload_activations == true,
  devices = devices,
})
local S = a.shards or 8
local opt = p:stage("adamw", { lr = 1e-5, shards = S, device = "cpu" })
for k, s in ipairs(opt.members) do s.params.device = "cuda:" .. ((k - 1) * G // S) end
local ckpt = p:stage("checkpoint", { dir = "runs/wan14b_720p_sp/ckpt", every = 250, keep = 2 })
p:train { data = data, model = dit, optimizer = opt, checkpoint = ckpt, steps = 10000 }
return p
