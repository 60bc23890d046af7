// Precision macros shared by every library kernel. The host builds this
// program once per storage dtype with -DMPCL_STORAGE_F16 or -DMPCL_STORAGE_F32.
// Math is always float; f16 is reached only through LOAD/STORE (vload_half /
// vstore_half_rte are OpenCL 1.2 core and need no cl_khr_fp16), so one source
// serves every device. Scalar kernel arguments are always float.

#if defined(MPCL_STORAGE_F16)
typedef half storage_t;
#define LOAD(p, i) vload_half((i), (p))
#define STORE(p, i, v) vstore_half_rte((v), (i), (p))
#elif defined(MPCL_STORAGE_F32)
typedef float storage_t;
#define LOAD(p, i) ((p)[(i)])
#define STORE(p, i, v) ((p)[(i)] = (v))
#else
#error "build with -DMPCL_STORAGE_F16 or -DMPCL_STORAGE_F32"
#endif
