"""Layers built from the library's declarations, Sequential's explicit
layers, summary(), to_json() and the weights in Keras' order."""
import json

import numpy as np
import pytest

import mpcl
from mpcl import _lib

L = mpcl.layers


def has_kind(kind):
    return kind in _lib.LAYER_KINDS


def test_dense_config_is_the_declared_attributes():
    d = L.Dense(7, activation="tanh", use_bias=False, name="head")
    # Every attribute the library declares for dense, nothing else besides
    # Keras' name/trainable/dtype.
    declared = [_lib.lib.mpcl_layer_attr_name(b"dense", i).decode()
                for i in range(_lib.lib.mpcl_layer_attr_count(b"dense"))]
    cfg = d.get_config()
    assert set(cfg) == {"name", "trainable", "dtype"} | set(declared)
    assert (cfg["name"], cfg["units"], cfg["activation"], cfg["use_bias"]) == \
        ("head", 7, "tanh", False)
    assert L.Dense(3).get_config()["activation"] == "linear"


@pytest.mark.parametrize("kwargs,attr,text", [
    ({"units": 0}, "units", "0"),
    ({"units": 2.5}, "units", "2.5"),
    ({"units": True}, "units", "true"),
    ({"units": 4, "activation": "swish"}, "activation", "swish"),
])
def test_dense_refusals_are_the_librarys(kwargs, attr, text):
    # The message is the library's check of the declaration: ask it directly.
    spec = _lib.LayerSpec()
    _lib.call(_lib.lib.mpcl_layer_spec_init, None, b"dense", spec)
    assert _lib.lib.mpcl_layer_spec_set(None, spec, attr.encode(), text.encode()) != 0
    lib_message = _lib.text(_lib.lib.mpcl_errmsg())
    with pytest.raises(ValueError) as e:
        L.Dense(**kwargs)
    assert f'{attr}="{text}"' in str(e.value) and str(e.value) == lib_message


def test_a_kind_the_library_lacks_is_refused_at_construction():
    missing = [(cls, kind) for cls, kind in ((L.Conv2D, "conv2d"), (L.MaxPooling2D, "max_pooling2d"),
                                            (L.Dropout, "dropout"),
                                            (L.BatchNormalization, "batch_normalization"))
               if not has_kind(kind)]
    if not missing:
        pytest.skip("this libmpcl has every layer kind the package has a class for")
    for cls, kind in missing:
        args = {"conv2d": (4, 3), "dropout": (0.5,)}.get(kind, ())
        with pytest.raises(NotImplementedError, match=f"no layer kind {kind}"):
            cls(*args)


def test_input_shape_and_output_activation_placement():
    with pytest.raises(ValueError, match="input_shape"):
        L.Dense(4, input_shape=(1, 2, 3, 4))
    m = mpcl.Sequential([L.Dense(4, activation="softmax", input_shape=(3,)), L.Dense(2)])
    with pytest.raises(ValueError, match="only the last layer"):
        m.summary()
    m = mpcl.Sequential([L.Dense(4, input_shape=(3,)), L.Dense(2, input_shape=(4,))])
    with pytest.raises(ValueError, match="only the first layer"):
        m.summary()


def mlp():
    return mpcl.Sequential([L.Flatten(input_shape=(28, 28)), L.Dense(32, activation="relu"),
                            L.Dense(16, activation="gelu"), L.Dense(10, activation="softmax")],
                           name="mlp")


def test_summary_of_an_mlp(capsys):
    mlp().summary()
    out = capsys.readouterr().out
    rows = [l.split() for l in out.splitlines() if "(None," in l]
    assert [(r[0], r[1]) for r in rows] == [("flatten_0", "(Flatten)"), ("dense_0", "(Dense)"),
                                            ("dense_1", "(Dense)"), ("dense_2", "(Dense)")]
    shapes = [l[l.index("(None"):l.index(")", l.index("(None")) + 1] for l in out.splitlines()
              if "(None," in l]
    assert shapes == ["(None, 784)", "(None, 32)", "(None, 16)", "(None, 10)"]
    counts = [784 * 32 + 32, 32 * 16 + 16, 16 * 10 + 10]
    assert [r[-1] for r in rows] == ["0"] + [f"{c:,}" for c in counts]
    assert f"Total params: {sum(counts):,}" in out
    assert f"Trainable params: {sum(counts):,}" in out and "Non-trainable params: 0" in out


