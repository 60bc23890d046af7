/* CLBlast status codes: names for error messages and the mpcl status each
 * maps to. The table follows clblast_c.h of CLBlast 1.5. */
#include "runtime/clblast_status.h"

#include <stdio.h>

static const struct {
    int code;
    const char *name;
} clblast_codes[] = {
    {0, "CLBlastSuccess"},
    {-3, "CLBlastOpenCLCompilerNotAvailable"},
    {-4, "CLBlastTempBufferAllocFailure"},
    {-5, "CLBlastOpenCLOutOfResources"},
    {-6, "CLBlastOpenCLOutOfHostMemory"},
    {-11, "CLBlastOpenCLBuildProgramFailure"},
    {-30, "CLBlastInvalidValue"},
    {-36, "CLBlastInvalidCommandQueue"},
    {-38, "CLBlastInvalidMemObject"},
    {-42, "CLBlastInvalidBinary"},
    {-43, "CLBlastInvalidBuildOptions"},
    {-44, "CLBlastInvalidProgram"},
    {-45, "CLBlastInvalidProgramExecutable"},
    {-46, "CLBlastInvalidKernelName"},
    {-47, "CLBlastInvalidKernelDefinition"},
    {-48, "CLBlastInvalidKernel"},
    {-49, "CLBlastInvalidArgIndex"},
    {-50, "CLBlastInvalidArgValue"},
    {-51, "CLBlastInvalidArgSize"},
    {-52, "CLBlastInvalidKernelArgs"},
    {-53, "CLBlastInvalidLocalNumDimensions"},
    {-54, "CLBlastInvalidLocalThreadsTotal"},
    {-55, "CLBlastInvalidLocalThreadsDim"},
    {-56, "CLBlastInvalidGlobalOffset"},
    {-57, "CLBlastInvalidEventWaitList"},
    {-58, "CLBlastInvalidEvent"},
    {-59, "CLBlastInvalidOperation"},
    {-61, "CLBlastInvalidBufferSize"},
    {-63, "CLBlastInvalidGlobalWorkSize"},
    {-1024, "CLBlastNotImplemented"},
    {-1022, "CLBlastInvalidMatrixA"},
    {-1021, "CLBlastInvalidMatrixB"},
    {-1020, "CLBlastInvalidMatrixC"},
    {-1019, "CLBlastInvalidVectorX"},
    {-1018, "CLBlastInvalidVectorY"},
    {-1017, "CLBlastInvalidDimension"},
    {-1016, "CLBlastInvalidLeadDimA"},
    {-1015, "CLBlastInvalidLeadDimB"},
    {-1014, "CLBlastInvalidLeadDimC"},
    {-1013, "CLBlastInvalidIncrementX"},
    {-1012, "CLBlastInvalidIncrementY"},
    {-1011, "CLBlastInsufficientMemoryA"},
    {-1010, "CLBlastInsufficientMemoryB"},
    {-1009, "CLBlastInsufficientMemoryC"},
    {-1008, "CLBlastInsufficientMemoryX"},
    {-1007, "CLBlastInsufficientMemoryY"},
    {-2050, "CLBlastInsufficientMemoryTemp"},
    {-2049, "CLBlastInvalidBatchCount"},
    {-2048, "CLBlastInvalidOverrideKernel"},
    {-2047, "CLBlastMissingOverrideParameter"},
    {-2046, "CLBlastInvalidLocalMemUsage"},
    {-2045, "CLBlastNoHalfPrecision"},
    {-2044, "CLBlastNoDoublePrecision"},
    {-2043, "CLBlastInvalidVectorScalar"},
    {-2042, "CLBlastInsufficientMemoryScalar"},
    {-2041, "CLBlastDatabaseError"},
    {-2040, "CLBlastUnknownError"},
    {-2039, "CLBlastUnexpectedError"},
};

const char *mpcl__clblast_name(int code) {
    for (size_t i = 0; i < sizeof clblast_codes / sizeof clblast_codes[0]; i++) {
        if (clblast_codes[i].code == code) return clblast_codes[i].name;
    }
    return "CLBlastUnknownStatus";
}

mpcl_status mpcl__clblast_error(mpcl_context *ctx, int code, const char *call, const char *file,
                                int line) {
    mpcl_status st;
    switch (code) {
    case -4:
    case -5:
    case -6:
    case -2050: /* allocation and resource failures */ st = MPCL_ERR_OUT_OF_MEMORY; break;
    case -2045:
    case -2044: /* no half or no double precision on the device */ st = MPCL_ERR_UNSUPPORTED; break;
    default: st = MPCL_ERR_CLBLAST; break;
    }
    return mpcl__error(ctx, st, file, line, "%s returned %s (%d)", call, mpcl__clblast_name(code),
                       code);
}
