// Token and position embeddings (src/nn/token_pos_embedding.c): y[b, t, :]
// = wte[tokens[b, t], :] + wpe[t, :], the tables in the storage dtype (views
// of the working arena), the sum in f32. A token id outside [0, vocab) has
// no row: it reads none (its wte term is 0) and its position gives no row
// a gradient, so a bad id can never read or write out of bounds.
// Both gradients are sums in a fixed order with no atomics: deterministic.

// Eight channels c .. c + 7 of row r of a [rows, channels] tensor (fewer
// at a row's end: lanes from `channels` on load 0 and are not stored).
#define EMB_LOAD8(p, r, c) \
    (channels - (c) >= 8u ? LOAD8(p, (size_t)(r) * channels + (c)) \
                          : LOAD8_PART(p, (size_t)(r) * channels + (c), channels - (c)))
#define EMB_STORE8(p, r, c, v)                                                  \
    if (channels - (c) >= 8u)                                                   \
        STORE8(p, (size_t)(r) * channels + (c), (v));                           \
    else                                                                        \
        STORE8_PART(p, (size_t)(r) * channels + (c), channels - (c), (v));

// One item per eight channels of a row of the [positions, channels] matrix
// of the batch (positions = B * seq; row p = b seq + t), over a
// (ceil(channels / 8), positions) range: vectors where one item per element
// over a 1-D range, p and c divided out of its index, was gathered lane by
// lane (the GPT's [2048, 128] forward: 480 us). The positions count from
// `first` (0, or a generation step's position with seq 1).
__kernel void mpcl_embedding_forward(__global storage_t *y, __global const int *tokens,
                                     __global const storage_t *wte,
                                     __global const storage_t *wpe, uint seq, uint first,
                                     uint channels, uint vocab, uint positions) {
    uint c = get_global_id(0) * 8u, p = get_global_id(1);
    if (c >= channels || p >= positions) return;
    int id = tokens[p];
    float8 token = id >= 0 && (uint)id < vocab ? EMB_LOAD8(wte, id, c) : (float8)(0.0f);
    EMB_STORE8(y, p, c, token + EMB_LOAD8(wpe, first + p % seq, c))
}

// d_wpe[t, c] = sum over b of dy[b, t, c] in b's order, for t < seq; the
// rows from seq to `rows` (positions this batch does not reach) get 0. One
// item per eight channels of a row of d_wpe, over a (ceil(channels / 8),
// rows) range.
__kernel void mpcl_embedding_backward_positions(__global storage_t *d_wpe,
                                                __global const storage_t *dy, uint batch,
                                                uint seq, uint channels, uint rows) {
    uint c = get_global_id(0) * 8u, t = get_global_id(1);
    if (c >= channels || t >= rows) return;
    float8 s = 0.0f;
    for (uint b = 0; t < seq && b < batch; b++) s += EMB_LOAD8(dy, b * seq + t, c);
    EMB_STORE8(d_wpe, t, c, s)
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
// in p's order: one item per eight channels of a position of dy, over a
// (ceil(channels / 8), positions) range, of which the heads sum. The rows of
// tokens the batch does not hold are zeroed before (token_pos_embedding.c).
// With add, the sum is added to d_wte[id, c] instead: a layer above (a tied
// LM head) wrote its part of d_wte first.
__kernel void mpcl_embedding_backward_tokens(__global storage_t *d_wte,
                                             __global const storage_t *dy,
                                             __global const int *tokens,
                                             __global const int *links, uint positions,
                                             uint channels, uint add) {
    uint c = get_global_id(0) * 8u, p = get_global_id(1);
    if (c >= channels || p >= positions || !links[positions + p]) return;
    float8 s = 0.0f;
    for (uint q = p; q < positions; q = (uint)links[q]) s += EMB_LOAD8(dy, q, c);
    int id = tokens[p];
    if (add) s = EMB_LOAD8(d_wte, id, c) + s;
    EMB_STORE8(d_wte, id, c, s)
}