def test_summary_of_a_cnn(capsys):
    if not (has_kind("conv2d") and has_kind("max_pooling2d")):
        pytest.skip("this libmpcl has no conv2d / max_pooling2d layer kind yet")
    m = mpcl.Sequential([L.Conv2D(8, 3, activation="relu", input_shape=(28, 28, 1)),
                         L.MaxPooling2D(), L.Flatten(), L.Dense(10)])
    m.summary()
    out = capsys.readouterr().out
    rows = [l.split() for l in out.splitlines() if "(None," in l]
    assert [r[:2] for r in rows] == [["conv2d_0", "(Conv2D)"],
                                     ["max_pooling2d_0", "(MaxPooling2D)"],
                                     ["flatten_0", "(Flatten)"], ["dense_0", "(Dense)"]]
    assert "(None, 26, 26, 8)" in out and "(None, 13, 13, 8)" in out
    assert "(None, 1352)" in out
    assert f"{3 * 3 * 1 * 8 + 8:,}" in out and f"{1352 * 10 + 10:,}" in out


def test_to_json_is_keras_model_json():
    m = mlp()
    doc = json.loads(m.to_json())
    assert (doc["module"], doc["class_name"]) == ("keras", "Sequential")
    cfg = doc["config"]
    assert cfg["name"] == "mlp"
    first = cfg["layers"][0]
    assert first["class_name"] == "InputLayer" and first["config"]["batch_shape"] == [None, 28, 28]
    assert [l["class_name"] for l in cfg["layers"][1:]] == ["Flatten", "Dense", "Dense", "Dense"]
    assert all(l["module"] == "keras.layers" for l in cfg["layers"])
    dense = cfg["layers"][2]["config"]
    assert dense["units"] == 32 and dense["activation"] == "relu" and dense["use_bias"] is True
    assert cfg["layers"][4]["config"]["activation"] == "softmax"
    # The round trip: the JSON text describes the same layers again.
    again = mpcl.Sequential([L.Flatten(input_shape=(28, 28))] + [
        L.Dense(c["config"]["units"], activation=c["config"]["activation"],
                use_bias=c["config"]["use_bias"]) for c in cfg["layers"][2:]], name="mlp")
    assert json.loads(again.to_json()) == doc


def test_to_json_pairs_are_lists():
    if not has_kind("conv2d"):
        pytest.skip("this libmpcl has no conv2d layer kind yet")
    c = L.Conv2D(4, 3, strides=2, padding="same", input_shape=(8, 8, 1)).get_config()
    assert c["kernel_size"] == [3, 3] and c["strides"] == [2, 2] and c["padding"] == "same"
    # Pooling strides default to the pool size, as Keras writes them.
    assert L.MaxPooling2D(3).get_config()["strides"] == [3, 3]
    assert L.MaxPooling2D((2, 3), strides=1).get_config()["strides"] == [1, 1]


