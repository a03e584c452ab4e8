-- model_dit.lua — DiT presets (vf.models.dit "NAME"): plain tables of the `model` param
-- of the DiT stages, checked there against vf_dit_model_fields (models/dit.h). The network
-- is the video DiT of models/dit.h (Wan 2.1 structure and tensor names).
--
--   dim        model width               depth     blocks
--   heads      attention heads           head_dim  width per head (heads * head_dim == dim)
--   ffn        MLP hidden width          z         latent channels (the VAE's z_dim)
--   patch      {pt, ph, pw} latent patch (Wan: {1, 2, 2})
--   text       "embeddings": condition on the data's text embeddings (latent_reader's
--              text_emb, umT5 states zero-padded to text_len rows; Wan) or "bytes" (default):
--              caption bytes through a learned table
--   text_dim   width text_embedding takes: the embeddings' (umT5-xxl: 4096) or the table's
--   text_len   caption tokens per sample (embedding rows or bytes; shorter ones are padded)
--   freq_dim   sinusoidal timestep features
--   t_scale    timestep fed to the sinusoid = t * t_scale (t in [0, 1])
--   eps        LayerNorm / RMSNorm epsilon
--   in_dim     channels patch_embedding takes: z plus image-to-video conditioning (Wan I2V:
--              36 = 16 noisy + 4 first-frame mask + 16 first-frame latent); 0 = z
--   img_dim    width of the image features img_emb takes (Wan 2.1 I2V: CLIP ViT-H/14 1280);
--              0 = no image branch
--   img_len    image feature rows per sample (Wan 2.1 I2V: 257)
--   (in_dim, img_dim and img_len default to 0: the text-to-video presets leave them out)
--   time       "sample" (default): one time embedding per sample; "token": one per token
--              (Wan 2.2 TI2V, whose image latent frame sits at t = 0 beside noisy frames)
--
-- The same numbers are compiled into models/dit_layout.c (vf_dit_preset, used by tools
-- and tests); tests/unit/test_dit.c checks the two agree.
local function preset(t)
  t.patch = t.patch or { 1, 2, 2 }
  t.t_scale = t.t_scale or 1000
  t.eps = t.eps or 1e-6
  return t
end

return {
  -- tests and CPU training: pairs with vf.models.vae "tiny" (z_dim 4)
  tiny = preset { name = "tiny", dim = 64, depth = 4, heads = 4, head_dim = 16, ffn = 256,
                  z = 4, text_dim = 64, text_len = 32, freq_dim = 64 },
  -- a small real model: pairs with vf.models.vae "wan" (z_dim 16)
  small = preset { name = "small", dim = 256, depth = 8, heads = 4, head_dim = 64, ffn = 1024,
                   z = 16, text_dim = 256, text_len = 128, freq_dim = 256 },
  -- DiT-XL/2 widths (Peebles & Xie) with PixArt-alpha's caption width and length,
  -- on an SD-style 4-channel latent
  ["dit-xl-2"] = preset { name = "dit-xl-2", dim = 1152, depth = 28, heads = 16, head_dim = 72,
                          ffn = 4608, z = 4, text_dim = 4096, text_len = 120, freq_dim = 256 },
  -- Wan 2.1 T2V 1.3B and 14B (umT5 width 4096, 512 caption tokens)
  ["wan-1.3b"] = preset { name = "wan-1.3b", dim = 1536, depth = 30, heads = 12, head_dim = 128,
                          ffn = 8960, z = 16, text_dim = 4096, text_len = 512, freq_dim = 256,
                          text = "embeddings" },
  ["wan-14b"] = preset { name = "wan-14b", dim = 5120, depth = 40, heads = 40, head_dim = 128,
                         ffn = 13824, z = 16, text_dim = 4096, text_len = 512, freq_dim = 256,
                         text = "embeddings" },
  -- Wan 2.1 I2V 14B (the 480p and the 720p checkpoint): 36 input channels and the CLIP
  -- image branch (img_emb, cross_attn.k_img / v_img)
  ["wan-i2v-14b"] = preset { name = "wan-i2v-14b", dim = 5120, depth = 40, heads = 40,
                             head_dim = 128, ffn = 13824, z = 16, text_dim = 4096, text_len = 512,
                             freq_dim = 256, text = "embeddings", in_dim = 36, img_dim = 1280,
                             img_len = 257 },
  -- Wan 2.2 T2V-A14B, one expert (high- and low-noise have this shape): Wan 2.1 T2V 14B's
  -- shape; the two experts' weights are one source (pipelines/finetune_wan22.lua)
  ["wan2.2-a14b"] = preset { name = "wan2.2-a14b", dim = 5120, depth = 40, heads = 40,
                             head_dim = 128, ffn = 13824, z = 16, text_dim = 4096, text_len = 512,
                             freq_dim = 256, text = "embeddings" },
  -- Wan 2.2 I2V-A14B, one expert (high- and low-noise have this shape): 36 input channels,
  -- no CLIP
  ["wan2.2-i2v-a14b"] = preset { name = "wan2.2-i2v-a14b", dim = 5120, depth = 40, heads = 40,
                                 head_dim = 128, ffn = 13824, z = 16, text_dim = 4096,
                                 text_len = 512, freq_dim = 256, text = "embeddings",
                                 in_dim = 36 },
  -- Wan 2.2 TI2V-5B: 48 latent channels (the Wan 2.2 VAE, vf.models.vae "wan2.2")
  ["wan2.2-ti2v-5b"] = preset { name = "wan2.2-ti2v-5b", dim = 3072, depth = 30, heads = 24,
                                head_dim = 128, ffn = 14336, z = 48, text_dim = 4096,
                                text_len = 512, freq_dim = 256, text = "embeddings",
                                time = "token" },
}
