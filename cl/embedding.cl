// Token and position embeddings (src/nn/token_pos_embedding.c): y[b, t, :]
// = wte[tokens[b, t], :] + wpe[t, :], the tables in the storage dtype (views
// of the working arena), the sum in f32. A token id outside [0, vocab) has
// no row: it reads none (its wte term is 0) and its position gives no row
// a gradient, so a bad id can never read or write out of bounds.
// Both gradients are sums in a fixed order with no atomics: deterministic.

// One item per output element of the [positions, channels] matrix of the
// batch (positions = B * seq), row p = b seq + t; the positions count from
// `first` (0, or a generation step's position with seq 1).
__kernel void mpcl_embedding_forward(__global storage_t *y, __global const int *tokens,
                                     __global const storage_t *wte,
                                     __global const storage_t *wpe, uint seq, uint first,
                                     uint channels, uint vocab, uint n) {
    uint i = get_global_id(0);
    if (i >= n) return;
    uint p = i / channels, c = i - p * channels, t = first + p % seq;
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

// The token gradient in two passes, with no sort and no atomics. First the
// positions holding each token as a chain: links[p] = the next position
// after p with p's token (`positions` when none), and links[positions + p]
// = 1 when p is the first position with its token (its chain's head) and
// the token is in [0, vocab). One item per position, scanning back to the
// first earlier match and on to the next later one: at most `positions`
// reads each, all items reading the same ids at once.
__kernel void mpcl_embedding_token_links(__global int *links, __global const int *tokens,
                                         uint positions, uint vocab) {
    uint p = get_global_id(0);
    if (p >= positions) return;
    int id = tokens[p];
    int head = id >= 0 && (uint)id < vocab;
    for (uint q = 0; head && q < p; q++)
        if (tokens[q] == id) head = 0;
    uint next = p + 1;
    while (next < positions && tokens[next] != id) next++;
    links[p] = (int)next;
    links[positions + p] = head;
}

// d_wte[id, c] = sum of dy[p, c] over the chain of the head p of token id,
// in p's order: one item per (position, channel) of dy, of which the heads
// sum. The rows of tokens the batch does not hold are zeroed before
// (token_pos_embedding.c). With add, the sum is added to d_wte[id, c]
// instead: a layer above (a tied LM head) wrote its part of d_wte first.
__kernel void mpcl_embedding_backward_tokens(__global storage_t *d_wte,
                                             __global const storage_t *dy,
                                             __global const int *tokens,
                                             __global const int *links, uint positions,
                                             uint channels, uint add, uint n) {
    uint i = get_global_id(0);
    if (i >= n) return;
    uint p = i / channels, c = i - p * channels;
    if (!links[positions + p]) return;
    float s = 0.0f;
    for (uint q = p; q < positions; q = (uint)links[q]) s += LOAD(dy, (size_t)q * channels + c);
    size_t at = (size_t)tokens[p] * channels + c;
    STORE(d_wte, at, add ? LOAD(d_wte, at) + s : s);
}