def test_a_cnn_trains_saves_and_loads(data, tmp_path):
    if not (has_kind("conv2d") and has_kind("max_pooling2d")):
        pytest.skip("this libmpcl has no conv2d / max_pooling2d layer kind yet")
    x, y, xt, yt = data
    x, xt = x.reshape(-1, 28, 28, 1)[:512], xt.reshape(-1, 28, 28, 1)[:128]
    m = mpcl.Sequential([L.Conv2D(4, 3, activation="relu", input_shape=(28, 28, 1)),
                         L.MaxPooling2D(), L.Flatten(), L.Dense(10)])
    m.compile(loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
    assert [a.shape for a in m.get_weights()] == [(3, 3, 1, 4), (4,), (13 * 13 * 4, 10), (10,)]
    with pytest.raises(ValueError, match=r"\(None, 28, 28, 1\)"):
        m.fit(x.reshape(-1, 784), y[:512], epochs=1)
    h = m.fit(x, y[:512], epochs=2, batch_size=128, validation_data=(xt, yt[:128]), verbose=0)
    assert h.history["loss"][1] < h.history["loss"][0]
    m.save(tmp_path / "cnn.safetensors")
    loaded = mpcl.models.load_model(tmp_path / "cnn.safetensors")
    assert [type(l).__name__ for l in loaded.layers] == ["Conv2D", "MaxPooling2D", "Flatten",
                                                        "Dense"]
    assert loaded.layers[0].input_shape == (28, 28, 1)
    assert json.loads(loaded.to_json())["config"]["layers"][1:] == \
        json.loads(m.to_json())["config"]["layers"][1:]
    np.testing.assert_array_equal(loaded.predict(xt), m.predict(xt))


def test_weights_round_trip_in_keras_order():
    m = mlp()
    m.compile(loss="sparse_categorical_crossentropy")
    w = m.get_weights()
    assert [a.shape for a in w] == [(784, 32), (32,), (32, 16), (16,), (16, 10), (10,)]
    assert all(a.dtype == np.float32 for a in w)
    rng = np.random.default_rng(1)
    new = [rng.standard_normal(a.shape).astype(np.float32) for a in w]
    m.set_weights(new)
    for a, b in zip(m.get_weights(), new):
        np.testing.assert_array_equal(a, b)
    bad = list(new)
    bad[2] = np.zeros((16, 32), np.float32)
    with pytest.raises(ValueError, match=r"dense_1\.kernel has shape \(32, 16\); got \(16, 32\)"):
        m.set_weights(bad)
    with pytest.raises(ValueError, match="has 6 weights"):
        m.set_weights(new[:5])
    # A refused set_weights wrote nothing.
    for a, b in zip(m.get_weights(), new):
        np.testing.assert_array_equal(a, b)


def test_set_weights_changes_predictions():
    m = mpcl.Sequential([L.Dense(3, input_shape=(4,))])
    m.compile(loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True))
    kernel = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    bias = np.array([1, -1, 0.5], np.float32)
    m.set_weights([kernel, bias])
    x = np.array([[0, 51, 102, 255]], np.uint8)
    want = (x.astype(np.float32) / 255) @ kernel + bias
    np.testing.assert_allclose(m.predict(x), want, rtol=1e-6)


