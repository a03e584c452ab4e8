/* test_dit_flops.c — the model FLOP count behind perf/mfu (models/dit_flops.c) against
 * hand computations, and the device peak table (kernels/backend.c).
 *
 * Hand count for dim 64, ffn 256, depth 4, L = 16 video and Ltxt = 8 text tokens, one block
 * forward: self-attention projections 4·2·16·64² = 524288, scores 2·2·16²·64 = 65536,
 * cross q, o 2·2·16·64² = 262144, cross k, v 2·2·8·64² = 131072, cross scores
 * 2·2·16·8·64 = 32768, MLP 2·2·16·64·256 = 1048576: 2064384 per block, 8257536 for the
 * 4 blocks, 24772608 for a training step (×3); with recompute the forward once more
 * without the self-attention scores (kept from the forward): 4·(2064384 − 65536) =
 * 7995392 more, 32768000; recomputing those too, 33030144 (×4).
 */
#include "tests/vf_test.h"

#include "kernels/ops.h"
#include "models/dit.h"

VF_TEST(flops_by_hand)
{
    vf_dit_config c;
    VF_ASSERT(vf_dit_preset("tiny", &c, NULL) == 0);
    c.dim = 64, c.ffn = 256, c.depth = 4;
    VF_CHECK(vf_dit_block_flops(&c, 16, 8) == 2064384.0);
    VF_CHECK(vf_dit_train_flops(&c, 16, 8, false) == 24772608.0);
    VF_CHECK(vf_dit_train_flops(&c, 16, 8, VF_DIT_RECOMPUTE) == 32768000.0);
    VF_CHECK(vf_dit_train_flops(&c, 16, 8, VF_DIT_RECOMPUTE_ALL) == 33030144.0);
    /* no text: the cross-attention keeps its q, o projections only */
    VF_CHECK(vf_dit_block_flops(&c, 16, 0) == 2064384.0 - 131072 - 32768);
}

/* Wan 2.1 1.3B on a 49-frame 480x832 clip (13·30·52 = 20280 tokens, 512 text tokens):
 * the per-block terms written out in double, independently of the code's grouping. */
VF_TEST(flops_wan_1_3b)
{
    vf_dit_config c;
    VF_ASSERT(vf_dit_preset("wan-1.3b", &c, NULL) == 0);
    VF_CHECK_EQ_INT(c.dim, 1536);
    VF_CHECK_EQ_INT(c.ffn, 8960);
    VF_CHECK_EQ_INT(c.depth, 30);
    const double L = 20280, T = 512, d = 1536, f = 8960;
    double block = 8 * L * d * d + 4 * L * L * d + 4 * L * d * d + 4 * T * d * d + 4 * L * T * d + 4 * L * d * f;
    double got = vf_dit_block_flops(&c, 20280, 512);
    VF_CHECK(fabs(got - block) <= 1e-12 * block);
    /* ≈ 4.4 TFLOP forward per block-sample; 30 blocks × 3 ≈ 0.4 PFLOP a training sample */
    VF_CHECK(fabs(vf_dit_train_flops(&c, 20280, 512, false) - 90 * block) <= 1e-12 * 90 * block);
}

VF_TEST(device_peaks)
{
    VF_CHECK(vf_device_bf16_peak("NVIDIA H100 80GB HBM3") == 989e12);
    VF_CHECK(vf_device_bf16_peak("NVIDIA H200") == 989e12);
    VF_CHECK(vf_device_bf16_peak("NVIDIA H100 PCIe") == 756e12);
    VF_CHECK(vf_device_bf16_peak("NVIDIA H100 NVL") == 835e12);
    VF_CHECK(vf_device_bf16_peak("NVIDIA A100-SXM4-80GB") == 312e12);
    VF_CHECK(vf_device_bf16_peak("NVIDIA GeForce RTX 4090") == 0);
    VF_CHECK(vf_device_bf16_peak(NULL) == 0);
    VF_CHECK(vf_backend_cpu()->model == NULL); /* the CPU: no peak, no MFU */
}

int main(void) { return vf_test_main(); }
