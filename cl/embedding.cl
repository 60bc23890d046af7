// Token and position embeddings (src/nn/token_pos_embedding.c): y[b, t, :]
// = wte[tokens[b, t], :] + wpe[t, :], the tables in the storage dtype (views
// of the working arena), the sum in f32. A token id outside [0, vocab) has
// no row: it reads none (its wte term is 0) and its position gives no row
// a gradient, so a bad id can never read or write out of bounds.
// Both gradients are sums in a fixed order with no atomics: deterministic.

// One item per output element of the [positions, channels] matrix of the
// batch (positions = B * T), row p = b T + t.
__kernel void mpcl_embedding_forward(__global storage_t *y, __global const int *tokens,
                                     __global const storage_t *wte,
                                     __global const storage_t *wpe, uint seq, uint channels,
                                     uint vocab, uint n) {
    uint i = get_global_id(0);
    if (i >= n) return;
    uint p = i / channels, c = i - p * channels, t = p % seq;
    int id = tokens[p];
    float token = id >= 0 && (uint)id < vocab ? LOAD(wte, (size_t)id * channels + c) : 0.0f;
    STORE(y, i, token + LOAD(wpe, (size_t)t * channels + c));
}

// d_wpe[t, c] = sum over b of dy[b, t, c] in b's order, for t < seq; the
// rows from seq to max_seq (positions this batch does not reach) get 0.
// One item per element of d_wpe [max_seq, channels].
__kernel void mpcl_embedding_backward_positions(__global storage_t *d_wpe,
                                                __global const storage_t *dy, uint batch,
                                                uint seq, uint channels, uint n) {
    uint i = get_global_id(0);
    if (i >= n) return;
    uint t = i / channels;
    float s = 0.0f;
    if (t < seq) {
        size_t stride = (size_t)seq * channels;
        for (uint b = 0; b < batch; b++) s += LOAD(dy, b * stride + i);
    }
    STORE(d_wpe, i, s);
}

// d_wte[v, c] = sum of dy[p, c] over the positions p holding token v, in
// p's order. One item per element of d_wte [vocab, channels], each scanning
// all `positions` tokens (neighbouring items read the same token): vocab
// channels positions reads, cheap for vocabularies of bytes, not for
// GPT-2's 50257 (see token_pos_embedding.c).
__kernel void mpcl_embedding_backward_tokens(__global storage_t *d_wte,
                                             __global const storage_t *dy,
                                             __global const int *tokens, uint positions,
                                             uint channels, uint n) {
    uint i = get_global_id(0);
    if (i >= n) return;
    uint v = i / channels, c = i - v * channels;
    float s = 0.0f;
    for (uint p = 0; p < positions; p++)
        if (tokens[p] == (int)v) s += LOAD(dy, (size_t)p * channels + c);
    STORE(d_wte, i, s);
}