def test_weights_of_layers_with_their_own_names():
    m = mpcl.Sequential([L.Dense(4, input_shape=(3,), name="hidden"), L.Dense(2, name="head")])
    m.compile(loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert [a.shape for a in m.get_weights()] == [(3, 4), (4,), (4, 2), (2,)]
    with pytest.raises(ValueError, match=r"head\.bias has shape \(2,\); got \(3,\)"):
        m.set_weights([np.zeros((3, 4)), np.zeros(4), np.zeros((4, 2)), np.zeros(3)])


def layer_norm_reference(x, gamma, beta, eps):
    x = x.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def test_layer_normalization_predicts_the_reference():
    if not has_kind("layer_normalization"):
        pytest.skip("this libmpcl has no layer_normalization kind")
    m = mpcl.Sequential([L.LayerNormalization(epsilon=1e-5, input_shape=(5,))])
    m.compile(loss="mse")
    assert [a.shape for a in m.get_weights()] == [(5,), (5,)]
    rng = np.random.default_rng(4)
    gamma, beta = rng.uniform(0.5, 1.5, 5), rng.uniform(-1, 1, 5)
    m.set_weights([gamma.astype(np.float32), beta.astype(np.float32)])
    # A mean far from 0 against the spread: the statistics hold up in f32.
    x = (100 + rng.standard_normal((7, 5))).astype(np.float32)
    want = layer_norm_reference(x, gamma.astype(np.float32), beta.astype(np.float32), 1e-5)
    np.testing.assert_allclose(m.predict(x), want, rtol=1e-4, atol=1e-4)
    cfg = m.layers[0].get_config()
    assert cfg["epsilon"] == 1e-5 and set(cfg) == {"name", "trainable", "dtype", "epsilon"}
    with pytest.raises(ValueError, match="epsilon"):
        L.LayerNormalization(epsilon=0)


def test_layer_normalization_fits_saves_and_loads(tmp_path):
    if not has_kind("layer_normalization"):
        pytest.skip("this libmpcl has no layer_normalization kind")
    # (T, C) sequences: the class is the channel with the largest sum over
    # time, which the per-position normalization keeps.
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((384, 6, 4)) * 3 + 10).astype(np.float32)
    y = (x - x.mean(axis=-1, keepdims=True)).sum(axis=1).argmax(axis=1)
    m = mpcl.Sequential([L.LayerNormalization(input_shape=(6, 4)), L.Flatten(),
                         L.Dense(4, activation="softmax")])
    m.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    assert [a.shape for a in m.get_weights()] == [(4,), (4,), (24, 4), (4,)]
    h = m.fit(x[:320], y[:320], epochs=4, batch_size=32, verbose=0)
    assert h.history["loss"][-1] < h.history["loss"][0]
    p = m.predict(x[320:])
    assert p.shape == (64, 4) and np.all(np.isfinite(p))
    m.save(tmp_path / "ln.safetensors")
    loaded = mpcl.models.load_model(tmp_path / "ln.safetensors")
    assert [type(l).__name__ for l in loaded.layers] == ["LayerNormalization", "Flatten",
                                                        "Dense"]
    assert loaded.layers[0].input_shape == (6, 4)
    layers = json.loads(loaded.to_json())["config"]["layers"]
    assert layers[1]["class_name"] == "LayerNormalization"
    np.testing.assert_array_equal(loaded.predict(x[320:]), p)
    for a, b in zip(loaded.get_weights(), m.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_token_and_position_embedding(capsys):
    if not has_kind("token_pos_embedding"):
        pytest.skip("this libmpcl has no token_pos_embedding kind")
    e = L.TokenAndPositionEmbedding(256, 16, 32, input_shape=(8,))
    cfg = e.get_config()
    assert set(cfg) == {"name", "trainable", "dtype", "vocabulary_size", "sequence_length",
                        "embedding_dim"}
    assert (cfg["vocabulary_size"], cfg["sequence_length"], cfg["embedding_dim"]) == (256, 16, 32)
    with pytest.raises(ValueError, match="vocabulary_size"):
        L.TokenAndPositionEmbedding(0, 16, 32)
    with pytest.raises(ValueError, match="embedding_dim is required"):
        L.TokenAndPositionEmbedding(256, 16, None)
    m = mpcl.Sequential([e, L.Flatten(), L.Dense(4)])
    m.summary()
    out = capsys.readouterr().out
    assert "token_pos_embedding_0 (TokenAndPositionEmbedding)" in " ".join(out.split())
    assert "(None, 8, 32)" in out and f"{(256 + 16) * 32:,}" in out
    doc = json.loads(m.to_json())
    assert doc["config"]["layers"][1]["class_name"] == "TokenAndPositionEmbedding"


def test_tied_lm_head(capsys):
    if not has_kind("tied_lm_head"):
        pytest.skip("this libmpcl has no tied_lm_head kind")
    h = L.TiedLMHead()
    assert set(h.get_config()) == {"name", "trainable", "dtype"}
    # The package's models give one output per sample: a Dense at the end.
    m = mpcl.Sequential([L.TokenAndPositionEmbedding(13, 8, 6, input_shape=(5,)), h,
                         L.Flatten(), L.Dense(4)])
    m.summary()
    out = " ".join(capsys.readouterr().out.split())
    # The head's weights are the embedding's: it counts none.
    assert "tied_lm_head_0 (TiedLMHead) (None, 5, 13) 0" in out
    assert f"Total params: {(13 + 8) * 6 + 5 * 13 * 4 + 4:,}" in out
    doc = json.loads(m.to_json())
    assert doc["config"]["layers"][2]["class_name"] == "TiedLMHead"
    bad = mpcl.Sequential([L.CausalSelfAttention(2, input_shape=(5, 6)), L.TiedLMHead(),
                           L.Flatten(), L.Dense(4)])
    with pytest.raises(Exception, match="needs one token_pos_embedding layer first"):
        bad.summary()


def causal_attention_reference(x, w_attn, b_attn, w_proj, b_proj, heads):
    """GPT-2's attention in float64: x (B, T, C)."""
    x = x.astype(np.float64)
    B, T, C = x.shape
    hs = C // heads
    qkv = x @ w_attn + b_attn
    q, k, v = (qkv[..., i * C:(i + 1) * C].reshape(B, T, heads, hs).transpose(0, 2, 1, 3)
               for i in range(3))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs)
    scores = np.where(np.tril(np.ones((T, T), bool)), scores, -np.inf)
    att = np.exp(scores - scores.max(axis=-1, keepdims=True))
    att /= att.sum(axis=-1, keepdims=True)
    y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    return y @ w_proj + b_proj


