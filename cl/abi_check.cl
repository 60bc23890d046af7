// The ABI echo, for tests/test_abi.c: writes back every constant of cl/abi.h
// as this device's compiler saw it, so that the test can compare each with
// the value the C compiler saw. Part of the library program, so it is built
// from the same assembled source (abi.h first) as every other kernel.

// FNV-1a of a constant's name: lets the host match each echoed value to its
// own constant by name, so a list that differs in order or length still
// names what differs.
static uint abi_name_hash(__constant const char *s) {
    uint h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint)(uchar)*s) * 16777619u;
    return h;
}

// out: uint [1 + 2 * number of constants] at least. out[0] = the number of
// constants in MPCL_ABI_LIST; then for the i-th, out[1 + 2i] = the FNV-1a
// hash of its name and out[2 + 2i] = its value. One work-item writes all.
__kernel void mpcl_abi_echo(__global uint *out) {
    if (get_global_id(0) != 0) return;
    uint n = 0;
#define ABI_ECHO(name)                              \
    out[1u + 2u * n] = abi_name_hash(#name);        \
    out[2u + 2u * n] = (uint)(name);                \
    n++;
    MPCL_ABI_LIST(ABI_ECHO)
#undef ABI_ECHO
    out[0] = n;
}
