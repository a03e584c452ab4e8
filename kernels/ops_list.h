/* ops_list.h — every op of the backend table (struct vf_backend, kernels/ops.h), listed
 * once: its member name and its family.
 *
 * The family is the file an op lives in, the same name on both backends:
 * kernels/cpu/<family>.c and kernels/cuda/<family>.{cu,c}; its CPU finite-difference
 * test is tests/unit/test_ops_<family>.c (modulate shares test_ops_elementwise.c; graph,
 * which computes nothing on the CPU, is checked in test_ops_backend.c; collective, which
 * moves bytes between processes, in tests/gpu/test_cuda_a2a.c on both backends). Files
 * that are backend infrastructure keep names of their own: cpu/gemm.c (the sgemm core
 * under matmul and conv3d), cpu/simd.c; cuda/backend_cuda.c (the table), pool.c,
 * xfer_cuda.c (device transports), common.cuh.
 *
 * What iterates the list: vf_ops[] (kernels/backend.c) names every member with its
 * offset, with static checks that the list is the table's members, all of them and in
 * order (a drift stops the build); test_ops_backend.c checks each op by name in the CPU
 * table; tests/gpu/test_cuda_ops.c compares each op on the GPU with the CPU op and
 * fails, naming the op, when one has no comparison (the check runs on every CI machine
 * through tests/unit/test_gpu_harness.sh).
 *
 * Adding an op: the member in struct vf_backend, a line here, the kernels in both
 * family files, the entries of both backends' tables, a finite-difference test and a
 * comparison case in tests/gpu/test_cuda_ops.c (VF_CUDA_OP_CASES).
 */
#ifndef VF_OPS_LIST_H
#define VF_OPS_LIST_H

#define VF_OPS(X)                                                                   \
    X(alloc, memory) X(free, memory) X(alloc_shared, memory) X(free_shared, memory) \
    X(alloc_pinned, memory) X(free_pinned, memory)                                 \
    X(memset0, memory) X(upload, memory)                                           \
    X(download, memory) X(copy, memory) X(copy2d, memory) X(sync, memory)          \
    X(swap_new, swap) X(swap_free, swap)    \
    X(swap_in, swap) X(swap_wait, swap) X(swap_stats, swap)                        \
    X(a2a_open, collective) X(a2a_run, collective) X(a2a_close, collective)        \
    X(graph_begin, graph) X(graph_end, graph)                                      \
    X(matmul_fwd, matmul) X(matmul_bwd, matmul)                                    \
    X(matmul_gelu_fwd, matmul) X(matmul_dgelu_bwd, matmul)                         \
    X(matmul_batch_fwd, matmul) X(matmul_batch_bwd, matmul)                        \
    X(matmul_fp8_fwd, matmul) X(matmul_fp8_bwd, matmul)                            \
    X(add, elementwise) X(axpy, elementwise) X(gelu_fwd, elementwise)              \
    X(gelu_bwd, elementwise) X(gelu_erf_fwd, elementwise)                          \
    X(gelu_erf_bwd, elementwise) X(silu_fwd, elementwise) X(silu_bwd, elementwise) \
    X(layernorm_fwd, norm) X(layernorm_bwd, norm) X(rmsnorm_fwd, norm)             \
    X(rmsnorm_bwd, norm) X(rmsnorm_ch_fwd, norm)                                   \
    X(modulate_fwd, modulate) X(modulate_bwd, modulate)                            \
    X(ln_modulate_fwd, modulate) X(ln_modulate_bwd, modulate)                      \
    X(gated_add_fwd, modulate) X(gated_add_bwd, modulate)                          \
    X(rope_fwd, rope) X(rope_bwd, rope)                                            \
    X(rmsnorm_rope_fwd, rope) X(rmsnorm_rope_bwd, rope)                            \
    X(attention_fwd, attention) X(attention_bwd, attention)                        \
    X(permute, layout)                                                             \
    X(conv3d_fwd, conv3d) X(conv3d_bwd, conv3d)                                    \
    X(embed_fwd, embed_loss) X(embed_bwd, embed_loss) X(mse_fwd_bwd, embed_loss)   \
    X(adamw, adamw) X(sumsq, adamw)

#endif /* VF_OPS_LIST_H */
