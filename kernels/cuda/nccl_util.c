/* nccl_util.c — the poll every NCCL call of the CUDA backend ends with (nccl_util.h). */
#ifdef VFLOW_HAVE_NCCL
#include <unistd.h>

#include "kernels/cuda/nccl_util.h"
#include "runtime/edge/chan.h" /* vf_runtime_stopping */

int vf_cuda_nccl_wait(ncclComm_t comm, ncclResult_t r, const char *what, vf_status *st)
{
    while (r == ncclInProgress || r == ncclSuccess) {
        ncclResult_t a = ncclSuccess;
        if (ncclCommGetAsyncError(comm, &a) != ncclSuccess) break;
        if (a == ncclSuccess) return 0;
        if (a != ncclInProgress) {
            r = a;
            break;
        }
        if (vf_runtime_stopping()) {
            ncclCommAbort(comm);
            return vf_status_set(st, VF_ESTOPPED, __FILE__, __LINE__, "%s: the run is stopping", what);
        }
        usleep(200);
    }
    return vf_status_set(st, VF_ECUDA, __FILE__, __LINE__, "%s: %s", what, ncclGetErrorString(r));
}
#else
typedef int vf_nccl_util_unused; /* a translation unit is not empty (ISO C) */
#endif
