-- Plan-only example (docs/PLANNING.md): the memory of training both experts of Wan 2.2
-- A14B side by side, each expert (Wan 2.1 14B's shape, preset wan2.2-a14b) a train of its
-- own in one graph (its reader, partitions, AdamW shards and checkpoint stage, named
-- <stage>_high / <stage>_low), at 81x480x832 (32,760 video tokens), batch 1, recompute.
--
--   vflow plan pipelines/plan_wan22_a14b.lua --budget cuda=80GiB,cpu=1TiB   # fits: 32.0-50.9 GiB per GPU, 325 GiB of host
--   vflow plan pipelines/plan_wan22_a14b.lua --budget cuda=80GiB,cpu=1TiB --set offload=false   # exit 2: 91.5 GiB
--   vflow plan pipelines/plan_wan22_a14b.lua --budget cuda=80GiB,cpu=1TiB --set lora_rank=32 --set gpus=1 --set recompute_attention=true   # fits: 78.6 GiB (103.3 GiB without recompute_attention)
--   vflow plan pipelines/plan_wan22_a14b.lua --budget cuda=80GiB,cpu=1TiB --set lora_rank=32 --set gpus=1 --set recompute_attention=true --set frames=61   # fits: 67.0 GiB
--
-- lora_rank = 0 (default): full fine-tune on 8 GPUs, 4 + 4: each expert's 4 partitions
-- (10 of the 40 blocks each) on its own 4 GPUs (high on cuda:0-3, low on cuda:4-7), 1F1B
-- over 4 micro-batches, its AdamW state (f32 master + moments) in 4 shards in host memory
-- (offload). lora_rank = N with gpus = 1: both experts' rank-N adapters on one GPU, each
-- frozen base held once in FP8 (fp8_base, default true with LoRA), one partition each.
-- It names cuda devices and a cache that need not exist: `vflow plan` works anywhere.
-- It plans memory only; pipelines/finetune_wan22.lua with experts=both trains such a graph
-- (each expert a train of its own, named the same way, on devices_high / devices_low).
-- Knobs (vf.args): lora_rank (0), gpus (8: 4 per expert; 1: both on cuda:0), fp8_base
-- (true with LoRA), offload (true), recompute_attention (false), micro_batches (4; 1 with gpus = 1), frames (81),
-- size (832x480), cache.
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "wan22_a14b"

local T = 1 + ((a.frames or 81) - 1) // 4
local W, H = vf.size(a.size or "832x480", "size")
local model = vf.models.dit "wan2.2-a14b"
local rank, G = a.lora_rank or 0, a.gpus or 8
local fp8, offload = a.fp8_base ~= false and rank > 0, a.offload ~= false
local M = a.micro_batches or (G == 1 and 1 or 4)
if G ~= 1 and G % 2 ~= 0 then vf.fail("plan_wan22_a14b.lua: gpus=%s: 1 (both experts share it) or an even count", tostring(G)) end
local per = G == 1 and 1 or G // 2

for e, expert in ipairs { "high", "low" } do
  local devices = {}
  for q = 1, per do devices[q] = "cuda:" .. (G == 1 and 0 or (e - 1) * per + q - 1) end
  local data = p:stage("latent_reader", {
    name = "latent_reader_" .. expert,
    path = a.cache or "cache/wan480p.lmdb",
    batch = M,
    text_len = model.text_len,
    latent_shape = { model.z, T, H // 8, W // 8 },
  })
  local dit = p:pipeline_parallel(model, {
    name = "dit_" .. expert,
    stages = per,
    micro_batches = M,
    recompute = true,
    recompute_attention = a.recompute_attention == true,
    devices = devices,
    base_dtype = fp8 and "fp8" or nil,
  })
  local opt = p:stage("adamw", { name = "adamw_" .. expert, lr = rank > 0 and 1e-4 or 1e-5, shards = per,
                                 device = devices[1] })
  for k, s in ipairs(opt.members) do s.params.device = offload and "cpu" or devices[k] end
  local ckpt = p:stage("checkpoint", { name = "checkpoint_" .. expert, dir = "runs/wan22_a14b/ckpt_" .. expert })
  local lora = rank > 0 and { rank = rank, alpha = rank, targets = { "self_attn.*", "cross_attn.*", "ffn.*" } } or nil
  p:train { data = data, model = dit, optimizer = opt, checkpoint = ckpt, steps = 10000, lora = lora }
end
return p