def test_causal_self_attention_predicts_the_reference():
    if not has_kind("causal_self_attention"):
        pytest.skip("this libmpcl has no causal_self_attention kind")
    # A model's output is flat: the (T, C) output through Flatten.
    m = mpcl.Sequential([L.CausalSelfAttention(num_heads=2, input_shape=(5, 6)), L.Flatten()])
    m.compile(loss="mse")
    assert [a.shape for a in m.get_weights()] == [(6, 18), (18,), (6, 6), (6,)]
    rng = np.random.default_rng(6)
    weights = [rng.uniform(-1, 1, a.shape).astype(np.float32) for a in m.get_weights()]
    m.set_weights(weights)
    x = rng.standard_normal((3, 5, 6)).astype(np.float32)
    want = causal_attention_reference(x, *weights, heads=2)
    np.testing.assert_allclose(m.predict(x), want.reshape(3, 30), rtol=1e-4, atol=1e-4)
    cfg = m.layers[0].get_config()
    assert (cfg["num_heads"], cfg["use_bias"]) == (2, True)
    assert set(cfg) == {"name", "trainable", "dtype", "num_heads", "use_bias"}
    with pytest.raises(ValueError, match="num_heads"):
        L.CausalSelfAttention(num_heads=0)


def test_causal_self_attention_fits_saves_and_loads(tmp_path):
    if not has_kind("causal_self_attention"):
        pytest.skip("this libmpcl has no causal_self_attention kind")
    # The class is the sign of the first channel's mean over time.
    rng = np.random.default_rng(7)
    x = rng.standard_normal((256, 4, 6)).astype(np.float32)
    y = (x[:, :, 0].mean(axis=1) > 0).astype(np.int32)
    m = mpcl.Sequential([L.CausalSelfAttention(3, input_shape=(4, 6)), L.Flatten(),
                         L.Dense(2, activation="softmax")])
    m.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    h = m.fit(x[:192], y[:192], epochs=4, batch_size=32, verbose=0)
    assert h.history["loss"][-1] < h.history["loss"][0]
    p = m.predict(x[192:])
    m.save(tmp_path / "attn.safetensors")
    loaded = mpcl.models.load_model(tmp_path / "attn.safetensors")
    assert type(loaded.layers[0]).__name__ == "CausalSelfAttention"
    assert loaded.layers[0].get_config()["num_heads"] == 3
    np.testing.assert_array_equal(loaded.predict(x[192:]), p)


def gelu_tanh(z):
    return 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))


def test_transformer_decoder_predicts_the_reference(tmp_path):
    if not has_kind("transformer_decoder"):
        pytest.skip("this libmpcl has no transformer_decoder kind")
    m = mpcl.Sequential([L.TransformerDecoder(num_heads=2, intermediate_dim=10,
                                              input_shape=(5, 6)), L.Flatten()])
    m.compile(loss="mse")
    # GPT-2's rows, in GPT-2's order.
    assert [a.shape for a in m.get_weights()] == [
        (6,), (6,), (6, 18), (18,), (6, 6), (6,), (6,), (6,), (6, 10), (10,), (10, 6), (6,)]
    rng = np.random.default_rng(8)
    weights = [rng.uniform(-1, 1, a.shape).astype(np.float32) for a in m.get_weights()]
    m.set_weights(weights)
    x = rng.standard_normal((3, 5, 6)).astype(np.float32)
    w = [a.astype(np.float64) for a in weights]
    h = x + causal_attention_reference(layer_norm_reference(x, w[0], w[1], 1e-5), *w[2:6],
                                       heads=2)
    want = h + gelu_tanh(layer_norm_reference(h, w[6], w[7], 1e-5) @ w[8] + w[9]) @ w[10] + w[11]
    np.testing.assert_allclose(m.predict(x), want.reshape(3, 30), rtol=1e-4, atol=1e-4)
    cfg = m.layers[0].get_config()
    assert (cfg["num_heads"], cfg["intermediate_dim"], cfg["use_bias"]) == (2, 10, True)
    assert cfg["layer_norm_epsilon"] == 1e-5
    m.fit(x, want.reshape(3, 30).astype(np.float32), epochs=1, batch_size=3, verbose=0)
    m.save(tmp_path / "block.safetensors")
    loaded = mpcl.models.load_model(tmp_path / "block.safetensors")
    assert type(loaded.layers[0]).__name__ == "TransformerDecoder"
    assert loaded.layers[0].get_config()["intermediate_dim"] == 10
    np.testing.assert_array_equal(loaded.predict(x), m.predict(x))
    bad = mpcl.Sequential([L.TransformerDecoder(num_heads=4, input_shape=(5, 6)), L.Flatten()])
    with pytest.raises(Exception, match=r"transformer_decoder_0\.attn: its 6 channels"):
        bad.compile(loss="mse")
