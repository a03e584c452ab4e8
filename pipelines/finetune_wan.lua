-- Fine-tune Wan 2.1 T2V from its published weights on your own clips: the example to copy.
--
--   # 1. latents and umT5 caption embeddings into a cache (docs/PRECOMPUTE.md)
--   python3 tools/encode_captions.py --model umt5-xxl/ --manifest clips.csv \
--        --out-dir emb/ --out-manifest clips_emb.csv
--   vflow run pipelines/precompute_latents.lua --set manifest=clips_emb.csv \
--        --set cache=cache/wan.lmdb --set vae=wan --set weights=wan_2.1_vae.safetensors \
--        --set text_dim=4096 --set text_len=512 --set frames=81 --set size=832x480
--   # 2. check the weights against the preset, plan the memory, train
--   vflow plan pipelines/finetune_wan.lua --set weights=Wan2.1-T2V-1.3B/ --budget cuda=80GiB
--   vflow run  pipelines/finetune_wan.lua --set weights=Wan2.1-T2V-1.3B/ --set cache=cache/wan.lmdb
--
-- weights: a .safetensors file, a sharded *.safetensors.index.json or a model directory
-- (diffusers' WanTransformer3DModel or Wan-AI's own), original / ComfyUI / diffusers
-- names, F32 / BF16 / F16 / scaled FP8 (docs/TRAINING.md#starting-from-published-weights).
-- The model conditions on the cache's text embeddings (text = "embeddings": 512 rows of
-- 4096, zero-padded past each caption). Checkpoints' model uses Wan's original names:
-- diffusers loads it through convert_wan_transformer_to_diffusers, ComfyUI as one file.
-- wan-1.3b (5.7 GB in f32) is one model.safetensors; wan-14b (57 GB) is over
-- model_shard_bytes (1e10, diffusers' save_pretrained "10GB"), so it is written as Hugging
-- Face shards + model.safetensors.index.json (--set model_shard_bytes=0: one file).
--
-- Knobs (vf.args): weights (required), cache (cache/wan.lmdb), model or preset (wan-1.3b | wan-14b),
-- steps (2000), batch (1), lr (1e-5), warmup (50), stages (1: pipeline partitions, one per
-- device in devices), micro_batches (1), recompute (true), shards (1), offload (false:
-- the optimizer shards on the devices, spread over them), device ("cuda:0") or devices (comma
-- list, one per stage), every (250), keep (2), model_shard_bytes (1e10: above it the
-- checkpoint's model is Hugging Face shards + model.safetensors.index.json; 0 = one file),
-- seed (0), frames / size (81 / 832x480, WxH: the latent shape to plan with before
-- the cache exists), lora_rank (off: train every weight; N: rank-N LoRA adapters on the
-- frozen weights, checkpoints hold lora.safetensors), lora_alpha (the rank), lora_targets
-- (self_attn.*,cross_attn.*,ffn.*), lora_init (an adapter file to continue from;
-- docs/TRAINING.md#lora-adapters-on-a-frozen-base), fp8_base (false; with lora_rank: the
-- frozen base's block linears held in FP8, README "FP8 base"), swap_blocks (0; the last
-- K blocks of each partition keep their weights in pinned host memory, LoRA its frozen
-- base and a full fine-tune weights and gradients, streamed in ahead of use; "auto": the
-- smallest K that fits the GPU; README "Block swap"),
-- swap_budget (with swap_blocks=auto: the device memory a partition may hold, "20GiB";
-- default its GPU's budget), offload_activations (false; with recompute:
-- the block inputs kept for backward wait in pinned host memory; README "Activation
-- offload"), t_sampling (logit_normal | uniform),
-- t_mean / t_std (0 / 1: the logit-normal's), t_shift (1: none; t <- s*t/(1+(s-1)*t)),
-- t_min / t_max (0 / 1: the timesteps mapped into this range after the shift), sp (1:
-- sequence parallelism, each partition as sp rank processes holding 1/sp of the tokens;
-- divides the heads: 12 for wan-1.3b, 40 for wan-14b; the CPU backend's all-to-all for now).
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline(a.run or "finetune_wan")

if a.weights == nil then vf.fail("finetune_wan.lua: --set weights=PATH (Wan 2.1 T2V's DiT checkpoint) is required") end
local preset, model_name = a.preset, a.model
local model = vf.models.dit(preset or model_name or "wan-1.3b")   -- preset= as in train_dit.lua
-- the reader, partitions, shards and checkpoint stage from the knobs above (lua/wan_finetune.lua)
p:wan_finetune(model, a)
return p
