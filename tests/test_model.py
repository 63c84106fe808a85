"""The common encoder: pooling modes, padding invariance of the whole model, heads, memory threading."""

import jax
import numpy as np
import pytest

from conftest import fast_jit
from lra.defaults import make_config
from lra.model import build_model


def _model(attention="softmax", dual=False, classes=10, **model):
    c = make_config("listops", attention, "smoke")
    c.model.update(model)
    c.model.dropout_rate = c.model.attention_dropout_rate = 0.0
    return build_model(c.model, 16, classes, dual)


def _tokens(b=3, n=20, lengths=(12, 20, 5), seed=0):
    rng = np.random.default_rng(seed)
    t = rng.integers(1, 16, size=(b, n)).astype(np.int32)
    for i, length in enumerate(lengths):
        t[i, length:] = 0
    return t


@pytest.mark.parametrize(
    "attention,pooling,norm",
    [
        ("softmax", "cls", "pre"),
        ("softmax", "mean", "post"),
        ("luna", "memory", "post"),
        ("convluna", "memory", "post"),
        ("luna", "mean", "pre"),
    ],
)
def test_model_logits_ignore_padding(attention, pooling, norm):
    model = _model(attention, pooling=pooling, norm=norm)
    tokens = _tokens()
    longer = np.concatenate([tokens, np.zeros((3, 7), np.int32)], axis=1)
    apply = fast_jit(model.apply)
    v = fast_jit(model.init)(jax.random.key(0), longer)
    a = apply(v, tokens)
    b = apply(v, longer)
    assert a.shape == (3, 10)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5)


def test_memory_pooling_averages_the_final_memory_cells():
    model = _model("luna", pooling="memory", norm="post", attention_kwargs={"memory_size": 4})
    tokens = _tokens()
    v = fast_jit(model.init)(jax.random.key(0), tokens)
    assert v["params"]["encoder"]["memory"].shape == (4, 32)
    # smoke has one post-LN block: the pooled vector is the mean of that block's output memory
    capture = fast_jit(
        lambda v, t: model.apply(v, t, capture_intermediates=lambda mdl, _: mdl.name in ("block_0", "encoder"))
    )
    _, state = capture(v, tokens)
    inter = state["intermediates"]["encoder"]
    _, memory = inter["block_0"]["__call__"][0]
    pooled = inter["__call__"][0]
    assert memory.shape == (3, 4, 32)
    np.testing.assert_allclose(np.asarray(pooled), np.asarray(memory.mean(axis=1)), atol=1e-6)
    # and the initial memory matters: other cells give other logits
    v2 = jax.tree_util.tree_map(lambda a: a, v)
    v2["params"]["encoder"]["memory"] = v["params"]["encoder"]["memory"] + 1.0
    apply = fast_jit(model.apply)
    assert not np.allclose(np.asarray(apply(v, tokens)), np.asarray(apply(v2, tokens)))


def test_memory_size_sets_the_initial_memory():
    for cells in (1, 16):
        model = _model(
            "convluna",
            pooling="memory",
            norm="post",
            attention_kwargs={"memory_size": cells, "filter": "maxpool", "kernel_size": 4},
        )
        v = jax.eval_shape(model.init, jax.random.key(0), _tokens())  # shapes only: nothing compiled
        assert v["params"]["encoder"]["memory"].shape == (cells, 32)


@pytest.mark.parametrize("attention,pooling", [("softmax", "cls"), ("convluna", "memory")])
def test_two_input_head_uses_one_encoder_for_both_documents(attention, pooling):
    model = _model(attention, dual=True, classes=2, pooling=pooling, norm="post")
    docs = np.stack([_tokens(seed=1), _tokens(seed=2)], axis=1)  # B x 2 x N
    v = fast_jit(model.init)(jax.random.key(0), docs)
    assert "encoder" in v["params"] and "encoder_1" not in v["params"], "both documents share one encoder"
    apply = fast_jit(model.apply)  # one program for the three batches below (same shape)
    logits = apply(v, docs)
    assert logits.shape == (3, 2)
    # [u, v, u*v, u-v] is order sensitive: swapping the documents changes the logits
    swapped = apply(v, docs[:, ::-1])
    assert not np.allclose(np.asarray(logits), np.asarray(swapped))
    # each example's logits depend only on its own pair: other pairs beside it change nothing
    others = docs.copy()
    others[1:] = np.stack([_tokens(seed=4), _tokens(seed=5)], axis=1)[1:]
    beside = apply(v, others)
    np.testing.assert_allclose(np.asarray(beside[:1]), np.asarray(logits[:1]), atol=2e-5)
    assert not np.allclose(np.asarray(beside[1:]), np.asarray(logits[1:]))


def test_concat_combination_has_smaller_head():
    m4 = _model(dual=True, classes=2)
    m2 = _model(dual=True, classes=2, dual_combine="concat")
    docs = np.stack([_tokens(), _tokens(seed=3)], axis=1)
    k4 = jax.eval_shape(m4.init, jax.random.key(0), docs)["params"]["head_hidden"]["kernel"]  # shapes only
    k2 = jax.eval_shape(m2.init, jax.random.key(0), docs)["params"]["head_hidden"]["kernel"]
    assert k4.shape[0] == 4 * 32 and k2.shape[0] == 2 * 32


def test_sequence_longer_than_position_table_is_an_error():
    model = _model()
    with pytest.raises(ValueError, match="position table"):
        jax.eval_shape(model.init, jax.random.key(0), np.ones((1, 65), np.int32))  # a trace-time check


def test_bfloat16_model_runs_and_is_close():
    tokens = _tokens()
    m32, m16 = _model(), _model(dtype="bfloat16")
    v = fast_jit(m32.init)(jax.random.key(0), tokens)
    y16, y32 = fast_jit(m16.apply)(v, tokens), fast_jit(m32.apply)(v, tokens)
    np.testing.assert_allclose(np.asarray(y16), np.asarray(y32), atol=0.15)


def test_memory_families_declare_the_memory_contract():
    """Issue 40 point 4: the encoder reads memory_size through the declared MemoryAttention contract;
    every registered memory family satisfies it, and one that sets uses_memory without the field is
    named as a bug instead of failing on an attribute deep in the encoder."""
    from flax import linen as nn

    from lra.attention import ATTENTIONS
    from lra.attention.base import Attention, MemoryAttention, memory_cells

    memory = [cls for cls in ATTENTIONS.values() if cls.uses_memory]
    assert memory, "no memory family registered"
    for cls in memory:
        assert isinstance(cls(), MemoryAttention)
        assert memory_cells(cls, {}) == cls.memory_size and memory_cells(cls, {"memory_size": 3}) == 3

    class Undeclared(Attention):
        uses_memory = True

        @nn.compact
        def __call__(self, x, mask, memory=None, deterministic=True):
            return x, memory

    assert not isinstance(Undeclared(), MemoryAttention)
    with pytest.raises(TypeError, match="Undeclared sets uses_memory = True but declares no memory_size"):
        memory_cells(Undeclared, {})
    with pytest.raises(TypeError, match="no memory"):
        memory_cells(ATTENTIONS["softmax"], {})


def test_build_model_freezes_its_config():
    """Issue 40 point 4: the model's config is a FrozenConfigDict; changing the caller's config later
    does not reach a built model, and the frozen model computes what the mutable one did."""
    import ml_collections

    from lra.model import Classifier

    c = make_config("listops", "luna", "smoke")
    model = build_model(c.model, 16, 10, False)
    assert isinstance(model.config, ml_collections.FrozenConfigDict)
    with pytest.raises((AttributeError, ValueError)):
        model.config.num_layers = 7
    tokens = _tokens()
    v = fast_jit(model.init)(jax.random.key(0), tokens)
    mutable = Classifier(c.model, vocab_size=16, num_classes=10, dual=False)
    np.testing.assert_array_equal(
        np.asarray(fast_jit(model.apply)(v, tokens)), np.asarray(fast_jit(mutable.apply)(v, tokens))
    )
    c.model.num_layers = 7
    assert model.config.num_layers != 7
